//! Generation 5, Hopper path: persistent, warp-specialized TMA + wgmma kernel
//! (`kernels/gen5_persistent_hopper.cu`, design in `docs/generations/gen5-persistent.md`).
//!
//! One launch: `sm_count` CTAs of 384 threads (1 producer warpgroup issuing TMA, 2 consumer
//! warpgroups running wgmma), each looping over (batch, head, 128-row q tile) work items; or, at
//! D = 64 ([`HopperConfig::consumer_wgs`]), 512 threads with 3 consumer warpgroups and 192-row
//! q tiles.
//!
//! One-round problems ([`default_wg_key_split`]) give both consumer warpgroups the same 64-row
//! q tile, each every other key tile, merged in shared memory (`FC_HOPPER_WG_KEY_SPLIT`,
//! `kernels/gen5_hopper/wg_key_split.cuh`).
//!
//! Small problems (fewer than half as many items as SMs) split each item's keys into
//! `num_splits` ranges, one work unit each, and combine the partial results in the same launch
//! (`FC_HOPPER_SPLIT_KV`; protocol in `docs/generations/gen5-split-kv.md`).

use flashcore_core::launch::paged_box_rows;
use flashcore_core::plan::{
    Attention, Capabilities, HeadDims, KernelLaunch, LaunchPlan, Swizzle, TensorMapSpec,
};
use flashcore_core::problem::AttentionProblem;
use flashcore_core::{DeviceInfo, Unsupported};
use flashcore_core::{KvStorage, ModeSupport};

use crate::env::{parse_number, Env};

/// The FA3-style Hopper kernel.
pub struct PersistentHopper;

const NAME: &str = "persistent-hopper";
const SOURCE: &str = "gen5_persistent_hopper.cu";
const ENTRY: &str = "attention_persistent_hopper";
/// The timeline's printer ([`HopperConfig::trace`]), compiled in traced builds only.
const TRACE_PRINT_ENTRY: &str = "attention_persistent_hopper_trace_print";

/// Q rows per work item with two consumer warpgroups of 64 rows = Q TMA box rows.
pub const BLOCK_M: usize = 128;
/// Q rows per consumer warpgroup.
pub const WARPGROUP_ROWS: usize = 64;
/// Keys per K/V tile = K/V TMA box rows. 128 for both head dims: with D = 128 the consumer holds
/// S (64 f32) + O (64 f32) + P (32 packed) + bookkeeping, well inside the 232-register budget.
pub const BLOCK_N: usize = 128;
/// Keys per K/V tile at D = 128 without causal masking ([`HopperConfig::wide_noncausal`]).
pub const WIDE_BLOCK_N: usize = 176;
/// K/V ring depth. 2 stages for D = 128 is 160 KiB of smem; 3 would still fit (224 KiB).
pub const STAGES: usize = 2;
/// 1: FA3 intra-warpgroup overlap (softmax of S_j+1 while O += P_j V_j runs); 0: the simple
/// serial loop. Override at run time with FLASHCORE_HOPPER_OVERLAP=0|1 (e.g. to bisect a failure).
pub const OVERLAP: bool = true;
/// Threads per warpgroup (a CTA: the producer's and the consumers', [`HopperConfig::threads`]).
const WARPGROUP_THREADS: usize = 128;
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
    smem_bytes_with_block_n(head_dim, elem_bytes, stages, q_stages, BLOCK_N)
}

/// [`smem_bytes_for`] with `block_n` keys per K/V tile.
pub fn smem_bytes_with_block_n(
    head_dim: usize,
    elem_bytes: usize,
    stages: usize,
    q_stages: usize,
    block_n: usize,
) -> usize {
    smem_bytes_with_tiles(head_dim, elem_bytes, stages, q_stages, BLOCK_M, block_n)
}

/// [`smem_bytes_for`] with `block_m` q rows per item and `block_n` keys per K/V tile.
pub fn smem_bytes_with_tiles(
    head_dim: usize,
    elem_bytes: usize,
    stages: usize,
    q_stages: usize,
    block_m: usize,
    block_n: usize,
) -> usize {
    let q = block_m * head_dim * elem_bytes;
    let kv_tile = block_n * head_dim * elem_bytes;
    q_stages * q + 2 * stages * kv_tile + barrier_area_bytes(q_stages, stages, 0) + SMEM_ALIGN_SLACK
}

/// The barrier area (the kernel's OFF_XCHG - OFF_BAR): the barriers (+ the producer's v_landed),
/// the dynamic schedule's two unit-index words (OFF_ITEM) and `extra` bytes after them, rounded up
/// to 128 bytes.
fn barrier_area_bytes(q_stages: usize, stages: usize, extra: usize) -> usize {
    ((2 * q_stages + 4 * stages + 1) * 8 + 8 + extra).div_ceil(128) * 128
}

/// [`smem_bytes_for`] of the default configuration.
pub fn smem_bytes(head_dim: usize, elem_bytes: usize) -> usize {
    smem_bytes_for(head_dim, elem_bytes, STAGES, Q_STAGES)
}

/// Paged tiles whose TMA boxes hold fewer rows than this (block sizes 16, 32, 48, ... at 128-key
/// tiles: eight boxes or more per K or V tile) get a build whose four producer warps share the
/// boxes (`FC_HOPPER_SPREAD_PAGES`). One warp issuing them lane after lane was the bottleneck of
/// 16-row pages; the loop of its own is a build of its own because it made the other modes
/// builds' chunked prefill 4-5 % slower (session 9, runs 1-2).
pub const SPREAD_BELOW_BOX_ROWS: u32 = 64;

/// K/V bytes the tile scheduler keeps hot at once (its heads per L2 section, used under causal
/// masking): a quarter of the device's L2, within 4-64 MiB. A quarter (12 MiB on the H100) ran
/// the causal ladder rows 1-4 % faster than half, which the scheduler had used since session 3;
/// 6, 50 and 100 MiB were slower (session 9, run12, two passes).
pub fn default_l2_section_bytes(device: &DeviceInfo) -> u64 {
    (device.l2_bytes as u64 / 4).clamp(4 << 20, 64 << 20)
}

fn spreads_page_boxes(problem: &AttentionProblem, block_n: usize) -> bool {
    match problem.modes.kv {
        KvStorage::Paged { block_size, .. } => {
            paged_box_rows(block_size as u32, block_n as u32) < SPREAD_BELOW_BOX_ROWS
        }
        _ => false,
    }
}

/// Workspace words the dynamic schedule uses as counters (FC_HOPPER_DYNAMIC).
pub const DYNAMIC_COUNTER_WORDS: usize = 2;
/// Largest `FLASHCORE_HOPPER_SPLITS` accepted.
pub const MAX_SPLITS: usize = 128;
/// Split-KV arrival counters per work item: one per warp of the two consumer warpgroups.
pub const SPLIT_COUNTERS_PER_ITEM: usize = 8;
/// Largest split-KV workspace a plan asks for (1 GiB); a problem that would need more is not
/// split (it has enough items to fill the GPU anyway unless splitting is forced).
pub const MAX_SPLIT_WORKSPACE_BYTES: usize = 1 << 30;

/// Key-range splits per work item when the environment does not force a count: split only
/// when at least two units per item fit in one wave (`items <= sm_count / 2`) and the longest
/// item has at least two key tiles; then `min(longest item's key tiles, sm_count / items)`
/// (rounded down: `items * splits <= sm_count`, so every unit runs in the first and only wave —
/// rounding up would put a second, short wave behind the first).
pub fn auto_splits(items: usize, max_key_tiles: usize, sm_count: usize) -> usize {
    if items == 0 || max_key_tiles < 2 {
        return 1;
    }
    (sm_count / items).min(max_key_tiles).max(1)
}

/// Leading workspace words holding the arrival counters (u32): 8 per item, rounded up to 32
/// words (128 bytes) so that the partial slots behind them stay 128-byte aligned.
pub fn split_counter_words(items: usize) -> usize {
    (items * SPLIT_COUNTERS_PER_ITEM).next_multiple_of(32)
}

