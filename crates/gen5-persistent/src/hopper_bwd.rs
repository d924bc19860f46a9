//! The Hopper path's backward pass (`kernels/gen5_hopper_bwd.cu`: TMA, mbarrier, wgmma,
//! warp-specialized; sm_90a): D = rowsum(dO ∘ O) with the dQ accumulator zeroed, then one CTA
//! per 128-key block (64 at head dims past 128, the wide builds) computing dK and dV in
//! registers and bulk-reducing dQ slices into an f32 workspace accumulator, then dQ rounded from
//! it. dQ's additions come in run-dependent order, so the kernel is not deterministic
//! ([`AttentionBackward::deterministic`] is false). Windows, softcap, ALiBi and varlen take a
//! modes build (`FC_BWD_MODES`, `FC_BWD_VARLEN`): 64-row steps computing P and dS in one pass, or
//! at D = 64 without softcap the dense flow's 128-row steps; the wide builds' 32-row steps.
//!
//! Design and measurements: `docs/generations/gen5-hopper-bwd.md`.

use flashcore_core::backward::{backward_mode_defines, AttentionBackward, BACKWARD_MODES};
use flashcore_core::launch::{linear_grid, tiles};
use flashcore_core::{
    AttentionProblem, Capabilities, DeviceInfo, HeadDims, KernelLaunch, KvStorage, LaunchPlan,
    Swizzle, TensorMapSpec, Unsupported,
};

use crate::env::{Env, Overridable};
use crate::PersistentHopper;

pub const SOURCE: &str = "gen5_hopper_bwd.cu";
pub const HEAD_DIMS: &[usize] = &[64, 128, 192, 256];
/// The largest head dim taken: every multiple of 8 up to it runs in the next of [`HEAD_DIMS`]
/// (the forward's padding, `FC_HOPPER_PADDED_HEAD`).
pub const MAX_HEAD_DIM: usize = 256;
/// The widest build whose consumer warpgroups split a unit's keys; past it the wide builds
/// (`WIDE` in config.cuh: 64-key units, the step's products split between the warpgroups,
/// 32-query steps).
pub const SPLIT_KEYS_MAX_HEAD_DIM: usize = 128;

/// Keys per CTA work unit of the build for `head_dim` (`KEY_ROWS` in config.cuh).
pub fn key_rows(head_dim: usize) -> usize {
    if head_dim > SPLIT_KEYS_MAX_HEAD_DIM {
        64
    } else {
        128
    }
}

/// Query rows per step by default (`QUERY_ROWS` in config.cuh):
/// - D = 64: 128. Shorter steps left the per-step fixed costs (the dS barrier, waits, staging)
///   weighing most; 128 ran 1.18-1.24x faster than 64 (H100, 2026-11-25, commit 89a5f76).
/// - D = 128 without causal masking: 80, FlashAttention-3's choice there: a quarter more work per
///   step's fixed costs, with dQᵀ = Kᵀ·dSᵀ since 80 is not a multiple of wgmma's M. 1.2-3 % faster
///   than 64 at S = 4096 and 16384, level at 2048 (H100, 2026-11-26, commit 921f288).
/// - D = 128 under causal masking: 64. The steps that straddle the diagonal are partly masked
///   and 80-row steps waste more there: 4 % slower at (4,16,2048,128), level at (8,32,4096,128)
///   (H100, 2026-11-26, commit 921f288).
/// - With a window, softcap, ALiBi or varlen (a modes build): 64, whose steps compute P and dS in
///   one pass (80 or 128 rows spilled that form: ptxas, 2026-11-30); but 128 at D = 64 without
///   softcap, whose steps keep the dense flow (config.cuh's ONE_PASS): windows then took 1.11-1.46x
///   a dense backward's time per pair on the H200, where the 64-row one pass took 1.31-1.54x
///   (`docs/results/2026-11-30-hopper-bwd-dense-flow-h200`). At D = 128 that flow at 64 rows ran
///   slower than one pass, at 80 it spills.
/// - D = 192 and 256 (the wide builds): 32, what the shared memory holds at 256 beside the
///   double-buffered ring (config.cuh).
pub fn default_query_rows(head_dim: usize, causal: bool, modes: bool, softcap: bool) -> usize {
    match (head_dim, causal) {
        _ if head_dim > SPLIT_KEYS_MAX_HEAD_DIM => 32,
        _ if softcap => 64,
        (64, _) => 128,
        _ if modes => 64,
        (_, false) => 80,
        (_, true) => 64,
    }
}

/// Whether a key block sees only some query blocks: under causal masking or a window
/// (block_info.cuh's decode_unit).
fn banded(problem: &AttentionProblem) -> bool {
    problem.causal || problem.modes.window_left.is_some() || problem.modes.window_right.is_some()
}

