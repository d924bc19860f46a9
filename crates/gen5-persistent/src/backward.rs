//! The portable path's backward pass (`kernels/gen5_portable_bwd.cu` and
//! `gen5_portable_bwd_wide.cu`, mma.sync, sm_80+), in two schedules:
//! - [`PersistentPortable`] ("persistent-portable"): D = rowsum(dO ∘ O), then dK/dV per key
//!   tile, then dQ per 64-row query tile. Deterministic: no atomics, each gradient element summed
//!   by one warp in a fixed order. Two tilings ([`Tiling`]): 32-row warp tiles where shared
//!   memory holds them (both passes at head_dim <= 64, the dK/dV pass above) and 16-row ones.
//! - [`PortableAtomicBackward`] ("persistent-portable-atomic"): FlashAttention-2's schedule on
//!   the 32-row tiles, dQ added by the dK/dV pass into an f32 workspace with 16-byte reductions,
//!   then rounded (five products per tile pair instead of seven; the last bits of dQ vary from run
//!   to run).
//!
//! Both take every head dim that is a multiple of 8 up to 256: builds at the multiples of 32
//! ([`HEAD_DIMS`]), the others padded up to the next (`FC_BWD_PADDED_HEAD`,
//! [`build_head_dim`]); and sliding windows, softcap and ALiBi, on dense storage or varlen, in
//! the same tiles' `FC_BWD_MODES` (and `FC_BWD_VARLEN`) builds; varlen at build head dims <= 128
//! on the 16-row kernels, and not in the atomic schedule there.
//!
//! Design and measurements: `docs/generations/gen5-portable-bwd.md`.

use flashcore_core::backward::AttentionBackward;
use flashcore_core::launch::tiles;
use flashcore_core::{
    AttentionProblem, Capabilities, DeviceInfo, HeadDims, KernelLaunch, LaunchPlan, Unsupported,
};

use crate::env::{parse_number, Env};
use crate::PersistentPortable;

pub const SOURCE: &str = "gen5_portable_bwd.cu";
/// Head dims the backward is built for (FC_HEAD_DIM): FlashAttention-2's, every multiple of 32 up
/// to 256 (the swizzled tiles take rows of 4k 16-byte chunks).
pub const HEAD_DIMS: &[usize] = &[32, 64, 96, 128, 160, 192, 224, 256];
/// The largest head dim taken.
pub const MAX_HEAD_DIM: usize = 256;

/// The build a head dim runs in: the first of [`HEAD_DIMS`] at or above it. Below the build its
/// columns are padded: zero-filled on load, not stored (`FC_BWD_PADDED_HEAD`,
/// `kernels/common/padded_head.cuh`).
pub fn build_head_dim(head_dim: usize) -> Option<usize> {
    HEAD_DIMS.iter().copied().find(|&d| d >= head_dim)
}

const WARPS: u32 = 4;
/// Head dims up to which the 16-row dK/dV kernel is built: above, a warp's 16 keys' dK and dV
/// (2·head_dim f32 registers a lane) do not fit its registers.
pub const NARROW_DKDV_MAX_HEAD_DIM: usize = 128;
/// The 16-row kernels: keys per dK/dV block and queries per dQ block (16 per warp).
pub const KEY_TILE_ROWS: usize = 64;
pub const QUERY_TILE_ROWS: usize = 64;

/// Query rows per step of the 16-row dK/dV kernel (`dkdv_query_rows`).
pub fn dkdv_query_rows(head_dim: usize) -> usize {
    if head_dim <= 64 {
        64
    } else {
        32
    }
}

/// `dkdv_smem_bytes` of the 16-row dK/dV kernel: K and V tiles, two (Q, dO) buffers, two (LSE, D)
/// row vectors.
pub fn dkdv_smem_bytes(head_dim: usize) -> usize {
    let rows = dkdv_query_rows(head_dim);
    2 * KEY_TILE_ROWS * head_dim * 2 + 4 * rows * head_dim * 2 + 4 * rows * 4
}

/// Keys per tile of the 16-row dQ kernel (`dq_key_rows`): 64, 32 above head_dim 128 (where a
/// warp's dQ takes head_dim / 2 registers and the K/V buffers would pass sm_80's shared memory).
pub fn dq_key_rows(head_dim: usize) -> usize {
    if head_dim <= 128 {
        64
    } else {
        32
    }
}

/// `dq_smem_bytes` of the 16-row dQ kernel: Q and dO tiles, two (K, V) buffers.
pub fn dq_smem_bytes(head_dim: usize) -> usize {
    2 * QUERY_TILE_ROWS * head_dim * 2 + 4 * dq_key_rows(head_dim) * head_dim * 2
}

pub const WIDE_SOURCE: &str = "gen5_portable_bwd_wide.cu";
/// Query rows per block of the wide dQ kernel (head_dim <= 64; four 32-row blocks).
pub const WIDE_QUERY_TILE_ROWS: usize = 128;

/// Keys per block of the wide dK/dV kernel (`dkdv::key_rows`): four 32-key blocks up to head_dim
/// 128, two above (FlashAttention-2's 64-key tiles there: a warp's share of 128 keys' dK and dV
/// would pass 128 registers).
pub fn wide_key_rows(head_dim: usize) -> usize {
    if head_dim <= 128 {
        128
    } else {
        64
    }
}

/// Whether head_dim takes the wide kernels' register path: P and dS stay in registers, and the dQ
/// pass is wide too (32 keys' or rows' gradients take at most 64 registers).
fn wide_in_registers(head_dim: usize) -> bool {
    head_dim <= 64
}

/// The wide dK/dV kernel's layout (`gen5_portable_bwd_wide.cu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WideLayout {
    /// 4 warps of 32 keys, Pᵀ and dSᵀ kept in registers ([`wide_in_registers`]).
    Registers,
    /// 8 warps, Pᵀ and dSᵀ through shared memory: above head_dim 64, and the atomic schedule's
    /// padded 64 build (`FC_BWD_TWO_PHASE`), where the register path, at 253-255 registers
    /// already, spilled 4-52 bytes with a padded head dim's column bounds.
    TwoPhase,
}

impl WideLayout {
    /// The layout of a build's `head_dim`, `padded` or not, in the atomic schedule or not.
    pub fn of(head_dim: usize, padded: bool, atomic_dq: bool) -> Self {
        if wide_in_registers(head_dim) && !(head_dim == 64 && padded && atomic_dq) {
            WideLayout::Registers
        } else {
            WideLayout::TwoPhase
        }
    }

    /// [`WideLayout::of`] for a problem with or without `score_modes` (a window, softcap or
    /// ALiBi): those take the two-phase layout at every head dim, since on the register path
    /// (P, dP, dK and dV of 32 keys in registers, already at 253-255 registers) their modes build
    /// spilled 12-476 bytes.
    pub fn for_problem(head_dim: usize, padded: bool, atomic_dq: bool, score_modes: bool) -> Self {
        if score_modes {
            WideLayout::TwoPhase
        } else {
            WideLayout::of(head_dim, padded, atomic_dq)
        }
    }

    /// Warps a block: one a 32-key block on the register path; two a key block (its query halves,
    /// then its column halves) in the two-phase layout.
    fn warps(self) -> u32 {
        match self {
            WideLayout::Registers => 4,
            WideLayout::TwoPhase => 8,
        }
    }
}

/// Blocks of the wide dK/dV kernel an SM holds: two on the register path (its launch bounds), one
/// above (its shared memory).
fn wide_blocks_per_sm(head_dim: usize) -> usize {
    if wide_in_registers(head_dim) {
        2
    } else {
        1
    }
}

