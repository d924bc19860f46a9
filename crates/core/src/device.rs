//! The one place that owns the CUDA context, the stream and the compiled modules.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use cudarc::driver::sys::{self, CUdevice_attribute as Attr};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream};

use crate::compile::{self, CompileRequest};
use crate::dtype::DType;
use crate::error::{Error, Unsupported};
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

    /// `Unsupported` for `kernel` unless `bytes` of shared memory fit one block: under the opt-in
    /// limit when the kernel opts in (dynamic shared memory past the default), else under the
    /// default one. `holding` (may be empty) says what the bytes hold, for the reason.
    pub fn require_shared_memory(
        &self,
        kernel: &'static str,
        bytes: usize,
        opt_in: bool,
        holding: &str,
    ) -> Result<(), Unsupported> {
        let (limit, how) = if opt_in {
            (self.max_shared_memory_per_block_optin, " with opt-in")
        } else {
            (self.max_shared_memory_per_block, "")
        };
        if bytes <= limit as usize {
            return Ok(());
        }
        Err(Unsupported::new(
            kernel,
            format!("needs {bytes} bytes of shared memory per block{holding}, the device allows {limit}{how}"),
        ))
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

/// The modules and functions loaded into one CUDA context, and what loading them cost. Shared by
/// every [`Device`] on that context (see [`module_cache_for`]): a module is compiled and loaded
/// once per context, however many streams or `Device` values use it.
#[derive(Default)]
struct ModuleCache {
    modules: Mutex<HashMap<String, Arc<CudaModule>>>,
    functions: Mutex<HashMap<(String, String), LoadedFunction>>,
    /// The loaded functions again, found without building their option strings: every launch
    /// looks its function up here first (by a hash of the request's parts, compared in full).
    recent: Mutex<HashMap<u64, Vec<(FunctionKey, LoadedFunction)>>>,
    stats: Mutex<CompileStats>,
}

/// What names a loaded function: the request's parts, owned.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FunctionKey {
    source: String,
    entry: String,
    dtype: DType,
    defines: Vec<(String, String)>,
    compute_capability: (u32, u32),
}

impl FunctionKey {
    fn matches(
        &self,
        source: &str,
        entry: &str,
        dtype: DType,
        defines: &[(String, String)],
        cc: (u32, u32),
    ) -> bool {
        self.source == source
            && self.entry == entry
            && self.dtype == dtype
            && self.defines == defines
            && self.compute_capability == cc
    }

    fn hash_of(
        source: &str,
        entry: &str,
        dtype: DType,
        defines: &[(String, String)],
        cc: (u32, u32),
    ) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (source, entry, dtype, defines, cc).hash(&mut h);
        h.finish()
    }
}

/// The live module caches, by `CUcontext` handle. An entry is only a weak reference: a cache
/// lives as long as some `Device` on its context does, and while it lives, so does the context
/// (the `Device` holds it), so the handle cannot have been reused by another context.
static MODULE_CACHES: Mutex<Vec<(usize, Weak<ModuleCache>)>> = Mutex::new(Vec::new());

/// The cache of the context `ctx`: the one other `Device`s on it already use, or a new one.
fn module_cache_for(ctx: &CudaContext) -> Arc<ModuleCache> {
    shared_by_key(&MODULE_CACHES, ctx.cu_ctx() as usize)
}

/// The live `T` registered under `key`, or a new default one registered there; forgets dead
/// entries on the way.
fn shared_by_key<T: Default>(registry: &Mutex<Vec<(usize, Weak<T>)>>, key: usize) -> Arc<T> {
    let mut entries = registry.lock().unwrap();
    entries.retain(|(_, w)| w.strong_count() > 0);
    if let Some(live) = entries
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, w)| w.upgrade())
    {
        return live;
    }
    let fresh = Arc::new(T::default());
    entries.push((key, Arc::downgrade(&fresh)));
    fresh
}

/// A CUDA device: its context, a default stream, the context's compiled modules and one scratch
/// buffer per stream.
///
/// Made by [`Device::open`] (the device's primary context, its default stream) or
/// [`Device::from_stream`] (a framework's context and stream, taken as they are); another stream
/// of the same context for one call with [`crate::Attention::forward_on`], or for every call made
/// through a view with [`Device::with_stream`]. Every `Device` on one context shares that
/// context's modules (a process-wide cache keyed by context), so a kernel compiles and loads once
/// per context. Nothing on the launch path synchronises the host with the device; see
/// `docs/ARCHITECTURE.md` ("Device and streams") for the few places that can.
pub struct Device {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    info: DeviceInfo,
    modules: Arc<ModuleCache>,
    workspaces: Arc<Workspaces<CudaSlice<f32>>>,
    /// Memory the caller lends as the workspace of every call through this view, instead of the
    /// per-stream buffers ([`Device::with_lent_workspace`]).
    lent_workspace: Option<LentWorkspace>,
}