/// Whether the units differ in length: when [`banded`], and with varlen, where each sequence's
/// units walk its own length, unless the packed totals say every sequence is max_seqlen long.
/// - Varlen of eight mixed lengths (256-4096), non-causal: one CTA per unit ran 9-11 % faster
///   than the persistent grid, 1.08-1.13× a dense backward of equal work per pair against
///   1.16-1.25×; eight equal lengths ran 1.8-3.6 % faster on the persistent grid, one sample each
///   (H200, docs/results/2026-12-02-hopper-bwd-grid-h200, calls 1 and 3).
fn unequal_units(problem: &AttentionProblem) -> bool {
    let m = &problem.modes;
    let unequal_sequences = match (m.packed_q, m.kv) {
        (Some(total_q), KvStorage::Packed { total_k }) => {
            problem.batch.checked_mul(problem.seq_q) != Some(total_q)
                || problem.batch.checked_mul(problem.seq_k) != Some(total_k)
        }
        _ => false,
    };
    banded(problem) || unequal_sequences
}

/// Work units per L2 section by default: half a wave (half the SM count) without causal masking,
/// one and a half waves under it (and under a window, whose units differ in length as well).
/// - Causal: sections of 1.5 waves ran the (4,16,2048,64) and (4,16,2048,128) rows 6-7 % faster
///   and (8,32,4096,128) 1.5 % faster, (1,16,16384,128) the same (its sections hold the same heads
///   either way); H100, 2026-11-26, commit 090c856: 66, 132, 198, 264 and 396 units, two passes.
/// - Without: half a wave ran (4,16,2048,128) 1.5-3 % faster than one wave and the other rows level
///   (H100, 2026-11-26, commit 090c856: two runs, two passes each).
pub fn default_section_units(problem: &AttentionProblem, device: &DeviceInfo) -> usize {
    let wave = device.sm_count.max(1) as usize;
    if banded(problem) {
        wave * 3 / 2
    } else {
        wave.div_ceil(2)
    }
}

const MAIN_THREADS: u32 = 384;
/// `CONVERT_THREADS` of dq_reduce.cuh.
const CONVERT_THREADS: u32 = 128;
const ROW_THREADS: u32 = 128;

/// Whether a build with `query_rows` queries a step computes dQᵀ = Kᵀ·dSᵀ (`DQ_TRANSPOSED` in
/// config.cuh): 80 and 32 are not multiples of wgmma's 64-row M side, so the queries go on N.
pub fn dq_transposed(query_rows: usize) -> bool {
    query_rows == 80 || query_rows == 32
}

/// Queries in one slice of the dQ accumulator (`DQ_SLICE_QUERIES`).
fn dq_slice_queries(query_rows: usize) -> usize {
    if dq_transposed(query_rows) {
        query_rows
    } else {
        64
    }
}

/// `SMEM_BYTES` of `kernels/gen5_hopper_bwd/config.cuh`: K and V ([`key_rows`]), `stages` (Q, dO)
/// stages of `query_rows` rows, two dS tiles (keys × `query_rows`), each consumer warpgroup's dQ
/// staging (one slice of 64 columns × 64, 80 or 32 queries, f32; in the wide builds up to two),
/// the wide builds' Pᵀ exchange, the stages' LSE and D, the barriers, and the 1024-byte alignment
/// slack.
pub fn smem_bytes(head_dim: usize, stages: usize, query_rows: usize) -> usize {
    let keys = key_rows(head_dim);
    let wide = head_dim > SPLIT_KEYS_MAX_HEAD_DIM;
    let kv = 2 * keys * head_dim * 2;
    let q_do = stages * 2 * query_rows * head_dim * 2;
    let ds = 2 * keys * query_rows * 2;
    let slices = head_dim / 64;
    let wg_slices = if wide { slices - slices / 2 } else { 1 };
    let dq = 2 * wg_slices * 64 * dq_slice_queries(query_rows) * 4;
    let exchange = if wide { 128 * (query_rows / 2) * 4 } else { 0 };
    let stats = stages * 2 * query_rows * 4;
    let bars = (2 + 2 * stages) * 8;
    kv + q_do + ds + dq + exchange + stats + bars.next_multiple_of(128) + 1024
}

/// Workspace words: D for every query row padded to whole `query_rows` blocks, then the f32 dQ
/// accumulator (the build's `head_dim` words per padded row), both written whole by the prepare
/// launch.
pub fn workspace_f32(
    problem: &AttentionProblem,
    head_dim: usize,
    query_rows: usize,
) -> Option<usize> {
    let padded_rows = problem
        .batch
        .checked_mul(problem.heads_q)?
        .checked_mul(tiles(problem.seq_q, query_rows) * query_rows)?;
    padded_rows.checked_mul(head_dim + 1)
}

/// CTAs of the main launch (it strides over its units). When the units are of equal length, one
/// CTA per SM, so a CTA loads its next unit's K and V while it stores the last unit's dK and dV.
/// When they are unequal ([`unequal_units`]), one CTA per unit, so the hardware balances them as
/// they finish. `persistent` overrides the choice (`FLASHCORE_HOPPER_BWD_PERSISTENT`).
fn main_grid(
    p: &AttentionProblem,
    units: usize,
    device: &DeviceInfo,
    persistent: Option<bool>,
) -> u32 {
    if !persistent.unwrap_or(!unequal_units(p)) {
        linear_grid(units)
    } else {
        linear_grid(units.min(device.sm_count.max(1) as usize))
    }
}

