// Causal masking, bottom-right aligned (FlashAttention >= 2.1): with seq_q != seq_k the last
// query row lines up with the last key. Query row i sees key j iff j <= i + (seq_k - seq_q).
#pragma once
#include "params.cuh"

// One past the last key row `query_row` may attend to (seq_k when not causal).
// Can be <= 0: that row sees no key, and its output is O = 0, LSE = +inf.
__device__ __forceinline__ int causal_key_end(const AttentionParams& p, int query_row) {
    if (!p.causal) return p.seq_k;
    long long end = (long long)query_row + 1 + (long long)(p.seq_k - p.seq_q);
    if (end < 0) return 0;
    return end < p.seq_k ? (int)end : p.seq_k;
}

// One past the last key any row of [q_begin, q_end) may attend to: tiles at or beyond it are
// skipped, not computed and masked.
__device__ __forceinline__ int causal_key_end_for_tile(const AttentionParams& p, int q_begin, int q_end) {
    int last_row = (q_end < p.seq_q ? q_end : p.seq_q) - 1;
    return causal_key_end(p, last_row);
}
