// Generation 5 (Hopper) backward: which work unit a CTA takes, which query blocks a key block
// visits, and which (key, query) pairs the mask keeps.
#pragma once
#include "config.cuh"
#include "../common/params.cuh"
#include "../common/masking.cuh"
#include "../common/backward_scores.cuh"

namespace fhb {

// A work unit: keys [k0, k0 + KEY_ROWS) of (batch b, KV head h_kv), visited by the query blocks
// [first_q_block, q_blocks) of every query head of the KV group.
struct Unit {
    int b, h_kv, k0;
    int first_q_block, q_blocks;
};

// Modes: the query blocks [first, end) holding a row that sees one of keys [k0, k0 + KEY_ROWS) of a
// sequence of len_q queries and len_k keys (empty, first == end, when none does): backward_scores.cuh's
// query_range at the block's first and last valid key, in 32-bit arithmetic whose every sum stays in
// range (its 64-bit form spilled the varlen consumers at D = 128). Row i sees key j iff
// j - right <= diag(i) <= j + window_left, diag(i) = i + len_k - len_q.
__device__ __forceinline__ void query_walk(const AttentionParams& p, int len_q, int len_k, int k0, int& first_block,
                                           int& end_block) {
    const int valid = min(KEY_ROWS, len_k - k0);
    first_block = end_block = 0;
    if (valid <= 0) return;
    const int right = p.causal ? 0 : p.window_right;
    // The rows on the diagonals of the first and last key: (k - len_k) + len_q, below len_q.
    const int x = (k0 - len_k) + len_q, y = (k0 + valid - 1 - len_k) + len_q;
    const int first = right >= 0 && x > right ? x - right : 0;
    int end = len_q;
    if (p.window_left >= 0 && p.window_left < len_q - y) end = y + p.window_left + 1;  // <= len_q
    if (end <= first) return;
    first_block = first / QUERY_ROWS;
    end_block = (end + QUERY_ROWS - 1) / QUERY_ROWS;
}

__device__ __forceinline__ int key_blocks(const AttentionParams& p) { return (p.seq_k + KEY_ROWS - 1) / KEY_ROWS; }
__device__ __forceinline__ int query_blocks(const AttentionParams& p) { return (p.seq_q + QUERY_ROWS - 1) / QUERY_ROWS; }
__device__ __forceinline__ long long num_units(const AttentionParams& p) {
    return (long long)key_blocks(p) * p.batch * p.heads_kv;
}

// Units go in sections of a few (batch, KV head) pairs, about FC_BWD_SECTION_UNITS units each
// (the plan passes half a wave of SMs, or 1.5 waves under causal masking). Inside a section they
// go key block major, so under causal masking the first key blocks, which see the most queries,
// start first (longest first), and the CTAs of a wave share their heads' Q, dO and dQ accumulator
// in L2. Key block major over all heads (the first version) ran 8 x 32 heads at once and lost 40 %
// at (8,32,4096,128) (c3bc4f9).
__device__ __forceinline__ Unit decode_unit(const AttentionParams& p, long long t) {
    const long long heads = (long long)p.batch * p.heads_kv;
    const long long n_kb = key_blocks(p);
    const long long section_heads = min(heads, max(1ll, ((long long)FC_BWD_SECTION_UNITS + n_kb - 1) / n_kb));
    const long long section = t / (section_heads * n_kb);
    const long long first_head = section * section_heads;
    const long long heads_here = min(section_heads, heads - first_head);
    const long long r = t - section * section_heads * n_kb;
    const int kb = (int)(r / heads_here);
    const int bh = (int)(first_head + r % heads_here);
    Unit u;
    u.b = bh / p.heads_kv;
    u.h_kv = bh % p.heads_kv;
    u.k0 = kb * KEY_ROWS;
    u.q_blocks = query_blocks(p);
    u.first_q_block = 0;
    if constexpr (MODES) {
        // The query blocks holding a row that sees one of the unit's keys (windows bound both ends).
        // (Varlen: the sequence's own lengths; a unit past its keys walks none.)
        query_walk(p, bwd_len_q(p, u.b), bwd_len_k(p, u.b), u.k0, u.first_q_block, u.q_blocks);
    } else if (p.causal) {
        // The first query that sees key k0 (never past seq_q - 1, since k0 < seq_k).
        const int first = max(u.k0 - causal_offset(p), 0);
        u.first_q_block = min(first / QUERY_ROWS, u.q_blocks);
    }
    return u;
}

// The unit's sequence lengths: the problem's, or with varlen the ones the producer parks in shared
// memory at OFF_SEQ with the unit's K and V (written before its kv_full arrival, so a consumer that
// has waited for the K/V tiles reads them; rewritten only after both consumers released the tiles).
// Read per step rather than held in registers, and not loaded from cu_seqlens per step: either
// spilled the consumers at D = 128.
struct SeqLengths {
    int len_q, len_k;
};
__device__ __forceinline__ void park_unit_lengths(const AttentionParams& p, int b, unsigned smem_base) {
    if constexpr (VARLEN) {
        asm volatile("st.shared.v2.s32 [%0], {%1, %2};" ::"r"(smem_base + OFF_SEQ), "r"(bwd_len_q(p, b)),
                     "r"(bwd_len_k(p, b))
                     : "memory");
    }
}
__device__ __forceinline__ SeqLengths unit_lengths(const AttentionParams& p, unsigned smem_base) {
    if constexpr (VARLEN) {
        SeqLengths s;
        asm volatile("ld.shared.v2.s32 {%0, %1}, [%2];" : "=r"(s.len_q), "=r"(s.len_k) : "r"(smem_base + OFF_SEQ));
        return s;
    }
    return {p.seq_q, p.seq_k};
}

// The batch coordinate of sequence b's rows in the TMA maps (their row coordinate is bwd_q_row or
// bwd_k_row): packed tensors are one batch of all the rows.
__device__ __forceinline__ int tma_batch(int b) { return VARLEN ? 0 : b; }

// Whether some pair of this warpgroup's keys [key0, key0 + WG_KEYS) and the step's queries
// [q0, q0 + QUERY_ROWS) is masked (past len_k, above the causal diagonal, or outside the window).
// Warp-uniform. Rows past len_q need no mask in a build without varlen (their LSE is +inf and TMA
// zero-fills their Q and dO, so P = dS = 0); with varlen they hold the next sequence's rows and
// take the mask.
__device__ __forceinline__ bool needs_mask(const AttentionParams& p, const SeqLengths& s, int key0, int q0) {
    if (key0 + WG_KEYS > s.len_k) return true;
    if constexpr (VARLEN) {
        if (q0 + QUERY_ROWS > s.len_q) return true;
    }
    if constexpr (MODES) {
        // backward_scores.cuh's pair_visible bounds d = row + (seq_k - seq_q) - key by the window:
        // -right <= d <= window_left. Over the step's pairs d spans [base - (WG_KEYS - 1), base +
        // QUERY_ROWS - 1]. (Each parenthesis of base is within a tile of the lengths.) 32-bit
        // compares here: backward_scores.cuh's 64-bit key_tile_needs_mask spilled the consumers.
        const int base = (q0 - s.len_q) + (s.len_k - key0);
        const int right = p.causal ? 0 : p.window_right;
        return (right >= 0 && base - (WG_KEYS - 1) < -right) ||
               (p.window_left >= 0 && base + (QUERY_ROWS - 1) > p.window_left);
    }
    return p.causal && key0 + WG_KEYS - 1 > q0 + causal_offset(p);
}

// The first query that sees `key`: none (INT_MAX) past seq_k, key - (seq_k - seq_q) under the
// causal mask, every query otherwise.
__device__ __forceinline__ int first_visible_query(const AttentionParams& p, int key) {
    if (key >= p.seq_k) return 0x7fffffff;
    return p.causal ? key - causal_offset(p) : -0x7fffffff;  // (callers widen before subtracting)
}

}  // namespace fhb
