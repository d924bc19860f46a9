//! Generation 5, portable path: persistent, warp-specialized cp.async + mma.sync kernel
//! (`kernels/gen5_persistent_portable.cu`, design and barrier protocol in
//! `docs/generations/gen5-persistent.md`, "Portable path").
//!
//! One launch of `sm_count x CTAs-per-SM` CTAs (capped at the item count), each looping over
//! (batch, head, 128-row q tile) work items. A CTA is 8 consumer warps (16 query rows each, Q, O
//! and the softmax state in registers, mma.sync m16n8k16) and 1 producer warp that streams Q and
//! the K/V tiles with 16-byte cp.async into shared-memory rings. "Full" is signalled by mbarriers
//! that the cp.async hardware completes (`cp.async.mbarrier.arrive.noinc`), "empty" by named
//! barriers (consumers `bar.arrive`, the producer `bar.sync`s). Runs on sm_80 and later.
//!
//! Every inference mode of `docs/MODES.md` (varlen, KV cache with `seqused_k`, pages, append,
//! windows, softcap, ALiBi) runs in a build of its own (`FC_PORTABLE_MODES=1`), which the plan
//! asks for only when the problem is not dense: items are (batch, head, q tile) over
//! `max_seqlen_q` tiles, those past a sequence's end write nothing, and each item visits only
//! the key tiles its rows see.

use flashcore_core::plan::{Attention, Capabilities, HeadDims, KernelLaunch, LaunchPlan};
use flashcore_core::problem::AttentionProblem;
use flashcore_core::{DeviceInfo, ModeSupport, Unsupported};

use crate::env::Env;

/// The portable (sm_80+) generation-5 kernel.
#[derive(Clone, Copy, Debug, Default)]
pub struct PersistentPortable;

const NAME: &str = "persistent-portable";
const SOURCE: &str = "gen5_persistent_portable.cu";
const ENTRY: &str = "attention_persistent_portable";

/// Head dims the kernel is compiled for (FC_HEAD_DIM).
pub const HEAD_DIMS: &[usize] = &[64, 128];
/// Consumer warps per CTA by default before Hopper (FC_PORTABLE_WARPS): 16 query rows each, so
/// 128-row items.
pub const WARPS: usize = 8;
/// On sm_90: 4 consumer warps (64-row items, two CTAs per SM) beat 8 at every ladder shape on
/// the H100 (docs/results/2026-11-23-hopper-variants-h100); not measured on Ampere/Ada.
pub const WARPS_SM90: usize = 4;
/// On sm_90 at head dim 128: 7 consumer warps (112-row items), one CTA per SM. With the producer
/// that is 8 warps per SM, 2 per sub-partition, so a thread may use 255 registers: all of Q
/// stays in registers and 128-key tiles fit. Ahead of the 4-warp layout by 10-17 % at every D = 128
/// ladder shape on the H100 (docs/results/2026-11-23-portable-d128-h100).
pub const WARPS_SM90_D128: usize = 7;
/// Keys per K/V tile by default (FC_PORTABLE_BLOCK_N).
pub const BLOCK_N: usize = 64;
/// Deepest K/V ring the plan asks for; it takes the deepest of 2..=MAX_STAGES that fits.
pub const MAX_STAGES: usize = 4;
/// Barrier and per-warp bookkeeping region at the end of shared memory (BAR_BYTES).
pub const BAR_BYTES: usize = 256;
/// Modes build (FC_PORTABLE_MODES): bytes per consumer warp after the barrier region, where each
/// warp parks its item's first row, last tile, batch, head and lengths (MODE_INFO_BYTES).
pub const MODE_INFO_BYTES_PER_WARP: usize = 32;
/// Workspace words the dynamic schedule uses as counters (at the start of the workspace).
pub const DYNAMIC_COUNTER_WORDS: usize = 2;
/// The consumers keep the item index in bits 6..31 of one register (RING_ITEM_SHIFT).
pub const MAX_ITEMS: usize = 1 << 25;

/// One kernel configuration (the defines of one compiled module).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    pub head_dim: usize,
    /// Consumer warps (FC_PORTABLE_WARPS); the q tile is 16 x m_tiles x warps rows.
    pub warps: usize,
    /// m16 row tiles per consumer warp (FC_PORTABLE_WARP_M_TILES): 1 (16 rows) or 2 (32 rows,
    /// each K/V fragment read from shared memory feeds two mma.sync).
    pub m_tiles: usize,
    /// Keys per K/V tile (FC_PORTABLE_BLOCK_N).
    pub block_n: usize,
    /// K/V ring depth (FC_PORTABLE_STAGES).
    pub stages: usize,
    /// Q buffers (FC_PORTABLE_Q_STAGES).
    pub q_stages: usize,
    /// 16-wide Q slices held in registers (FC_PORTABLE_Q_REG_SLICES); the rest is re-read from
    /// shared memory for every K tile.
    pub q_reg_slices: usize,
    /// CTAs per SM the registers are sized for (FC_PORTABLE_MIN_BLOCKS).
    pub ctas_per_sm: usize,
    /// Items taken from a global counter instead of the static round-robin (FC_PORTABLE_DYNAMIC).
    pub dynamic: bool,
    /// The inference-modes build (FC_PORTABLE_MODES): varlen, KV cache, pages, windows, softcap,
    /// ALiBi. Only for problems that use them; it adds [`MODE_INFO_BYTES_PER_WARP`] per warp.
    pub modes: bool,
}

