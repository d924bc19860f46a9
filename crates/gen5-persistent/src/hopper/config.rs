//! The kernel's compile-time variants ([`HopperConfig`]), their `FLASHCORE_HOPPER_*`
//! environment overrides, how a problem resolves them, and the defines they build with.

use flashcore_core::{AttentionProblem, KvStorage};

use super::heuristics::{
    auto_splits, default_cluster_key_split, default_consumer_wgs, default_wg_key_split,
    key_split_shaped, KEY_SPLIT_STAGES_D64,
};
use super::smem::{
    barrier_area_bytes, build_head_dim, cluster_exchange_bytes, key_split_exchange_bytes,
    smem_bytes_with_tiles_v, BLOCK_N, NARROW_HEAD_DIM, Q_STAGES, STAGES, WARPGROUP_ROWS,
    WARPGROUP_THREADS,
};
use crate::env::{Env, Overridable};

/// Keys per K/V tile at D = 128 without causal masking ([`HopperConfig::wide_noncausal`]).
pub const WIDE_BLOCK_N: usize = 176;
/// Keys per K/V tile of the wide-head builds, as FlashAttention-3 sizes them: at D = 192 and 256
/// the 128-row Q tile, two K/V stages and these tiles fill the shared memory (217 and 225 KiB),
/// and S (`BLOCK_N / 2` registers a thread) fits beside O (`D / 2`). Paged caches take them too
/// (in 16-row page boxes): a row's keys are then summed in the same tiles as in a contiguous
/// cache, and the two agree bit for bit (reliability's `modes`; 64-key pages broke that).
pub const WIDE_HEAD_BLOCK_N: [(usize, usize); 2] = [(192, 112), (256, 80)];
/// Keys per K/V tile of the D = 192 build with V at most 128 wide (DeepSeek's 192 / 128):
/// FlashAttention-3's 128 (its tile_size_fwd_sm90). S (64 f32) + P (32) + O (64) a thread is
/// fewer registers than the 112-key tile at D = 192 holds (56 + 28 + 96), and the ring still fits
/// two stages: 128 x 192 Q + 2 x 128 x (192 + 128) = 214 144 bytes with the barriers and slack.
pub const NARROW_V_D192_BLOCK_N: usize = 128;
/// 1: FA3 intra-warpgroup overlap (softmax of S_j+1 while O += P_j V_j runs); 0: the simple
/// serial loop. Override at run time with FLASHCORE_HOPPER_OVERLAP=0|1 (e.g. to bisect a failure).
pub const OVERLAP: bool = true;
/// Consumer warpgroups' `setmaxnreg` (232 -> producer 40; 240 -> producer 24).
pub const CONSUMER_REGS: usize = 232;
/// Largest `FLASHCORE_HOPPER_SPLITS` accepted.
pub const MAX_SPLITS: usize = 128;

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
    /// fit one round and that do not take the key split ([`default_wg_key_split`]; H100,
    /// 2026-11-26, commit 078f226: the mission shape 7.17 → 6.77 µs: the kernel's O stores are on
    /// the critical path of a one-round grid), off elsewhere (the ladder's many-round rows had a
    /// lower sum with it, docs/results/2026-11-23-hopper-variants-h100).
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
    /// 2026-11-23-gen5-defaults-h100, ab17.txt). Env `FLASHCORE_HOPPER_WIDE_NONCAUSAL=0|1`.
    pub wide_noncausal: bool,
    /// K/V bytes the tile scheduler keeps hot at once (`FC_HOPPER_L2_SECTION_BYTES`; env
    /// `FLASHCORE_HOPPER_L2_SECTION_MB`, 1..=1024; `None`:
    /// [`default_l2_section_bytes`](super::heuristics::default_l2_section_bytes)).
    pub l2_section_bytes: Option<u64>,
    /// Programmatic dependent launch (`KernelLaunch::programmatic_launch`; env
    /// `FLASHCORE_HOPPER_PDL=0|1`; `None`: dense problems only): the kernel may start while the
    /// stream's previous kernel runs, its setup (barriers, tensor-map prefetch) overlapping that
    /// kernel's tail, and waits for it (`griddepcontrol.wait`) before its first global-memory
    /// access. Measured (H100, 2026-11-26, commit 25afc0a): the mission shape −8 %, the D = 64
    /// ladder rows −1.2 to −1.7 % (eager), D = 128 level; the modes build's chunked-prefill row
    /// 1-2 % slower, so mode problems launch plainly unless forced.
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
    /// The narrow build for head dims up to 32 (`FC_HEAD_DIM` 32, 64-byte rows; env
    /// `FLASHCORE_HOPPER_NARROW_HEAD=0|1`, on by default): half the tensor-core work of the 64
    /// build. It has the row warpgroups' path only, so a problem whose resolved configuration
    /// takes the key split or the staged epilogue is padded into the 64 build as before.
    /// [`HopperConfig::for_problem`] leaves it on only where the problem takes it.
    pub narrow_head: bool,
    /// A printed clock64 timeline of three CTAs' units (`FC_HOPPER_TRACE`,
    /// `kernels/gen5_hopper/trace.cuh`; env `FLASHCORE_HOPPER_TRACE=0|1`), for finding where a
    /// unit's time goes. Off by default. On, the kernel builds as a module of its own and the
    /// plan gains a second launch, the printer; the kernel itself times as the default one
    /// (H100, 2026-11-26, commit a1fd15d).
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
            narrow_head: true,
            trace: false,
        }
    }
}

