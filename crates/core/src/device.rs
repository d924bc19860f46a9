//! The one place that owns the CUDA context, the stream and the compiled modules.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::CUdevice_attribute as Attr;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream};

use crate::compile::{self, CompileRequest};
use crate::error::Error;
use crate::problem::DType;
use crate::toolkit;

/// What kernels plan against: read from the device once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (u32, u32),
    pub sm_count: u32,
    /// Without opting in (48 KB on every arch flashcore targets).
    pub max_shared_memory_per_block: u32,
    /// After cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES): 227 KB on H100, 99 KB on sm_86/89.
    pub max_shared_memory_per_block_optin: u32,
    pub l2_bytes: u32,
    pub total_memory: usize,
}

impl DeviceInfo {
    /// A device description for planning without a GPU (tests, snapshots, compile checks).
    pub fn synthetic_h100() -> Self {
        DeviceInfo {
            ordinal: 0,
            name: "H100 (synthetic, for planning)".into(),
            compute_capability: (9, 0),
            sm_count: 132,
            max_shared_memory_per_block: 48 * 1024,
            max_shared_memory_per_block_optin: 227 * 1024,
            l2_bytes: 50 * 1024 * 1024,
            total_memory: 80 << 30,
        }
    }

    /// An sm_86 part (RTX 30xx / A10 class) for planning without a GPU.
    pub fn synthetic_sm86() -> Self {
        DeviceInfo {
            ordinal: 0,
            name: "sm_86 (synthetic, for planning)".into(),
            compute_capability: (8, 6),
            sm_count: 84,
            max_shared_memory_per_block: 48 * 1024,
            max_shared_memory_per_block_optin: 99 * 1024,
            l2_bytes: 6 * 1024 * 1024,
            total_memory: 24 << 30,
        }
    }
}

/// Per-module compile statistics, for reporting first-use versus cached compile times.
#[derive(Clone, Debug, Default)]
pub struct CompileStats {
    pub compiled: usize,
    pub from_disk_cache: usize,
    /// Modules loaded from ahead-of-time images (the facade's `aot` feature).
    pub prebuilt: usize,
    pub compile_millis: f64,
    pub cached_millis: f64,
    pub module_load_millis: f64,
}

struct LoadedFunction {
    function: CudaFunction,
    /// Dynamic shared memory the function has been opted in to.
    smem_optin: u32,
}

/// A CUDA device with its context, one stream, and the modules compiled for it.
pub struct Device {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    info: DeviceInfo,
    modules: Mutex<HashMap<String, Arc<CudaModule>>>,
    functions: Mutex<HashMap<(String, String), LoadedFunction>>,
    stats: Mutex<CompileStats>,
    workspace: Mutex<Workspace>,
}

/// The scratch buffer behind `params.workspace` (see the contract on [`crate::LaunchPlan`]).
#[derive(Default)]
struct Workspace {
    buf: Option<CudaSlice<f32>>,
    /// How many leading words are known to be zero when the next launch on the stream starts.
    zero_prefix: usize,
}

impl Workspace {
    /// Whether the buffer must be zeroed before a plan whose first `counters` words must be zero.
    fn needs_zeroing(&self, counters: usize) -> bool {
        self.zero_prefix < counters
    }

    /// After a plan with `counters` counter words was enqueued (`ok`) or failed: its kernels
    /// leave the counters zero and may have written anything after them.
    fn after_plan(&mut self, counters: usize, ok: bool) {
        self.zero_prefix = if ok { counters } else { 0 };
    }
}

impl Device {
    /// How many CUDA devices there are; an error that says what is missing otherwise.
    pub fn count() -> Result<usize, Error> {
        if !toolkit::driver_present() {
            return Err(Error::NoDriver(
                "libcuda.so could not be loaded: this machine has no NVIDIA driver (kernels need a GPU; \
                 building and the compile checks do not)"
                    .into(),
            ));
        }
        let n = CudaContext::device_count()
            .map_err(|e| Error::NoDevice(format!("cuInit/cuDeviceGetCount: {e:?}")))?;
        Ok(n.max(0) as usize)
    }

