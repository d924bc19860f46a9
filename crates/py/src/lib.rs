//! `flashcore._flashcore`: the Rust half of the Python package. Thin by design: it turns the
//! tensors Python hands it (data pointer, dtype, shape, strides) into borrowed device views,
//! builds the problem with [`flashcore::fa_args`] (the rules flashcore-candle uses too), and
//! queues the kernels on the caller's stream (PyTorch's current stream) in the caller's context
//! (the device's primary context, as PyTorch's). Nothing here allocates a tensor or copies one:
//! outputs come from Python, out of PyTorch's caching allocator. `python/flashcore/` holds the
//! API (`flash_attn_interface`) and the torch integration (custom ops, fake tensors, autograd).
//!
//! Every entry point takes `device: Option<usize>`: `None` checks the arguments and launches
//! nothing, which the ops' fake implementations use so that bad shapes are refused while
//! tracing (and on `meta` tensors) with the same message as on the GPU.

use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{sys, CudaSlice, CudaStream, CudaView, CudaViewMut};
use flashcore::fa_args::{self, ArgError, Descale, Options, View};
use flashcore::{
    Attention, AttentionProblem, AttentionTensors, DType, Device, DeviceTables, Error, KvAppend,
    KvRef, TensorMut, TensorRef,
};
use pyo3::exceptions::{PyNotImplementedError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

/// A tensor as the Python side describes it: (data pointer, dtype name as flashcore spells it
/// — "f16", "bf16", "f32", "i32", "e4m3" —, shape, strides in elements).
#[derive(FromPyObject)]
struct Tensor(u64, String, Vec<usize>, Vec<usize>);

impl Tensor {
    fn view(&self, name: &'static str) -> View<'_> {
        View::new(name, &self.2, &self.3)
    }

    /// Elements from the first to one past the last addressed: what the borrowed view spans.
    fn span(&self) -> usize {
        if self.2.contains(&0) {
            return 0;
        }
        1 + self
            .2
            .iter()
            .zip(&self.3)
            .map(|(d, s)| (d - 1) * s)
            .sum::<usize>()
    }

    fn contiguous(&self) -> bool {
        let mut expect = 1;
        for (d, s) in self.2.iter().zip(&self.3).rev() {
            if *d > 1 && *s != expect {
                return false;
            }
            expect *= d;
        }
        true
    }

    /// A table (`i32` or `f32`), which the kernels read densely.
    fn table(&self, name: &str, dtype: &str) -> PyResult<()> {
        if self.1 != dtype {
            return Err(PyValueError::new_err(format!(
                "{name} must be {}, got {}",
                torch_name(dtype),
                torch_name(&self.1)
            )));
        }
        if !self.contiguous() {
            return Err(PyValueError::new_err(format!(
                "{name} must be contiguous (strides {:?})",
                self.3
            )));
        }
        Ok(())
    }
}

fn torch_name(dtype: &str) -> &str {
    match dtype {
        "f16" => "torch.float16",
        "bf16" => "torch.bfloat16",
        "f32" => "torch.float32",
        "i32" => "torch.int32",
        "e4m3" => "torch.float8_e4m3fn",
        other => other,
    }
}

fn arg_error(e: ArgError) -> PyErr {
    PyValueError::new_err(format!("flashcore: {e}"))
}

/// Bad input is a `ValueError`, what no kernel takes a `NotImplementedError`, the rest (CUDA,
/// NVRTC, memory) a `RuntimeError`.
fn core_error(e: Error) -> PyErr {
    let msg = format!("flashcore: {e}");
    match e {
        Error::Invalid(_) => PyValueError::new_err(msg),
        Error::Unsupported(_) => PyNotImplementedError::new_err(msg),
        _ => PyRuntimeError::new_err(msg),
    }
}

/// One [`Device`] per ordinal, on the device's primary context (the one PyTorch uses), opened on
/// first use and kept for the process: its compiled modules and per-stream workspaces live there.
fn device(ordinal: usize) -> Result<Arc<Device>, Error> {
    static DEVICES: OnceLock<Mutex<HashMap<usize, Arc<Device>>>> = OnceLock::new();
    let mut map = DEVICES.get_or_init(Default::default).lock().unwrap();
    if let Some(d) = map.get(&ordinal) {
        return Ok(d.clone());
    }
    let d = Device::open(ordinal)?;
    // PyTorch orders work by its streams; borrowed tensors carry no cudarc events (which would
    // cost two event creations per tensor and call).
    // SAFETY: every slice this module makes is borrowed and leaked back, never freed by cudarc;
    // flashcore's own workspaces are per stream and freed in that stream's order.
    unsafe { d.context().disable_event_tracking() };
    let d = Arc::new(d);
    map.insert(ordinal, d.clone());
    Ok(d)
}

/// The device `ordinal` on the caller's stream (a raw `cudaStream_t`, 0 for the legacy default),
/// with the caller's workspace `(pointer, f32 words)` (PyTorch memory: nothing is allocated
/// here, so calls can be captured in CUDA graphs; words 0 lends none).
fn device_on(ordinal: usize, stream: usize, workspace: (u64, usize)) -> Result<Device, Error> {
    let d = device(ordinal)?;
    // SAFETY: the handle is PyTorch's current stream of this device, alive for the call (the
    // caller holds it); the wrapper does not destroy it.
    let s = unsafe { d.context().wrap_borrowed_stream(stream as sys::CUstream) };
    let d = d.with_stream(s)?;
    // SAFETY: the Python side lends a zero-initialised torch tensor of this device that it holds
    // past the call and uses for nothing else; the kernels leave its counters zero.
    Ok(unsafe { d.with_lent_workspace(workspace.0, workspace.1) })
}

/// The answer for a failed call: ("", words) when the lent workspace was too small (see
/// [`launch`]), the error as a Python exception otherwise.
fn outcome_of_error(e: Error) -> PyResult<(&'static str, usize)> {
    match e {
        Error::WorkspaceTooSmall { needed, .. } => Ok(("", needed)),
        e => Err(core_error(e)),
    }
}

/// Device memory owned by a PyTorch tensor, seen as a cudarc slice for one call and given back
/// (leaked) on drop, never freed.
struct Borrowed<T>(ManuallyDrop<CudaSlice<T>>);

impl<T> Borrowed<T> {
    /// # Safety
    /// `ptr` must address `len` elements of `T` in a live allocation of this device that
    /// outlives the value (the Python caller holds the tensor for the call).
    unsafe fn new(stream: &Arc<CudaStream>, ptr: u64, len: usize) -> Self {
        Borrowed(ManuallyDrop::new(stream.upgrade_device_ptr::<T>(ptr, len)))
    }

    fn view(&self) -> CudaView<'_, T> {
        self.0.slice(..)
    }

    fn view_mut(&mut self) -> CudaViewMut<'_, T> {
        self.0.slice_mut(..)
    }
}