/// The default with the `FLASHCORE_HOPPER_*` overrides applied.
impl Overridable for HopperConfig {
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
        c.dynamic = flag("FLASHCORE_HOPPER_DYNAMIC")?;
        c.head_major = flag("FLASHCORE_HOPPER_HEAD_MAJOR")?;
        c.smem_epilogue = flag("FLASHCORE_HOPPER_SMEM_EPILOGUE")?;
        if let Some(v) = number("FLASHCORE_HOPPER_STAGES", &[2, 3, 4])? {
            c.stages = v;
        }
        if let Some(v) = number("FLASHCORE_HOPPER_BLOCK_N", &[64, 80, 112, 128, 176])? {
            c.block_n = v;
            c.wide_noncausal = false;
        }
        if let Some(v) = flag("FLASHCORE_HOPPER_WIDE_NONCAUSAL")? {
            c.wide_noncausal = v;
        }
        c.programmatic_launch = flag("FLASHCORE_HOPPER_PDL")?;
        c.prefetch = flag("FLASHCORE_HOPPER_PREFETCH")?;
        if let Some(v) = flag("FLASHCORE_HOPPER_TRACE")? {
            c.trace = v;
        }
        if let Some(v) = flag("FLASHCORE_HOPPER_NARROW_HEAD")? {
            c.narrow_head = v;
        }
        c.wg_key_split = flag("FLASHCORE_HOPPER_WG_KEY_SPLIT")?;
        c.cluster_key_split = flag("FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT")?;
        c.l2_section_bytes = env
            .number(
                "FLASHCORE_HOPPER_L2_SECTION_MB",
                |mb| (1..=1024).contains(&mb),
                |v| format!("FLASHCORE_HOPPER_L2_SECTION_MB={v}: expected 1..=1024"),
            )?
            .map(|mb| (mb as u64) << 20);
        if let Some(v) = number("FLASHCORE_HOPPER_Q_STAGES", &[1, 2])? {
            c.q_stages = v;
        }
        if let Some(v) = number("FLASHCORE_HOPPER_CONSUMER_REGS", &[232, 240])? {
            c.consumer_regs = v;
        }
        c.consumer_wgs = number("FLASHCORE_HOPPER_CONSUMER_WGS", &[2, 3])?;
        match env.count_or("FLASHCORE_HOPPER_SPLITS", "auto", MAX_SPLITS, |v| {
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
}

impl HopperConfig {
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
        let cfg = self.resolve(problem, sm_count);
        // The narrow build takes what the 64 build would, less its key split and staged epilogue.
        let narrow = cfg.narrow_head
            && problem.head_dim <= NARROW_HEAD_DIM
            && !problem.modes.q_fp8
            && !problem.has_distinct_head_dim_v()
            && !cfg.key_split()
            && cfg.smem_epilogue != Some(true);
        HopperConfig {
            narrow_head: narrow,
            ..cfg
        }
    }

    /// The kernel build's head dim (`FC_HEAD_DIM`) for a problem's `head_dim` under a configuration
    /// [`HopperConfig::for_problem`] resolved: the narrow 32 where it took it, else the next
    /// multiple of 64 ([`build_head_dim`]).
    pub fn build_head_dim(&self, head_dim: usize) -> usize {
        if self.narrow_head && head_dim <= NARROW_HEAD_DIM {
            NARROW_HEAD_DIM
        } else {
            build_head_dim(head_dim)
        }
    }

    /// [`HopperConfig::for_problem`] before the narrow build is chosen: every choice as the 64
    /// build's.
    fn resolve(&self, problem: &AttentionProblem, sm_count: usize) -> HopperConfig {
        if problem.modes.q_fp8 {
            return self.e4m3();
        }
        // Every choice follows the build's head dim, not the padded problem's.
        let build_d = build_head_dim(problem.head_dim);
        if problem.has_distinct_head_dim_v() {
            // V's own head dim: the row warpgroups' unsplit path with the register epilogue (the
            // kernel refuses the key split, split-KV and the smem epilogue with FC_HEAD_DIM_V).
            let unsplit = HopperConfig {
                wg_key_split: Some(false),
                cluster_key_split: Some(false),
                smem_epilogue: Some(false),
                splits: Some(1),
                auto_split: false,
                ..*self
            };
            let same_v = AttentionProblem {
                head_dim_v: None,
                softmax_scale: Some(problem.scale()),
                ..problem.clone()
            };
            let cfg = unsplit.for_problem(&same_v, sm_count);
            if build_d == 192 && problem.head_dim_v() <= 128 && self.block_n == BLOCK_N {
                return HopperConfig {
                    block_n: NARROW_V_D192_BLOCK_N,
                    ..cfg
                };
            }
            return cfg;
        }
        let padded;
        let problem = if build_d == problem.head_dim {
            problem
        } else {
            padded = AttentionProblem {
                head_dim: build_d,
                softmax_scale: Some(problem.scale()),
                ..problem.clone()
            };
            &padded
        };
        if problem.head_dim > 128 {
            return self.wide_head(problem);
        }
        if problem.batch_invariant {
            return self
                .batch_invariant(problem)
                .for_any_batch(problem, sm_count);
        }
        self.for_any_batch(problem, sm_count)
    }

    /// The e4m3 build's (`FC_HOPPER_E4M3`; `kernels/gen5_hopper/config.cuh`): the row
    /// warpgroups' unsplit path with the register epilogue and 128-key tiles, which is all that
    /// build has; the ring depth, Q buffers, ping-pong, schedule and launch keep their overrides.
    fn e4m3(&self) -> HopperConfig {
        HopperConfig {
            block_n: BLOCK_N,
            wide_noncausal: false,
            smem_epilogue: Some(false),
            splits: Some(1),
            auto_split: false,
            consumer_wgs: Some(2),
            wg_key_split: Some(false),
            cluster_key_split: Some(false),
            prefetch: Some(false),
            ..*self
        }
    }

    /// This configuration with every choice that follows the batch or the SM count pinned
    /// (`docs/MODES.md`, *Batch invariance*). A row's arithmetic depends on its q tile's
    /// warpgroups walking every key tile in order, and on the key tile's width; the key split
    /// (warpgroups or a cluster each summing part of the keys) and split-KV change that order,
    /// and their defaults follow the item count. Here the key-split warpgroups follow the
    /// sequence's own lengths instead ([`key_split_shaped`]; a batch of varied lengths mixing both
    /// kinds takes a launch for each, [`super::PersistentHopper::plan_with`]); the cluster key split and
    /// split-KV are never taken. The wide non-causal tile is kept for every problem that could take
    /// it (see `modes_dynamic` below), so a sequence gets it alone and inside a varlen batch alike.
    ///
    /// The q tile's height (two or three warpgroups, which follows the item count) moves no bit:
    /// under causal masking a taller tile walks key tiles past some of its rows' diagonals, and
    /// those leave the row max unchanged, which the consumer rescales by exactly 1
    /// (`consumer_math.cuh`). Before that rule three warpgroups against two differed in 28 O and
    /// 940 LSE elements of a causal D = 64 sequence (`docs/results/2026-11-28-batch-invariance-h200`).
    fn batch_invariant(&self, problem: &AttentionProblem) -> HopperConfig {
        HopperConfig {
            wg_key_split: Some(self.wg_key_split.unwrap_or_else(|| {
                key_split_shaped(problem.seq_q, problem.seq_k, problem.heads_q)
            })),
            cluster_key_split: Some(false),
            auto_split: false,
            ..*self
        }
    }

    /// The wide-head builds (D = 192 and 256): two row warpgroups on one 128-row Q buffer, the
    /// register epilogue, 240 consumer registers, and [`WIDE_HEAD_BLOCK_N`]-key tiles (or a
    /// forced `FLASHCORE_HOPPER_BLOCK_N`). Neither key split fits: their exchange (70 KiB at
    /// D = 256) takes the shared memory the K/V ring needs. What spills at these widths is left
    /// out (check-kernels, 2026-11-29): split-KV (the combine holds a partial's D / 8 float4s
    /// beside O: 24-128 bytes) and the modes build's dynamic schedule (28-48 bytes), so mode
    /// problems take the static one. The choice follows neither the batch nor the SM count, so
    /// it is batch invariant as it stands.
    fn wide_head(&self, problem: &AttentionProblem) -> HopperConfig {
        let block_n = if self.block_n != BLOCK_N {
            self.block_n
        } else {
            WIDE_HEAD_BLOCK_N
                .iter()
                .find(|&&(d, _)| d == problem.head_dim)
                .map_or(BLOCK_N, |&(_, n)| n)
        };
        HopperConfig {
            consumer_wgs: Some(2),
            wg_key_split: Some(false),
            cluster_key_split: Some(false),
            q_stages: 1,
            smem_epilogue: Some(false),
            consumer_regs: 240,
            block_n,
            splits: Some(1),
            auto_split: false,
            dynamic: if problem.modes.is_dense() {
                self.dynamic
            } else {
                Some(false)
            },
            ..*self
        }
    }

    fn for_any_batch(&self, problem: &AttentionProblem, sm_count: usize) -> HopperConfig {
        let unsplit = self.splits.is_none_or(|n| n == 1) && !self.auto_split;
        // Key-split warpgroups: the build exists for unsplit, overlapped plans with the register
        // epilogue and two warpgroups; with the modes for batch-invariant plans only.
        let key_split = (problem.modes.is_dense() || problem.batch_invariant)
            && unsplit
            && self.overlap
            && self.smem_epilogue != Some(true)
            && self.consumer_wgs != Some(3)
            && self
                .wg_key_split
                .unwrap_or_else(|| default_wg_key_split(problem, sm_count));
        if key_split {
            // Each warpgroup walks every other tile, so a 2-deep ring gives it one tile of
            // lookahead; at D = 64 four slots fit (H100, commit ecfd9dc: the mission shape 5.5 ->
            // 5.05 µs).
            let stages = if problem.head_dim == 64 && self.stages == STAGES {
                KEY_SPLIT_STAGES_D64
            } else {
                self.stages
            };
            let cluster = self
                .cluster_key_split
                .unwrap_or_else(|| default_cluster_key_split(problem, sm_count));
            // The modes build's key split takes the static schedule (FC_HOPPER_DYNAMIC is
            // refused with it; the schedule moves no value).
            let dynamic = if problem.modes.is_dense() {
                self.dynamic
            } else {
                Some(false)
            };
            return HopperConfig {
                consumer_wgs: Some(2),
                wg_key_split: Some(true),
                cluster_key_split: Some(cluster),
                smem_epilogue: Some(false),
                stages,
                dynamic,
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
        // cache ran 5 % behind its dense twin with 128-key tiles (H100, commit a4c5f9f).
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
        self.smem_bytes_v(head_dim, head_dim, elem_bytes)
    }

    /// [`HopperConfig::smem_bytes`] with V's own head dim (the V ring at `head_dim_v`; the
    /// exchanges are never built with it).
    pub fn smem_bytes_v(&self, head_dim: usize, head_dim_v: usize, elem_bytes: usize) -> usize {
        let exchange = if self.key_split() {
            key_split_exchange_bytes(head_dim)
        } else {
            0
        };
        let tiles = smem_bytes_with_tiles_v(
            head_dim,
            head_dim_v,
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
    /// `head_dim` is the problem's; the build's is [`HopperConfig::build_head_dim`].
    pub(super) fn defines(&self, head_dim: usize, l2_section: u64) -> Vec<(String, String)> {
        let build_d = self.build_head_dim(head_dim);
        let mut d = vec![
            ("FC_HEAD_DIM".to_string(), build_d.to_string()),
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
        if build_d != head_dim {
            // One module for every padded head dim: the kernel bounds O's columns by p.head_dim.
            d.push(("FC_HOPPER_PADDED_HEAD".to_string(), "1".to_string()));
        }
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
