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
//!
//! [`config`]: the kernel's variants and their environment overrides; [`heuristics`]: the default
//! rules where nothing overrides them; [`smem`]: tile geometry, shared memory and workspace sizes.
//! This module checks a problem and builds its plan.

use flashcore_core::plan::{
    Attention, Capabilities, HeadDims, KernelLaunch, LaunchPlan, Swizzle, TensorMapSpec,
    TransposedV,
};
use flashcore_core::problem::AttentionProblem;
use flashcore_core::ModeSupport;
use flashcore_core::{DeviceInfo, Unsupported};

use crate::env::{Env, Overridable};

pub mod config;
pub mod heuristics;
pub mod smem;
#[cfg(test)]
mod tests;

pub use config::*;
pub use heuristics::*;
pub use smem::*;

/// The FA3-style Hopper kernel.
pub struct PersistentHopper;

const NAME: &str = "persistent-hopper";
const SOURCE: &str = "gen5_persistent_hopper.cu";
const ENTRY: &str = "attention_persistent_hopper";
/// The timeline's printer ([`HopperConfig::trace`]), compiled in traced builds only.
const TRACE_PRINT_ENTRY: &str = "attention_persistent_hopper_trace_print";
/// V's transposed copy for the e4m3 build ([`PersistentHopper::plan_e4m3`]).
const VT_SOURCE: &str = "gen5_hopper_vt.cu";
const VT_ENTRY: &str = "transpose_v_e4m3";
const VT_THREADS: u32 = 256;
/// The e4m3 build's head dim (at 256 its registers spilled).
pub const E4M3_HEAD_DIM: usize = 128;

/// The problem's modes without e4m3 storage, which changes the element type only: a dense problem
/// with e4m3 tensors runs the dense build (`FC_HOPPER_MODES` is for the modes that move rows).
fn storage_modes(problem: &AttentionProblem) -> flashcore_core::Modes {
    flashcore_core::Modes {
        kv_fp8: None,
        q_fp8: false,
        ..problem.modes.clone()
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
        // Every multiple of 8 up to 256, in builds of 32 (the narrow one), 64, 128, 192 and 256
        // columns (smem.rs).
        // V may have its own head dim (FC_HEAD_DIM_V: whole boxes, at most the build's).
        // Past 256 (to 512) only decode-shaped problems, on the decode kernel (decode.rs).
        Capabilities::all_features(
            HeadDims::Range {
                min: 8,
                max: crate::decode::MAX_HEAD_DIM,
                multiple_of: 8,
            },
            (9, 0),
        )
        // e4m3 caches: the decode kernel in front of it reads them (decode.rs takes every one).
        // e4m3 Q, K and V: its own e4m3 build (dense problems at D = 128, `plan_e4m3`).
        .with_modes(ModeSupport {
            kv_fp8: true,
            q_fp8: true,
            ..ModeSupport::ALL
        })
        .with_distinct_head_dim_v()
        .with_decode_only(
            crate::decode::PERSISTENT_MAX_HEAD_DIM,
            crate::decode::Q_TILE_ROWS,
        )
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
        if problem.modes.q_fp8 {
            let cfg = HopperConfig::from_env().map_err(|e| Unsupported::new(NAME, e))?;
            return self.plan_e4m3(&cfg, problem, device);
        }
        crate::decode::or_persistent(
            NAME,
            crate::decode::PERSISTENT_MAX_HEAD_DIM,
            problem,
            device,
            || {
                let cfg = HopperConfig::from_env().map_err(|e| Unsupported::new(NAME, e))?;
                self.plan_with(&cfg, problem, device)
            },
        )
    }
}

