// Score modifiers, one place for every generation: raw q·k to the log2-domain logit the online
// softmax takes (docs/MODES.md):
//   s = scale · q·k;  s = softcap · tanh(s / softcap) (if given);  s -= slope · |row + off - key|
// times log2(e), so every exponential stays one exp2. A dense problem is s · scale_log2.
#pragma once
#include "params.cuh"
#include "seqlen.cuh"

struct ScoreMod {
    float scale_log2;    // no softcap: logit2 = dot * scale_log2
    float softcap_pre;   // softcap: logit2 = tanh(dot * softcap_pre) * softcap_log2
    float softcap_log2;
    float slope_log2;    // ALiBi slope of this (batch, head) times log2(e); 0 without ALiBi
    int diag;            // len_k - len_q: key `row + diag` is the row's diagonal
};

__device__ __forceinline__ ScoreMod score_mod(const AttentionParams& p, const SeqInfo& s, int b, int h) {
    ScoreMod m;
    m.scale_log2 = p.scale_log2;
    m.softcap_pre = p.softcap_pre;
    m.softcap_log2 = p.softcap_log2;
    m.slope_log2 = p.alibi_slopes != nullptr
                       ? p.alibi_slopes[(long long)b * p.alibi_batch_stride + h] * 1.4426950408889634f
                       : 0.f;
    m.diag = s.len_k - s.len_q;
    return m;
}

// Whether the modifier needs the key index (ALiBi) or a transcendental (softcap): kernels keep
// their plain scale-only path otherwise.
__device__ __forceinline__ bool has_score_mod(const AttentionParams& p) {
    return p.softcap_pre != 0.f || p.alibi_slopes != nullptr;
}

// tanh.approx.f32 (sm_75+; what --use_fast_math makes of tanhf anyway, and what FlashAttention
// uses for softcap). Volatile on purpose: it keeps the tanh of a 64-element score fragment in
// program order instead of all in flight at once, which on the Hopper consumer was the register
// pressure that made the modes build spill.
__device__ __forceinline__ float tanh_approx(float x) {
    float y;
    asm volatile("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float logit_log2(const ScoreMod& m, float dot, int row, int key) {
    float s = m.softcap_pre != 0.f ? tanh_approx(dot * m.softcap_pre) * m.softcap_log2 : dot * m.scale_log2;
    if (m.slope_log2 != 0.f) s -= m.slope_log2 * fabsf((float)(row + m.diag - key));
    return s;
}

// logit_log2_dtanh (below) with the modifiers known at compile time (kSoftcap: m.softcap_pre != 0,
// kAlibi: m.slope_log2 may be nonzero): for kernels that pick the form once per tile. With the
// runtime form's per-element tests (and a per-element mask) the Hopper backward's modes build ran
// 1.5-2.6x its dense build (docs/results/2026-11-30-hopper-bwd-modes-h200/check-varlen-first).
template <bool kSoftcap, bool kAlibi>
__device__ __forceinline__ float logit_log2_dtanh_as(const ScoreMod& m, float dot, int row, int key, float& dtanh) {
    float s;
    if constexpr (kSoftcap) {
        const float t = tanh_approx(dot * m.softcap_pre);
        s = t * m.softcap_log2;
        dtanh = 1.f - t * t;
    } else {
        s = dot * m.scale_log2;
        dtanh = 1.f;
    }
    if constexpr (kAlibi) s -= m.slope_log2 * fabsf((float)(row + m.diag - key));
    return s;
}

// logit_log2's arithmetic, also giving softcap's derivative in s, 1 − tanh²(s / softcap) (1
// without softcap): the backward's dS factor, from the same tanh as its forward's logit.
__device__ __forceinline__ float logit_log2_dtanh(const ScoreMod& m, float dot, int row, int key, float& dtanh) {
    float s;
    dtanh = 1.f;
    if (m.softcap_pre != 0.f) {
        const float t = tanh_approx(dot * m.softcap_pre);
        s = t * m.softcap_log2;
        dtanh = 1.f - t * t;
    } else {
        s = dot * m.scale_log2;
    }
    if (m.slope_log2 != 0.f) s -= m.slope_log2 * fabsf((float)(row + m.diag - key));
    return s;
}