/// f32 words of workspace a split plan needs; mirrors the layout in the kernel
/// (`split_epilogue`): the counters, then per (item, split, consumer warpgroup) one slot of
/// `64·D` partial-O words plus 512 words of (m, l) (a float4 per thread of the warpgroup).
/// `None` on overflow.
pub fn split_workspace_f32(items: usize, splits: usize, head_dim: usize) -> Option<usize> {
    let slot = (BLOCK_M / 2) * head_dim + 4 * 128;
    items
        .checked_mul(splits)?
        .checked_mul(2)?
        .checked_mul(slot)?
        .checked_add(split_counter_words(items))
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
    /// env `FLASHCORE_HOPPER_SMEM_EPILOGUE=0|1`, 1 implies `q_stages = 2`). `None`:
    /// [`HopperConfig::for_problem`] decides: on for dense, unsplit D = 64 problems whose items
    /// fit one round and that do not take the key split ([`default_wg_key_split`]; session 16
    /// run10, the mission shape 7.17 → 6.77 µs: the kernel's O stores are on the critical path of
    /// a one-round grid), off elsewhere (the ladder's many-round rows
    /// had a lower sum with it, docs/results/2026-11-23-hopper-variants-h100).
    pub smem_epilogue: Option<bool>,
    /// `FC_HOPPER_CONSUMER_REGS` (env `FLASHCORE_HOPPER_CONSUMER_REGS`, 232|240).
    pub consumer_regs: usize,
    /// Split-KV: `None` lets the plan choose ([`auto_splits`]); `Some(1)` never splits;
    /// `Some(n)` splits every problem into `n` key ranges per item (env
    /// `FLASHCORE_HOPPER_SPLITS`, 1..=[`MAX_SPLITS`]; for running the verify sweep through the
    /// split path).
    pub splits: Option<usize>,
    /// Consumer warpgroups (`FC_HOPPER_CONSUMER_WGS`; env `FLASHCORE_HOPPER_CONSUMER_WGS`, 2|3).
    /// 3: 192-row q tiles (FlashAttention-3's D = 64 tile) at 160 consumer registers, for dense
    /// D = 64 problems that run unsplit with the register epilogue; anywhere else the plan uses
    /// 2. `None`: [`HopperConfig::for_problem`] chooses ([`default_consumer_wgs`]).
    pub consumer_wgs: Option<usize>,
    /// `FLASHCORE_HOPPER_SPLITS=auto`: split small problems by [`auto_splits`]. Off by default:
    /// on the H100 the split build was slower at (1,8,512,64) than the unsplit one (9.60 against
    /// 8.66 µs, docs/results/2026-11-23-portable-ab-h100/ab5.txt), the fixed cost of a launch
    /// (prologue, first loads) dominating a problem of 4 key tiles per item.
    pub auto_split: bool,
    /// `FLASHCORE_HOPPER_DYNAMIC=0|1`: units from a global counter (`None`: whenever a CTA gets
    /// more than one unit and the problem is not split).
    pub dynamic: Option<bool>,
    /// `FLASHCORE_HOPPER_HEAD_MAJOR=0|1`: one head per L2 section without causal masking
    /// (`FC_HOPPER_HEAD_MAJOR`; `None`: the kernel's default).
    pub head_major: Option<bool>,
    /// Keys per K/V tile (`FC_HOPPER_BLOCK_N`; env `FLASHCORE_HOPPER_BLOCK_N`, 64|128|176, which
    /// also turns `wide_noncausal` off).
    pub block_n: usize,
    /// At D = 128 without causal masking: 176-key tiles with one Q buffer and 240 consumer
    /// registers (FlashAttention-3's non-causal width; 128 x 176 S tiles need the second Q
    /// buffer's shared memory). Measured +0-10 % over the default at the D = 128 non-causal
    /// ladder rows on the H100 and slower under causal masking or at D = 64 (docs/results/
    /// 2026-11-23-gen5-session3-h100, ab17). Env `FLASHCORE_HOPPER_WIDE_NONCAUSAL=0|1`.
    pub wide_noncausal: bool,
    /// K/V bytes the tile scheduler keeps hot at once (`FC_HOPPER_L2_SECTION_BYTES`; env
    /// `FLASHCORE_HOPPER_L2_SECTION_MB`, 1..=1024; `None`: [`default_l2_section_bytes`]).
    pub l2_section_bytes: Option<u64>,
    /// Programmatic dependent launch (`KernelLaunch::programmatic_launch`; env
    /// `FLASHCORE_HOPPER_PDL=0|1`; `None`: dense problems only): the kernel may start while the
    /// stream's previous kernel runs, its setup (barriers, tensor-map prefetch) overlapping that
    /// kernel's tail, and waits for it (`griddepcontrol.wait`) before its first global-memory
    /// access. Measured (session 15, runs 6 and 9): the mission shape −8 %, the D = 64 ladder
    /// rows −1.2 to −1.7 % (eager), D = 128 level; the modes build's chunked-prefill row 1-2 %
    /// slower, so mode problems launch plainly unless forced.
    pub programmatic_launch: Option<bool>,
    /// L2 prefetch of a CTA's first unit (its Q tile and first K/V tiles) before the kernel waits
    /// for the one before it (`FC_HOPPER_PREFETCH`; env `FLASHCORE_HOPPER_PREFETCH=0|1`; `None`:
    /// where the launch is programmatic and the units fit one round, so that the previous call
    /// leaves SMs free for this one's CTAs to start early). Only where the kernel works out its
    /// first unit early ([`HopperConfig::early_first_unit`]).
    pub prefetch: Option<bool>,
    /// Key-split warpgroups (`FC_HOPPER_WG_KEY_SPLIT`; env `FLASHCORE_HOPPER_WG_KEY_SPLIT=0|1`):
    /// both consumer warpgroups take the same 64-row q tile, each every other key tile, merged
    /// in shared memory before the epilogue (`kernels/gen5_hopper/wg_key_split.cuh`). A CTA then
    /// walks half the key tiles one after another. `None`: [`default_wg_key_split`]. Taken only by
    /// dense, unsplit, overlapped plans with the register epilogue and two warpgroups; forced on,
    /// every other dense problem takes it too (for verifying it).
    pub wg_key_split: Option<bool>,
    /// Cluster key split (`FC_HOPPER_CLUSTER_KEY_SPLIT`; env
    /// `FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT=0|1`): on top of the key-split warpgroups, a cluster of
    /// two CTAs takes each item, CTA r the r-th half of its key tiles, and the two merge their
    /// parts through each other's shared memory (`kernels/gen5_hopper/wg_key_split.cuh`). A CTA
    /// then walks a quarter of the item's key tiles a warpgroup. One item per cluster, so the
    /// grid is two CTAs an item. `None`: [`default_cluster_key_split`]. Taken only with the
    /// key split; forced on, every problem that takes the key split takes it too.
    pub cluster_key_split: Option<bool>,
    /// A printed clock64 timeline of three CTAs' units (`FC_HOPPER_TRACE`,
    /// `kernels/gen5_hopper/trace.cuh`; env `FLASHCORE_HOPPER_TRACE=0|1`), for finding where a
    /// unit's time goes. Off by default. On, the kernel builds as a module of its own and the
    /// plan gains a second launch, the printer; the kernel itself times as the default one
    /// (session 17, run6).
    pub trace: bool,
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
            smem_epilogue: None,
            consumer_regs: CONSUMER_REGS,
            consumer_wgs: None,
            splits: None,
            auto_split: false,
            dynamic: None,
            head_major: None,
            block_n: BLOCK_N,
            wide_noncausal: true,
            l2_section_bytes: None,
            programmatic_launch: None,
            prefetch: None,
            wg_key_split: None,
            cluster_key_split: None,
            trace: false,
        }
    }
}

impl HopperConfig {
    /// The default with the `FLASHCORE_HOPPER_*` environment overrides applied.
    pub fn from_env() -> Result<Self, String> {
        Self::read(Env::process())
    }

    /// `lookup(name)` returns the override for `FLASHCORE_HOPPER_<name>` (unset: `None`).
    pub fn from_overrides(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        Self::read(Env::new(&lookup))
    }

    fn read(env: Env) -> Result<Self, String> {
        let mut c = Self::default();
        let flag = |name: &str| env.flag(name, |v| format!("{name}={v}: expected 0 or 1"));
        let number = |name: &str, allowed: &[usize]| {
            env.number(
                name,
                |n| allowed.contains(&n),
                |v| format!("{name}={v}: expected one of {allowed:?}"),
            )
        };
        if let Some(v) = flag("FLASHCORE_HOPPER_OVERLAP")? {
            c.overlap = v;
            // Ping-pong is built on the overlapped loop: turning that off turns it off too.
            c.pingpong &= v;
        }
        if let Some(v) = flag("FLASHCORE_HOPPER_PINGPONG")? {
            c.pingpong = v;
        }
        if let Some(v) = flag("FLASHCORE_HOPPER_DYNAMIC")? {
            c.dynamic = Some(v);
        }
        if let Some(v) = flag("FLASHCORE_HOPPER_HEAD_MAJOR")? {
            c.head_major = Some(v);
        }
        if let Some(v) = flag("FLASHCORE_HOPPER_SMEM_EPILOGUE")? {
            c.smem_epilogue = Some(v);
        }
        if let Some(v) = number("FLASHCORE_HOPPER_STAGES", &[2, 3, 4])? {
            c.stages = v;
        }
        if let Some(v) = number("FLASHCORE_HOPPER_BLOCK_N", &[64, 128, 176])? {
            c.block_n = v;
            c.wide_noncausal = false;
        }
        if let Some(v) = flag("FLASHCORE_HOPPER_WIDE_NONCAUSAL")? {
            c.wide_noncausal = v;
        }
        if let Some(v) = flag("FLASHCORE_HOPPER_PDL")? {
            c.programmatic_launch = Some(v);
        }
        if let Some(v) = flag("FLASHCORE_HOPPER_PREFETCH")? {
            c.prefetch = Some(v);
        }
        if let Some(v) = flag("FLASHCORE_HOPPER_TRACE")? {
            c.trace = v;
        }
        if let Some(v) = flag("FLASHCORE_HOPPER_WG_KEY_SPLIT")? {
            c.wg_key_split = Some(v);
        }
        if let Some(v) = flag("FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT")? {
            c.cluster_key_split = Some(v);
        }
        if let Some(mb) = env.number(
            "FLASHCORE_HOPPER_L2_SECTION_MB",
            |mb| (1..=1024).contains(&mb),
            |v| format!("FLASHCORE_HOPPER_L2_SECTION_MB={v}: expected 1..=1024"),
        )? {
            c.l2_section_bytes = Some((mb as u64) << 20);
        }
        if let Some(v) = number("FLASHCORE_HOPPER_Q_STAGES", &[1, 2])? {
            c.q_stages = v;
        }
        if let Some(v) = number("FLASHCORE_HOPPER_CONSUMER_REGS", &[232, 240])? {
            c.consumer_regs = v;
        }
        if let Some(v) = number("FLASHCORE_HOPPER_CONSUMER_WGS", &[2, 3])? {
            c.consumer_wgs = Some(v);
        }
        // A count, or `auto`: Some(n) or None.
        let splits = |v: &str| match v.trim() {
            "auto" => Some(None),
            n => parse_number(n)
                .filter(|n| (1..=MAX_SPLITS).contains(n))
                .map(Some),
        };
        match env.parse("FLASHCORE_HOPPER_SPLITS", splits, |v| {
            format!(
                "FLASHCORE_HOPPER_SPLITS={v}: expected a split count in 1..={MAX_SPLITS} \
                 (1 never splits) or `auto`"
            )
        })? {
            Some(Some(n)) => c.splits = Some(n),
            Some(None) => c.auto_split = true,
            None => {}
        }
        if c.smem_epilogue == Some(true) {
            // O is staged in the item's own Q buffer, which then stays busy through the epilogue.
            c.q_stages = 2;
        }
        if c.pingpong && !c.overlap {
            return Err("FLASHCORE_HOPPER_PINGPONG=1 needs FLASHCORE_HOPPER_OVERLAP=1".to_string());
        }
        if c.smem_epilogue == Some(true) && c.splits.is_some_and(|n| n > 1) {
            return Err(
                "FLASHCORE_HOPPER_SPLITS > 1 needs the register epilogue (FLASHCORE_HOPPER_SMEM_EPILOGUE=0)"
                    .to_string(),
            );
        }
        Ok(c)
    }