impl PersistentHopper {
    /// [`Attention::plan`] with an explicit configuration instead of the environment's (the
    /// checks on device and scale are `plan`'s).
    ///
    /// A batch-invariant problem whose sequences may differ in length (varlen queries, per-sequence
    /// keys), where its longest lengths do not take the key-split warpgroups
    /// ([`key_split_shaped`]) while shorter ones may, runs in two launches: the key-split build
    /// takes the sequences it fits (`FC_SEQ_KEY_SPLIT_ROUTE=1`, the bounds in
    /// `FC_SEQ_KEY_SPLIT_ROWS` / `_KEYS`, its q tiles bounded by them), the other build the rest
    /// (`=2`), so that each sequence is summed as it would be alone.
    pub fn plan_with(
        &self,
        cfg: &HopperConfig,
        problem: &AttentionProblem,
        device: &DeviceInfo,
    ) -> Result<LaunchPlan, Unsupported> {
        let sm_count = device.sm_count as usize;
        let (rows, keys) = (key_split_max_rows(problem.heads_q), KEY_SPLIT_SEQ_KEYS);
        // The longest lengths a key-split sequence of this batch can have: each bounded where the
        // batch's sequences have lengths of their own.
        let varied_q = problem.modes.packed_q.is_some();
        let varied_k = problem.modes.per_sequence_k();
        let short_q = if varied_q {
            problem.seq_q.min(rows)
        } else {
            problem.seq_q
        };
        let short_k = if varied_k {
            problem.seq_k.min(keys)
        } else {
            problem.seq_k
        };
        let routes = problem.batch_invariant
            && cfg.wg_key_split.is_none()
            && !key_split_shaped(problem.seq_q, problem.seq_k, problem.heads_q)
            && short_q > 0
            && key_split_shaped(short_q, short_k, problem.heads_q);
        if !routes {
            return self.plan_one(cfg, problem, device);
        }
        let short = AttentionProblem {
            seq_q: short_q,
            seq_k: short_k,
            ..problem.clone()
        };
        if !cfg.for_problem(&short, sm_count).key_split() {
            // (A configuration without the key-split build, e.g. forced ring or epilogue
            // variants: no sequence takes it, alone or here.)
            return self.plan_one(cfg, problem, device);
        }
        let mut short_plan = self.plan_one(cfg, &short, device)?;
        let mut plan = self.plan_one(cfg, problem, device)?;
        let route = |l: &mut KernelLaunch, which: &str| {
            l.defines.extend([
                ("FC_SEQ_KEY_SPLIT_ROUTE".to_string(), which.to_string()),
                ("FC_SEQ_KEY_SPLIT_ROWS".to_string(), rows.to_string()),
                ("FC_SEQ_KEY_SPLIT_KEYS".to_string(), keys.to_string()),
            ])
        };
        short_plan.launches.iter_mut().for_each(|l| route(l, "1"));
        plan.launches.iter_mut().for_each(|l| route(l, "2"));
        // The short launch is static and unsplit: the workspace is the other's.
        short_plan.launches.append(&mut plan.launches);
        plan.launches = short_plan.launches;
        Ok(plan)
    }

    /// An e4m3 forward (`Modes::q_fp8`): V's transposed copy (`gen5_hopper_vt.cu`, into the
    /// workspace), then the e4m3 build (`FC_HOPPER_E4M3`) reading it. Dense problems at head dim
    /// 128, one head dim for Q, K and V; the rest is refused with the reason.
    pub fn plan_e4m3(
        &self,
        cfg: &HopperConfig,
        problem: &AttentionProblem,
        device: &DeviceInfo,
    ) -> Result<LaunchPlan, Unsupported> {
        if !storage_modes(problem).is_dense() {
            return Err(Unsupported::new(
                NAME,
                "e4m3 Q, K and V: dense problems only (no varlen, KV cache, pages, windows, \
                 softcap, ALiBi or mm_prefix yet)",
            ));
        }
        if problem.head_dim != E4M3_HEAD_DIM || problem.has_distinct_head_dim_v() {
            return Err(Unsupported::new(
                NAME,
                format!(
                    "e4m3 Q, K and V: head_dim {E4M3_HEAD_DIM} only (one head dim for Q, K and \
                     V), got {} / {}",
                    problem.head_dim,
                    problem.head_dim_v()
                ),
            ));
        }
        let dv = problem.head_dim_v();
        let too_large = || {
            Unsupported::new(
                NAME,
                "e4m3 Q, K and V: V's transposed copy does not fit the workspace's addressing",
            )
        };
        let vt =
            vt_bytes(problem.batch, problem.heads_kv, dv, problem.seq_k).ok_or_else(too_large)?;
        let keys = problem.seq_k.next_multiple_of(VT_KEY_PAD);
        let (heads_kv, batch) = (
            u32::try_from(problem.heads_kv)
                .ok()
                .filter(|&h| h <= 65_535),
            u32::try_from(problem.batch).ok().filter(|&b| b <= 65_535),
        );
        let (Some(heads_kv), Some(batch)) = (heads_kv, batch) else {
            return Err(Unsupported::new(
                NAME,
                "e4m3 Q, K and V: the transpose's grid takes at most 65535 KV heads and sequences",
            ));
        };
        let tiles_x = u32::try_from(keys / VT_TILE_KEYS).map_err(|_| too_large())?;
        let mut plan = self.plan_one(cfg, problem, device)?;
        for launch in &mut plan.launches {
            launch
                .defines
                .push(("FC_HOPPER_E4M3".to_string(), "1".to_string()));
            if let Some(spec) = &mut launch.tensor_maps {
                spec.box_cols = 2 * BOX_COLS as u32; // 128 bytes
                spec.transposed_v = Some(TransposedV {
                    offset_bytes: VT_OFFSET_BYTES as u64,
                    keys,
                    box_keys: BLOCK_N as u32,
                });
            }
        }
        // The copy after the schedule's counters (the plan's own words, kept zeroed).
        let words = (VT_OFFSET_BYTES + vt).div_ceil(4);
        plan.workspace_f32 = plan.workspace_f32.max(words);
        plan.launches.insert(
            0,
            KernelLaunch {
                tensor_maps: None,
                programmatic_launch: false,
                ..KernelLaunch::persistent(
                    VT_SOURCE,
                    VT_ENTRY,
                    vec![
                        ("FC_HEAD_DIM".to_string(), dv.to_string()),
                        ("FC_VT_OFFSET".to_string(), VT_OFFSET_BYTES.to_string()),
                    ],
                    tiles_x,
                    VT_THREADS,
                    0,
                )
            },
        );
        plan.launches[0].grid = (tiles_x, heads_kv, batch);
        Ok(plan)
    }

