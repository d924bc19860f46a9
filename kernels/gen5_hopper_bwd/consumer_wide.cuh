// Generation 5 (Hopper) backward: the consumers of the wide builds (D = 192 and 256, config.cuh's
// WIDE). A unit is 64 keys, and both consumer warpgroups take all of them; the step's products are
// split between them by kind rather than by keys, so each holds one D-wide accumulator (dV or dK,
// D / 2 registers a thread) instead of two:
//   warpgroup 1 (cw 0): Sᵀ = K·Qᵀ, Pᵀ; Pᵀ to shared memory; dV += Pᵀ·dO      (RS, Pᵀ from registers)
//   warpgroup 2 (cw 1): dPᵀ = V·dOᵀ; dSᵀ = Pᵀ ∘ (dPᵀ − D) with the Pᵀ it reads; dK += dSᵀ·Q (RS);
//                       dS to the query-major tile
//   both:               their dQᵀ slices = Kᵀ·dSᵀ (SS), bulk-reduced into the accumulator.
// Sᵀ and dPᵀ have the same shape and accumulator layout, so a thread of warpgroup 2 reads exactly
// the Pᵀ elements of its own dPᵀ registers. The tensor work is even (one D-deep and one D-wide
// product each, DV = D); warpgroup 1 also computes the exp2s, warpgroup 2 the dS tile.
// Modes (windows, softcap, ALiBi, varlen) as the other builds take them (common/backward_scores.cuh):
// warpgroup 1 applies them to Pᵀ and masks it; with softcap it passes Pᵀ ∘ (1 − tanh²) instead,
// which is all dSᵀ needs of the scores. At a unit's end the K and V tiles are free, and stage dK
// and dV on their way out.
#pragma once
#include "config.cuh"
#include "block_info.cuh"
#include "mainloop.cuh"
#include "dq_reduce.cuh"
#include "epilogue.cuh"
#include "../common/params.cuh"
#include "../common/backward_params.cuh"
#include "../common/backward_scores.cuh"
#include "../common/score_mod.cuh"
#include "../common/seqlen.cuh"
#include "../common/tensor_index.cuh"
#include "../common/hopper/mbarrier.cuh"
#include "../common/hopper/wgmma.cuh"
#include "../common/hopper/named_barrier.cuh"

namespace fhb {

#if FC_HEAD_DIM > 128

// The step's Pᵀ through shared memory, register i of thread tid at word i·128 + tid (conflict-free
// for both warpgroups, which hold the same elements in the same registers).
__device__ __forceinline__ void put_probabilities(unsigned exchange, const float (&pt)[ACC_REGS], int tid) {
#pragma unroll
    for (int i = 0; i < ACC_REGS; ++i)
        asm volatile("st.shared.f32 [%0], %1;" ::"r"(exchange + 4u * (128u * i + tid)), "f"(pt[i]) : "memory");
}
// Modes (FC_BWD_MODES): Pᵀ in place on the Sᵀ accumulator by common/backward_scores.cuh's rules
// (the logit with softcap and ALiBi, as mainloop.cuh's scores_and_grads_as), and with softcap
// 1 − tanh² of each score into `dt`, for warpgroup 2's dS. Unmasked: mask_hidden follows.
template <bool kSoftcap, bool kAlibi>
__device__ __forceinline__ void wide_mode_probabilities_as(const AttentionParams& p, unsigned smem_base, int b, int h,
                                                           float (&s)[ACC_REGS], float (&dt)[ACC_REGS],
                                                           unsigned stats, int key, int q0, int q_col) {
    const SeqLengths len = unit_lengths(p, smem_base);
    const ScoreMod mod = score_mod(p, seq_of_lengths(b, len.len_q, len.len_k), b, h);
#pragma unroll
    for (int j = 0; j < QUERY_ROWS / 8; ++j) {
        const float2 lse = ld_shared_f2(stats + 4 * (q_col + 8 * j));
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int query = q0 + q_col + 8 * j + (e & 1), k = key + 8 * (e >> 1);
            float dtanh;
            const float logit = logit_log2_dtanh_as<kSoftcap, kAlibi>(mod, s[4 * j + e], query, k, dtanh);
            s[4 * j + e] = exp2f(logit - ((e & 1) ? lse.y : lse.x));
            if constexpr (kSoftcap) dt[4 * j + e] = dtanh;
        }
    }
}

