//! The decode plan both generation-5 paths share (`kernels/gen5_decode.cu`): split keys across
//! CTAs (FlashDecoding) with the query heads of a KV group packed into one 16-row MMA tile
//! (FlashAttention-3's pack-GQA).
//!
//! The persistent kernels give one CTA a (batch, head, 128-row q tile) item and its whole key
//! range. With one query per sequence that item holds one real row of 128, and B·Hq items leave
//! most SMs idle (B = 1, Sk = 32768: 32 CTAs on 132 SMs). A decode problem, whose queries per KV
//! head fit one 16-row tile, is planned here instead: one CTA per (sequence, KV head, packed q
//! tile, key split), as many splits as fill the GPU once, and a combine kernel when there is more
//! than one split. Design and measurements: `docs/generations/gen5-decode.md`.
//!
//! Environment (for A/B runs and the verify sweep):
//! - `FLASHCORE_DECODE=auto|off|force`: auto (default) plans decode problems here; off never;
//!   force plans every problem with a head dim it is built for here (the sweep's way through
//!   this kernel at every shape; slow for long queries, never wrong).
//! - `FLASHCORE_DECODE_SPLITS=N` (1..=[`MAX_SPLITS`]): force the split count.
//! - `FLASHCORE_DECODE_SPLITS=sweep`: a split count drawn per problem (see [`sweep_splits`]), so
//!   one verify sweep covers the whole range of counts, each case reproducible from its shape.
//! - `FLASHCORE_DECODE_STAGES=N` (2..=[`MAX_STAGES`]): force the K/V ring's depth; a depth whose
//!   shared memory the device does not have is `Unsupported`.
//! - `FLASHCORE_DECODE_PDL=0|1`: programmatic dependent launch of both kernels (default on
//!   sm_90+: the combine's launch and setup overlap the split kernel, and the split kernel's the
//!   kernel before it).
//! - `FLASHCORE_DECODE_TRACE=1`: a timeline of the kernels, printed by launches 40 and 41 of each
//!   build (`kernels/common/decode_trace.cuh`); for studies, never for timing.
//! - `FLASHCORE_DECODE_CHUNK_TILES=N` (1..=[`MAX_CHUNK_TILES`]): the key chunk of
//!   batch-invariant plans, in 64-key tiles (default [`BATCH_INVARIANT_CHUNK_TILES`]); small
//!   chunks drive the combine through many splits in a verify sweep.
//!
//! **Batch-invariant plans** (`problem.batch_invariant`, `docs/MODES.md`) cut each unit's key
//! tiles into chunks of a fixed size counted from its first visited tile ([`chunk_tiles_for`]),
//! so a sequence's splits, and the order its partials are merged in, follow from its own lengths
//! and never from the batch or the SM count. A sequence of one chunk writes its output directly,
//! whatever the other sequences need. In a varlen batch whose longest query does not fit one
//! decode tile, each sequence is routed by its own query count ([`Route`]): the decode-shaped
//! ones here, the rest to the persistent kernel, in two launches of one plan.

use crate::env::{Env, Overridable};
use flashcore_core::{
    AttentionProblem, DeviceInfo, KernelLaunch, KvStorage, LaunchPlan, Unsupported,
};

/// Kernel file and entry points.
pub const SOURCE: &str = "gen5_decode.cu";
pub const SPLIT_ENTRY: &str = "attention_decode_split";
pub const COMBINE_ENTRY: &str = "attention_decode_combine";
/// The combine with a warp a whole row ([`combine_slices`] > 1).
pub const COMBINE_ROWS_ENTRY: &str = "attention_decode_combine_rows";
/// Head dims the kernel is built for (`FC_HEAD_DIM`). At 256, Q is read from shared memory for
/// each tile (its fragments do not fit beside the 128-register accumulator) and one CTA fits an
/// SM. At 512 every warp takes all of a 32-key tile's keys and a quarter of O's columns
/// ([`kv_tile_rows`]). Every other head dim that is a multiple of 8, and V's own head dim, run
/// padded in the next build up ([`build_dim`]).
pub const HEAD_DIMS: &[usize] = &[64, 128, 256, 512];
/// The widest head dim the Hopper persistent kernel is built for. It claims the decode kernel's
/// widest build (its capabilities), and past this takes only what that plans. (The portable
/// kernel takes up to 512 itself: `portable::V_BLOCKED_HEAD_DIM`.)
pub const PERSISTENT_MAX_HEAD_DIM: usize = 256;
/// The widest head dim the paths with the decode kernel in front take (its widest build).
pub const MAX_HEAD_DIM: usize = 512;
/// Builds that read an e4m3 cache (`kv_operand.cuh`'s byte tiles).
pub const E4M3_HEAD_DIMS: &[usize] = &[64, 128, 256];

/// The build (`FC_HEAD_DIM`) that serves `problem`: the smallest of [`HEAD_DIMS`] that holds
/// both its head dim and V's, padded (`FC_DECODE_PADDED`: the columns past the problem's are
/// zero-filled on load and never stored, as FlashAttention-2 pads) where either is narrower.
/// An e4m3 cache only at a build's own head dim (its byte tiles permute O's columns, which the
/// padded store does not follow). `None`: no build takes it.
pub fn build_dim(problem: &AttentionProblem) -> Option<usize> {
    let (d, dv) = (problem.head_dim, problem.head_dim_v());
    if problem.modes.kv_fp8.is_some() {
        return (E4M3_HEAD_DIMS.contains(&d) && dv == d).then_some(d);
    }
    if d == 0 || !d.is_multiple_of(8) || !dv.is_multiple_of(8) {
        return None;
    }
    HEAD_DIMS.iter().copied().find(|&b| b >= d.max(dv))
}

/// Whether `problem` runs in a padded build of `build` columns.
fn padded(problem: &AttentionProblem, build: usize) -> bool {
    problem.head_dim != build || problem.head_dim_v() != build
}
/// Packed query rows per CTA (`q_tile_rows`: one m16 MMA tile).
pub const Q_TILE_ROWS: usize = 16;
/// Keys per K/V tile of the ring (`kv_tile_rows`) up to D = 256, 16 per warp.
pub const KV_TILE_ROWS: usize = 64;

/// Keys per K/V tile of the `build`'s ring: [`KV_TILE_ROWS`], and 32 at D = 512, where a 64-key
/// stage would be 128 KiB and two would not fit.
pub fn kv_tile_rows(build: usize) -> usize {
    if build > 256 {
        32
    } else {
        KV_TILE_ROWS
    }
}

/// The key tile of `problem`'s build (64 where no build takes it: the bounds below are then
/// unused).
fn problem_tile_rows(problem: &AttentionProblem) -> usize {
    build_dim(problem).map_or(KV_TILE_ROWS, kv_tile_rows)
}
pub const WARPS: u32 = 4;
/// Warps of a combine block; each merges one [`COMBINE_COLS`]-column slice of a packed row.
pub const COMBINE_WARPS: usize = 4;
/// Columns of O a combine warp merges (a pair a lane).
pub const COMBINE_COLS: usize = 64;
/// Largest split count (forced or chosen).
pub const MAX_SPLITS: usize = 256;
/// A split gets at least this many key tiles when the plan chooses: fewer and the fixed cost
/// (Q load, pipeline fill, the partial's write and the combine) outweighs the keys it streams.
pub const MIN_TILES_PER_SPLIT: usize = 4;
/// Deepest ring `FLASHCORE_DECODE_STAGES` may ask for.
pub const MAX_STAGES: usize = 8;
/// Largest workspace a decode plan asks for; more splits than fit are not taken.
pub const MAX_WORKSPACE_BYTES: usize = 1 << 30;
/// Key tiles per chunk of a batch-invariant plan (4096 keys; [`chunk_tiles_for`] halves it for
/// long sequences). A plan that cannot see the batch must guess how much of the GPU one
/// sequence's splits have to fill. A full batch pays for every extra split (a fixed cost each:
/// Q load, ring fill, partial write, combine input); a lone long sequence needs many to fill the
/// SMs at all. Long contexts are the ones that decode in small batches, so sequences of at least
/// four chunks take half chunks: the suite's long row (1,32,8,1,32768) then gets the 16 splits of
/// 2048 keys its default plan gives it, and the full-batch rows of 2048-8192 keys one or two
/// (`docs/results/2026-11-28-batch-invariance-h200`).
pub const BATCH_INVARIANT_CHUNK_TILES: usize = 64;
/// Largest `FLASHCORE_DECODE_CHUNK_TILES`.
pub const MAX_CHUNK_TILES: usize = 1 << 16;
/// Words the persistent kernel's counters keep at the front of a routed plan's workspace; the
/// decode partials start after them (`FC_DECODE_WS_OFFSET`, 128-byte aligned).
pub const ROUTED_WORKSPACE_OFFSET: usize = 32;

