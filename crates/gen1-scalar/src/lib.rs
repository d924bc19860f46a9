//! Generation 1: the scalar baseline (`kernels/gen1_scalar.cu`).
//!
//! One block of 128 threads per query row, online softmax with f32 state, a shared-memory output
//! accumulator, no tensor cores. It takes every dtype, head dim 1..=512, causal, GQA, any
//! lengths and any strides, and every inference mode (varlen, KV cache, pages, windows, softcap,
//! ALiBi: `docs/MODES.md`): it is the GPU-side correctness anchor the faster generations are
//! compared with.
//!
//! It is also the scalar backward (`kernels/gen1_scalar_bwd.cu`, [`AttentionBackward`]): D per
//! row into the workspace, then one block per (batch, kv head, key) for dK and dV and one per
//! (batch, head, query row) for dQ, deterministic (no atomics). Dense storage, every dtype,
//! head dim 1..=256, causal, sliding windows, softcap and ALiBi (`FC_BWD_MODES` builds), GQA,
//! any lengths and strides.

use flashcore_core::{
    Attention, AttentionBackward, AttentionProblem, Capabilities, DType, DeviceInfo, HeadDims,
    KernelLaunch, LaunchPlan, Layout, ModeSupport, Unsupported,
};

/// Threads per block; must match SCALAR_THREADS in the kernel.
const THREADS_PER_ROW: u32 = 128;
/// The forward's largest head dim (SCALAR_MAX_HEAD_DIM): 512, so that every head dim a model
/// uses has at least this correct path.
const MAX_HEAD_DIM: usize = 512;
/// The backward's (SCALAR_BWD_MAX_HEAD_DIM, its per-thread columns).
const BWD_MAX_HEAD_DIM: usize = 256;

flashcore_core::attention_generation! {
    pub struct Scalar: "scalar",
    plan: |problem, _device| {
        let rows = problem.batch * problem.heads_q * problem.seq_q;
        Ok(LaunchPlan::single(KernelLaunch::per_item(
            "gen1_scalar.cu",
            "attention_scalar",
            rows,
            THREADS_PER_ROW,
        )))
    },
    capabilities: Capabilities {
        dtypes: &DType::ALL,
        head_dims: HeadDims::Range {
            min: 1,
            max: MAX_HEAD_DIM,
            multiple_of: 1,
        },
        causal: true,
        gqa: true,
        layouts: &Layout::ALL,
        min_compute_capability: (8, 0),
        alignment_elems: 1,
        modes: ModeSupport::ALL,
        distinct_head_dim_v: false,
        decode_only: None,
    },
}

/// Threads per block of the backward kernels; must match SCALAR_BWD_THREADS.
const BWD_THREADS: u32 = 128;