// The step's probabilities for a modes build, the terms the problem has chosen once a step; then
// the mask's own pass on steps with hidden pairs (their Pᵀ and 1 − tanh² zeroed).
__device__ __forceinline__ void wide_mode_probabilities(const AttentionParams& p, unsigned smem_base, int b, int h,
                                                        float (&s)[ACC_REGS], float (&dt)[ACC_REGS], unsigned stats,
                                                        int key, int q0, int q_col, bool masked) {
    const bool softcap = p.softcap_pre != 0.f, alibi = p.alibi_slopes != nullptr;
    if (softcap) {
        if (alibi) wide_mode_probabilities_as<true, true>(p, smem_base, b, h, s, dt, stats, key, q0, q_col);
        else wide_mode_probabilities_as<true, false>(p, smem_base, b, h, s, dt, stats, key, q0, q_col);
    } else {
        if (alibi) wide_mode_probabilities_as<false, true>(p, smem_base, b, h, s, dt, stats, key, q0, q_col);
        else wide_mode_probabilities_as<false, false>(p, smem_base, b, h, s, dt, stats, key, q0, q_col);
    }
    if (masked) mask_hidden(p, smem_base, key, q0, q_col, s, dt);
}

// What warpgroup 2 needs of the probabilities: Pᵀ, or with softcap Pᵀ ∘ (1 − tanh²).
__device__ __forceinline__ void put_grad_weights(unsigned exchange, const float (&pt)[ACC_REGS],
                                                 const float (&dt)[ACC_REGS], bool softcap, int tid) {
#pragma unroll
    for (int i = 0; i < ACC_REGS; ++i) {
        const float w = softcap ? pt[i] * dt[i] : pt[i];
        asm volatile("st.shared.f32 [%0], %1;" ::"r"(exchange + 4u * (128u * i + tid)), "f"(w) : "memory");
    }
}

// dSᵀ = W ∘ (dPᵀ − D) in place on the dPᵀ accumulator (mainloop.cuh's score_grads), with the weights
// W (Pᵀ, or with softcap Pᵀ ∘ (1 − tanh²)) read from the exchange element by element. In a modes
// build a pair whose weight is 0 gets dS = 0 whatever its dPᵀ: the mask's rule (a hidden pair adds
// nothing), and for a visible pair the same value.
__device__ __forceinline__ void exchanged_score_grads(float (&dp)[ACC_REGS], unsigned exchange, unsigned stats,
                                                      int q_col, int tid) {
#pragma unroll
    for (int j = 0; j < QUERY_ROWS / 8; ++j) {
        const float2 dvec = ld_shared_f2(stats + 4 * QUERY_ROWS + 4 * (q_col + 8 * j));
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            float pt;
            asm volatile("ld.shared.f32 %0, [%1];" : "=f"(pt) : "r"(exchange + 4u * (128u * (4 * j + e) + tid)) : "memory");
            const float ds = pt * (dp[4 * j + e] - ((e & 1) ? dvec.y : dvec.x));
            dp[4 * j + e] = MODES && pt == 0.f ? 0.f : ds;
        }
    }
}