impl Borrowed<u16> {
    fn half(&self, dtype: DType) -> TensorRef<'_> {
        TensorRef {
            data: self.view(),
            dtype,
        }
    }
}

impl<T> Drop for Borrowed<T> {
    fn drop(&mut self) {
        // SAFETY: taken once, here; `leak` returns the pointer without freeing it.
        let s = unsafe { ManuallyDrop::take(&mut self.0) };
        let _ = s.leak();
    }
}

fn borrow<T>(stream: &Arc<CudaStream>, t: &Tensor) -> Borrowed<T> {
    // SAFETY: the Python side passes a live CUDA tensor of this device; `span` bounds the
    // elements its shape and strides address.
    unsafe { Borrowed::new(stream, t.0, t.span()) }
}

/// The optional tables of a call, checked for dtype and contiguity (the descales for their
/// dtype: their strides are the rules', which take expanded views).
#[derive(Default)]
struct Tables {
    cu_seqlens_q: Option<Tensor>,
    cu_seqlens_k: Option<Tensor>,
    seqused_k: Option<Tensor>,
    block_table: Option<Tensor>,
    alibi_slopes: Option<Tensor>,
    k_descale: Option<Tensor>,
    v_descale: Option<Tensor>,
    q_descale: Option<Tensor>,
}

impl Tables {
    fn checked(self) -> PyResult<Self> {
        for (name, t) in [
            ("k_descale", &self.k_descale),
            ("v_descale", &self.v_descale),
            ("q_descale", &self.q_descale),
        ] {
            match t {
                Some(t) if t.1 != "f32" => {
                    return Err(PyValueError::new_err(format!(
                        "flashcore: {name} must be torch.float32, got {}",
                        torch_name(&t.1)
                    )))
                }
                _ => {}
            }
        }
        for (name, t) in [
            ("cu_seqlens_q", &self.cu_seqlens_q),
            ("cu_seqlens_k", &self.cu_seqlens_k),
            ("seqused_k", &self.seqused_k),
            ("block_table", &self.block_table),
        ] {
            if let Some(t) = t {
                t.table(name, "i32")?;
            }
        }
        if let Some(a) = &self.alibi_slopes {
            a.table("alibi_slopes", "f32")?;
        }
        Ok(self)
    }
}

/// The tables borrowed for one call.
struct BorrowedTables {
    cu_seqlens_q: Option<Borrowed<i32>>,
    cu_seqlens_k: Option<Borrowed<i32>>,
    seqused_k: Option<Borrowed<i32>>,
    block_table: Option<Borrowed<i32>>,
    alibi_slopes: Option<Borrowed<f32>>,
    k_descale: Option<Borrowed<f32>>,
    v_descale: Option<Borrowed<f32>>,
    q_descale: Option<Borrowed<f32>>,
}

impl BorrowedTables {
    fn new(stream: &Arc<CudaStream>, t: &Tables) -> Self {
        let b = |t: &Option<Tensor>| t.as_ref().map(|t| borrow::<i32>(stream, t));
        let f = |t: &Option<Tensor>| t.as_ref().map(|t| borrow::<f32>(stream, t));
        BorrowedTables {
            cu_seqlens_q: b(&t.cu_seqlens_q),
            cu_seqlens_k: b(&t.cu_seqlens_k),
            seqused_k: b(&t.seqused_k),
            block_table: b(&t.block_table),
            alibi_slopes: f(&t.alibi_slopes),
            k_descale: f(&t.k_descale),
            v_descale: f(&t.v_descale),
            q_descale: f(&t.q_descale),
        }
    }

