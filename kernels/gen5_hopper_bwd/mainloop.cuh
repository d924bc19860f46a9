// Generation 5 (Hopper) backward: a consumer warpgroup's five products per step and the
// softmax gradient between them. Keys sit on the wgmma M side (the warpgroup's 64 keys), queries
// on N (the step's 64 queries), so Pᵀ and dSᵀ come out of the accumulators in the A-fragment
// layout and feed dV += Pᵀ·dO and dK += dSᵀ·Q straight from registers (RS wgmma).
#pragma once
#include "config.cuh"
#include "block_info.cuh"
#include "../common/params.cuh"
#include "../common/types.cuh"
#include "../common/opaque.cuh"
#include "../common/hopper/wgmma.cuh"
#include "../common/hopper/smem_io.cuh"

namespace fhb {

// Descriptors of one step's tiles (shared-memory matrix descriptors, 128-byte swizzle; see
// common/hopper/wgmma.cuh for the K-major and MN-major forms).
struct StepTiles {
    unsigned long long q_k, do_k;    // Q, dO as the K-major B of Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ
    unsigned long long q_mn, do_mn;  // Q, dO as the MN-major B of dK += dSᵀ·Q and dV += Pᵀ·dO
};

__device__ __forceinline__ StepTiles step_tiles(unsigned sQ, unsigned sDO) {
    return {make_desc_sw128(sQ, 16, 1024), make_desc_sw128(sDO, 16, 1024), make_desc_sw128(sQ, Q_BOX_BYTES, 1024),
            make_desc_sw128(sDO, Q_BOX_BYTES, 1024)};
}

__device__ __forceinline__ unsigned long long desc_plus(unsigned long long desc, unsigned bytes) {
    return desc + (unsigned long long)(bytes >> 4);
}

// Descriptors go through opaque() (common/opaque.cuh) at each call: otherwise the compiler hoists
// every k-step's descriptor of the loop-invariant K and V tiles out of the step loop (2 registers
// each, dozens in all), which spilled the consumers at D = 128.

// acc[64 keys x QUERY_ROWS queries] = rows[64 x D] · cols[QUERY_ROWS x D]ᵀ, both K-major (the forward's Q·Kᵀ with
// the roles swapped): Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ.
__device__ __forceinline__ void gemm_keys_by_queries(float (&acc)[ACC_REGS], unsigned long long rows,
                                                     unsigned long long cols) {
    rows = opaque(rows);
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
        const unsigned in_row = (k % 4) * 32;  // k16 step k: 32 bytes into the swizzled row, box k/4
        wgmma_ss(acc, desc_plus(rows, in_row + (k / 4) * KV_BOX_BYTES), desc_plus(cols, in_row + (k / 4) * Q_BOX_BYTES),
                 k > 0 ? 1 : 0);
    }
}

// acc[64 keys x D] += a[64 keys x QUERY_ROWS queries] · tile[QUERY_ROWS queries x D]: dV += Pᵀ·dO, dK += dSᵀ·Q, with
// a in registers (packed pairs, the A-fragment layout) and the tile MN-major.
__device__ __forceinline__ void gemm_accumulate_rows(float (&acc)[D / 2], const unsigned (&a)[FRAG_REGS],
                                                     unsigned long long tile) {
#pragma unroll
    for (int t = 0; t < QUERY_ROWS / 16; ++t) {
        const unsigned frag[4] = {a[4 * t + 0], a[4 * t + 1], a[4 * t + 2], a[4 * t + 3]};
        wgmma_rs_tb(acc, frag, desc_plus(tile, t * 16 * ROW_BYTES), 1);
    }
}

// dq[64 queries x 64 columns] = dS · K over DQ_KEYS keys: dS read from the dSᵀ tile (keys-major,
// so the A operand is MN-major) and K from the key tile (keys-major, head dim contiguous: MN-major).
__device__ __forceinline__ void gemm_dq(float (&dq)[32], unsigned long long ds, unsigned long long k) {
    k = opaque(k);
#pragma unroll
    for (int t = 0; t < DQ_KEYS / 16; ++t)
        wgmma_ss_ta_tb(dq, desc_plus(ds, t * 16 * ROW_BYTES), desc_plus(k, t * 16 * ROW_BYTES), t > 0 ? 1 : 0);
}