impl AttentionBackward for Scalar {
    fn name(&self) -> &'static str {
        "scalar"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            modes: flashcore_core::backward::BACKWARD_MODES,
            head_dims: HeadDims::Range {
                min: 1,
                max: BWD_MAX_HEAD_DIM,
                multiple_of: 1,
            },
            ..Attention::capabilities(self)
        }
    }

    /// D (one thread per query row, into the workspace), dK/dV (one block per key), dQ (one
    /// block per query row). The workspace holds D only, `batch · heads_q · seq_q` words,
    /// written whole by the first launch before the others read it: no counters.
    fn plan_backward(
        &self,
        problem: &AttentionProblem,
        _device: &DeviceInfo,
    ) -> Result<LaunchPlan, Unsupported> {
        AttentionBackward::capabilities(self).require_head_dim("scalar", problem.head_dim)?;
        let rows = problem.batch * problem.heads_q * problem.seq_q;
        let keys = problem.batch * problem.heads_kv * problem.seq_k;
        const SRC: &str = "gen1_scalar_bwd.cu";
        // Windows, softcap and ALiBi: the modes build of the dK/dV and dQ kernels. Varlen: of
        // the D pass too (its rows are packed).
        let modes = |l: KernelLaunch| {
            l.with_defines(flashcore_core::backward::backward_mode_defines(problem))
                .into_owned()
        };
        let dot = KernelLaunch::per_thread(SRC, "bwd_scalar_dot_do_o", rows, BWD_THREADS);
        let dot = if flashcore_core::backward::is_varlen(problem) {
            modes(dot)
        } else {
            dot
        };
        Ok(LaunchPlan {
            launches: vec![
                dot,
                modes(KernelLaunch::per_item(
                    SRC,
                    "bwd_scalar_dk_dv",
                    keys,
                    BWD_THREADS,
                )),
                modes(KernelLaunch::per_item(
                    SRC,
                    "bwd_scalar_dq",
                    rows,
                    BWD_THREADS,
                )),
            ],
            workspace_f32: rows,
            workspace_counters: 0,
            num_splits: 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backward_plan_is_three_launches_with_d_in_the_workspace() {
        let h100 = DeviceInfo::synthetic_h100();
        let p = AttentionProblem::new(2, 8, 100, 64).with_kv(2, 300);
        let plan = Scalar.plan_backward(&p, &h100).unwrap();
        assert_eq!(
            plan.entries(),
            ["bwd_scalar_dot_do_o", "bwd_scalar_dk_dv", "bwd_scalar_dq"]
        );
        assert_eq!(
            plan.launches[0].grid.0,
            (2 * 8 * 100usize).div_ceil(128) as u32
        );
        assert_eq!(plan.launches[1].grid.0, 2 * 2 * 300);
        assert_eq!(plan.launches[2].grid.0, 2 * 8 * 100);
        assert_eq!((plan.workspace_f32, plan.workspace_counters), (1600, 0));
        assert!(Scalar
            .supports_backward(&AttentionProblem::new(1, 1, 8, 257), &h100)
            .is_err());
    }

    /// Windows, softcap and ALiBi take the modes build of the two kernels that recompute P; a
    /// dense problem (causal too) keeps the dense build, and storage modes are refused.
    #[test]
    fn score_modes_take_the_modes_build() {
        use flashcore_core::{AlibiSlopes, Modes};
        let h100 = DeviceInfo::synthetic_h100();
        let modes = |p: &AttentionProblem| -> Vec<bool> {
            let plan = Scalar.plan_backward(p, &h100).unwrap();
            plan.launches
                .iter()
                .map(|l| l.defines.contains(&("FC_BWD_MODES".into(), "1".into())))
                .collect()
        };
        let dense = AttentionProblem::new(2, 8, 100, 64).with_causal(true);
        assert_eq!(modes(&dense), [false; 3]);
        for m in [
            Modes {
                window_left: Some(3),
                ..Modes::default()
            },
            Modes {
                softcap: Some(30.0),
                ..Modes::default()
            },
            Modes {
                alibi: Some(AlibiSlopes::PerBatchHead),
                ..Modes::default()
            },
        ] {
            let p = dense.clone().with_modes(m);
            Scalar.supports_backward(&p, &h100).unwrap();
            assert_eq!(modes(&p), [false, true, true]);
        }
        // Varlen: every launch reads packed rows, the D pass among them.
        let varlen = dense.clone().with_modes(Modes {
            packed_q: Some(150),
            kv: flashcore_core::KvStorage::Packed { total_k: 150 },
            ..Modes::default()
        });
        Scalar.supports_backward(&varlen, &h100).unwrap();
        assert_eq!(modes(&varlen), [true; 3]);
        let plan = Scalar.plan_backward(&varlen, &h100).unwrap();
        let varlen_define = ("FC_BWD_VARLEN".to_string(), "1".to_string());
        assert!(plan
            .launches
            .iter()
            .all(|l| l.defines.contains(&varlen_define)));
        let paged = dense.with_modes(Modes {
            seqused_k: true,
            ..Modes::default()
        });
        assert!(Scalar.supports_backward(&paged, &h100).is_err());
    }

    #[test]
    fn one_block_per_row_even_past_the_grid_y_limit() {
        let p = AttentionProblem::new(4200, 16, 64, 64);
        let plan = Scalar.plan(&p, &DeviceInfo::synthetic_h100()).unwrap();
        assert_eq!(plan.launches[0].grid.0 as usize, 4200 * 16 * 64);
    }

    #[test]
    fn head_dims_past_512_are_unsupported_with_a_reason_and_the_backward_stops_at_256() {
        let h100 = DeviceInfo::synthetic_h100();
        let err = Scalar
            .supports(&AttentionProblem::new(1, 1, 8, 513), &h100)
            .unwrap_err();
        assert!(err.reason.contains("head_dim 513"), "{err}");
        Scalar
            .supports(&AttentionProblem::new(1, 1, 8, 512), &h100)
            .unwrap();
        let err = Scalar
            .plan_backward(&AttentionProblem::new(1, 1, 8, 257), &h100)
            .unwrap_err();
        assert!(err.reason.contains("head_dim 257"), "{err}");
    }
}
