//! Context-parallel forward and backward on one rank: the ring (K/V shards travel to rank + 1
//! while the kernels work on the shard in hand) and the all-gather (every shard gathered first).

use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{
    CudaEvent, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr,
    SyncOnDrop, ValidAsZeroBits,
};
use flashcore::{add_partial, cast_partial, merge_partial, PartialShape};
use flashcore::{AttentionTensors, BackwardTensors, Device, DeviceTables, TensorMut, TensorRef};

use crate::copy::{copy_runs, PackedParts, Parts};
use crate::error::CpError;
use crate::nccl::{Bytes, Communicator, UniqueId};
use crate::problem::CpProblem;
use crate::schedule::{blocks, kv_rank_at, Block};

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
    device: Device,
    compute: Arc<CudaStream>,
    comm_stream: Arc<CudaStream>,
    comm: Communicator,
    options: CpOptions,
}

/// Element counts of one part of each tensor.
#[derive(Clone, Copy, Debug)]
struct Shapes {
    parts: usize,
    q_part: usize,
    kv_part: usize,
    lse_part: usize,
}

impl Shapes {
    fn of(p: &CpProblem) -> Self {
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
    fn shard(&self) -> usize {
        2 * self.parts * self.kv_part
    }
    fn q(&self, part: usize) -> std::ops::Range<usize> {
        part * self.q_part..(part + 1) * self.q_part
    }
    fn lse(&self, part: usize) -> std::ops::Range<usize> {
        part * self.lse_part..(part + 1) * self.lse_part
    }
    fn k(&self, part: usize) -> std::ops::Range<usize> {
        part * self.kv_part..(part + 1) * self.kv_part
    }
    fn v(&self, part: usize) -> std::ops::Range<usize> {
        (self.parts + part) * self.kv_part..(self.parts + part + 1) * self.kv_part
    }
}

/// A buffer's address for NCCL, with the guard that records its use on the stream.
fn bytes<'a, T>(s: &'a CudaSlice<T>, stream: &'a CudaStream) -> (Bytes, SyncOnDrop<'a>) {
    let (ptr, g) = s.device_ptr(stream);
    (
        Bytes {
            ptr,
            len: s.len() * std::mem::size_of::<T>(),
        },
        g,
    )
}
fn bytes_mut<'a, T>(s: &'a mut CudaSlice<T>, stream: &'a CudaStream) -> (Bytes, SyncOnDrop<'a>) {
    let len = s.len() * std::mem::size_of::<T>();
    let (ptr, g) = s.device_ptr_mut(stream);
    (Bytes { ptr, len }, g)
}

