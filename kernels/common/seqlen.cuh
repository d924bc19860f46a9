// Block info (FlashAttention's BlockInfo + mask bounds), one place for every generation: a
// sequence's lengths and storage rows, which keys a query row sees, and which key tiles a query
// tile visits. The contract is docs/MODES.md; a dense problem gets the old answers (len_q =
// seq_q, len_k = seq_k, keys [0, causal_key_end)).
#pragma once
#include "params.cuh"

// Batch-invariant varlen plans route each sequence by its own query count
// (crates/gen5-persistent/src/decode.rs, Route): a sequence whose packed query rows
// (len_q x q_heads_per_kv) fit one decode tile goes to the decode kernel, any other to the
// persistent kernel, in two launches of one plan. FC_SEQ_ROUTE 1: this launch takes the longer
// sequences; 2: the decode-shaped ones; 0: every sequence. A sequence the launch does not take
// has no query rows in it, so nothing of it is read or written there.
#ifndef FC_SEQ_ROUTE
#define FC_SEQ_ROUTE 0
#endif

// Batch-invariant plans on the Hopper path also route each sequence by its own lengths: one of
// at most FC_SEQ_KEY_SPLIT_ROWS queries (64-row items over all its heads: at most 64) and
// FC_SEQ_KEY_SPLIT_KEYS keys runs with key-split warpgroups (gen5_hopper/wg_key_split.cuh), any
// other without (crates/gen5-persistent/src/hopper/heuristics.rs, `key_split_shaped`). A batch of
// varied lengths takes two launches: FC_SEQ_KEY_SPLIT_ROUTE 1 takes the sequences within the
// bounds, 2 the others; 0: every sequence. It composes with FC_SEQ_ROUTE.
#ifndef FC_SEQ_KEY_SPLIT_ROUTE
#define FC_SEQ_KEY_SPLIT_ROUTE 0
#endif
#if FC_SEQ_KEY_SPLIT_ROUTE != 0 && (!defined(FC_SEQ_KEY_SPLIT_ROWS) || !defined(FC_SEQ_KEY_SPLIT_KEYS))
#error "FC_SEQ_KEY_SPLIT_ROUTE needs FC_SEQ_KEY_SPLIT_ROWS and FC_SEQ_KEY_SPLIT_KEYS"
#endif

// mm_prefix_ranges (docs/MODES.md): a row whose diagonal lies in one of its sequence's ranges
// also sees the whole range. Only builds of problems that have ranges read them (the core adds
// FC_MM_PREFIX=1 for those), so every other build's key range stays as it was.
#ifndef FC_MM_PREFIX
#define FC_MM_PREFIX 0
#endif

struct SeqInfo {
    int len_q, len_k;   // rows of this sequence's Q and K
    long long q_row0;   // first storage row of its Q / O (cu_seqlens_q[b], else 0)
    long long k_row0;   // first storage row of its K / V (cu_seqlens_k[b], else 0; paged: 0)
#if FC_MM_PREFIX
    int b;  // the sequence, for its ranges (an index, not a pointer: one register fewer
            // across the key loops)
#endif
};

// A sequence's block info from lengths known elsewhere (the dense problem's, or lengths a warp
// parked in shared memory), its storage rows 0: every field key_range reads is set.
__device__ __forceinline__ SeqInfo seq_of_lengths(int b, int len_q, int len_k) {
    SeqInfo s;
    s.len_q = len_q;
    s.len_k = len_k;
    s.q_row0 = 0;
    s.k_row0 = 0;
#if FC_MM_PREFIX
    s.b = b;
#endif
    return s;
}

__device__ __forceinline__ SeqInfo seq_info(const AttentionParams& p, int b) {
    SeqInfo s;
    s.q_row0 = 0;
    s.len_q = p.seq_q;
    if (p.cu_seqlens_q != nullptr) {
        s.q_row0 = p.cu_seqlens_q[b];
        s.len_q = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    }
    s.k_row0 = 0;
    s.len_k = p.seq_k;
    if (p.cu_seqlens_k != nullptr) {
        s.k_row0 = p.cu_seqlens_k[b];
        s.len_k = p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
    }
    if (p.seqused_k != nullptr) s.len_k = p.seqused_k[b] + p.seqlen_new;
#if FC_MM_PREFIX
    s.b = b;
#endif
    if (FC_SEQ_ROUTE != 0) {
        constexpr int decode_tile_rows = 16;  // decode.rs Q_TILE_ROWS
        const bool decode_shaped = (long long)s.len_q * p.q_heads_per_kv <= decode_tile_rows;
        if (decode_shaped != (FC_SEQ_ROUTE == 2)) s.len_q = 0;
    }
#if FC_SEQ_KEY_SPLIT_ROUTE != 0
    const bool key_split = s.len_q <= FC_SEQ_KEY_SPLIT_ROWS && s.len_k <= FC_SEQ_KEY_SPLIT_KEYS;
    if (key_split != (FC_SEQ_KEY_SPLIT_ROUTE == 1)) s.len_q = 0;
#endif
    return s;
}

// Keys [lo, hi) are visible to a row; the range is empty when hi <= lo (then O = 0, LSE = +inf).
struct KeyRange {
    int lo, hi;
};

