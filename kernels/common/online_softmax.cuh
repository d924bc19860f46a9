// Online softmax (FlashAttention-2) on mma.sync m16n8k16 accumulator fragments, in f32 registers.
//
// A warp owns 16 query rows. In the C layout (see mma.cuh) each thread holds two of them —
// row `group` (elements [.][0], [.][1]) and row `group + 8` (elements [.][2], [.][3]) — and the
// four threads of a quad (lanes 4*group .. 4*group+3) together hold whole rows. Row reductions are
// therefore a thread-local pass plus two __shfl_xor_sync steps (xor 1, xor 2) inside the quad.
//
// Templates over the tile widths keep this shared by every generation (the Hopper path takes its
// masks, score modifiers and quad reductions from here too, on its wgmma accumulators: n8_tiles;
// its softmax step is its own, gen5_hopper/consumer_math.cuh says why):
//   kKeyTiles  — n8 tiles of the score tile S (keys per K/V tile / 8),
//   kOutTiles  — n8 tiles of the output accumulator O (head_dim / 8).
//
// Units: scores are turned into the log2 domain once (s * scale_log2, scale_log2 =
// softmax_scale * log2 e) so every exponential is one exp2 (ex2.approx). The running max is kept
// in that domain. Scaling before the max (rather than folding the scale into the exp2 argument)
// keeps the max right for any sign of softmax_scale.
#pragma once
#include "score_mod.cuh"

// Spelled out instead of <math_constants.h>, which NVRTC does not always have on its include path.
#define FC_INF __int_as_float(0x7f800000)
#define FC_LN2 0.693147180559945309f

// 2^x with one MUFU.EX2 (ex2.approx.ftz: 2 ulp, and 2^-inf = +0), independent of whether the
// host compiles with --use_fast_math.
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

struct SoftmaxRows {
    float row_max[2];  // running max of the scaled scores, log2 domain; -inf until a key is seen
    float row_sum[2];  // this thread's partial sum of exp2(s - row_max); quad-reduced at the end
};

__device__ __forceinline__ void softmax_init(SoftmaxRows& st) {
    st.row_max[0] = -FC_INF;
    st.row_max[1] = -FC_INF;
    st.row_sum[0] = 0.f;
    st.row_sum[1] = 0.f;
}

// A fragment kept flat, element e of n8 tile j at s[4 j + e] (the Hopper path's wgmma accumulators,
// common/hopper/wgmma.cuh), seen as [n8 tile][4]: the same registers in the same order, so the
// helpers below serve both layouts.
template <int kElems>
__device__ __forceinline__ float (&n8_tiles(float (&s)[kElems]))[kElems / 4][4] {
    static_assert(kElems % 4 == 0, "whole n8 tiles");
    return reinterpret_cast<float(&)[kElems / 4][4]>(s);
}

// Max / sum over the 4 threads of a quad (the threads that share a row).
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
    return x;
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    return x;
}

// s *= scale_log2 (raw q·k -> log2-domain logits).
template <int kKeyTiles>
__device__ __forceinline__ void scale_scores(float (&s)[kKeyTiles][4], float scale_log2) {
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[j][e] *= scale_log2;
    }
}

// Sets to -inf every score whose key is not visible to its row. `lane_key0` is the key index,
// relative to the tile, of this lane's first column (2 * (lane % 4)); `key_end_lo/hi` are one past
// the last visible key, relative to the tile, for the lane's rows `group` and `group + 8`
// (from causal_key_end; it already folds in seq_k). Apply after scale_scores: -inf must not meet
// a negative scale.
template <int kKeyTiles>
__device__ __forceinline__ void mask_scores(float (&s)[kKeyTiles][4], int lane_key0, int key_end_lo, int key_end_hi) {
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
        const int key = lane_key0 + 8 * j;
        if (key >= key_end_lo) s[j][0] = -FC_INF;
        if (key + 1 >= key_end_lo) s[j][1] = -FC_INF;
        if (key >= key_end_hi) s[j][2] = -FC_INF;
        if (key + 1 >= key_end_hi) s[j][3] = -FC_INF;
    }
}

// Keys outside [lo, hi) of each of the lane's two rows become -inf, checked at both ends (a
// window's left edge can cut a tile from below; mask_scores_range below decides when it does).
template <int kKeyTiles>
__device__ __forceinline__ void mask_scores_window(float (&s)[kKeyTiles][4], int lane_key0, const int (&lo)[2],
                                                   const int (&hi)[2]) {
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int key = lane_key0 + 8 * j + (e & 1);
            const int r = e >> 1;
            if (key < lo[r] || key >= hi[r]) s[j][e] = -FC_INF;
        }
    }
}

