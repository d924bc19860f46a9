//! Generation 3: fused attention on tensor cores with 32 x 32 tiles (`kernels/gen3_fused32.cu`).
//!
//! One block of 2 warps per 32-row query tile; each warp computes S = Q·Kᵀ for its 16 rows with
//! mma.sync m16n8k16, runs the online softmax on the accumulator registers and accumulates
//! O += P·V in f32 registers, one pass over K/V in 32-key tiles. Q, K and V tiles live in XOR-
//! swizzled static shared memory (3 · 32 · D · 2 bytes, 48 KB at D = 256: no opt-in), filled with
//! cp.async and read with ldmatrix; nothing is pipelined yet (that is generation 4).
//! See `docs/generations/gen3-fused32.md`.

use flashcore_core::{BlockSharedMemory, Capabilities, HeadDims, QTileKernel};

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

flashcore_core::attention_generation! {
    pub struct Fused32: "fused32",
    plan: |problem, device| {
        let kernel = QTileKernel::new("gen3_fused32.cu", "attention_fused32", Q_TILE_ROWS, WARPS);
        kernel.plan(&Fused32, problem, device, |d| BlockSharedMemory::Static(static_smem_bytes(d)))
    },
    // mma.sync bf16, ldmatrix and cp.async: sm_80
    capabilities: Capabilities::all_features(HeadDims::List(HEAD_DIMS), (8, 0)),
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashcore_core::{Attention, AttentionProblem, DeviceInfo};

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