// Bottom-right aligned: the row's diagonal key is row + len_k - len_q. Causal bounds the window
// at 0 on the right. 32-bit throughout: it runs per key tile in the persistent consumers, where
// its 64-bit compares and selects were a visible share of the modes build's extra instructions
// (2026-11-25, d93e11c). Lengths and windows are at most INT_MAX and row is below len_q + a tile, so
// each sum below is ordered to stay in range (the comments say why).
__device__ __forceinline__ KeyRange key_range(const AttentionParams& p, const SeqInfo& s, int row) {
    const int row_past_q = row - s.len_q;  // in [-len_q, tile): diag = row_past_q + len_k
    const int right = p.causal ? 0 : p.window_right;
    // diag + right + 1 < len_k  <=>  right < -1 - row_past_q (both sides in range); then
    // row_past_q + 1 + right < 0, so the new hi is below len_k (and may be negative: empty).
    int hi = s.len_k;
    if (right >= 0 && right < -1 - row_past_q) hi = max((row_past_q + 1 + right) + s.len_k, 0);
    // diag - window_left > 0  <=>  window_left - len_k < row_past_q; then row_past_q -
    // window_left > -len_k. A difference above 0 puts lo past len_k >= hi, where it is clamped to
    // hi anyway: capping it at 0 first keeps the sum in range.
    int lo = 0;
    if (p.window_left >= 0 && p.window_left - s.len_k < row_past_q)
        lo = min(min(row_past_q - p.window_left, 0) + s.len_k, hi);
#if FC_MM_PREFIX
    // A range [start, end) clipped to [0, len_k) holds the diagonal iff start - len_k <=
    // row_past_q < end - len_k (both differences in range). Validation rejects a used pair with
    // start < 0; a device table is trusted, so the clip keeps such a pair from a wild read. The
    // window's keys hold the diagonal too, so the union is one range. lo and hi still never
    // decrease with the row (a range holding a later row's diagonal and starting before an
    // earlier row's lo holds that row's diagonal as well), which visited_key_tiles relies on.
    const int* ranges = p.mm_prefix_ranges + (long long)s.b * p.mm_prefix_n * 2;
    for (int i = 0; i < p.mm_prefix_n; ++i) {
        const int start = max(ranges[2 * i], 0);
        const int end = min(ranges[2 * i + 1], s.len_k);
        if (start < end && start - s.len_k <= row_past_q && row_past_q < end - s.len_k) {
            lo = min(lo, start);
            hi = max(hi, end);
        }
    }
#endif
    KeyRange r;
    r.lo = lo;
    r.hi = hi;
    return r;
}

// Key tiles [first, end) that a query tile of rows [q0, q0 + rows) visits: every tile holding a
// key some row sees. lo and hi never decrease with the row, so the first row bounds the start
// and the last row the end. Tiles outside are never loaded.
struct KeyTiles {
    int first, end;        // tile indices (tile t covers keys [t * tile, (t + 1) * tile))
    int unmasked_lo;       // keys in [unmasked_lo, unmasked_hi) are visible to every row of the
    int unmasked_hi;       // tile: a key tile inside needs no element mask
};

__device__ __forceinline__ KeyTiles visited_key_tiles(const AttentionParams& p, const SeqInfo& s, int q0, int rows,
                                              int tile) {
    KeyTiles t;
    const KeyRange first = key_range(p, s, q0);
    const KeyRange last = key_range(p, s, q0 + rows - 1);
    if (last.hi <= first.lo || rows <= 0) {
        // Also covers every row empty (then first.lo == first.hi <= ... and last.hi <= last.lo).
        t.first = t.end = 0;
    } else {
        t.first = first.lo / tile;
        t.end = (last.hi + tile - 1) / tile;
    }
    t.unmasked_lo = last.lo;
    t.unmasked_hi = first.hi;
    return t;
}

// Whether the key tile [k0, k0 + tile) needs element masks for some row of the query tile.
__device__ __forceinline__ bool tile_needs_mask(const KeyTiles& t, int k0, int tile) {
    return k0 < t.unmasked_lo || k0 + tile > t.unmasked_hi;
}

// Storage offsets of this sequence's Q / O rows, and its LSE entries ([batch, heads_q, seq_q], or
// [heads_q, total_q] for packed Q).
__device__ __forceinline__ long long seq_q_offset(const AttentionParams& p, const SeqInfo& s, int b, int h, int row) {
    return (long long)b * p.q_batch_stride + (long long)h * p.q_head_stride + (s.q_row0 + row) * p.q_row_stride;
}
__device__ __forceinline__ long long seq_o_offset(const AttentionParams& p, const SeqInfo& s, int b, int h, int row) {
    return (long long)b * p.o_batch_stride + (long long)h * p.o_head_stride + (s.q_row0 + row) * p.o_row_stride;
}
__device__ __forceinline__ long long seq_lse_offset(const AttentionParams& p, const SeqInfo& s, int b, int h, int row) {
    if (p.cu_seqlens_q != nullptr) return (long long)h * p.total_q + s.q_row0 + row;
    return ((long long)b * p.heads_q + h) * p.seq_q + row;
}