/// A caller's buffer of `words` f32 words at `ptr` (see [`Device::with_lent_workspace`]).
#[derive(Clone, Copy, Debug)]
struct LentWorkspace {
    ptr: u64,
    words: usize,
}

/// What the workspace bookkeeping needs of its buffer: a `CudaSlice<f32>` on the device, a fake
/// in the tests (which run without a GPU).
trait ScratchBuffer {
    /// Length in f32 words.
    fn words(&self) -> usize;
    /// Whether the buffer holds the only handle left to the stream it was allocated on: nobody
    /// can queue work on that stream any more, so the buffer can go (freed in stream order).
    fn stream_orphaned(&self) -> bool;
}

impl ScratchBuffer for CudaSlice<f32> {
    fn words(&self) -> usize {
        self.len()
    }
    fn stream_orphaned(&self) -> bool {
        Arc::strong_count(self.stream()) == 1
    }
}

/// The scratch buffer behind `params.workspace` on one stream (see the contract on
/// [`crate::LaunchPlan`]).
struct Workspace<B> {
    buf: Option<B>,
    /// How many leading words are known to be zero when the next launch on the stream starts.
    zero_prefix: usize,
    /// The caller's buffer the last lent call on this stream ran on, with its own known-zero
    /// prefix ([`Device::with_lent_workspace`]): a plan without counters (a backward's D vector)
    /// writes scratch where the next plan with counters (a forward's tile counters) needs zeros.
    lent: Option<LentZero>,
}

/// A lent buffer (`ptr`, `words`) and how many of its leading words are known to be zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LentZero {
    ptr: u64,
    words: usize,
    zero_prefix: usize,
}

impl<B> Default for Workspace<B> {
    fn default() -> Self {
        Workspace {
            buf: None,
            zero_prefix: 0,
            lent: None,
        }
    }
}

impl<B> Workspace<B> {
    /// Whether a plan with `counters` counter words on the lent buffer (`ptr`, `words`) must
    /// zero them first: unless this stream's last lent call ran on the same buffer and left at
    /// least that many words zero. A buffer seen for the first time is assumed to hold anything.
    fn lent_needs_zeroing(&self, ptr: u64, words: usize, counters: usize) -> bool {
        counters > 0
            && !self
                .lent
                .is_some_and(|l| l.ptr == ptr && l.words == words && l.zero_prefix >= counters)
    }

    /// After a plan with `counters` counter words ran on the lent buffer (`ok`) or failed.
    fn after_lent_plan(&mut self, ptr: u64, words: usize, counters: usize, ok: bool) {
        self.lent = Some(LentZero {
            ptr,
            words,
            zero_prefix: if ok { counters } else { 0 },
        });
    }
}

impl<B: ScratchBuffer> Workspace<B> {
    /// Whether the buffer must be zeroed before a plan whose first `counters` words must be zero.
    fn needs_zeroing(&self, counters: usize) -> bool {
        self.zero_prefix < counters
    }

    /// After a plan with `counters` counter words was enqueued (`ok`) or failed: its kernels
    /// leave the counters zero and may have written anything after them.
    fn after_plan(&mut self, counters: usize, ok: bool) {
        self.zero_prefix = if ok { counters } else { 0 };
    }

    /// The buffer for a plan of `len` words whose first `counters` must be zero when it starts:
    /// (re)allocated zeroed by `alloc_zeroed` when missing or shorter than `len` (the old one is
    /// dropped first), zeroed by `zero` when `counters` reaches past the words known zero.
    fn prepare<E>(
        &mut self,
        len: usize,
        counters: usize,
        alloc_zeroed: impl FnOnce(usize) -> Result<B, E>,
        zero: impl FnOnce(&mut B) -> Result<(), E>,
    ) -> Result<&mut B, E> {
        if self.buf.as_ref().is_none_or(|b| b.words() < len) {
            self.buf = None;
            self.zero_prefix = 0;
            let buf = alloc_zeroed(len)?;
            self.zero_prefix = buf.words();
            self.buf = Some(buf);
        }
        if self.needs_zeroing(counters) {
            let buf = self.buf.as_mut().expect("allocated above");
            // Until the memset is queued nothing is known zero (a failed memset leaves it so).
            self.zero_prefix = 0;
            zero(buf)?;
            self.zero_prefix = buf.words();
        }
        Ok(self.buf.as_mut().expect("allocated above"))
    }