impl Config {
    pub fn block_m(&self) -> usize {
        16 * self.m_tiles * self.warps
    }
    pub fn threads(&self) -> u32 {
        32 * (self.warps as u32 + 1)
    }
    /// Dynamic shared memory; mirrors `SMEM_BYTES` in the kernel:
    /// Q_STAGES x (BM x D) + 2 x STAGES x (BN x D) elements of 2 bytes, + BAR_BYTES
    /// (+ 32 bytes per consumer warp in the modes build).
    pub fn smem_bytes(&self) -> usize {
        let q = self.block_m() * self.head_dim * 2;
        let kv = self.block_n * self.head_dim * 2;
        self.q_stages * q
            + 2 * self.stages * kv
            + BAR_BYTES
            + mode_info_bytes(self.warps, self.modes)
    }
}

/// The modes build's per-warp item info (MODE_INFO_BYTES in the kernel); 0 for the dense build.
pub fn mode_info_bytes(warps: usize, modes: bool) -> usize {
    if modes {
        MODE_INFO_BYTES_PER_WARP * warps
    } else {
        0
    }
}

/// Shared memory per block for a configuration (the formula in one place for tests and docs).
pub fn smem_bytes(
    head_dim: usize,
    block_m: usize,
    block_n: usize,
    stages: usize,
    q_stages: usize,
) -> usize {
    Config {
        head_dim,
        warps: block_m / 16,
        m_tiles: 1,
        block_n,
        stages,
        q_stages,
        q_reg_slices: head_dim / 16,
        ctas_per_sm: 1,
        dynamic: false,
        modes: false,
    }
    .smem_bytes()
}

/// Tuning overrides read from the environment (for A/B runs; the defaults are the plan's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    pub warps: Option<usize>,
    pub m_tiles: Option<usize>,
    pub ctas_per_sm: Option<usize>,
    pub block_n: Option<usize>,
    pub stages: Option<usize>,
    pub q_stages: Option<usize>,
    pub q_reg_slices: Option<usize>,
    pub dynamic: Option<bool>,
    pub l2_section_mib: Option<usize>,
    /// `FLASHCORE_PORTABLE_HEAD_MAJOR=0|1`: one head per L2 section without causal masking.
    pub head_major: Option<bool>,
}

impl Overrides {
    /// Unparsable values count as unset, as they always have here; the plan checks the numbers.
    pub fn from_env() -> Self {
        let env = Env::process();
        let number = |name: &str| env.number_or_unset(name);
        Overrides {
            warps: number("FLASHCORE_PORTABLE_WARPS"),
            m_tiles: number("FLASHCORE_PORTABLE_WARP_M_TILES"),
            ctas_per_sm: number("FLASHCORE_PORTABLE_CTAS_PER_SM"),
            block_n: number("FLASHCORE_PORTABLE_BLOCK_N"),
            stages: number("FLASHCORE_PORTABLE_STAGES"),
            q_stages: number("FLASHCORE_PORTABLE_Q_STAGES"),
            q_reg_slices: number("FLASHCORE_PORTABLE_Q_REG_SLICES"),
            dynamic: env.flag_or_unset("FLASHCORE_PORTABLE_DYNAMIC"),
            l2_section_mib: number("FLASHCORE_PORTABLE_L2_SECTION_MIB"),
            head_major: env.flag_or_unset("FLASHCORE_PORTABLE_HEAD_MAJOR"),
        }
    }
}

/// Registers per thread ptxas may use for `warps` consumer warps (+ the producer) and
/// `ctas_per_sm` CTAs per SM: each of the SM's 4 sub-partitions has 16 K registers for the warps
/// placed on it, so 9 or 10 warps per SM (3 on some sub-partition) cap a thread at 168, while
/// up to 8 warps (2 per sub-partition) leave the full 255.
pub fn register_budget(warps: usize, ctas_per_sm: usize) -> usize {
    let warps_per_sub_partition = ((warps + 1) * ctas_per_sm).div_ceil(4).max(1);
    (16384 / (32 * warps_per_sub_partition) / 8 * 8).min(255)
}

