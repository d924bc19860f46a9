//! Generation 4: 64 x 64 tiles, cp.async double buffering, ldmatrix (`kernels/gen4_tile64.cu`).
//!
//! One block of 4 warps per 64-row query tile, 16 rows per warp. Q is read into registers once
//! (D <= 128); K and V stream through two shared-memory buffers each with 16-byte cp.async, the
//! next K tile issued before Q·Kᵀ of the current one and the next V tile before P·V, so loads
//! overlap the tensor-core work and the softmax. Tiles are XOR-swizzled (bank-conflict free for
//! both the cp.async fills and the ldmatrix / ldmatrix.trans reads). Causal runs skip the tiles
//! above the diagonal and mask only the diagonal ones. Every inference mode (`docs/MODES.md`) plugs
//! in through the shared block-info, score-modifier and K/V-row headers. See
//! `docs/generations/gen4-tile64.md`.

use flashcore_core::{BlockSharedMemory, Capabilities, HeadDims, ModeSupport, QTileKernel};

/// Head dims the kernel is compiled for (FC_HEAD_DIM); each is its own module.
const HEAD_DIMS: &[usize] = &[32, 64, 96, 128, 256];
/// Query rows per block (`q_tile_rows` in the kernel).
const Q_TILE_ROWS: usize = 64;
/// Key rows per K/V tile (`kv_tile_rows` in the kernel).
const KV_TILE_ROWS: usize = 64;
/// Warps per block (`num_warps` in the kernel).
const WARPS: u32 = 4;
/// Largest head dim whose Q fragments stay in registers (`q_in_registers` in the kernel); above
/// it Q keeps its own shared-memory tile.
const MAX_HEAD_DIM_Q_IN_REGISTERS: usize = 128;

/// Dynamic shared memory (`smem_bytes` in the kernel): two K and two V buffers of 64 rows, plus a
/// separate Q tile when Q does not live in registers (D <= 128 stages Q in V buffer 1).
///   T = 64 · D · 2;  bytes = 4T (D <= 128) or 5T (D = 256)
///   D = 32: 16 KB, 64: 32 KB, 96: 48 KB, 128: 64 KB, 256: 160 KB.
fn dynamic_smem_bytes(head_dim: usize) -> usize {
    let tile = KV_TILE_ROWS * head_dim * 2;
    let tiles = if head_dim <= MAX_HEAD_DIM_Q_IN_REGISTERS {
        4
    } else {
        5
    };
    tiles * tile
}

flashcore_core::attention_generation! {
    pub struct Tile64: "tile64",
    plan: |problem, device| {
        let kernel = QTileKernel::new("gen4_tile64.cu", "attention_tile64", Q_TILE_ROWS, WARPS);
        kernel.plan(&Tile64, problem, device, |d| {
            BlockSharedMemory::DynamicOptIn(dynamic_smem_bytes(d))
        })
    },
    // mma.sync bf16, ldmatrix and cp.async: sm_80
    capabilities: Capabilities::all_features(HeadDims::List(HEAD_DIMS), (8, 0))
        .with_modes(ModeSupport::ALL),
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashcore_core::{Attention, AttentionProblem, DeviceInfo};

    #[test]
    fn shared_memory_formula() {
        let bytes: Vec<usize> = HEAD_DIMS.iter().map(|&d| dynamic_smem_bytes(d)).collect();
        assert_eq!(bytes, vec![16384, 32768, 49152, 65536, 163840]);
    }

    #[test]
    fn head_dim_256_does_not_fit_sm86_and_says_why() {
        let p = AttentionProblem::new(1, 1, 8, 256);
        let err = Tile64
            .supports(&p, &DeviceInfo::synthetic_sm86())
            .unwrap_err();
        assert!(err.reason.contains("163840"), "{err}");
        assert!(Tile64.supports(&p, &DeviceInfo::synthetic_h100()).is_ok());
        let p = AttentionProblem::new(1, 1, 8, 128);
        assert!(Tile64.supports(&p, &DeviceInfo::synthetic_sm86()).is_ok());
    }
}