    /// Key-range splits per item for a problem of `items` work items whose longest item has
    /// `max_key_tiles` key tiles (forced, off, or [`auto_splits`]). The smem epilogue variant has
    /// no split path, so it never splits on its own.
    pub fn splits_for(&self, items: usize, max_key_tiles: usize, sm_count: usize) -> usize {
        if items == 0 {
            return 1;
        }
        match self.splits {
            Some(n) => n,
            None if self.smem_epilogue == Some(true) || !self.auto_split => 1,
            None => auto_splits(items, max_key_tiles, sm_count),
        }
    }

    /// The configuration a problem runs with on `sm_count` SMs: this one with its consumer
    /// warpgroups chosen, or its wide non-causal form at D = 128 (176-key tiles, one Q buffer, 240
    /// consumer registers). Not with split-KV or the smem epilogue, which were only measured and
    /// verified with 128-key tiles.
    pub fn for_problem(&self, problem: &AttentionProblem, sm_count: usize) -> HopperConfig {
        if problem.batch_invariant {
            return self
                .batch_invariant(problem)
                .for_any_batch(problem, sm_count);
        }
        self.for_any_batch(problem, sm_count)
    }

    /// This configuration with every choice that follows the batch or the SM count pinned
    /// (`docs/MODES.md`, *Batch invariance*). A row's arithmetic depends on its q tile's
    /// warpgroups walking every key tile in order, and on the key tile's width; the key split
    /// (warpgroups or a cluster each summing part of the keys) and split-KV change that order,
    /// and their defaults follow the item count. The wide non-causal tile is kept for every
    /// problem that could take it (see `modes_dynamic` below), so a
    /// sequence gets it alone and inside a varlen batch alike.
    ///
    /// Under causal masking the q tile's height matters too: a row walks the key tiles its
    /// tile's last row needs, and a tile that leaves its max unchanged still rescales it by
    /// `exp2(m·c − round(m·c))`, not exactly 1. Three warpgroups (192-row tiles) follow the
    /// item count, so causal problems keep two (`docs/results/2026-11-28-batch-invariance-h200`:
    /// three against two differed in 28 O and 940 LSE elements of a causal D = 64 sequence).
    fn batch_invariant(&self, problem: &AttentionProblem) -> HopperConfig {
        let consumer_wgs = match self.consumer_wgs {
            None if problem.causal => Some(2),
            wgs => wgs,
        };
        HopperConfig {
            wg_key_split: Some(false),
            cluster_key_split: Some(false),
            auto_split: false,
            consumer_wgs,
            ..*self
        }
    }

    fn for_any_batch(&self, problem: &AttentionProblem, sm_count: usize) -> HopperConfig {
        let unsplit = self.splits.is_none_or(|n| n == 1) && !self.auto_split;
        // Key-split warpgroups: the build exists for dense, unsplit, overlapped plans with the
        // register epilogue and two warpgroups.
        let key_split = problem.modes.is_dense()
            && unsplit
            && self.overlap
            && self.smem_epilogue != Some(true)
            && self.consumer_wgs != Some(3)
            && self
                .wg_key_split
                .unwrap_or_else(|| default_wg_key_split(problem, sm_count));
        if key_split {
            // Each warpgroup walks every other tile, so a 2-deep ring gives it one tile of
            // lookahead; at D = 64 four slots fit (session 18, run2: the mission shape 5.5 ->
            // 5.05 µs).
            let stages = if problem.head_dim == 64 && self.stages == STAGES {
                KEY_SPLIT_STAGES_D64
            } else {
                self.stages
            };
            let cluster = self
                .cluster_key_split
                .unwrap_or_else(|| default_cluster_key_split(problem, sm_count));
            return HopperConfig {
                consumer_wgs: Some(2),
                wg_key_split: Some(true),
                cluster_key_split: Some(cluster),
                smem_epilogue: Some(false),
                stages,
                ..*self
            };
        }
        // Three consumer warpgroups: the kernel builds them for dense, unsplit D = 64 problems
        // with the register epilogue only.
        let three_wgs_fit = problem.head_dim == 64
            && unsplit
            && self.smem_epilogue != Some(true)
            && problem.modes.is_dense();
        let consumer_wgs = match self.consumer_wgs {
            Some(3) if three_wgs_fit => 3,
            Some(_) => 2,
            None if three_wgs_fit => default_consumer_wgs(problem, sm_count),
            None => 2,
        };
        let cfg = HopperConfig {
            consumer_wgs: Some(consumer_wgs),
            wg_key_split: Some(false),
            cluster_key_split: Some(false),
            ..*self
        };
        // Paged caches keep 128-key tiles: a paged tile is loaded in power-of-two groups, and 176
        // would take 16-row boxes. Strided keys (a dense tensor, a contiguous cache, packed
        // varlen) take the wide tile with every mode: the chunked-prefill row on a contiguous
        // cache ran 5 % behind its dense twin with 128-key tiles (session 15, run3).
        // The modes build with the dynamic schedule spills at 176-key tiles (28 bytes,
        // check-kernels), so a mode problem takes them only while its items fit one round.
        let paged = matches!(problem.modes.kv, KvStorage::Paged { .. });
        // Batch-invariant plans take the wide tile whatever the item count (the schedule follows
        // it, and the width sets the order a row's keys are summed in).
        let modes_dynamic = !problem.modes.is_dense()
            && !problem.batch_invariant
            && self.dynamic_schedule(cfg.items(problem), sm_count);
        if self.wide_noncausal
            && problem.head_dim == 128
            && !problem.causal
            && unsplit
            && self.smem_epilogue != Some(true)
            && !paged
            && !modes_dynamic
        {
            // The modes build spills with the dynamic schedule at this width, so a
            // batch-invariant mode problem keeps the static one (the schedule moves no value).
            let dynamic = if problem.batch_invariant && !problem.modes.is_dense() {
                Some(self.dynamic.unwrap_or(false))
            } else {
                self.dynamic
            };
            HopperConfig {
                block_n: WIDE_BLOCK_N,
                q_stages: 1,
                consumer_regs: 240,
                smem_epilogue: Some(false),
                dynamic,
                ..cfg
            }
        } else {
            // The smem epilogue where the O stores end a one-round grid's critical path.
            let one_round_d64 = problem.head_dim == 64
                && problem.modes.is_dense()
                && unsplit
                && consumer_wgs == 2
                && cfg.q_stages == 2
                && cfg.items(problem) <= sm_count;
            HopperConfig {
                smem_epilogue: Some(self.smem_epilogue.unwrap_or(one_round_d64)),
                ..cfg
            }
        }
    }

    /// Consumer warpgroups of a configuration [`HopperConfig::for_problem`] resolved (2 before).
    pub fn warpgroups(&self) -> usize {
        self.consumer_wgs.unwrap_or(2)
    }

    /// Whether a configuration [`HopperConfig::for_problem`] resolved splits keys between its
    /// warpgroups.
    pub fn key_split(&self) -> bool {
        self.wg_key_split == Some(true)
    }

    /// Whether a configuration [`HopperConfig::for_problem`] resolved splits keys between the
    /// two CTAs of a cluster as well.
    pub fn cluster_key_split(&self) -> bool {
        self.key_split() && self.cluster_key_split == Some(true)
    }

    /// CTAs a work item takes: a cluster of two with the cluster key split.
    pub fn ctas_per_item(&self) -> usize {
        if self.cluster_key_split() {
            2
        } else {
            1
        }
    }

    /// Q rows per work item (= Q TMA box rows): one warpgroup's when they split the keys.
    pub fn block_m(&self) -> usize {
        if self.key_split() {
            WARPGROUP_ROWS
        } else {
            WARPGROUP_ROWS * self.warpgroups()
        }
    }

    /// Work items (batch, q head, `block_m`-row q tile) of a problem.
    pub fn items(&self, problem: &AttentionProblem) -> usize {
        problem.batch * problem.heads_q * problem.seq_q.div_ceil(self.block_m())
    }

    /// Whether an unsplit plan of `units` work units takes the dynamic schedule: past one round
    /// of `sm_count` CTAs (causal units differ in length; greedy taking keeps the CTAs even),
    /// unless `FLASHCORE_HOPPER_DYNAMIC` says otherwise.
    pub fn dynamic_schedule(&self, units: usize, sm_count: usize) -> bool {
        self.dynamic.unwrap_or(units > sm_count)
    }

    /// Whether the kernel decodes its first unit before the barrier setup's sync (its
    /// `kEarlyFirstUnit`): the static schedule of the dense build with 40 producer registers (232
    /// a consumer thread, two consumer warpgroups), where the L2 prefetch lives.
    pub fn early_first_unit(&self, dynamic: bool, modes: bool) -> bool {
        !dynamic && !modes && self.consumer_regs == CONSUMER_REGS && self.warpgroups() == 2
    }

    /// Threads per CTA: the producer warpgroup and the consumers.
    pub fn threads(&self) -> u32 {
        (WARPGROUP_THREADS * (1 + self.warpgroups())) as u32
    }

    /// Dynamic shared memory of this configuration.
    pub fn smem_bytes(&self, head_dim: usize, elem_bytes: usize) -> usize {
        let exchange = if self.key_split() {
            key_split_exchange_bytes(head_dim)
        } else {
            0
        };
        let tiles = smem_bytes_with_tiles(
            head_dim,
            elem_bytes,
            self.stages,
            self.q_stages,
            self.block_m(),
            self.block_n,
        );
        if !self.cluster_key_split() {
            return tiles + exchange;
        }
        // The cluster exchange's barrier after the unit words may take the barrier area into
        // another 128 bytes (the kernel's OFF_XCHG), and its buffer follows the warpgroups'.
        let grown = barrier_area_bytes(self.q_stages, self.stages, 8)
            - barrier_area_bytes(self.q_stages, self.stages, 0);
        tiles + exchange + grown + cluster_exchange_bytes(head_dim)
    }

