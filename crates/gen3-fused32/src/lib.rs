//! Generation 3: fused attention on tensor cores with 32 x 32 tiles (`kernels/gen3_fused32.cu`).
//!
//! One block of 2 warps per 32-row query tile; each warp computes S = Q·Kᵀ for its 16 rows with
//! mma.sync m16n8k16, runs the online softmax on the accumulator registers and accumulates
//! O += P·V in f32 registers, one pass over K/V in 32-key tiles. Q, K and V tiles live in XOR-
//! swizzled static shared memory (3 · 32 · D · 2 bytes, 48 KB at D = 256: no opt-in), filled with
//! cp.async and read with ldmatrix; nothing is pipelined yet (that is generation 4).
//! See `docs/generations/gen3-fused32.md`.

use flashcore_core::{
    Attention, AttentionProblem, Capabilities, DeviceInfo, HeadDims, KernelLaunch, LaunchPlan,
    Unsupported,
};

/// Head dims the kernel is compiled for (FC_HEAD_DIM); each is its own module.
const HEAD_DIMS: &[usize] = &[32, 64, 96, 128, 256];
/// Query rows per block (`q_tile_rows` in the kernel).
const Q_TILE_ROWS: usize = 32;
/// Key rows per K/V tile (`kv_tile_rows` in the kernel).
const KV_TILE_ROWS: usize = 32;
/// Warps per block (`num_warps` in the kernel).
const WARPS: u32 = 2;

/// Static shared memory of the kernel: Q, K and V tiles of `head_dim` elem_t each.
fn static_smem_bytes(head_dim: usize) -> usize {
    (Q_TILE_ROWS + 2 * KV_TILE_ROWS) * head_dim * 2
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Fused32;

impl Attention for Fused32 {
    fn name(&self) -> &'static str {
        "fused32"
    }

    fn capabilities(&self) -> Capabilities {
        // mma.sync bf16, ldmatrix and cp.async: sm_80
        Capabilities::all_features(HeadDims::List(HEAD_DIMS), (8, 0))
    }

    fn plan(
        &self,
        problem: &AttentionProblem,
        device: &DeviceInfo,
    ) -> Result<LaunchPlan, Unsupported> {
        let d = problem.head_dim;
        self.capabilities().require_head_dim(self.name(), d)?;
        let smem = static_smem_bytes(d);
        if smem > device.max_shared_memory_per_block as usize {
            return Err(Unsupported::new(
                self.name(),
                format!(
                    "needs {smem} bytes of static shared memory per block (3 tiles of 32 x {d}), \
                     the device allows {}",
                    device.max_shared_memory_per_block
                ),
            ));
        }
        Ok(LaunchPlan::single(KernelLaunch::per_q_tile(
            "gen3_fused32.cu",
            "attention_fused32",
            vec![("FC_HEAD_DIM".into(), d.to_string())],
            problem,
            Q_TILE_ROWS,
            WARPS,
            0,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_head_dim_fits_the_static_48_kb() {
        for &d in HEAD_DIMS {
            assert!(static_smem_bytes(d) <= 48 * 1024, "d={d}");
            let p = AttentionProblem::new(1, 1, 8, d);
            assert!(
                Fused32.supports(&p, &DeviceInfo::synthetic_sm86()).is_ok(),
                "d={d}"
            );
        }
        assert_eq!(static_smem_bytes(256), 49152);
    }
}
