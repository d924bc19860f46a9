//! The plans of the one-launch generations, as one table: the launch each makes for a ragged
//! shape, its grid clamped at `i32::MAX` blocks, and head dims off its list refused with a reason
//! that names them. (Each generation's own rules, its shared-memory formulas, stay in its crate.)
#![cfg(all_generations)]

use flashcore::{Attention, AttentionProblem, DeviceInfo};
use flashcore_fused32::Fused32;
use flashcore_persistent::PersistentPortable;
use flashcore_tile64::Tile64;
use flashcore_vectorized::Vectorized;

fn h100() -> DeviceInfo {
    DeviceInfo::synthetic_h100()
}

/// What a plan's one launch is: source, entry, grid x, block x, dynamic shared memory, defines.
type OneLaunch = (
    &'static str,
    &'static str,
    u32,
    u32,
    u32,
    &'static [(&'static str, &'static str)],
);

#[test]
fn one_launch_per_q_tile() {
    let d64: &[(&str, &str)] = &[("FC_HEAD_DIM", "64")];
    let d128: &[(&str, &str)] = &[("FC_HEAD_DIM", "128")];
    #[rustfmt::skip]
    let cases: [(&dyn Attention, AttentionProblem, OneLaunch); 3] = [
        // 16-row tiles; 64-row K and V tiles staged as f32
        (&Vectorized, AttentionProblem::new(3, 5, 33, 64), ("gen2_vectorized.cu", "attention_vectorized", 3 * 5 * 3, 128, 2 * 64 * 64 * 4, &[])),
        // 32-row tiles of two warps; static shared memory only
        (&Fused32, AttentionProblem::new(3, 5, 33, 64), ("gen3_fused32.cu", "attention_fused32", 3 * 5 * 2, 64, 0, d64)),
        // 64-row tiles of four warps; double-buffered 64 x 128 K and V tiles
        (&Tile64, AttentionProblem::new(4, 16, 2048, 128), ("gen4_tile64.cu", "attention_tile64", 4 * 16 * 32, 128, 65536, d128)),
    ];
    for (kernel, problem, (source, entry, grid_x, block_x, smem, defines)) in cases {
        let name = kernel.name();
        let plan = kernel.plan(&problem, &h100()).unwrap();
        assert_eq!(plan.launches.len(), 1, "{name}");
        let l = &plan.launches[0];
        assert_eq!((l.source, l.entry), (source, entry));
        assert_eq!(
            (l.grid, l.block),
            ((grid_x, 1, 1), (block_x, 1, 1)),
            "{name}"
        );
        assert_eq!(l.dynamic_smem_bytes, smem, "{name}");
        let defines: Vec<(String, String)> = defines
            .iter()
            .map(|&(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(l.defines, defines, "{name}");
    }
}

/// 2^18 batches x 2^8 heads x 2^14 rows: far past 2^31 work items, which the kernels' grid-stride
/// loops take; the grid stops at `i32::MAX` blocks.
#[test]
fn grid_is_clamped_past_two_to_the_31_items() {
    let cases: [(&dyn Attention, usize); 3] = [(&Vectorized, 8), (&Fused32, 32), (&Tile64, 32)];
    for (kernel, d) in cases {
        let p = AttentionProblem::new(1 << 18, 1 << 8, 1 << 14, d);
        let plan = kernel.plan(&p, &h100()).unwrap();
        assert_eq!(
            plan.launches[0].grid.0,
            i32::MAX as u32,
            "{}",
            kernel.name()
        );
    }
}

#[test]
fn head_dims_off_the_list_are_unsupported_with_a_reason() {
    let cases: [(&dyn Attention, &[usize]); 4] = [
        (&Vectorized, &[4, 12, 257, 264]),
        (&Fused32, &[8, 16, 48, 80, 160, 257]),
        (&Tile64, &[8, 16, 48, 80, 160, 257]),
        // (512 is taken for decode-shaped problems, as this one is: the decode kernel's build.)
        (&PersistentPortable, &[4, 12, 260, 520]),
    ];
    for (kernel, dims) in cases {
        for &d in dims {
            let p = AttentionProblem::new(1, 1, 8, d);
            let err = kernel.supports(&p, &h100()).unwrap_err();
            assert!(err.reason.contains(&format!("head_dim {d}")), "{err}");
        }
    }
}
