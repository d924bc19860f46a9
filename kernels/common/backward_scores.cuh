// The backward pass's recomputed scores in the modes of the forward's scores (docs/MODES.md):
// which (query row, key) pairs a sliding window (causal included) leaves visible, and the logit
// of a pair with softcap and ALiBi, with softcap's derivative for dS. The rules are the forward's
// own (seqlen.cuh's key_range, score_mod.cuh's modifier); this header adds the key side's view
// (which query rows see a key) that the backward's dK/dV passes walk by.
//
// FC_BWD_MODES (0|1): 1 only in builds for problems with a window, softcap, ALiBi or varlen (the
// plans' define). A dense build (causal or not) keeps masking.cuh's causal rule and its own code,
// so it includes this header for nothing. There are no mm_prefix ranges in a backward.
//
// FC_BWD_VARLEN (0|1, only with FC_BWD_MODES): packed Q/O/dO/dQ and K/V/dK/dV with cu_seqlens_q/k
// (FlashAttention 2's varlen layout; LSE and D are [heads_q, total_q]). Sequence b is then
// seqlen.cuh's seq_info: its own lengths and first storage rows. Items still count tiles of the
// longest sequence (seq_q, seq_k are the maxima); a tile past its sequence's end does nothing.
// Otherwise a sequence is the whole problem, its storage rows from 0.
#pragma once
#include "params.cuh"
#include "tensor_index.cuh"
#include "masking.cuh"
#include "seqlen.cuh"
#include "score_mod.cuh"
#include "work_item.cuh"

#ifndef FC_BWD_MODES
#define FC_BWD_MODES 0
#endif
#ifndef FC_BWD_VARLEN
#define FC_BWD_VARLEN 0
#endif
#if FC_BWD_VARLEN && !FC_BWD_MODES
#error "FC_BWD_VARLEN builds are modes builds (FC_BWD_MODES=1): the core adds both"
#endif

// Sequence b's lengths and first storage rows (key_range's sequence), and each on its own: a
// build without varlen reads the problem's lengths where it used them before and adds no rows.
__device__ __forceinline__ SeqInfo bwd_seq(const AttentionParams& p, [[maybe_unused]] int b) {
#if FC_BWD_VARLEN
    return seq_info(p, b);
#else
    return seq_of_lengths(0, p.seq_q, p.seq_k);
#endif
}
__device__ __forceinline__ int bwd_len_q(const AttentionParams& p, [[maybe_unused]] int b) {
#if FC_BWD_VARLEN
    return p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
#else
    return p.seq_q;
#endif
}
__device__ __forceinline__ int bwd_len_k(const AttentionParams& p, [[maybe_unused]] int b) {
#if FC_BWD_VARLEN
    return p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
#else
    return p.seq_k;
#endif
}
// The storage row of row `row` of sequence b's Q (and O, dO, dQ), and of its K (V, dK, dV).
// (Storage rows are int, as cu_seqlens are.)
__device__ __forceinline__ int bwd_q_row([[maybe_unused]] const AttentionParams& p, [[maybe_unused]] int b, int row) {
#if FC_BWD_VARLEN
    return p.cu_seqlens_q[b] + row;
#else
    return row;
#endif
}
__device__ __forceinline__ int bwd_k_row([[maybe_unused]] const AttentionParams& p, [[maybe_unused]] int b, int row) {
#if FC_BWD_VARLEN
    return p.cu_seqlens_k[b] + row;
#else
    return row;
#endif
}

// Where row `row` of sequence b, head h keeps its LSE and D (the workspace's D vector has LSE's
// layout): [heads_q, total_q] for varlen, else lse_offset's [batch, heads_q, seq_q].
__device__ __forceinline__ long long bwd_lse_offset(const AttentionParams& p, int b, int h, int row) {
#if FC_BWD_VARLEN
    return (long long)h * p.total_q + bwd_q_row(p, b, row);
#else
    return lse_offset(p, b, h, row);
#endif
}

// Flat rows of the D = rowsum(dO ∘ O) pass, one per (head, query) of the LSE's layout: batch ·
// heads_q · seq_q, or heads_q · total_q for varlen. (batch, head, storage row) of flat row r: its
// O/dO offsets; r itself is its LSE/D index.
__device__ __forceinline__ long long bwd_flat_rows(const AttentionParams& p) {
#if FC_BWD_VARLEN
    return (long long)p.heads_q * p.total_q;
#else
    return (long long)p.batch * p.heads_q * p.seq_q;
#endif
}
struct FlatRow {
    int batch, head, row;
};
__device__ __forceinline__ FlatRow bwd_flat_row(const AttentionParams& p, long long r) {
#if FC_BWD_VARLEN
    // Packed rows have no batch axis (its stride is 0): row is the storage row.
    return {0, (int)(r / p.total_q), (int)(r % p.total_q)};
#else
    return {(int)(r / ((long long)p.seq_q * p.heads_q)), (int)((r / p.seq_q) % p.heads_q), (int)(r % p.seq_q)};
#endif
}
// The sequence of flat row r's storage row `row` and its row within that sequence (key_range's
// row). Varlen: the last sequence starting at or before it (a binary search of cu_seqlens_q, so
// empty sequences are passed over); else batch and row as they are.
struct SeqRow {
    int seq, row;
};
__device__ __forceinline__ SeqRow bwd_flat_seq_row([[maybe_unused]] const AttentionParams& p, const FlatRow& f) {
#if FC_BWD_VARLEN
    int lo = 0, hi = p.batch;  // cu_seqlens_q[lo] <= f.row < cu_seqlens_q[hi]
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (p.cu_seqlens_q[mid] <= f.row) lo = mid; else hi = mid;
    }
    return {lo, f.row - p.cu_seqlens_q[lo]};
