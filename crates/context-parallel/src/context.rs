//! One rank of a context-parallel group (`ContextParallel`): its streams and communicator, the
//! watchdog, the ring's slots and NCCL calls, and the copies between the local layout and the
//! parts. The forward and backward are `forward.rs` and `backward.rs`.

use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{
    CudaEvent, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr,
    SyncOnDrop, ValidAsZeroBits,
};
use flashcore::{Device, TensorRef};

use crate::copy::{copy_runs, PackedParts, Parts};
use crate::error::CpError;
use crate::nccl::{Bytes, Communicator, UniqueId};
use crate::problem::CpProblem;

/// How K/V shards reach every rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// All-gather for GQA with few KV heads (`heads_q ≥ 4·heads_kv`) when every shard fits in
    /// a quarter of the free memory; the ring otherwise.
    Auto,
    /// Shards rotate one rank per step over NCCL send/recv, double-buffered, overlapped with the
    /// kernels; memory for two shards.
    Ring,
    /// One all-gather of every shard, then the kernels; memory for `world` shards.
    AllGather,
}

/// What a communicator does on every call.
#[derive(Clone, Debug)]
pub struct CpOptions {
    pub strategy: Strategy,
    /// Bit-identical results from run to run: the backward takes only deterministic kernels
    /// (the forward and the ring's reductions always are).
    pub deterministic: bool,
    /// The watchdog: a call that makes no progress (no ring step finishes, no NCCL call
    /// returns) for this long aborts the communicator and answers [`CpError::Timeout`].
    pub timeout: Duration,
}

impl Default for CpOptions {
    fn default() -> Self {
        CpOptions {
            strategy: Strategy::Auto,
            deterministic: false,
            timeout: Duration::from_secs(30),
        }
    }
}

/// What one call did (for reports and tests).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpRun {
    pub strategy: Strategy,
    /// The single-GPU kernels that ran the blocks.
    pub kernels: Vec<&'static str>,
}

/// One rank of a context-parallel group: its device, a compute and a communication stream, and
/// its NCCL communicator. Calls are collective: every rank makes the same calls with the same
/// [`CpProblem`], each on its own shard.
pub struct ContextParallel {
    pub(crate) device: Device,
    pub(crate) compute: Arc<CudaStream>,
    pub(crate) comm_stream: Arc<CudaStream>,
    pub(crate) comm: Communicator,
    pub(crate) options: CpOptions,
}

/// Element counts of one part of each tensor.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shapes {
    pub(crate) parts: usize,
    pub(crate) q_part: usize,
    pub(crate) kv_part: usize,
    pub(crate) lse_part: usize,
}

impl Shapes {
    pub(crate) fn of(p: &CpProblem) -> Self {
        // Rows of one part, all sequences.
        let rows: usize = p.chunks().iter().sum();
        Shapes {
            parts: p.sharding.parts(),
            q_part: rows * p.heads_q * p.head_dim,
            kv_part: rows * p.heads_kv * p.head_dim,
            lse_part: p.heads_q * rows,
        }
    }
    /// A K/V shard as it travels: K's parts, then V's.
    pub(crate) fn shard(&self) -> usize {
        2 * self.parts * self.kv_part
    }
    pub(crate) fn q(&self, part: usize) -> std::ops::Range<usize> {
        part * self.q_part..(part + 1) * self.q_part
    }
    pub(crate) fn lse(&self, part: usize) -> std::ops::Range<usize> {
        part * self.lse_part..(part + 1) * self.lse_part
    }
    pub(crate) fn k(&self, part: usize) -> std::ops::Range<usize> {
        part * self.kv_part..(part + 1) * self.kv_part
    }
    pub(crate) fn v(&self, part: usize) -> std::ops::Range<usize> {
        (self.parts + part) * self.kv_part..(self.parts + part + 1) * self.kv_part
    }
}

/// A buffer's address for NCCL, with the guard that records its use on the stream.
pub(crate) fn bytes<'a, T>(s: &'a CudaSlice<T>, stream: &'a CudaStream) -> (Bytes, SyncOnDrop<'a>) {
    let (ptr, g) = s.device_ptr(stream);
    (
        Bytes {
            ptr,
            len: s.len() * std::mem::size_of::<T>(),
        },
        g,
    )
}
pub(crate) fn bytes_mut<'a, T>(
    s: &'a mut CudaSlice<T>,
    stream: &'a CudaStream,
) -> (Bytes, SyncOnDrop<'a>) {
    let len = s.len() * std::mem::size_of::<T>();
    let (ptr, g) = s.device_ptr_mut(stream);
    (Bytes { ptr, len }, g)
}

