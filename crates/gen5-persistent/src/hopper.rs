//! Generation 5, Hopper path: persistent, warp-specialized TMA + wgmma kernel
//! (`kernels/gen5_persistent_hopper.cu`, design in `docs/generations/gen5-persistent.md`).
//!
//! One launch: `sm_count` CTAs of 384 threads (1 producer warpgroup issuing TMA, 2 consumer
//! warpgroups running wgmma), each looping over (batch, head, 128-row q tile) work items.

use flashcore_core::plan::{
    Attention, Capabilities, HeadDims, KernelLaunch, LaunchPlan, Swizzle, TensorMapSpec,
};
use flashcore_core::problem::AttentionProblem;
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

/// The kernel's own default Q buffer count (1: Q of the next item is loaded once this item's
/// last QK^T is done; 2: it is prefetched into the other buffer while this item runs). The plan's
/// default is [`HopperConfig::default`], which uses 2 (measured faster, see below).
pub const Q_STAGES: usize = 1;
/// Consumer warpgroups' `setmaxnreg` (232 -> producer 40; 240 -> producer 24).
pub const CONSUMER_REGS: usize = 232;

/// Dynamic shared memory the kernel needs; mirrors `SMEM_BYTES` in the kernel:
/// Q_STAGES x Q (BLOCK_M x D) + STAGES x (K + V tiles of BLOCK_N x D) + barriers
/// (2 Q_STAGES + 4 STAGES, 8 B each, rounded up to 128 B) + 1024 bytes of alignment slack.
pub fn smem_bytes_for(head_dim: usize, elem_bytes: usize, stages: usize, q_stages: usize) -> usize {
    let q = BLOCK_M * head_dim * elem_bytes;
    let kv_tile = BLOCK_N * head_dim * elem_bytes;
    let bars = (2 * q_stages + 4 * stages) * 8;
    let bars = bars.div_ceil(128) * 128;
    q_stages * q + 2 * stages * kv_tile + bars + SMEM_ALIGN_SLACK
}

/// [`smem_bytes_for`] of the default configuration.
pub fn smem_bytes(head_dim: usize, elem_bytes: usize) -> usize {
    smem_bytes_for(head_dim, elem_bytes, STAGES, Q_STAGES)
}

/// The compile-time variants of the kernel. [`HopperConfig::default`] is the verified
/// configuration `plan()` uses with no environment overrides; each field can be flipped at run
/// time for A/B timing (see [`HopperConfig::from_env`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HopperConfig {
    /// K/V ring depth (`FC_HOPPER_STAGES`; env `FLASHCORE_HOPPER_STAGES`, 2..=4).
    pub stages: usize,
    /// `FC_HOPPER_Q_STAGES` (env `FLASHCORE_HOPPER_Q_STAGES`, 1|2).
    pub q_stages: usize,
    /// FA3 intra-warpgroup overlap (`FC_HOPPER_OVERLAP`; env `FLASHCORE_HOPPER_OVERLAP`).
    pub overlap: bool,
    /// FA3 inter-warpgroup ping-pong on named barriers (`FC_HOPPER_PINGPONG`; env
    /// `FLASHCORE_HOPPER_PINGPONG`; needs `overlap`).
    pub pingpong: bool,
    /// O staged through the item's Q buffer, 16-byte coalesced stores (`FC_HOPPER_SMEM_EPILOGUE`;
    /// env `FLASHCORE_HOPPER_SMEM_EPILOGUE`; implies `q_stages = 2`).
    pub smem_epilogue: bool,
    /// `FC_HOPPER_CONSUMER_REGS` (env `FLASHCORE_HOPPER_CONSUMER_REGS`, 232|240).
    pub consumer_regs: usize,
}

impl Default for HopperConfig {
    /// Ping-pong with two Q buffers: of six variants timed on the H100 (docs/results/
    /// 2026-11-23-hopper-variants-h100), it had the best sum over the ladder shapes, +5.6% over
    /// overlap alone, and verify passes with it.
    fn default() -> Self {
        Self {
            stages: STAGES,
            q_stages: 2,
            overlap: OVERLAP,
            pingpong: true,
            smem_epilogue: false,
            consumer_regs: CONSUMER_REGS,
        }
    }
}

impl HopperConfig {
    /// The default with the `FLASHCORE_HOPPER_*` environment overrides applied.
    pub fn from_env() -> Result<Self, String> {
        let var = |name: &str| std::env::var(name).ok();
        Self::from_overrides(|name| var(name))
    }