    /// Whether nothing would be lost by forgetting this workspace: no buffer, or one whose
    /// stream nobody else holds.
    fn disposable(&self) -> bool {
        self.buf.as_ref().is_none_or(|b| b.stream_orphaned())
    }
}

/// Which stream a workspace belongs to: the raw `CUstream` handle, and for the per-thread
/// default stream (`CU_STREAM_PER_THREAD`, one handle value naming a different stream on every
/// host thread) the thread too. Two keys are equal only if they name the same stream, so two
/// kernels in flight on different streams never share a buffer. A handle cannot be reused while
/// its workspace lives: the buffer holds the stream (an owned stream is destroyed only after it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct StreamKey {
    handle: usize,
    thread: Option<std::thread::ThreadId>,
}

/// `CU_STREAM_PER_THREAD` (cuda.h), the handle cudarc's `per_thread_stream` uses.
const CU_STREAM_PER_THREAD: usize = 0x2;

impl StreamKey {
    fn of_handle(handle: usize) -> Self {
        StreamKey {
            handle,
            thread: (handle == CU_STREAM_PER_THREAD).then(|| std::thread::current().id()),
        }
    }

    fn of(stream: &CudaStream) -> Self {
        Self::of_handle(stream.cu_stream() as usize)
    }
}

/// One [`Workspace`] per stream. A call holds its stream's workspace (its own lock) from the
/// first memset to the last launch of its plan, so two calls on one stream queue their plans
/// whole, one after the other, and calls on different streams never wait for each other here.
struct Workspaces<B> {
    map: Mutex<HashMap<StreamKey, Arc<Mutex<Workspace<B>>>>>,
}

impl<B> Default for Workspaces<B> {
    fn default() -> Self {
        Workspaces {
            map: Mutex::new(HashMap::new()),
        }
    }
}

impl<B: ScratchBuffer> Workspaces<B> {
    /// The workspace of the stream `key`, made on first use. Forgets, on the way, the
    /// workspaces of streams nobody holds any more (see [`Workspaces::trim`]).
    fn for_stream(&self, key: StreamKey) -> Arc<Mutex<Workspace<B>>> {
        let (entry, _dropped) = {
            let mut map = self.map.lock().unwrap();
            let dropped = Self::take_disposable(&mut map, Some(key));
            let entry = map.entry(key).or_default().clone();
            (entry, dropped)
        };
        // `_dropped` frees here, outside the map's lock (each buffer in its own stream's order).
        entry
    }

    /// Drops the workspaces that are not in use by a call and whose stream nobody else holds;
    /// returns how many. (`for_stream` does this on every call; the reliability check calls it
    /// before reading free memory.)
    fn trim(&self) -> usize {
        let dropped = Self::take_disposable(&mut self.map.lock().unwrap(), None);
        dropped.len()
    }

    fn take_disposable(
        map: &mut HashMap<StreamKey, Arc<Mutex<Workspace<B>>>>,
        keep: Option<StreamKey>,
    ) -> Vec<Arc<Mutex<Workspace<B>>>> {
        let gone: Vec<StreamKey> = map
            .iter()
            .filter(|(k, ws)| {
                Some(**k) != keep
                    // Nobody is mid-call with it (a call holds a clone), so the lock is free.
                    && Arc::strong_count(ws) == 1
                    && ws.try_lock().is_ok_and(|w| w.disposable())
            })
            .map(|(k, _)| *k)
            .collect();
        gone.iter().filter_map(|k| map.remove(k)).collect()
    }

    fn len(&self) -> usize {
        self.map.lock().unwrap().len()
    }
}

