//! Generation 2: the scalar algorithm with the memory work done right
//! (`kernels/gen2_vectorized.cu`).
//!
//! Online softmax with f32 state per query row and no tensor cores, like generation 1, but every
//! access is a coalesced 16-byte load or store, a block of 4 warps (4 query rows each) shares
//! K/V tiles staged in shared memory as f32, and reductions are warp shuffles. Head dim is a run
//! time value: any multiple of 8 from 8 to 256. See `docs/generations/gen2-vectorized.md`.

use flashcore_core::{BlockSharedMemory, Capabilities, HeadDims, QTileKernel};

/// Warps per block; VEC_WARPS in the kernel.
const WARPS: u32 = 4;
/// Query rows per warp; VEC_ROWS_PER_WARP in the kernel.
const ROWS_PER_WARP: usize = 4;
/// Query rows per block (one work item = one (batch, head, BLOCK_M-row tile)).
const BLOCK_M: usize = WARPS as usize * ROWS_PER_WARP;
/// Elements of one K (or V) tile; VEC_TILE_ELEMS in the kernel.
const TILE_ELEMS: usize = 4096;
/// VEC_MAX_TILE_ROWS in the kernel.
const MAX_TILE_ROWS: usize = 128;
const MIN_HEAD_DIM: usize = 8;
const MAX_HEAD_DIM: usize = 256;

/// Key rows per shared-memory tile for `head_dim`; `vec_tile_rows` in the kernel.
fn tile_rows(head_dim: usize) -> usize {
    ((TILE_ELEMS / head_dim) & !15).min(MAX_TILE_ROWS)
}

/// Dynamic shared memory: K and V tiles of `tile_rows` rows, stored as f32.
fn smem_bytes(head_dim: usize) -> usize {
    2 * tile_rows(head_dim) * head_dim * std::mem::size_of::<f32>()
}

flashcore_core::attention_generation! {
    pub struct Vectorized: "vectorized",
    plan: |problem, device| {
        let kernel = QTileKernel::new("gen2_vectorized.cu", "attention_vectorized", BLOCK_M, WARPS);
        // One build for every head dim.
        let kernel = kernel.runtime_head_dim();
        kernel.plan(&Vectorized, problem, device, |d| BlockSharedMemory::Dynamic(smem_bytes(d)))
    },
    // 16-byte vector loads and bf16 conversions: sm_80. The plan checks the head dims again
    // before sizing the tile, which divides by them.
    capabilities: Capabilities::all_features(
        HeadDims::Range {
            min: MIN_HEAD_DIM,
            max: MAX_HEAD_DIM,
            multiple_of: 8,
        },
        (8, 0),
    ),
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashcore_core::{Attention, AttentionProblem, DeviceInfo};

    #[test]
    fn shared_memory_fits_without_opt_in_for_every_head_dim() {
        for d in (8..=256).step_by(8) {
            let rows = tile_rows(d);
            assert!(rows >= 16 && rows.is_multiple_of(16), "d={d} rows={rows}");
            assert!(smem_bytes(d) <= 32 * 1024, "d={d}");
            // A step of the inner loop is 128 / G keys (G = next power of two >= d / 8); it
            // must divide the tile so that a step never reads past it.
            let g = (d / 8).next_power_of_two();
            assert_eq!(rows % (128 / g), 0, "d={d}");
            // Staging: at most 4 pieces per thread.
            assert!(rows * d / 8 <= 4 * 128, "d={d}");
        }
        assert_eq!(smem_bytes(128), 32 * 1024);
        assert_eq!(tile_rows(64), 64);
        assert_eq!(tile_rows(8), 128);
    }

    #[test]
    fn strides_that_break_16_byte_loads_are_unsupported() {
        let mut p = AttentionProblem::new(1, 2, 8, 64);
        let mut s = p.strides();
        s.k.row = 68;
        p.custom_strides = Some(s);
        let err = Vectorized
            .supports(&p, &DeviceInfo::synthetic_h100())
            .unwrap_err();
        assert!(err.reason.contains("stride"), "{err}");
    }
}