    fn views(&self) -> DeviceTables<'_> {
        DeviceTables {
            cu_seqlens_q: self.cu_seqlens_q.as_ref().map(Borrowed::view),
            cu_seqlens_k: self.cu_seqlens_k.as_ref().map(Borrowed::view),
            seqused_k: self.seqused_k.as_ref().map(Borrowed::view),
            block_table: self.block_table.as_ref().map(Borrowed::view),
            alibi_slopes: self.alibi_slopes.as_ref().map(Borrowed::view),
            k_descale: self.k_descale.as_ref().map(Borrowed::view),
            v_descale: self.v_descale.as_ref().map(Borrowed::view),
            q_descale: self.q_descale.as_ref().map(Borrowed::view),
            ..DeviceTables::default()
        }
    }
}

/// FlashAttention 2's scalar options, as Python passes them: `(softmax_scale, causal, (left,
/// right), softcap)`. A negative window side is unbounded, `causal` bounds the right side at 0
/// (bottom-right aligned), softcap 0 is off.
#[derive(FromPyObject)]
struct FaOptions(f32, bool, (i64, i64), f32);

impl FaOptions {
    /// The argument rules' options for these, with the ALiBi slopes' shape and, for e4m3 K/V
    /// (`e4m3`), the descales' (given exactly then: the Python side passes ones for a missing
    /// one, FlashAttention 3's 1.0).
    fn rules(&self, dtype: DType, e4m3: bool, tables: &Tables) -> PyResult<Options> {
        let FaOptions(softmax_scale, causal, window, softcap) = *self;
        if softcap < 0.0 {
            return Err(PyValueError::new_err(format!(
                "flashcore: softcap must be >= 0 (0 turns it off), got {softcap}"
            )));
        }
        let side = |w: i64| usize::try_from(w).ok();
        let right = if causal { Some(0) } else { side(window.1) };
        let mut o = Options::new(dtype, softmax_scale)
            .with_window(side(window.0), right)
            .with_softcap(Some(softcap));
        if let Some(a) = &tables.alibi_slopes {
            o = o.with_alibi(&a.2);
        }
        let descales = fa_args::kv_descales(
            e4m3,
            descale("k_descale", &tables.k_descale)?,
            descale("v_descale", &tables.v_descale)?,
        )
        .map_err(arg_error)?;
        Ok(o.with_kv_fp8(descales))
    }
}

/// A descale table as the rules see it (its dtype, shape and strides), when given.
fn descale(name: &'static str, t: &Option<Tensor>) -> PyResult<Option<Descale>> {
    t.as_ref()
        .map(|t| Descale::new(name, &t.1, &t.2, &t.3))
        .transpose()
        .map_err(arg_error)
}

/// Runs `call` on the device `ordinal` (`None`: the arguments were checked, nothing runs) on
/// the caller's stream with the lent workspace, the GIL released. A call's answer to Python:
/// (the generation or kernel that ran, 0), or ("", words) when the lent workspace is too small —
/// nothing ran, and Python calls again with `words` zeroed words.
fn launch(
    py: Python<'_>,
    ordinal: Option<usize>,
    stream: usize,
    workspace: (u64, usize),
    call: impl FnOnce(&Device) -> Result<&'static str, Error> + Send,
) -> PyResult<(&'static str, usize)> {
    let Some(ordinal) = ordinal else {
        return Ok(("", 0)); // validation only (fake tensors: shapes without memory)
    };
    py.detach(|| call(&device_on(ordinal, stream, workspace)?))
        .map_or_else(outcome_of_error, |name| Ok((name, 0)))
}

fn dtype_of(api: &str, q: &Tensor, k: &Tensor, v: &Tensor) -> PyResult<DType> {
    fa_args::dtype_of(api, &q.1, &k.1, &v.1).map_err(arg_error)
}

/// Q's dtype, and whether K and V are e4m3 (an fp8 KV cache, `Modes::kv_fp8`).
fn kv_dtype_of(api: &str, q: &Tensor, k: &Tensor, v: &Tensor) -> PyResult<(DType, bool)> {
    fa_args::kv_dtype_of(api, &q.1, &k.1, &v.1).map_err(arg_error)
}

/// An e4m3 Q where FlashAttention 3's fp8 forward is not implemented (it is `flash_attn_func`'s:
/// dense problems): `NotImplementedError`, before the dtype rules would call it bad input.
fn refuse_e4m3_q(api: &str, q: &Tensor) -> PyResult<()> {
    if fa_args::is_e4m3(&q.1) {
        return Err(PyNotImplementedError::new_err(format!(
            "flashcore: {api} with an fp8 (float8_e4m3fn) q is not implemented: the fp8 \
             forward (q, k and v e4m3, with q_descale) is flash_attn_func's; here q stays \
             float16/bfloat16 and only K/V may be fp8 (with k_descale/v_descale)"
        )));
    }
    Ok(())
}

/// Q, K or V borrowed for one call: 16-bit elements of the problem's dtype, or e4m3 bytes.
enum BorrowedKv {
    Half(Borrowed<u16>, DType),
    E4m3(Borrowed<u8>),
}

impl BorrowedKv {
    /// `t` as the problem reads it: e4m3 bytes when `e4m3` (`Modes::kv_fp8` for K and V,
    /// `Modes::q_fp8` for Q), else 16-bit elements of the problem's dtype.
    fn new(stream: &Arc<CudaStream>, problem: &AttentionProblem, t: &Tensor, e4m3: bool) -> Self {
        match e4m3 {
            true => BorrowedKv::E4m3(borrow::<u8>(stream, t)),
            false => BorrowedKv::Half(borrow::<u16>(stream, t), problem.dtype),
        }
    }