// dqt[64 columns x QUERY_ROWS queries] = Kᵀ · dSᵀ over the unit's KEY_ROWS keys (DQ_TRANSPOSED): K
// from the key tile's 64-column box (keys-major, head dim contiguous: the MN-major A) and dS from
// the query-major dS tile (keys contiguous: the K-major B, one 64-key box after the other).
template <int N>
__device__ __forceinline__ void gemm_dq_transposed(float (&dqt)[N], unsigned long long k, unsigned long long ds) {
    k = opaque(k);
#pragma unroll
    for (int t = 0; t < KEY_ROWS / 16; ++t)
        wgmma_ss_ta(dqt, desc_plus(k, t * 16 * ROW_BYTES), desc_plus(ds, (t % 4) * 32 + (t / 4) * DS_BOX_BYTES),
                    t > 0 ? 1 : 0);
}

__device__ __forceinline__ float2 ld_shared_f2(unsigned addr) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
    return v;
}

// Pᵀ = exp2(Sᵀ·scale·log2e − LSE·log2e) in place on the Sᵀ accumulator (this thread's keys
// key0 + {0, 8}, queries q_col + 8 j + {0, 1}), 0 where masked. `stats` holds the step's
// LSE·log2e (64 floats, +inf past seq_q) and then D (64 floats).
__device__ __forceinline__ void probabilities(const AttentionParams& p, float (&s)[ACC_REGS], unsigned stats, int q_col) {
#pragma unroll
    for (int j = 0; j < QUERY_ROWS / 8; ++j) {
        const float2 lse = ld_shared_f2(stats + 4 * (q_col + 8 * j));
#pragma unroll
        for (int e = 0; e < 4; ++e) s[4 * j + e] = exp2f(fmaf(s[4 * j + e], p.scale_log2, (e & 1) ? -lse.y : -lse.x));
    }
}

// Zeroes the probabilities of masked pairs (keys past seq_k, or above the causal diagonal).
__device__ __forceinline__ void apply_mask(const AttentionParams& p, float (&s)[ACC_REGS], int key0, int q0, int q_col) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        // The first query, relative to the step's, that sees key row r: one compare per element.
        const long long first = (long long)first_visible_query(p, key0 + 8 * r) - q0;
        const int rel = (int)max(min(first, (long long)QUERY_ROWS), -1ll);
#pragma unroll
        for (int j = 0; j < QUERY_ROWS / 8; ++j) {
            if (q_col + 8 * j < rel) s[4 * j + 2 * r] = 0.f;
            if (q_col + 8 * j + 1 < rel) s[4 * j + 2 * r + 1] = 0.f;
        }
    }
}

// dSᵀ = Pᵀ ∘ (dPᵀ − D) in place on the dPᵀ accumulator.
__device__ __forceinline__ void score_grads(float (&dp)[ACC_REGS], const float (&pt)[ACC_REGS], unsigned stats,
                                            int q_col) {
#pragma unroll
    for (int j = 0; j < QUERY_ROWS / 8; ++j) {
        const float2 dvec = ld_shared_f2(stats + 4 * QUERY_ROWS + 4 * (q_col + 8 * j));
#pragma unroll
        for (int e = 0; e < 4; ++e) dp[4 * j + e] = pt[4 * j + e] * (dp[4 * j + e] - ((e & 1) ? dvec.y : dvec.x));
    }
}

// Zeroes, in each of `acc` (Pᵀ, dSᵀ or both), the pairs the mask hides: per key row, the query rows
// that see it (backward_scores.cuh's query_range: the window, and rows past len_q, which with varlen
// hold the next sequence's), then one pair of compares per element, as apply_mask. Whatever a hidden
// pair's inputs were (the next sequence's rows, a key past the end, NaN padding), it adds nothing:
// dSᵀ needs the mask as well as Pᵀ, since 0 · NaN is NaN.
template <typename... Acc>
__device__ __forceinline__ void mask_hidden(const AttentionParams& p, unsigned smem_base, int key, int q0, int q_col,
                                            Acc&... acc) {
    const SeqLengths len = unit_lengths(p, smem_base);  // (read here: held across the products, it spilled)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const QueryRange rows = query_range(p, seq_of_lengths(0, len.len_q, len.len_k), key + 8 * r);
        // Relative to the step's first query, clamped to [-1, QUERY_ROWS] (rows is within a length).
        const int lo = max(min(rows.first - q0, QUERY_ROWS), -1), hi = max(min(rows.end - q0, QUERY_ROWS), -1);
#pragma unroll
        for (int j = 0; j < QUERY_ROWS / 8; ++j) {
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const int col = q_col + 8 * j + c;
                const bool visible = col >= lo && col < hi;
                ((acc[4 * j + 2 * r + c] = visible ? acc[4 * j + 2 * r + c] : 0.f), ...);
            }
        }
    }
}