/// Picks the configuration for a head dim on a device.
///
/// * sm_80..89: 8 consumer warps (128-row items), one CTA per SM: 9 warps put 3 on one SM
///   sub-partition, so ptxas caps the kernel at 168 registers per thread ([`register_budget`]).
/// * sm_90, D = 64: 4 consumer warps, two CTAs per SM (also 168 registers), 128-key tiles.
/// * sm_90, D = 128: 7 consumer warps, one CTA per SM: 8 warps per SM leave 255 registers, so
///   all of Q stays in registers beside 128-key S tiles (ptxas: 240, no spill).
/// * Q in registers: all of it at D = 64; at D = 128 all 8 slices fit under the 168 cap on
///   sm_80..89 (ptxas: 168, no spill), but not in the sm_90 build, which then keeps 6 (5 with the
///   dynamic schedule) and re-reads the rest per K tile — and double-buffers Q so that the next
///   item's Q can load while the current one still reads its buffer.
/// * The deepest K/V ring of 2..=4 stages that fits the opt-in shared memory.
/// * `modes` (the FC_PORTABLE_MODES build): the same, except 64-key tiles at D = 64 on sm_90
///   (the block info and score modifiers do not fit beside a 128-key S tile in 168 registers:
///   ptxas spills 28 bytes), and 32 bytes more shared memory per warp.
/// * `batch_invariant`: the key tile's width sets the order a row's keys are summed in, so a
///   dense problem takes the modes build's width (a sequence alone then sums as it does in a
///   varlen batch).
pub fn choose_config(
    head_dim: usize,
    dynamic: bool,
    modes: bool,
    batch_invariant: bool,
    device: &DeviceInfo,
    ov: &Overrides,
) -> Result<Config, Unsupported> {
    let hopper = device.compute_capability >= (9, 0);
    let default_warps = match (hopper, head_dim) {
        (true, 128) => WARPS_SM90_D128,
        (true, _) => WARPS_SM90,
        (false, _) => WARPS,
    };
    let warps = ov.warps.unwrap_or(default_warps);
    if !(1..=8).contains(&warps) {
        return Err(Unsupported::new(
            NAME,
            format!("FLASHCORE_PORTABLE_WARPS={warps}: consumer warps must be in 1..=8"),
        ));
    }
    let m_tiles = ov.m_tiles.unwrap_or(1);
    if m_tiles != 1 && m_tiles != 2 {
        return Err(Unsupported::new(
            NAME,
            format!("FLASHCORE_PORTABLE_WARP_M_TILES={m_tiles}: row tiles per warp must be 1 or 2"),
        ));
    }
    // 128-key tiles on sm_90 in the two measured layouts: half the per-tile overhead (waits,
    // releases, row reductions) per key. D = 64, 4 warps: S still fits in 168 registers, ahead
    // of 64-key tiles at every D = 64 ladder shape (docs/results/2026-11-23-portable-ab-h100).
    // D = 128, 7 warps: S + O + all of Q fit in the 255-register budget (ptxas: 240), +10 % over
    // 64-key tiles (docs/results/2026-11-23-portable-d128-h100).
    let default_block_n = match (hopper, head_dim, warps) {
        (true, 64, 4) if !modes && !batch_invariant => 128,
        (true, 128, 7) => 128,
        _ => BLOCK_N,
    };
    let block_n = ov.block_n.unwrap_or(default_block_n);
    if ![32, 64, 128].contains(&block_n) {
        return Err(Unsupported::new(
            NAME,
            format!("FLASHCORE_PORTABLE_BLOCK_N={block_n}: keys per tile must be 32, 64 or 128"),
        ));
    }
    // With 4 consumer warps the CTA is 160 threads and two share an SM; with 3, two CTAs make
    // 8 warps per SM (2 per sub-partition: up to 255 registers per thread).
    let ctas_per_sm = ov.ctas_per_sm.unwrap_or(if warps <= 4 { 2 } else { 1 });
    if !(1..=4).contains(&ctas_per_sm) {
        return Err(Unsupported::new(
            NAME,
            format!("FLASHCORE_PORTABLE_CTAS_PER_SM={ctas_per_sm}: must be in 1..=4"),
        ));
    }
    let registers = register_budget(warps, ctas_per_sm);
    if block_n == 128 && head_dim == 128 && registers < 255 {
        // S (64 f32) + O (64) + Q does not fit in 168 registers: ptxas spills ~300 bytes.
        return Err(Unsupported::new(
            NAME,
            format!(
                "FLASHCORE_PORTABLE_BLOCK_N=128 at head_dim 128 needs the 255-register budget (at most \
                 8 warps per SM); {warps} consumer warps x {ctas_per_sm} CTAs leave {registers}"
            ),
        ));
    }
    let all_slices = head_dim / 16;
    // The dynamic schedule's item hand-over costs the consumers one more register at D = 128
    // on sm_90 (ptxas: 4 bytes of spill with 6 slices, none with 5).
    let default_slices =
        if head_dim == 128 && device.compute_capability >= (9, 0) && registers < 255 {
            if dynamic && warps == 4 {
                5
            } else {
                6
            }
        } else {
            all_slices
        };
    let q_reg_slices = ov.q_reg_slices.unwrap_or(default_slices);
    if q_reg_slices > all_slices {
        return Err(Unsupported::new(
            NAME,
            format!(
                "FLASHCORE_PORTABLE_Q_REG_SLICES={q_reg_slices}: must be in 0..={all_slices} at head_dim {head_dim}"
            ),
        ));
    }
    let limit = device.max_shared_memory_per_block_optin as usize;
    // Two CTAs per SM share the SM's shared memory (opt-in limit + 1 KB reserved per CTA).
    let per_cta_limit = if ctas_per_sm == 1 {
        limit
    } else {
        (limit + 1024) / ctas_per_sm - 1024
    };
    let block_m = 16 * m_tiles * warps;
    let fits = |stages: usize, q_stages: usize| {
        smem_bytes(head_dim, block_m, block_n, stages, q_stages) + mode_info_bytes(warps, modes)
            <= per_cta_limit
    };
    let q_stages = match ov.q_stages {
        Some(q) if q == 1 || q == 2 => q,
        Some(q) => {
            return Err(Unsupported::new(
                NAME,
                format!("FLASHCORE_PORTABLE_Q_STAGES={q}: must be 1 or 2"),
            ))
        }
        // A second Q buffer only pays when Q is partly re-read from shared memory (otherwise the
        // buffer is released right after the item's first wait).
        None if q_reg_slices < all_slices && fits(2, 2) => 2,
        None => 1,
    };
    let stages = match ov.stages {
        Some(s) if (2..=5).contains(&s) => s,
        Some(s) => {
            return Err(Unsupported::new(
                NAME,
                format!("FLASHCORE_PORTABLE_STAGES={s}: must be in 2..=5"),
            ))
        }
        None => (2..=MAX_STAGES)
            .rev()
            .find(|&s| fits(s, q_stages))
            .unwrap_or(2),
    };
    let cfg = Config {
        head_dim,
        warps,
        m_tiles,
        block_n,
        stages,
        q_stages,
        q_reg_slices,
        ctas_per_sm,
        dynamic,
        modes,
    };
    let smem = cfg.smem_bytes();
    if smem > per_cta_limit {
        let q = cfg.block_m() * head_dim * 2;
        let kv = block_n * head_dim * 2;
        return Err(Unsupported::new(
            NAME,
            format!(
                "head_dim {head_dim} needs {smem} bytes of shared memory per block ({q_stages} x Q {q} + \
                 {stages} x (K + V) {} + {BAR_BYTES} barriers{}), the device allows {per_cta_limit}{}",
                2 * kv,
                if modes {
                    format!(" + {} item info", mode_info_bytes(warps, modes))
                } else {
                    String::new()
                },
                if ctas_per_sm > 1 {
                    format!(" per CTA at {ctas_per_sm} CTAs per SM")
                } else {
                    " with opt-in".to_string()
                }
            ),
        ));
    }
    Ok(cfg)
}

