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

// Bottom-right causal: query i sees key j iff j <= i + causal_offset(p).
__device__ __forceinline__ int causal_offset(const AttentionParams& p) { return p.seq_k - p.seq_q; }

// The first query row that sees key `key` (0 without causal; may be seq_q: none does). The
// backward's key-side passes start their query walk there.
__device__ __forceinline__ int first_query_seeing(const AttentionParams& p, int key) {
    if (!p.causal) return 0;
    const long long first = (long long)key - causal_offset(p);
    return first < 0 ? 0 : (first > p.seq_q ? p.seq_q : (int)first);
}

// Epilogue rules for a row whose softmax sum l is 0. With no visible key (seq_q > seq_k under
// the causal mask) that is the defined empty row: O = 0, LSE = +inf. A row that does see keys
// only gets l = 0 when every visible score is -inf, which takes infinite inputs: softmax is 0/0
// there, so the answer is NaN, as in the f64 reference. A NaN l propagates either way.
#define FC_QNAN __int_as_float(0x7fc00000)

// The rules for any mask: `sees_keys()` says whether the row sees a key, asked only when l is 0
// (the causal form below; the Hopper path asks its block info, gen5_hopper/consumer_math.cuh).
// The factor O is multiplied by:
template <class SeesKeys>
__device__ __forceinline__ float row_sum_inverse_if(float l, SeesKeys sees_keys) {
    if (l != 0.f) return 1.f / l;
    return sees_keys() ? FC_QNAN : 0.f;
}
// The row's LSE, lse_if_nonzero being the natural-log LSE computed from a nonzero l:
template <class SeesKeys>
__device__ __forceinline__ float row_lse_if(float l, float lse_if_nonzero, SeesKeys sees_keys) {
    if (l != 0.f) return lse_if_nonzero;
    return sees_keys() ? FC_QNAN : __int_as_float(0x7f800000);
}

// The causal form. (Written out, not through the templates above: through them the split-KV
// combine, gen5_hopper/split_epilogue.cuh, compiled to other PTX.)
__device__ __forceinline__ float row_sum_inverse(const AttentionParams& p, int query_row, float l) {
    if (l != 0.f) return 1.f / l;
    return causal_key_end(p, query_row) > 0 ? FC_QNAN : 0.f;
}
__device__ __forceinline__ float row_lse(const AttentionParams& p, int query_row, float l, float lse_if_nonzero) {
    if (l != 0.f) return lse_if_nonzero;
    return causal_key_end(p, query_row) > 0 ? FC_QNAN : __int_as_float(0x7f800000);
}

// For kernels whose finalize already produced O = 0, LSE = +inf for l = 0: the factor to apply to
// that row's O and LSE (NaN for a row that sees keys, 1 otherwise).
__device__ __forceinline__ float undefined_row_factor(const AttentionParams& p, int query_row, float lse) {
    return (lse == __int_as_float(0x7f800000) && causal_key_end(p, query_row) > 0) ? FC_QNAN : 1.f;
}