    fn kv(&self) -> KvRef<'_> {
        match self {
            BorrowedKv::Half(b, dtype) => b.half(*dtype).into(),
            BorrowedKv::E4m3(b) => KvRef::E4m3(b.view()),
        }
    }
}

/// O must be dense with Q's shape but V's head dim last (the rules' `o_dims`), of the
/// problem's dtype (Q's, or bf16 for an e4m3 Q: `fa_args::FP8_OUT`); LSE f32 and dense.
fn check_outputs(
    problem: &AttentionProblem,
    q: &Tensor,
    out: &Tensor,
    lse: &Tensor,
) -> PyResult<()> {
    let o_dims = fa_args::o_dims(&q.2, problem.head_dim_v());
    let dtype = problem.dtype.name();
    if out.1 != dtype || out.2 != o_dims || !out.contiguous() {
        return Err(PyValueError::new_err(format!(
            "flashcore: out must be contiguous with shape {o_dims:?} (q's, with v's head dim) \
             and dtype {} (q's, or torch.bfloat16 for an fp8 q)",
            torch_name(dtype)
        )));
    }
    lse.table("softmax_lse", "f32")
}

/// Runs the fastest compiled-in generation that takes the call, falling through past those
/// that answer `Unsupported` before launching (flashcore's `first_that_takes`, in `kernels()`'s
/// fastest-first order, which is `best_for`'s); returns its name.
fn run(mut f: impl FnMut(&dyn Attention) -> Result<(), Error>) -> Result<&'static str, Error> {
    flashcore::first_that_takes(flashcore::kernels(), |k| f(k)).map(|(name, ())| name)
}

/// Q, K, V in, O and LSE out, with `tables`, on `dev`'s stream. `check_tables` copies the
/// tables back and validates them first (a stream synchronisation): kernels trust them.
#[allow(clippy::too_many_arguments)]
fn forward_on(
    dev: &Device,
    problem: &AttentionProblem,
    qkv: [&Tensor; 3],
    out: &Tensor,
    lse: &Tensor,
    tables: &Tables,
    check_tables: bool,
) -> Result<&'static str, Error> {
    let stream = dev.stream().clone();
    let dtype = problem.dtype;
    let q = BorrowedKv::new(&stream, problem, qkv[0], problem.modes.q_fp8);
    let kv_e4m3 = problem.modes.kv_fp8.is_some();
    let [k, v] = [qkv[1], qkv[2]].map(|t| BorrowedKv::new(&stream, problem, t, kv_e4m3));
    let mut o = borrow::<u16>(&stream, out);
    let mut l = borrow::<f32>(&stream, lse);
    let t = BorrowedTables::new(&stream, tables);
    if check_tables {
        dev.check_tables(problem, &t.views())?;
    }
    let mut tensors = AttentionTensors {
        q: q.kv(),
        k: k.kv(),
        v: v.kv(),
        o: TensorMut {
            data: o.view_mut(),
            dtype,
        },
        lse: l.view_mut(),
        tables: t.views(),
    };
    run(|kern| kern.forward_on(dev, &stream, problem, &mut tensors))
}

/// `flash_attn_func`'s forward: q `(b, s_q, h, d)`, k and v `(b, s_k, h_kv, d)`, any strides with
/// a contiguous head dim; `out` dense with q's shape, `lse` f32 `(b, h, s_q)`. k and v may be
/// e4m3 (fp8) with their f32 `k_descale`/`v_descale` (FlashAttention 3's fp8 KV cache), and q
/// too with its `q_descale` (FlashAttention 3's fp8 forward: q, k and v e4m3, `out` bf16); the
/// Python side passes ones for a missing descale. `check_tables` copies the descales back and
/// validates them first (each finite and > 0; a stream synchronisation). Returns the generation
/// that ran.
#[pyfunction]
#[pyo3(signature = (q, k, v, out, lse, options, alibi_slopes, k_descale, v_descale, q_descale, check_tables, workspace, device, stream))]
#[allow(clippy::too_many_arguments)]
fn forward(
    py: Python<'_>,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    options: FaOptions,
    alibi_slopes: Option<Tensor>,
    k_descale: Option<Tensor>,
    v_descale: Option<Tensor>,
    q_descale: Option<Tensor>,
    check_tables: bool,
    workspace: (u64, usize),
    device: Option<usize>,
    stream: usize,
) -> PyResult<(&'static str, usize)> {
    let (dtype, e4m3, q_e4m3) =
        fa_args::qkv_dtype_of("flash_attn_func", &q.1, &k.1, &v.1).map_err(arg_error)?;
    let tables = Tables {
        alibi_slopes,
        k_descale,
        v_descale,
        q_descale,
        ..Default::default()
    }
    .checked()?;
    // Q's descale first: when only it was given, K's and V's are ones shaped as it.
    let q_descale = descale("q_descale", &tables.q_descale)?;
    let opts = options
        .rules(dtype, e4m3, &tables)?
        .with_q_fp8(q_e4m3, q_descale)
        .map_err(arg_error)?;
    let problem = fa_args::dense_problem(&q.view("q"), &k.view("k"), &v.view("v"), &opts)
        .map_err(arg_error)?;
    check_outputs(&problem, &q, &out, &lse)?;
    launch(py, device, stream, workspace, |dev| {
        forward_on(
            dev,
            &problem,
            [&q, &k, &v],
            &out,
            &lse,
            &tables,
            check_tables,
        )
    })
}