/// `dkdv::smem_bytes` of the wide kernel with `queries` rows a step ([`step_queries`]): K and V,
/// two (Q, dO) buffers and two (LSE, D) row vectors of the step's queries, plus the Pᵀ and dSᵀ
/// tiles ([keys][queries]) in the two-phase layout. With atomic dQ, two 16-byte step slots (each
/// step's accumulator block) and, on the register path, a dSᵀ tile ([128 keys][step queries]).
pub fn wide_dkdv_smem_bytes(
    head_dim: usize,
    layout: WideLayout,
    atomic_dq: bool,
    queries: usize,
) -> usize {
    let slots = if atomic_dq { 2 * 16 } else { 0 };
    let keys = wide_key_rows(head_dim);
    let shared = 2 * keys * head_dim * 2 + 4 * queries * head_dim * 2 + 2 * queries * 8 + slots;
    match layout {
        WideLayout::Registers => shared + if atomic_dq { keys * queries * 2 } else { 0 },
        WideLayout::TwoPhase => shared + 2 * keys * queries * 2,
    }
}

/// `dq::smem_bytes` of the wide dQ kernel (head_dim <= 64): Q and dO, two (K, V) buffers of 64
/// keys, the rows' (LSE, D).
pub fn wide_dq_smem_bytes(head_dim: usize) -> usize {
    let rows = WIDE_QUERY_TILE_ROWS;
    2 * rows * head_dim * 2 + 4 * 64 * head_dim * 2 + rows * 8
}

/// Which warp tiles the deterministic schedule uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tiling {
    /// 32-row warp tiles (`gen5_portable_bwd_wide.cu`): at most two thirds of the shared-memory
    /// reads per product. Both passes at head_dim <= 64; the dK/dV pass above (its dQ twin there
    /// measured slower than the 16-row dQ kernel).
    Wide,
    /// 16-row warp tiles (`gen5_portable_bwd.cu`), up to head_dim 128.
    Narrow,
}

impl Tiling {
    /// `forced` is `FLASHCORE_PORTABLE_BWD_TILES` = `wide` | `narrow` (an A/B switch). Unset: the
    /// wide tiles wherever the device's shared memory holds them, and always above head_dim 128,
    /// where there is no 16-row dK/dV kernel. `head_dim` is the build's.
    fn choose(
        head_dim: usize,
        device: &DeviceInfo,
        forced: Option<String>,
    ) -> Result<Self, String> {
        match forced.as_deref() {
            Some("wide") => Ok(Tiling::Wide),
            Some("narrow") if head_dim > NARROW_DKDV_MAX_HEAD_DIM => Err(format!(
                "FLASHCORE_PORTABLE_BWD_TILES=narrow: the 16-row dK/dV kernel is built up to \
                 head_dim {NARROW_DKDV_MAX_HEAD_DIM}, not {head_dim}"
            )),
            Some("narrow") => Ok(Tiling::Narrow),
            Some(other) => Err(format!(
                "FLASHCORE_PORTABLE_BWD_TILES={other}: expected `wide` or `narrow`"
            )),
            None if head_dim > NARROW_DKDV_MAX_HEAD_DIM => Ok(Tiling::Wide),
            None => {
                let limit = device.max_shared_memory_per_block_optin as usize;
                // (The steps the kernels take below sm_90: 32 queries on the register path.)
                let layout = WideLayout::of(head_dim, false, false);
                let queries = if wide_in_registers(head_dim) { 32 } else { 64 };
                let mut need = wide_dkdv_smem_bytes(head_dim, layout, false, queries);
                if wide_in_registers(head_dim) {
                    need = need.max(wide_dq_smem_bytes(head_dim));
                }
                Ok(if need <= limit {
                    Tiling::Wide
                } else {
                    Tiling::Narrow
                })
            }
        }
    }
}

/// Query rows a warp of `bwd_portable_dot_do_o` takes at once (`dot_rows_per_warp`): one 16-byte
/// chunk a lane, head_dim / 8 lanes a row rounded up to a power of two (one row a warp above
/// head_dim 128).
pub fn dot_rows_per_warp(head_dim: usize) -> usize {
    32 / (head_dim / 8).next_power_of_two().max(4)
}

/// `FLASHCORE_BWD_SHORT_ROW_KEYS` (0-256), for A/B runs of both fast backwards: the most keys a
/// query row may see and still take D = rowsum(P ∘ dP) in the first launch instead of
/// rowsum(dO ∘ O) (`kernels/common/short_row_delta.cuh`; 0: no row does). Unset: the header's 32
/// and no define.
pub(crate) fn short_row_keys_define(env: Env) -> Result<Option<(String, String)>, String> {
    const VAR: &str = "FLASHCORE_BWD_SHORT_ROW_KEYS";
    let keys = env.number(
        VAR,
        |n| n <= 256,
        |v| format!("{VAR}={v:?}: expected 0 to 256"),
    )?;
    Ok(keys.map(|n| ("FC_BWD_SHORT_ROW_KEYS".to_string(), n.to_string())))
}

/// The portable backward with dQ accumulated in f32 by reductions (FlashAttention-2's schedule).
#[derive(Clone, Copy, Debug, Default)]
pub struct PortableAtomicBackward;

/// Query rows per step of the wide dK/dV kernel, which is also the atomic schedule's dQ
/// accumulator block (`PortableDqAccumulator`), for a build's `head_dim` in `layout`. `forced` is
/// `FLASHCORE_PORTABLE_BWD_STEP_QUERIES` = `32` | `64`.
/// - On the register path: 64 (`FC_BWD_STEP64`: each warp's products in two
///   32-query halves, half the barriers and step bookkeeping per query) or 32. Unset: 64 on sm_90
///   and later, where it measured faster at every D = 64 ladder row for both schedules (H100,
///   2026-11-26, commit 31e7ea5: atomic 4-10 %, deterministic 3-5.5 %), 32 below (not measured
///   there; on the A100 two blocks of the atomic schedule's 82 976 bytes would no longer fit an SM).
/// - In the two-phase layout up to 128: 64; the switch changes nothing.
/// - Above 128: 64, or 32 (`FC_BWD_STEP32`) where two 64-row (Q, dO) buffers do not fit the
///   device's shared memory (sm_80 at 224 and 256, 99 KiB devices at 160). Forced, either, and a
///   step that does not fit is refused by the plan.
fn step_queries(
    head_dim: usize,
    layout: WideLayout,
    device: &DeviceInfo,
    atomic_dq: bool,
    forced: Option<&str>,
) -> Result<usize, String> {
    let forced = match forced.map(str::trim) {
        None => None,
        Some("32") => Some(32),
        Some("64") => Some(64),
        Some(other) => {
            return Err(format!(
                "FLASHCORE_PORTABLE_BWD_STEP_QUERIES={other:?}: expected 32 or 64"
            ))
        }
    };
    Ok(if layout == WideLayout::Registers {
        forced.unwrap_or(if device.compute_capability.0 >= 9 {
            64
        } else {
            32
        })
    } else if head_dim <= 128 {
        64
    } else {
        let limit = device.max_shared_memory_per_block_optin as usize;
        forced.unwrap_or(
            if wide_dkdv_smem_bytes(head_dim, layout, atomic_dq, 64) <= limit {
                64
            } else {
                32
            },
        )
    })
}

/// Words of the atomic schedule's workspace for a build's `head_dim` and `block_rows` (the step):
/// D (`rows` words, rounded up to 4 so the accumulator starts 16-byte aligned), then the f32 dQ
/// accumulator over whole blocks of query rows, the build's columns wide.
fn atomic_dq_workspace(p: &AttentionProblem, head_dim: usize, block_rows: usize) -> Option<usize> {
    let padded_rows = p
        .seq_q
        .next_multiple_of(block_rows)
        .checked_mul(p.batch * p.heads_q)?;
    let rows = p.batch * p.heads_q * p.seq_q;
    padded_rows
        .checked_mul(head_dim)?
        .checked_add(rows.next_multiple_of(4))
}