/// Which sequences a decode launch takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// All of them (the problem's longest query fits one decode tile, or the kernel is forced).
    Every,
    /// Only those whose own queries fit one decode tile (`FC_SEQ_ROUTE=2`); the persistent
    /// kernel of the same plan takes the others (`FC_SEQ_ROUTE=1`).
    DecodeShaped,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DecodeMode {
    /// Decode-shaped problems (queries per KV head fit one tile) take this plan.
    #[default]
    Auto,
    /// Never (the persistent kernels take everything).
    Off,
    /// Every problem with a supported head dim.
    Force,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecodeConfig {
    pub mode: DecodeMode,
    /// Forced split count; `None` lets [`auto_splits`] choose.
    pub splits: Option<usize>,
    /// Draw the split count per problem ([`sweep_splits`]); overrides `splits`.
    pub sweep: bool,
    /// Forced ring depth (`FLASHCORE_DECODE_STAGES`, for A/B runs); `None`: [`stages`].
    pub stages: Option<usize>,
    /// Programmatic dependent launch (`FLASHCORE_DECODE_PDL=0|1`; `None`: on). Only where the
    /// device has it, sm_90 and later, either way.
    pub programmatic_launch: Option<bool>,
    /// L2 prefetch of each CTA's first ring tiles before it waits for the kernel before it
    /// (`FC_DECODE_PREFETCH`; `FLASHCORE_DECODE_PREFETCH=0|1`; `None`: programmatic split plans,
    /// where the wait is for the last call's combine and DRAM is otherwise idle).
    pub prefetch: Option<bool>,
    /// The kernels' timeline (`FC_DECODE_TRACE`, `common/decode_trace.cuh`;
    /// `FLASHCORE_DECODE_TRACE=1`): a study build that prints, never a measured one.
    pub trace: bool,
    /// Key tiles per chunk of batch-invariant plans (`FLASHCORE_DECODE_CHUNK_TILES`; `None`:
    /// [`BATCH_INVARIANT_CHUNK_TILES`]).
    pub chunk_tiles: Option<usize>,
}

impl Overridable for DecodeConfig {
    fn read(env: Env) -> Result<Self, String> {
        let mut c = DecodeConfig::default();
        let mode = |v: &str| match v.trim() {
            "" | "auto" => Some(DecodeMode::Auto),
            "0" | "off" => Some(DecodeMode::Off),
            "force" => Some(DecodeMode::Force),
            _ => None,
        };
        if let Some(m) = env.parse("FLASHCORE_DECODE", mode, |v| {
            format!("FLASHCORE_DECODE={}: expected auto, off or force", v.trim())
        })? {
            c.mode = m;
        }
        c.programmatic_launch = env.flag("FLASHCORE_DECODE_PDL", |v| {
            format!("FLASHCORE_DECODE_PDL={}: expected 0|1|on|off", v.trim())
        })?;
        c.prefetch = env.flag("FLASHCORE_DECODE_PREFETCH", |v| {
            format!(
                "FLASHCORE_DECODE_PREFETCH={}: expected 0|1|on|off",
                v.trim()
            )
        })?;
        c.trace = env
            .flag("FLASHCORE_DECODE_TRACE", |v| {
                format!("FLASHCORE_DECODE_TRACE={}: expected 0|1|on|off", v.trim())
            })?
            .unwrap_or(false);
        c.stages = env.number(
            "FLASHCORE_DECODE_STAGES",
            |n| (2..=MAX_STAGES).contains(&n),
            |v| format!("FLASHCORE_DECODE_STAGES={v}: expected a ring depth in 2..={MAX_STAGES}"),
        )?;
        c.chunk_tiles = env.number(
            "FLASHCORE_DECODE_CHUNK_TILES",
            |n| (1..=MAX_CHUNK_TILES).contains(&n),
            |v| {
                format!(
                    "FLASHCORE_DECODE_CHUNK_TILES={v}: expected key tiles in 1..={MAX_CHUNK_TILES}"
                )
            },
        )?;
        match env.count_or("FLASHCORE_DECODE_SPLITS", "sweep", MAX_SPLITS, |v| {
            format!(
                "FLASHCORE_DECODE_SPLITS={v}: expected a split count in 1..={MAX_SPLITS} or sweep"
            )
        })? {
            Some(None) => c.sweep = true,
            Some(Some(n)) => c.splits = Some(n),
            None => {}
        }
        Ok(c)
    }
}

/// Ring depth (`FC_DECODE_STAGES`): 3 slots of 64-key K and V at D = 128 (96 KiB, two CTAs per
/// SM on an H100) and 256 (192 KiB, one), 3 of 32-key tiles at 512 (192 KiB, one), 4 at D = 64
/// (64 KiB, three); fewer where the device's
/// shared memory is smaller (sm_86/89: 99 KiB per block), down to the 2 a ring needs.
pub fn stages(head_dim: usize, device: &DeviceInfo) -> usize {
    stages_for(head_dim, KV_HALF, device)
}

/// The ring depth for K/V elements of `kv_bytes` bytes. e4m3 plans aim at two CTAs an SM
/// ([`ctas_per_sm`]), whose rings together keep enough bytes in flight: 4 slots at D = 64 and
/// 128, 3 at 256 (104.5 KiB a CTA, the deepest ring of which two fit an SM). Deeper rings were
/// slower on every row that a split plan takes: on the H200, (1,32,8,1,32768) at D = 64 took 18.7 µs
/// with 4 slots against 23.3 with 8; at 256, 46.4 µs with 3 against 61.3 with 4 and 73.5 with 6,
/// where one CTA an SM fit (`docs/results/2026-11-30-decode-rescale-rings-h200`); at 128, 25.8
/// µs with 4 against 29.0 with 6 (`docs/results/2026-11-30-decode-long-row-h200`).
pub fn stages_for(head_dim: usize, kv_bytes: usize, device: &DeviceInfo) -> usize {
    let preferred = match (kv_bytes, head_dim) {
        (KV_E4M3, 0..=128) => 4,
        _ if head_dim <= 64 => 4,
        _ => 3,
    };
    (2..=preferred.min(MAX_STAGES))
        .rev()
        .find(|&s| {
            smem_bytes_for(head_dim, kv_bytes, s)
                <= device.max_shared_memory_per_block_optin as usize
        })
        .unwrap_or(2)
}

/// The combine's packed rows per unit (the kernel's `combine_rows`): the tile's 16, or the rows a
/// sequence's queries pack into where that is fewer (decode: G). Units have no other rows, so
/// the combine launches no warps for them.
pub fn combine_rows(problem: &AttentionProblem) -> usize {
    (problem.seq_q * problem.q_heads_per_kv()).clamp(1, Q_TILE_ROWS)
}

/// O loads of splits a combine lane has in flight at once (the kernel's `combine_batch`).
pub const COMBINE_BATCH: usize = 32;

/// The [`COMBINE_COLS`]-column slices of the build's head dim one combine warp merges: all of a
/// row's where every split's loads of them fit a lane's batch, else one. At 256 the speculative
/// row's two splits take 256 blocks, which fit the SMs at once, where a warp a slice made 1 024
/// of which four fit an SM (1.94 waves): 133.6 -> 130.0 us on an H200
/// (`docs/results/2026-12-02-decode-combine-rows-h200`, call 5).
pub fn combine_slices(build: usize, splits: usize) -> usize {
    let slices = build.div_ceil(COMBINE_COLS);
    if slices > 1 && splits <= COMBINE_BATCH / slices {
        slices
    } else {
        1
    }
}

/// The combine's entry: a warp a row where [`combine_slices`] takes whole rows.
pub fn combine_entry(build: usize, splits: usize) -> &'static str {
    if combine_slices(build, splits) > 1 {
        COMBINE_ROWS_ENTRY
    } else {
        COMBINE_ENTRY
    }
}

/// The combine's blocks: one warp per (unit, packed row, [`combine_slices`] slices of the build's
/// head dim), [`COMBINE_WARPS`] to a block.
pub fn combine_blocks(units: usize, rows: usize, build: usize, splits: usize) -> usize {
    let items_a_row = build.div_ceil(COMBINE_COLS) / combine_slices(build, splits);
    (units * rows * items_a_row).div_ceil(COMBINE_WARPS)
}

/// The split kernel's dynamic shared memory for a grid of `ctas` CTAs that needs `smem` bytes:
/// where the plan aims at one CTA an SM ([`ctas_per_sm`]) and the grid fits the SMs once, over
/// half the block's limit, so that no SM takes two of its CTAs while another has none. With two
/// on one SM, the two-split 16-bit rows (128 CTAs of 132 SMs) ran at 78-89 µs instead of 66
/// once the combine's blocks were launched beside them (H200,
/// `docs/results/2026-11-30-decode-long-row-h200`).
pub fn reserved_smem(smem: usize, kv_bytes: usize, ctas: usize, device: &DeviceInfo) -> usize {
    if ctas_per_sm(kv_bytes) == 1 && ctas <= device.sm_count as usize {
        smem.max(device.max_shared_memory_per_block_optin as usize / 2 + 1)
    } else {
        smem
    }
}