/// `flash_attn_func`'s forward (without ALiBi) checked, planned and compiled once for one set of
/// shapes, strides, dtypes and options on one device, then launched per call with the tensors'
/// data pointers only: the eager path's per-call work, which Python keys by everything that
/// decides the plan. `lse` is f32 `(b, h, s_q)`, dense; `out` dense with q's shape.
#[pyclass(frozen, name = "PreparedForward")]
struct PyPreparedForward {
    device: Arc<Device>,
    inner: flashcore::PreparedForward,
    /// Elements each of q, k, v, out and lse spans.
    spans: [usize; 5],
}

#[pymethods]
impl PyPreparedForward {
    /// The generation that runs it.
    #[getter]
    fn kernel(&self) -> &'static str {
        self.inner.kernel()
    }

    /// f32 words of zeroed workspace each launch must be lent.
    #[getter]
    fn workspace_words(&self) -> usize {
        self.inner.workspace_words()
    }

    /// LSE elements, `b * h * s_q`.
    #[getter]
    fn lse_len(&self) -> usize {
        self.spans[4]
    }

    /// Queues the forward on `stream` for tensors of the prepared shapes at these addresses
    /// (the caller holds them for the call). False when the generation refuses these tensors'
    /// base alignment (nothing ran: the caller takes the general path, which falls through to
    /// another generation).
    #[allow(clippy::too_many_arguments)]
    fn launch(
        &self,
        py: Python<'_>,
        q: u64,
        k: u64,
        v: u64,
        out: u64,
        lse: u64,
        workspace: (u64, usize),
        stream: usize,
    ) -> PyResult<bool> {
        let result = py.detach(|| {
            // SAFETY: PyTorch's current stream of this device, alive for the call.
            let s = unsafe {
                self.device
                    .context()
                    .wrap_borrowed_stream(stream as sys::CUstream)
            };
            // SAFETY: as in `device_on`: a zeroed torch tensor the caller holds and lends only
            // to this call.
            let dev = unsafe { self.device.with_lent_workspace(workspace.0, workspace.1) };
            let dtype = self.inner.problem().dtype;
            let [sq, sk, sv, so, sl] = self.spans;
            // SAFETY: live CUDA tensors of this device whose shapes and strides are the
            // prepared ones (the caller's key), so they span these many elements.
            let (bq, bk, bv, mut bo, mut bl) = unsafe {
                (
                    Borrowed::<u16>::new(&s, q, sq),
                    Borrowed::<u16>::new(&s, k, sk),
                    Borrowed::<u16>::new(&s, v, sv),
                    Borrowed::<u16>::new(&s, out, so),
                    Borrowed::<f32>::new(&s, lse, sl),
                )
            };
            let mut tensors = AttentionTensors {
                q: bq.half(dtype).into(),
                k: bk.half(dtype).into(),
                v: bv.half(dtype).into(),
                o: TensorMut {
                    data: bo.view_mut(),
                    dtype,
                },
                lse: bl.view_mut(),
                tables: DeviceTables::default(),
            };
            self.inner.forward_on(&dev, &s, &mut tensors)
        });
        match result {
            Ok(()) => Ok(true),
            Err(Error::Unsupported(_)) => Ok(false),
            Err(e) => Err(core_error(e)),
        }
    }
}

/// [`forward`]'s checks on shapes (q, k, v without memory) and options, then the first
/// generation, fastest first, that takes the problem, prepared on device `ordinal`.
#[pyfunction]
fn prepare_forward(
    py: Python<'_>,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    options: FaOptions,
    ordinal: usize,
) -> PyResult<PyPreparedForward> {
    // 16-bit K/V only: an e4m3 K/V is refused here and takes the general path.
    let dtype = dtype_of("flash_attn_func", &q, &k, &v)?;
    let opts = options.rules(dtype, false, &Tables::default())?;
    let problem = fa_args::dense_problem(&q.view("q"), &k.view("k"), &v.view("v"), &opts)
        .map_err(arg_error)?;
    let lse_len = problem.lse_len();
    let o_len = problem.o_len();
    let spans = [q.span(), k.span(), v.span(), o_len, lse_len];
    py.detach(|| {
        let device = device(ordinal)?;
        let (_, inner) = flashcore::first_that_takes(flashcore::kernels(), |kern| {
            flashcore::PreparedForward::new(kern, &device, &problem)
        })?;
        Ok(PyPreparedForward {
            device,
            inner,
            spans,
        })
    })
    .map_err(core_error)
}