// Keys outside [lo, hi) of each of the lane's two rows become -inf (the window / length form of
// mask_scores; bounds relative to the tile, from key_range in seqlen.cuh).
template <int kKeyTiles>
__device__ __forceinline__ void mask_scores_range(float (&s)[kKeyTiles][4], int lane_key0, const int (&lo)[2],
                                                  const int (&hi)[2]) {
    // Causal and length limits cut a tile from above only; a lower bound inside it comes from a
    // window's left edge alone. Checking that once spares the common case a compare per score.
    if (lo[0] <= lane_key0 && lo[1] <= lane_key0) {
        mask_scores(s, lane_key0, hi[0], hi[1]);
        return;
    }
    mask_scores_window(s, lane_key0, lo, hi);
}

// Raw q·k to log2-domain logits with the score modifiers (score_mod.cuh) on fragment layout:
// element e of n8 tile j is row `row0 + 8 * (e / 2)`, key `key0 + 8 * j + e % 2` (key0 = the
// lane's first key, absolute). Replaces scale_scores when softcap or ALiBi is on.
template <int kKeyTiles>
__device__ __forceinline__ void modify_scores(float (&s)[kKeyTiles][4], const ScoreMod& mod, int row0, int key0) {
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[j][e] = logit_log2(mod, s[j][e], row0 + 8 * (e >> 1), key0 + 8 * j + (e & 1));
    }
}

// The same when the lane's two rows belong to different heads (GQA-packed query tiles: row
// `group` and row `group + 8` may be two query heads of one KV group, each with its own ALiBi
// slope and query position).
template <int kKeyTiles>
__device__ __forceinline__ void modify_scores_rows(float (&s)[kKeyTiles][4], const ScoreMod (&mod)[2],
                                                   const int (&row)[2], int key0) {
#pragma unroll
    for (int j = 0; j < kKeyTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[j][e] = logit_log2(mod[e >> 1], s[j][e], row[e >> 1], key0 + 8 * j + (e & 1));
    }
}

// One online-softmax step for a new tile of (scaled, masked) scores:
//   m_new = max(m_old, rowmax(s));  alpha = exp2(m_old - m_new)
//   s     = exp2(s - m_new)          (P, still f32; converted to elem_t only as the P·V operand)
//   l     = alpha * l + rowsum(P);   O *= alpha
// A row whose max is still -inf (every key so far masked) uses 0 as the reference instead, so
// that exp2(-inf - -inf) = NaN never happens: P = exp2(-inf) = 0, alpha = exp2(-inf) = 0 on an
// all-zero O and l, and the row stays exactly zero until a visible key arrives.
template <int kKeyTiles, int kOutTiles>
__device__ __forceinline__ void online_softmax_update(float (&s)[kKeyTiles][4], float (&o)[kOutTiles][4],
                                                      SoftmaxRows& st) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float tile_max = -FC_INF;
#pragma unroll
        for (int j = 0; j < kKeyTiles; ++j) tile_max = fmaxf(tile_max, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
        tile_max = quad_max(tile_max);

        const float m_new = fmaxf(st.row_max[r], tile_max);
        const float m_ref = (m_new == -FC_INF) ? 0.f : m_new;
        const float alpha = fast_exp2(st.row_max[r] - m_ref);
        st.row_max[r] = m_new;

        float sum = 0.f;
#pragma unroll
        for (int j = 0; j < kKeyTiles; ++j) {
            s[j][2 * r] = fast_exp2(s[j][2 * r] - m_ref);
            s[j][2 * r + 1] = fast_exp2(s[j][2 * r + 1] - m_ref);
            sum += s[j][2 * r] + s[j][2 * r + 1];
        }
        // The partial sum stays per thread: rescaling is linear and alpha is the same on the
        // whole quad, so one quad reduction at the end gives the row sum.
        st.row_sum[r] = st.row_sum[r] * alpha + sum;
#pragma unroll
        for (int j = 0; j < kOutTiles; ++j) {
            o[j][2 * r] *= alpha;
            o[j][2 * r + 1] *= alpha;
        }
    }
}

// Final normalisation: O /= l per row and the natural-log LSE. A row that never saw a visible key
// (l == 0: causal with seq_q > seq_k, or seq_k == 0) gets O = 0 and LSE = +inf, never NaN.
// After this, lse[0] / lse[1] are valid on every lane of the quad.
template <int kOutTiles>
__device__ __forceinline__ void softmax_finalize(float (&o)[kOutTiles][4], SoftmaxRows& st, float (&lse)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float l = quad_sum(st.row_sum[r]);
        const bool any = l != 0.f;  // NaN (a non-finite input) must reach O and LSE, not read as "no key"
        const float inv = any ? 1.f / l : 0.f;
        // row_max is in log2 units: ln(sum_j e^{scale*s_j}) = (m + log2 l) * ln 2.
        lse[r] = any ? (st.row_max[r] + __log2f(l)) * FC_LN2 : FC_INF;
#pragma unroll
        for (int j = 0; j < kOutTiles; ++j) {
            o[j][2 * r] *= inv;
            o[j][2 * r + 1] *= inv;
        }
    }
}