#else
    return {f.batch, f.row};
#endif
}

// Query rows [first, end) that see `key` (empty when end <= first). A row sees the keys
// [lo(i), hi(i)) of key_range, whose ends never decrease with the row, so the rows that see a key
// are one range: with diag(i) = i + len_k - len_q, row i sees key j < len_k iff
//   hi(i) > j   <=>  diag(i) + right >= j           (right = 0 causal, else window_right if given)
//   lo(i) <= j  <=>  diag(i) - window_left <= j     (if window_left is given).
// 64-bit: key - off + window_left can pass INT_MAX. No row sees a key at or past len_k.
struct QueryRange {
    int first, end;
};
__device__ __forceinline__ QueryRange query_range(const AttentionParams& p, const SeqInfo& s, int key) {
    const long long off = (long long)s.len_k - s.len_q;
    const int right = p.causal ? 0 : p.window_right;
    long long first = right >= 0 ? (long long)key - off - right : 0;
    long long end = p.window_left >= 0 ? (long long)key - off + p.window_left + 1 : s.len_q;
    first = first < 0 ? 0 : first;
    end = end > s.len_q ? s.len_q : end;
    if (key >= s.len_k || end < first) end = first;
    QueryRange r;
    r.first = (int)(first < s.len_q ? first : s.len_q);
    r.end = (int)(end < r.first ? r.first : end);
    return r;
}

// The query rows a key tile [k0, k0 + keys) walks (those that see any of its valid keys), and
// the rows [unmasked_lo, unmasked_hi) that see every key of it: a query tile inside them needs
// no element mask. (The transpose of seqlen.cuh's KeyTiles.)
struct QueryRows {
    int first, end;
    int unmasked_lo, unmasked_hi;
};
__device__ __forceinline__ QueryRows visited_query_rows(const AttentionParams& p, const SeqInfo& s, int k0, int keys) {
    const int valid = min(keys, s.len_k - k0);
    QueryRows r;
    const QueryRange lo_key = query_range(p, s, k0), hi_key = query_range(p, s, k0 + valid - 1);
    r.first = lo_key.first;
    r.end = hi_key.end;
    if (valid <= 0 || r.end <= r.first) r.first = r.end = 0;
    r.unmasked_lo = hi_key.first;
    // A tile with keys past len_k takes the mask everywhere (those keys see no row).
    r.unmasked_hi = valid < keys ? 0 : lo_key.end;
    return r;
}

// Whether query rows [q0, q0 + rows) of a key tile need the element mask (rows past len_q have
// LSE = +inf, so P = 0 there already).
__device__ __forceinline__ bool query_rows_need_mask(const QueryRows& r, const SeqInfo& s, int q0, int rows) {
    return q0 < r.unmasked_lo || min(q0 + rows, s.len_q) > r.unmasked_hi;
}

// P of a visible (row, key) pair from its raw q·k and the row's LSE·log2(e), and dS from dP:
// dS = P ∘ (dP − D) with respect to the logit, times softcap's 1 − tanh² (the derivative of
// softcap · tanh(s / softcap) in s; 1 without softcap), so that dQ = scale · dS K as without it.
// The logit is the forward's (score_mod.cuh, its tanh.approx too), so P is the forward's. A pair
// the mask hides gets P = dS = 0 whatever its logit (also +inf or NaN from a key past the end).
struct BwdScore {
    float p, ds;
};
__device__ __forceinline__ BwdScore bwd_score(const ScoreMod& m, float dot, float dp, float lse_log2, float dvec,
                                              int row, int key, bool visible) {
    float dtanh;
    const float s = logit_log2_dtanh(m, dot, row, key, dtanh);
    BwdScore r;
    r.p = visible ? exp2f(s - lse_log2) : 0.f;
    r.ds = r.p * (dp - dvec) * dtanh;
    return r;
}