/// `flash_attn_varlen_func`'s forward: packed q `(total_q, h, d)`; packed k/v `(total_k, h_kv, d)`
/// with `cu_seqlens_k`, or paged caches `(num_blocks, block_size, h_kv, d)` with `block_table`
/// `(b, max_blocks)` and `seqused_k` `(b)` (the key count of each sequence). `lse` is
/// `(h, total_q)`. k and v may be e4m3 (fp8) with `k_descale`/`v_descale`.
#[pyfunction]
#[pyo3(signature = (q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, max_seqlen_q, max_seqlen_k, options, alibi_slopes, k_descale, v_descale, check_tables, workspace, device, stream))]
#[allow(clippy::too_many_arguments)]
fn varlen_forward(
    py: Python<'_>,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Option<Tensor>,
    seqused_k: Option<Tensor>,
    block_table: Option<Tensor>,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    options: FaOptions,
    alibi_slopes: Option<Tensor>,
    k_descale: Option<Tensor>,
    v_descale: Option<Tensor>,
    check_tables: bool,
    workspace: (u64, usize),
    device: Option<usize>,
    stream: usize,
) -> PyResult<(&'static str, usize)> {
    refuse_e4m3_q("flash_attn_varlen_func", &q)?;
    let (dtype, e4m3) = kv_dtype_of("flash_attn_varlen_func", &q, &k, &v)?;
    let paged = block_table.is_some();
    let lens_k = match (&cu_seqlens_k, &seqused_k) {
        (Some(cu), None) if !paged => cu.2.clone(),
        (None, Some(used)) if paged => vec![used.2.iter().product::<usize>() + 1],
        _ => {
            return Err(PyValueError::new_err(
                "flashcore: varlen takes cu_seqlens_k, or with a block_table seqused_k",
            ))
        }
    };
    let batch = fa_args::cu_seqlens_batch(&cu_seqlens_q.2, &lens_k).map_err(arg_error)?;
    let tables = Tables {
        cu_seqlens_q: Some(cu_seqlens_q),
        cu_seqlens_k,
        seqused_k,
        block_table,
        alibi_slopes,
        k_descale,
        v_descale,
        q_descale: None,
    }
    .checked()?;
    let opts = options.rules(dtype, e4m3, &tables)?;
    let (qv, kv, vv) = (q.view("q"), k.view("k"), v.view("v"));
    let problem = match &tables.block_table {
        None => fa_args::varlen_problem(&qv, &kv, &vv, batch, max_seqlen_q, max_seqlen_k, &opts),
        Some(table) => fa_args::paged_varlen_problem(
            &qv,
            &kv,
            &vv,
            &table.2,
            batch,
            max_seqlen_q,
            max_seqlen_k,
            k.2.get(1).copied().unwrap_or(0),
            &opts,
        ),
    }
    .map_err(arg_error)?;
    check_outputs(&problem, &q, &out, &lse)?;
    launch(py, device, stream, workspace, |dev| {
        forward_on(
            dev,
            &problem,
            [&q, &k, &v],
            &out,
            &lse,
            &tables,
            check_tables,
        )
    })
}

/// `flash_attn_with_kvcache`'s forward: q `(b, s_q, h, d)`; a cache `(b, capacity, h_kv, d)`, or
/// with `block_table` a paged one; `cache_seqlens` `(b)` i32; `k_new`/`v_new` `(b, s_new, h_kv, d)`
/// (dense) appended in place at `cache_seqlens[b]` before attending. The caches may be e4m3
/// (fp8) with `k_descale`/`v_descale`: `k_new`/`v_new` stay in q's dtype and are quantized into
/// them.
#[pyfunction]
#[pyo3(signature = (q, k_cache, v_cache, out, lse, cache_seqlens, block_table, k_new, v_new, options, alibi_slopes, k_descale, v_descale, check_tables, workspace, device, stream))]
#[allow(clippy::too_many_arguments)]
fn kvcache_forward(
    py: Python<'_>,
    q: Tensor,
    k_cache: Tensor,
    v_cache: Tensor,
    out: Tensor,
    lse: Tensor,
    cache_seqlens: Tensor,
    block_table: Option<Tensor>,
    k_new: Option<Tensor>,
    v_new: Option<Tensor>,
    options: FaOptions,
    alibi_slopes: Option<Tensor>,
    k_descale: Option<Tensor>,
    v_descale: Option<Tensor>,
    check_tables: bool,
    workspace: (u64, usize),
    device: Option<usize>,
    stream: usize,
) -> PyResult<(&'static str, usize)> {
    refuse_e4m3_q("flash_attn_with_kvcache", &q)?;
    let (dtype, e4m3) = kv_dtype_of("flash_attn_with_kvcache", &q, &k_cache, &v_cache)?;
    let new = match (&k_new, &v_new) {
        (Some(k), Some(v)) => {
            // The rows to append are in q's dtype whatever the cache's (an e4m3 append
            // quantizes them).
            fa_args::dtype_of("flash_attn_with_kvcache (k/v)", &q.1, &k.1, &v.1).map_err(|e| {
                match e4m3 {
                    true => arg_error(ArgError(format!(
                        "{e}: k and v (the rows to append) stay in q's dtype, the fp8 cache \
                         quantizes them with k_descale/v_descale"
                    ))),
                    false => arg_error(e),
                }
            })?;
            Some((k, v))
        }
        (None, None) => None,
        _ => {
            return Err(PyValueError::new_err(
                "flashcore: k and v (the rows to append) must be given together",
            ))
        }
    };
    let tables = Tables {
        seqused_k: Some(cache_seqlens),
        block_table,
        alibi_slopes,
        k_descale,
        v_descale,
        ..Default::default()
    }
    .checked()?;
    let opts = options.rules(dtype, e4m3, &tables)?;
    let new_views = new.map(|(k, v)| (k.view("k"), v.view("v")));
    let problem = fa_args::kvcache_problem(
        &q.view("q"),
        &k_cache.view("k_cache"),
        &v_cache.view("v_cache"),
        &tables.seqused_k.as_ref().expect("set above").2,
        tables.block_table.as_ref().map(|t| t.2.as_slice()),
        new_views.as_ref().map(|(k, v)| (k, v)),
        &opts,
    )
    .map_err(arg_error)?;
    check_outputs(&problem, &q, &out, &lse)?;
    launch(py, device, stream, workspace, |dev| {
        let Some((k_new, v_new)) = new else {
            return forward_on(
                dev,
                &problem,
                [&q, &k_cache, &v_cache],
                &out,
                &lse,
                &tables,
                check_tables,
            );
        };
        let stream = dev.stream().clone();
        let [bq, bkn, bvn] = [&q, k_new, v_new].map(|t| borrow::<u16>(&stream, t));
        let mut bo = borrow::<u16>(&stream, &out);
        let mut bl = borrow::<f32>(&stream, &lse);
        let t = BorrowedTables::new(&stream, &tables);
        if check_tables {
            dev.check_tables(&problem, &t.views())?;
        }
        let new = || KvAppend {
            k_new: bkn.half(dtype),
            v_new: bvn.half(dtype),
        };
        // forward_with_kvcache (and its e4m3 twin) checks everything before its first launch,
        // so a generation that answers Unsupported has appended nothing.
        if problem.modes.kv_fp8.is_some() {
            let [mut bkc, mut bvc] = [&k_cache, &v_cache].map(|t| borrow::<u8>(&stream, t));
            let (mut kc, mut vc) = (bkc.view_mut(), bvc.view_mut());
            return run(|kern| {
                flashcore::forward_with_e4m3_kvcache(
                    kern,
                    dev,
                    &problem,
                    bq.half(dtype),
                    &mut kc,
                    &mut vc,
                    new(),
                    TensorMut {
                        data: bo.view_mut(),
                        dtype,
                    },
                    bl.view_mut(),
                    t.views(),
                )
            });
        }
        let [mut bkc, mut bvc] = [&k_cache, &v_cache].map(|t| borrow::<u16>(&stream, t));
        let mut kc = TensorMut {
            data: bkc.view_mut(),
            dtype,
        };
        let mut vc = TensorMut {
            data: bvc.view_mut(),
            dtype,
        };
        run(|kern| {
            flashcore::forward_with_kvcache(
                kern,
                dev,
                &problem,
                bq.half(dtype),
                &mut kc,
                &mut vc,
                new(),
                TensorMut {
                    data: bo.view_mut(),
                    dtype,
                },
                bl.view_mut(),
                t.views(),
            )
        })
    })
}