/// Bytes of a K/V element: 16-bit, or e4m3 (`Modes::kv_fp8`).
pub const KV_HALF: usize = 2;
pub const KV_E4M3: usize = 1;

/// The K/V element size of `problem`'s cache.
pub fn kv_bytes(problem: &AttentionProblem) -> usize {
    if problem.modes.kv_fp8.is_some() {
        KV_E4M3
    } else {
        KV_HALF
    }
}

/// Dynamic shared memory (`smem_bytes` in the kernel) with 16-bit K/V.
pub fn smem_bytes(head_dim: usize, stages: usize) -> usize {
    smem_bytes_for(head_dim, KV_HALF, stages)
}

/// Dynamic shared memory: the K/V ring (elements of `kv_bytes`), the packed Q tile, each warp's
/// per-row (max, sum).
pub fn smem_bytes_for(head_dim: usize, kv_bytes: usize, stages: usize) -> usize {
    stages * 2 * kv_tile_rows(head_dim) * head_dim * kv_bytes
        + Q_TILE_ROWS * head_dim * 2
        + 4 * Q_TILE_ROWS * 2 * 4
}

/// Where the split kernel reads K/V from (`FC_DECODE_KV_CACHE`, set by every plan): each build
/// holds the one loader its cache needs. With all three in one build, chosen per tile at run
/// time, the sm_90a D = 128 e4m3 mainloop was 1 296 instructions; one loader a build makes it
/// 965 (strided), 1 002 (pages of whole tiles) or 926 (smaller pages). A launch whose tables do
/// not match its build traps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvCache {
    /// A strided tensor: dense, packed (`cu_seqlens_k`) or a contiguous cache.
    Strided = 0,
    /// A paged cache whose pages hold whole key tiles ([`kv_tile_rows`] divides `block_size`):
    /// each tile is strided inside one page.
    PageTiles = 1,
    /// A paged cache of smaller pages: a page lookup per 16-row group of each tile.
    PageGroups = 2,
}

/// The cache kind of `problem` in the build of `build` columns.
pub fn kv_cache(problem: &AttentionProblem, build: usize) -> KvCache {
    match problem.modes.kv {
        KvStorage::Paged { block_size, .. } if block_size.is_multiple_of(kv_tile_rows(build)) => {
            KvCache::PageTiles
        }
        KvStorage::Paged { .. } => KvCache::PageGroups,
        KvStorage::Dense | KvStorage::Packed { .. } => KvCache::Strided,
    }
}

/// `FC_DECODE_MIN_BLOCKS`: the blocks per SM the register allocation is sized for.
pub fn min_blocks(head_dim: usize) -> usize {
    match head_dim {
        0..=64 => 3,
        65..=128 => 2,
        _ => 1,
    }
}

/// Whether a build takes `problem` ([`build_dim`]) and its shortest ring fits `device`'s shared
/// memory (at D = 256 not on sm_86/89's 99 KiB): otherwise the persistent path takes the problem.
pub fn runs_on(problem: &AttentionProblem, device: &DeviceInfo) -> bool {
    build_dim(problem).is_some_and(|b| {
        smem_bytes_for(b, kv_bytes(problem), 2) <= device.max_shared_memory_per_block_optin as usize
    })
}

/// Packed q tiles per (sequence, KV head): `seq_q · G` packed rows, 16 per tile.
pub fn packed_q_tiles(problem: &AttentionProblem) -> usize {
    (problem.seq_q * problem.q_heads_per_kv()).div_ceil(Q_TILE_ROWS)
}

/// Work units before splitting: (sequence, KV head, packed q tile). A routed launch takes only
/// sequences whose packed rows fit one tile (the kernel's `packed_q_tiles`).
pub fn units(problem: &AttentionProblem, route: Route) -> usize {
    let tiles = match route {
        Route::Every => packed_q_tiles(problem),
        Route::DecodeShaped => 1,
    };
    problem
        .batch
        .saturating_mul(problem.heads_kv)
        .saturating_mul(tiles)
}

/// Key tiles the longest unit visits at most (a window bounds it; the masks' exact ranges are
/// the kernel's).
pub fn max_key_tiles(problem: &AttentionProblem) -> usize {
    let mut keys = problem.seq_k + problem.modes.append.unwrap_or(0);
    if let Some(w) = problem.modes.key_window_left() {
        keys = keys.min(w.saturating_add(problem.seq_q).saturating_add(1));
    }
    keys.div_ceil(problem_tile_rows(problem))
}

/// An upper bound on the key tiles any unit visits: [`max_key_tiles`], plus the one tile a
/// window's range can straddle when it does not start on a tile boundary. Batch-invariant plans
/// size their split count by it, so it must never be short.
pub fn visited_tiles_bound(problem: &AttentionProblem) -> usize {
    let all =
        (problem.seq_k + problem.modes.append.unwrap_or(0)).div_ceil(problem_tile_rows(problem));
    let window_left = problem.modes.key_window_left().is_some();
    all.min(max_key_tiles(problem) + usize::from(window_left))
}

/// The chunk (in key tiles) of a unit that visits `tiles` key tiles, in a batch-invariant plan
/// with base chunk `base`: `base`, or as many as keep the unit within [`MAX_SPLITS`] chunks (the
/// combine's limit). Mirrors the kernel's `chunk_size`.
pub fn chunk_tiles_for(tiles: usize, base: usize) -> usize {
    let size = if tiles >= LONG_CHUNKS * base {
        base / 2
    } else {
        base
    };
    size.max(tiles.div_ceil(MAX_SPLITS)).max(1)
}

/// A unit of at least this many base chunks takes half chunks ([`chunk_tiles_for`]).
pub const LONG_CHUNKS: usize = 4;

/// The chunks of a unit that visits `tiles` key tiles (at least one). Mirrors `unit_splits`.
pub fn chunks_for(tiles: usize, base: usize) -> usize {
    tiles.div_ceil(chunk_tiles_for(tiles, base)).max(1)
}

/// The most chunks a unit of at most `bound` key tiles can have. The count is not monotone in
/// the length: it jumps where long units switch to half chunks, and it can drop where the
/// [`MAX_SPLITS`] cap starts to widen them. On each stretch between those points it grows with
/// the length, so the stretches' ends bound it.
pub fn max_chunks_within(bound: usize, base: usize) -> usize {
    let base = base.max(1);
    let half = (base / 2).max(1);
    [
        bound,
        bound.min(LONG_CHUNKS * base - 1),
        bound.min(MAX_SPLITS * half),
        bound.min(MAX_SPLITS * base),
    ]
    .into_iter()
    .map(|t| chunks_for(t, base))
    .max()
    .unwrap_or(1)
}

/// Head dims of the routed plans ([`routes_per_sequence`]): the decode builds that take a
/// head dim unpadded and have a persistent kernel beside them. Padded and wider dims keep the
/// persistent kernel alone for such batches: the portable kernel's routed build at 224 spills
/// (4 bytes, check-kernels), and no routed plan at those dims has run on a GPU.
pub const ROUTED_HEAD_DIMS: &[usize] = &[64, 128, 256];

/// Whether a batch-invariant problem takes the routed plan: varlen queries whose longest does
/// not fit one decode tile (shorter sequences may), at one of [`ROUTED_HEAD_DIMS`].
pub fn routes_per_sequence(problem: &AttentionProblem, cfg: &DecodeConfig) -> bool {
    problem.batch_invariant
        && cfg.mode == DecodeMode::Auto
        && problem.modes.packed_q.is_some()
        && routed_head_dims(problem)
        && build_dim(problem).is_some()
        && problem.q_heads_per_kv() <= Q_TILE_ROWS
        && !takes(problem, cfg)
}

/// Splits per unit when the environment does not force a count: enough to give every SM one CTA
/// (`sm_count / units`, rounded down so all start together), as long as a split keeps
/// [`MIN_TILES_PER_SPLIT`] key tiles; 1 when the units alone give every SM one.
///
/// Not more: a second CTA per SM (the shared memory allows two at D = 128) measured slower
/// every time, because one CTA's ring already keeps enough loads in flight and every extra split
/// adds its fixed cost (Q load, ring fill, partial write, one more combine input). H100,
/// 2026-11-25, commit 499c1a2: (1,32,8,1,32768) 52.4 µs at 16 splits, 56.8 at 33;
/// (16,64,8,1,8192) 174.5 µs at 1 split (128 CTAs), 183.0 at 2.
pub fn auto_splits(units: usize, key_tiles: usize, sm_count: usize) -> usize {
    if units == 0 || units >= sm_count {
        return 1;
    }
    (sm_count / units)
        .min(key_tiles / MIN_TILES_PER_SPLIT)
        .clamp(1, MAX_SPLITS)
}