/// The build's tunables: the Q/dO ring depth, the work units per L2 section
/// ([`default_section_units`], block_info.cuh) and the queries per step.
/// `FLASHCORE_HOPPER_BWD_STAGES` (2 or 3), `FLASHCORE_HOPPER_BWD_SECTION_UNITS` (≥ 1) and
/// `FLASHCORE_HOPPER_BWD_QUERY_ROWS` (64, 128 at D = 64, 80 at D = 128; unset:
/// [`default_query_rows`]) override them for A/B runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackwardTuning {
    pub stages: usize,
    /// `None`: [`default_section_units`] of the problem.
    pub section_units: Option<usize>,
    /// `None`: [`default_query_rows`] of the problem.
    pub query_rows: Option<usize>,
    /// The consumer step's variants (config.cuh's FC_BWD_DQ_BEFORE_DK and FC_BWD_DS_STMATRIX),
    /// each `None` for the build's default (both on): [`STEP_VARIANTS`]' variables, 0 or 1.
    pub step: [Option<bool>; 2],
    /// One CTA per SM striding over the units (`true`) or one CTA per unit (`false`); `None`
    /// for [`main_grid`]'s choice. `FLASHCORE_HOPPER_BWD_PERSISTENT` = 0 or 1.
    pub persistent: Option<bool>,
}

/// The step variants' variables and defines, in [`BackwardTuning::step`]'s order.
pub const STEP_VARIANTS: [(&str, &str); 2] = [
    ("FLASHCORE_HOPPER_BWD_DQ_BEFORE_DK", "FC_BWD_DQ_BEFORE_DK"),
    ("FLASHCORE_HOPPER_BWD_DS_STMATRIX", "FC_BWD_DS_STMATRIX"),
];

impl Overridable for BackwardTuning {
    fn read(env: Env) -> Result<Self, String> {
        let number = |var: &str, allowed: &dyn Fn(usize) -> bool| {
            env.number(var, allowed, |v| format!("{var}={v:?} is not allowed"))
        };
        Ok(BackwardTuning {
            stages: number("FLASHCORE_HOPPER_BWD_STAGES", &|n| n == 2 || n == 3)?.unwrap_or(2),
            section_units: number("FLASHCORE_HOPPER_BWD_SECTION_UNITS", &|n| {
                (1..=1 << 20).contains(&n)
            })?,
            query_rows: number("FLASHCORE_HOPPER_BWD_QUERY_ROWS", &|n| {
                n == 32 || n == 64 || n == 80 || n == 128
            })?,
            step: {
                let mut step = [None; 2];
                for (slot, (var, _)) in step.iter_mut().zip(STEP_VARIANTS) {
                    *slot = env.flag(var, |v| format!("{var}={v:?} is not 0 or 1"))?;
                }
                step
            },
            persistent: env.flag("FLASHCORE_HOPPER_BWD_PERSISTENT", |v| {
                format!("FLASHCORE_HOPPER_BWD_PERSISTENT={v:?} is not 0 or 1")
            })?,
        })
    }
}

fn capabilities() -> Capabilities {
    // TMA wants 16-byte aligned bases and strides: alignment_elems = 8.
    Capabilities::all_features(
        HeadDims::Range {
            min: 8,
            max: MAX_HEAD_DIM,
            multiple_of: 8,
        },
        (9, 0),
    )
    .with_modes(BACKWARD_MODES)
}

impl AttentionBackward for PersistentHopper {
    fn name(&self) -> &'static str {
        "persistent-hopper"
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }

    fn deterministic(&self) -> bool {
        false
    }

    fn plan_backward(
        &self,
        problem: &AttentionProblem,
        device: &DeviceInfo,
    ) -> Result<LaunchPlan, Unsupported> {
        let tuning = BackwardTuning::from_env()
            .map_err(|e| Unsupported::new(AttentionBackward::name(self), e))?;
        plan_with_tuning(problem, device, tuning)
    }
}

/// `FLASHCORE_HOPPER_BWD_TRACE` (trace.cuh, for finding where time goes): 1 (or another flag's
/// "on") prints a timeline of three CTAs' units, 2 every CTA's units with their SM and times, the
/// grid's whole schedule; unset or off, `None`.
fn trace_level(env: Env) -> Option<u8> {
    const VAR: &str = "FLASHCORE_HOPPER_BWD_TRACE";
    if env.number_or_unset(VAR) == Some(2) {
        return Some(2);
    }
    env.flag_or_unset(VAR).unwrap_or(false).then_some(1)
}