/// The backward of [`forward`] and [`varlen_forward`] (FlashAttention 2's `_flash_attn_backward`
/// and `_flash_attn_varlen_backward`): dQ, dK, dV (strides of q, k, v; `dout` with `out`'s) from
/// dO, Q, K, V, O and the forward's LSE, with the forward's options (causal, window, softcap,
/// ALiBi slopes). Dense: q `(b, s_q, h, d)`, LSE `(b, h, s_q)`. Varlen (`cu_seqlens_q` and
/// `cu_seqlens_k` given, with `max_seqlen_q`/`max_seqlen_k`): packed q `(total_q, h, d)`, k/v
/// `(total_k, h_kv, d)`, LSE `(h, total_q)`. fp8 K/V have no backward (`NotImplementedError`,
/// as is what no backward kernel takes). `deterministic` takes only backward kernels whose
/// repeated runs are bit-identical; `check_tables` validates the cumulative lengths first (a
/// stream synchronisation), as the forward does. Returns the kernel that ran.
#[pyfunction]
#[pyo3(signature = (dout, q, k, v, out, lse, dq, dk, dv, options, alibi_slopes, deterministic, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, check_tables, workspace, device, stream))]
#[allow(clippy::too_many_arguments)]
fn backward(
    py: Python<'_>,
    dout: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    dq: Tensor,
    dk: Tensor,
    dv: Tensor,
    options: FaOptions,
    alibi_slopes: Option<Tensor>,
    deterministic: bool,
    cu_seqlens_q: Option<Tensor>,
    cu_seqlens_k: Option<Tensor>,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    check_tables: bool,
    workspace: (u64, usize),
    device: Option<usize>,
    stream: usize,
) -> PyResult<(&'static str, usize)> {
    let varlen = match (&cu_seqlens_q, &cu_seqlens_k) {
        (Some(cu_q), Some(cu_k)) => {
            Some(fa_args::cu_seqlens_batch(&cu_q.2, &cu_k.2).map_err(arg_error)?)
        }
        (None, None) => None,
        _ => {
            return Err(PyValueError::new_err(
                "flashcore: the varlen backward takes cu_seqlens_q and cu_seqlens_k together",
            ))
        }
    };
    let api = match varlen {
        Some(_) => "flash_attn_varlen_func (backward)",
        None => "flash_attn_func (backward)",
    };
    if fa_args::is_e4m3(&q.1) {
        return Err(PyNotImplementedError::new_err(
            "flashcore: fp8 (e4m3) q, k and v have no backward (the fp8 forward is inference \
             only); the backward pass takes f16/bf16 q, k and v",
        ));
    }
    let (dtype, e4m3) = kv_dtype_of(api, &q, &k, &v)?;
    if e4m3 {
        return Err(PyNotImplementedError::new_err(
            "flashcore: an e4m3 (fp8) K/V has no backward; the backward pass takes f16/bf16 \
             q, k and v",
        ));
    }
    let tables = Tables {
        cu_seqlens_q,
        cu_seqlens_k,
        alibi_slopes,
        ..Default::default()
    }
    .checked()?;
    let opts = options.rules(dtype, false, &tables)?;
    let (qv, kv, vv) = (q.view("q"), k.view("k"), v.view("v"));
    let problem = match varlen {
        Some(batch) => {
            fa_args::varlen_problem(&qv, &kv, &vv, batch, max_seqlen_q, max_seqlen_k, &opts)
        }
        None => fa_args::dense_problem(&qv, &kv, &vv, &opts),
    }
    .map_err(arg_error)?;
    fa_args::backward_refusal(&problem)
        .map_err(|e| PyNotImplementedError::new_err(format!("flashcore: {e}")))?;
    check_outputs(&problem, &q, &out, &lse)?;
    for (grad, like, gname, lname) in [
        (&dout, &out, "dout", "out"),
        (&dq, &q, "dq", "q"),
        (&dk, &k, "dk", "k"),
        (&dv, &v, "dv", "v"),
    ] {
        if grad.1 != like.1 || grad.2 != like.2 || grad.3 != like.3 {
            return Err(PyValueError::new_err(format!(
                "flashcore: {gname} must have {lname}'s dtype, shape and strides \
                 ({} {:?} {:?}), got {} {:?} {:?}",
                like.1, like.2, like.3, grad.1, grad.2, grad.3
            )));
        }
    }
    launch(py, device, stream, workspace, |dev| {
        let stream = dev.stream().clone();
        let [bdo, bq, bk, bv, bo] = [&dout, &q, &k, &v, &out].map(|t| borrow::<u16>(&stream, t));
        let [mut bdq, mut bdk, mut bdv] = [&dq, &dk, &dv].map(|t| borrow::<u16>(&stream, t));
        let bl = borrow::<f32>(&stream, &lse);
        let bt = BorrowedTables::new(&stream, &tables);
        if check_tables {
            dev.check_tables(&problem, &bt.views())?;
        }
        let mut t = flashcore::BackwardTensors {
            q: bq.half(dtype),
            k: bk.half(dtype),
            v: bv.half(dtype),
            o: bo.half(dtype),
            d_o: bdo.half(dtype),
            lse: bl.view(),
            dq: TensorMut {
                data: bdq.view_mut(),
                dtype,
            },
            dk: TensorMut {
                data: bdk.view_mut(),
                dtype,
            },
            dv: TensorMut {
                data: bdv.view_mut(),
                dtype,
            },
        };
        let kernels = flashcore::backward_kernels()
            .into_iter()
            .filter(|k| !deterministic || k.deterministic());
        let views = bt.views();
        flashcore::first_backward_that_takes(kernels, |kern| {
            flashcore::backward::backward_on_with_tables(
                kern, dev, &stream, &problem, &mut t, &views,
            )
        })
        .map(|(name, ())| name)
    })
}

