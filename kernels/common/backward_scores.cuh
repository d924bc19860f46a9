// The backward pass's recomputed scores in the modes of the forward's scores (docs/MODES.md):
// which (query row, key) pairs a sliding window (causal included) leaves visible, and the logit
// of a pair with softcap and ALiBi, with softcap's derivative for dS. The rules are the forward's
// own (seqlen.cuh's key_range, score_mod.cuh's modifier); this header adds the key side's view
// (which query rows see a key) that the backward's dK/dV passes walk by.
//
// FC_BWD_MODES (0|1): 1 only in builds for problems with a window, softcap or ALiBi (the plans'
// define). A dense build (causal or not) keeps masking.cuh's causal rule and its own code, so it
// includes this header for nothing. The backward takes dense storage only: a sequence is the
// whole problem (bwd_seq), and there are no mm_prefix ranges.
#pragma once
#include "params.cuh"
#include "seqlen.cuh"
#include "score_mod.cuh"

#ifndef FC_BWD_MODES
#define FC_BWD_MODES 0
#endif

// The problem as key_range's one sequence.
__device__ __forceinline__ SeqInfo bwd_seq(const AttentionParams& p) { return seq_of_lengths(0, p.seq_q, p.seq_k); }

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
