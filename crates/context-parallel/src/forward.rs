//! The forward of one rank: its query parts against every K/V shard, by ring or all-gather,
//! the blocks' partial outputs merged by their LSE.

use cudarc::driver::{CudaSlice, CudaView, CudaViewMut};
use flashcore::{cast_partial, merge_partial, PartialShape};
use flashcore::{AttentionTensors, DeviceTables, TensorMut, TensorRef};

use crate::context::{check_tensors, note, slots, ContextParallel, CpRun, Shapes, Strategy};
use crate::error::CpError;
use crate::problem::CpProblem;
use crate::schedule::{blocks, kv_rank_at};

/// What the forward's blocks accumulate into.
pub(crate) struct ForwardState {
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

impl ContextParallel {
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
}