    /// `lookup(name)` returns the override for `FLASHCORE_HOPPER_<name>` (unset: `None`).
    pub fn from_overrides(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let mut c = Self::default();
        let flag = |name: &str| -> Result<Option<bool>, String> {
            match lookup(name) {
                None => Ok(None),
                Some(v) => parse_flag(&v)
                    .map(Some)
                    .ok_or_else(|| format!("{name}={v}: expected 0 or 1")),
            }
        };
        let number = |name: &str, allowed: &[usize]| -> Result<Option<usize>, String> {
            match lookup(name) {
                None => Ok(None),
                Some(v) => match v.trim().parse::<usize>() {
                    Ok(n) if allowed.contains(&n) => Ok(Some(n)),
                    _ => Err(format!("{name}={v}: expected one of {allowed:?}")),
                },
            }
        };
        if let Some(v) = flag("FLASHCORE_HOPPER_OVERLAP")? {
            c.overlap = v;
            // Ping-pong is built on the overlapped loop: turning that off turns it off too.
            c.pingpong &= v;
        }
        if let Some(v) = flag("FLASHCORE_HOPPER_PINGPONG")? {
            c.pingpong = v;
        }
        if let Some(v) = flag("FLASHCORE_HOPPER_SMEM_EPILOGUE")? {
            c.smem_epilogue = v;
        }
        if let Some(v) = number("FLASHCORE_HOPPER_STAGES", &[2, 3, 4])? {
            c.stages = v;
        }
        if let Some(v) = number("FLASHCORE_HOPPER_Q_STAGES", &[1, 2])? {
            c.q_stages = v;
        }
        if let Some(v) = number("FLASHCORE_HOPPER_CONSUMER_REGS", &[232, 240])? {
            c.consumer_regs = v;
        }
        if c.smem_epilogue {
            // O is staged in the item's own Q buffer, which then stays busy through the epilogue.
            c.q_stages = 2;
        }
        if c.pingpong && !c.overlap {
            return Err("FLASHCORE_HOPPER_PINGPONG=1 needs FLASHCORE_HOPPER_OVERLAP=1".to_string());
        }
        Ok(c)
    }

    /// Dynamic shared memory of this configuration.
    pub fn smem_bytes(&self, head_dim: usize, elem_bytes: usize) -> usize {
        smem_bytes_for(head_dim, elem_bytes, self.stages, self.q_stages)
    }

    /// The kernel defines. Variants at their default value are not emitted (the kernel's own
    /// defaults match), so the default plan's defines are unchanged.
    fn defines(&self, head_dim: usize, l2_section: u64) -> Vec<(String, String)> {
        let mut d = vec![
            ("FC_HEAD_DIM".to_string(), head_dim.to_string()),
            ("FC_HOPPER_BLOCK_N".to_string(), BLOCK_N.to_string()),
            ("FC_HOPPER_STAGES".to_string(), self.stages.to_string()),
            (
                "FC_HOPPER_OVERLAP".to_string(),
                (self.overlap as u32).to_string(),
            ),
            (
                "FC_HOPPER_L2_SECTION_BYTES".to_string(),
                format!("{l2_section}ull"),
            ),
        ];
        if self.pingpong {
            d.push(("FC_HOPPER_PINGPONG".to_string(), "1".to_string()));
        }
        if self.q_stages != Q_STAGES {
            d.push(("FC_HOPPER_Q_STAGES".to_string(), self.q_stages.to_string()));
        }
        if self.smem_epilogue {
            d.push(("FC_HOPPER_SMEM_EPILOGUE".to_string(), "1".to_string()));
        }
        if self.consumer_regs != CONSUMER_REGS {
            d.push((
                "FC_HOPPER_CONSUMER_REGS".to_string(),
                self.consumer_regs.to_string(),
            ));
        }
        d
    }
}

fn parse_flag(v: &str) -> Option<bool> {
    match v.trim() {
        "1" | "true" | "on" | "yes" => Some(true),
        "0" | "false" | "off" | "no" => Some(false),
        _ => None,
    }
}

fn env_flag(name: &str) -> Option<bool> {
    parse_flag(&std::env::var(name).ok()?)
}