/// Both schedules' launches; the workspace holds D (`batch · heads_q · seq_q` words) and, with
/// atomic dQ, the f32 dQ accumulator after it ([`atomic_dq_workspace`]), both written whole by
/// the first launch before the others read them: no counters.
fn plan(
    name: &'static str,
    caps: Capabilities,
    problem: &AttentionProblem,
    device: &DeviceInfo,
    atomic_dq: bool,
) -> Result<LaunchPlan, Unsupported> {
    plan_with(
        name,
        caps,
        problem,
        device,
        atomic_dq,
        &Overrides::from_env(),
    )
}

/// The backward's A/B switches, each an environment variable read by [`plan`].
#[derive(Clone, Debug, Default)]
struct Overrides {
    /// `FLASHCORE_PORTABLE_BWD_TILES` ([`Tiling::choose`]).
    tiles: Option<String>,
    /// `FLASHCORE_PORTABLE_BWD_SECTION_HEADS` ([`section_heads`]).
    section_heads: Option<String>,
    /// `FLASHCORE_PORTABLE_BWD_STEP_QUERIES` ([`step_queries`]).
    step_queries: Option<String>,
}

impl Overrides {
    fn from_env() -> Self {
        let env = Env::process();
        Overrides {
            tiles: env.get("FLASHCORE_PORTABLE_BWD_TILES"),
            section_heads: env.get("FLASHCORE_PORTABLE_BWD_SECTION_HEADS"),
            step_queries: env.get("FLASHCORE_PORTABLE_BWD_STEP_QUERIES"),
        }
    }
}

/// (batch, KV head) pairs per L2 section of the wide dK/dV pass (`FC_BWD_SECTION_HEADS`, key_item
/// in the kernel): about one wave of blocks, so the blocks running at once share a few heads' Q,
/// dO and dQ accumulator rows in L2. `forced` is
/// `FLASHCORE_PORTABLE_BWD_SECTION_HEADS` (an A/B switch; 0: no sections, every head's first key
/// tile first). `None`: no sections. `p.head_dim`'s build sets the key tile.
fn section_heads(
    p: &AttentionProblem,
    device: &DeviceInfo,
    forced: Option<String>,
) -> Result<Option<usize>, String> {
    if let Some(v) = forced {
        return match parse_number(&v) {
            Some(0) => Ok(None),
            Some(n) if n <= 1 << 20 => Ok(Some(n)),
            _ => Err(format!(
                "FLASHCORE_PORTABLE_BWD_SECTION_HEADS={v:?}: expected 0 ..= {}",
                1 << 20
            )),
        };
    }
    let d = build_head_dim(p.head_dim).unwrap_or(p.head_dim);
    let wave = device.sm_count as usize * wide_blocks_per_sm(d);
    let key_tiles = tiles(p.seq_k, wide_key_rows(d)).max(1);
    Ok(Some((wave / key_tiles).max(1)))
}

/// [`plan`] with the environment's switches passed in.
fn plan_with(
    name: &'static str,
    caps: Capabilities,
    problem: &AttentionProblem,
    device: &DeviceInfo,
    atomic_dq: bool,
    overrides: &Overrides,
) -> Result<LaunchPlan, Unsupported> {
    caps.require_head_dim(name, problem.head_dim)?;
    // The build's head dim; the problem's columns past its own are padded.
    let d = build_head_dim(problem.head_dim).ok_or_else(|| {
        Unsupported::new(name, format!("head_dim {} is past 256", problem.head_dim))
    })?;
    let padded = d != problem.head_dim;
    let varlen = flashcore_core::backward::is_varlen(problem);
    if atomic_dq && varlen && d <= NARROW_DKDV_MAX_HEAD_DIM {
        return Err(Unsupported::new(
            name,
            format!(
                "varlen at head_dim {} (a {d} build): its varlen build of the 32-row tiles passes \
                 the registers (the sequence's offsets beside the modes' state spilled 12-128 \
                 bytes); persistent-portable (deterministic) takes it",
                problem.head_dim
            ),
        ));
    }
    if atomic_dq && !problem.modes.is_dense() && (96..=128).contains(&d) {
        // Its two-phase dK/dV build at these dims runs at 255 registers with the dQ reductions'
        // state, and the window's, softcap's and ALiBi's beside it spilled 4-40 bytes on sm_80 and
        // sm_90a whichever of the walk's schedules it took.
        return Err(Unsupported::new(
            name,
            format!(
                "windows, softcap and ALiBi at head_dim {} (a {d} build): its modes build \
                 passes the registers; persistent-portable (deterministic) takes them",
                problem.head_dim
            ),
        ));
    }
    // The atomic schedule exists on the wide tiles only (its 16-row version lost 1.5-1.9x to its
    // scalar atomics, commit acfed8e).
    let tiling = if atomic_dq {
        Tiling::Wide
    } else if varlen && d <= NARROW_DKDV_MAX_HEAD_DIM {
        // The 32-row tiles' varlen builds spill at 64 and 128 (the sequence's offsets, loaded
        // values where the dense builds read parameters, beside 255 registers); the 16-row
        // kernels hold them.
        Tiling::Narrow
    } else {
        Tiling::choose(d, device, overrides.tiles.clone()).map_err(|e| Unsupported::new(name, e))?
    };
    let layout = WideLayout::for_problem(d, padded, atomic_dq, !problem.modes.is_dense());
    let step = step_queries(
        d,
        layout,
        device,
        atomic_dq,
        overrides.step_queries.as_deref(),
    )
    .map_err(|e| Unsupported::new(name, e))?;
    let step64 = layout == WideLayout::Registers && step == 64;
    let step32 = d > 128 && step == 32;
    let wide_dq = tiling == Tiling::Wide && wide_in_registers(d);
    let smem = [
        match tiling {
            Tiling::Wide => wide_dkdv_smem_bytes(d, layout, atomic_dq, step),
            Tiling::Narrow => dkdv_smem_bytes(d),
        },
        if atomic_dq {
            0
        } else if wide_dq {
            wide_dq_smem_bytes(d)
        } else {
            dq_smem_bytes(d)
        },
    ];
    let holding = [
        format!(" (the dK/dV pass at head_dim {d}, {step} queries a step)"),
        format!(" (the dQ pass at head_dim {d})"),
    ];
    for (need, holding) in smem.iter().zip(&holding) {
        device.require_shared_memory(name, *need, true, holding)?;
    }
    let mut defines = vec![("FC_HEAD_DIM".to_string(), d.to_string())];
    // Windows, softcap and ALiBi: the same tiles, in their modes builds
    // (`kernels/common/backward_scores.cuh`).
    defines.extend(flashcore_core::backward::backward_mode_defines(problem));
    if padded {
        defines.push(("FC_BWD_PADDED_HEAD".to_string(), "1".to_string()));
    }
    if tiling == Tiling::Wide && layout == WideLayout::TwoPhase && wide_in_registers(d) {
        defines.push(("FC_BWD_TWO_PHASE".to_string(), "1".to_string()));
    }
    if atomic_dq {
        defines.push(("FC_BWD_ATOMIC_DQ".to_string(), "1".to_string()));
        // Above head_dim 64, L2 sections, and each key tile's query walk starting at its own
        // tile so the section's dQ reductions spread over the rows: 3-14 % faster (H100, commit
        // acfed8e, two runs). At 64 and below both measured slower.
        if !wide_in_registers(d) {
            let sections = section_heads(problem, device, overrides.section_heads.clone())
                .map_err(|e| Unsupported::new(name, e))?;
            if let Some(heads) = sections {
                defines.push(("FC_BWD_SECTION_HEADS".to_string(), heads.to_string()));
                defines.push(("FC_BWD_ROTATE".to_string(), "1".to_string()));
            }
        }
    }
    if step64 {
        defines.push(("FC_BWD_STEP64".to_string(), "1".to_string()));
    }
    if step32 {
        defines.push(("FC_BWD_STEP32".to_string(), "1".to_string()));
    }
    defines.extend(short_row_keys_define(Env::process()).map_err(|e| Unsupported::new(name, e))?);
    let launch =
        |source: &'static str, entry: &'static str, warps: u32, items: usize, smem: usize| {
            KernelLaunch {
                defines: defines.clone(),
                dynamic_smem_bytes: smem as u32,
                ..KernelLaunch::per_item(source, entry, items, 32 * warps)
            }
        };
    let p = problem;
    let rows = p.batch * p.heads_q * p.seq_q;
    let dot_do_o = launch(
        SOURCE,
        "bwd_portable_dot_do_o",
        WARPS,
        tiles(rows, WARPS as usize * dot_rows_per_warp(d)),
        0,
    );
    let key_rows = wide_key_rows(d);
    let key_items = p.batch * p.heads_kv * tiles(p.seq_k, key_rows);
    if step64 && key_items > i32::MAX as usize {
        // Its sm_90 build counts the items in 32 bits (registers: see `ItemIndex`).
        return Err(Unsupported::new(
            name,
            format!(
                "{key_items} key tiles of {key_rows} (batch x KV heads x tiles) exceed 2^31 - 1"
            ),
        ));
    }
    let dk_dv = match tiling {
        Tiling::Wide => launch(
            WIDE_SOURCE,
            "bwd_portable_dk_dv_wide",
            layout.warps(),
            key_items,
            smem[0],
        ),
        Tiling::Narrow => launch(
            SOURCE,
            "bwd_portable_dk_dv",
            WARPS,
            p.batch * p.heads_kv * tiles(p.seq_k, KEY_TILE_ROWS),
            smem[0],
        ),
    };
    let query_items = p.batch * p.heads_q * tiles(p.seq_q, QUERY_TILE_ROWS);
    let (dq_launch, workspace) = if atomic_dq {
        let workspace = atomic_dq_workspace(p, d, step)
            .ok_or_else(|| Unsupported::new(name, "the dQ accumulator's size overflows usize"))?;
        // One float4 of the accumulator a thread.
        let float4s = (workspace - rows.next_multiple_of(4)) / 4;
        (
            launch(
                WIDE_SOURCE,
                "bwd_portable_dq_convert",
                WARPS,
                tiles(float4s, 32 * WARPS as usize),
                0,
            ),
            workspace,
        )
    } else if wide_dq {
        let items = p.batch * p.heads_q * tiles(p.seq_q, WIDE_QUERY_TILE_ROWS);
        let mut dq = launch(WIDE_SOURCE, "bwd_portable_dq_wide", WARPS, items, smem[1]);
        // The dQ pass is built in the register layout's half of the file (a modes problem's
        // dK/dV pass takes the two-phase one).
        dq.defines.retain(|(k, _)| k != "FC_BWD_TWO_PHASE");
        (dq, rows)
    } else {
        (
            launch(SOURCE, "bwd_portable_dq", WARPS, query_items, smem[1]),
            rows,
        )
    };
    Ok(LaunchPlan {
        launches: vec![dot_do_o, dk_dv, dq_launch],
        workspace_f32: workspace,
        workspace_counters: 0,
        num_splits: 1,
    })
}