/// Lengths and dtypes of a call's tensors (name, elements, elements wanted, dtype) and of its
/// f32 LSE (name, elements; it wants `p.lse_len()`).
fn check_tensors(
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

/// What the forward's blocks accumulate into.
struct ForwardState {
    /// The blocks' `cu_seqlens` (packed sequences only).
    cu: Option<CudaSlice<i32>>,
    q_parts: CudaSlice<u16>,
    o_blk: CudaSlice<u16>,
    lse_blk: CudaSlice<f32>,
    acc_o: CudaSlice<f32>,
    acc_lse: CudaSlice<f32>,
    first: Vec<bool>,
    kernels: Vec<&'static str>,
}

/// What the backward's blocks read and accumulate into.
struct BackwardState {
    q_parts: CudaSlice<u16>,
    o_parts: CudaSlice<u16>,
    do_parts: CudaSlice<u16>,
    lse_parts: CudaSlice<f32>,
    dq_acc: CudaSlice<f32>,
    dq_blk: CudaSlice<u16>,
    dk_blk: CudaSlice<u16>,
    dv_blk: CudaSlice<u16>,
    kernels: Vec<&'static str>,
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

    /// O (the problem's dtype) and the LSE of the local queries against the whole sequence.
    /// Collective; returns once the result is on the device (the watchdog waits for it).
    pub fn forward(
        &mut self,
        p: &CpProblem,
        q: &TensorRef<'_>,
        k: &TensorRef<'_>,
        v: &TensorRef<'_>,
        o: &mut TensorMut<'_>,
        lse: &mut CudaViewMut<'_, f32>,
    ) -> Result<CpRun, CpError> {
        p.validate(self.world())?;
        check_tensors(
            p,
            &[
                ("q", q.data.len(), p.q_len(), q.dtype),
                ("k", k.data.len(), p.kv_len(), k.dtype),
                ("v", v.data.len(), p.kv_len(), v.dtype),
                ("o", o.data.len(), p.q_len(), o.dtype),
            ],
            &[("lse", lse.len())],
        )?;
        let strategy = self.strategy_for(p);
        let (world, rank) = (self.world(), self.rank());
        let sh = Shapes::of(p);
        let mut own = self.own_shard(p, &sh, k, v)?;
        let cu = match p.seqlens_local {
            Some(_) => Some(
                self.compute
                    .clone_htod(&p.block_cu_seqlens())
                    .map_err(self.cuda_err("copying cu_seqlens"))?,
            ),
            None => None,
        };
        let mut st = ForwardState {
            cu,
            q_parts: self.parts_of(p, &sh, q)?,
            o_blk: self.alloc(sh.q_part)?,
            lse_blk: self.alloc(sh.lse_part)?,
            acc_o: self.alloc(sh.parts * sh.q_part)?,
            acc_lse: self.alloc(sh.parts * sh.lse_part)?,
            first: vec![true; sh.parts],
            kernels: Vec::new(),
        };

        let mut progress = Vec::new();
        match strategy {
            Strategy::Ring | Strategy::Auto => {
                let mut other = self.alloc::<u16>(sh.shard())?;
                for step in 0..world {
                    let (cur, nxt) = slots(step, &mut own, &mut other);
                    if step + 1 < world {
                        self.pass_on(cur, nxt, "a ring step (K/V)")?;
                    }
                    self.forward_blocks(
                        p,
                        &sh,
                        kv_rank_at(rank, world, step),
                        &cur.slice(..),
                        &mut st,
                    )?;
                    progress.push(self.record_compute()?);
                    if step + 1 < world {
                        self.compute_waits_comm()?;
                    }
                }
                self.wait(&progress, "the ring forward")?;
            }
            Strategy::AllGather => {
                let mut all = self.alloc::<u16>(world * sh.shard())?;
                self.gather(&own, &mut all)?;
                for step in 0..world {
                    let j = kv_rank_at(rank, world, step);
                    let slot = all.slice(j * sh.shard()..(j + 1) * sh.shard());
                    self.forward_blocks(p, &sh, j, &slot, &mut st)?;
                    progress.push(self.record_compute()?);
                }
                self.wait(&progress, "the all-gather forward")?;
            }
        }

        // O: the merged accumulator in the problem's dtype, back in the local layout.
        let mut o_parts = self.alloc::<u16>(sh.parts * sh.q_part)?;
        cast_partial(
            &self.device,
            &self.compute,
            &st.acc_o.slice(..),
            &mut TensorMut {
                data: o_parts.slice_mut(..),
                dtype: p.dtype,
            },
        )?;
        self.unsplit(p, &o_parts, &mut o.data, p.heads_q * p.head_dim, 2)?;
        self.unsplit_lse(p, &st.acc_lse, lse)?;
        let done = self.record_compute()?;
        self.wait(&[done], "writing O and the LSE")?;
        Ok(CpRun {
            strategy,
            kernels: st.kernels,
        })
    }

    /// dQ, dK, dV of the local shard, from the forward's O and LSE (this rank's, as
    /// [`ContextParallel::forward`] returned them) and dO. Collective.
    #[allow(clippy::too_many_arguments)]
    pub fn backward(
        &mut self,
        p: &CpProblem,
        q: &TensorRef<'_>,
        k: &TensorRef<'_>,
        v: &TensorRef<'_>,
        o: &TensorRef<'_>,
        d_o: &TensorRef<'_>,
        lse: &CudaView<'_, f32>,
        dq: &mut TensorMut<'_>,
        dk: &mut TensorMut<'_>,
        dv: &mut TensorMut<'_>,
    ) -> Result<CpRun, CpError> {
        p.validate(self.world())?;
        if p.seqlens_local.is_some() {
            return Err(CpError::Invalid(
                "the backward takes dense shards: packed (varlen) sequences have no backward \
                 kernel yet"
                    .into(),
            ));
        }
        check_tensors(
            p,
            &[
                ("q", q.data.len(), p.q_len(), q.dtype),
                ("k", k.data.len(), p.kv_len(), k.dtype),
                ("v", v.data.len(), p.kv_len(), v.dtype),
                ("o", o.data.len(), p.q_len(), o.dtype),
                ("d_o", d_o.data.len(), p.q_len(), d_o.dtype),
                ("dq", dq.data.len(), p.q_len(), dq.dtype),
                ("dk", dk.data.len(), p.kv_len(), dk.dtype),
                ("dv", dv.data.len(), p.kv_len(), dv.dtype),
            ],
            &[("lse", lse.len())],
        )?;
        let strategy = self.strategy_for(p);
        let (world, rank) = (self.world(), self.rank());
        let sh = Shapes::of(p);
        let row = |heads: usize| heads * p.head_dim;
        let mut own = self.own_shard(p, &sh, k, v)?;
        let q_parts = self.parts_of(p, &sh, q)?;
        let o_parts = self.parts_of(p, &sh, o)?;
        let do_parts = self.parts_of(p, &sh, d_o)?;
        let mut lse_parts = self.alloc::<f32>(sh.parts * sh.lse_part)?;
        self.split_lse(p, lse, &mut lse_parts)?;
        let mut st = BackwardState {
            q_parts,
            o_parts,
            do_parts,
            lse_parts,
            dq_acc: self.alloc_zeros(sh.parts * sh.q_part)?,
            dq_blk: self.alloc(sh.q_part)?,
            dk_blk: self.alloc(sh.kv_part)?,
            dv_blk: self.alloc(sh.kv_part)?,
            kernels: Vec::new(),
        };

        let mut progress = Vec::new();
        // This shard's dK and dV (f32, K's parts then V's), summed over every rank's queries.
        let d_own: CudaSlice<f32> = match strategy {
            Strategy::Ring | Strategy::Auto => {
                // K/V and their gradient accumulators travel together: at step s this rank adds
                // its queries' share to the accumulator of the shard in hand and passes both on;
                // after `world` passes each accumulator is back with its shard's owner.
                let mut other = self.alloc::<u16>(sh.shard())?;
                let mut d_cur = self.alloc_zeros::<f32>(sh.shard())?;
                let mut d_other = self.alloc::<f32>(sh.shard())?;
                for step in 0..world {
                    let (cur, nxt) = slots(step, &mut own, &mut other);
                    let (dc, dn) = slots(step, &mut d_cur, &mut d_other);
                    if step + 1 < world {
                        self.pass_on(cur, nxt, "a ring step (K/V)")?;
                    }
                    let kv_rank = kv_rank_at(rank, world, step);
                    self.backward_blocks(p, &sh, kv_rank, &cur.slice(..), dc, &mut st)?;
                    progress.push(self.record_compute()?);
                    // The accumulator leaves once this step's kernels have added to it.
                    self.pass_on(dc, dn, "a ring step (dK/dV)")?;
                    self.compute_waits_comm()?;
                }
                self.wait(&progress, "the ring backward")?;
                if world % 2 == 0 {
                    d_cur
                } else {
                    d_other
                }
            }
            Strategy::AllGather => {
                let mut all = self.alloc::<u16>(world * sh.shard())?;
                self.gather(&own, &mut all)?;
                let mut d_all = self.alloc_zeros::<f32>(world * sh.shard())?;
                for step in 0..world {
                    let j = kv_rank_at(rank, world, step);
                    let r = j * sh.shard()..(j + 1) * sh.shard();
                    let slot = all.slice(r.clone());
                    let mut d_slot = d_all.slice_mut(r);
                    self.backward_blocks_view(p, &sh, j, &slot, &mut d_slot, &mut st)?;
                    progress.push(self.record_compute()?);
                }
                let mut d_mine = self.alloc::<f32>(sh.shard())?;
                self.comm_waits_compute()?;
                {
                    let (send, _g1) = d_all.device_ptr(&self.comm_stream);
                    let (recv, _g2) = d_mine.device_ptr_mut(&self.comm_stream);
                    let (s, t) = (
                        self.comm_stream.cu_stream() as *mut c_void,
                        self.options.timeout,
                    );
                    self.comm.reduce_scatter_f32(s, send, recv, sh.shard(), t)?;
                }
                self.compute_waits_comm()?;
                self.wait(&progress, "the all-gather backward")?;
                d_mine
            }
        };

        // Gradients in the problem's dtype, back in the local layout.
        let mut dq_parts = self.alloc::<u16>(sh.parts * sh.q_part)?;
        cast_partial(
            &self.device,
            &self.compute,
            &st.dq_acc.slice(..),
            &mut TensorMut {
                data: dq_parts.slice_mut(..),
                dtype: p.dtype,
            },
        )?;
        self.unsplit(p, &dq_parts, &mut dq.data, row(p.heads_q), 2)?;
        let mut dkv_parts = self.alloc::<u16>(sh.shard())?;
        cast_partial(
            &self.device,
            &self.compute,
            &d_own.slice(..),
            &mut TensorMut {
                data: dkv_parts.slice_mut(..),
                dtype: p.dtype,
            },
        )?;
        let (dk_parts, dv_parts) = (
            dkv_parts.slice(..sh.parts * sh.kv_part),
            dkv_parts.slice(sh.parts * sh.kv_part..),
        );
        self.unsplit_view(p, &dk_parts, &mut dk.data, row(p.heads_kv), 2)?;
        self.unsplit_view(p, &dv_parts, &mut dv.data, row(p.heads_kv), 2)?;
        let done = self.record_compute()?;
        self.wait(&[done], "writing dQ, dK and dV")?;
        Ok(CpRun {
            strategy,
            kernels: st.kernels,
        })
    }

    /// This rank's K/V shard as it travels: K's parts, then V's.
    fn own_shard(
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
    fn parts_of(
        &self,
        p: &CpProblem,
        sh: &Shapes,
        t: &TensorRef<'_>,
    ) -> Result<CudaSlice<u16>, CpError> {
        let mut out = self.alloc::<u16>(sh.parts * sh.q_part)?;
        self.split(p, &t.data, &mut out, 0, p.heads_q * p.head_dim, 2)?;
        Ok(out)
    }

    fn forward_blocks(
        &self,
        p: &CpProblem,
        sh: &Shapes,
        kv_rank: usize,
        slot: &CudaView<'_, u16>,
        st: &mut ForwardState,
    ) -> Result<(), CpError> {
        // Packed sequences merge as one batch of all their rows ([rows, heads, dim], LSE
        // [heads, rows]).
        let (batch, rows) = match &p.seqlens_local {
            Some(_) => (1, p.chunks().iter().sum()),
            None => (p.batch, p.chunk()),
        };
        let shape = PartialShape {
            batch,
            rows,
            heads: p.heads_q,
            width: p.head_dim,
            dtype: p.dtype,
        };
        for b in blocks(p.sharding, p.causal, self.rank(), kv_rank, self.world()) {
            let prob = p.block_problem(b.causal);
            let mut t = AttentionTensors::new(
                p.dtype,
                st.q_parts.slice(sh.q(b.q_part)),
                slot.slice(sh.k(b.k_part)),
                slot.slice(sh.v(b.k_part)),
                st.o_blk.slice_mut(..),
                st.lse_blk.slice_mut(..),
            )
            .with_tables(DeviceTables {
                cu_seqlens_q: st.cu.as_ref().map(|c| c.slice(..)),
                cu_seqlens_k: st.cu.as_ref().map(|c| c.slice(..)),
                ..DeviceTables::default()
            });
            let (name, ()) = flashcore::first_that_takes(flashcore::kernels(), |k| {
                k.forward_on(&self.device, &self.compute, &prob, &mut t)
            })?;
            note(&mut st.kernels, name);
            merge_partial(
                &self.device,
                &self.compute,
                &shape,
                &mut st.acc_o.slice_mut(sh.q(b.q_part)),
                &mut st.acc_lse.slice_mut(sh.lse(b.q_part)),
                &TensorRef {
                    data: st.o_blk.slice(..),
                    dtype: p.dtype,
                },
                &st.lse_blk.slice(..),
                st.first[b.q_part],
            )?;
            st.first[b.q_part] = false;
        }
        Ok(())
    }

    fn backward_blocks(
        &self,
        p: &CpProblem,
        sh: &Shapes,
        kv_rank: usize,
        slot: &CudaView<'_, u16>,
        d_slot: &mut CudaSlice<f32>,
        st: &mut BackwardState,
    ) -> Result<(), CpError> {
        self.backward_blocks_view(p, sh, kv_rank, slot, &mut d_slot.slice_mut(..), st)
    }

    fn backward_blocks_view(
        &self,
        p: &CpProblem,
        sh: &Shapes,
        kv_rank: usize,
        slot: &CudaView<'_, u16>,
        d_slot: &mut CudaViewMut<'_, f32>,
        st: &mut BackwardState,
    ) -> Result<(), CpError> {
        for b in blocks(p.sharding, p.causal, self.rank(), kv_rank, self.world()) {
            self.backward_block(p, sh, &b, slot, st)?;
            let dt = p.dtype;
            add_partial(
                &self.device,
                &self.compute,
                &mut st.dq_acc.slice_mut(sh.q(b.q_part)),
                &TensorRef {
                    data: st.dq_blk.slice(..),
                    dtype: dt,
                },
                false,
            )?;
            add_partial(
                &self.device,
                &self.compute,
                &mut d_slot.slice_mut(sh.k(b.k_part)),
                &TensorRef {
                    data: st.dk_blk.slice(..),
                    dtype: dt,
                },
                false,
            )?;
            add_partial(
                &self.device,
                &self.compute,
                &mut d_slot.slice_mut(sh.v(b.k_part)),
                &TensorRef {
                    data: st.dv_blk.slice(..),
                    dtype: dt,
                },
                false,
            )?;
        }
        Ok(())
    }

    fn backward_block(
        &self,
        p: &CpProblem,
        sh: &Shapes,
        b: &Block,
        slot: &CudaView<'_, u16>,
        st: &mut BackwardState,
    ) -> Result<(), CpError> {
        let prob = p.block_problem(b.causal);
        let dt = p.dtype;
        let mut t = BackwardTensors {
            q: TensorRef {
                data: st.q_parts.slice(sh.q(b.q_part)),
                dtype: dt,
            },
            k: TensorRef {
                data: slot.slice(sh.k(b.k_part)),
                dtype: dt,
            },
            v: TensorRef {
                data: slot.slice(sh.v(b.k_part)),
                dtype: dt,
            },
            o: TensorRef {
                data: st.o_parts.slice(sh.q(b.q_part)),
                dtype: dt,
            },
            d_o: TensorRef {
                data: st.do_parts.slice(sh.q(b.q_part)),
                dtype: dt,
            },
            lse: st.lse_parts.slice(sh.lse(b.q_part)),
            dq: TensorMut {
                data: st.dq_blk.slice_mut(..),
                dtype: dt,
            },
            dk: TensorMut {
                data: st.dk_blk.slice_mut(..),
                dtype: dt,
            },
            dv: TensorMut {
                data: st.dv_blk.slice_mut(..),
                dtype: dt,
            },
        };
        let deterministic = self.options.deterministic;
        let kernels = flashcore::backward_kernels()
            .into_iter()
            .filter(|k| !deterministic || k.deterministic());
        let (name, ()) = flashcore::first_backward_that_takes(kernels, |k| {
            k.backward(&self.device, &prob, &mut t)
        })?;
        note(&mut st.kernels, name);
        Ok(())
    }

    // ---- streams, NCCL and the watchdog ----

    fn cuda_err(&self, what: &'static str) -> impl Fn(cudarc::driver::DriverError) -> CpError {
        let rank = self.rank();
        move |e| CpError::Cuda {
            rank,
            what,
            message: format!("{e:?}"),
        }
    }

    fn comm_waits_compute(&self) -> Result<(), CpError> {
        self.comm_stream
            .join(&self.compute)
            .map_err(self.cuda_err("ordering the streams"))
    }
    fn compute_waits_comm(&self) -> Result<(), CpError> {
        self.compute
            .join(&self.comm_stream)
            .map_err(self.cuda_err("ordering the streams"))
    }

    fn record_compute(&self) -> Result<CudaEvent, CpError> {
        self.compute
            .record_event(None)
            .map_err(self.cuda_err("recording an event"))
    }

    /// Sends `cur` to the next rank and receives `nxt` from the previous one, on the
    /// communication stream, once the compute stream's work so far (which read `nxt`, or wrote
    /// `cur`) is done.
    fn pass_on<T>(
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

    fn exchange(&mut self, sends: &[Bytes], recvs: &[Bytes], what: &str) -> Result<(), CpError> {
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
    fn gather(&mut self, own: &CudaSlice<u16>, all: &mut CudaSlice<u16>) -> Result<(), CpError> {
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
    fn wait(&mut self, events: &[CudaEvent], what: &str) -> Result<(), CpError> {
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

    fn alloc<T: DeviceRepr>(&self, n: usize) -> Result<CudaSlice<T>, CpError> {
        // SAFETY: every buffer allocated here is written (a copy, a kernel, a receive) before
        // it is read.
        unsafe { self.compute.alloc::<T>(n.max(1)) }.map_err(|e| self.oom::<T>(n, e))
    }

    fn alloc_zeros<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        n: usize,
    ) -> Result<CudaSlice<T>, CpError> {
        self.compute
            .alloc_zeros::<T>(n.max(1))
            .map_err(|e| self.oom::<T>(n, e))
    }

    fn oom<T>(&self, n: usize, e: cudarc::driver::DriverError) -> CpError {
        CpError::Core(flashcore::Error::OutOfMemory {
            what: format!("context-parallel buffers on rank {} ({e:?})", self.rank()),
            bytes: n * std::mem::size_of::<T>(),
        })
    }

    /// `src` (`[batch, seq_local, row]` of `elem`-byte elements) into `dst[at..]` as
    /// `[parts][batch, c, row]`.
    fn split<T>(
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

    fn unsplit(
        &self,
        p: &CpProblem,
        src: &CudaSlice<u16>,
        dst: &mut CudaViewMut<'_, u16>,
        row: usize,
        elem: usize,
    ) -> Result<(), CpError> {
        self.unsplit_view(p, &src.slice(..), dst, row, elem)
    }

    fn unsplit_view(
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
    fn split_lse(
        &self,
        p: &CpProblem,
        src: &CudaView<'_, f32>,
        dst: &mut CudaSlice<f32>,
    ) -> Result<(), CpError> {
        let (s, _g1) = src.device_ptr(&self.compute);
        let (d, _g2) = dst.device_ptr_mut(&self.compute);
        self.move_parts(p, p.heads_q, 1, 4, s, d, true)
    }

    fn unsplit_lse(
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
    fn move_parts(
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
fn slots<'a, T>(step: usize, a: &'a mut T, b: &'a mut T) -> (&'a mut T, &'a mut T) {
    if step.is_multiple_of(2) {
        (a, b)
    } else {
        (b, a)
    }
}

fn note(kernels: &mut Vec<&'static str>, name: &'static str) {
    if !kernels.contains(&name) {
        kernels.push(name);
    }
}