impl PersistentPortable {
    fn plan_with(
        &self,
        problem: &AttentionProblem,
        device: &DeviceInfo,
        ov: &Overrides,
        debug: bool,
    ) -> Result<LaunchPlan, Unsupported> {
        self.capabilities().check(NAME, problem, device)?;
        let d = problem.head_dim;
        // Inference modes get their own build (FC_PORTABLE_MODES); dense problems keep the dense
        // one, unchanged.
        let modes = !problem.modes.is_dense();
        let bi = problem.batch_invariant;
        let static_cfg = choose_config(d, false, modes, bi, device, ov)?;
        // (Varlen: seq_q is max_seqlen_q, so every sequence's q tiles have an item; those past
        // a shorter sequence's end finish at once.)
        let items = problem
            .batch
            .saturating_mul(problem.heads_q)
            .saturating_mul(problem.seq_q.div_ceil(static_cfg.block_m()));
        let slots = device.sm_count as usize * static_cfg.ctas_per_sm;
        // Dynamic schedule whenever a CTA gets more than one item: causal items differ in length
        // (a static round-robin leaves CTAs unevenly loaded), and greedy taking keeps the items
        // in flight a contiguous window of the L2-section order. With one item per CTA the
        // counter's atomics are pure overhead.
        // (Only the Q registers differ between the two: the item size, hence `items`, does not.)
        let cfg = if ov.dynamic.unwrap_or(items > slots) {
            choose_config(d, true, modes, bi, device, ov)?
        } else {
            static_cfg
        };
        if items >= MAX_ITEMS {
            return Err(Unsupported::new(
                NAME,
                format!(
                    "{items} work items (batch x heads_q x ceil(seq_q / {})); the kernel indexes fewer than {MAX_ITEMS}",
                    cfg.block_m()
                ),
            ));
        }
        // Persistent: every SM gets its CTAs, but no more CTAs than items.
        let ctas = (device.sm_count as usize * cfg.ctas_per_sm)
            .min(items)
            .max(1) as u32;
        // K/V bytes the item order keeps hot at once (heads per L2 section): half of L2.
        let l2_section = match ov.l2_section_mib {
            Some(mib) => (mib.max(1) as u64) << 20,
            None => (device.l2_bytes as u64 / 2).clamp(2 << 20, 64 << 20),
        };

        let mut defines = vec![
            ("FC_HEAD_DIM".to_string(), d.to_string()),
            ("FC_PORTABLE_WARPS".to_string(), cfg.warps.to_string()),
            (
                "FC_PORTABLE_WARP_M_TILES".to_string(),
                cfg.m_tiles.to_string(),
            ),
            ("FC_PORTABLE_BLOCK_N".to_string(), cfg.block_n.to_string()),
            ("FC_PORTABLE_STAGES".to_string(), cfg.stages.to_string()),
            ("FC_PORTABLE_Q_STAGES".to_string(), cfg.q_stages.to_string()),
            (
                "FC_PORTABLE_Q_REG_SLICES".to_string(),
                cfg.q_reg_slices.to_string(),
            ),
            (
                "FC_PORTABLE_MIN_BLOCKS".to_string(),
                cfg.ctas_per_sm.to_string(),
            ),
            (
                "FC_PORTABLE_L2_SECTION_BYTES".to_string(),
                format!("{l2_section}ull"),
            ),
        ];
        if cfg.dynamic {
            defines.push(("FC_PORTABLE_DYNAMIC".to_string(), "1".to_string()));
        }
        if cfg.modes {
            defines.push(("FC_PORTABLE_MODES".to_string(), "1".to_string()));
        }
        if let Some(head_major) = ov.head_major {
            defines.push((
                "FC_PORTABLE_HEAD_MAJOR".to_string(),
                (head_major as u32).to_string(),
            ));
        }
        if debug {
            // Bounded waits everywhere ("empty" becomes mbarriers too): a protocol deadlock
            // traps with a printf instead of hanging.
            defines.push(("FC_PORTABLE_DEBUG".to_string(), "1".to_string()));
        }

        let mut plan = LaunchPlan::single(KernelLaunch {
            source: SOURCE,
            entry: ENTRY,
            defines,
            grid: (ctas, 1, 1),
            block: (cfg.threads(), 1, 1),
            dynamic_smem_bytes: cfg.smem_bytes() as u32,
            tensor_maps: None,
            programmatic_launch: false,
        });
        if cfg.dynamic {
            // Workspace words 0 and 1: the next item and the CTAs done taking (zero at launch;
            // the kernel leaves them zero).
            plan.workspace_f32 = DYNAMIC_COUNTER_WORDS;
            plan.workspace_counters = DYNAMIC_COUNTER_WORDS;
        }
        Ok(plan)
    }
}

