// D_i = Σ_j P_ij dP_ij over the keys row i sees, for a row that sees at most kShortRowKeys of
// them: the backward's first launch takes this D there instead of rowsum(dO_i ∘ O_i).
//
// Why: the two are equal in exact arithmetic, but O is the forward's output rounded to the dtype.
// In a row that sees one or two keys, dS = P ∘ (dP − D) is the small difference of nearly equal
// terms, and the rounding of O took about half of the backward rule's margin there (0.80-0.85 of
// the allowed error against 0.43-0.46 with this D: docs/results/2026-12-01-stored-o-study-host),
// enough that the kernels' own approximations pushed rare one-key-window cases past it. A row that
// sees many keys spreads that rounding over them (0.40 either way on dense problems), and its keys
// would cost a pass as long as the forward's, so it keeps the stored O.
//
// The recomputation is the kernels' own: logit_log2_dtanh's logit (softcap and ALiBi), exp2, and
// key_range's visible keys (windows, causal, the sequence's length), each product in f32 from the
// dtype's inputs. A row is read in RowDot's 16-byte chunks, one a lane.
#pragma once
#include "types.cuh"
#include "params.cuh"
#include "tensor_index.cuh"
#include "backward_params.cuh"
#include "backward_scores.cuh"
#include "padded_head.cuh"
#include "row_dot.cuh"
#include "score_mod.cuh"
#include "seqlen.cuh"

// At most this many visible keys: 1-32-key windows, the first 32 rows of a causal sequence, and
// sequences of up to 32 keys. (The stored O's share of the margin falls with the keys a row
// averages over; 32 keys cost the first launch 64 dot products a row.) FC_BWD_SHORT_ROW_KEYS: the
// host's A/B override (FLASHCORE_BWD_SHORT_ROW_KEYS; 0: every row keeps rowsum(dO ∘ O)).
#ifndef FC_BWD_SHORT_ROW_KEYS
#define FC_BWD_SHORT_ROW_KEYS 32
#endif
enum : int { kShortRowKeys = FC_BWD_SHORT_ROW_KEYS, kShortRowBatch = 4 };

// The sum of 16-byte chunk `chunk` of two rows' elementwise product (0 for a chunk past the head).
template <class Dot, bool kPadded>
__device__ __forceinline__ float chunk_dot(const elem_t* a_row, const elem_t* b_row, int head_dim, int chunk) {
    return chunk < Dot::chunks && chunk_in_head<kPadded>(head_dim, chunk) ? Dot::partial(a_row, b_row, chunk) : 0.f;
}

// Called by every lane of the warp (the shuffles). A lane's row: sequence b, query head h, row
// `row` of its sequence, `real` false for a lane with no row (past the rows or the sequence);
// `stored` is its rowsum(dO ∘ O), the value kept for a row that sees more than kShortRowKeys keys.
// Returns the row's D in each of its lanes.
template <class Dot, bool kPadded>
__device__ __forceinline__ float short_row_delta(const AttentionParams& p, const BackwardParams& g, bool real, int b,
                                                 int h, int row, int chunk, float stored) {
    if (!real) b = h = row = 0;  // (b indexes cu_seqlens in varlen builds)
    const SeqInfo s = bwd_seq(p, b);
    const KeyRange keys = real ? key_range(p, s, row) : KeyRange{0, 0};
    const int count = keys.hi > keys.lo ? keys.hi - keys.lo : 0;
    const bool short_row = real && count <= kShortRowKeys;
    int warp_keys = short_row ? count : 0;  // the loop runs the warp's longest short row
#pragma unroll
    for (int m = 16; m > 0; m /= 2) warp_keys = max(warp_keys, __shfl_xor_sync(0xffffffffu, warp_keys, m));
    if (warp_keys == 0) return stored;

    const int h_kv = h / p.q_heads_per_kv;
    const int q_at = bwd_q_row(p, b, row);
    const elem_t* q_row = static_cast<const elem_t*>(p.q) + q_offset(p, b, h, q_at);
    const elem_t* do_row = static_cast<const elem_t*>(g.d_o) + do_offset(g, b, h, q_at);
    const ScoreMod mod = score_mod(p, s, b, h);
    // The row's softmax over its own keys, normalized by its own sum (online, as the forward):
    // exact for one key whatever the logit's size, where exp2(logit − LSE) with the stored LSE is
    // off by its rounding (a relative 1e-5 at logits near 500: enough to fail a row whose dS is
    // exactly 0, docs/results/2026-12-01-short-row-delta-h200/call2.txt). The stored LSE is not read.
    // Keys in batches of kShortRowBatch, their loads all issued before the batch's reductions: one
    // key at a time, a warp's 32 dependent L2 round trips made the launch's tail (+9-13 % on a
    // causal 4x2048 backward, docs/results/2026-12-01-short-row-delta-h200/timing.md). 4, not 8:
    // at 8 ptxas held the portable atomic build's first launch at 64 registers and spilled 16 bytes
    // at head_dim 32. The batch changes when a key is loaded, not what is computed or in which order.
    float row_max = -INFINITY, sum = 0.f, delta = 0.f;
    for (int j0 = 0; j0 < warp_keys; j0 += kShortRowBatch) {
        float dot[kShortRowBatch], dp[kShortRowBatch];
#pragma unroll
        for (int u = 0; u < kShortRowBatch; ++u) {
            dot[u] = dp[u] = 0.f;
            if (short_row && j0 + u < count) {
                const int k_at = bwd_k_row(p, b, keys.lo + j0 + u);
                dot[u] = chunk_dot<Dot, kPadded>(q_row, static_cast<const elem_t*>(p.k) + k_offset(p, b, h_kv, k_at),
                                                 p.head_dim, chunk);
                dp[u] = chunk_dot<Dot, kPadded>(do_row, static_cast<const elem_t*>(p.v) + v_offset(p, b, h_kv, k_at),
                                                p.head_dim, chunk);
            }
        }
#pragma unroll
        for (int u = 0; u < kShortRowBatch; ++u) {
            dot[u] = Dot::reduce(dot[u]);
            dp[u] = Dot::reduce(dp[u]);
        }
#pragma unroll
        for (int u = 0; u < kShortRowBatch; ++u) {
            if (short_row && j0 + u < count) {
                const int key = keys.lo + j0 + u;
                float dtanh;
                const float logit = logit_log2_dtanh(mod, dot[u], row, key, dtanh);
                const float new_max = fmaxf(row_max, logit);
                const float rescale = exp2f(row_max - new_max), e = exp2f(logit - new_max);
                sum = sum * rescale + e;
                delta = delta * rescale + e * dp[u];
                row_max = new_max;
            }
        }
    }
    return short_row ? (sum > 0.f ? delta / sum : 0.f) : stored;
}