/// Dense storage, with sliding windows (causal included), softcap and ALiBi.
fn capabilities() -> Capabilities {
    Capabilities::all_features(
        HeadDims::Range {
            min: 8,
            max: MAX_HEAD_DIM,
            multiple_of: 8,
        },
        (8, 0),
    )
    .with_modes(flashcore_core::backward::BACKWARD_MODES)
}

impl AttentionBackward for PersistentPortable {
    fn name(&self) -> &'static str {
        "persistent-portable"
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }

    fn plan_backward(
        &self,
        problem: &AttentionProblem,
        device: &DeviceInfo,
    ) -> Result<LaunchPlan, Unsupported> {
        plan(
            AttentionBackward::name(self),
            capabilities(),
            problem,
            device,
            false,
        )
    }
}

impl AttentionBackward for PortableAtomicBackward {
    fn name(&self) -> &'static str {
        "persistent-portable-atomic"
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
        plan(self.name(), capabilities(), problem, device, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy;

    #[test]
    fn narrow_plan_is_three_launches_sized_by_tiles() {
        let p = AttentionProblem::new(2, 8, 100, 128).with_kv(2, 300);
        let narrow = |p: &AttentionProblem| {
            plan_with(
                "persistent-portable",
                capabilities(),
                p,
                &DeviceInfo::synthetic_h100(),
                false,
                &Overrides {
                    tiles: Some("narrow".into()),
                    ..Overrides::default()
                },
            )
        };
        let plan = narrow(&p).unwrap();
        assert_eq!(
            plan.entries(),
            [
                "bwd_portable_dot_do_o",
                "bwd_portable_dk_dv",
                "bwd_portable_dq"
            ]
        );
        // D = 128: two rows a warp, four warps a block.
        assert_eq!(
            plan.launches[0].grid.0,
            (2 * 8 * 100usize).div_ceil(8) as u32
        );
        assert_eq!(plan.launches[1].grid.0, 2 * 2 * 5); // 300 keys: 5 tiles of 64
        assert_eq!(plan.launches[2].grid.0, 2 * 8 * 2); // 100 rows: 2 tiles of 64
        assert_eq!(plan.workspace_f32, 1600);
        // K, V (16 KiB each), 2 x (Q, dO) of 32 rows (8 KiB each), 4 x 32 floats.
        assert_eq!(plan.launches[1].dynamic_smem_bytes, 32768 + 32768 + 512);
        assert_eq!(plan.launches[2].dynamic_smem_bytes, 6 * 16384);
    }

    #[test]
    fn atomic_plan_reduces_dq_in_the_wide_dk_dv_pass() {
        let h100 = DeviceInfo::synthetic_h100();
        let p = AttentionProblem::new(2, 8, 100, 128).with_kv(2, 300);
        let atomic = PortableAtomicBackward.plan_backward(&p, &h100).unwrap();
        assert_eq!(
            atomic.entries(),
            [
                "bwd_portable_dot_do_o",
                "bwd_portable_dk_dv_wide",
                "bwd_portable_dq_convert"
            ]
        );
        assert!(atomic.launches[1..].iter().all(|l| l.source == WIDE_SOURCE));
        // D, then the accumulator over whole 64-row blocks: 100 rows pad to 128.
        assert_eq!(atomic.workspace_f32, 1600 + 2 * 8 * 128 * 128);
        // One float4 a thread, 128 threads a block.
        assert_eq!(
            atomic.launches[2].grid.0 as usize,
            (2 * 8 * 128 * 128usize / 4).div_ceil(128)
        );
        // Above head_dim 64 dSᵀ is in shared memory already: the deterministic plan's size and
        // the two step slots.
        assert_eq!(
            atomic.launches[1].dynamic_smem_bytes,
            2 * 32768 + 4 * 16384 + 2 * 16384 + 1024 + 32
        );
        assert!(atomic
            .launches
            .iter()
            .all(|l| l.defines.iter().any(|(k, _)| k == "FC_BWD_ATOMIC_DQ")));
        // At head_dim 64 and below on sm_90 the steps and blocks are 64 rows, and dSᵀ takes its
        // own [128][64] tile; below sm_90, 32.
        let d32 = AttentionProblem::new(1, 1, 1, 32);
        let plan = PortableAtomicBackward.plan_backward(&d32, &h100).unwrap();
        assert_eq!(
            plan.workspace_f32,
            4 + 64 * 32,
            "the accumulator starts 16-byte aligned"
        );
        assert_eq!(
            plan.launches[1].dynamic_smem_bytes as usize,
            wide_dkdv_smem_bytes(32, WideLayout::Registers, false, 64) + 128 * 64 * 2 + 32
        );
        let a100 = DeviceInfo {
            compute_capability: (8, 0),
            max_shared_memory_per_block_optin: 163 * 1024,
            ..h100.clone()
        };
        let plan = PortableAtomicBackward.plan_backward(&d32, &a100).unwrap();
        assert_eq!(plan.workspace_f32, 4 + 32 * 32);
        assert!(!plan.launches[1]
            .defines
            .iter()
            .any(|(k, _)| k == "FC_BWD_STEP64"));
        // No 16-row version: a device without the shared memory is told so.
        let e = PortableAtomicBackward
            .plan_backward(&p, &DeviceInfo::synthetic_sm86())
            .unwrap_err();
        assert!(e.to_string().contains("shared memory"), "{e}");
        assert!(!PortableAtomicBackward.deterministic() && PersistentPortable.deterministic());
    }

    /// Windows, softcap and ALiBi: the same launches in their modes builds, the two-phase dK/dV
    /// layout at D <= 64 (the deterministic dQ pass still the register kernel, built without the
    /// two-phase switch), and dense problems (causal too) without the define.
    #[test]
    fn score_modes_take_the_modes_builds() {
        use flashcore_core::{AlibiSlopes, Modes};
        let h100 = DeviceInfo::synthetic_h100();
        let has = |l: &KernelLaunch, k: &str| l.defines.iter().any(|(n, _)| n == k);
        let modes = Modes {
            window_left: Some(100),
            softcap: Some(30.0),
            alibi: Some(AlibiSlopes::PerHead),
            ..Modes::default()
        };
        for d in [32, 64, 160, 256] {
            let dense = AttentionProblem::new(2, 8, 500, d)
                .with_kv(2, 700)
                .with_causal(true);
            let p = dense.clone().with_modes(modes.clone());
            for atomic in [false, true] {
                let name = if atomic { "atomic" } else { "deterministic" };
                let plan = |p: &AttentionProblem| {
                    if atomic {
                        PortableAtomicBackward.plan_backward(p, &h100).unwrap()
                    } else {
                        PersistentPortable.plan_backward(p, &h100).unwrap()
                    }
                };
                let (m, dn) = (plan(&p), plan(&dense));
                assert_eq!(m.entries(), dn.entries(), "{name} {d}");
                assert!(m.launches.iter().all(|l| has(l, "FC_BWD_MODES")));
                assert!(dn.launches.iter().all(|l| !has(l, "FC_BWD_MODES")));
                // Varlen: the modes plan with the varlen build of every launch (the D pass
                // reads packed rows too); the modes plan on dense storage has none.
                // (At 128 and below on the 16-row kernels, and refused by the atomic schedule.)
                let mut varlen = p.clone();
                varlen.modes.packed_q = Some(900);
                varlen.modes.kv = flashcore_core::KvStorage::Packed { total_k: 1300 };
                assert!(m.launches.iter().all(|l| !has(l, "FC_BWD_VARLEN")));
                if d <= NARROW_DKDV_MAX_HEAD_DIM {
                    if atomic {
                        let e = PortableAtomicBackward
                            .plan_backward(&varlen, &h100)
                            .unwrap_err();
                        assert!(e.reason.contains("varlen"), "{e}");
                    } else {
                        let v = plan(&varlen);
                        assert_eq!(
                            v.entries(),
                            [
                                "bwd_portable_dot_do_o",
                                "bwd_portable_dk_dv",
                                "bwd_portable_dq"
                            ]
                        );
                        assert!(v.launches.iter().all(|l| has(l, "FC_BWD_VARLEN")));
                    }
                } else {
                    let v = plan(&varlen);
                    assert_eq!(v.entries(), m.entries(), "{name} {d}");
                    assert!(v.launches.iter().all(|l| has(l, "FC_BWD_VARLEN")));
                }
                if d <= 64 {
                    // The dK/dV pass in 8 warps, two-phase; the dQ pass's kernel unchanged.
                    assert_eq!(m.launches[1].block.0, 256, "{name} {d}");
                    assert!(has(&m.launches[1], "FC_BWD_TWO_PHASE"));
                    assert!(!has(&m.launches[1], "FC_BWD_STEP64"));
                    // (The atomic schedule's convert keeps it: the accumulator's tiles follow
                    // the layout.)
                    assert_eq!(has(&m.launches[2], "FC_BWD_TWO_PHASE"), atomic);
                    assert_eq!(m.launches[2].entry, dn.launches[2].entry);
                } else {
                    assert_eq!(m.launches[1].block, dn.launches[1].block);
                }
            }
        }
        // The atomic schedule refuses them at 96 and 128 (its modes builds spill there) and says
        // which kernel takes them.
        for d in [72, 96, 128] {
            let p = AttentionProblem::new(1, 4, 300, d).with_modes(modes.clone());
            let e = PortableAtomicBackward.plan_backward(&p, &h100).unwrap_err();
            assert!(e.reason.contains("persistent-portable"), "{e}");
            PersistentPortable.plan_backward(&p, &h100).unwrap();
        }
        // The Hopper backward takes them too (its modes build, hopper_bwd.rs).
        let hopper = crate::PersistentHopper;
        let p = AttentionProblem::new(2, 8, 500, 128).with_modes(modes);
        hopper.supports_backward(&p, &h100).unwrap();
    }

    #[test]
    fn wide_tiles_where_shared_memory_holds_them() {
        let p = AttentionProblem::new(2, 8, 300, 128).with_kv(2, 300);
        let plan = PersistentPortable
            .plan_backward(&p, &DeviceInfo::synthetic_h100())
            .unwrap();
        assert_eq!(
            plan.entries(),
            [
                "bwd_portable_dot_do_o",
                "bwd_portable_dk_dv_wide",
                "bwd_portable_dq"
            ]
        );
        assert_eq!(plan.launches[1].source, WIDE_SOURCE);
        assert_eq!(plan.launches[1].block.0, 256);
        assert_eq!(plan.launches[1].grid.0, 2 * 2 * 3); // 300 keys: 3 tiles of 128
        assert_eq!(plan.launches[2].grid.0, 2 * 8 * 5); // 300 rows: 5 tiles of 64
                                                        // K, V (32 KiB each), 2 x (Q, dO) of 64 rows (16 KiB each), Pᵀ and dSᵀ (16 KiB each),
                                                        // 2 x 64 (LSE, D) pairs.
        assert_eq!(
            plan.launches[1].dynamic_smem_bytes,
            2 * 32768 + 4 * 16384 + 2 * 16384 + 1024
        );
        assert_eq!(plan.workspace_f32, 2 * 8 * 300);

        let h100 = DeviceInfo::synthetic_h100();
        let sm86 = DeviceInfo::synthetic_sm86();
        // At D <= 64 both passes are wide (P in registers, 4 warps a block; 64 queries a dK/dV
        // step on sm_90, 32 below); at D = 128 on sm_86 (99 KiB) the 16-row kernels.
        let d64 = AttentionProblem::new(2, 8, 300, 64).with_kv(2, 300);
        let plan64 = PersistentPortable.plan_backward(&d64, &h100).unwrap();
        assert_eq!(
            plan64.entries(),
            [
                "bwd_portable_dot_do_o",
                "bwd_portable_dk_dv_wide",
                "bwd_portable_dq_wide"
            ]
        );
        assert_eq!(plan64.launches[1].block.0, 128);
        assert_eq!(plan64.launches[1].grid.0, 2 * 2 * 3); // 300 keys: 3 tiles of 128
        assert_eq!(plan64.launches[2].grid.0, 2 * 8 * 3); // 300 rows: 3 tiles of 128
                                                          // K, V (16 KiB each), 2 x (Q, dO) of 64 rows (8 KiB each), 2 x 64 (LSE, D); dQ: Q, dO
                                                          // (16 KiB each), 2 x (K, V) of 64 rows (8 KiB each), 128 (LSE, D).
        assert_eq!(
            plan64.launches[1].dynamic_smem_bytes,
            2 * 16384 + 4 * 8192 + 1024
        );
        let plan_sm86 = PersistentPortable.plan_backward(&d64, &sm86).unwrap();
        assert_eq!(
            plan_sm86.launches[1].dynamic_smem_bytes,
            2 * 16384 + 4 * 4096 + 512
        );
        assert_eq!(
            plan64.launches[2].dynamic_smem_bytes,
            2 * 16384 + 4 * 8192 + 1024
        );
        assert_eq!(Tiling::choose(64, &sm86, None), Ok(Tiling::Wide));
        assert_eq!(Tiling::choose(96, &h100, None), Ok(Tiling::Wide));
        assert_eq!(Tiling::choose(128, &sm86, None), Ok(Tiling::Narrow));
        let sm86_plan = PersistentPortable.plan_backward(&p, &sm86).unwrap();
        assert_eq!(sm86_plan.launches[1].entry, "bwd_portable_dk_dv");
        // The A/B switch, and its refusal.
        assert_eq!(
            Tiling::choose(128, &h100, Some("narrow".into())),
            Ok(Tiling::Narrow)
        );
        let e = Tiling::choose(128, &h100, Some("wider".into())).unwrap_err();
        assert!(e.contains("FLASHCORE_PORTABLE_BWD_TILES"), "{e}");
    }

    #[test]
    fn atomic_sections_are_about_a_wave_above_head_dim_64_only() {
        let h100 = DeviceInfo::synthetic_h100(); // 132 SMs
        let heads = |p: &AttentionProblem, forced: Option<&str>| {
            section_heads(p, &h100, forced.map(String::from))
        };
        // (B, H, S) at D = 128, the forced value, and the heads a section takes. One block an SM:
        // 132 items a wave, over 32, 128 and 16 key tiles.
        for ((b, h, s), forced, want) in [
            ((8, 32, 4096), None, Some(4)),
            ((1, 16, 16384), None, Some(1)),
            ((4, 16, 2048), None, Some(8)),
            ((1, 1, 1), None, Some(132)),
            ((1, 1, 1), Some("0"), None),
            ((1, 1, 1), Some("3"), Some(3)),
        ] {
            let p = AttentionProblem::new(b, h, s, 128);
            assert_eq!(heads(&p, forced), Ok(want), "({b}, {h}, {s}) {forced:?}");
        }
        let e = heads(&AttentionProblem::new(1, 1, 1, 128), Some("many")).unwrap_err();
        assert!(e.contains("FLASHCORE_PORTABLE_BWD_SECTION_HEADS"), "{e}");

        let defines = |d: usize| {
            let p = AttentionProblem::new(8, 32, 4096, d);
            let plan =
                plan_with("a", capabilities(), &p, &h100, true, &Overrides::default()).unwrap();
            plan.launches[1].defines.clone()
        };
        let has = |defs: &[(String, String)], k: &str| defs.iter().any(|(n, _)| n == k);
        let d128 = defines(128);
        assert!(has(&d128, "FC_BWD_SECTION_HEADS") && has(&d128, "FC_BWD_ROTATE"));
        // At D = 64 both measured slower (and spill the kernel): neither.
        let d64 = defines(64);
        assert!(!has(&d64, "FC_BWD_SECTION_HEADS") && !has(&d64, "FC_BWD_ROTATE"));
        // The deterministic schedule never takes them.
        let p = AttentionProblem::new(8, 32, 4096, 128);
        let det = plan_with("d", capabilities(), &p, &h100, false, &Overrides::default()).unwrap();
        assert!(!has(&det.launches[1].defines, "FC_BWD_SECTION_HEADS"));
    }

    #[test]
    fn sixty_four_query_steps_on_the_register_path_from_sm_90() {
        let h100 = DeviceInfo::synthetic_h100();
        let ov = |v: &str| Overrides {
            step_queries: Some(v.into()),
            ..Overrides::default()
        };
        let has = |plan: &LaunchPlan, k: &str| {
            plan.launches
                .iter()
                .all(|l| l.defines.iter().any(|(n, _)| n == k))
        };
        // 100 query rows: 4 blocks of 32 with the switch at 32, 2 of 64 with it at 64 (the
        // default on the H100).
        let p = AttentionProblem::new(2, 8, 100, 64);
        let default =
            plan_with("a", capabilities(), &p, &h100, true, &Overrides::default()).unwrap();
        assert!(has(&default, "FC_BWD_STEP64"));
        let step32 = plan_with("a", capabilities(), &p, &h100, true, &ov("32")).unwrap();
        assert!(!has(&step32, "FC_BWD_STEP64"));
        assert_eq!(step32.workspace_f32, 1600 + 2 * 8 * 128 * 64);
        let plan = plan_with("a", capabilities(), &p, &h100, true, &ov("64")).unwrap();
        assert!(has(&plan, "FC_BWD_STEP64"));
        assert_eq!(plan.workspace_f32, 1600 + 2 * 8 * 128 * 64);
        let odd = AttentionProblem::new(1, 1, 40, 64);
        let plan = plan_with("a", capabilities(), &odd, &h100, true, &ov("64")).unwrap();
        assert_eq!(
            plan.workspace_f32,
            40 + 64 * 64,
            "40 rows pad to one 64-row block"
        );
        // K, V (16 KiB each), 2 x (Q, dO) of 64 rows (8 KiB each), 2 x 64 (LSE, D), dSᵀ
        // [128][64], the step slots.
        assert_eq!(
            plan.launches[1].dynamic_smem_bytes,
            2 * 16384 + 4 * 8192 + 1024 + 16384 + 32
        );
        // Above head_dim 64 the switch changes nothing; the deterministic schedule takes it too.
        let d128 = AttentionProblem::new(2, 8, 100, 128);
        let plan = plan_with("a", capabilities(), &d128, &h100, true, &ov("64")).unwrap();
        assert!(!plan.launches[1]
            .defines
            .iter()
            .any(|(n, _)| n == "FC_BWD_STEP64"));
        for (v, on) in [("64", true), ("32", false)] {
            let det = plan_with("d", capabilities(), &p, &h100, false, &ov(v)).unwrap();
            assert_eq!(has(&det, "FC_BWD_STEP64"), on);
            assert_eq!(det.workspace_f32, 1600, "no accumulator: D only");
        }
        let det = plan_with("d", capabilities(), &p, &h100, false, &Overrides::default()).unwrap();
        assert!(has(&det, "FC_BWD_STEP64"));
        let e = plan_with("a", capabilities(), &p, &h100, true, &ov("48")).unwrap_err();
        assert!(
            e.to_string()
                .contains("FLASHCORE_PORTABLE_BWD_STEP_QUERIES"),
            "{e}"
        );
    }

    #[test]
    fn the_short_row_override_becomes_a_define_and_refuses_what_the_header_cannot_take() {
        let read = |v: Option<&str>| {
            let lookup = |n: &str| {
                (n == "FLASHCORE_BWD_SHORT_ROW_KEYS")
                    .then(|| v.map(String::from))
                    .flatten()
            };
            short_row_keys_define(Env::new(&lookup))
        };
        assert_eq!(
            read(None),
            Ok(None),
            "unset: the header's default, no define"
        );
        for n in ["0", "32", "256"] {
            assert_eq!(
                read(Some(n)),
                Ok(Some(("FC_BWD_SHORT_ROW_KEYS".to_string(), n.to_string())))
            );
        }
        for bad in ["257", "-1", "many"] {
            assert!(
                read(Some(bad))
                    .unwrap_err()
                    .contains("FLASHCORE_BWD_SHORT_ROW_KEYS"),
                "{bad}"
            );
        }
    }

    #[test]
    fn more_key_tiles_than_the_64_query_steps_count_are_refused() {
        let h100 = DeviceInfo::synthetic_h100();
        let plan = |d: usize, atomic: bool| {
            // 2^16 sequences x 2^16 key tiles of 128 = 2^32 items.
            let p = AttentionProblem::new(1 << 16, 1, 1, d).with_kv(1, 128 << 16);
            plan_with(
                "a",
                capabilities(),
                &p,
                &h100,
                atomic,
                &Overrides::default(),
            )
        };
        for atomic in [false, true] {
            let e = plan(64, atomic).unwrap_err();
            assert!(e.to_string().contains("2^31 - 1"), "{e}");
        }
        // Above D = 64 the kernel counts in 64 bits.
        assert!(plan(128, false).is_ok() && plan(128, true).is_ok());
    }

    /// An sm_80 part (A100: 163 KiB a block with opt-in) for planning without a GPU.
    fn a100() -> DeviceInfo {
        DeviceInfo {
            compute_capability: (8, 0),
            max_shared_memory_per_block_optin: 163 * 1024,
            ..DeviceInfo::synthetic_h100()
        }
    }

    fn define<'a>(plan: &'a LaunchPlan, key: &str) -> Option<&'a str> {
        plan.launches[1]
            .defines
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn every_multiple_of_8_up_to_256_runs_in_the_next_build_padded() {
        assert_eq!(build_head_dim(8), Some(32));
        assert_eq!(build_head_dim(136), Some(160));
        assert_eq!(build_head_dim(256), Some(256));
        assert_eq!(build_head_dim(264), None);
        for dev in [DeviceInfo::synthetic_h100(), a100()] {
            for d in (8..=MAX_HEAD_DIM).step_by(8) {
                let p = AttentionProblem::new(2, 4, 300, d).with_kv(2, 200);
                let build = build_head_dim(d).unwrap();
                for atomic in [false, true] {
                    let plan =
                        plan_with("a", capabilities(), &p, &dev, atomic, &Overrides::default())
                            .unwrap_or_else(|e| {
                                panic!("D={d} atomic={atomic} on {}: {e}", dev.name)
                            });
                    let limit = dev.max_shared_memory_per_block_optin;
                    for l in &plan.launches {
                        let has = |k: &str| l.defines.iter().any(|(n, _)| n == k);
                        assert!(l
                            .defines
                            .contains(&("FC_HEAD_DIM".into(), build.to_string())));
                        // The padded switch exactly where the build is wider than the problem.
                        assert_eq!(has("FC_BWD_PADDED_HEAD"), build != d, "D={d}");
                        assert!(
                            l.dynamic_smem_bytes <= limit,
                            "D={d}: {}",
                            l.dynamic_smem_bytes
                        );
                    }
                    if atomic {
                        // The accumulator is the build's columns wide.
                        let layout = WideLayout::of(build, build != d, true);
                        let step = step_queries(build, layout, &dev, true, None).unwrap();
                        assert_eq!(
                            plan.workspace_f32,
                            2 * 4 * 300 + 2 * 4 * 300usize.next_multiple_of(step) * build
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn wide_head_dims_take_64_key_blocks_and_fit_sm_80_and_sm_90() {
        let h100 = DeviceInfo::synthetic_h100();
        let a100 = a100();
        // (build, device, atomic) -> queries a step; the dK/dV pass's bytes: K, V (64 keys),
        // 2 x (Q, dO), Pᵀ and dSᵀ ([64 keys][step]), 2 x the step's (LSE, D), atomic step slots.
        for (d, dev, want_step) in [
            (160, &h100, 64),
            (192, &h100, 64),
            (224, &h100, 64),
            (256, &h100, 64),
            (160, &a100, 64),
            (192, &a100, 64),
            (224, &a100, 32),
            (256, &a100, 32),
        ] {
            for atomic in [false, true] {
                let p = AttentionProblem::new(2, 8, 1000, d).with_kv(2, 1000);
                let plan =
                    plan_with("a", capabilities(), &p, dev, atomic, &Overrides::default()).unwrap();
                let step = want_step;
                let bytes = 2 * 64 * d * 2
                    + 4 * step * d * 2
                    + 2 * 64 * step * 2
                    + 2 * step * 8
                    + if atomic { 32 } else { 0 };
                assert_eq!(plan.launches[1].entry, "bwd_portable_dk_dv_wide");
                assert_eq!(plan.launches[1].dynamic_smem_bytes as usize, bytes, "D={d}");
                assert!(bytes <= dev.max_shared_memory_per_block_optin as usize);
                assert_eq!(plan.launches[1].block.0, 256);
                assert_eq!(plan.launches[1].grid.0, 2 * 2 * 16); // 1000 keys: 16 tiles of 64
                assert_eq!(
                    define(&plan, "FC_BWD_STEP32").is_some(),
                    step == 32,
                    "D={d}"
                );
                assert!(define(&plan, "FC_BWD_STEP64").is_none());
                // A row a warp in the first launch.
                assert_eq!(plan.launches[0].grid.0, 2 * 8 * 1000 / 4);
                if atomic {
                    assert_eq!(plan.launches[2].entry, "bwd_portable_dq_convert");
                    assert_eq!(
                        plan.workspace_f32,
                        2 * 8 * 1000 + 2 * 8 * 1000usize.next_multiple_of(step) * d
                    );
                } else {
                    // The 16-row dQ kernel, 32-key tiles: Q, dO (64 rows), 2 x (K, V).
                    assert_eq!(plan.launches[2].entry, "bwd_portable_dq");
                    assert_eq!(
                        plan.launches[2].dynamic_smem_bytes as usize,
                        2 * 64 * d * 2 + 4 * 32 * d * 2
                    );
                    assert_eq!(plan.launches[2].grid.0, 2 * 8 * 16); // 1000 rows: 16 tiles
                }
            }
        }
        // The largest: 209 KiB on sm_90 (one block an SM), 137 KiB with 32-query steps on sm_80.
        let two_phase = WideLayout::TwoPhase;
        assert_eq!(wide_dkdv_smem_bytes(256, two_phase, false, 64), 214_016);
        assert_eq!(wide_dkdv_smem_bytes(256, two_phase, true, 32), 139_808);
        assert_eq!(dq_smem_bytes(256), 131_072);
        assert_eq!(dot_rows_per_warp(160), 1);
        assert_eq!(dot_rows_per_warp(256), 1);
    }

    #[test]
    fn the_atomic_schedules_padded_64_build_takes_the_two_phase_layout() {
        // 40..56 run in the 64 build; the atomic schedule's is the 8-warp layout of 96 and 128
        // (FC_BWD_TWO_PHASE), the deterministic schedule's keeps the register path.
        for dev in [
            DeviceInfo::synthetic_h100(),
            a100(),
            DeviceInfo::synthetic_sm86(),
        ] {
            let p = AttentionProblem::new(2, 4, 300, 48);
            let atomic =
                plan_with("a", capabilities(), &p, &dev, true, &Overrides::default()).unwrap();
            assert_eq!(define(&atomic, "FC_BWD_TWO_PHASE"), Some("1"));
            assert_eq!(define(&atomic, "FC_BWD_STEP64"), None);
            assert_eq!(atomic.launches[1].block.0, 256);
            // K, V (128 keys), 2 x (Q, dO) of 64 rows, Pᵀ and dSᵀ [128][64], 2 x 64 (LSE, D),
            // the step slots: 99 360 bytes, within a 99 KiB device's.
            assert_eq!(
                atomic.launches[1].dynamic_smem_bytes,
                2 * 16384 + 4 * 8192 + 2 * 16384 + 1024 + 32
            );
            assert_eq!(atomic.workspace_f32, 2 * 4 * 300 + 2 * 4 * 320 * 64);
            let det =
                plan_with("d", capabilities(), &p, &dev, false, &Overrides::default()).unwrap();
            assert_eq!(define(&det, "FC_BWD_TWO_PHASE"), None);
            assert_eq!(det.launches[1].block.0, 128);
        }
        // The exact 64 build keeps the register path in both.
        let p = AttentionProblem::new(2, 4, 300, 64);
        let h100 = DeviceInfo::synthetic_h100();
        let atomic =
            plan_with("a", capabilities(), &p, &h100, true, &Overrides::default()).unwrap();
        assert_eq!(define(&atomic, "FC_BWD_TWO_PHASE"), None);
        assert_eq!(atomic.launches[1].block.0, 128);
    }

    #[test]
    fn wide_head_dim_switches_and_refusals_say_why() {
        let h100 = DeviceInfo::synthetic_h100();
        let p = AttentionProblem::new(1, 2, 64, 256);
        let ov = |tiles: Option<&str>, step: Option<&str>| Overrides {
            tiles: tiles.map(String::from),
            step_queries: step.map(String::from),
            ..Overrides::default()
        };
        // No 16-row dK/dV kernel above 128, asked for or not.
        let e = plan_with(
            "d",
            capabilities(),
            &p,
            &h100,
            false,
            &ov(Some("narrow"), None),
        )
        .unwrap_err();
        assert!(e.to_string().contains("up to head_dim 128"), "{e}");
        assert!(plan_with(
            "d",
            capabilities(),
            &p,
            &h100,
            false,
            &ov(Some("wide"), None)
        )
        .is_ok());
        // 32-query steps on request where 64 fit; 64 asked for where they do not fit is refused.
        let plan = plan_with("a", capabilities(), &p, &h100, true, &ov(None, Some("32"))).unwrap();
        assert_eq!(define(&plan, "FC_BWD_STEP32"), Some("1"));
        let e = plan_with(
            "a",
            capabilities(),
            &p,
            &a100(),
            true,
            &ov(None, Some("64")),
        )
        .unwrap_err();
        assert!(e.to_string().contains("shared memory"), "{e}");
        assert!(e.to_string().contains("64 queries a step"), "{e}");
        // 99 KiB devices: 160 with 32-query steps; from 168 (the 192 build) neither step fits.
        let sm86 = DeviceInfo::synthetic_sm86();
        for atomic in [false, true] {
            let plan = plan_with(
                "a",
                capabilities(),
                &AttentionProblem::new(1, 2, 64, 136),
                &sm86,
                atomic,
                &Overrides::default(),
            )
            .unwrap();
            assert_eq!(define(&plan, "FC_BWD_STEP32"), Some("1"));
            assert_eq!(define(&plan, "FC_BWD_PADDED_HEAD"), Some("1"));
            let e = plan_with(
                "a",
                capabilities(),
                &AttentionProblem::new(1, 2, 64, 168),
                &sm86,
                atomic,
                &Overrides::default(),
            )
            .unwrap_err();
            assert!(
                e.to_string()
                    .contains("shared memory per block (the dK/dV pass at head_dim 192"),
                "{e}"
            );
        }
    }

    #[test]
    fn unbuilt_head_dims_and_small_devices_are_refused_with_the_reason() {
        let h100 = DeviceInfo::synthetic_h100();
        for d in [4, 100, 264, 512] {
            for k in [
                &PersistentPortable as &dyn AttentionBackward,
                &PortableAtomicBackward,
            ] {
                let e = k
                    .supports_backward(&AttentionProblem::new(1, 2, 64, d), &h100)
                    .unwrap_err();
                assert!(
                    e.to_string()
                        .contains(&format!("head_dim {d} is not in 8..=256 step 8")),
                    "{e}"
                );
            }
        }
        let small = DeviceInfo {
            max_shared_memory_per_block_optin: 64 * 1024,
            ..h100
        };
        let e = PersistentPortable
            .plan_backward(&AttentionProblem::new(1, 2, 64, 128), &small)
            .unwrap_err();
        assert!(e.to_string().contains("shared memory"), "{e}");
    }

    proptest::proptest! {
        /// Any dense problem either plans or is refused with a reason; a plan's launches cover
        /// their work items with one block each (grid-stride past 2³¹ − 1), fit the device's
        /// shared memory, and its workspace holds D (and, with atomic dQ, the 16-byte-aligned
        /// accumulator) with no counters.
        #[test]
        fn plans_cover_their_items_and_fit_the_device(
            batch in 1usize..5000,
            heads_kv in 1usize..9,
            group in 1usize..9,
            seq_q in 0usize..100_000,
            seq_k in 0usize..100_000,
            d in proptest::prop_oneof![
                proptest::sample::select(vec![12usize, 16, 32, 64, 96, 128, 160, 192, 224, 256, 264]),
                (1usize..=32).prop_map(|k| 8 * k),
            ],
            dev in proptest::sample::select(vec![0usize, 1, 2]),
        ) {
            let p = AttentionProblem::new(batch, heads_kv * group, seq_q, d).with_kv(heads_kv, seq_k);
            let dev = [DeviceInfo::synthetic_h100(), DeviceInfo::synthetic_sm86(), a100()][dev].clone();
            let sm86 = dev.max_shared_memory_per_block_optin < 100 * 1024;
            for atomic in [false, true] {
                let plan = if atomic {
                    PortableAtomicBackward.plan_backward(&p, &dev)
                } else {
                    PersistentPortable.plan_backward(&p, &dev)
                };
                let limit = dev.max_shared_memory_per_block_optin as usize;
                let Ok(plan) = plan else {
                    // Refused: a head dim not built, or no tiling's shared memory fits.
                    let Some(b) = build_head_dim(d).filter(|_| d % 8 == 0) else { continue };
                    let smallest_step = if b <= 64 { 32 } else if b <= 128 { 64 } else { 32 };
                    let too_big = if atomic || b > NARROW_DKDV_MAX_HEAD_DIM {
                        wide_dkdv_smem_bytes(b, WideLayout::of(b, b != d, atomic), atomic, smallest_step) > limit
                            || (!atomic && dq_smem_bytes(b) > limit)
                    } else {
                        dkdv_smem_bytes(b) > limit || dq_smem_bytes(b) > limit
                    };
                    proptest::prop_assert!(too_big, "D={} refused: {:?}", d, plan.err());
                    continue;
                };
                proptest::prop_assert!(d % 8 == 0 && d <= MAX_HEAD_DIM);
                let b = build_head_dim(d).unwrap();
                let rows = batch * heads_kv * group * seq_q;
                let wide = plan.launches[1].entry == "bwd_portable_dk_dv_wide";
                proptest::prop_assert_eq!(wide, atomic || Tiling::choose(b, &dev, None) == Ok(Tiling::Wide));
                let key_tile = if wide { wide_key_rows(b) } else { KEY_TILE_ROWS };
                let wide_dq = wide && b <= 64;
                let query_tile = if wide_dq { WIDE_QUERY_TILE_ROWS } else { QUERY_TILE_ROWS };
                let layout = WideLayout::of(b, b != d, atomic);
                let step = step_queries(b, layout, &dev, atomic, None).unwrap();
                // (64-query steps at D <= 64 on the H100, the default there.)
                let register_step = if dev.compute_capability.0 >= 9 { 64 } else { 32 };
                proptest::prop_assert!(layout == WideLayout::TwoPhase || step == register_step);
                let padded_rows = batch * heads_kv * group * seq_q.next_multiple_of(step);
                let items = [
                    rows.div_ceil(4 * dot_rows_per_warp(b)),
                    batch * heads_kv * seq_k.div_ceil(key_tile),
                    if atomic { (padded_rows * b / 4).div_ceil(128) } else { batch * heads_kv * group * seq_q.div_ceil(query_tile) },
                ];
                let two_phase = wide && layout == WideLayout::TwoPhase;
                let threads = if two_phase { [128, 256, 128] } else { [128; 3] };
                for ((launch, items), threads) in plan.launches.iter().zip(items).zip(threads) {
                    proptest::prop_assert_eq!(launch.grid.0 as usize, items.clamp(1, i32::MAX as usize));
                    proptest::prop_assert!(launch.dynamic_smem_bytes as usize <= limit);
                    proptest::prop_assert_eq!(launch.block.0, threads);
                }
                proptest::prop_assert!(!sm86 || b <= 160, "D={} planned on a 99 KiB device", d);
                let want = if atomic { rows.next_multiple_of(4) + padded_rows * b } else { rows };
                proptest::prop_assert_eq!(plan.workspace_f32, want);
                proptest::prop_assert_eq!(plan.workspace_counters, 0);
            }
        }
    }
}
