//! The rules a plan follows where neither the caller nor the environment chooses: key splits
//! between warpgroups and CTAs, three consumer warpgroups, split-KV counts, the L2 section and
//! the spread page producer. Each cites the measurement it rests on.

use flashcore_core::launch::paged_box_rows;
use flashcore_core::{AttentionProblem, DeviceInfo, KvStorage};

use super::smem::{BLOCK_N, WARPGROUP_ROWS};

/// Paged tiles whose TMA boxes hold fewer rows than this (block sizes 16, 32, 48, ... at 128-key
/// tiles: eight boxes or more per K or V tile) get a build whose four producer warps share the
/// boxes (`FC_HOPPER_SPREAD_PAGES`). One warp issuing them lane after lane was the bottleneck of
/// 16-row pages; the loop of its own is a build of its own because it made the other modes
/// builds' chunked prefill 4-5 % slower (H100, 2026-11-26, commit 658b48a).
pub const SPREAD_BELOW_BOX_ROWS: u32 = 64;

/// K/V bytes the tile scheduler keeps hot at once (its heads per L2 section, used under causal
/// masking): a quarter of the device's L2, within 4-64 MiB. A quarter (12 MiB on the H100) ran
/// the causal ladder rows 1-4 % faster than half, which the scheduler had used until then; 6, 50
/// and 100 MiB were slower (H100, 2026-11-26, commit 4346661, two passes).
pub fn default_l2_section_bytes(device: &DeviceInfo) -> u64 {
    (device.l2_bytes as u64 / 4).clamp(4 << 20, 64 << 20)
}

pub(super) fn spreads_page_boxes(problem: &AttentionProblem, block_n: usize) -> bool {
    match problem.modes.kv {
        KvStorage::Paged { block_size, .. } => {
            paged_box_rows(block_size as u32, block_n as u32) < SPREAD_BELOW_BOX_ROWS
        }
        _ => false,
    }
}

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

/// K/V ring depth of the key-split build at D = 64 (unless `FLASHCORE_HOPPER_STAGES` asks for
/// another than the default 2).
pub const KEY_SPLIT_STAGES_D64: usize = 4;

/// A sequence's 64-row items (over all its query heads) up to which a batch-invariant plan gives
/// it the key-split warpgroups, with at most [`KEY_SPLIT_SEQ_KEYS`] keys. The mode may not look at
/// the batch or the SM count, so the rule asks what the default asks of a batch of one (its items
/// fitting half the SMs, [`default_wg_key_split`]) with the SM count fixed at 128: a sequence gets
/// the same bits alone and in any batch, and the GPU of the plan moves none. What it costs where
/// the batch is large: each K/V tile then serves 64 rows instead of 128 (H200, 2026-11-29,
/// docs/results/2026-11-29-key-split-bi-h200: a batch of 64 (8 heads, 512 rows, D = 64)
/// sequences 1.31x the default; with 8192-key caches and no key bound, chunked prefill ran
/// 1.40-1.78x, hence [`KEY_SPLIT_SEQ_KEYS`]).
pub const KEY_SPLIT_SEQ_ITEMS: usize = 64;

/// Keys up to which a batch-invariant plan gives a sequence the key-split warpgroups (eight
/// 128-key tiles): past it a large batch's doubled K/V traffic outweighs what a small one gains.
pub const KEY_SPLIT_SEQ_KEYS: usize = 1024;

/// Whether a batch-invariant plan sums a sequence of `len_q` queries over `len_k` keys with the
/// key-split warpgroups ([`KEY_SPLIT_SEQ_ITEMS`], [`KEY_SPLIT_SEQ_KEYS`]).
pub fn key_split_shaped(len_q: usize, len_k: usize, heads_q: usize) -> bool {
    len_q <= key_split_max_rows(heads_q) && len_k <= KEY_SPLIT_SEQ_KEYS
}

/// The longest query count [`key_split_shaped`] takes at `heads_q` query heads (0 past 64).
pub fn key_split_max_rows(heads_q: usize) -> usize {
    KEY_SPLIT_SEQ_ITEMS.checked_div(heads_q).unwrap_or(0) * WARPGROUP_ROWS
}

/// Key tiles an item needs before its chain outweighs the early start of the next call
/// ([`default_wg_key_split`]).
pub const KEY_SPLIT_LONG_ITEM_TILES: usize = 8;

/// Whether a dense problem splits its keys between the warpgroups when the environment does not
/// choose. Its 64-row items must fit one round of the SMs; then either they leave half the SMs
/// free, where the next call's CTAs start early under programmatic launch, or (D = 64, 4-deep
/// ring) they are long enough that halving their chain outweighs that start. H100, 2026-11-26,
/// commit ecfd9dc (its first build, graph replay, µs non-causal / causal, off -> on): (1,8,512,64)
/// 6.84 / 7.26 -> 5.05 / 5.00, (1,8,128,64) 3.43 / 3.94 -> 3.13 / 3.55, (1,8,512,128) 10.83 /
/// 8.93 -> 7.52 / 7.01; with 128 CTAs (1,8,1024,64) 11.30 / 11.62 -> 9.49 / 7.80 and
/// (1,4,2048,64) 19.91 / 20.26 -> 14.18 / 12.31, but (1,16,512,64), 4 tiles, 7.00 / 7.38 -> 7.28
/// / 5.85 and (1,8,1024,128), 2 slots, 16.87 / 14.98 -> 16.78 / 14.54. The final build's numbers:
/// `docs/generations/gen5-persistent.md`, *Measured*.
pub fn default_wg_key_split(problem: &AttentionProblem, sm_count: usize) -> bool {
    let (items, key_tiles) = key_split_items(problem);
    items <= sm_count / 2
        || (items <= sm_count && problem.head_dim == 64 && key_tiles >= KEY_SPLIT_LONG_ITEM_TILES)
}

/// Whether a problem that takes the key-split warpgroups also splits its keys between the two
/// CTAs of a cluster when the environment does not choose: where a cluster for each 64-row item
/// fits one round of the SMs and the items are long ([`KEY_SPLIT_LONG_ITEM_TILES`] key tiles or
/// more). H100, 2026-11-27, commit a9e16a5 (graph replay, µs non-causal / causal, off -> on):
/// (1,4,1024,64), 8 tiles, 7.25 / 7.39 -> 6.28 / 5.95; but with 4 tiles or fewer the exchange and
/// the SMs it takes from the next call's early start cost what the halved chain saves: the mission
/// shape (1,8,512,64) 4.93 / 4.89-4.90 -> 4.98-5.00 / 4.89-4.90, (1,8,512,128) 6.30 / 6.37 -> 6.54
/// / 6.36, (1,8,128,64) 3.01 / 3.44 -> 3.57 / 3.93.
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
/// (docs/results/2026-11-26-three-warpgroups-h100). Few rounds leave the quantization of the
/// rounds and of the last q tile (192 rows against 128) uncovered.
pub fn default_consumer_wgs(problem: &AttentionProblem, sm_count: usize) -> usize {
    let items = problem.batch * problem.heads_q * problem.seq_q.div_ceil(3 * WARPGROUP_ROWS);
    if items >= THREE_WGS_MIN_ROUNDS * sm_count {
        3
    } else {
        2
    }
}
