//! Generation 5, Hopper path: persistent, warp-specialized TMA + wgmma kernel
//! (`kernels/gen5_persistent_hopper.cu`, design in `docs/generations/gen5-persistent.md`).
//!
//! One launch: `sm_count` CTAs of 384 threads (1 producer warpgroup issuing TMA, 2 consumer
//! warpgroups running wgmma), each looping over (batch, head, 128-row q tile) work items.

use flashcore_core::plan::{
    Attention, Capabilities, HeadDims, KernelLaunch, LaunchPlan, Swizzle, TensorMapSpec,
};
use flashcore_core::problem::{AttentionProblem, DType, Layout};
use flashcore_core::{DeviceInfo, Unsupported};

/// The FA3-style Hopper kernel.
pub struct PersistentHopper;

const NAME: &str = "persistent-hopper";
const SOURCE: &str = "gen5_persistent_hopper.cu";
const ENTRY: &str = "attention_persistent_hopper";

/// Q rows per work item (two consumer warpgroups of 64 rows) = Q TMA box rows.
pub const BLOCK_M: usize = 128;
/// Keys per K/V tile = K/V TMA box rows. 128 for both head dims: with D = 128 the consumer holds
/// S (64 f32) + O (64 f32) + P (32 packed) + bookkeeping, well inside the 232-register budget.
pub const BLOCK_N: usize = 128;
/// K/V ring depth. 2 stages for D = 128 is 160 KiB of smem; 3 would still fit (224 KiB).
pub const STAGES: usize = 2;
/// 1: FA3 intra-warpgroup overlap (softmax of S_j+1 while O += P_j V_j runs); 0: the simple
/// serial loop. Override at run time with FLASHCORE_HOPPER_OVERLAP=0|1 (e.g. to bisect a failure).
pub const OVERLAP: bool = true;
/// Threads per CTA: producer warpgroup + 2 consumer warpgroups.
pub const THREADS: u32 = 384;
/// 64 16-bit columns = 128 bytes = one 128B-swizzle row.
pub const BOX_COLS: usize = 64;
/// Slack to align the dynamic shared memory base to 1024 bytes (128B swizzle atom).
pub const SMEM_ALIGN_SLACK: usize = 1024;

/// Dynamic shared memory the kernel needs; mirrors `SMEM_BYTES` in the kernel:
/// Q (BLOCK_M x D) + STAGES x (K + V tiles of BLOCK_N x D) + barriers (2 + 4 STAGES, 8 B each,
/// rounded up to 128 B) + 1024 bytes of alignment slack.
pub fn smem_bytes(head_dim: usize, elem_bytes: usize) -> usize {
    let q = BLOCK_M * head_dim * elem_bytes;
    let kv_tile = BLOCK_N * head_dim * elem_bytes;
    let bars = (2 + 4 * STAGES) * 8;
    let bars = bars.div_ceil(128) * 128;
    q + 2 * STAGES * kv_tile + bars + SMEM_ALIGN_SLACK
}

fn env_flag(name: &str) -> Option<bool> {
    match std::env::var(name).ok()?.trim() {
        "1" | "true" | "on" | "yes" => Some(true),
        "0" | "false" | "off" | "no" => Some(false),
        _ => None,
    }
}