/// Lengths and dtypes of a call's tensors (name, elements, elements wanted, dtype) and of its
/// f32 LSE (name, elements; it wants `p.lse_len()`).
pub(crate) fn check_tensors(
    p: &CpProblem,
    tensors: &[(&str, usize, usize, flashcore::DType)],
    lse: &[(&str, usize)],
) -> Result<(), CpError> {
    let lens = tensors
        .iter()
        .map(|&(n, got, want, _)| (n, got, want))
        .chain(lse.iter().map(|&(n, got)| (n, got, p.lse_len())));
    for (name, got, want) in lens {
        if got != want {
            return Err(CpError::Invalid(format!(
                "{name} holds {got} elements; this rank's shard needs {want}"
            )));
        }
    }
    for &(name, _, _, d) in tensors {
        if d != p.dtype {
            return Err(CpError::Invalid(format!(
                "{name} is {}, the problem is {}",
                d.name(),
                p.dtype.name()
            )));
        }
    }
    Ok(())
}

impl ContextParallel {
    /// Joins group `id` as `rank` of `world` on `device` (one rank per GPU). Every rank calls
    /// this at about the same time; it waits at most `options.timeout` for the others.
    pub fn new(
        device: &Device,
        rank: usize,
        world: usize,
        id: &UniqueId,
        options: CpOptions,
    ) -> Result<Self, CpError> {
        let ctx = device.context().clone();
        let cuda = |what: &'static str| {
            move |e: cudarc::driver::DriverError| CpError::Cuda {
                rank,
                what,
                message: format!("{e:?}"),
            }
        };
        ctx.bind_to_thread().map_err(cuda("binding the context"))?;
        let compute = ctx
            .new_stream()
            .map_err(cuda("creating the compute stream"))?;
        let comm_stream = ctx
            .new_stream()
            .map_err(cuda("creating the communication stream"))?;
        let device = device.with_stream(compute.clone())?;
        let comm = Communicator::init(rank, world, id, options.timeout)?;
        Ok(ContextParallel {
            device,
            compute,
            comm_stream,
            comm,
            options,
        })
    }

    pub fn rank(&self) -> usize {
        self.comm.rank()
    }
    pub fn world(&self) -> usize {
        self.comm.world()
    }
    /// The device, on this rank's compute stream.
    pub fn device(&self) -> &Device {
        &self.device
    }
    pub fn options(&self) -> &CpOptions {
        &self.options
    }
    /// Options for the calls that follow (every rank sets the same).
    pub fn set_options(&mut self, options: CpOptions) {
        self.options = options;
    }

    /// The strategy a call of `p` takes.
    pub fn strategy_for(&self, p: &CpProblem) -> Strategy {
        match self.options.strategy {
            Strategy::Auto => {
                let gathered = 2 * p.kv_len() * 2 * self.world();
                let free = self.device.memory().map(|(free, _)| free).unwrap_or(0);
                if p.heads_q >= 4 * p.heads_kv && gathered <= free / 4 {
                    Strategy::AllGather
                } else {
                    Strategy::Ring
                }
            }
            s => s,
        }
    }

    /// This rank's K/V shard as it travels: K's parts, then V's.
    pub(crate) fn own_shard(
        &self,
        p: &CpProblem,
        sh: &Shapes,
        k: &TensorRef<'_>,
        v: &TensorRef<'_>,
    ) -> Result<CudaSlice<u16>, CpError> {
        let row = p.heads_kv * p.head_dim;
        let mut own = self.alloc::<u16>(sh.shard())?;
        self.split(p, &k.data, &mut own, 0, row, 2)?;
        self.split(p, &v.data, &mut own, sh.parts * sh.kv_part, row, 2)?;
        Ok(own)
    }

    /// A query-side tensor (Q, O, dO) cut into its parts.
    pub(crate) fn parts_of(
        &self,
        p: &CpProblem,
        sh: &Shapes,
        t: &TensorRef<'_>,
    ) -> Result<CudaSlice<u16>, CpError> {
        let mut out = self.alloc::<u16>(sh.parts * sh.q_part)?;
        self.split(p, &t.data, &mut out, 0, p.heads_q * p.head_dim, 2)?;
        Ok(out)
    }

    // ---- streams, NCCL and the watchdog ----

    pub(crate) fn cuda_err(
        &self,
        what: &'static str,
    ) -> impl Fn(cudarc::driver::DriverError) -> CpError {
        let rank = self.rank();
        move |e| CpError::Cuda {
            rank,
            what,
            message: format!("{e:?}"),
        }
    }

    pub(crate) fn comm_waits_compute(&self) -> Result<(), CpError> {
        self.comm_stream
            .join(&self.compute)
            .map_err(self.cuda_err("ordering the streams"))
    }
    pub(crate) fn compute_waits_comm(&self) -> Result<(), CpError> {
        self.compute
            .join(&self.comm_stream)
            .map_err(self.cuda_err("ordering the streams"))
    }

    pub(crate) fn record_compute(&self) -> Result<CudaEvent, CpError> {
        self.compute
            .record_event(None)
            .map_err(self.cuda_err("recording an event"))
    }

    /// Sends `cur` to the next rank and receives `nxt` from the previous one, on the
    /// communication stream, once the compute stream's work so far (which read `nxt`, or wrote
    /// `cur`) is done.
    pub(crate) fn pass_on<T>(
        &mut self,
        cur: &CudaSlice<T>,
        nxt: &mut CudaSlice<T>,
        what: &str,
    ) -> Result<(), CpError> {
        self.comm_waits_compute()?;
        let cs = self.comm_stream.clone();
        let (send, _g1) = bytes(cur, &cs);
        let (recv, _g2) = bytes_mut(nxt, &cs);
        self.exchange(&[send], &[recv], what)
    }

    pub(crate) fn exchange(
        &mut self,
        sends: &[Bytes],
        recvs: &[Bytes],
        what: &str,
    ) -> Result<(), CpError> {
        let world = self.world();
        let (to, from) = ((self.rank() + 1) % world, (self.rank() + world - 1) % world);
        let s = self.comm_stream.cu_stream() as *mut c_void;
        let t = self.options.timeout;
        self.comm
            .exchange(s, sends, recvs, to, from, t)
            .map_err(|e| match e {
                CpError::Timeout { rank, after, .. } => CpError::Timeout {
                    rank,
                    what: what.into(),
                    after,
                },
                e => e,
            })
    }

    /// Every rank's shard into `all` (rank-major), the compute stream behind it.
    pub(crate) fn gather(
        &mut self,
        own: &CudaSlice<u16>,
        all: &mut CudaSlice<u16>,
    ) -> Result<(), CpError> {
        self.comm_waits_compute()?;
        {
            let (send, _g1) = bytes(own, &self.comm_stream);
            let (recv, _g2) = bytes_mut(all, &self.comm_stream);
            let (s, t) = (
                self.comm_stream.cu_stream() as *mut c_void,
                self.options.timeout,
            );
            self.comm.all_gather(s, send, recv, t)?;
        }
        self.compute_waits_comm()
    }

    /// The watchdog: waits for each event in turn, allowing `timeout` from the previous one's
    /// completion (progress, not total time), polling NCCL for a peer's failure meanwhile. On
    /// a timeout or an NCCL error it aborts the communicator, which also ends its kernels.
    pub(crate) fn wait(&mut self, events: &[CudaEvent], what: &str) -> Result<(), CpError> {
        let timeout = self.options.timeout;
        for e in events {
            let since = Instant::now();
            loop {
                match e.try_is_complete() {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(err) => {
                        self.comm.abort();
                        return Err(CpError::Cuda {
                            rank: self.rank(),
                            what: "running the kernels",
                            message: format!("{err:?}"),
                        });
                    }
                }
                // NCCL's own view: a peer's failure it noticed shows up here first.
                self.comm.poll()?;
                if since.elapsed() > timeout {
                    self.comm.abort();
                    return Err(CpError::Timeout {
                        rank: self.rank(),
                        what: what.into(),
                        after: timeout,
                    });
                }
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        Ok(())
    }

    // ---- memory and layout ----

    pub(crate) fn alloc<T: DeviceRepr>(&self, n: usize) -> Result<CudaSlice<T>, CpError> {
        // SAFETY: every buffer allocated here is written (a copy, a kernel, a receive) before
        // it is read.
        unsafe { self.compute.alloc::<T>(n.max(1)) }.map_err(|e| self.oom::<T>(n, e))
    }

    pub(crate) fn alloc_zeros<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        n: usize,
    ) -> Result<CudaSlice<T>, CpError> {
        self.compute
            .alloc_zeros::<T>(n.max(1))
            .map_err(|e| self.oom::<T>(n, e))
    }

    pub(crate) fn oom<T>(&self, n: usize, e: cudarc::driver::DriverError) -> CpError {
        CpError::Core(flashcore::Error::OutOfMemory {
            what: format!("context-parallel buffers on rank {} ({e:?})", self.rank()),
            bytes: n * std::mem::size_of::<T>(),
        })
    }

    /// `src` (`[batch, seq_local, row]` of `elem`-byte elements) into `dst[at..]` as
    /// `[parts][batch, c, row]`.
    pub(crate) fn split<T>(
        &self,
        p: &CpProblem,
        src: &CudaView<'_, u16>,
        dst: &mut CudaSlice<T>,
        at: usize,
        row: usize,
        elem: usize,
    ) -> Result<(), CpError> {
        let (s, _g1) = src.device_ptr(&self.compute);
        let (d, _g2) = dst.device_ptr_mut(&self.compute);
        self.move_parts(p, 1, row, elem, s, d + (at * elem) as u64, true)
    }

    pub(crate) fn unsplit(
        &self,
        p: &CpProblem,
        src: &CudaSlice<u16>,
        dst: &mut CudaViewMut<'_, u16>,
        row: usize,
        elem: usize,
    ) -> Result<(), CpError> {
        self.unsplit_view(p, &src.slice(..), dst, row, elem)
    }

    pub(crate) fn unsplit_view(
        &self,
        p: &CpProblem,
        src: &CudaView<'_, u16>,
        dst: &mut CudaViewMut<'_, u16>,
        row: usize,
        elem: usize,
    ) -> Result<(), CpError> {
        let (s, _g1) = src.device_ptr(&self.compute);
        let (d, _g2) = dst.device_ptr_mut(&self.compute);
        self.move_parts(p, 1, row, elem, d, s, false)
    }

    /// The LSE `[batch, heads, seq_local]` into `[parts][batch, heads, c]`: its rows are
    /// (batch, head) pairs.
    pub(crate) fn split_lse(
        &self,
        p: &CpProblem,
        src: &CudaView<'_, f32>,
        dst: &mut CudaSlice<f32>,
    ) -> Result<(), CpError> {
        let (s, _g1) = src.device_ptr(&self.compute);
        let (d, _g2) = dst.device_ptr_mut(&self.compute);
        self.move_parts(p, p.heads_q, 1, 4, s, d, true)
    }

    pub(crate) fn unsplit_lse(
        &self,
        p: &CpProblem,
        src: &CudaSlice<f32>,
        dst: &mut CudaViewMut<'_, f32>,
    ) -> Result<(), CpError> {
        let (s, _g1) = src.device_ptr(&self.compute);
        let (d, _g2) = dst.device_ptr_mut(&self.compute);
        self.move_parts(p, p.heads_q, 1, 4, d, s, false)
    }

    /// Every part between the local layout at `rows` and the split one at `split`. `heads` is 1
    /// for Q, K, V and O (`[batch, rows, inner]`), heads_q for the LSE (`[batch, heads, rows]`,
    /// `inner` 1); packed sequences have no batch axis.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn move_parts(
        &self,
        p: &CpProblem,
        heads: usize,
        inner: usize,
        elem: usize,
        rows: u64,
        split: u64,
        to_split: bool,
    ) -> Result<(), CpError> {
        let runs = match &p.seqlens_local {
            Some(_) => PackedParts {
                chunks: &p.chunks(),
                parts: p.sharding.parts(),
                outer: heads,
                inner,
                elem,
            }
            .runs(rows, split, to_split),
            None => {
                let g = Parts {
                    outer: p.batch * heads,
                    parts: p.sharding.parts(),
                    c: p.chunk(),
                    inner,
                    elem,
                };
                (0..g.parts)
                    .map(|part| g.runs(rows, split, part, to_split))
                    .collect()
            }
        };
        for r in runs {
            copy_runs(&self.compute, self.rank(), r)?;
        }
        Ok(())
    }
}

/// The ring's two slots at `step`: the one in hand and the one being received.
pub(crate) fn slots<'a, T>(step: usize, a: &'a mut T, b: &'a mut T) -> (&'a mut T, &'a mut T) {
    if step.is_multiple_of(2) {
        (a, b)
    } else {
        (b, a)
    }
}

pub(crate) fn note(kernels: &mut Vec<&'static str>, name: &'static str) {
    if !kernels.contains(&name) {
        kernels.push(name);
    }
}