// Modes builds of 64 or 80 queries (ONE_PASS): Pᵀ and dSᵀ in one pass over the Sᵀ and dPᵀ
// accumulators, in place, by common/backward_scores.cuh's rules (bwd_score's: the logit with
// softcap and ALiBi, dS through softcap's 1 − tanh²) for query head h of sequence b, the modifiers
// compiled in (kSoftcap, kAlibi; see scores_and_grads). This thread's keys are `key` + {0, 8}, its
// queries q0 + q_col + 8 j + {0, 1}; `stats` as for probabilities. The mask is mask_hidden's pass.
template <bool kSoftcap, bool kAlibi>
__device__ __forceinline__ void scores_and_grads_as(const AttentionParams& p, unsigned smem_base, int b, int h,
                                                    float (&s)[ACC_REGS], float (&dp)[ACC_REGS], unsigned stats,
                                                    int key, int q0, int q_col) {
    // Built per step, not kept across the steps: the parameters are constant-bank operands, and
    // the slope one cached load; a ScoreMod held in registers across the step loop spilled.
    const SeqLengths len = unit_lengths(p, smem_base);
    const ScoreMod mod = score_mod(p, seq_of_lengths(b, len.len_q, len.len_k), b, h);
#pragma unroll
    for (int j = 0; j < QUERY_ROWS / 8; ++j) {
        const float2 lse = ld_shared_f2(stats + 4 * (q_col + 8 * j));
        const float2 dvec = ld_shared_f2(stats + 4 * QUERY_ROWS + 4 * (q_col + 8 * j));
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int query = q0 + q_col + 8 * j + (e & 1), k = key + 8 * (e >> 1);
            float dtanh;
            const float logit = logit_log2_dtanh_as<kSoftcap, kAlibi>(mod, s[4 * j + e], query, k, dtanh);
            const float pr = exp2f(logit - ((e & 1) ? lse.y : lse.x));
            const float ds = pr * (dp[4 * j + e] - ((e & 1) ? dvec.y : dvec.x));
            s[4 * j + e] = pr;
            dp[4 * j + e] = kSoftcap ? ds * dtanh : ds;
        }
    }
}

// scores_and_grads_as in the form the step needs: the element math without the mode's terms for a
// problem that lacks them, then the mask as its own pass on steps that have masked pairs (as the
// dense build's apply_mask). Warp-uniform branches once a step, instead of tests per element.
__device__ __forceinline__ void scores_and_grads(const AttentionParams& p, unsigned smem_base, int b, int h,
                                                 float (&s)[ACC_REGS], float (&dp)[ACC_REGS], unsigned stats,
                                                 int key, int q0, int q_col, bool masked) {
    const bool softcap = p.softcap_pre != 0.f, alibi = p.alibi_slopes != nullptr;
    if (softcap) {
        if (alibi) scores_and_grads_as<true, true>(p, smem_base, b, h, s, dp, stats, key, q0, q_col);
        else scores_and_grads_as<true, false>(p, smem_base, b, h, s, dp, stats, key, q0, q_col);
    } else {
        if (alibi) scores_and_grads_as<false, true>(p, smem_base, b, h, s, dp, stats, key, q0, q_col);
        else scores_and_grads_as<false, false>(p, smem_base, b, h, s, dp, stats, key, q0, q_col);
    }
    if (masked) mask_hidden(p, smem_base, key, q0, q_col, s, dp);
}

// Modes builds of 128 queries (no softcap; !ONE_PASS): Pᵀ in place on the Sᵀ accumulator, the
// logit with ALiBi's term (kAlibi) as probabilities has it without; unmasked (mask_hidden follows
// on masked steps, on Pᵀ and dSᵀ together).
template <bool kAlibi>
__device__ __forceinline__ void mode_probabilities_as(const AttentionParams& p, unsigned smem_base, int b, int h,
                                                      float (&s)[ACC_REGS], unsigned stats, int key, int q0,
                                                      int q_col) {
    const SeqLengths len = unit_lengths(p, smem_base);
    const ScoreMod mod = score_mod(p, seq_of_lengths(b, len.len_q, len.len_k), b, h);
#pragma unroll
    for (int j = 0; j < QUERY_ROWS / 8; ++j) {
        const float2 lse = ld_shared_f2(stats + 4 * (q_col + 8 * j));
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int query = q0 + q_col + 8 * j + (e & 1), k = key + 8 * (e >> 1);
            float dtanh;  // (1 without softcap)
            const float logit = logit_log2_dtanh_as<false, kAlibi>(mod, s[4 * j + e], query, k, dtanh);
            s[4 * j + e] = exp2f(logit - ((e & 1) ? lse.y : lse.x));
        }
    }
}