    /// Opens device `ordinal` (its primary context) and reads what kernels plan against.
    pub fn open(ordinal: usize) -> Result<Device, Error> {
        let n = Self::count()?;
        if ordinal >= n {
            return Err(Error::NoDevice(format!(
                "device {ordinal} requested but {n} CUDA device(s) are visible"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| Error::cuda("creating the context", e))?;
        let attr = |a: Attr| -> Result<i32, Error> {
            ctx.attribute(a)
                .map_err(|e| Error::cuda(format!("reading {a:?}"), e))
        };
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| Error::cuda("reading the compute capability", e))?;
        let info = DeviceInfo {
            ordinal,
            name: ctx
                .name()
                .map_err(|e| Error::cuda("reading the device name", e))?,
            compute_capability: (major as u32, minor as u32),
            sm_count: attr(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            max_shared_memory_per_block: attr(
                Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
            )? as u32,
            max_shared_memory_per_block_optin: attr(
                Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )? as u32,
            l2_bytes: attr(Attr::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u32,
            total_memory: ctx
                .total_mem()
                .map_err(|e| Error::cuda("reading total memory", e))?,
        };
        let stream = ctx.default_stream();
        Ok(Device {
            ctx,
            stream,
            info,
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
            stats: Mutex::new(CompileStats::default()),
            workspace: Mutex::new(Workspace::default()),
        })
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
    pub fn compile_stats(&self) -> CompileStats {
        self.stats.lock().unwrap().clone()
    }

    /// NVRTC architecture for this device.
    pub fn arch(&self) -> String {
        compile::arch_for(self.info.compute_capability)
    }

    /// Waits for all queued work; surfaces asynchronous kernel faults.
    pub fn synchronize(&self) -> Result<(), Error> {
        self.stream
            .synchronize()
            .map_err(|e| Error::cuda("synchronizing the stream (a kernel faulted?)", e))
    }

    /// (free, total) device memory in bytes.
    pub fn memory(&self) -> Result<(usize, usize), Error> {
        self.ctx
            .mem_get_info()
            .map_err(|e| Error::cuda("cuMemGetInfo", e))
    }

    /// The kernel `entry` of `source` compiled for `dtype` with `defines`, opted in to
    /// `dynamic_smem` bytes of dynamic shared memory.
    pub fn function(
        &self,
        source: &str,
        entry: &str,
        dtype: DType,
        defines: &[(String, String)],
        dynamic_smem: u32,
    ) -> Result<CudaFunction, Error> {
        let arch = self.arch();
        let req = CompileRequest {
            source,
            dtype,
            defines,
            arch: &arch,
        };
        let module_key = format!("{source}|{:?}", req.options());
        let fkey = (module_key.clone(), entry.to_string());
        {
            let funcs = self.functions.lock().unwrap();
            if let Some(f) = funcs.get(&fkey) {
                if f.smem_optin >= dynamic_smem {
                    return Ok(f.function.clone());
                }
            }
        }
        let module = {
            let mut modules = self.modules.lock().unwrap();
            if let Some(m) = modules.get(&module_key) {
                m.clone()
            } else {
                if let Some(image) = compile::prebuilt(&req) {
                    let t = std::time::Instant::now();
                    let m = self
                        .ctx
                        .load_module(cudarc::nvrtc::Ptx::from_binary(image.to_vec()))
                        .map_err(|e| {
                            Error::cuda(format!("loading the prebuilt module for {source}"), e)
                        })?;
                    let mut s = self.stats.lock().unwrap();
                    s.prebuilt += 1;
                    s.module_load_millis += t.elapsed().as_secs_f64() * 1e3;
                    modules.insert(module_key.clone(), m.clone());
                    return self.finish_function(m, fkey, source, entry, dynamic_smem);
                }
                let compiled = compile::compile(&req)?;
                let t = std::time::Instant::now();
                let m = self
                    .ctx
                    .load_module(cudarc::nvrtc::Ptx::from_src(compiled.ptx))
                    .map_err(|e| Error::cuda(format!("loading the module for {source}"), e))?;
                let mut s = self.stats.lock().unwrap();
                s.module_load_millis += t.elapsed().as_secs_f64() * 1e3;
                if compiled.from_disk_cache {
                    s.from_disk_cache += 1;
                    s.cached_millis += compiled.millis;
                } else {
                    s.compiled += 1;
                    s.compile_millis += compiled.millis;
                }
                modules.insert(module_key.clone(), m.clone());
                m
            }
        };
        self.finish_function(module, fkey, source, entry, dynamic_smem)
    }

    /// Looks the entry up in a loaded module and opts it in to its dynamic shared memory.
    fn finish_function(
        &self,
        module: Arc<CudaModule>,
        fkey: (String, String),
        source: &str,
        entry: &str,
        dynamic_smem: u32,
    ) -> Result<CudaFunction, Error> {
        let function = module
            .load_function(entry)
            .map_err(|e| Error::cuda(format!("finding kernel {entry} in {source}"), e))?;
        if dynamic_smem > self.info.max_shared_memory_per_block_optin {
            return Err(Error::SharedMemory {
                what: format!("{entry} ({source})"),
                needed: dynamic_smem as usize,
                limit: self.info.max_shared_memory_per_block_optin as usize,
            });
        }
        if dynamic_smem > self.info.max_shared_memory_per_block {
            let static_smem = function
                .get_attribute(
                    cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                )
                .unwrap_or(0) as u32;
            if dynamic_smem + static_smem > self.info.max_shared_memory_per_block_optin {
                return Err(Error::SharedMemory {
                    what: format!(
                        "{entry} ({source}), {static_smem} static + {dynamic_smem} dynamic"
                    ),
                    needed: (dynamic_smem + static_smem) as usize,
                    limit: self.info.max_shared_memory_per_block_optin as usize,
                });
            }
            function
                .set_attribute(
                    cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    dynamic_smem as i32,
                )
                .map_err(|e| Error::cuda(format!("opting {entry} in to {dynamic_smem} bytes of shared memory"), e))?;
        }
        self.functions.lock().unwrap().insert(
            fkey,
            LoadedFunction {
                function: function.clone(),
                smem_optin: dynamic_smem,
            },
        );
        Ok(function)
    }

    /// The f32 scratch buffer of at least `len` elements behind `params.workspace`, reused
    /// across calls, for `f` to enqueue a plan's launches with. Its first `counters` words are
    /// zero when those launches start; the rest is *not* cleared (contract on
    /// [`crate::LaunchPlan`]). The buffer is zeroed when it is (re)allocated, and again only when
    /// `counters` reaches past the words known to be zero, i.e. when an earlier plan with a
    /// smaller counter region may have written scratch there. A plan run over and over (a
    /// benchmark loop, a CUDA graph, a model's layers) therefore costs no memset after its first
    /// call. Calls are serialised by the lock and run on the device's one stream, so "known zero"
    /// holds in stream order.
    pub(crate) fn with_workspace<R>(
        &self,
        len: usize,
        counters: usize,
        f: impl FnOnce(u64) -> Result<R, Error>,
    ) -> Result<R, Error> {
        use cudarc::driver::DevicePtr;
        if len == 0 {
            return f(0);
        }
        let counters = counters.min(len);
        let mut ws = self.workspace.lock().unwrap();
        if ws.buf.as_ref().is_none_or(|w| w.len() < len) {
            ws.buf = None;
            ws.zero_prefix = 0;
            let buf = self
                .stream
                .alloc_zeros::<f32>(len)
                .map_err(|_| Error::OutOfMemory {
                    what: "the split-KV workspace".into(),
                    bytes: len * 4,
                })?;
            ws.zero_prefix = buf.len();
            ws.buf = Some(buf);
        }
        if ws.needs_zeroing(counters) {
            let buf = ws.buf.as_mut().unwrap();
            self.stream
                .memset_zeros(buf)
                .map_err(|e| Error::cuda("zeroing the workspace", e))?;
            ws.zero_prefix = buf.len();
        }
        let r = {
            let buf = ws.buf.as_mut().unwrap();
            let (ptr, _sync) = buf.device_ptr(&self.stream);
            f(ptr)
        };
        // What the launches leave: the counters back at zero (the kernels' side of the contract),
        // anything after them possibly written. After a failed launch assume nothing.
        ws.after_plan(counters, r.is_ok());
        r
    }
}

#[cfg(test)]
mod tests {
    use super::Workspace;

    #[test]
    fn workspace_is_zeroed_only_when_counters_may_sit_on_scratch() {
        // Freshly allocated (alloc_zeros) buffer of 1000 words.
        let mut ws = Workspace {
            buf: None,
            zero_prefix: 1000,
        };
        // Plan A (256 counter words) runs twice: no memset either time.
        assert!(!ws.needs_zeroing(256));
        ws.after_plan(256, true);
        assert!(!ws.needs_zeroing(256));
        ws.after_plan(256, true);
        // Plan B has more items (512 counter words): A's scratch may lie in 256..512.
        assert!(ws.needs_zeroing(512));
        ws.zero_prefix = 1000; // the memset
        ws.after_plan(512, true);
        // Back to A: its counters are inside B's (zeroed) counters.
        assert!(!ws.needs_zeroing(256));
        ws.after_plan(256, true);
        // A plan without counters never needs a memset, and leaves nothing known zero.
        assert!(!ws.needs_zeroing(0));
        ws.after_plan(0, true);
        assert!(ws.needs_zeroing(256));
        // After a failed launch nothing is assumed.
        ws.zero_prefix = 1000;
        ws.after_plan(256, false);
        assert!(ws.needs_zeroing(1));
    }
}