/// CTAs per SM the default split count aims at ([`auto_splits`]'s `sm_count` times this): one
/// for 16-bit caches (measured above), two for e4m3. An e4m3 tile is half the bytes and twice
/// the work a byte (widening in registers), and one warp per scheduler cannot hide its
/// dependent chain: on the H200 at one CTA an SM the (1,32,8,1,32768) row took 1.14 µs a tile,
/// as long as the 16-bit cache's tile of twice the bytes (`docs/results/2026-11-29-fp8-kv-h200`).
pub fn ctas_per_sm(kv_bytes: usize) -> usize {
    if kv_bytes == KV_E4M3 {
        2
    } else {
        1
    }
}

/// The split count of `FLASHCORE_DECODE_SPLITS=sweep`: drawn from a hash of the problem, half
/// the time in 1..=[`MAX_SPLITS`] (counts past the key tiles leave splits empty, which the
/// combine must skip) and half the time in 1..=key tiles + 1 (the counts a real plan uses).
pub fn sweep_splits(problem: &AttentionProblem) -> usize {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    format!("{problem:?}").hash(&mut h);
    let h = h.finish() as usize;
    let range = if h.is_multiple_of(2) {
        MAX_SPLITS
    } else {
        (max_key_tiles(problem) + 1).min(MAX_SPLITS)
    };
    1 + (h / 2) % range
}

/// f32 words of workspace a plan with `splits > 1` needs: per (unit, split, packed row) an O row
/// of `head_dim` and one LSE (the kernel's `partial_row` / `partial_lse_base`).
pub fn workspace_f32(units: usize, splits: usize, head_dim: usize) -> Option<usize> {
    units
        .checked_mul(splits)?
        .checked_mul(Q_TILE_ROWS)?
        .checked_mul(head_dim + 1)
}

/// The plan of a persistent path (`name`, built up to `persistent_max_head_dim`) with the decode
/// kernel in front of it: a decode-shaped problem takes the decode plan alone; any other takes
/// `persistent`'s plan, with the decode-shaped sequences of its batch routed to the decode kernel
/// where it has some ([`routes_per_sequence`]).
pub(crate) fn or_persistent(
    name: &'static str,
    persistent_max_head_dim: usize,
    problem: &AttentionProblem,
    device: &DeviceInfo,
    persistent: impl FnOnce() -> Result<LaunchPlan, Unsupported>,
) -> Result<LaunchPlan, Unsupported> {
    let cfg = DecodeConfig::from_env().map_err(|e| Unsupported::new(name, e))?;
    let runs_here = runs_on(problem, device);
    if runs_here && takes(problem, &cfg) {
        return plan(name, problem, device, &cfg);
    }
    if problem.modes.kv_fp8.is_some() {
        return Err(Unsupported::new(
            name,
            format!(
                "an e4m3 KV cache is read by the decode kernel only (head dims {E4M3_HEAD_DIMS:?}, \
                 one head dim for Q, K and V, FLASHCORE_DECODE not off)"
            ),
        ));
    }
    let widest = problem.head_dim.max(problem.head_dim_v());
    if widest > persistent_max_head_dim {
        // Problems that are not decode-shaped were refused by the capabilities' check
        // (`decode_only`); this one is decode-shaped but the decode kernel does not take it here.
        return Err(Unsupported::new(
            name,
            format!(
                "head dim {widest}: the persistent kernel is built up to \
                 {persistent_max_head_dim}, and past it the decode kernel does not take this \
                 problem on this device (16-bit caches only, its ring within the shared memory, \
                 FLASHCORE_DECODE not off)"
            ),
        ));
    }
    let persistent = persistent()?;
    if runs_here && routes_per_sequence(problem, &cfg) {
        return routed_plan(name, persistent, problem, device, &cfg);
    }
    Ok(persistent)
}

/// Whether this plan takes the problem: a build for its head dims ([`build_dim`]), and (unless
/// forced) queries per KV head that fit one packed tile, or an e4m3 cache (only this kernel
/// reads one). A batch-invariant problem takes it by its queries only at the head dims where a
/// batch of longer queries would route such a sequence here too ([`routed_head_dims`]); at the
/// others such a batch runs every sequence in the persistent kernel, so a sequence alone does.
pub fn takes(problem: &AttentionProblem, cfg: &DecodeConfig) -> bool {
    build_dim(problem).is_some()
        && match cfg.mode {
            DecodeMode::Off => false,
            DecodeMode::Force => true,
            DecodeMode::Auto => {
                problem.modes.kv_fp8.is_some()
                    || (problem.seq_q * problem.q_heads_per_kv() <= Q_TILE_ROWS
                        && (!problem.batch_invariant || routed_head_dims(problem)))
            }
        }
}

/// Whether the problem's head dims are ones the routed plans take ([`ROUTED_HEAD_DIMS`], one
/// head dim for Q, K and V).
fn routed_head_dims(problem: &AttentionProblem) -> bool {
    ROUTED_HEAD_DIMS.contains(&problem.head_dim) && !problem.has_distinct_head_dim_v()
}

/// The split and (with more than one split) combine launches. `kernel` names the path asking,
/// for the reason of an `Unsupported`.
pub fn plan(
    kernel: &'static str,
    problem: &AttentionProblem,
    device: &DeviceInfo,
    cfg: &DecodeConfig,
) -> Result<LaunchPlan, Unsupported> {
    plan_route(kernel, problem, device, cfg, Route::Every)
}

/// A batch-invariant varlen plan ([`routes_per_sequence`]): `persistent`, the plan of the path
/// asking, takes the sequences whose queries do not fit one decode tile, and the decode launches
/// after it the others. Their workspaces sit side by side: the persistent kernel's counters at
/// the front, the decode partials from [`ROUTED_WORKSPACE_OFFSET`] on.
pub fn routed_plan(
    kernel: &'static str,
    mut persistent: LaunchPlan,
    problem: &AttentionProblem,
    device: &DeviceInfo,
    cfg: &DecodeConfig,
) -> Result<LaunchPlan, Unsupported> {
    if persistent.num_splits > 1 || persistent.workspace_counters > ROUTED_WORKSPACE_OFFSET {
        return Err(Unsupported::new(
            kernel,
            "a routed batch-invariant plan needs an unsplit persistent plan (forced splits?)",
        ));
    }
    for l in &mut persistent.launches {
        l.defines
            .push(("FC_SEQ_ROUTE".to_string(), "1".to_string()));
    }
    let decode = plan_route(kernel, problem, device, cfg, Route::DecodeShaped)?;
    persistent.launches.extend(decode.launches);
    persistent.workspace_f32 = if decode.workspace_f32 > 0 {
        ROUTED_WORKSPACE_OFFSET + decode.workspace_f32
    } else {
        persistent.workspace_f32
    };
    persistent.num_splits = decode.num_splits;
    Ok(persistent)
}

/// The split count of a batch-invariant plan: the most chunks any unit can have.
fn batch_invariant_splits(problem: &AttentionProblem, cfg: &DecodeConfig) -> (usize, usize) {
    let base = cfg.chunk_tiles.unwrap_or(BATCH_INVARIANT_CHUNK_TILES);
    (max_chunks_within(visited_tiles_bound(problem), base), base)
}