impl Attention for PersistentPortable {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        // cp.async, mbarrier, ldmatrix, bf16 mma.sync: sm_80. Every inference mode (the
        // FC_PORTABLE_MODES build).
        Capabilities::all_features(HeadDims::List(HEAD_DIMS), (8, 0)).with_modes(ModeSupport::ALL)
    }

    fn plan(
        &self,
        problem: &AttentionProblem,
        device: &DeviceInfo,
    ) -> Result<LaunchPlan, Unsupported> {
        self.capabilities().check(NAME, problem, device)?;
        let decode_cfg =
            crate::decode::DecodeConfig::from_env().map_err(|e| Unsupported::new(NAME, e))?;
        if crate::decode::takes(problem, &decode_cfg) {
            return crate::decode::plan(NAME, problem, device, &decode_cfg);
        }
        let plan = self.plan_with(
            problem,
            device,
            &Overrides::from_env(),
            Env::process()
                .flag_or_unset("FLASHCORE_PORTABLE_DEBUG")
                .unwrap_or(false),
        )?;
        if crate::decode::routes_per_sequence(problem, &decode_cfg) {
            return crate::decode::routed_plan(NAME, plan, problem, device, &decode_cfg);
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(cc: (u32, u32), optin_kib: u32) -> DeviceInfo {
        DeviceInfo {
            ordinal: 0,
            name: "synthetic".into(),
            compute_capability: cc,
            sm_count: 108,
            max_shared_memory_per_block: 48 * 1024,
            max_shared_memory_per_block_optin: optin_kib * 1024,
            l2_bytes: 40 << 20,
            total_memory: 40 << 30,
        }
    }

    fn define<'a>(l: &'a KernelLaunch, k: &str) -> &'a str {
        &l.defines.iter().find(|(n, _)| n == k).unwrap().1
    }

    fn plan(p: &AttentionProblem, d: &DeviceInfo) -> Result<LaunchPlan, Unsupported> {
        PersistentPortable.plan_with(p, d, &Overrides::default(), false)
    }

    #[test]
    fn smem_formula_matches_kernel() {
        // Kernel: Q_STAGES * 128 * D * 2 + 2 * STAGES * 64 * D * 2 + 256.
        assert_eq!(smem_bytes(64, 128, 64, 4, 1), 16384 + 65536 + 256);
        assert_eq!(smem_bytes(128, 128, 64, 4, 1), 32768 + 131072 + 256);
        assert_eq!(smem_bytes(128, 128, 64, 2, 1), 32768 + 65536 + 256);
        assert_eq!(smem_bytes(128, 128, 64, 4, 2), 65536 + 131072 + 256);
        assert_eq!(smem_bytes(64, 64, 64, 3, 1), 8192 + 49152 + 256);
    }

    #[test]
    fn h100_persistent_grid_and_block() {
        let h100 = DeviceInfo::synthetic_h100();
        for d in [64, 128] {
            for causal in [false, true] {
                let p = AttentionProblem::new(4, 16, 2048, d).with_causal(causal);
                // Default on sm_90: at D = 64, 4 consumer warps + the producer, two CTAs per SM;
                // at D = 128, 7 + the producer, one CTA per SM (8 warps: 255 registers).
                let l = &plan(&p, &h100).unwrap().launches[0];
                if d == 64 {
                    assert_eq!(l.grid, (264, 1, 1));
                    assert_eq!(l.block, (160, 1, 1));
                } else {
                    assert_eq!(l.grid, (132, 1, 1));
                    assert_eq!(l.block, (256, 1, 1));
                    assert_eq!(define(l, "FC_PORTABLE_MIN_BLOCKS"), "1");
                }
                let eight = Overrides {
                    warps: Some(8),
                    ..Default::default()
                };
                let l = &PersistentPortable
                    .plan_with(&p, &h100, &eight, false)
                    .unwrap()
                    .launches[0];
                assert_eq!(l.grid, (132, 1, 1));
                assert_eq!(l.block, (288, 1, 1));
                assert_eq!(l.entry, ENTRY);
                assert_eq!(l.source, SOURCE);
                assert!(l.dynamic_smem_bytes as usize <= 227 * 1024);
            }
        }
        // D = 128 on sm_90 with 8 warps: 6 Q slices in registers, Q double-buffered, 4 stages.
        let eight = Overrides {
            warps: Some(8),
            ..Default::default()
        };
        let l = &PersistentPortable
            .plan_with(
                &AttentionProblem::new(1, 16, 16384, 128),
                &h100,
                &eight,
                false,
            )
            .unwrap()
            .launches[0];
        assert_eq!(define(l, "FC_PORTABLE_Q_REG_SLICES"), "6");
        assert_eq!(define(l, "FC_PORTABLE_Q_STAGES"), "2");
        assert_eq!(define(l, "FC_PORTABLE_STAGES"), "4");
        assert_eq!(l.dynamic_smem_bytes, 65536 + 131072 + 256);
        let l = &PersistentPortable
            .plan_with(
                &AttentionProblem::new(1, 16, 16384, 64),
                &h100,
                &eight,
                false,
            )
            .unwrap()
            .launches[0];
        assert_eq!(define(l, "FC_PORTABLE_Q_REG_SLICES"), "4");
        assert_eq!(define(l, "FC_PORTABLE_Q_STAGES"), "1");
        assert_eq!(define(l, "FC_PORTABLE_STAGES"), "4");
    }

    #[test]
    fn grid_never_exceeds_items() {
        let p = AttentionProblem::new(1, 2, 300, 64); // 2 heads x 5 q tiles of 64 rows (sm_90)
        let l = &plan(&p, &DeviceInfo::synthetic_h100()).unwrap().launches[0];
        assert_eq!(l.grid, (10, 1, 1));
    }

    #[test]
    fn ampere_and_ada_configurations_fit() {
        // A100: 163 KB -> D = 128 keeps all of Q in registers, 4 stages (164 096 bytes).
        let a100 = dev((8, 0), 163);
        let l = &plan(&AttentionProblem::new(2, 8, 1024, 128), &a100)
            .unwrap()
            .launches[0];
        assert_eq!(define(l, "FC_PORTABLE_Q_REG_SLICES"), "8");
        assert_eq!(define(l, "FC_PORTABLE_Q_STAGES"), "1");
        assert_eq!(define(l, "FC_PORTABLE_STAGES"), "4");
        assert_eq!(l.grid, (108, 1, 1));
        // sm_86 / sm_89: 99 KB -> D = 128 gets 2 stages (98 560 bytes).
        for cc in [(8, 6), (8, 9)] {
            let d = dev(cc, 99);
            let l = &plan(&AttentionProblem::new(2, 8, 1024, 128), &d)
                .unwrap()
                .launches[0];
            assert_eq!(define(l, "FC_PORTABLE_STAGES"), "2");
            assert_eq!(l.dynamic_smem_bytes, 98560);
            let l = &plan(&AttentionProblem::new(2, 8, 1024, 64), &d)
                .unwrap()
                .launches[0];
            assert_eq!(define(l, "FC_PORTABLE_STAGES"), "4");
        }
    }

    #[test]
    fn too_little_shared_memory_says_how_much() {
        let small = dev((8, 6), 64);
        let err = PersistentPortable
            .supports(&AttentionProblem::new(1, 1, 128, 128), &small)
            .unwrap_err();
        assert!(err.reason.contains("98560"), "{err}");
        assert!(err.reason.contains("65536"), "{err}");
    }

    #[test]
    fn head_dims_off_the_list_are_unsupported_with_a_reason() {
        let dev = DeviceInfo::synthetic_h100();
        for d in [32, 96, 256] {
            let p = AttentionProblem::new(1, 1, 8, d);
            let err = PersistentPortable.supports(&p, &dev).unwrap_err();
            assert!(err.reason.contains(&format!("head_dim {d}")), "{err}");
        }
    }

    #[test]
    fn pre_ampere_is_unsupported() {
        let p = AttentionProblem::new(1, 1, 8, 64);
        assert!(PersistentPortable.supports(&p, &dev((7, 5), 64)).is_err());
    }

    #[test]
    fn item_count_limit() {
        // 64-row items on sm_90: 2^11 * 2^6 * 2^8 = 2^25 items
        let p = AttentionProblem::new(1 << 11, 1 << 6, 1 << 14, 64);
        let err = plan(&p, &DeviceInfo::synthetic_h100()).unwrap_err();
        assert!(err.reason.contains("work items"), "{err}");
        let p = AttentionProblem::new(1 << 10, 1 << 6, 1 << 14, 64);
        assert!(plan(&p, &DeviceInfo::synthetic_h100()).is_ok());
    }

    #[test]
    fn four_warp_variant_shares_the_sm() {
        let ov = Overrides {
            warps: Some(4),
            ..Default::default()
        };
        let h100 = DeviceInfo::synthetic_h100();
        let p = AttentionProblem::new(4, 16, 2048, 128);
        let l = &PersistentPortable
            .plan_with(&p, &h100, &ov, false)
            .unwrap()
            .launches[0];
        assert_eq!(l.block, (160, 1, 1));
        assert_eq!(l.grid, (264, 1, 1));
        assert_eq!(define(l, "FC_PORTABLE_MIN_BLOCKS"), "2");
        assert!(2 * (l.dynamic_smem_bytes as usize + 1024) <= 228 * 1024);
    }

    #[test]
    fn register_budget_follows_warps_per_sub_partition() {
        // 8 warps per SM: 2 per sub-partition; 9 or 10: 3 on one; 16: 4.
        assert_eq!(register_budget(7, 1), 255);
        assert_eq!(register_budget(3, 2), 255);
        assert_eq!(register_budget(8, 1), 168);
        assert_eq!(register_budget(4, 2), 168);
        assert_eq!(register_budget(3, 4), 128);
    }

    #[test]
    fn head_dim_128_on_sm90_is_seven_warps_of_128_key_tiles() {
        let h100 = DeviceInfo::synthetic_h100();
        let l = &plan(&AttentionProblem::new(1, 16, 16384, 128), &h100)
            .unwrap()
            .launches[0];
        assert_eq!(define(l, "FC_PORTABLE_WARPS"), "7");
        assert_eq!(define(l, "FC_PORTABLE_BLOCK_N"), "128");
        // All 8 Q slices in registers, so one Q buffer; 3 stages of 128-key K and V.
        assert_eq!(define(l, "FC_PORTABLE_Q_REG_SLICES"), "8");
        assert_eq!(define(l, "FC_PORTABLE_Q_STAGES"), "1");
        assert_eq!(define(l, "FC_PORTABLE_STAGES"), "3");
        // 112 x 128 x 2 (Q) + 2 x 3 x 128 x 128 x 2 (K, V) + 256
        assert_eq!(l.dynamic_smem_bytes, 28672 + 196608 + 256);
        assert!(l.dynamic_smem_bytes as usize <= 227 * 1024);
    }

    #[test]
    fn block_n_128_at_head_dim_128_needs_the_full_register_budget() {
        let ov = Overrides {
            block_n: Some(128),
            ..Default::default()
        };
        let h100 = DeviceInfo::synthetic_h100();
        let p = AttentionProblem::new(1, 1, 256, 64);
        let l = &PersistentPortable
            .plan_with(&p, &h100, &ov, false)
            .unwrap()
            .launches[0];
        assert_eq!(define(l, "FC_PORTABLE_BLOCK_N"), "128");
        // D = 128 with 4 warps x 2 CTAs (10 warps per SM, 168 registers): S + O + Q spill.
        let four = Overrides {
            warps: Some(4),
            ..ov
        };
        let p = AttentionProblem::new(1, 1, 256, 128);
        let err = PersistentPortable
            .plan_with(&p, &h100, &four, false)
            .unwrap_err();
        assert!(err.reason.contains("255-register"), "{err}");
        // The sm_90 D = 128 default (7 warps, one CTA) takes it.
        assert!(PersistentPortable.plan_with(&p, &h100, &ov, false).is_ok());
    }

    #[test]
    fn dynamic_schedule_only_past_one_round() {
        let h100 = DeviceInfo::synthetic_h100();
        // (4,16,2048,128) with 4 warps: 2048 items of 64 rows for 264 CTA slots -> dynamic, two
        // counter words.
        let four = Overrides {
            warps: Some(4),
            ..Default::default()
        };
        let p = PersistentPortable
            .plan_with(
                &AttentionProblem::new(4, 16, 2048, 128),
                &h100,
                &four,
                false,
            )
            .unwrap();
        let l = &p.launches[0];
        assert_eq!(define(l, "FC_PORTABLE_DYNAMIC"), "1");
        assert_eq!(p.workspace_f32, DYNAMIC_COUNTER_WORDS);
        assert_eq!(p.workspace_counters, DYNAMIC_COUNTER_WORDS);
        // The dynamic hand-over costs a register: 5 Q slices in registers at D = 128, 4 warps.
        assert_eq!(define(l, "FC_PORTABLE_Q_REG_SLICES"), "5");
        // (1,8,512,64): 8 x 4 items of 128 rows (D = 64 on sm_90) <= 264 slots -> static.
        let plan = PersistentPortable
            .plan_with(
                &AttentionProblem::new(1, 8, 512, 64),
                &h100,
                &Overrides::default(),
                false,
            )
            .unwrap();
        assert!(plan.launches[0]
            .defines
            .iter()
            .all(|(n, _)| n != "FC_PORTABLE_DYNAMIC"));
        assert_eq!(plan.workspace_f32, 0);
        // Forced off.
        let off = Overrides {
            dynamic: Some(false),
            ..four
        };
        let plan = PersistentPortable
            .plan_with(&AttentionProblem::new(4, 16, 2048, 128), &h100, &off, false)
            .unwrap();
        assert_eq!(plan.workspace_f32, 0);
        assert_eq!(define(&plan.launches[0], "FC_PORTABLE_Q_REG_SLICES"), "6");
    }

    #[test]
    fn head_dim_64_on_sm90_takes_128_key_tiles() {
        let h100 = DeviceInfo::synthetic_h100();
        let l = &plan(&AttentionProblem::new(4, 16, 2048, 64), &h100)
            .unwrap()
            .launches[0];
        assert_eq!(define(l, "FC_PORTABLE_BLOCK_N"), "128");
        assert_eq!(define(l, "FC_PORTABLE_STAGES"), "3");
        // 64 x 64 x 2 (Q) + 2 x 3 x 128 x 64 x 2 (K, V) + 256
        assert_eq!(l.dynamic_smem_bytes, 8192 + 98304 + 256);
        // Ampere keeps 64-key tiles.
        let l = &plan(&AttentionProblem::new(4, 16, 2048, 64), &dev((8, 0), 163))
            .unwrap()
            .launches[0];
        assert_eq!(define(l, "FC_PORTABLE_BLOCK_N"), "64");
    }

    #[test]
    fn two_row_tiles_per_warp_double_the_item() {
        let ov = Overrides {
            warps: Some(3),
            m_tiles: Some(2),
            ..Default::default()
        };
        let h100 = DeviceInfo::synthetic_h100();
        let l = &PersistentPortable
            .plan_with(&AttentionProblem::new(1, 2, 960, 64), &h100, &ov, false)
            .unwrap()
            .launches[0];
        // 96-row items: 2 heads x 10 q tiles; 3 consumer warps + the producer.
        assert_eq!(l.grid, (20, 1, 1));
        assert_eq!(l.block, (128, 1, 1));
        assert_eq!(define(l, "FC_PORTABLE_WARP_M_TILES"), "2");
        let bad = Overrides {
            m_tiles: Some(3),
            ..Default::default()
        };
        let err = PersistentPortable
            .plan_with(&AttentionProblem::new(1, 2, 960, 64), &h100, &bad, false)
            .unwrap_err();
        assert!(err.reason.contains("WARP_M_TILES=3"), "{err}");
    }

    /// Paged cache with seqused_k, window, softcap, ALiBi, causal, GQA (as check-kernels'
    /// every-mode problem).
    fn every_mode(d: usize) -> AttentionProblem {
        use flashcore_core::{AlibiSlopes, KvStorage, Modes};
        AttentionProblem::new(2, 8, 512, d)
            .with_kv(2, 1024)
            .with_causal(true)
            .with_modes(Modes {
                kv: KvStorage::Paged {
                    num_blocks: 32,
                    block_size: 64,
                    max_blocks_per_seq: 16,
                },
                seqused_k: true,
                append: Some(3),
                window_left: Some(256),
                softcap: Some(30.0),
                alibi: Some(AlibiSlopes::PerBatchHead),
                ..Modes::default()
            })
    }

    /// Varlen: packed Q/O (3 sequences, max_seqlen_q 300) and packed K/V.
    fn varlen(d: usize) -> AttentionProblem {
        use flashcore_core::{KvStorage, Modes};
        AttentionProblem::new(3, 4, 300, d)
            .with_kv(4, 700)
            .with_modes(Modes {
                packed_q: Some(555),
                kv: KvStorage::Packed { total_k: 1200 },
                window_right: Some(7),
                ..Modes::default()
            })
    }

    #[test]
    fn modes_build_only_for_mode_problems() {
        let devices = [
            DeviceInfo::synthetic_h100(),
            dev((8, 0), 163),
            dev((8, 6), 99),
            dev((8, 9), 99),
        ];
        for device in &devices {
            for d in [64, 128] {
                // Dense: no FC_PORTABLE_MODES, shared memory as before.
                for p in [
                    AttentionProblem::new(2, 8, 1024, d),
                    AttentionProblem::new(4, 16, 2048, d).with_causal(true),
                ] {
                    let l = &plan(&p, device).unwrap().launches[0];
                    assert!(l.defines.iter().all(|(n, _)| n != "FC_PORTABLE_MODES"));
                    let warps: usize = define(l, "FC_PORTABLE_WARPS").parse().unwrap();
                    let block_n: usize = define(l, "FC_PORTABLE_BLOCK_N").parse().unwrap();
                    let stages: usize = define(l, "FC_PORTABLE_STAGES").parse().unwrap();
                    let q_stages: usize = define(l, "FC_PORTABLE_Q_STAGES").parse().unwrap();
                    assert_eq!(
                        l.dynamic_smem_bytes as usize,
                        smem_bytes(d, 16 * warps, block_n, stages, q_stages)
                    );
                }
                // Every mode (and varlen): the capabilities pass, the modes build is asked for,
                // with the per-warp item info after the barriers.
                for p in [every_mode(d), varlen(d)] {
                    PersistentPortable
                        .capabilities()
                        .check(NAME, &p, device)
                        .unwrap();
                    PersistentPortable.supports(&p, device).unwrap();
                    let l = &plan(&p, device).unwrap().launches[0];
                    assert_eq!(define(l, "FC_PORTABLE_MODES"), "1");
                    let warps: usize = define(l, "FC_PORTABLE_WARPS").parse().unwrap();
                    let block_n: usize = define(l, "FC_PORTABLE_BLOCK_N").parse().unwrap();
                    let stages: usize = define(l, "FC_PORTABLE_STAGES").parse().unwrap();
                    let q_stages: usize = define(l, "FC_PORTABLE_Q_STAGES").parse().unwrap();
                    assert_eq!(
                        l.dynamic_smem_bytes as usize,
                        smem_bytes(d, 16 * warps, block_n, stages, q_stages) + 32 * warps
                    );
                    assert!(
                        l.dynamic_smem_bytes <= device.max_shared_memory_per_block_optin,
                        "{p} on {:?}",
                        device.compute_capability
                    );
                }
            }
        }
    }

    #[test]
    fn modes_take_64_key_tiles_at_head_dim_64_on_sm90() {
        let h100 = DeviceInfo::synthetic_h100();
        let l = &plan(&every_mode(64), &h100).unwrap().launches[0];
        assert_eq!(define(l, "FC_PORTABLE_WARPS"), "4");
        assert_eq!(define(l, "FC_PORTABLE_BLOCK_N"), "64");
        // D = 128 keeps its 7 warps and 128-key tiles (255 registers: room for the block info).
        let l = &plan(&every_mode(128), &h100).unwrap().launches[0];
        assert_eq!(define(l, "FC_PORTABLE_WARPS"), "7");
        assert_eq!(define(l, "FC_PORTABLE_BLOCK_N"), "128");
        // An explicit override still wins.
        let ov = Overrides {
            block_n: Some(128),
            ..Default::default()
        };
        let l = &PersistentPortable
            .plan_with(&every_mode(64), &h100, &ov, false)
            .unwrap()
            .launches[0];
        assert_eq!(define(l, "FC_PORTABLE_BLOCK_N"), "128");
    }

    #[test]
    fn varlen_items_cover_max_seqlen_q_tiles() {
        // 3 sequences x 4 heads x ceil(300 / BM) q tiles, whatever each sequence's own length:
        // the kernel finishes the items past a sequence's end at once.
        let a100 = dev((8, 0), 163);
        let p = varlen(128);
        let l = &plan(&p, &a100).unwrap().launches[0];
        assert_eq!(define(l, "FC_PORTABLE_WARPS"), "8"); // 128-row items
        assert_eq!(l.grid, (3 * 4 * 3, 1, 1)); // 36 items < 108 SMs: one CTA each
        assert!(l.defines.iter().all(|(n, _)| n != "FC_PORTABLE_DYNAMIC"));
        // sm_90, D = 64: 64-row items, 3 x 4 x 5 = 60.
        let l = &plan(&varlen(64), &DeviceInfo::synthetic_h100())
            .unwrap()
            .launches[0];
        assert_eq!(l.grid, (60, 1, 1));
        // Many items: the dynamic schedule, with its counters, in the modes build too.
        let big = AttentionProblem::new(16, 32, 4096, 128)
            .with_causal(true)
            .with_modes(flashcore_core::Modes {
                packed_q: Some(16 * 4096),
                ..Default::default()
            });
        let plan = plan(&big, &a100).unwrap();
        let l = &plan.launches[0];
        assert_eq!(define(l, "FC_PORTABLE_MODES"), "1");
        assert_eq!(define(l, "FC_PORTABLE_DYNAMIC"), "1");
        assert_eq!(plan.workspace_counters, DYNAMIC_COUNTER_WORDS);
        assert_eq!(l.grid, (108, 1, 1));
    }

    #[test]
    fn debug_define() {
        let p = AttentionProblem::new(1, 1, 64, 64);
        let plan = PersistentPortable
            .plan_with(
                &p,
                &DeviceInfo::synthetic_h100(),
                &Overrides::default(),
                true,
            )
            .unwrap();
        assert_eq!(define(&plan.launches[0], "FC_PORTABLE_DEBUG"), "1");
    }
}