    /// The kernel defines. Variants at their default value are not emitted (the kernel's own
    /// defaults match), so the default plan's defines are unchanged.
    fn defines(&self, head_dim: usize, l2_section: u64) -> Vec<(String, String)> {
        let mut d = vec![
            ("FC_HEAD_DIM".to_string(), head_dim.to_string()),
            ("FC_HOPPER_BLOCK_N".to_string(), self.block_n.to_string()),
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
        if self.smem_epilogue == Some(true) {
            d.push(("FC_HOPPER_SMEM_EPILOGUE".to_string(), "1".to_string()));
        }
        if let Some(head_major) = self.head_major {
            d.push((
                "FC_HOPPER_HEAD_MAJOR".to_string(),
                (head_major as u32).to_string(),
            ));
        }
        if self.warpgroups() != 2 {
            d.push((
                "FC_HOPPER_CONSUMER_WGS".to_string(),
                self.warpgroups().to_string(),
            ));
        }
        if self.consumer_regs != CONSUMER_REGS {
            d.push((
                "FC_HOPPER_CONSUMER_REGS".to_string(),
                self.consumer_regs.to_string(),
            ));
        }
        if self.key_split() {
            d.push(("FC_HOPPER_WG_KEY_SPLIT".to_string(), "1".to_string()));
        }
        if self.cluster_key_split() {
            d.push(("FC_HOPPER_CLUSTER_KEY_SPLIT".to_string(), "1".to_string()));
        }
        d
    }
}

/// Shared memory of the key-split warpgroups' exchange (the kernel's `XCHG_BYTES`): per receiving
/// warpgroup, D / 16 column blocks of O and one (m, l) quadruple, 16 bytes a thread each.
pub fn key_split_exchange_bytes(head_dim: usize) -> usize {
    2 * (head_dim / 16 + 1) * WARPGROUP_THREADS * 16
}

/// Shared memory of the cluster key split's exchange (the kernel's `CXCHG_BYTES`): per consumer
/// thread, the partner's row of its column half (D / 32 float4s) and its (m, l) in a slot of its
/// own.
pub fn cluster_exchange_bytes(head_dim: usize) -> usize {
    (head_dim / 32 + 1) * 2 * WARPGROUP_THREADS * 16
}

/// K/V ring depth of the key-split build at D = 64 (unless `FLASHCORE_HOPPER_STAGES` asks for
/// another than the default 2).
pub const KEY_SPLIT_STAGES_D64: usize = 4;

/// Key tiles an item needs before its chain outweighs the early start of the next call
/// ([`default_wg_key_split`]).
pub const KEY_SPLIT_LONG_ITEM_TILES: usize = 8;

/// Whether a dense problem splits its keys between the warpgroups when the environment does not
/// choose. Its 64-row items must fit one round of the SMs; then either they leave half the SMs
/// free, where the next call's CTAs start early under programmatic launch, or (D = 64, 4-deep
/// ring) they are long enough that halving their chain outweighs that start. Session 18, run2
/// (session 18's first build, graph replay, µs non-causal / causal, off -> on): (1,8,512,64)
/// 6.84 / 7.26 -> 5.05 / 5.00, (1,8,128,64) 3.43 / 3.94 -> 3.13 / 3.55, (1,8,512,128) 10.83 /
/// 8.93 -> 7.52 / 7.01; with 128 CTAs (1,8,1024,64) 11.30 / 11.62 -> 9.49 / 7.80 and
/// (1,4,2048,64) 19.91 / 20.26 -> 14.18 / 12.31, but (1,16,512,64), 4 tiles, 7.00 / 7.38 -> 7.28
/// / 5.85 and (1,8,1024,128), 2 slots, 16.87 / 14.98 -> 16.78 / 14.54. The final build's numbers:
/// `docs/generations/gen5-persistent.md`, *Session 18*.
pub fn default_wg_key_split(problem: &AttentionProblem, sm_count: usize) -> bool {
    let (items, key_tiles) = key_split_items(problem);
    items <= sm_count / 2
        || (items <= sm_count && problem.head_dim == 64 && key_tiles >= KEY_SPLIT_LONG_ITEM_TILES)
}

/// Whether a problem that takes the key-split warpgroups also splits its keys between the two
/// CTAs of a cluster when the environment does not choose: where a cluster for each 64-row item
/// fits one round of the SMs and the items are long ([`KEY_SPLIT_LONG_ITEM_TILES`] key tiles or
/// more). Session 19, run1 (graph replay, µs non-causal / causal, off -> on): (1,4,1024,64), 8
/// tiles, 7.25 / 7.39 -> 6.28 / 5.95; but with 4 tiles or fewer the exchange and the SMs it takes
/// from the next call's early start cost what the halved chain saves: the mission shape (1,8,512,64)
/// 4.93 / 4.89-4.90 -> 4.98-5.00 / 4.89-4.90, (1,8,512,128) 6.30 / 6.37 -> 6.54 / 6.36,
/// (1,8,128,64) 3.01 / 3.44 -> 3.57 / 3.93.
pub fn default_cluster_key_split(problem: &AttentionProblem, sm_count: usize) -> bool {
    let (items, key_tiles) = key_split_items(problem);
    2 * items <= sm_count && key_tiles >= KEY_SPLIT_LONG_ITEM_TILES
}

/// A problem's 64-row work items and the key tiles of the longest, as the key-split rules count
/// them.
fn key_split_items(problem: &AttentionProblem) -> (usize, usize) {
    let items = problem.batch * problem.heads_q * problem.seq_q.div_ceil(WARPGROUP_ROWS);
    (items, problem.seq_k.div_ceil(BLOCK_N))
}

/// Rounds of work items the three-warpgroup schedule must fill before it is taken.
pub const THREE_WGS_MIN_ROUNDS: usize = 4;

/// Consumer warpgroups for a dense D = 64 problem when the environment does not choose: three
/// (192-row items) once their items fill [`THREE_WGS_MIN_ROUNDS`] rounds of the SMs, else two.
/// Three ran (2,16,8192,64) 8 % faster causal or not and (4,16,2048,64), 5.3 rounds, level; at
/// (1,8,512,64), 24 items on 132 SMs, each CTA's one item got 1.5x longer: 8.2 -> 10.1 µs
/// (docs/results/2026-11-26-session14-h100, run1). Few rounds leave the quantization of the
/// rounds and of the last q tile (192 rows against 128) uncovered.
pub fn default_consumer_wgs(problem: &AttentionProblem, sm_count: usize) -> usize {
    let items = problem.batch * problem.heads_q * problem.seq_q.div_ceil(3 * WARPGROUP_ROWS);
    if items >= THREE_WGS_MIN_ROUNDS * sm_count {
        3
    } else {
        2
    }
}

/// wgmma and setmaxnreg are sm_90a-only: the arch-specific PTX does not run on later parts.
/// (The forward and the backward both check this.)
pub(crate) fn require_sm90a(name: &'static str, device: &DeviceInfo) -> Result<(), Unsupported> {
    if device.compute_capability == (9, 0) {
        return Ok(());
    }
    Err(Unsupported::new(
        name,
        format!(
            "needs sm_90a (wgmma, setmaxnreg); device is {}.{}",
            device.compute_capability.0, device.compute_capability.1
        ),
    ))
}

impl Attention for PersistentHopper {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        // TMA, wgmma and setmaxnreg: sm_90a (TMA also wants 16-byte aligned bases and strides)
        Capabilities::all_features(HeadDims::List(&[64, 128]), (9, 0)).with_modes(ModeSupport::ALL)
    }

    fn plan(
        &self,
        problem: &AttentionProblem,
        device: &DeviceInfo,
    ) -> Result<LaunchPlan, Unsupported> {
        self.capabilities().check(NAME, problem, device)?;
        require_sm90a(NAME, device)?;
        let scale = problem.scale();
        if scale.is_nan() || scale <= 0.0 {
            // The running row max is taken on raw scores, which is only the max of the scaled
            // scores for a positive scale.
            return Err(Unsupported::new(
                NAME,
                format!("softmax_scale {scale} must be > 0"),
            ));
        }
        let decode_cfg =
            crate::decode::DecodeConfig::from_env().map_err(|e| Unsupported::new(NAME, e))?;
        if crate::decode::takes(problem, &decode_cfg) {
            return crate::decode::plan(NAME, problem, device, &decode_cfg);
        }
        let cfg = HopperConfig::from_env().map_err(|e| Unsupported::new(NAME, e))?;
        let plan = self.plan_with(&cfg, problem, device)?;
        if crate::decode::routes_per_sequence(problem, &decode_cfg) {
            return crate::decode::routed_plan(NAME, plan, problem, device, &decode_cfg);
        }
        Ok(plan)
    }
}