// Both roles run one instruction stream for their products, with operands chosen by role: wgmma
// under a run-time branch is serialized by ptxas (C7520), and the two roles inlined as separate
// paths spilled at D = 256 where either alone does not. Only the elementwise work between the
// products branches.
__device__ __forceinline__ void wide_consumer(const AttentionParams& p, const BackwardParams& g, unsigned base,
                                              int cw) {
    const bool scores = cw == 0;  // warpgroup 1: Sᵀ, Pᵀ and dV; 2: dPᵀ, dSᵀ and dK
    const long long units = num_units(p);
    const int group = p.q_heads_per_kv;
    const int tid = threadIdx.x & 127;
    const int warp = tid >> 5, lane = tid & 31;
    const int key_in_wg = warp * 16 + (lane >> 2);  // this thread's accumulator rows: + {0, 8}
    const int q_col = 2 * (lane & 3);               // and its columns: 8 j + q_col + {0, 1}
    const unsigned sK = base + OFF_K, sV = base + OFF_V;
    const unsigned bar_kv_full = base + OFF_BAR, bar_kv_empty = bar_kv_full + 8;
    const unsigned bar_q_full = bar_kv_empty + 8;
    const unsigned bar_q_empty = bar_q_full + 8 * STAGES;
    const unsigned exchange = base + OFF_P_EXCHANGE;
    // Sᵀ's A is K, dPᵀ's is V: the 64 rows, K-major.
    const unsigned long long kv_rows = make_desc_sw128(scores ? sK : sV, 16, 1024);
    const int first_slice = scores ? 0 : WG0_DQ_SLICES;
    // (equal at D = 256, so the loop below does not branch there)
    const int slices = scores ? WG0_DQ_SLICES : DQ_SLICES - WG0_DQ_SLICES;
    const unsigned wg_staging = base + OFF_DQ + cw * DQ_WG_STAGING_BYTES;

    int stage = 0;
    unsigned phase = 0;
    unsigned unit_parity = 0;
    unsigned step = 0;
    for (long long t = blockIdx.x; t < units; t += gridDim.x, unit_parity ^= 1u) {
        const Unit u = decode_unit(p, t);
        const int key0 = u.k0;
        float acc[D / 2];  // dV (warpgroup 1) or dK (warpgroup 2) of the unit's 64 keys
#pragma unroll
        for (int i = 0; i < D / 2; ++i) acc[i] = 0.f;
        mbar_wait(bar_kv_full, unit_parity, TAG_KV_FULL);

        for (int gi = 0; gi < group; ++gi) {
            const long long bh = (long long)u.b * p.heads_q + u.h_kv * group + gi;
            for (int m = u.first_q_block; m < u.q_blocks; ++m, ++step) {
                const int q0 = m * QUERY_ROWS;
                const StepTiles tiles =
                    step_tiles(base + OFF_Q + stage * Q_TILE_BYTES, base + OFF_DO + stage * Q_TILE_BYTES);
                const unsigned stats = base + OFF_STATS + stage * STATS_BYTES;
                const unsigned ds_tile = base + OFF_DS + (step & 1u) * DS_BYTES;
                mbar_wait(bar_q_full + 8 * stage, phase, TAG_Q_FULL);

                float sc[ACC_REGS];  // Sᵀ, then Pᵀ (warpgroup 1); dPᵀ, then dSᵀ (warpgroup 2)
                unsigned frag[FRAG_REGS];
                wgmma_fence();
                gemm_keys_by_queries(sc, kv_rows, scores ? tiles.q_k : tiles.do_k);
                wgmma_commit();
                wgmma_wait<0>();
                fence_regs(sc);
                if (scores) {
                    if constexpr (MODES) {
                        float dt[ACC_REGS];  // 1 − tanh² with softcap
                        wide_mode_probabilities(p, base, u.b, u.h_kv * group + gi, sc, dt, stats, key0 + key_in_wg, q0,
                                                q_col, needs_mask(p, unit_lengths(p, base), key0, q0));
                        put_grad_weights(exchange, sc, dt, p.softcap_pre != 0.f, tid);
                    } else {
                        probabilities(p, sc, stats, q_col);
                        if (needs_mask(p, unit_lengths(p, base), key0, q0)) apply_mask(p, sc, key0 + key_in_wg, q0, q_col);
                        put_probabilities(exchange, sc, tid);
                    }
                    named_bar_arrive(BAR_P, CONSUMER_THREADS);
                } else {
                    named_bar_sync(BAR_P, CONSUMER_THREADS);
                    exchanged_score_grads(sc, exchange, stats, q_col, tid);
                }
                pack_fragment(sc, frag);
                wgmma_fence();
                gemm_accumulate_rows(acc, frag, scores ? tiles.do_mn : tiles.q_mn);  // dV or dK
                wgmma_commit();
                if (!scores) {
                    store_ds_query_major(ds_tile, frag, 0, warp, lane);
                    fence_proxy_async_smem();
                }
                named_bar_sync(BAR_DS, CONSUMER_THREADS);  // the dS tile is written

                // dQᵀ one slice at a time (the slices' accumulators together spill at D = 256): each
                // is staged once its staging quarter's reduce of the step before has read it (the
                // later slices' reduces of this step may still be in flight), then bulk-reduced by
                // lane 0.
                const unsigned long long ds_desc = make_desc_sw128(ds_tile, 16, 1024);
#pragma unroll
                for (int j = 0; j < DQ_WG_SLICES; ++j) {
                    if (j >= slices) break;
                    float dq[DQ_REGS];
                    wgmma_fence();
                    gemm_dq_transposed(dq, make_desc_sw128(sK + (first_slice + j) * KV_BOX_BYTES, KV_BOX_BYTES, 1024),
                                       ds_desc);
                    wgmma_commit();
                    wgmma_wait<0>();  // (with the first slice: dV or dK too)
                    fence_regs(dq);
                    if (j == slices - 1) {
                        // Q, dO, the stats and Pᵀ of this stage are read.
                        fence_regs(acc);
                        fence_regs(frag);
                        mbar_arrive(bar_q_empty + 8 * stage);
                    }
                    const unsigned staging = wg_staging + j * DQ_SLICE_BYTES + warp * DQ_WARP_BYTES;
                    static_assert(DQ_WG_SLICES <= 2, "a pending count per slice");
                    if (lane == 0) {
                        if (j == 0) wait_dq_staging_read_but<0>();
                        else wait_dq_staging_read_but<1>();
                    }
                    __syncwarp();
                    stage_dq(staging, dq, lane);
                    fence_proxy_async_smem();
                    __syncwarp();
                    if (lane == 0)
                        reduce_dq_quarter(dq_slice(p, bh, m, first_slice + j) + warp * DQ_WARP_FLOATS, staging);
                }
                if (++stage == STAGES) {
                    stage = 0;
                    phase ^= 1u;
                }
            }
        }
        // ---- epilogue: both warpgroups are done with K and V (every product on them has been
        // waited for), whose tiles now stage dV (warpgroup 1, in V's) and dK (× scale, in K's).
        const int len_k = unit_lengths(p, base).len_k;
        named_bar_sync(BAR_UNIT_DONE, CONSUMER_THREADS);
        const int k_row0 = bwd_k_row(p, u.b, 0);
        elem_t* const rows = scores ? static_cast<elem_t*>(g.dv) + dv_offset(g, u.b, u.h_kv, k_row0)
                                    : static_cast<elem_t*>(g.dk) + dk_offset(g, u.b, u.h_kv, k_row0);
        store_key_rows<KV_TILE_BYTES>(rows, scores ? g.dv_row_stride : g.dk_row_stride, acc, key0, len_k, p.head_dim,
                                      scores ? 1.f : p.softmax_scale, scores ? sV : sK, BAR_EPILOGUE + cw, warp,
                                      lane, tid);
        // The copies that refill the tiles are async-proxy writes: order this thread's generic
        // accesses to them (its staging stores and loads) before its release.
        fence_proxy_async_smem();
        mbar_arrive(bar_kv_empty);
    }
    if (lane == 0) wait_dq_reduces();
}

#endif  // FC_HEAD_DIM > 128

}  // namespace fhb