/// An error unless `stream` belongs to the device's context.
fn check_same_context(device: sys::CUcontext, stream: sys::CUcontext) -> Result<(), Error> {
    if device == stream {
        Ok(())
    } else {
        Err(Error::Cuda {
            context: "running on a caller's stream".into(),
            message: format!(
                "the stream belongs to CUDA context {stream:p}, the device to {device:p}: \
                 a Device runs only on streams of its own context"
            ),
        })
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

    /// Opens device `ordinal` (its primary context, on its default stream) and reads what
    /// kernels plan against.
    pub fn open(ordinal: usize) -> Result<Device, Error> {
        let n = Self::count()?;
        if ordinal >= n {
            return Err(Error::NoDevice(format!(
                "device {ordinal} requested but {n} CUDA device(s) are visible"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| Error::cuda("creating the context", e))?;
        let stream = ctx.default_stream();
        Self::on(ctx, stream)
    }

    /// A device on the caller's stream and its context (`stream.context()`), e.g. the stream of
    /// a framework's tensors: every call of this `Device` queues its work there, in order with
    /// the caller's own, without synchronising and without copies. The context's compiled
    /// modules are shared with every other `Device` on it. Reads the device's attributes (no
    /// device work).
    pub fn from_stream(stream: Arc<CudaStream>) -> Result<Device, Error> {
        let ctx = stream.context().clone();
        Self::on(ctx, stream)
    }

    fn on(ctx: Arc<CudaContext>, stream: Arc<CudaStream>) -> Result<Device, Error> {
        let info = read_info(&ctx)?;
        Ok(Device {
            modules: module_cache_for(&ctx),
            workspaces: Arc::default(),
            lent_workspace: None,
            ctx,
            stream,
            info,
        })
    }

    /// This device with `stream` (of the same context) as its stream: a cheap view that shares
    /// the modules and the per-stream workspaces, for running any call (the host path,
    /// `forward_with_kvcache`, `check_tables`, `synchronize`) on another stream. For one
    /// `forward` there is [`crate::Attention::forward_on`].
    pub fn with_stream(&self, stream: Arc<CudaStream>) -> Result<Device, Error> {
        check_same_context(self.ctx.cu_ctx(), stream.context().cu_ctx())?;
        Ok(Device {
            ctx: self.ctx.clone(),
            stream,
            info: self.info.clone(),
            modules: self.modules.clone(),
            workspaces: self.workspaces.clone(),
            lent_workspace: self.lent_workspace,
        })
    }

    /// This device with the caller's memory as the workspace of every call made through the
    /// view, for callers whose memory must come from their own allocator (a framework's caching
    /// allocator, a CUDA graph's private pool: nothing is then allocated here). The contract is
    /// the one of [`crate::LaunchPlan`]: a plan's first `workspace_counters` words must be zero
    /// when it starts. The view zeroes them itself (a memset queued on the call's stream)
    /// unless the last lent call on that stream ran on the same buffer and left at least that
    /// many words zero: a plan with counters leaves them zero, but one without (a backward's D
    /// vector, a decode's partials) writes scratch over the words the next forward counts with.
    /// So a loop of one plan costs no memset, and a forward after a backward one. A call whose
    /// plan needs more than `words` launches nothing and returns [`Error::WorkspaceTooSmall`]
    /// with the size it needs.
    ///
    /// # Safety
    /// `ptr` must address `words` f32 words of device memory of this context that stay valid
    /// until the work queued through the view is done, and no other work may use them meanwhile.
    pub unsafe fn with_lent_workspace(&self, ptr: u64, words: usize) -> Device {
        Device {
            ctx: self.ctx.clone(),
            stream: self.stream.clone(),
            info: self.info.clone(),
            modules: self.modules.clone(),
            workspaces: self.workspaces.clone(),
            lent_workspace: Some(LentWorkspace { ptr, words }),
        }
    }

    /// An error unless `stream` belongs to this device's context.
    pub(crate) fn check_stream(&self, stream: &CudaStream) -> Result<(), Error> {
        check_same_context(self.ctx.cu_ctx(), stream.context().cu_ctx())
    }

    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }
    /// The stream calls run on unless given another (`forward_on`).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }
    /// Compile and load statistics of this device's context (shared by every `Device` on it).
    pub fn compile_stats(&self) -> CompileStats {
        self.modules.stats.lock().unwrap().clone()
    }

    /// Frees the scratch buffers of streams that nobody but this device holds any more (a
    /// caller's stream that was dropped), in each stream's order; returns how many. Calls do
    /// this on their own as they go; call it before reading free memory.
    pub fn trim_workspaces(&self) -> usize {
        // Freeing queues cuMemFreeAsync, which wants the context current.
        let _ = self.ctx.bind_to_thread();
        self.workspaces.trim()
    }

    /// How many streams have a scratch buffer (or its bookkeeping) on this device.
    pub fn workspace_streams(&self) -> usize {
        self.workspaces.len()
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
        let cc = self.info.compute_capability;
        let hash = FunctionKey::hash_of(source, entry, dtype, defines, cc);
        if let Some(bucket) = self.modules.recent.lock().unwrap().get(&hash) {
            let hit = bucket
                .iter()
                .find(|(k, f)| {
                    k.matches(source, entry, dtype, defines, cc) && f.smem_optin >= dynamic_smem
                })
                .map(|(_, f)| f.function.clone());
            if let Some(function) = hit {
                return Ok(function);
            }
        }
        let function = self.function_slow(source, entry, dtype, defines, dynamic_smem)?;
        let key = FunctionKey {
            source: source.to_string(),
            entry: entry.to_string(),
            dtype,
            defines: defines.to_vec(),
            compute_capability: cc,
        };
        let mut recent = self.modules.recent.lock().unwrap();
        let bucket = recent.entry(hash).or_default();
        bucket.retain(|(k, _)| *k != key);
        bucket.push((
            key,
            LoadedFunction {
                function: function.clone(),
                smem_optin: dynamic_smem,
            },
        ));
        Ok(function)
    }

    /// [`Device::function`] by the module's option strings: compiles or loads the module on a
    /// miss, and opts the function in to `dynamic_smem` bytes of shared memory.
    fn function_slow(
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
            let funcs = self.modules.functions.lock().unwrap();
            if let Some(f) = funcs.get(&fkey) {
                if f.smem_optin >= dynamic_smem {
                    return Ok(f.function.clone());
                }
            }
        }
        let module = {
            let mut modules = self.modules.modules.lock().unwrap();
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
                    let mut s = self.modules.stats.lock().unwrap();
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
                let mut s = self.modules.stats.lock().unwrap();
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
        self.modules.functions.lock().unwrap().insert(
            fkey,
            LoadedFunction {
                function: function.clone(),
                smem_optin: dynamic_smem,
            },
        );
        Ok(function)
    }

    /// The f32 scratch buffer of `stream` of at least `len` elements behind `params.workspace`,
    /// reused across calls on that stream, for `f` to enqueue a plan's launches with. Its first
    /// `counters` words are zero when those launches start; the rest is *not* cleared (contract
    /// on [`crate::LaunchPlan`]). The buffer is zeroed when it is (re)allocated, and again only
    /// when `counters` reaches past the words known to be zero, i.e. when an earlier plan with a
    /// smaller counter region may have written scratch there. A plan run over and over (a
    /// benchmark loop, a CUDA graph, a model's layers) therefore costs no memset after its first
    /// call.
    ///
    /// One buffer per stream: kernels in flight on two streams never share counters or partials.
    /// Calls on one stream are serialised by that workspace's lock from the memset to the last
    /// launch, so "known zero" holds in the stream's order. The buffer is allocated, zeroed and
    /// freed (when it grows, or when its stream is gone) on its own stream with cudarc's
    /// stream-ordered `cuMemAllocAsync`/`cuMemFreeAsync`, so a free never overtakes a kernel
    /// still using it, and nothing here waits for the device. (On a device without stream-ordered
    /// allocation cudarc falls back to `cuMemAlloc`, and to a stream synchronisation before
    /// `cuMemFree`: only when a buffer grows or goes.)
    /// An error, before anything launches, when the caller lent a workspace
    /// ([`Device::with_lent_workspace`]) smaller than a plan's `len` words.
    pub(crate) fn check_lent_workspace(&self, len: usize, counters: usize) -> Result<(), Error> {
        match self.lent_workspace {
            Some(lent) if lent.words < len => Err(Error::WorkspaceTooSmall {
                needed: len,
                counters: counters.min(len),
                given: lent.words,
            }),
            _ => Ok(()),
        }
    }

    pub(crate) fn with_workspace<R>(
        &self,
        stream: &Arc<CudaStream>,
        len: usize,
        counters: usize,
        f: impl FnOnce(u64) -> Result<R, Error>,
    ) -> Result<R, Error> {
        use cudarc::driver::DevicePtr;
        if len == 0 {
            return f(0);
        }
        let counters = counters.min(len);
        self.ctx
            .bind_to_thread()
            .map_err(|e| Error::cuda("binding the context", e))?;
        let entry = self.workspaces.for_stream(StreamKey::of(stream));
        if let Some(lent) = self.lent_workspace {
            self.check_lent_workspace(len, counters)?;
            let mut ws = entry.lock().unwrap();
            if ws.lent_needs_zeroing(lent.ptr, lent.words, counters) {
                // Until the memset is queued nothing is known zero.
                ws.after_lent_plan(lent.ptr, lent.words, 0, false);
                // SAFETY: the caller lent `words` >= `len` >= `counters` f32 words at `ptr` on
                // this device for the call (`with_lent_workspace`); the memset is queued on
                // `stream`, before the plan's launches.
                unsafe {
                    cudarc::driver::result::memset_d8_async(
                        lent.ptr,
                        0,
                        counters * 4,
                        stream.cu_stream(),
                    )
                }
                .map_err(|e| Error::cuda("zeroing the lent workspace's counters", e))?;
            }
            let r = f(lent.ptr);
            ws.after_lent_plan(lent.ptr, lent.words, counters, r.is_ok());
            return r;
        }
        let mut ws = entry.lock().unwrap();
        let r = {
            let buf = ws.prepare(
                len,
                counters,
                |n| {
                    stream
                        .alloc_zeros::<f32>(n)
                        .map_err(|_| Error::OutOfMemory {
                            what: "the kernel workspace".into(),
                            bytes: n * 4,
                        })
                },
                |buf| {
                    stream
                        .memset_zeros(buf)
                        .map_err(|e| Error::cuda("zeroing the workspace", e))
                },
            )?;
            let (ptr, _record) = buf.device_ptr(stream);
            f(ptr)
        };
        // What the launches leave: the counters back at zero (the kernels' side of the contract),
        // anything after them possibly written. After a failed launch assume nothing.
        ws.after_plan(counters, r.is_ok());
        r
    }
}

/// What kernels plan against, read from the context's device (attribute queries only).
fn read_info(ctx: &CudaContext) -> Result<DeviceInfo, Error> {
    let attr = |a: Attr| -> Result<i32, Error> {
        ctx.attribute(a)
            .map_err(|e| Error::cuda(format!("reading {a:?}"), e))
    };
    let (major, minor) = ctx
        .compute_capability()
        .map_err(|e| Error::cuda("reading the compute capability", e))?;
    Ok(DeviceInfo {
        ordinal: ctx.ordinal(),
        name: ctx
            .name()
            .map_err(|e| Error::cuda("reading the device name", e))?,
        compute_capability: (major as u32, minor as u32),
        sm_count: attr(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
        max_shared_memory_per_block: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?
            as u32,
        max_shared_memory_per_block_optin: attr(
            Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )? as u32,
        l2_bytes: attr(Attr::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u32,
        total_memory: ctx
            .total_mem()
            .map_err(|e| Error::cuda("reading total memory", e))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The launch path's function lookup tells every part of a request apart.
    #[test]
    fn function_keys_differ_in_every_part() {
        let defines = vec![("FC_A".to_string(), "1".to_string())];
        let key = FunctionKey {
            source: "k.cu".into(),
            entry: "main".into(),
            dtype: DType::F16,
            defines: defines.clone(),
            compute_capability: (9, 0),
        };
        let h = |s, e, d, defs: &[(String, String)], cc| FunctionKey::hash_of(s, e, d, defs, cc);
        assert!(key.matches("k.cu", "main", DType::F16, &defines, (9, 0)));
        assert_eq!(
            h("k.cu", "main", DType::F16, &defines, (9, 0)),
            h("k.cu", "main", DType::F16, &defines.clone(), (9, 0))
        );
        let other = vec![("FC_A".to_string(), "2".to_string())];
        assert!(!key.matches("j.cu", "main", DType::F16, &defines, (9, 0)));
        assert!(!key.matches("k.cu", "other", DType::F16, &defines, (9, 0)));
        assert!(!key.matches("k.cu", "main", DType::Bf16, &defines, (9, 0)));
        assert!(!key.matches("k.cu", "main", DType::F16, &other, (9, 0)));
        assert!(!key.matches("k.cu", "main", DType::F16, &[], (9, 0)));
        assert!(!key.matches("k.cu", "main", DType::F16, &defines, (8, 0)));
    }

    /// A scratch buffer without a GPU: its length, and a stand-in for the stream it holds.
    struct Fake {
        words: usize,
        stream: Arc<()>,
    }

    impl ScratchBuffer for Fake {
        fn words(&self) -> usize {
            self.words
        }
        fn stream_orphaned(&self) -> bool {
            Arc::strong_count(&self.stream) == 1
        }
    }

    fn fake(words: usize) -> Fake {
        Fake {
            words,
            stream: Arc::new(()),
        }
    }

    #[test]
    fn workspace_is_zeroed_only_when_counters_may_sit_on_scratch() {
        // Freshly allocated (alloc_zeros) buffer of 1000 words.
        let mut ws = Workspace::<Fake> {
            buf: None,
            zero_prefix: 1000,
            lent: None,
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

    /// `prepare` on a fake buffer, counting allocations (with their lengths) and memsets.
    fn prepare(
        ws: &mut Workspace<Fake>,
        len: usize,
        counters: usize,
        log: &mut Vec<String>,
    ) -> Result<usize, ()> {
        let log = std::cell::RefCell::new(log);
        ws.prepare(
            len,
            counters,
            |n| {
                log.borrow_mut().push(format!("alloc {n}"));
                Ok(fake(n))
            },
            |_| {
                log.borrow_mut().push("memset".into());
                Ok(())
            },
        )
        .map(|b| b.words)
    }

    #[test]
    fn prepare_allocates_grows_and_zeroes_only_when_needed() {
        let mut ws = Workspace::<Fake>::default();
        let mut log = Vec::new();
        // First plan: allocated zeroed, no memset on top.
        assert_eq!(prepare(&mut ws, 2, 2, &mut log), Ok(2));
        ws.after_plan(2, true);
        // The same plan again (a dynamic schedule's two counters): nothing at all.
        assert_eq!(prepare(&mut ws, 2, 2, &mut log), Ok(2));
        ws.after_plan(2, true);
        assert_eq!(log, ["alloc 2"]);
        // A split plan needing 600 words, 256 of them counters: grows (fresh zeroed buffer).
        assert_eq!(prepare(&mut ws, 600, 256, &mut log), Ok(600));
        ws.after_plan(256, true);
        assert_eq!(log, ["alloc 2", "alloc 600"]);
        // A smaller plan fits: no allocation, and its 2 counters lie inside the known-zero 256.
        assert_eq!(prepare(&mut ws, 2, 2, &mut log), Ok(600));
        ws.after_plan(2, true);
        assert_eq!(log.len(), 2);
        // Back to 256 counters: the small plan may have used words 2.. as scratch, so they are
        // zeroed first.
        assert_eq!(prepare(&mut ws, 600, 256, &mut log), Ok(600));
        assert_eq!(log, ["alloc 2", "alloc 600", "memset"]);
        assert_eq!(ws.zero_prefix, 600);
    }

    #[test]
    fn a_lent_buffer_is_zeroed_before_counters_unless_its_last_plan_left_them_zero() {
        let mut ws = Workspace::<()>::default();
        let (ptr, words) = (0x1000, 4096);
        // First sight of a buffer: its counters are zeroed; a plan without counters never.
        assert!(ws.lent_needs_zeroing(ptr, words, 256));
        assert!(!ws.lent_needs_zeroing(ptr, words, 0));
        // A forward with 256 counters leaves them zero: the same plan again needs no memset,
        // nor does one with fewer, but one with more does.
        ws.after_lent_plan(ptr, words, 256, true);
        assert!(!ws.lent_needs_zeroing(ptr, words, 256));
        assert!(!ws.lent_needs_zeroing(ptr, words, 16));
        assert!(ws.lent_needs_zeroing(ptr, words, 257));
        // A backward (no counters) writes its D vector from word 0: the next forward zeroes.
        ws.after_lent_plan(ptr, words, 0, true);
        assert!(ws.lent_needs_zeroing(ptr, words, 256));
        // Another buffer, or this one grown, is unknown; a failed plan leaves nothing known.
        ws.after_lent_plan(ptr, words, 256, true);
        assert!(ws.lent_needs_zeroing(0x2000, words, 256));
        assert!(ws.lent_needs_zeroing(ptr, 2 * words, 256));
        ws.after_lent_plan(ptr, words, 256, false);
        assert!(ws.lent_needs_zeroing(ptr, words, 1));
    }

    #[test]
    fn failed_allocation_or_memset_leaves_nothing_known_zero() {
        let mut ws = Workspace::<Fake>::default();
        let mut log = Vec::new();
        prepare(&mut ws, 8, 2, &mut log).unwrap();
        ws.after_plan(2, true);
        // Growing fails: the old buffer is gone (freed before the new one was asked for).
        let r = ws.prepare(16, 2, |_| Err("oom"), |_| Ok(()));
        assert_eq!(r.err(), Some("oom"));
        assert!(ws.buf.is_none());
        assert_eq!(ws.zero_prefix, 0);
        // The next call allocates again.
        assert_eq!(prepare(&mut ws, 16, 2, &mut log), Ok(16));
        ws.after_plan(0, true);
        // A memset that fails: nothing is known zero, so the next call tries again.
        let r = ws.prepare(16, 4, |_| Ok(fake(16)), |_| Err("memset"));
        assert_eq!(r.err(), Some("memset"));
        assert!(ws.needs_zeroing(1));
        prepare(&mut ws, 16, 4, &mut log).unwrap();
        assert_eq!(log.last().map(String::as_str), Some("memset"));
    }

    #[test]
    fn each_stream_gets_its_own_workspace() {
        let w = Workspaces::<Fake>::default();
        let a = StreamKey::of_handle(0x1000);
        let b = StreamKey::of_handle(0x2000);
        let wa = w.for_stream(a);
        let wb = w.for_stream(b);
        assert!(!Arc::ptr_eq(&wa, &wb));
        assert!(Arc::ptr_eq(&wa, &w.for_stream(a)));
        // Bookkeeping is per stream: a memset on one says nothing about the other.
        wa.lock().unwrap().buf = Some(fake(8));
        wa.lock().unwrap().zero_prefix = 8;
        assert!(wb.lock().unwrap().needs_zeroing(2));
        assert!(!wa.lock().unwrap().needs_zeroing(2));
        assert_eq!(w.len(), 2);
    }

    #[test]
    fn the_per_thread_stream_is_a_different_stream_on_each_thread() {
        let here = StreamKey::of_handle(CU_STREAM_PER_THREAD);
        let there = std::thread::spawn(|| StreamKey::of_handle(CU_STREAM_PER_THREAD))
            .join()
            .unwrap();
        assert_ne!(here, there);
        assert_eq!(here, StreamKey::of_handle(CU_STREAM_PER_THREAD));
        // Any other handle names one stream whatever the thread.
        let other = std::thread::spawn(|| StreamKey::of_handle(0x1234))
            .join()
            .unwrap();
        assert_eq!(other, StreamKey::of_handle(0x1234));
        assert_eq!(StreamKey::of_handle(0).thread, None);
    }

    #[test]
    fn workspaces_of_dropped_streams_are_freed_but_not_those_in_use() {
        let w = Workspaces::<Fake>::default();
        let (s1, s2, s3) = (Arc::new(()), Arc::new(()), Arc::new(()));
        let k = |i: usize| StreamKey::of_handle(0x1000 * i);
        for (i, s) in [(1, &s1), (2, &s2), (3, &s3)] {
            w.for_stream(k(i)).lock().unwrap().buf = Some(Fake {
                words: 4,
                stream: s.clone(),
            });
        }
        // A stream with bookkeeping but no buffer yet (a plan without workspace never makes one,
        // but a failed allocation leaves one).
        let _ = w.for_stream(k(4));
        assert_eq!(w.len(), 4);
        // Everyone still holds streams 1-3: only the empty entry goes.
        assert_eq!(w.trim(), 1);
        assert_eq!(w.len(), 3);
        // The caller drops stream 1 and 2, but a call on stream 2 is in flight (holds its entry).
        drop(s1);
        drop(s2);
        // Taking stream 2's workspace forgets stream 1's on the way; a trim then keeps 2's.
        let in_flight = w.for_stream(k(2));
        assert_eq!(w.len(), 2);
        assert_eq!(w.trim(), 0);
        assert_eq!(w.len(), 2);
        drop(in_flight);
        // A call on stream 3 forgets stream 2 on the way, never its own stream.
        drop(s3);
        let own = w.for_stream(k(3));
        assert_eq!(w.len(), 1);
        assert!(own.lock().unwrap().buf.is_some());
        drop(own);
        assert_eq!(w.trim(), 1);
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn module_caches_are_shared_per_context_while_one_lives() {
        let registry = Mutex::new(Vec::new());
        let a: Arc<ModuleCache> = shared_by_key(&registry, 0xa);
        let a2: Arc<ModuleCache> = shared_by_key(&registry, 0xa);
        let b: Arc<ModuleCache> = shared_by_key(&registry, 0xb);
        assert!(Arc::ptr_eq(&a, &a2));
        assert!(!Arc::ptr_eq(&a, &b));
        a.stats.lock().unwrap().compiled = 3;
        assert_eq!(a2.stats.lock().unwrap().compiled, 3);
        // Once every Device on the context is gone, the entry is forgotten: a context later made
        // at the same address starts empty.
        drop((a, a2));
        let a3: Arc<ModuleCache> = shared_by_key(&registry, 0xa);
        assert_eq!(a3.stats.lock().unwrap().compiled, 0);
        assert_eq!(registry.lock().unwrap().len(), 2);
        drop(b);
        let _c: Arc<ModuleCache> = shared_by_key(&registry, 0xc);
        assert_eq!(
            registry.lock().unwrap().len(),
            2,
            "the dead entry of 0xb is dropped"
        );
    }

    #[test]
    fn a_device_can_be_shared_between_threads() {
        // A framework keeps one Device per CUDA device in ops that must be Send + Sync.
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Device>();
        send_sync::<Workspaces<CudaSlice<f32>>>();
    }

    #[test]
    fn a_stream_of_another_context_is_refused() {
        let a = 0x1000 as sys::CUcontext;
        let b = 0x2000 as sys::CUcontext;
        assert!(check_same_context(a, a).is_ok());
        let e = check_same_context(a, b).unwrap_err().to_string();
        assert!(
            e.contains("another") || e.contains("its own context"),
            "{e}"
        );
    }
}