// The tiles of `tile` query rows a key tile [k0, k0 + keys) walks: [first, end). Dense builds:
// from the first query the causal diagonal lets see k0 to the last tile (q_tiles). Modes: those
// holding a row that sees one of its keys (none when no row does: first == end).
struct TileRange {
    int first, end;
};
__device__ __forceinline__ TileRange walked_query_tiles(const AttentionParams& p, [[maybe_unused]] int b, int k0,
                                                        int keys, int tile, int q_tiles) {
#if FC_BWD_MODES
    const QueryRows r = visited_query_rows(p, bwd_seq(p, b), k0, keys);
    return {r.first / tile, r.end > r.first ? ceil_div(r.end, tile) : r.first / tile};
#else
    return {first_query_seeing(p, k0) / tile, q_tiles};
#endif
}

// The keys a query tile [q0, q0 + rows) walks, in tiles of `tile`: from tile `first_tile` to
// key `key_end` (each pass rounds it up to its tiles as it always has). Dense builds: from key 0 to
// the causal diagonal's end; modes: seqlen.cuh's visited_key_tiles (its end a whole tile).
struct KeyWalk {
    int first_tile, key_end;
};
__device__ __forceinline__ KeyWalk walked_keys(const AttentionParams& p, [[maybe_unused]] int b, int q0, int rows,
                                               int tile) {
#if FC_BWD_MODES
    const KeyTiles t = visited_key_tiles(p, bwd_seq(p, b), q0, rows, tile);
    return {t.first, t.end * tile};
#else
    return {0, causal_key_end_for_tile(p, q0, q0 + rows)};
#endif
}

// Modes: whether the pairs of key tile [k0, k0 + keys) and query rows [q0, q0 + rows) need the
// element mask (a key-side pass), or those of query rows [q0, q0 + rows) and key tile [k0, k0 +
// keys) (a query-side pass). Recomputed per tile pair from the parameters rather than kept.
__device__ __forceinline__ bool key_tile_needs_mask(const AttentionParams& p, int b, int k0, int keys, int q0,
                                                    int rows) {
    const SeqInfo s = bwd_seq(p, b);
    return query_rows_need_mask(visited_query_rows(p, s, k0, keys), s, q0, rows);
}
__device__ __forceinline__ bool query_tile_needs_mask(const AttentionParams& p, int b, int q0, int rows, int k0,
                                                      int keys) {
    const int valid = min(rows, bwd_len_q(p, b) - q0);
    return valid <= 0 || tile_needs_mask(visited_key_tiles(p, bwd_seq(p, b), q0, valid, keys), k0, keys);
}

// Whether query row `row` sees `key` (both inside a tile past the sequence's start): key_range's
// rule as one distance, d = diag(row) − key = (row − len_q) + (len_k − key), which the window
// bounds on both sides: −right <= d <= window_left, and 0 <= key < len_k. Per pair, from the
// parameters alone, so a masked tile keeps no per-row ranges in registers. (Each parenthesis is
// within a tile of the lengths, so the sum stays in range for lengths below 2^30.)
__device__ __forceinline__ bool pair_visible(const AttentionParams& p, int b, int row, int key) {
    const int d = (row - bwd_len_q(p, b)) + (bwd_len_k(p, b) - key);
    const int right = p.causal ? 0 : p.window_right;
    return key < bwd_len_k(p, b) && (right < 0 || d >= -right) && (p.window_left < 0 || d <= p.window_left);
}

// A modes build's scores of one tile pair: over a warp's m16n8 accumulator tiles (element e of
// tile (mt, j) at MMA row 16 mt + group + 8 (e >> 1), column 8 j + 2 tig + (e & 1)), Sᵀ or S (raw
// q·k) becomes P and dPᵀ or dP becomes dS, in place (bwd_score). Keys lie on the MMA's rows in the
// dK/dV passes (kKeysOnRows) and queries in the dQ passes; row0 and col0 are the problem's index
// (key or query) of MMA row and column 0. stats(i) is (LSE·log2e, D) of the query at MMA index i
// (its row or column). With `masked` false every pair is visible; else pair_visible decides, in
// sequence b.
template <bool kKeysOnRows, int kMT, int kNT, class Stats>
__device__ __forceinline__ void bwd_tile_scores(const AttentionParams& p, int b, const ScoreMod& mod,
                                                float (&s)[kMT][kNT][4],
                                                float (&dp)[kMT][kNT][4], int row0, int col0, bool masked,
                                                Stats&& stats, int lane) {
    const int group = lane / 4, tig = lane % 4;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int j = 0; j < kNT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = 16 * mt + group + 8 * (e >> 1), col = 8 * j + 2 * tig + (e & 1);
                const float2 st = stats(kKeysOnRows ? col : r);
                const int query = kKeysOnRows ? col0 + col : row0 + r;
                const int key = kKeysOnRows ? row0 + r : col0 + col;
                const bool visible = !masked || pair_visible(p, b, query, key);
                const BwdScore x = bwd_score(mod, s[mt][j][e], dp[mt][j][e], st.x, st.y, query, key, visible);
                s[mt][j][e] = x.p;
                dp[mt][j][e] = x.ds;
            }
}
