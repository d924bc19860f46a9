//! Generation 1: the scalar baseline (`kernels/gen1_scalar.cu`).
//!
//! One block of 128 threads per query row, online softmax with f32 state, a shared-memory output
//! accumulator, no tensor cores. It takes every dtype, head dim 1..=256, causal, GQA, any
//! lengths and any strides, and every inference mode (varlen, KV cache, pages, windows, softcap,
//! ALiBi: `docs/MODES.md`): it is the GPU-side correctness anchor the faster generations are
//! compared with.

use flashcore_core::launch::linear_grid;
use flashcore_core::{
    Attention, AttentionProblem, Capabilities, DType, DeviceInfo, HeadDims, KernelLaunch,
    LaunchPlan, Layout, ModeSupport, Unsupported,
};

/// Threads per block; must match SCALAR_THREADS in the kernel.
const THREADS_PER_ROW: u32 = 128;

#[derive(Clone, Copy, Debug, Default)]
pub struct Scalar;

impl Attention for Scalar {
    fn name(&self) -> &'static str {
        "scalar"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            dtypes: &DType::ALL,
            head_dims: HeadDims::Range {
                min: 1,
                max: 256,
                multiple_of: 1,
            },
            causal: true,
            gqa: true,
            layouts: &Layout::ALL,
            min_compute_capability: (8, 0),
            alignment_elems: 1,
            modes: ModeSupport::ALL,
        }
    }

    fn plan(
        &self,
        problem: &AttentionProblem,
        _device: &DeviceInfo,
    ) -> Result<LaunchPlan, Unsupported> {
        let rows = problem.batch * problem.heads_q * problem.seq_q;
        Ok(LaunchPlan::single(KernelLaunch {
            source: "gen1_scalar.cu",
            entry: "attention_scalar",
            defines: vec![],
            grid: (linear_grid(rows), 1, 1),
            block: (THREADS_PER_ROW, 1, 1),
            dynamic_smem_bytes: 0,
            tensor_maps: None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_block_per_row_even_past_the_grid_y_limit() {
        let p = AttentionProblem::new(4200, 16, 64, 64);
        let plan = Scalar.plan(&p, &DeviceInfo::synthetic_h100()).unwrap();
        assert_eq!(plan.launches[0].grid.0 as usize, 4200 * 16 * 64);
    }

    #[test]
    fn head_dims_past_256_are_unsupported_with_a_reason() {
        let p = AttentionProblem::new(1, 1, 8, 257);
        let err = Scalar
            .supports(&p, &DeviceInfo::synthetic_h100())
            .unwrap_err();
        assert!(err.reason.contains("head_dim 257"), "{err}");
    }
}