/// The generations compiled in, fastest first.
#[pyfunction]
fn kernels() -> Vec<&'static str> {
    flashcore::kernels().iter().map(|k| k.name()).collect()
}

/// The backward kernels compiled in, fastest first, with whether each is deterministic.
#[pyfunction]
fn backward_kernels() -> Vec<(&'static str, bool)> {
    flashcore::backward_kernels()
        .iter()
        .map(|k| (k.name(), k.deterministic()))
        .collect()
}

/// flashcore's batch-invariant mode for every call after it (`docs/MODES.md`).
#[pyfunction]
fn set_batch_invariant(on: bool) {
    fa_args::set_batch_invariant(on)
}

#[pyfunction]
fn batch_invariant() -> bool {
    fa_args::batch_invariant()
}

/// The id of the CUDA graph capture under way on `stream` of device `ordinal` (unique per
/// capture, from `cuStreamGetCaptureInfo`), or `None` when the stream is not capturing. The
/// Python side keys the workspaces it lends during a capture by it.
#[pyfunction]
fn capture_id(ordinal: usize, stream: usize) -> PyResult<Option<u64>> {
    let d = device(ordinal).map_err(core_error)?;
    d.context()
        .bind_to_thread()
        .map_err(|e| core_error(Error::cuda("binding the context", e)))?;
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    let mut id: u64 = 0;
    // SAFETY: the stream is PyTorch's current stream of this device; the optional outputs are
    // null, which the driver allows.
    let rc = unsafe {
        sys::cuStreamGetCaptureInfo_v3(
            stream as sys::CUstream,
            &mut status,
            &mut id,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    if rc != sys::CUresult::CUDA_SUCCESS {
        return Err(core_error(Error::cuda("cuStreamGetCaptureInfo", rc)));
    }
    Ok((status == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE).then_some(id))
}

/// Whether the package embeds cubins (the `aot` build).
#[pyfunction]
fn aot() -> bool {
    cfg!(feature = "aot")
}

#[pymodule]
fn _flashcore(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(forward, m)?)?;
    m.add_function(wrap_pyfunction!(prepare_forward, m)?)?;
    m.add_class::<PyPreparedForward>()?;
    m.add_function(wrap_pyfunction!(varlen_forward, m)?)?;
    m.add_function(wrap_pyfunction!(kvcache_forward, m)?)?;
    m.add_function(wrap_pyfunction!(backward, m)?)?;
    m.add_function(wrap_pyfunction!(kernels, m)?)?;
    m.add_function(wrap_pyfunction!(backward_kernels, m)?)?;
    m.add_function(wrap_pyfunction!(set_batch_invariant, m)?)?;
    m.add_function(wrap_pyfunction!(batch_invariant, m)?)?;
    m.add_function(wrap_pyfunction!(aot, m)?)?;
    m.add_function(wrap_pyfunction!(capture_id, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