impl PersistentHopper {
    /// [`Attention::plan`] with an explicit configuration instead of the environment's (the
    /// checks on device and scale are `plan`'s).
    pub fn plan_with(
        &self,
        cfg: &HopperConfig,
        problem: &AttentionProblem,
        device: &DeviceInfo,
    ) -> Result<LaunchPlan, Unsupported> {
        let cfg = &cfg.for_problem(problem, device.sm_count as usize);
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
                    cfg.block_m() * d * problem.dtype.size_bytes(),
                    cfg.stages,
                    2 * cfg.block_n * d * problem.dtype.size_bytes(),
                ),
            ));
        }

        let items = cfg.items(problem);
        // Split-KV for small problems: a work unit is (item, key range). The longest item (the
        // last q tile, also under the bottom-right causal mask) has all the key tiles.
        let max_key_tiles = problem.seq_k.div_ceil(cfg.block_n);
        let modes = !problem.modes.is_dense();
        // The modes build has no split path (FC_HOPPER_MODES and FC_HOPPER_SPLIT_KV exclude
        // each other); mode problems run unsplit.
        let mut splits = if modes {
            1
        } else {
            cfg.splits_for(items, max_key_tiles, device.sm_count as usize)
        };
        let mut workspace = 0;
        if splits > 1 {
            match split_workspace_f32(items, splits, d) {
                Some(ws)
                    if ws <= MAX_SPLIT_WORKSPACE_BYTES / 4
                        && items * splits <= i32::MAX as usize =>
                {
                    workspace = ws
                }
                // Too large to split (only reachable when forced): run it unsplit.
                _ => splits = 1,
            }
        }
        let units = items * splits;
        // One CTA per SM, but no more CTAs than work units; with the cluster key split a cluster
        // of two for each unit (the kernel's exchange serves one unit a cluster).
        let ctas = if cfg.cluster_key_split() {
            units * cfg.ctas_per_item()
        } else {
            (device.sm_count as usize).min(units)
        };
        let grid_x = u32::try_from(ctas.max(1))
            .ok()
            .filter(|&g| g <= i32::MAX as u32)
            .ok_or_else(|| {
                Unsupported::new(
                    NAME,
                    format!("{units} work units need {ctas} CTAs, past the grid's limit"),
                )
            })?;
        // Split plans use the workspace's first words for their own counters; the cluster key
        // split has one unit a cluster and no schedule to balance.
        let dynamic = splits == 1
            && !cfg.cluster_key_split()
            && cfg.dynamic_schedule(units, device.sm_count as usize);

        let l2_section = cfg
            .l2_section_bytes
            .unwrap_or_else(|| default_l2_section_bytes(device));
        let mut defines = cfg.defines(d, l2_section);
        if splits > 1 {
            // The split count itself is a run-time parameter (params.num_splits): one module
            // per head dim and dtype serves every count.
            defines.push(("FC_HOPPER_SPLIT_KV".to_string(), "1".to_string()));
        }
        if dynamic {
            defines.push(("FC_HOPPER_DYNAMIC".to_string(), "1".to_string()));
        }
        let programmatic = cfg.programmatic_launch.unwrap_or(!modes);
        // The prefetch pays where the previous call leaves SMs free for this one's CTAs to start
        // early: one round of units (run7: the mission shape -5 %; the ladder's many-round rows,
        // whose CTAs start only as the previous call's leave, moved within their noise).
        let one_round = units * cfg.ctas_per_item() <= device.sm_count as usize;
        if cfg.early_first_unit(dynamic, modes) && cfg.prefetch.unwrap_or(programmatic && one_round)
        {
            defines.push(("FC_HOPPER_PREFETCH".to_string(), "1".to_string()));
        }
        if modes {
            defines.push(("FC_HOPPER_MODES".to_string(), "1".to_string()));
            // (The spread loop keeps its ring position modulo 2^16: power-of-two rings only, so
            // FLASHCORE_HOPPER_STAGES=3 runs small pages on warp 0 alone.)
            if spreads_page_boxes(problem, cfg.block_n) && cfg.stages.is_power_of_two() {
                defines.push(("FC_HOPPER_SPREAD_PAGES".to_string(), "1".to_string()));
            }
        }
        if Env::process()
            .flag_or_unset("FLASHCORE_HOPPER_DEBUG")
            .unwrap_or(false)
        {
            // Bounded mbarrier waits: a protocol deadlock traps with a printf instead of hanging.
            defines.push(("FC_HOPPER_DEBUG".to_string(), "1".to_string()));
        }
        if cfg.trace {
            defines.push(("FC_HOPPER_TRACE".to_string(), "1".to_string()));
        }

        let mut plan = LaunchPlan::single(KernelLaunch {
            source: SOURCE,
            entry: ENTRY,
            defines,
            grid: (grid_x, 1, 1),
            block: (cfg.threads(), 1, 1),
            dynamic_smem_bytes: smem as u32,
            tensor_maps: Some(TensorMapSpec {
                q_box_rows: cfg.block_m() as u32,
                kv_box_rows: cfg.block_n as u32,
                box_cols: BOX_COLS as u32,
                swizzle: Swizzle::B128,
            }),
            programmatic_launch: programmatic,
        });
        if splits > 1 {
            plan.num_splits = splits as u32;
            plan.workspace_f32 = workspace;
            // The kernel's last arriver puts every counter back to zero.
            plan.workspace_counters = split_counter_words(items);
        }
        if dynamic {
            // Words 0 and 1: the next unit and the CTAs done taking; the kernel leaves them zero.
            plan.workspace_f32 = DYNAMIC_COUNTER_WORDS;
            plan.workspace_counters = DYNAMIC_COUNTER_WORDS;
        }
        if cfg.trace {
            // The timeline's printer: one thread after the kernel, in its module (same source and
            // defines), where the stamps are. A printf in the kernel itself made ptxas serialize
            // the kernel's wgmma pipeline.
            let kernel = plan.launches[0].clone();
            plan.launches.push(KernelLaunch {
                entry: TRACE_PRINT_ENTRY,
                grid: (1, 1, 1),
                block: (1, 1, 1),
                dynamic_smem_bytes: 0,
                tensor_maps: None,
                programmatic_launch: false,
                ..kernel
            });
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smem_formula_matches_kernel() {
        // Kernel: Q + 2*STAGES*KV + 128 (11 barriers + 2 unit words -> 96 B -> 128) + 1024.
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
            // D = 64: three consumer warpgroups (704 items of 192 rows, 5.3 rounds).
            assert_eq!(l.block, (if d == 64 { 512 } else { 384 }, 1, 1));
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
    fn forward_launches_programmatically_unless_turned_off() {
        let dev = DeviceInfo::synthetic_h100();
        let p = AttentionProblem::new(1, 8, 512, 64);
        assert!(default_plan(&p, &dev).launches[0].programmatic_launch);
        let off = overrides(&[("FLASHCORE_HOPPER_PDL", "0")]).unwrap();
        let plan = PersistentHopper.plan_with(&off, &p, &dev).unwrap();
        assert!(!plan.launches[0].programmatic_launch);
        assert!(overrides(&[("FLASHCORE_HOPPER_PDL", "2")]).is_err());
        // Mode problems launch plainly unless forced.
        let cache = AttentionProblem::new(4, 32, 128, 128)
            .with_kv(8, 8192)
            .with_modes(flashcore_core::Modes {
                seqused_k: true,
                ..flashcore_core::Modes::default()
            });
        assert!(!default_plan(&cache, &dev).launches[0].programmatic_launch);
        let on = overrides(&[("FLASHCORE_HOPPER_PDL", "1")]).unwrap();
        assert!(
            PersistentHopper
                .plan_with(&on, &cache, &dev)
                .unwrap()
                .launches[0]
                .programmatic_launch
        );
    }

    /// Whether `cfg`'s plan of `p` on the H100 sets the kernel define `name` to 1.
    fn plan_sets(cfg: &HopperConfig, p: &AttentionProblem, name: &str) -> bool {
        let plan = PersistentHopper
            .plan_with(cfg, p, &DeviceInfo::synthetic_h100())
            .unwrap();
        plan.launches[0]
            .defines
            .contains(&(name.to_string(), "1".to_string()))
    }

    /// Shared memory of a key-split plan: Q (2 x 64 rows) + 4 (D = 64) or 2 stages of K and V
    /// + barriers (4 or 2 stages: 256 or 128 bytes) + the warpgroups' exchange + slack.
    fn key_split_smem(d: usize) -> usize {
        let stages = if d == 64 { 4 } else { 2 };
        let exchange = 2 * (d / 16 + 1) * 128 * 16;
        2 * 64 * d * 2 + 2 * stages * 128 * d * 2 + 128 * (stages / 2) + exchange + 1024
    }

    #[test]
    fn cluster_key_split_takes_two_ctas_an_item() {
        let dev = DeviceInfo::synthetic_h100();
        assert!(overrides(&[("FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT", "2")]).is_err());
        let default = HopperConfig::default();
        for d in [64, 128] {
            for causal in [false, true] {
                // 64 items of 8 key tiles, a cluster each on 128 of 132 SMs.
                let p = AttentionProblem::new(1, 4, 1024, d).with_causal(causal);
                let plan = default_plan(&p, &dev);
                let l = &plan.launches[0];
                assert!(plan_sets(&default, &p, "FC_HOPPER_WG_KEY_SPLIT"));
                assert!(plan_sets(&default, &p, "FC_HOPPER_CLUSTER_KEY_SPLIT"));
                assert!(!plan_sets(&default, &p, "FC_HOPPER_DYNAMIC"));
                assert_eq!(l.grid, (128, 1, 1));
                assert_eq!(l.block, (384, 1, 1));
                // The cluster's exchange after the warpgroups': 256 threads, D / 32 float4s and
                // an (m, l) slot each; the barrier area as without it at these depths.
                assert_eq!(
                    l.dynamic_smem_bytes as usize,
                    key_split_smem(d) + (d / 32 + 1) * 256 * 16
                );
                assert!(l.dynamic_smem_bytes <= dev.max_shared_memory_per_block_optin);
            }
        }
        // Past one round of clusters, or with short items (the mission shape's 4 key tiles), the
        // default keeps one CTA an item.
        for (b, h, s, d) in [(1, 8, 1024, 64), (1, 8, 512, 64), (1, 8, 512, 128)] {
            let p = AttentionProblem::new(b, h, s, d);
            assert!(plan_sets(&default, &p, "FC_HOPPER_WG_KEY_SPLIT"));
            assert!(!plan_sets(&default, &p, "FC_HOPPER_CLUSTER_KEY_SPLIT"));
        }
        // Forced, any problem that takes the key split: two CTAs an item, static schedule.
        let forced = overrides(&[
            ("FLASHCORE_HOPPER_WG_KEY_SPLIT", "1"),
            ("FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT", "1"),
        ])
        .unwrap();
        let big = AttentionProblem::new(4, 16, 2048, 128).with_causal(true);
        let plan = PersistentHopper.plan_with(&forced, &big, &dev).unwrap();
        assert_eq!(plan.launches[0].grid, (2 * 4 * 16 * 32, 1, 1));
        assert!(plan_sets(&forced, &big, "FC_HOPPER_CLUSTER_KEY_SPLIT"));
        assert!(!plan_sets(&forced, &big, "FC_HOPPER_DYNAMIC"));
        // Off, or without the warpgroups' key split (modes), no cluster.
        let off = overrides(&[("FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT", "0")]).unwrap();
        let mission = AttentionProblem::new(1, 8, 512, 64);
        assert!(!plan_sets(&off, &mission, "FC_HOPPER_CLUSTER_KEY_SPLIT"));
        assert_eq!(
            PersistentHopper
                .plan_with(&off, &mission, &dev)
                .unwrap()
                .launches[0]
                .grid,
            (64, 1, 1)
        );
        let cluster_only = overrides(&[
            ("FLASHCORE_HOPPER_WG_KEY_SPLIT", "0"),
            ("FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT", "1"),
        ])
        .unwrap();
        assert!(!plan_sets(
            &cluster_only,
            &mission,
            "FC_HOPPER_CLUSTER_KEY_SPLIT"
        ));
        let paged = mission.with_modes(flashcore_core::Modes {
            seqused_k: true,
            ..flashcore_core::Modes::default()
        });
        assert!(!plan_sets(&forced, &paged, "FC_HOPPER_CLUSTER_KEY_SPLIT"));
    }

    #[test]
    fn key_split_warpgroups_share_one_64_row_tile() {
        let dev = DeviceInfo::synthetic_h100();
        // (The warpgroups' split alone: the cluster split has its own test below.)
        let on = overrides(&[
            ("FLASHCORE_HOPPER_WG_KEY_SPLIT", "1"),
            ("FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT", "0"),
        ])
        .unwrap();
        assert!(overrides(&[("FLASHCORE_HOPPER_WG_KEY_SPLIT", "2")]).is_err());
        for d in [64, 128] {
            for causal in [false, true] {
                let p = AttentionProblem::new(1, 8, 512, d).with_causal(causal);
                let plan = PersistentHopper.plan_with(&on, &p, &dev).unwrap();
                let l = &plan.launches[0];
                assert!(plan_sets(&on, &p, "FC_HOPPER_WG_KEY_SPLIT"));
                assert!(!plan_sets(&on, &p, "FC_HOPPER_SMEM_EPILOGUE"));
                // Two consumer warpgroups on 64-row items: 8 heads x 8 tiles.
                assert_eq!(l.block, (384, 1, 1));
                assert_eq!(l.grid, (64, 1, 1));
                assert_eq!(l.tensor_maps.unwrap().q_box_rows, 64);
                assert_eq!(l.tensor_maps.unwrap().kv_box_rows, 128);
                assert_eq!(l.dynamic_smem_bytes as usize, key_split_smem(d));
                // The default rule takes the mission shape too (64 of 132 SMs).
                assert!(plan_sets(
                    &HopperConfig::default(),
                    &p,
                    "FC_HOPPER_WG_KEY_SPLIT"
                ));
            }
        }
        // Not with modes, key-range splits or three warpgroups: those plans keep their builds.
        let paged = AttentionProblem::new(1, 8, 512, 64).with_modes(flashcore_core::Modes {
            seqused_k: true,
            ..flashcore_core::Modes::default()
        });
        assert!(!plan_sets(&on, &paged, "FC_HOPPER_WG_KEY_SPLIT"));
        let p = AttentionProblem::new(1, 8, 512, 64);
        let split = overrides(&[
            ("FLASHCORE_HOPPER_WG_KEY_SPLIT", "1"),
            ("FLASHCORE_HOPPER_SPLITS", "4"),
        ])
        .unwrap();
        assert!(!plan_sets(&split, &p, "FC_HOPPER_WG_KEY_SPLIT"));
        let three = overrides(&[
            ("FLASHCORE_HOPPER_WG_KEY_SPLIT", "1"),
            ("FLASHCORE_HOPPER_CONSUMER_WGS", "3"),
        ])
        .unwrap();
        let big = AttentionProblem::new(4, 16, 2048, 64);
        assert!(!plan_sets(&three, &big, "FC_HOPPER_WG_KEY_SPLIT"));
        assert!(plan_sets(&on, &big, "FC_HOPPER_WG_KEY_SPLIT"));
        let off = overrides(&[("FLASHCORE_HOPPER_WG_KEY_SPLIT", "0")]).unwrap();
        assert!(!plan_sets(&off, &p, "FC_HOPPER_WG_KEY_SPLIT"));
    }

    #[test]
    fn default_key_split_rule() {
        let rule = |b, h, s, d| default_wg_key_split(&AttentionProblem::new(b, h, s, d), 132);
        // Half the SMs or fewer: the mission shape, one key tile, D = 128.
        assert!(rule(1, 8, 512, 64) && rule(1, 8, 128, 64) && rule(1, 8, 512, 128));
        // One round of 128 CTAs: D = 64 items of 8 key tiles or more only.
        assert!(rule(1, 8, 1024, 64) && rule(1, 4, 2048, 64));
        assert!(!rule(1, 16, 512, 64) && !rule(1, 8, 1024, 128));
        // More than one round: never.
        assert!(!rule(4, 16, 2048, 64) && !rule(2, 8, 1024, 64));
    }

    #[test]
    fn one_round_d64_plans_take_the_smem_epilogue() {
        let has =
            |cfg: &HopperConfig, p: &AttentionProblem| plan_sets(cfg, p, "FC_HOPPER_SMEM_EPILOGUE");
        let default = HopperConfig::default();
        for causal in [false, true] {
            // (One round at 128 rows; at 64, 128 CTAs of 4 key tiles: not key-split.)
            assert!(has(
                &default,
                &AttentionProblem::new(1, 16, 512, 64).with_causal(causal)
            ));
            // Many rounds, D = 128 (the wide tile, or unmeasured), or turned off: not.
            assert!(!has(
                &default,
                &AttentionProblem::new(4, 16, 2048, 64).with_causal(causal)
            ));
            assert!(!has(
                &default,
                &AttentionProblem::new(1, 8, 512, 128).with_causal(causal)
            ));
        }
        let off = overrides(&[("FLASHCORE_HOPPER_SMEM_EPILOGUE", "0")]).unwrap();
        assert!(!has(&off, &AttentionProblem::new(1, 16, 512, 64)));
        // One Q buffer leaves no room to stage O: not.
        let one_q = overrides(&[("FLASHCORE_HOPPER_Q_STAGES", "1")]).unwrap();
        assert!(!has(&one_q, &AttentionProblem::new(1, 16, 512, 64)));
        // Forced on, many rounds too.
        let on = overrides(&[("FLASHCORE_HOPPER_SMEM_EPILOGUE", "1")]).unwrap();
        assert!(has(&on, &AttentionProblem::new(4, 16, 2048, 64)));
    }

    #[test]
    fn one_round_programmatic_plans_prefetch_before_the_wait() {
        let has =
            |cfg: &HopperConfig, p: &AttentionProblem| plan_sets(cfg, p, "FC_HOPPER_PREFETCH");
        let default = HopperConfig::default();
        // The mission shape: 32 items, one round, launched programmatically.
        let small = AttentionProblem::new(1, 8, 512, 64);
        assert!(has(&default, &small));
        assert!(has(&default, &small.clone().with_causal(true)));
        // Many rounds (the dynamic schedule), without PDL, or turned off: no prefetch.
        assert!(!has(&default, &AttentionProblem::new(4, 16, 2048, 128)));
        let no_pdl = overrides(&[("FLASHCORE_HOPPER_PDL", "0")]).unwrap();
        assert!(!has(&no_pdl, &small));
        let off = overrides(&[("FLASHCORE_HOPPER_PREFETCH", "0")]).unwrap();
        assert!(!has(&off, &small));
        // Mode problems: the kernel does not work out its first unit early.
        let forced = overrides(&[("FLASHCORE_HOPPER_PREFETCH", "1")]).unwrap();
        let cache = AttentionProblem::new(1, 8, 128, 128)
            .with_kv(2, 4096)
            .with_modes(flashcore_core::Modes {
                seqused_k: true,
                ..flashcore_core::Modes::default()
            });
        assert!(!has(&forced, &cache));
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
        assert_eq!(names, UNSPLIT_DEFINES);
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
        assert!(c.pingpong && c.smem_epilogue == Some(true) && c.overlap);
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
    fn the_timeline_is_a_build_of_its_own() {
        let dev = DeviceInfo::synthetic_h100();
        let p = AttentionProblem::new(1, 8, 512, 64).with_causal(true);
        let traced = overrides(&[("FLASHCORE_HOPPER_TRACE", "1")]).unwrap();
        assert!(traced.trace);
        let with = PersistentHopper.plan_with(&traced, &p, &dev).unwrap();
        let without = default_plan(&p, &dev);
        assert!(define_names(&with).contains(&"FC_HOPPER_TRACE".to_string()));
        assert!(!define_names(&without).contains(&"FC_HOPPER_TRACE".to_string()));
        // The printer runs after the kernel, in its module: same source and defines.
        assert_eq!(without.launches.len(), 1);
        assert_eq!(with.launches.len(), 2);
        let (kernel, printer) = (&with.launches[0], &with.launches[1]);
        assert_eq!(printer.entry, TRACE_PRINT_ENTRY);
        assert_eq!(
            (printer.source, &printer.defines),
            (kernel.source, &kernel.defines)
        );
        assert_eq!((printer.grid, printer.block), ((1, 1, 1), (1, 1, 1)));
        assert!(overrides(&[("FLASHCORE_HOPPER_TRACE", "2")]).is_err());
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

    fn define_names(plan: &LaunchPlan) -> Vec<String> {
        plan.launches[0]
            .defines
            .iter()
            .map(|(k, _)| k.clone())
            .collect()
    }

    const UNSPLIT_DEFINES: [&str; 7] = [
        "FC_HEAD_DIM",
        "FC_HOPPER_BLOCK_N",
        "FC_HOPPER_STAGES",
        "FC_HOPPER_OVERLAP",
        "FC_HOPPER_L2_SECTION_BYTES",
        "FC_HOPPER_PINGPONG",
        "FC_HOPPER_Q_STAGES",
    ];

    /// A launch's defines as `NAME=value`.
    fn defines(l: &flashcore_core::KernelLaunch) -> Vec<String> {
        l.defines.iter().map(|(k, v)| format!("{k}={v}")).collect()
    }

    fn default_plan(p: &AttentionProblem, dev: &DeviceInfo) -> LaunchPlan {
        PersistentHopper
            .plan_with(&HopperConfig::default(), p, dev)
            .unwrap()
    }

    #[test]
    fn strided_caches_take_the_wide_tile_and_pages_keep_128_keys() {
        use flashcore_core::Modes;
        let dev = DeviceInfo::synthetic_h100();
        let block_n = |p: &AttentionProblem| {
            let plan = default_plan(p, &dev);
            defines(&plan.launches[0])
                .into_iter()
                .find_map(|d| d.strip_prefix("FC_HOPPER_BLOCK_N=").map(str::to_string))
                .unwrap_or_else(|| "128".to_string())
        };
        // The chunked-prefill row: 128 queries a sequence against an 8192-key cache.
        let chunk = |kv: KvStorage, causal: bool| {
            AttentionProblem::new(4, 32, 128, 128)
                .with_kv(8, 8192)
                .with_causal(causal)
                .with_modes(Modes {
                    kv,
                    seqused_k: true,
                    softcap: Some(30.0),
                    ..Modes::default()
                })
        };
        assert_eq!(block_n(&chunk(KvStorage::Dense, false)), "176");
        assert_eq!(block_n(&chunk(KvStorage::Dense, true)), "128");
        let pages = KvStorage::Paged {
            num_blocks: 4 * 8192 / 64,
            block_size: 64,
            max_blocks_per_seq: 8192 / 64,
        };
        assert_eq!(block_n(&chunk(pages, false)), "128");
        // Past one round of items the modes build takes the dynamic schedule, which spills
        // with 176-key tiles: 128 there.
        let big = AttentionProblem::new(16, 32, 128, 128)
            .with_kv(8, 8192)
            .with_modes(Modes {
                seqused_k: true,
                ..Modes::default()
            });
        assert_eq!(block_n(&big), "128");
        assert_eq!(block_n(&AttentionProblem::new(4, 16, 2048, 128)), "176");
    }

    #[test]
    fn small_pages_get_the_spread_producer_build() {
        use flashcore_core::Modes;
        let dev = DeviceInfo::synthetic_h100();
        let paged = |block_size: usize| {
            AttentionProblem::new(8, 32, 128, 128)
                .with_kv(8, 8192)
                .with_causal(true)
                .with_modes(Modes {
                    kv: KvStorage::Paged {
                        num_blocks: 8 * 8192 / block_size,
                        block_size,
                        max_blocks_per_seq: 8192 / block_size,
                    },
                    seqused_k: true,
                    ..Modes::default()
                })
        };
        // Box rows at 128-key tiles: 16 -> 16, 32 -> 32, 48 -> 16, 64 -> 64, 256 -> 128.
        for (block_size, spread) in [
            (16, true),
            (32, true),
            (48, true),
            (64, false),
            (256, false),
        ] {
            let names = define_names(&default_plan(&paged(block_size), &dev));
            assert!(names.contains(&"FC_HOPPER_MODES".to_string()));
            assert_eq!(
                names.contains(&"FC_HOPPER_SPREAD_PAGES".to_string()),
                spread,
                "block size {block_size}"
            );
        }
        // A ring of three: the spread loop's counters need a power of two, so warp 0 issues.
        let three_stages = overrides(&[
            ("FLASHCORE_HOPPER_STAGES", "3"),
            ("FLASHCORE_HOPPER_Q_STAGES", "1"),
        ])
        .unwrap();
        let plan = PersistentHopper
            .plan_with(&three_stages, &paged(16), &dev)
            .unwrap();
        assert!(!define_names(&plan).contains(&"FC_HOPPER_SPREAD_PAGES".to_string()));
        // Not without pages: contiguous caches and dense problems keep their builds.
        let contiguous = AttentionProblem::new(8, 32, 128, 128)
            .with_kv(8, 8192)
            .with_modes(Modes {
                seqused_k: true,
                ..Modes::default()
            });
        for p in [contiguous, AttentionProblem::new(4, 16, 2048, 128)] {
            let names = define_names(&default_plan(&p, &dev));
            assert!(
                !names.contains(&"FC_HOPPER_SPREAD_PAGES".to_string()),
                "{p}"
            );
        }
    }

    #[test]
    fn head_dim_128_non_causal_takes_176_key_tiles() {
        let dev = DeviceInfo::synthetic_h100();
        let wide = &default_plan(&AttentionProblem::new(4, 16, 2048, 128), &dev).launches[0];
        assert!(defines(wide).contains(&"FC_HOPPER_BLOCK_N=176".to_string()));
        assert!(defines(wide).contains(&"FC_HOPPER_CONSUMER_REGS=240".to_string()));
        // One Q buffer (the kernel's default: no define) so that 2 x (K + V) of 176 keys fit.
        assert!(!defines(wide)
            .iter()
            .any(|d| d.starts_with("FC_HOPPER_Q_STAGES")));
        assert_eq!(wide.tensor_maps.as_ref().unwrap().kv_box_rows, 176);
        assert_eq!(
            wide.dynamic_smem_bytes as usize,
            smem_bytes_with_block_n(128, 2, 2, 1, 176)
        );
        assert!(wide.dynamic_smem_bytes as usize <= 227 * 1024);
        // Causal, D = 64, or a forced width: 128-key tiles with two Q buffers.
        for p in [
            AttentionProblem::new(4, 16, 2048, 128).with_causal(true),
            AttentionProblem::new(4, 16, 2048, 64),
        ] {
            let l = &default_plan(&p, &dev).launches[0];
            assert!(
                defines(l).contains(&"FC_HOPPER_BLOCK_N=128".to_string()),
                "{p}"
            );
            assert!(
                defines(l).contains(&"FC_HOPPER_Q_STAGES=2".to_string()),
                "{p}"
            );
        }
        let forced = HopperConfig::from_overrides(|name| {
            (name == "FLASHCORE_HOPPER_BLOCK_N").then(|| "128".to_string())
        })
        .unwrap();
        let l = &PersistentHopper
            .plan_with(&forced, &AttentionProblem::new(4, 16, 2048, 128), &dev)
            .unwrap()
            .launches[0];
        assert!(defines(l).contains(&"FC_HOPPER_BLOCK_N=128".to_string()));
    }

    #[test]
    fn three_consumer_warpgroups_only_where_the_kernel_builds_them() {
        use flashcore_core::Modes;
        let dev = DeviceInfo::synthetic_h100();
        let three = overrides(&[("FLASHCORE_HOPPER_CONSUMER_WGS", "3")]).unwrap();
        assert_eq!(three.consumer_wgs, Some(3));
        assert!(overrides(&[("FLASHCORE_HOPPER_CONSUMER_WGS", "4")]).is_err());
        // Dense D = 64, causal or not: 192-row items, 512 threads, Q boxes of 192 rows.
        for causal in [false, true] {
            let p = AttentionProblem::new(2, 16, 8192, 64).with_causal(causal);
            let plan = PersistentHopper.plan_with(&three, &p, &dev).unwrap();
            let l = &plan.launches[0];
            assert_eq!(l.block, (512, 1, 1));
            assert_eq!(l.tensor_maps.unwrap().q_box_rows, 192);
            assert!(defines(l).contains(&"FC_HOPPER_CONSUMER_WGS=3".to_string()));
            assert!(!defines(l)
                .iter()
                .any(|d| d.starts_with("FC_HOPPER_CONSUMER_REGS")));
            // Two Q buffers of 192 x 64 + two K/V stages of 128 x 64 + barriers + slack.
            assert_eq!(
                l.dynamic_smem_bytes as usize,
                2 * 192 * 64 * 2 + 2 * 2 * 128 * 64 * 2 + 128 + 1024
            );
            // 8192 / 192 = 42.7 -> 43 q tiles a head: 1376 items, dynamic past one round.
            assert!(defines(l).contains(&"FC_HOPPER_DYNAMIC=1".to_string()));
        }
        // (1,8,512,64): 3 q tiles of 192 rows a head, 24 items, 24 CTAs.
        let small = PersistentHopper
            .plan_with(&three, &AttentionProblem::new(1, 8, 512, 64), &dev)
            .unwrap();
        assert_eq!(small.launches[0].grid, (24, 1, 1));
        // Everywhere else two: D = 128, a split, the smem epilogue, inference modes.
        let two = |cfg: &HopperConfig, p: &AttentionProblem| {
            let plan = PersistentHopper.plan_with(cfg, p, &dev).unwrap();
            let l = &plan.launches[0];
            assert_eq!(l.block, (384, 1, 1), "{p}");
            assert_eq!(l.tensor_maps.unwrap().q_box_rows, 128, "{p}");
            assert!(
                !defines(l).iter().any(|d| d.contains("CONSUMER_WGS")),
                "{p}"
            );
        };
        two(&three, &AttentionProblem::new(4, 16, 2048, 128));
        two(
            &HopperConfig {
                splits: Some(4),
                ..three
            },
            &AttentionProblem::new(1, 8, 512, 64),
        );
        two(
            &HopperConfig {
                smem_epilogue: Some(true),
                ..three
            },
            &AttentionProblem::new(4, 16, 2048, 64),
        );
        two(
            &three,
            &AttentionProblem::new(4, 16, 2048, 64).with_modes(Modes {
                window_left: Some(256),
                ..Modes::default()
            }),
        );
        // The default: three once the 192-row items fill four rounds of the SMs.
        let default_wgs = |b, h, s| {
            let p = AttentionProblem::new(b, h, s, 64);
            default_plan(&p, &dev).launches[0].block.0 / 128 - 1
        };
        assert_eq!(default_wgs(2, 16, 8192), 3); // 1376 items, 10.4 rounds
        assert_eq!(default_wgs(4, 16, 2048), 3); // 704 items, 5.3 rounds
        assert_eq!(default_wgs(1, 16, 2048), 2); // 176 items, 1.3 rounds
        assert_eq!(default_wgs(1, 8, 512), 2); // the mission shape: 24 items
        assert_eq!(default_wgs(1, 24, 4224), 3); // 24 x 22 = 528 items = 4 x 132
        assert_eq!(default_wgs(1, 23, 4224), 2); // 506
        two(
            &overrides(&[("FLASHCORE_HOPPER_CONSUMER_WGS", "2")]).unwrap(),
            &AttentionProblem::new(2, 16, 8192, 64),
        );
    }

    #[test]
    fn small_problem_is_split_large_is_not() {
        let dev = DeviceInfo::synthetic_h100();
        // Not by default (measured slower), only with FLASHCORE_HOPPER_SPLITS=auto.
        let p = AttentionProblem::new(1, 8, 512, 64);
        let plan = default_plan(&p, &dev);
        assert_eq!((plan.num_splits, plan.workspace_f32), (1, 0));
        let cfg = HopperConfig {
            auto_split: true,
            ..HopperConfig::default()
        };
        // (1,8,512,64): 32 items of 4 key tiles on 132 SMs -> 4 splits, 128 units of one tile.
        for causal in [false, true] {
            let p = AttentionProblem::new(1, 8, 512, 64).with_causal(causal);
            let plan = PersistentHopper.plan_with(&cfg, &p, &dev).unwrap();
            assert_eq!(plan.num_splits, 4);
            assert_eq!(plan.launches[0].grid, (128, 1, 1));
            assert_eq!(plan.workspace_f32, split_workspace_f32(32, 4, 64).unwrap());
            assert_eq!(plan.workspace_counters, 256);
            let mut names = UNSPLIT_DEFINES.map(String::from).to_vec();
            names.push("FC_HOPPER_SPLIT_KV".into());
            names.push("FC_HOPPER_PREFETCH".into()); // one round, launched programmatically
            assert_eq!(define_names(&plan), names);
            assert!(plan.launches[0]
                .defines
                .contains(&("FC_HOPPER_SPLIT_KV".to_string(), "1".to_string())));
        }
        // The large shapes are not split; with more units than CTAs they take the dynamic
        // schedule and its two counter words.
        for (b, h, s, d) in [(4, 16, 2048, 128), (4, 16, 2048, 64), (1, 16, 16384, 128)] {
            for causal in [false, true] {
                let p = AttentionProblem::new(b, h, s, d).with_causal(causal);
                let plan = PersistentHopper.plan_with(&cfg, &p, &dev).unwrap();
                assert_eq!(plan.num_splits, 1, "{p}");
                assert_eq!(plan.workspace_f32, DYNAMIC_COUNTER_WORDS);
                assert_eq!(plan.workspace_counters, DYNAMIC_COUNTER_WORDS);
                assert_eq!(plan.launches[0].grid, (132, 1, 1));
                let mut names = UNSPLIT_DEFINES.map(String::from).to_vec();
                names.push("FC_HOPPER_DYNAMIC".into());
                assert_eq!(define_names(&plan), names);
            }
        }
        // Short keys: one key tile per item is nothing to split.
        let p = AttentionProblem::new(1, 8, 512, 64).with_kv(8, 100);
        let plan = PersistentHopper.plan_with(&cfg, &p, &dev).unwrap();
        assert_eq!(plan.num_splits, 1);
    }

    #[test]
    fn auto_split_rule() {
        // (items, longest item's key tiles, SMs) -> splits
        for (items, tiles, sms, want) in [
            (32, 4, 132, 4),  // (1,8,512,64)
            (32, 64, 132, 4), // long keys: 132 / 32 = 4 units per item fill one wave
            (40, 8, 132, 3),  // rounded down: 120 units in one wave, not 160 in two
            (66, 4, 132, 2),  // exactly half the SMs
            (67, 4, 132, 1),  // more than half: no split
            (1, 1000, 132, 132),
            (32, 1, 132, 1), // a single key tile
            (0, 4, 132, 1),
            (128, 16, 132, 1),
        ] {
            assert_eq!(
                auto_splits(items, tiles, sms),
                want,
                "{items} {tiles} {sms}"
            );
        }
    }

    #[test]
    fn split_workspace_formula() {
        // counters: 8 per item rounded up to 32 words; slots: items x splits x 2 warpgroups x
        // (64·D partial O + 512 words of (m, l)).
        assert_eq!(split_counter_words(32), 256);
        assert_eq!(split_counter_words(33), 288);
        assert_eq!(split_counter_words(1), 32);
        assert_eq!(
            split_workspace_f32(32, 4, 64),
            Some(256 + 32 * 4 * 2 * (64 * 64 + 512))
        );
        assert_eq!(
            split_workspace_f32(32, 4, 128),
            Some(256 + 32 * 4 * 2 * (64 * 128 + 512))
        );
        // Slots stay 128-byte aligned (the kernel's float4 accesses and its static_assert).
        for d in [64, 128] {
            assert_eq!(((BLOCK_M / 2) * d + 512) % 32, 0);
        }
        assert_eq!(split_workspace_f32(usize::MAX / 2, 4, 128), None);
    }

    #[test]
    fn split_override() {
        assert_eq!(overrides(&[]).unwrap().splits, None);
        assert_eq!(
            overrides(&[("FLASHCORE_HOPPER_SPLITS", "4")])
                .unwrap()
                .splits,
            Some(4)
        );
        assert_eq!(
            overrides(&[("FLASHCORE_HOPPER_SPLITS", " 1 ")])
                .unwrap()
                .splits,
            Some(1)
        );
        for bad in ["0", "-1", "x", "", "129", "2.5"] {
            let e = HopperConfig::from_overrides(|name| {
                (name == "FLASHCORE_HOPPER_SPLITS").then(|| bad.to_string())
            })
            .unwrap_err();
            assert!(e.contains("FLASHCORE_HOPPER_SPLITS"), "{e}");
        }
        // The smem epilogue has no split path: forcing both is refused, and alone it never splits.
        assert!(overrides(&[
            ("FLASHCORE_HOPPER_SPLITS", "2"),
            ("FLASHCORE_HOPPER_SMEM_EPILOGUE", "1")
        ])
        .is_err());
        let dev = DeviceInfo::synthetic_h100();
        let small = AttentionProblem::new(1, 8, 512, 64);
        let smem = overrides(&[("FLASHCORE_HOPPER_SMEM_EPILOGUE", "1")]).unwrap();
        assert_eq!(
            PersistentHopper
                .plan_with(&smem, &small, &dev)
                .unwrap()
                .num_splits,
            1
        );

        // 1 turns splitting off for the small problem (here without the key-split warpgroups,
        // which the default plan of it takes)...
        let off = overrides(&[
            ("FLASHCORE_HOPPER_SPLITS", "1"),
            ("FLASHCORE_HOPPER_WG_KEY_SPLIT", "0"),
        ])
        .unwrap();
        let plan = PersistentHopper.plan_with(&off, &small, &dev).unwrap();
        assert_eq!((plan.num_splits, plan.workspace_f32), (1, 0));
        assert_eq!(plan.launches[0].grid, (32, 1, 1));
        assert_eq!(define_names(&plan), one_round_defines());
        // ...and N > 1 forces it on a large one (more splits than key tiles included: those
        // units are empty and still take part in the combine).
        let forced = overrides(&[("FLASHCORE_HOPPER_SPLITS", "4")]).unwrap();
        let big = AttentionProblem::new(4, 16, 2048, 128).with_causal(true);
        let plan = PersistentHopper.plan_with(&forced, &big, &dev).unwrap();
        assert_eq!(plan.num_splits, 4);
        assert_eq!(plan.launches[0].grid, (132, 1, 1));
        assert_eq!(
            plan.workspace_f32,
            split_workspace_f32(1024, 4, 128).unwrap()
        );
        assert_eq!(plan.workspace_counters, 1024 * 8);
        let one_tile = AttentionProblem::new(1, 2, 100, 64);
        let plan = PersistentHopper
            .plan_with(&forced, &one_tile, &dev)
            .unwrap();
        assert_eq!((plan.num_splits, plan.launches[0].grid), (4, (8, 1, 1)));
        // A problem whose workspace would pass the cap runs unsplit even when forced.
        let huge = AttentionProblem::new(64, 64, 8192, 128);
        let plan = PersistentHopper.plan_with(&forced, &huge, &dev).unwrap();
        assert_eq!(plan.num_splits, 1);
        assert!(!define_names(&plan).contains(&"FC_HOPPER_SPLIT_KV".to_string()));
    }

    /// The unsplit defines of a one-round D = 64 problem launched programmatically: the smem
    /// epilogue and the L2 prefetch too.
    fn one_round_defines() -> Vec<String> {
        let mut names = UNSPLIT_DEFINES.map(String::from).to_vec();
        names.push("FC_HOPPER_SMEM_EPILOGUE".into());
        names.push("FC_HOPPER_PREFETCH".into());
        names
    }

    #[test]
    fn dynamic_schedule_past_one_round_only() {
        let dev = DeviceInfo::synthetic_h100();
        // (1,16,512,64): 64 units on 132 SMs, one round: static, no workspace.
        let p = AttentionProblem::new(1, 16, 512, 64);
        let plan = default_plan(&p, &dev);
        assert_eq!(define_names(&plan), one_round_defines());
        assert_eq!(plan.workspace_f32, 0);
        // Forced off / on through the environment lookup.
        let off = HopperConfig::from_overrides(|n| {
            (n == "FLASHCORE_HOPPER_DYNAMIC").then(|| "0".to_string())
        })
        .unwrap();
        let big = AttentionProblem::new(4, 16, 2048, 128).with_causal(true);
        let plan = PersistentHopper.plan_with(&off, &big, &dev).unwrap();
        assert_eq!((define_names(&plan).len(), plan.workspace_f32), (7, 0));
        let on = HopperConfig::from_overrides(|n| {
            (n == "FLASHCORE_HOPPER_DYNAMIC").then(|| "1".to_string())
        })
        .unwrap();
        let plan = PersistentHopper.plan_with(&on, &p, &dev).unwrap();
        assert_eq!(plan.workspace_counters, DYNAMIC_COUNTER_WORDS);
        assert!(HopperConfig::from_overrides(|n| {
            (n == "FLASHCORE_HOPPER_DYNAMIC").then(|| "maybe".to_string())
        })
        .is_err());
    }

    #[test]
    fn rejects_non_hopper() {
        let dev = DeviceInfo::synthetic_sm86();
        let p = AttentionProblem::new(1, 8, 512, 64);
        assert!(PersistentHopper.supports(&p, &dev).is_err());
    }
}