__device__ __forceinline__ void mode_probabilities(const AttentionParams& p, unsigned smem_base, int b, int h,
                                                   float (&s)[ACC_REGS], unsigned stats, int key, int q0, int q_col) {
    if (p.alibi_slopes != nullptr) mode_probabilities_as<true>(p, smem_base, b, h, s, stats, key, q0, q_col);
    else mode_probabilities_as<false>(p, smem_base, b, h, s, stats, key, q0, q_col);
}

// f32 accumulator pairs to packed elem_t pairs: the accumulator layout is the A-fragment layout,
// register for register (common/hopper/wgmma.cuh).
__device__ __forceinline__ void pack_fragment(const float (&acc)[ACC_REGS], unsigned (&frag)[FRAG_REGS]) {
#pragma unroll
    for (int i = 0; i < FRAG_REGS; ++i) frag[i] = pack2_u32(acc[2 * i], acc[2 * i + 1]);
}

// The warpgroup's dSᵀ rows into the step's dSᵀ tile: key row `row0` (+8) of the tile, queries
// q_col + 8 j (+1), in 64-query box j / 8; 16-byte chunk c of row r sits at chunk c ^ (r & 7)
// (the 128-byte swizzle TMA and wgmma use), so the 8 rows a store instruction touches hit 8
// different chunks.
__device__ __forceinline__ void store_ds_t(unsigned tile, const unsigned (&ds)[FRAG_REGS], int row0, int lane) {
    if constexpr (DS_STMATRIX && QUERY_ROWS == 64) {
        // Registers 4t .. 4t + 3 are the 8 x 8 blocks (keys +0 / +8, query chunk 2t) and (+0 / +8,
        // chunk 2t + 1) of the warp's 16 keys; lane l gives row l % 8 of block l / 8 (one box: 64
        // queries are 8 chunks).
        const int block = lane >> 3;
        const unsigned row = (unsigned)((row0 & ~15) + 8 * (block & 1) + (lane & 7));
#pragma unroll
        for (int t = 0; t < QUERY_ROWS / 16; ++t) {
            const unsigned chunk = (unsigned)(2 * t + (block >> 1));
            stmatrix_x4(tile + row * ROW_BYTES + ((chunk ^ (row & 7u)) << 4), ds[4 * t], ds[4 * t + 1],
                        ds[4 * t + 2], ds[4 * t + 3]);
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < QUERY_ROWS / 8; ++j) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const unsigned row = (unsigned)(row0 + 8 * r);
            const unsigned addr = tile + (j / 8) * DS_BOX_BYTES + row * ROW_BYTES +
                                  ((((unsigned)j % 8u) ^ (row & 7u)) << 4) + 4 * (lane & 3);
            asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(ds[2 * j + r]) : "memory");
        }
    }
}

// The warpgroup's dSᵀ fragments into the step's query-major dS tile (DQ_TRANSPOSED), transposed on
// the way by stmatrix: fragment (j, r) is the 8 x 8 block of keys wg_key0 + 16 warp + 8 r + (0..7)
// by queries 8 j + (0..7); stored transposed, each query's 8 keys are one 16-byte chunk of its
// 128-byte row, chunk c at c ^ (query & 7) (the 128-byte swizzle). Lane l gives the row address of
// block l / 8 of the four a stmatrix.x4 stores.
__device__ __forceinline__ void store_ds_query_major(unsigned tile, const unsigned (&ds)[FRAG_REGS], int wg_key0,
                                                     int warp, int lane) {
    const int block = lane >> 3, row = lane & 7;
    const unsigned chunk = (unsigned)(((wg_key0 % 64) + 16 * warp + 8 * (block & 1)) / 8);
    const unsigned box = tile + (unsigned)(wg_key0 / 64) * DS_BOX_BYTES;
#pragma unroll
    for (int t = 0; t < FRAG_REGS / 4; ++t) {
        const unsigned query = (unsigned)(8 * (2 * t + (block >> 1)) + row);
        const unsigned addr = box + query * ROW_BYTES + ((chunk ^ (query & 7u)) << 4);
        stmatrix_x4_trans(addr, ds[4 * t], ds[4 * t + 1], ds[4 * t + 2], ds[4 * t + 3]);
    }
}

}  // namespace fhb