fn plan_route(
    kernel: &'static str,
    problem: &AttentionProblem,
    device: &DeviceInfo,
    cfg: &DecodeConfig,
    route: Route,
) -> Result<LaunchPlan, Unsupported> {
    let Some(d) = build_dim(problem) else {
        let (qk, v) = (problem.head_dim, problem.head_dim_v());
        return Err(Unsupported::new(
            kernel,
            if problem.modes.kv_fp8.is_some() {
                format!(
                    "an e4m3 cache is decoded at head dims {E4M3_HEAD_DIMS:?} with one head dim \
                     for Q, K and V, not ({qk}, {v})"
                )
            } else {
                format!(
                    "the decode kernel takes head dims that are multiples of 8 up to {}, not \
                     ({qk}, {v})",
                    HEAD_DIMS[HEAD_DIMS.len() - 1]
                )
            },
        ));
    };
    let kv_bytes = kv_bytes(problem);
    if kv_bytes == KV_E4M3 && device.compute_capability < (8, 9) {
        // cvt.rn.f16x2.e4m3x2, which widens the cache's bytes, exists from sm_89 on.
        return Err(Unsupported::new(
            kernel,
            format!(
                "an e4m3 KV cache needs sm_89 or newer (this device is sm_{}{})",
                device.compute_capability.0, device.compute_capability.1
            ),
        ));
    }
    let stages = cfg
        .stages
        .unwrap_or_else(|| stages_for(d, kv_bytes, device));
    let smem = smem_bytes_for(d, kv_bytes, stages);
    if smem > device.max_shared_memory_per_block_optin as usize {
        return Err(Unsupported::new(
            kernel,
            format!(
                "the decode kernel needs {smem} bytes of shared memory per block, the device \
                 allows {}",
                device.max_shared_memory_per_block_optin
            ),
        ));
    }
    let units = units(problem, route);
    let mut defines = vec![
        ("FC_HEAD_DIM".to_string(), d.to_string()),
        ("FC_DECODE_STAGES".to_string(), stages.to_string()),
        (
            "FC_DECODE_MIN_BLOCKS".to_string(),
            min_blocks(d).to_string(),
        ),
        (
            "FC_DECODE_KV_CACHE".to_string(),
            (kv_cache(problem, d) as u8).to_string(),
        ),
    ];
    if kv_bytes == KV_E4M3 {
        defines.push(("FC_KV_E4M3".to_string(), "1".to_string()));
    }
    if padded(problem, d) {
        defines.push(("FC_DECODE_PADDED".to_string(), "1".to_string()));
        if problem.has_distinct_head_dim_v() {
            defines.push((
                "FC_HEAD_DIM_V".to_string(),
                problem.head_dim_v().to_string(),
            ));
        }
    }
    let mut workspace = 0;
    let splits = if problem.batch_invariant {
        // The chunks are the kernel's; the split count only has to cover the most any unit
        // has. Halving it, as below, would change them: a plan that does not fit is refused.
        let (splits, base) = batch_invariant_splits(problem, cfg);
        defines.push(("FC_DECODE_CHUNK_TILES".to_string(), base.to_string()));
        if splits > 1 {
            workspace = workspace_f32(units, splits, d)
                .filter(|&ws| ws <= MAX_WORKSPACE_BYTES / 4 && units * splits <= i32::MAX as usize)
                .ok_or_else(|| {
                    Unsupported::new(
                        kernel,
                        format!(
                            "batch-invariant decode of {units} units x {splits} key chunks needs more \
                             than the {} MiB workspace limit; split the batch",
                            MAX_WORKSPACE_BYTES >> 20
                        ),
                    )
                })?;
        }
        splits
    } else {
        let mut splits = if cfg.sweep {
            sweep_splits(problem)
        } else {
            cfg.splits.unwrap_or_else(|| {
                auto_splits(
                    units,
                    max_key_tiles(problem),
                    device.sm_count as usize * ctas_per_sm(kv_bytes),
                )
            })
        };
        while splits > 1 {
            match workspace_f32(units, splits, d) {
                Some(ws)
                    if ws <= MAX_WORKSPACE_BYTES / 4 && units * splits <= i32::MAX as usize =>
                {
                    workspace = ws;
                    break;
                }
                _ => splits /= 2,
            }
        }
        splits
    };
    if cfg.trace {
        defines.push(("FC_DECODE_TRACE".to_string(), "1".to_string()));
    }
    if route == Route::DecodeShaped {
        defines.push(("FC_SEQ_ROUTE".to_string(), "2".to_string()));
        if workspace > 0 {
            defines.push((
                "FC_DECODE_WS_OFFSET".to_string(),
                ROUTED_WORKSPACE_OFFSET.to_string(),
            ));
        }
    }
    // Both kernels wait (griddepcontrol.wait) before their first global access; the
    // instructions exist from sm_90 on.
    let programmatic = device.compute_capability.0 >= 9 && cfg.programmatic_launch.unwrap_or(true);
    // With a combine between two calls' split kernels, this call's CTAs start once the last
    // call's splits are done and prefetch while only its combine runs (commit 2883df6: long row
    // −2.1 %, paged −2.4 %). Unsplit, they start beside the last call's CTAs, and their prefetch
    // was evicted by that kernel's stream before use ((16,64,8,1,8192) +1.3 %): not there.
    if cfg.prefetch.unwrap_or(programmatic && splits > 1) {
        defines.push(("FC_DECODE_PREFETCH".to_string(), "1".to_string()));
    }
    let mut launches = vec![KernelLaunch {
        defines: defines.clone(),
        dynamic_smem_bytes: reserved_smem(smem, kv_bytes, units * splits, device) as u32,
        programmatic_launch: programmatic,
        ..KernelLaunch::per_item(SOURCE, SPLIT_ENTRY, units * splits, WARPS * 32)
    }];
    if splits > 1 {
        launches.push(KernelLaunch {
            defines,
            programmatic_launch: programmatic,
            ..KernelLaunch::per_item(
                SOURCE,
                combine_entry(d, splits),
                combine_blocks(units, combine_rows(problem), d, splits),
                COMBINE_WARPS as u32 * 32,
            )
        });
    }
    Ok(LaunchPlan {
        launches,
        workspace_f32: workspace,
        workspace_counters: 0,
        num_splits: splits as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashcore_core::{Attention, KvStorage, Modes};

    fn decode_problem(b: usize, hq: usize, hkv: usize, sq: usize, sk: usize) -> AttentionProblem {
        AttentionProblem::new(b, hq, sq, 128).with_kv(hkv, sk)
    }

    #[test]
    fn e4m3_caches_take_the_decode_kernel_with_rings_of_their_own_depth() {
        let h100 = DeviceInfo::synthetic_h100();
        let e4m3 = |p: AttentionProblem| {
            p.with_modes(Modes {
                kv_fp8: Some(flashcore_core::KvScales::PerKvHead),
                ..Modes::default()
            })
        };
        // Decode-shaped, and chunked prefill (128 queries x 4 heads a KV head), which 16-bit
        // caches leave to the persistent kernel: only the decode kernel reads e4m3.
        for p in [
            decode_problem(1, 32, 8, 1, 4096),
            decode_problem(2, 32, 8, 128, 4096),
        ] {
            let p = e4m3(p);
            assert!(takes(&p, &DecodeConfig::default()));
            let plan = super::plan("t", &p, &h100, &DecodeConfig::default()).unwrap();
            let split = &plan.launches[0];
            assert!(split.defines.contains(&("FC_KV_E4M3".into(), "1".into())));
            assert!(split
                .defines
                .contains(&("FC_DECODE_STAGES".into(), "4".into())));
            // Two CTAs an SM: no reservation past the ring's own bytes.
            assert_eq!(split.dynamic_smem_bytes as usize, smem_bytes_for(128, 1, 4));
        }
        // Four slots up to 128, three at 256: two CTAs' rings fit an SM at every e4m3 build.
        assert_eq!(
            [64, 128, 256].map(|d| (stages_for(d, KV_HALF, &h100), stages_for(d, KV_E4M3, &h100))),
            [(4, 4), (3, 4), (3, 3)]
        );
        // An sm_90 SM's 228 KiB of shared memory, of which each CTA's share costs 1 KiB more.
        const SM90_SHARED_PER_SM: usize = 228 * 1024;
        for d in E4M3_HEAD_DIMS.iter().copied() {
            let smem = smem_bytes_for(d, KV_E4M3, stages_for(d, KV_E4M3, &h100));
            assert!(
                ctas_per_sm(KV_E4M3) * (smem + 1024) <= SM90_SHARED_PER_SM,
                "D = {d}: {smem} bytes a CTA"
            );
        }
        // Two CTAs an SM: twice the splits of the 16-bit cache's plan on a long sequence.
        let long = decode_problem(1, 32, 8, 1, 32768);
        let splits = |p: &AttentionProblem| {
            super::plan("t", p, &h100, &DecodeConfig::default())
                .unwrap()
                .num_splits
        };
        assert_eq!((splits(&long), splits(&e4m3(long.clone()))), (16, 33));
        // Off, the decode kernel is not asked, and nothing else reads e4m3.
        let off = DecodeConfig {
            mode: DecodeMode::Off,
            ..DecodeConfig::default()
        };
        assert!(!takes(&e4m3(decode_problem(1, 32, 8, 1, 4096)), &off));
        // The widening cvt is sm_89's.
        let e = super::plan(
            "t",
            &e4m3(decode_problem(1, 32, 8, 1, 4096)),
            &DeviceInfo::synthetic_sm86(),
            &DecodeConfig::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("sm_89"), "{e}");
        // Past 256 the reason names the head dims an e4m3 cache is decoded at.
        let e = super::plan(
            "t",
            &e4m3(AttentionProblem::new(1, 32, 1, 512).with_kv(8, 4096)),
            &h100,
            &DecodeConfig::default(),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("[64, 128, 256] with one head dim"),
            "{e}"
        );
        assert!(e.to_string().contains("not (512, 512)"), "{e}");
    }

    #[test]
    fn each_cache_kind_takes_a_build_of_its_own() {
        let h100 = DeviceInfo::synthetic_h100();
        let cfg = DecodeConfig::default();
        // (Other modes, e4m3 among them, kept.)
        let paged = |p: AttentionProblem, block_size: usize| p.with_paged_cache(block_size);
        let kind = |p: &AttentionProblem| {
            let plan = super::plan("t", p, &h100, &cfg).unwrap();
            let kinds: Vec<_> = plan
                .launches
                .iter()
                .map(|l| {
                    l.defines
                        .iter()
                        .find(|(k, _)| k == "FC_DECODE_KV_CACHE")
                        .map(|(_, v)| v.clone())
                        .unwrap()
                })
                .collect();
            // The combine is built from the same module: the same define.
            assert!(kinds.iter().all(|k| *k == kinds[0]), "{kinds:?}");
            kinds[0].clone()
        };
        let fp8 = |mut p: AttentionProblem| {
            p.modes.kv_fp8 = Some(flashcore_core::KvScales::PerKvHead);
            p
        };
        // Split (one sequence) and not (a full batch), 16-bit and e4m3 alike.
        for p in [
            decode_problem(1, 32, 8, 1, 32768),
            decode_problem(32, 32, 8, 1, 4096),
        ] {
            for p in [p.clone(), fp8(p)] {
                assert_eq!(paged(p.clone(), 16).modes.kv_fp8, p.modes.kv_fp8);
                assert_eq!(kind(&p), "0");
                assert_eq!(kind(&paged(p.clone(), 64)), "1");
                assert_eq!(kind(&paged(p.clone(), 256)), "1");
                assert_eq!(kind(&paged(p.clone(), 16)), "2");
                assert_eq!(kind(&paged(p.clone(), 96)), "2");
            }
        }
        // Packed keys are strided; at D = 512 the key tile is 32 rows, whole in 32-row pages.
        let packed = decode_problem(2, 32, 8, 1, 4096).with_modes(Modes {
            kv: KvStorage::Packed { total_k: 8000 },
            ..Modes::default()
        });
        assert_eq!(kind(&packed), "0");
        let wide = AttentionProblem::new(1, 16, 1, 512).with_kv(16, 4096);
        assert_eq!(kind(&paged(wide.clone(), 32)), "1");
        assert_eq!(kind(&paged(wide, 16)), "2");
        assert_eq!(
            kv_cache(&paged(decode_problem(1, 8, 8, 1, 512), 32), 128),
            KvCache::PageGroups
        );
    }

    #[test]
    fn shared_memory_and_occupancy_on_the_h100() {
        let h100 = DeviceInfo::synthetic_h100();
        assert_eq!(smem_bytes(128, 3), 98304 + 4096 + 512);
        assert_eq!(smem_bytes(64, 4), 65536 + 2048 + 512);
        assert_eq!((stages(128, &h100), stages(64, &h100)), (3, 4));
        // sm_86: 99 KiB opt-in: D = 128 drops to 2 stages (69 KiB, one block), D = 64 to 3
        // (51 KiB, one block).
        let sm86 = DeviceInfo::synthetic_sm86();
        assert_eq!((stages(128, &sm86), stages(64, &sm86)), (2, 4));
        let p = AttentionProblem::new(1, 32, 1, 128).with_kv(8, 4096);
        let plan = super::plan("t", &p, &sm86, &DecodeConfig::default()).unwrap();
        assert!(plan.launches[0].dynamic_smem_bytes <= sm86.max_shared_memory_per_block_optin);
        // A forced depth: 6 stages at D = 128 fit the H100 (one CTA an SM), not sm_86.
        let six = DecodeConfig {
            stages: Some(6),
            ..DecodeConfig::default()
        };
        let plan = super::plan("t", &p, &h100, &six).unwrap();
        assert_eq!(
            plan.launches[0].dynamic_smem_bytes as usize,
            smem_bytes(128, 6)
        );
        assert!(plan.launches[0]
            .defines
            .contains(&("FC_DECODE_STAGES".to_string(), "6".to_string())));
        let e = super::plan("t", &p, &sm86, &six).unwrap_err();
        assert!(format!("{e}").contains("shared memory"), "{e}");
    }

    #[test]
    fn head_dim_256_decodes_one_cta_an_sm_where_its_ring_fits() {
        let h100 = DeviceInfo::synthetic_h100();
        let sm86 = DeviceInfo::synthetic_sm86();
        assert_eq!(smem_bytes(256, 3), 196608 + 8192 + 512);
        assert_eq!((stages(256, &h100), min_blocks(256)), (3, 1));
        let p = AttentionProblem::new(8, 32, 1, 256).with_kv(8, 8192);
        assert!(runs_on(&p, &h100) && !runs_on(&p, &sm86));
        // 192 runs in the 256 build, so not on sm_86 either.
        let p192 = AttentionProblem::new(8, 32, 1, 192).with_kv(8, 8192);
        assert!(runs_on(&p192, &h100) && !runs_on(&p192, &sm86));
        let plan = crate::PersistentHopper.plan(&p, &h100).unwrap();
        assert_eq!(plan.launches[0].entry, SPLIT_ENTRY);
        assert!(plan.launches[0]
            .defines
            .contains(&("FC_HEAD_DIM".to_string(), "256".to_string())));
        // Where the ring does not fit, the persistent kernel takes the decode row.
        let plan = crate::PersistentPortable.plan(&p, &sm86).unwrap();
        assert_ne!(plan.launches[0].entry, SPLIT_ENTRY);
    }

    /// Every multiple of 8 up to 256 and V's own head dim run padded in the next build up
    /// (FlashAttention-2's rounding); an e4m3 cache only at a build's own head dim.
    #[test]
    fn padded_head_dims_take_the_next_build() {
        let h100 = DeviceInfo::synthetic_h100();
        let cfg = DecodeConfig::default();
        let define = |plan: &LaunchPlan, k: &str| {
            plan.launches[0]
                .defines
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
        };
        for (d, dv, build) in [
            (8, 8, 64),
            (32, 32, 64),
            (64, 64, 64),
            (72, 72, 128),
            (96, 96, 128),
            (128, 128, 128),
            (160, 160, 256),
            (192, 192, 256),
            (224, 224, 256),
            (256, 256, 256),
            (264, 264, 512),
            (512, 512, 512),
            (512, 128, 512),
            (192, 128, 256),
            (128, 64, 128),
            (64, 128, 128),
            (96, 64, 128),
        ] {
            let p = AttentionProblem::new(2, 32, 1, d)
                .with_kv(8, 4096)
                .with_head_dim_v(dv);
            assert_eq!(build_dim(&p), Some(build), "({d}, {dv})");
            assert!(takes(&p, &cfg) && runs_on(&p, &h100), "({d}, {dv})");
            let plan = super::plan("t", &p, &h100, &cfg).unwrap();
            assert_eq!(define(&plan, "FC_HEAD_DIM"), Some(build.to_string()));
            let pad = d != build || dv != build;
            assert_eq!(
                define(&plan, "FC_DECODE_PADDED").is_some(),
                pad,
                "({d}, {dv})"
            );
            assert_eq!(
                define(&plan, "FC_HEAD_DIM_V"),
                (dv != d).then(|| dv.to_string()),
                "({d}, {dv})"
            );
            // Smem and the partials are the build's: its tiles, its rows.
            assert_eq!(
                plan.launches[0].dynamic_smem_bytes as usize,
                reserved_smem(
                    smem_bytes(build, stages(build, &h100)),
                    KV_HALF,
                    plan.launches[0].grid.0 as usize,
                    &h100
                )
            );
            if plan.num_splits > 1 {
                assert_eq!(
                    plan.workspace_f32,
                    workspace_f32(2 * 8, plan.num_splits as usize, build).unwrap()
                );
            }
            // Both paths route the decode row here.
            for kernel in [
                &crate::PersistentHopper as &dyn flashcore_core::Attention,
                &crate::PersistentPortable,
            ] {
                let plan = kernel.plan(&p, &h100);
                let plan = plan.unwrap_or_else(|e| panic!("({d}, {dv}) {}: {e}", kernel.name()));
                assert_eq!(plan.launches[0].entry, SPLIT_ENTRY, "({d}, {dv})");
            }
        }
        // A batch-invariant varlen batch whose longest query does not fit a decode tile is
        // routed per sequence only at the unpadded builds up to 256.
        let bi = DecodeConfig::default();
        for (d, routed) in [
            (64, true),
            (128, true),
            (256, true),
            (96, false),
            (224, false),
        ] {
            let p = AttentionProblem::new(3, 8, 100, d)
                .with_kv(2, 300)
                .with_modes(Modes {
                    packed_q: Some(103),
                    ..Modes::default()
                });
            let mut p = p;
            p.batch_invariant = true;
            assert_eq!(routes_per_sequence(&p, &bi), routed, "D={d}");
        }
        // Past 256, a problem that is not decode-shaped is refused by the Hopper path, by name;
        // the portable path takes it in its V-blocked 512 build.
        let prefill = AttentionProblem::new(1, 8, 512, 512).with_kv(8, 512);
        let e = crate::PersistentHopper.plan(&prefill, &h100).unwrap_err();
        assert!(e.to_string().contains("decode-shaped"), "{e}");
        let l = crate::PersistentPortable.plan(&prefill, &h100).unwrap();
        assert_eq!(l.launches[0].source, "gen5_persistent_portable.cu");
        // Decode-shaped at 512 where the 512 ring does not fit (sm_86's 99 KiB): refused by name,
        // by the Hopper path's bound, and by the portable 512 build's shared memory.
        let sm86 = DeviceInfo::synthetic_sm86();
        let wide_decode = AttentionProblem::new(1, 8, 1, 512).with_kv(8, 512);
        let e = crate::PersistentPortable
            .plan(&wide_decode, &sm86)
            .unwrap_err();
        assert!(e.to_string().contains("shared memory"), "{e}");
        let e = or_persistent("t", PERSISTENT_MAX_HEAD_DIM, &wide_decode, &sm86, || {
            unreachable!("past the bound")
        })
        .unwrap_err();
        assert!(e.to_string().contains("decode kernel does not take"), "{e}");
        // Past the widest build, or not a multiple of 8: no build.
        for (d, dv) in [(520, 520), (512, 520), (100, 100), (128, 68)] {
            let p = AttentionProblem::new(1, 8, 1, d)
                .with_kv(8, 128)
                .with_head_dim_v(dv);
            assert_eq!(build_dim(&p), None, "({d}, {dv})");
            assert!(!takes(&p, &cfg));
            let e = super::plan("t", &p, &h100, &cfg).unwrap_err();
            assert!(e.to_string().contains("multiples of 8 up to 512"), "{e}");
        }
        // e4m3 caches: the build dims exactly, one head dim.
        let e4m3 = |d: usize, dv: usize| {
            AttentionProblem::new(1, 8, 1, d)
                .with_kv(8, 128)
                .with_head_dim_v(dv)
                .with_modes(Modes {
                    kv_fp8: Some(flashcore_core::KvScales::PerTensor),
                    ..Modes::default()
                })
        };
        assert_eq!(build_dim(&e4m3(128, 128)), Some(128));
        for (d, dv) in [(96, 96), (192, 192), (192, 128), (512, 512)] {
            assert_eq!(build_dim(&e4m3(d, dv)), None);
            let e = super::plan("t", &e4m3(d, dv), &h100, &cfg).unwrap_err();
            assert!(e.to_string().contains("e4m3 cache"), "{e}");
        }
    }

    #[test]
    fn splits_give_every_sm_one_cta() {
        // H100: 132 SMs.
        let h = |units, tiles| auto_splits(units, tiles, 132);
        assert_eq!(h(8, 512), 16); // (1,32,8,1,32768): 128 CTAs, 32 tiles each
        assert_eq!(h(64, 128), 2); // (8,32,8,1,8192)
        assert_eq!(h(128, 128), 1); // (16,64,8,1,8192)
        assert_eq!(h(256, 64), 1); // (32,32,8,1,4096): the units fill it
        assert_eq!(h(8, 32), 8); // B = 1, 2048 keys: 4 tiles each
        assert_eq!(h(8, 3), 1); // too short to split
        assert_eq!(h(0, 100), 1);
        assert_eq!(h(1, 100_000), 132);
    }

    #[test]
    fn decode_rows_are_planned_with_splits_and_a_combine() {
        let dev = DeviceInfo::synthetic_h100();
        let cfg = DecodeConfig::default();
        let p = decode_problem(1, 32, 8, 1, 32768).with_dtype(flashcore_core::DType::Bf16);
        assert!(takes(&p, &cfg));
        let plan = super::plan("t", &p, &dev, &cfg).unwrap();
        assert_eq!(plan.num_splits, 16);
        assert_eq!(plan.launches.len(), 2);
        assert_eq!(plan.launches[0].grid.0, 8 * 16);
        assert_eq!(plan.launches[0].entry, SPLIT_ENTRY);
        // A warp per packed row (G = 4) of each of the 8 units: 16 splits' loads of both of its
        // 64-column slices fit a lane's 32.
        assert_eq!(plan.launches[1].entry, COMBINE_ROWS_ENTRY);
        assert_eq!(plan.launches[1].grid.0, (8 * 4 / 4) as u32);
        assert_eq!(plan.workspace_f32, 8 * 16 * 16 * 129);
        assert_eq!(plan.workspace_counters, 0);
        // Both launched programmatically on sm_90, neither below it nor when turned off.
        assert!(plan.launches.iter().all(|l| l.programmatic_launch));
        let sm86 = DeviceInfo::synthetic_sm86();
        let plan86 = super::plan("t", &p, &sm86, &cfg).unwrap();
        assert!(plan86.launches.iter().all(|l| !l.programmatic_launch));
        let off = DecodeConfig::from_lookup(|k| (k == "FLASHCORE_DECODE_PDL").then(|| "0".into()))
            .unwrap();
        let plan_off = super::plan("t", &p, &dev, &off).unwrap();
        assert!(plan_off.launches.iter().all(|l| !l.programmatic_launch));
        // The prefetch before the wait: programmatic split plans only.
        let prefetch = ("FC_DECODE_PREFETCH".to_string(), "1".to_string());
        let p16 = decode_problem(1, 32, 8, 1, 32768);
        let has_prefetch = |plan: &LaunchPlan| plan.launches[0].defines.contains(&prefetch);
        assert!(has_prefetch(&super::plan("t", &p16, &dev, &cfg).unwrap()));
        assert!(!has_prefetch(&plan86));
        assert!(!has_prefetch(&plan_off));
        let no_prefetch =
            DecodeConfig::from_lookup(|k| (k == "FLASHCORE_DECODE_PREFETCH").then(|| "0".into()))
                .unwrap();
        assert!(!has_prefetch(
            &super::plan("t", &p16, &dev, &no_prefetch).unwrap()
        ));
        // The units fill the GPU: one split, no combine, no workspace, no prefetch.
        let p = decode_problem(32, 32, 8, 1, 4096);
        let plan = super::plan("t", &p, &dev, &cfg).unwrap();
        assert_eq!(
            (plan.num_splits, plan.launches.len(), plan.workspace_f32),
            (1, 1, 0)
        );
        assert!(!has_prefetch(&plan));
    }

    #[test]
    fn the_timeline_is_built_only_when_asked_for() {
        let dev = DeviceInfo::synthetic_h100();
        let p = decode_problem(1, 32, 8, 1, 32768);
        let trace = ("FC_DECODE_TRACE".to_string(), "1".to_string());
        let traced = |cfg: &DecodeConfig| {
            super::plan("t", &p, &dev, cfg)
                .unwrap()
                .launches
                .iter()
                .map(|l| l.defines.contains(&trace))
                .collect::<Vec<_>>()
        };
        assert_eq!(traced(&DecodeConfig::default()), [false, false]);
        let on = DecodeConfig::from_lookup(|k| (k == "FLASHCORE_DECODE_TRACE").then(|| "1".into()))
            .unwrap();
        assert_eq!(traced(&on), [true, true]);
        assert!(DecodeConfig::from_lookup(
            |k| (k == "FLASHCORE_DECODE_TRACE").then(|| "always".into())
        )
        .is_err());
    }

    #[test]
    fn combine_takes_a_warp_per_row_slice() {
        // Decode packs G rows a unit; speculative and chunked rows fill the tile's 16.
        assert_eq!(combine_rows(&decode_problem(1, 32, 8, 1, 32768)), 4);
        assert_eq!(combine_rows(&decode_problem(8, 32, 8, 4, 8192)), 16);
        assert_eq!(combine_rows(&decode_problem(2, 64, 8, 128, 4096)), 16);
        assert_eq!(combine_rows(&decode_problem(1, 8, 8, 1, 4096)), 1);
        // Slices of 64 columns, four warps a block, rounded up, where the splits are many.
        assert_eq!(combine_blocks(8, 4, 128, 17), 16);
        assert_eq!(combine_blocks(8, 4, 64, 33), 8);
        assert_eq!(combine_blocks(1, 1, 512, 5), 2);
        assert_eq!(combine_blocks(3, 1, 64, 2), 1);
        // Few splits: a warp takes every slice of its row, as long as a lane's 32 loads hold them.
        assert_eq!(combine_slices(256, 2), 4);
        assert_eq!(combine_slices(256, 8), 4);
        assert_eq!(combine_slices(256, 9), 1);
        assert_eq!(combine_slices(128, 16), 2);
        assert_eq!(combine_slices(512, 4), 8);
        assert_eq!(combine_slices(512, 5), 1);
        assert_eq!(combine_slices(64, 2), 1);
        assert_eq!(combine_blocks(64, 16, 256, 2), 256); // the speculative row at 256
        assert_eq!(combine_blocks(64, 16, 256, 9), 1024);
        assert_eq!(combine_blocks(8, 4, 128, 4), 8);
        // A whole row takes its own entry; a slice keeps the one it had.
        assert_eq!(combine_entry(256, 2), COMBINE_ROWS_ENTRY);
        assert_eq!(combine_entry(256, 9), COMBINE_ENTRY);
        assert_eq!(combine_entry(64, 2), COMBINE_ENTRY);
        // The plan launches that grid, for the build's head dim (96 runs in the 128 build).
        let dev = DeviceInfo::synthetic_h100();
        for splits in [4, 20] {
            let cfg = DecodeConfig::from_lookup(|k| {
                (k == "FLASHCORE_DECODE_SPLITS").then(|| splits.to_string())
            })
            .unwrap();
            for (p, rows, build) in [
                (decode_problem(2, 32, 8, 1, 4096), 4, 128),
                (
                    AttentionProblem::new(2, 32, 3, 96).with_kv(8, 4096),
                    12,
                    128,
                ),
                (
                    AttentionProblem::new(1, 16, 1, 512).with_kv(16, 4096),
                    1,
                    512,
                ),
            ] {
                let plan = super::plan("t", &p, &dev, &cfg).unwrap();
                // Four splits: a warp a row at 128 and 512; twenty: a warp a slice.
                let entry = if splits == 4 {
                    COMBINE_ROWS_ENTRY
                } else {
                    COMBINE_ENTRY
                };
                assert_eq!(plan.launches[1].entry, entry, "{p:?}");
                let units = p.batch * p.heads_kv;
                assert_eq!(
                    plan.launches[1].grid.0 as usize,
                    combine_blocks(units, rows, build, splits),
                    "{p:?}"
                );
                assert_eq!(plan.launches[1].block.0 as usize, COMBINE_WARPS * 32);
            }
        }
    }

    #[test]
    fn grids_of_one_cta_an_sm_reserve_over_half_the_shared_memory() {
        let h100 = DeviceInfo::synthetic_h100();
        let optin = h100.max_shared_memory_per_block_optin as usize;
        let sms = h100.sm_count as usize;
        let ring = smem_bytes(128, 3);
        assert!(2 * ring <= optin, "two 16-bit CTAs fit an SM at D = 128");
        // A 16-bit grid that fits the SMs once: over half, so one CTA an SM.
        assert_eq!(reserved_smem(ring, KV_HALF, sms, &h100), optin / 2 + 1);
        assert_eq!(reserved_smem(ring, KV_HALF, 1, &h100), optin / 2 + 1);
        // More CTAs than SMs, e4m3 (two an SM on purpose), or a ring already past half: as is.
        assert_eq!(reserved_smem(ring, KV_HALF, sms + 1, &h100), ring);
        assert_eq!(reserved_smem(ring, KV_E4M3, sms, &h100), ring);
        let d256 = smem_bytes(256, 3);
        assert_eq!(reserved_smem(d256, KV_HALF, sms, &h100), d256);
        // The plans: the long row's 128 CTAs reserve; a full batch's 256 do not.
        let cfg = DecodeConfig::default();
        let smem_of = |p: &AttentionProblem| {
            super::plan("t", p, &h100, &cfg).unwrap().launches[0].dynamic_smem_bytes as usize
        };
        assert_eq!(smem_of(&decode_problem(1, 32, 8, 1, 32768)), optin / 2 + 1);
        assert_eq!(smem_of(&decode_problem(32, 32, 8, 1, 4096)), ring);
    }

    #[test]
    fn gqa_packing_decides_what_counts_as_decode() {
        let cfg = DecodeConfig::default();
        // 4 query heads per KV head: up to 4 queries per sequence fit 16 packed rows.
        assert!(takes(&decode_problem(8, 32, 8, 4, 8192), &cfg));
        assert!(!takes(&decode_problem(8, 32, 8, 5, 8192), &cfg));
        assert!(!takes(&decode_problem(4, 32, 8, 128, 8192), &cfg));
        // MHA: 16 queries.
        assert!(takes(&decode_problem(8, 32, 32, 16, 8192), &cfg));
        // Head dims no build holds never.
        let p = AttentionProblem::new(1, 1, 1, 520);
        assert!(!takes(&p, &cfg));
        let forced = DecodeConfig {
            mode: DecodeMode::Force,
            splits: None,
            sweep: false,
            ..DecodeConfig::default()
        };
        assert!(takes(&decode_problem(4, 32, 8, 128, 8192), &forced));
        let off = DecodeConfig {
            mode: DecodeMode::Off,
            splits: None,
            sweep: false,
            ..DecodeConfig::default()
        };
        assert!(!takes(&decode_problem(8, 32, 8, 1, 8192), &off));
    }

    #[test]
    fn a_window_bounds_the_key_tiles() {
        let mut p = decode_problem(1, 32, 8, 1, 32768);
        assert_eq!(max_key_tiles(&p), 512);
        p.modes = Modes {
            window_left: Some(1000),
            ..Modes::default()
        };
        assert_eq!(max_key_tiles(&p), 1002usize.div_ceil(64));
        // mm_prefix_ranges reach past the window: every key tile may be visited.
        p.modes.mm_prefix = Some(1);
        assert_eq!(max_key_tiles(&p), 512);
        assert_eq!(visited_tiles_bound(&p), 512);
        p.modes = Modes {
            kv: KvStorage::Dense,
            seqused_k: true,
            append: Some(1),
            ..Modes::default()
        };
        assert_eq!(max_key_tiles(&p), 32769usize.div_ceil(64));
    }

    #[test]
    fn forced_splits_and_the_workspace_cap() {
        let dev = DeviceInfo::synthetic_h100();
        let cfg = DecodeConfig {
            mode: DecodeMode::Auto,
            splits: Some(7),
            sweep: false,
            ..DecodeConfig::default()
        };
        let p = decode_problem(2, 4, 2, 1, 100);
        let plan = super::plan("t", &p, &dev, &cfg).unwrap();
        assert_eq!(plan.num_splits, 7);
        assert_eq!(plan.workspace_f32, workspace_f32(4, 7, 128).unwrap());
        // A forced count whose workspace would pass 1 GiB is halved until it fits.
        let big = decode_problem(4096, 64, 64, 1, 100);
        let cfg = DecodeConfig {
            mode: DecodeMode::Auto,
            splits: Some(256),
            sweep: false,
            ..DecodeConfig::default()
        };
        let plan = super::plan("t", &big, &dev, &cfg).unwrap();
        assert!(plan.workspace_f32 * 4 <= MAX_WORKSPACE_BYTES);
        assert!(plan.num_splits < 256 && plan.num_splits >= 1);
    }

    #[test]
    fn the_environment_is_parsed_strictly() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            DecodeConfig::from_lookup(env(&[])).unwrap(),
            DecodeConfig::default()
        );
        let c = DecodeConfig::from_lookup(env(&[
            ("FLASHCORE_DECODE", "force"),
            ("FLASHCORE_DECODE_SPLITS", " 5 "),
        ]))
        .unwrap();
        assert_eq!((c.mode, c.splits), (DecodeMode::Force, Some(5)));
        assert_eq!(
            DecodeConfig::from_lookup(env(&[("FLASHCORE_DECODE", "off")]))
                .unwrap()
                .mode,
            DecodeMode::Off
        );
        for bad in ["0", "257", "x", "-1", ""] {
            let e = DecodeConfig::from_lookup(|k| {
                (k == "FLASHCORE_DECODE_SPLITS").then(|| bad.to_string())
            })
            .unwrap_err();
            assert!(e.contains("FLASHCORE_DECODE_SPLITS"), "{e}");
        }
        assert!(DecodeConfig::from_lookup(env(&[("FLASHCORE_DECODE", "sometimes")])).is_err());
        assert!(DecodeConfig::from_lookup(env(&[("FLASHCORE_DECODE_PDL", "2")])).is_err());
        assert!(DecodeConfig::from_lookup(env(&[("FLASHCORE_DECODE_PREFETCH", "x")])).is_err());
        assert_eq!(
            DecodeConfig::from_lookup(env(&[("FLASHCORE_DECODE_STAGES", "6")]))
                .unwrap()
                .stages,
            Some(6)
        );
        for bad in ["1", "9", "two"] {
            let e = DecodeConfig::from_lookup(|k| {
                (k == "FLASHCORE_DECODE_STAGES").then(|| bad.to_string())
            })
            .unwrap_err();
            assert!(e.contains("FLASHCORE_DECODE_STAGES"), "{e}");
        }
        assert!(
            DecodeConfig::from_lookup(env(&[("FLASHCORE_DECODE_SPLITS", "sweep")]))
                .unwrap()
                .sweep
        );
    }

    #[test]
    fn the_sweep_covers_one_to_the_maximum_and_is_reproducible() {
        let mut seen = std::collections::BTreeSet::new();
        for sk in 1..600 {
            let p = AttentionProblem::new(1 + sk % 3, 8, 1 + sk % 5, 128).with_kv(2, 7 * sk);
            let n = sweep_splits(&p);
            assert!((1..=MAX_SPLITS).contains(&n));
            assert_eq!(n, sweep_splits(&p));
            seen.insert(n);
        }
        assert!(
            seen.contains(&1) && *seen.last().unwrap() > MAX_SPLITS / 2,
            "{seen:?}"
        );
        let cfg = DecodeConfig {
            mode: DecodeMode::Force,
            splits: None,
            sweep: true,
            ..DecodeConfig::default()
        };
        let p = AttentionProblem::new(2, 8, 1, 128).with_kv(2, 4000);
        let plan = super::plan("t", &p, &DeviceInfo::synthetic_h100(), &cfg).unwrap();
        assert_eq!(plan.num_splits as usize, sweep_splits(&p));
    }
}