/// [`AttentionBackward::plan_backward`] with the tunables given rather than read from the
/// environment.
pub fn plan_with_tuning(
    problem: &AttentionProblem,
    device: &DeviceInfo,
    tuning: BackwardTuning,
) -> Result<LaunchPlan, Unsupported> {
    let name = AttentionBackward::name(&PersistentHopper);
    capabilities().require_head_dim(name, problem.head_dim)?;
    crate::hopper::require_sm90a(name, device)?;
    // The build's head dim: the problem's padded up to whole 64-column boxes.
    let d = crate::hopper::build_head_dim(problem.head_dim);
    let softcap = problem.modes.softcap.is_some();
    let query_rows = tuning.query_rows.unwrap_or(default_query_rows(
        d,
        problem.causal,
        !problem.modes.is_dense(),
        softcap,
    ));
    let wide = d > SPLIT_KEYS_MAX_HEAD_DIM;
    let built_for: Option<&str> = match query_rows {
        128 => (d != 64).then_some("head_dim 64"),
        80 => (d != 128).then_some("head_dim 128"),
        32 => (!wide).then_some("head dims past 128"),
        _ => wide.then_some("head dims up to 128"),
    };
    if let Some(dims) = built_for {
        return Err(Unsupported::new(
            name,
            format!("FLASHCORE_HOPPER_BWD_QUERY_ROWS={query_rows} is built for {dims} only"),
        ));
    }
    if softcap && query_rows == 128 {
        // The 128-row modes build keeps the dense step flow, which has no softcap term.
        return Err(Unsupported::new(
            name,
            "FLASHCORE_HOPPER_BWD_QUERY_ROWS=128 with softcap (softcap takes 64-row steps)",
        ));
    }
    let smem = smem_bytes(d, tuning.stages, query_rows);
    device.require_shared_memory(name, smem, true, "")?;
    let workspace = workspace_f32(problem, d, query_rows)
        .ok_or_else(|| Unsupported::new(name, "the dQ accumulator's size overflows usize"))?;
    // The kernels index rows, units and the TMA coordinates with 32-bit ints per axis.
    let keys = key_rows(d);
    if problem.seq_q > i32::MAX as usize - query_rows || problem.seq_k > i32::MAX as usize - keys {
        return Err(Unsupported::new(name, "sequence lengths past 2^31 - 128"));
    }
    let mut defines = vec![
        ("FC_HEAD_DIM".to_string(), d.to_string()),
        (
            "FC_BWD_SECTION_UNITS".to_string(),
            tuning
                .section_units
                .unwrap_or_else(|| default_section_units(problem, device))
                .to_string(),
        ),
        ("FC_BWD_STAGES".to_string(), tuning.stages.to_string()),
        ("FC_BWD_QUERY_ROWS".to_string(), query_rows.to_string()),
    ];
    if d != problem.head_dim {
        defines.push(("FC_HOPPER_PADDED_HEAD".to_string(), "1".to_string()));
    }
    for (on, (_, define)) in tuning.step.iter().zip(STEP_VARIANTS) {
        if let Some(on) = on {
            defines.push((define.to_string(), (*on as u8).to_string()));
        }
    }
    // FC_BWD_MODES for a window, softcap, ALiBi or varlen, and FC_BWD_VARLEN for varlen
    // (config.cuh); a dense build stays as it was.
    defines.extend(backward_mode_defines(problem));
    defines.extend(
        crate::backward::short_row_keys_define(Env::process())
            .map_err(|e| Unsupported::new(name, e))?,
    );
    if Env::process()
        .flag_or_unset("FLASHCORE_HOPPER_DEBUG")
        .unwrap_or(false)
    {
        // Bounded mbarrier waits: a protocol deadlock traps with a printf instead of hanging.
        defines.push(("FC_HOPPER_DEBUG".to_string(), "1".to_string()));
    }
    if let Some(level) = trace_level(Env::process()) {
        defines.push(("FC_BWD_TRACE".to_string(), level.to_string()));
    }
    let p = problem;
    let padded_rows = p.batch * p.heads_q * tiles(p.seq_q, query_rows) * query_rows;
    let units = p.batch * p.heads_kv * tiles(p.seq_k, keys);
    // Several rows a warp (`dot_rows_per_warp`, common/row_dot.cuh), grid-stride (the core's
    // per-item launch, with this build's defines).
    let rows_per_block = (ROW_THREADS / 32) as usize * crate::backward::dot_rows_per_warp(d);
    let row_launch = |entry: &'static str, rows: usize| KernelLaunch {
        defines: defines.clone(),
        ..KernelLaunch::per_item(SOURCE, entry, tiles(rows, rows_per_block), ROW_THREADS)
    };
    Ok(LaunchPlan {
        launches: vec![
            row_launch("bwd_hopper_prepare", padded_rows),
            KernelLaunch {
                source: SOURCE,
                entry: "bwd_hopper_dk_dv",
                defines: defines.clone(),
                grid: (main_grid(p, units, device, tuning.persistent), 1, 1),
                block: (MAIN_THREADS, 1, 1),
                dynamic_smem_bytes: smem as u32,
                tensor_maps: Some(TensorMapSpec {
                    q_box_rows: query_rows as u32,
                    kv_box_rows: keys as u32,
                    box_cols: 64,
                    swizzle: Swizzle::B128,
                    transposed_v: None,
                }),
                programmatic_launch: false,
            },
            // One CTA per (batch·heads_q, accumulator query block): the block's slices go through
            // a shared-memory tile.
            KernelLaunch {
                defines: defines.clone(),
                ..KernelLaunch::per_item(
                    SOURCE,
                    "bwd_hopper_dq_convert",
                    p.batch * p.heads_q * tiles(p.seq_q, dq_slice_queries(query_rows)),
                    CONVERT_THREADS,
                )
            },
        ],
        workspace_f32: workspace,
        workspace_counters: 0,
        num_splits: 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of `key` among the main launch's defines.
    fn define(plan: &LaunchPlan, key: &str) -> Option<String> {
        plan.launches[1]
            .defines
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    }

    #[test]
    fn plan_is_prepare_main_convert_sized_by_blocks() {
        let h100 = DeviceInfo::synthetic_h100();
        let p = AttentionProblem::new(2, 8, 100, 128)
            .with_kv(2, 300)
            .with_causal(true);
        let plan = PersistentHopper.plan_backward(&p, &h100).unwrap();
        assert_eq!(
            plan.entries(),
            [
                "bwd_hopper_prepare",
                "bwd_hopper_dk_dv",
                "bwd_hopper_dq_convert"
            ]
        );
        // Causal, D = 128: 64-row steps. 100 rows pad to 128: 2 * 8 * 128 padded rows, 4 warps
        // a block of 2 rows each (16 lanes a row).
        assert_eq!(plan.launches[0].grid.0, 2 * 8 * 128 / (4 * 2));
        assert_eq!(plan.launches[1].grid.0, 2 * 2 * 3); // 300 keys: 3 blocks of 128
                                                        // The convert: one CTA per 64-row block of each head's 100 rows.
        assert_eq!(plan.launches[2].grid.0, 2 * 8 * 2);
        assert_eq!(plan.workspace_f32, 2 * 8 * 128 * 129);
        // K, V 32 KiB each; Q, dO 2 x 16 KiB each; dSᵀ 2 x 16 KiB; staging 2 x 16 KiB; stats 1 KiB;
        // barriers 128; slack 1024.
        assert_eq!(
            plan.launches[1].dynamic_smem_bytes,
            65536 + 65536 + 32768 + 32768 + 1024 + 128 + 1024
        );
        assert!(plan.launches[1].tensor_maps.is_some());
        assert!(!AttentionBackward::deterministic(&PersistentHopper));

        // Without causal masking, D = 128: 80-row steps, dQᵀ, and the convert by query block.
        let plan = PersistentHopper
            .plan_backward(&p.clone().with_causal(false), &h100)
            .unwrap();
        // 100 rows pad to 160: 2 query blocks of 80 per head, one CTA each.
        assert_eq!(plan.launches[0].grid.0, 2 * 8 * 160 / (4 * 2));
        assert_eq!(plan.launches[2].grid.0, 2 * 8 * 2);
        assert_eq!(plan.workspace_f32, 2 * 8 * 160 * 129);
        assert_eq!(
            plan.launches[1].tensor_maps.as_ref().map(|m| m.q_box_rows),
            Some(80)
        );
        // K, V 32 KiB each; Q, dO 2 x 20 KiB each; dS 2 x 20 KiB; staging 2 x 20 KiB; stats
        // 1280; barriers 128; slack 1024: 640 bytes under the H100's 232 448.
        assert_eq!(
            plan.launches[1].dynamic_smem_bytes,
            65536 + 81920 + 40960 + 40960 + 1280 + 128 + 1024
        );

        let big = AttentionProblem::new(4, 16, 2048, 128);
        let grid = |p: &AttentionProblem| {
            PersistentHopper.plan_backward(p, &h100).unwrap().launches[1]
                .grid
                .0
        };
        assert_eq!(grid(&big), 132, "one CTA per SM without causal masking");
        assert_eq!(
            grid(&big.clone().with_causal(true)),
            4 * 16 * 16,
            "one CTA per unit under causal masking"
        );
    }

    #[test]
    fn query_rows_are_checked_against_the_head_dim_and_the_shared_memory() {
        let h100 = DeviceInfo::synthetic_h100();
        let tuning = |stages, rows| BackwardTuning {
            stages,
            section_units: None,
            query_rows: Some(rows),
            step: [None; 2],
            persistent: None,
        };
        let d64 = AttentionProblem::new(1, 2, 256, 64);
        let d128 = AttentionProblem::new(1, 2, 256, 128);
        let e = plan_with_tuning(&d64, &h100, tuning(2, 80)).unwrap_err();
        assert!(e.to_string().contains("head_dim 128 only"), "{e}");
        let e = plan_with_tuning(&d128, &h100, tuning(2, 128)).unwrap_err();
        assert!(e.to_string().contains("head_dim 64 only"), "{e}");
        // Three stages of 80 rows do not fit.
        let e = plan_with_tuning(&d128, &h100, tuning(3, 80)).unwrap_err();
        assert!(e.to_string().contains("shared memory"), "{e}");
        for (problem, rows) in [(&d64, 64), (&d64, 128), (&d128, 64), (&d128, 80)] {
            let plan = plan_with_tuning(problem, &h100, tuning(2, rows)).unwrap();
            assert_eq!(define(&plan, "FC_BWD_QUERY_ROWS"), Some(rows.to_string()));
        }
    }

    #[test]
    fn modes_take_the_modes_build_and_its_step_size() {
        use flashcore_core::{AlibiSlopes, Modes};
        let h100 = DeviceInfo::synthetic_h100();
        let dense = AttentionProblem::new(2, 8, 1000, 128);
        let plan = PersistentHopper.plan_backward(&dense, &h100).unwrap();
        assert_eq!(define(&plan, "FC_BWD_MODES"), None);
        assert_eq!(define(&plan, "FC_BWD_QUERY_ROWS").as_deref(), Some("80"));
        let window = Modes {
            window_left: Some(256),
            window_right: Some(0),
            ..Modes::default()
        };
        let softcap = Modes {
            softcap: Some(30.0),
            ..Modes::default()
        };
        let alibi = Modes {
            alibi: Some(AlibiSlopes::PerHead),
            ..Modes::default()
        };
        // (modes, head dim, query rows a step)
        for (modes, d, rows) in [
            (window.clone(), 128, 64),
            (window.clone(), 64, 128),
            (softcap.clone(), 64, 64),
            (softcap.clone(), 128, 64),
            (alibi.clone(), 96, 64),
            (alibi, 64, 128),
        ] {
            let p = AttentionProblem::new(2, 8, 1000, d).with_modes(modes.clone());
            let plan = PersistentHopper.plan_backward(&p, &h100).unwrap();
            for launch in &plan.launches {
                assert!(
                    launch
                        .defines
                        .contains(&("FC_BWD_MODES".into(), "1".into())),
                    "{modes:?}: {:?}",
                    launch.defines
                );
            }
            assert_eq!(
                define(&plan, "FC_BWD_QUERY_ROWS"),
                Some(rows.to_string()),
                "{modes:?} d {d}"
            );
        }
        // Softcap has no 128-row build: an override asking for one is refused with the reason.
        let capped = AttentionProblem::new(2, 8, 1000, 64).with_modes(softcap);
        let tuning = BackwardTuning {
            stages: 2,
            section_units: None,
            query_rows: Some(128),
            step: [None; 2],
            persistent: None,
        };
        let e = plan_with_tuning(&capped, &h100, tuning).unwrap_err();
        assert!(e.to_string().contains("softcap takes 64-row steps"), "{e}");
        // A window makes the units unequal: one CTA per unit, as under causal masking.
        let windowed = dense.clone().with_modes(window);
        let plan = PersistentHopper.plan_backward(&windowed, &h100).unwrap();
        assert_eq!(
            plan.launches[1].grid.0 as usize,
            2 * 8 * 1000usize.div_ceil(128)
        );
        let varlen = dense.with_modes(Modes {
            packed_q: Some(1000),
            kv: KvStorage::Packed { total_k: 1000 },
            ..Modes::default()
        });
        let plan = PersistentHopper.plan_backward(&varlen, &h100).unwrap();
        assert_eq!(define(&plan, "FC_BWD_VARLEN").as_deref(), Some("1"));
        assert_eq!(define(&plan, "FC_BWD_QUERY_ROWS").as_deref(), Some("64"));
        // Varlen: sequences shorter than max_seqlen make unequal units, one CTA per unit (more
        // units than SMs here); when the totals say every sequence is max_seqlen long, one CTA per
        // SM, as for a dense batch.
        let packed = |total: usize| {
            AttentionProblem::new(8, 16, 4096, 128).with_modes(Modes {
                packed_q: Some(total),
                kv: KvStorage::Packed { total_k: total },
                ..Modes::default()
            })
        };
        let grid = |p: &AttentionProblem| {
            PersistentHopper.plan_backward(p, &h100).unwrap().launches[1]
                .grid
                .0 as usize
        };
        assert_eq!(grid(&packed(16384)), 8 * 16 * 4096 / 128);
        assert_eq!(grid(&packed(8 * 4096)), 132);
    }

    #[test]
    fn other_devices_and_head_dims_are_refused_with_the_reason() {
        let h100 = DeviceInfo::synthetic_h100();
        let e = PersistentHopper
            .supports_backward(&AttentionProblem::new(1, 2, 64, 264), &h100)
            .unwrap_err();
        assert!(e.to_string().contains("head_dim 264"), "{e}");
        let e = PersistentHopper
            .plan_backward(
                &AttentionProblem::new(1, 2, 64, 128),
                &DeviceInfo::synthetic_sm86(),
            )
            .unwrap_err();
        assert!(e.to_string().contains("sm_90a"), "{e}");
    }

    #[test]
    fn tuning_comes_from_the_environment_and_bad_values_are_named() {
        let h100 = DeviceInfo::synthetic_h100();
        let with = |vars: &'static [(&'static str, &'static str)]| {
            BackwardTuning::from_lookup(move |var| {
                vars.iter()
                    .find(|(k, _)| *k == var)
                    .map(|(_, v)| v.to_string())
            })
        };
        let e = with(&[("FLASHCORE_HOPPER_BWD_STAGES", "4")]).unwrap_err();
        assert!(e.contains("FLASHCORE_HOPPER_BWD_STAGES"), "{e}");
        let e = with(&[("FLASHCORE_HOPPER_BWD_SECTION_UNITS", "0")]).unwrap_err();
        assert!(e.contains("SECTION_UNITS"), "{e}");
        let t = with(&[
            ("FLASHCORE_HOPPER_BWD_STAGES", "3"),
            ("FLASHCORE_HOPPER_BWD_SECTION_UNITS", "264"),
        ])
        .unwrap();
        assert_eq!(
            (t.stages, t.section_units, t.query_rows),
            (3, Some(264), None)
        );
        let t = with(&[]).unwrap();
        assert_eq!((t.stages, t.section_units, t.query_rows), (2, None, None));
        // The step variants: unset leaves the build's default; 0 and 1 become defines.
        assert_eq!(t.step, [None; 2]);
        let e = with(&[("FLASHCORE_HOPPER_BWD_DS_STMATRIX", "maybe")]).unwrap_err();
        assert!(e.contains("FLASHCORE_HOPPER_BWD_DS_STMATRIX"), "{e}");
        let t = with(&[("FLASHCORE_HOPPER_BWD_DQ_BEFORE_DK", "0")]).unwrap();
        assert_eq!(t.step, [Some(false), None]);
        let p = AttentionProblem::new(1, 2, 256, 128);
        let defines = plan_with_tuning(&p, &h100, t).unwrap().launches[1]
            .defines
            .clone();
        assert!(defines.contains(&("FC_BWD_DQ_BEFORE_DK".into(), "0".into())));
        assert!(!defines.iter().any(|(k, _)| k == "FC_BWD_DS_STMATRIX"));
        // The trace: off unless set; 2 is the whole grid's schedule.
        let trace = |v: &'static str| {
            trace_level(Env::new(&move |var: &str| {
                (var == "FLASHCORE_HOPPER_BWD_TRACE").then(|| v.to_string())
            }))
        };
        assert_eq!(trace_level(Env::new(&|_: &str| None)), None);
        assert_eq!(
            (trace("0"), trace("1"), trace("on"), trace("2")),
            (None, Some(1), Some(1), Some(2))
        );
        // The grid: the plan's choice unless FLASHCORE_HOPPER_BWD_PERSISTENT says.
        assert!(with(&[("FLASHCORE_HOPPER_BWD_PERSISTENT", "2")]).is_err());
        let causal = AttentionProblem::new(4, 16, 2048, 128).with_causal(true);
        let grid = |vars: &'static [(&'static str, &'static str)]| {
            plan_with_tuning(&causal, &h100, with(vars).unwrap())
                .unwrap()
                .launches[1]
                .grid
                .0
        };
        assert_eq!(grid(&[]), 4 * 16 * 16);
        assert_eq!(grid(&[("FLASHCORE_HOPPER_BWD_PERSISTENT", "1")]), 132);
        // The default: half a wave of units per L2 section, one and a half under causal masking.
        let p = AttentionProblem::new(4, 16, 2048, 128);
        assert_eq!(default_section_units(&p, &h100), 66);
        assert_eq!(
            default_section_units(&p.clone().with_causal(true), &h100),
            198
        );
        assert!(smem_bytes(128, 3, 64) <= h100.max_shared_memory_per_block_optin as usize);
        let wide = with(&[("FLASHCORE_HOPPER_BWD_QUERY_ROWS", "128")]).unwrap();
        assert_eq!(wide.query_rows, Some(128));
        assert!(smem_bytes(64, 2, 128) <= h100.max_shared_memory_per_block_optin as usize);
        let narrow = with(&[("FLASHCORE_HOPPER_BWD_QUERY_ROWS", "64")]).unwrap();
        assert_eq!(narrow.query_rows, Some(64));
        let t80 = with(&[("FLASHCORE_HOPPER_BWD_QUERY_ROWS", "80")]).unwrap();
        assert_eq!(t80.query_rows, Some(80));
        assert!(smem_bytes(128, 2, 80) <= h100.max_shared_memory_per_block_optin as usize);
        assert!(with(&[("FLASHCORE_HOPPER_BWD_QUERY_ROWS", "96")]).is_err());
    }

    #[test]
    fn head_dims_past_128_take_the_wide_builds() {
        use flashcore_core::Modes;
        let h100 = DeviceInfo::synthetic_h100();
        for (d, build, padded) in [
            (256, 256, false),
            (192, 192, false),
            (136, 192, true),
            (200, 256, true),
        ] {
            let p = AttentionProblem::new(2, 8, 1000, d).with_causal(d == 192);
            let plan = PersistentHopper.plan_backward(&p, &h100).unwrap();
            assert_eq!(define(&plan, "FC_HEAD_DIM"), Some(build.to_string()));
            assert_eq!(define(&plan, "FC_BWD_QUERY_ROWS").as_deref(), Some("32"));
            assert_eq!(define(&plan, "FC_HOPPER_PADDED_HEAD").is_some(), padded);
            let maps = plan.launches[1].tensor_maps.as_ref().unwrap();
            assert_eq!((maps.q_box_rows, maps.kv_box_rows), (32, 64));
            // 64-key units; the convert by 32-row accumulator blocks.
            if d != 192 {
                assert_eq!(plan.launches[1].grid.0, 132);
            } else {
                assert_eq!(
                    plan.launches[1].grid.0 as usize,
                    2 * 8 * 1000usize.div_ceil(64)
                );
            }
            assert_eq!(
                plan.launches[2].grid.0 as usize,
                2 * 8 * 1000usize.div_ceil(32)
            );
            assert_eq!(plan.workspace_f32, 2 * 8 * 1024 * (build + 1));
            assert!(plan.launches[1].dynamic_smem_bytes <= h100.max_shared_memory_per_block_optin);
        }
        // K, V 32 KiB each; Q, dO 2 x 16 KiB each; dS 2 x 4 KiB; two slices of staging a
        // warpgroup, 8 KiB each; the Pᵀ exchange 8 KiB; stats 512; barriers 128; slack 1024.
        assert_eq!(
            smem_bytes(256, 2, 32),
            65536 + 65536 + 8192 + 32768 + 8192 + 512 + 128 + 1024
        );
        assert!(smem_bytes(256, 3, 32) <= h100.max_shared_memory_per_block_optin as usize);
        // Modes past 128 take the wide modes build, 32-query steps as well (softcap too).
        let modes = Modes {
            window_left: Some(16),
            softcap: Some(30.0),
            packed_q: Some(256),
            kv: KvStorage::Packed { total_k: 256 },
            ..Modes::default()
        };
        let p = AttentionProblem::new(1, 2, 256, 192).with_modes(modes);
        let plan = PersistentHopper.plan_backward(&p, &h100).unwrap();
        assert_eq!(define(&plan, "FC_BWD_MODES").as_deref(), Some("1"));
        assert_eq!(define(&plan, "FC_BWD_VARLEN").as_deref(), Some("1"));
        assert_eq!(define(&plan, "FC_BWD_QUERY_ROWS").as_deref(), Some("32"));
        // Step sizes of the other builds are refused with the reason.
        let tuning = |rows| BackwardTuning {
            stages: 2,
            section_units: None,
            query_rows: Some(rows),
            step: [None; 2],
            persistent: None,
        };
        let wide = AttentionProblem::new(1, 2, 256, 256);
        let e = plan_with_tuning(&wide, &h100, tuning(64)).unwrap_err();
        assert!(e.to_string().contains("head dims up to 128"), "{e}");
        let e = plan_with_tuning(&AttentionProblem::new(1, 2, 256, 128), &h100, tuning(32))
            .unwrap_err();
        assert!(e.to_string().contains("head dims past 128"), "{e}");
    }

    proptest::proptest! {
        /// Any dense problem either plans or is refused with a reason; a plan's launches cover
        /// their rows and units (grid-stride past 2³¹ − 1; one CTA per SM without causal
        /// masking), fit the device's shared memory, and its workspace holds D and the
        /// accumulator for every padded row, with no counters.
        #[test]
        fn plans_cover_their_work_and_fit_the_device(
            batch in 1usize..5000,
            heads_kv in 1usize..9,
            group in 1usize..9,
            seq_q in 0usize..100_000,
            seq_k in 0usize..100_000,
            d in proptest::sample::select(vec![32usize, 64, 96, 128, 160, 192, 256]),
            causal in proptest::bool::ANY,
        ) {
            let p = AttentionProblem::new(batch, heads_kv * group, seq_q, d)
                .with_kv(heads_kv, seq_k)
                .with_causal(causal);
            let dev = DeviceInfo::synthetic_h100();
            let Ok(plan) = PersistentHopper.plan_backward(&p, &dev) else {
                proptest::prop_assert!(d > MAX_HEAD_DIM);
                return Ok(());
            };
            let d = crate::hopper::build_head_dim(d);
            let heads_q = batch * heads_kv * group;
            let query_rows = default_query_rows(d, causal, false, false);
            let padded_rows = heads_q * seq_q.div_ceil(query_rows) * query_rows;
            let units = batch * heads_kv * seq_k.div_ceil(key_rows(d));
            let main = if causal { units } else { units.min(132) };
            // The convert: one CTA per accumulator query block (80 rows with 80-row steps, else 64).
            let convert = heads_q * seq_q.div_ceil(dq_slice_queries(query_rows));
            // The prepare: 4 warps a block, rows a warp as common/row_dot.cuh packs them.
            let rows_per_block = 4 * crate::backward::dot_rows_per_warp(d);
            let items = [padded_rows.div_ceil(rows_per_block), main, convert];
            for (launch, items) in plan.launches.iter().zip(items) {
                proptest::prop_assert_eq!(launch.grid.0 as usize, items.clamp(1, i32::MAX as usize));
                proptest::prop_assert!(launch.dynamic_smem_bytes <= dev.max_shared_memory_per_block_optin);
            }
            proptest::prop_assert_eq!(plan.workspace_f32, padded_rows * (d + 1));
            proptest::prop_assert_eq!(plan.workspace_counters, 0);
        }
    }
}
