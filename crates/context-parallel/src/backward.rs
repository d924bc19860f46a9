//! The backward of one rank: each block's gradients with the global O and LSE, dQ summed here,
//! dK/dV summed into accumulators that travel with their shard (ring) or are reduce-scattered
//! (all-gather).

use std::ffi::c_void;

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, DevicePtr, DevicePtrMut};
use flashcore::{add_partial, cast_partial};
use flashcore::{BackwardTensors, TensorMut, TensorRef};

use crate::context::{check_tensors, note, slots, ContextParallel, CpRun, Shapes, Strategy};
use crate::error::CpError;
use crate::problem::CpProblem;
use crate::schedule::{blocks, kv_rank_at, Block};

/// What the backward's blocks read and accumulate into.
pub(crate) struct BackwardState {
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
            // The block's gradients into the f32 sums: dQ here, dK and dV in the shard's.
            let add = |acc: &mut CudaViewMut<'_, f32>, blk: &CudaSlice<u16>| {
                let blk = TensorRef {
                    data: blk.slice(..),
                    dtype: p.dtype,
                };
                add_partial(&self.device, &self.compute, acc, &blk, false)
            };
            add(&mut st.dq_acc.slice_mut(sh.q(b.q_part)), &st.dq_blk)?;
            add(&mut d_slot.slice_mut(sh.k(b.k_part)), &st.dk_blk)?;
            add(&mut d_slot.slice_mut(sh.v(b.k_part)), &st.dv_blk)?;
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
}