impl Attention for PersistentHopper {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        // TMA, wgmma and setmaxnreg: sm_90a (TMA also wants 16-byte aligned bases and strides)
        Capabilities::all_features(HeadDims::List(&[64, 128]), (9, 0))
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
        let cfg = HopperConfig::from_env().map_err(|e| Unsupported::new(NAME, e))?;
        let d = problem.head_dim;
        let smem = cfg.smem_bytes(d, problem.dtype.size_bytes());
        let limit = device.max_shared_memory_per_block_optin as usize;
        if smem > limit {
            return Err(Unsupported::new(
                NAME,
                format!(
                    "needs {smem} bytes of shared memory per block ({} x Q {} + {} x K/V {} + barriers + \
                     {SMEM_ALIGN_SLACK} alignment slack), device allows {limit}",
                    cfg.q_stages,
                    BLOCK_M * d * problem.dtype.size_bytes(),
                    cfg.stages,
                    2 * BLOCK_N * d * problem.dtype.size_bytes(),
                ),
            ));
        }

        // One CTA per SM, but no more CTAs than work items.
        let items = problem.batch * problem.heads_q * problem.seq_q.div_ceil(BLOCK_M);
        let grid_x = (device.sm_count as usize).min(items).max(1) as u32;

        // K/V bytes the tile scheduler keeps hot at once (heads per L2 section); half of L2.
        let l2_section = (device.l2_bytes as u64 / 2).clamp(4 << 20, 64 << 20);
        let mut defines = cfg.defines(d, l2_section);
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

    fn overrides(pairs: &'static [(&'static str, &'static str)]) -> Result<HopperConfig, String> {
        HopperConfig::from_overrides(|name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn default_config_emits_the_verified_defines() {
        let c = overrides(&[]).unwrap();
        assert_eq!(c, HopperConfig::default());
        let names: Vec<String> = c
            .defines(128, 25 << 20)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(
            names,
            [
                "FC_HEAD_DIM",
                "FC_HOPPER_BLOCK_N",
                "FC_HOPPER_STAGES",
                "FC_HOPPER_OVERLAP",
                "FC_HOPPER_L2_SECTION_BYTES",
                "FC_HOPPER_PINGPONG",
                "FC_HOPPER_Q_STAGES"
            ]
        );
        // The serial loop stays reachable: overlap off takes ping-pong with it.
        let serial = overrides(&[("FLASHCORE_HOPPER_OVERLAP", "0")]).unwrap();
        assert!(!serial.overlap && !serial.pingpong);
    }

    #[test]
    fn variant_overrides() {
        let c = overrides(&[
            ("FLASHCORE_HOPPER_PINGPONG", "1"),
            ("FLASHCORE_HOPPER_SMEM_EPILOGUE", "1"),
            ("FLASHCORE_HOPPER_CONSUMER_REGS", "240"),
        ])
        .unwrap();
        assert!(c.pingpong && c.smem_epilogue && c.overlap);
        assert_eq!(c.q_stages, 2, "the smem epilogue implies two Q buffers");
        let d = c.defines(64, 1 << 24);
        for (k, v) in [
            ("FC_HOPPER_PINGPONG", "1"),
            ("FC_HOPPER_Q_STAGES", "2"),
            ("FC_HOPPER_SMEM_EPILOGUE", "1"),
            ("FC_HOPPER_CONSUMER_REGS", "240"),
        ] {
            assert!(d.contains(&(k.to_string(), v.to_string())), "{k}");
        }
        assert!(overrides(&[
            ("FLASHCORE_HOPPER_PINGPONG", "1"),
            ("FLASHCORE_HOPPER_OVERLAP", "0")
        ])
        .is_err());
        assert!(overrides(&[("FLASHCORE_HOPPER_STAGES", "7")]).is_err());
        assert!(overrides(&[("FLASHCORE_HOPPER_Q_STAGES", "x")]).is_err());
    }

    #[test]
    fn variant_smem_fits_or_is_rejected() {
        let limit = 227 * 1024;
        // D = 128: 3 K/V stages fit with one Q buffer, and 2 Q buffers fit with 2 stages...
        assert_eq!(smem_bytes_for(128, 2, 3, 1), 32768 + 196608 + 128 + 1024);
        assert!(smem_bytes_for(128, 2, 3, 1) <= limit);
        assert_eq!(smem_bytes_for(128, 2, 2, 2), 65536 + 131072 + 128 + 1024);
        assert!(smem_bytes_for(128, 2, 2, 2) <= limit);
        // ...but not both (the plan rejects it); at D = 64 everything up to 4 stages fits.
        assert!(smem_bytes_for(128, 2, 3, 2) > limit);
        assert!(smem_bytes_for(64, 2, 4, 2) <= limit);
    }

    #[test]
    fn rejects_non_hopper() {
        let dev = DeviceInfo::synthetic_sm86();
        let p = AttentionProblem::new(1, 8, 512, 64);
        assert!(PersistentHopper.supports(&p, &dev).is_err());
    }
}