impl Attention for PersistentHopper {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            dtypes: &DType::ALL,
            head_dims: HeadDims::List(&[64, 128]),
            causal: true,
            gqa: true,
            layouts: &Layout::ALL,
            min_compute_capability: (9, 0),
            // TMA needs 16-byte aligned bases and strides; the O stores are 4-byte pairs.
            alignment_elems: 8,
        }
    }

    fn plan(
        &self,
        problem: &AttentionProblem,
        device: &DeviceInfo,
    ) -> Result<LaunchPlan, Unsupported> {
        self.capabilities().check(NAME, problem, device)?;
        if device.compute_capability != (9, 0) {
            // wgmma / setmaxnreg are sm_90a-only: the arch-specific PTX does not run on later parts.
            return Err(Unsupported::new(
                NAME,
                format!(
                    "needs sm_90a (wgmma, setmaxnreg); device is {}.{}",
                    device.compute_capability.0, device.compute_capability.1
                ),
            ));
        }
        let scale = problem.scale();
        if scale.is_nan() || scale <= 0.0 {
            // The running row max is taken on raw scores, which is only the max of the scaled
            // scores for a positive scale.
            return Err(Unsupported::new(
                NAME,
                format!("softmax_scale {scale} must be > 0"),
            ));
        }
        let d = problem.head_dim;
        let smem = smem_bytes(d, problem.dtype.size_bytes());
        let limit = device.max_shared_memory_per_block_optin as usize;
        if smem > limit {
            return Err(Unsupported::new(
                NAME,
                format!(
                    "needs {smem} bytes of shared memory per block (Q {} + {STAGES} x K/V {} + barriers + \
                     {SMEM_ALIGN_SLACK} alignment slack), device allows {limit}",
                    BLOCK_M * d * problem.dtype.size_bytes(),
                    2 * BLOCK_N * d * problem.dtype.size_bytes(),
                ),
            ));
        }

        // One CTA per SM, but no more CTAs than work items.
        let items = problem.batch * problem.heads_q * problem.seq_q.div_ceil(BLOCK_M);
        let grid_x = (device.sm_count as usize).min(items).max(1) as u32;

        // K/V bytes the tile scheduler keeps hot at once (heads per L2 section); half of L2.
        let l2_section = (device.l2_bytes as u64 / 2).clamp(4 << 20, 64 << 20);
        let overlap = env_flag("FLASHCORE_HOPPER_OVERLAP").unwrap_or(OVERLAP);

        let mut defines = vec![
            ("FC_HEAD_DIM".to_string(), d.to_string()),
            ("FC_HOPPER_BLOCK_N".to_string(), BLOCK_N.to_string()),
            ("FC_HOPPER_STAGES".to_string(), STAGES.to_string()),
            (
                "FC_HOPPER_OVERLAP".to_string(),
                (overlap as u32).to_string(),
            ),
            (
                "FC_HOPPER_L2_SECTION_BYTES".to_string(),
                format!("{l2_section}ull"),
            ),
        ];
        if env_flag("FLASHCORE_HOPPER_DEBUG").unwrap_or(false) {
            // Bounded mbarrier waits: a protocol deadlock traps with a printf instead of hanging.
            defines.push(("FC_HOPPER_DEBUG".to_string(), "1".to_string()));
        }

        Ok(LaunchPlan::single(KernelLaunch {
            source: SOURCE,
            entry: ENTRY,
            defines,
            grid: (grid_x, 1, 1),
            block: (THREADS, 1, 1),
            dynamic_smem_bytes: smem as u32,
            tensor_maps: Some(TensorMapSpec {
                q_box_rows: BLOCK_M as u32,
                kv_box_rows: BLOCK_N as u32,
                box_cols: BOX_COLS as u32,
                swizzle: Swizzle::B128,
            }),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smem_formula_matches_kernel() {
        // Kernel: Q + 2*STAGES*KV + 128 (10 barriers -> 80 B -> 128) + 1024.
        assert_eq!(smem_bytes(128, 2), 32768 + 131072 + 128 + 1024);
        assert_eq!(smem_bytes(64, 2), 16384 + 65536 + 128 + 1024);
    }

    #[test]
    fn plans_on_h100() {
        let dev = DeviceInfo::synthetic_h100();
        for d in [64, 128] {
            let p = AttentionProblem::new(4, 16, 2048, d).with_causal(true);
            let plan = PersistentHopper.plan(&p, &dev).expect("plans");
            let l = &plan.launches[0];
            assert_eq!(l.grid, (132, 1, 1));
            assert_eq!(l.block, (384, 1, 1));
            assert!(l.dynamic_smem_bytes as usize <= 227 * 1024);
        }
    }

    #[test]
    fn rejects_non_hopper() {
        let dev = DeviceInfo::synthetic_sm86();
        let p = AttentionProblem::new(1, 8, 512, 64);
        assert!(PersistentHopper.supports(&p, &dev).is_err());
    }
}