    /// One launch (two with the trace's printer) of `cfg` resolved for `problem`.
    fn plan_one(
        &self,
        cfg: &HopperConfig,
        problem: &AttentionProblem,
        device: &DeviceInfo,
    ) -> Result<LaunchPlan, Unsupported> {
        let cfg = &cfg.for_problem(problem, device.sm_count as usize);
        // The build's head dim: the problem's padded up to whole 64-column boxes, or the narrow 32.
        let d = cfg.build_head_dim(problem.head_dim);
        // V's and O's (FC_HEAD_DIM_V where V has a head dim of its own).
        let dv = head_dim_v_build(problem.head_dim, problem.head_dim_v(), d)
            .map_err(|e| Unsupported::new(NAME, e))?;
        // e4m3 Q, K and V are bytes (V's stage then holds its transposed tile, as many bytes).
        let elem_bytes = if problem.modes.q_fp8 {
            1
        } else {
            problem.dtype.size_bytes()
        };
        let smem = cfg.smem_bytes_v(d, dv, elem_bytes);
        let limit = device.max_shared_memory_per_block_optin as usize;
        if smem > limit {
            return Err(Unsupported::new(
                NAME,
                format!(
                    "needs {smem} bytes of shared memory per block ({} x Q {} + {} x K/V {} + barriers + \
                     {SMEM_ALIGN_SLACK} alignment slack), device allows {limit}",
                    cfg.q_stages,
                    cfg.block_m() * d * elem_bytes,
                    cfg.stages,
                    cfg.block_n * (d + dv) * elem_bytes,
                ),
            ));
        }

        let items = cfg.items(problem);
        // Split-KV for small problems: a work unit is (item, key range). The longest item (the
        // last q tile, also under the bottom-right causal mask) has all the key tiles.
        let max_key_tiles = problem.seq_k.div_ceil(cfg.block_n);
        let modes = !storage_modes(problem).is_dense();
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
        let mut defines = cfg.defines(problem.head_dim, l2_section);
        if problem.has_distinct_head_dim_v() {
            defines.push(("FC_HEAD_DIM_V".to_string(), dv.to_string()));
        }
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
        // early: one round of units (commit 2883df6: the mission shape -5 %; the ladder's
        // many-round rows, whose CTAs start only as the previous call's leave, moved within their
        // noise).
        let one_round = units * cfg.ctas_per_item() <= device.sm_count as usize;
        if cfg.early_first_unit(dynamic, modes) && cfg.prefetch.unwrap_or(programmatic && one_round)
        {
            defines.push(("FC_HOPPER_PREFETCH".to_string(), "1".to_string()));
        }
        if modes {
            defines.push(("FC_HOPPER_MODES".to_string(), "1".to_string()));
            // (The spread loop keeps its ring position modulo 2^16: power-of-two rings only, so
            // FLASHCORE_HOPPER_STAGES=3 runs small pages on warp 0 alone.)
            // Past D = 128 the spread loop spills (48-160 bytes): warp 0 issues the boxes alone.
            if spreads_page_boxes(problem, cfg.block_n)
                && cfg.stages.is_power_of_two()
                && !cfg.key_split()
                && d <= 128
            {
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
            tensor_maps: Some(TensorMapSpec {
                q_box_rows: cfg.block_m() as u32,
                kv_box_rows: cfg.block_n as u32,
                // A row of the narrow build is one 64-byte box.
                box_cols: d.min(BOX_COLS) as u32,
                swizzle: if d < BOX_COLS {
                    Swizzle::B64
                } else {
                    Swizzle::B128
                },
                transposed_v: None,
            }),
            programmatic_launch: programmatic,
            ..KernelLaunch::persistent(SOURCE, ENTRY, defines, grid_x, cfg.threads(), smem as u32)
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
