// Generation 5 (Hopper): the backward pass on TMA, mbarrier and wgmma, warp-specialized (sm_90a).
// Design, resources and measurements: docs/generations/gen5-hopper-bwd.md.
//
// Three launches on one stream:
//   1. bwd_hopper_prepare: several padded query rows a warp: D = rowsum(dO ∘ O), or in a modes
//      build rowsum(P ∘ dP) for a row that sees at most 32 keys (common/short_row_delta.cuh; 0 past
//      seq_q), into the workspace, and the rows' share of the f32 dQ accumulator zeroed.
//   2. bwd_hopper_dk_dv: one CTA per (128-key block, batch, KV head) unit, grid-stride. Warpgroup
//      0 is the producer (producer.cuh): TMA for K and V once per unit and for Q and dO per query
//      block (64, 80 or 128 rows: config.cuh) into a 2-stage ring, with the block's LSE and D
//      staged beside them. Warpgroups 1 and 2 are the consumers; each owns 64 of the keys and
//      keeps their dK and dV in f32 registers across the query blocks (of every query head of the
//      KV group) that see them. Per step (mainloop.cuh):
//        Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ                         (SS wgmma)
//        Pᵀ = exp2(Sᵀ·scale·log2e − LSE·log2e), dSᵀ = Pᵀ ∘ (dPᵀ − D)
//        dV += Pᵀ·dO                                    (RS wgmma: Pᵀ from registers)
//        dS to shared memory; dQ slice = dS·K           (SS wgmma, both operands MN-major), or
//          with 80-query steps dQᵀ slice = Kᵀ·dSᵀ        (SS wgmma, Kᵀ MN-major)
//        dK += dSᵀ·Q                                    (RS wgmma), issued after dQ, and while it
//          runs the dQ slice is bulk-reduced (cp.reduce.async.bulk .add.f32) into the workspace
//          accumulator (FC_BWD_DQ_BEFORE_DK).
//      The wide builds (D = 192 and 256, consumer_wide.cuh) take 64-key units that both consumers
//      share, split the step's products between them (Sᵀ, Pᵀ, dV / dPᵀ, dSᵀ, dK, with Pᵀ passed
//      through shared memory), and compute dQᵀ in 32-query steps.
//   3. bwd_hopper_dq_convert (one CTA per query block, through shared memory): dQ = scale ·
//      accumulator, rounded to the element type.
// dQ's f32 additions arrive in whatever order the CTAs reach them: the last bits of dQ may differ
// from run to run (AttentionBackward::deterministic is false for this kernel). dK and dV are
// summed by one warpgroup in a fixed order.
//
// Rows past a sequence's end are zero-filled by TMA; their probabilities are forced to 0 through
// LSE = +inf (query tails) or the mask (key tails), so neither a tail nor NaN padding past it
// reaches a gradient. With varlen (FC_BWD_VARLEN) a box past a sequence's end holds the next
// sequence's rows, and the mask zeroes those pairs' P and dS (config.cuh).
//
// Windows, softcap, ALiBi and varlen build with FC_BWD_MODES (config.cuh): the scores take
// common/backward_scores.cuh's rules, and a key block walks only the query blocks its window
// reaches (block_info.cuh's query_walk). With 64 queries a step P and dS come in one pass
// (mainloop.cuh's scores_and_grads); with 128 (D = 64 without softcap) the step keeps the dense
// flow, its probabilities and mask taking the modes (mode_probabilities, mask_hidden).
#include "common/params.cuh"
#include "common/types.cuh"
#include "common/tensor_index.cuh"
#include "common/backward_params.cuh"
#include "common/masking.cuh"
#include "common/hopper/mbarrier.cuh"
#include "common/hopper/tma.cuh"
#include "common/hopper/wgmma.cuh"
#include "common/hopper/smem_io.cuh"
#include "common/hopper/named_barrier.cuh"
#include "common/opaque.cuh"
#include "common/row_dot.cuh"
#include "common/short_row_delta.cuh"
#include "common/padded_head.cuh"

#include "gen5_hopper_bwd/config.cuh"
#include "gen5_hopper_bwd/block_info.cuh"
#include "gen5_hopper_bwd/mainloop.cuh"
#include "gen5_hopper_bwd/dq_reduce.cuh"
#include "gen5_hopper_bwd/producer.cuh"
#include "gen5_hopper_bwd/epilogue.cuh"
#include "gen5_hopper_bwd/consumer_wide.cuh"
#include "gen5_hopper_bwd/trace.cuh"

using namespace fhb;

// ---- 1. D = rowsum(dO ∘ O), accumulator zeroed ----
// Several padded rows a warp, each read in 16-byte chunks (common/row_dot.cuh); in a modes build a
// row that sees few keys takes D = rowsum(P ∘ dP) instead (common/short_row_delta.cuh). The lanes
// of a row then zero its share of the f32 dQ accumulator.
//
// A modes build's warps take their rows group-major (row group g of every head, then g + 1): a
// causal sequence's short rows are its first, so their chains of key loads start in the first wave
// and run under the other rows' streaming instead of holding the launch's tail (this launch on a
// causal varlen 8 x 2048 at D = 64: 69.7 -> 49.2 us, its dense twin's 32.6;
// docs/results/2026-12-02-hopper-bwd-schedule-h200, call 4). A dense build has no short rows and
// keeps head-major order (group-major cost its launch 0.4-2.2 us there); the two orders differ only
// in the loop's head, hence the #if around it. Varlen skips a sequence's rows past its last query
// block: no unit reads their D or adds to their accumulator rows (block_info.cuh's query_walk ends
// at the sequence's length), and the convert launch skips them too.
using Dot = RowDot<D>;
extern "C" __global__ void __launch_bounds__(128)
bwd_hopper_prepare(const __grid_constant__ AttentionParams p, const __grid_constant__ BackwardParams g) {
    const int lane = threadIdx.x % 32;
    const int sub_row = lane / Dot::lanes, chunk = lane % Dot::lanes;
    const long long rows = padded_rows(p);
#if FC_BWD_MODES
    const int row_span = query_blocks(p) * QUERY_ROWS;
    static_assert(QUERY_ROWS % Dot::rows_per_warp == 0, "a warp's rows lie in one query block of one head");
    const long long heads = (long long)p.batch * p.heads_q;
    const long long groups = rows / Dot::rows_per_warp;
    const long long stride = (long long)gridDim.x * (blockDim.x / 32);
    for (long long w = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; w < groups; w += stride) {
        const long long r0 = (w % heads) * row_span + (w / heads) * Dot::rows_per_warp;
        if constexpr (VARLEN) {
            const int b = (int)((w % heads) / p.heads_q);
            const int len_q = bwd_len_q(p, b);
            if ((w / heads) * Dot::rows_per_warp >= (len_q + QUERY_ROWS - 1) / QUERY_ROWS * QUERY_ROWS) continue;
        }
#else
    const long long stride = (long long)gridDim.x * (blockDim.x / 32) * Dot::rows_per_warp;
    const int row_span = query_blocks(p) * QUERY_ROWS;
    for (long long r0 = ((long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * Dot::rows_per_warp;
         r0 < rows; r0 += stride) {
#endif
        const long long r = r0 + sub_row;
        float acc = 0.f;
        if (r < rows && chunk < Dot::chunks && chunk_in_head<PADDED_HEAD>(p.head_dim, chunk)) {
            const long long bh = r / row_span;
            const int row = (int)(r % row_span);
            if (row < p.seq_q) {  // (seq_q: the longest sequence's)
                const int b = (int)(bh / p.heads_q), h = (int)(bh % p.heads_q);
                if (row < bwd_len_q(p, b)) {
                    const int at = bwd_q_row(p, b, row);
                    acc = Dot::partial(static_cast<const elem_t*>(p.o) + o_offset(p, b, h, at),
                                       static_cast<const elem_t*>(g.d_o) + do_offset(g, b, h, at), chunk);
                }
            }
        }
        acc = Dot::reduce(acc);  // (every lane: r0 is the warp's)
#if FC_BWD_MODES
        {
            const long long bh = r / row_span;
            const int row = (int)(r % row_span);
            const int b = (int)(bh / p.heads_q), h = (int)(bh % p.heads_q);
            const bool real = r < rows && row < p.seq_q && row < bwd_len_q(p, b);
            acc = short_row_delta<Dot, PADDED_HEAD>(p, g, real, b, h, row, chunk, acc);
        }
#endif
        if (r < rows) {
            if (chunk == 0) p.workspace[r] = acc;
            float4* zero = reinterpret_cast<float4*>(dq_accumulator(p) + r * D);
            for (int c = chunk; c < D / 4; c += Dot::lanes) zero[c] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }
}

// ---- 2. dK, dV, and dQ partials ----
extern "C" __global__ void __launch_bounds__(THREADS, 1)
bwd_hopper_dk_dv(const __grid_constant__ AttentionParams p, const __grid_constant__ BackwardParams g,
                 const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                 const __grid_constant__ CUtensorMap tm_v, const __grid_constant__ CUtensorMap tm_do) {
    // Declared 16-aligned on purpose: with __align__(1024) the compiler may fold the round-up away.
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const unsigned sK = base + OFF_K, sV = base + OFF_V;
    const unsigned bar_kv_full = base + OFF_BAR, bar_kv_empty = bar_kv_full + 8;
    const unsigned bar_q_full = bar_kv_empty + 8;            // + 8 stage
    const unsigned bar_q_empty = bar_q_full + 8 * STAGES;    // + 8 stage

    if (threadIdx.x == 0) {
        mbar_init(bar_kv_full, 1);
        mbar_init(bar_kv_empty, CONSUMER_THREADS);
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(bar_q_full + 8 * s, PRODUCER_LANES);
            mbar_init(bar_q_empty + 8 * s, CONSUMER_THREADS);
        }
        mbar_fence_init();
        tma_prefetch_map(&tm_q);
        tma_prefetch_map(&tm_k);
        tma_prefetch_map(&tm_v);
        tma_prefetch_map(&tm_do);
    }
    __syncthreads();

    const long long units = num_units(p);
    const int group = p.q_heads_per_kv;
    const int warpgroup = threadIdx.x / 128;

    if (warpgroup == 0) {
        // ===================================== producer =====================================
        warpgroup_reg_dealloc<PRODUCER_REGS>();
        if (threadIdx.x < PRODUCER_LANES) {
            const int lane = threadIdx.x;
            const BackwardMaps maps{&tm_q, &tm_k, &tm_v, &tm_do};
            int stage = 0;
            unsigned phase = 0;
            unsigned unit_parity = 0;
            for (long long t = blockIdx.x; t < units; t += gridDim.x, unit_parity ^= 1u) {
                const Unit u = decode_unit(p, t);
                const int len_q = bwd_len_q(p, u.b);
                // K and V of the previous unit released by both consumers.
                mbar_wait(bar_kv_empty, unit_parity ^ 1u, TAG_KV_EMPTY);
                if (lane == 0) {
                    park_unit_lengths(p, u.b, base);
                    // A unit no query block sees (past its sequence's keys, or outside every
                    // window) stores zero dK and dV without its K and V: the barrier completes
                    // without bytes. Its rows may not exist (an empty varlen K/V).
                    if (u.first_q_block < u.q_blocks) {
                        load_key_block(p, maps, u, sK, sV, bar_kv_full);
                    } else {
                        mbar_arrive(bar_kv_full);
                    }
                }
                for (int gi = 0; gi < group; ++gi) {
                    const int h = u.h_kv * group + gi;
                    for (int m = u.first_q_block; m < u.q_blocks; ++m) {
                        const unsigned full = bar_q_full + 8 * stage;
                        mbar_wait(bar_q_empty + 8 * stage, phase ^ 1u, TAG_Q_EMPTY);
                        if (lane == 0) {
                            load_query_block(p, maps, u.b, h, m, base + OFF_Q + stage * Q_TILE_BYTES,
                                             base + OFF_DO + stage * Q_TILE_BYTES, full);
                        }
                        stage_stats(p, u.b, h, m, len_q, base + OFF_STATS + stage * STATS_BYTES, lane);
                        mbar_arrive(full);
                        if (++stage == STAGES) {
                            stage = 0;
                            phase ^= 1u;
                        }
                    }
                }
            }
        }
    } else {
        // ===================================== consumers ====================================
        warpgroup_reg_alloc<CONSUMER_REGS>();
#if FC_HEAD_DIM > 128
        wide_consumer(p, g, base, warpgroup - 1);
#else
        // The 128-query modes build has no softcap term (config.cuh's ONE_PASS): the plan never
        // launches it for a problem with softcap, and a launch that did would trap rather than
        // return wrong gradients.
        if constexpr (MODES && !ONE_PASS) {
            if (p.softcap_pre != 0.f) __trap();
        }
        const int cw = warpgroup - 1;  // keys [64 cw, 64 cw + 64) of the unit
        const int tid = threadIdx.x & 127;
        const int warp = tid >> 5, lane = tid & 31;
        const int key_in_wg = warp * 16 + (lane >> 2);  // this thread's accumulator rows: + {0, 8}
        const int q_col = 2 * (lane & 3);               // and its columns: 8 j + q_col + {0, 1}
        // Sᵀ and dPᵀ: the warpgroup's 64 K and V rows, K-major.
        const unsigned long long k_rows = make_desc_sw128(sK + cw * WG_KEYS * ROW_BYTES, 16, 1024);
        const unsigned long long v_rows = make_desc_sw128(sV + cw * WG_KEYS * ROW_BYTES, 16, 1024);
        // dQ (config.cuh): which keys, which 64-column slice of the head dim and which query block
        // of the step this warpgroup's slice covers. The K descriptor is dQ's B operand, or with
        // DQ_TRANSPOSED dQᵀ's A operand (the same 64-column box, keys-major).
        const int dq_key0 = DQ_SPLIT_KEYS ? cw * WG_KEYS : 0;
        const int dq_slice_index = D == 128 ? cw : 0;
        const int dq_query_box = DQ_BLOCKS_PER_STEP == 2 ? cw : 0;
        const unsigned long long k_cols =
            make_desc_sw128(sK + dq_slice_index * KV_BOX_BYTES + dq_key0 * ROW_BYTES, KV_BOX_BYTES, 1024);
        const unsigned warp_staging = base + OFF_DQ + cw * DQ_WG_STAGING_BYTES + warp * DQ_WARP_BYTES;

        int stage = 0;
        unsigned phase = 0;
        unsigned unit_parity = 0;
        unsigned step = 0;
        // Every product on the stage is done (Q, dO and the stats read): the producer may refill it.
        auto release_stage = [&] {
            mbar_arrive(bar_q_empty + 8 * stage);
            if (++stage == STAGES) {
                stage = 0;
                phase ^= 1u;
            }
        };
        UnitTrace trace;
        trace.begin(cw == 0 && tid == 0);
        int unit_index = 0;
        for (long long t = blockIdx.x; t < units; t += gridDim.x, unit_parity ^= 1u, ++unit_index) {
            trace.begin_unit(unit_index, t);
            const Unit u = decode_unit(p, t);
            const int key0 = u.k0 + cw * WG_KEYS;  // the warpgroup's first key
            float dk[D / 2], dv[D / 2];
#pragma unroll
            for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0.f;
            mbar_wait(bar_kv_full, unit_parity, TAG_KV_FULL);
            trace.mark(unit_index, MARK_KV_LANDED);

            for (int gi = 0; gi < group; ++gi) {
                for (int m = u.first_q_block; m < u.q_blocks; ++m, ++step) {
                    const int q0 = m * QUERY_ROWS;
                    const StepTiles tiles =
                        step_tiles(base + OFF_Q + stage * Q_TILE_BYTES, base + OFF_DO + stage * Q_TILE_BYTES);
                    const unsigned stats = base + OFF_STATS + stage * STATS_BYTES;
                    mbar_wait(bar_q_full + 8 * stage, phase, TAG_Q_FULL);
                    if (gi == 0 && m == u.first_q_block) trace.mark(unit_index, MARK_FIRST_Q);
                    trace.count_step(unit_index);

                    float s[ACC_REGS], dp[ACC_REGS];
                    unsigned p_frag[FRAG_REGS], ds_frag[FRAG_REGS];
                    // Sᵀ and dPᵀ in two commit groups where work runs under dPᵀ (config.cuh).
                    constexpr bool split = OVERLAP_DV_WITH_DP || OVERLAP_P_WITH_DP;
                    wgmma_fence();
                    gemm_keys_by_queries(s, k_rows, tiles.q_k);
                    if constexpr (split) wgmma_commit();
                    gemm_keys_by_queries(dp, v_rows, tiles.do_k);
                    wgmma_commit();
                    if constexpr (split) {
                        wgmma_wait<1>();
                        fence_regs(s);
                    } else {
                        wgmma_wait<0>();
                        fence_regs(s);
                        fence_regs(dp);
                    }
                    if constexpr (ONE_PASS) {
                        scores_and_grads(p, base, u.b, u.h_kv * group + gi, s, dp, stats, key0 + key_in_wg, q0,
                                         q_col, needs_mask(p, unit_lengths(p, base), key0, q0));
                    } else if constexpr (MODES) {
                        // (masked with dSᵀ below: neither is used before dPᵀ is done)
                        mode_probabilities(p, base, u.b, u.h_kv * group + gi, s, stats, key0 + key_in_wg, q0, q_col);
                    } else {
                        probabilities(p, s, stats, q_col);
                        if (needs_mask(p, unit_lengths(p, base), key0, q0))
                            apply_mask(p, s, key0 + key_in_wg, q0, q_col);
                    }
                    if constexpr (OVERLAP_DV_WITH_DP) {
                        pack_fragment(s, p_frag);
                        wgmma_fence();
                        gemm_accumulate_rows(dv, p_frag, tiles.do_mn);
                        wgmma_commit();
                        wgmma_wait<1>();  // dPᵀ done (dV may still run)
                    } else if constexpr (OVERLAP_P_WITH_DP) {
                        wgmma_wait<0>();
                    }
                    if constexpr (split) fence_regs(dp);
                    if constexpr (!ONE_PASS) score_grads(dp, s, stats, q_col);
                    // Pᵀ and dSᵀ of hidden pairs: 0 even where a score or dPᵀ is not finite (NaN padding).
                    if constexpr (MODES && !ONE_PASS) {
                        if (needs_mask(p, unit_lengths(p, base), key0, q0))
                            mask_hidden(p, base, key0 + key_in_wg, q0, q_col, s, dp);
                    }
                    if constexpr (!OVERLAP_DV_WITH_DP) pack_fragment(s, p_frag);
                    pack_fragment(dp, ds_frag);
                    if constexpr (!OVERLAP_DV_WITH_DP) {
                        wgmma_fence();
                        gemm_accumulate_rows(dv, p_frag, tiles.do_mn);
                        if constexpr (DQ_BEFORE_DK) wgmma_commit();
                    }
                    if constexpr (!DQ_BEFORE_DK) {
                        // dK under the dS barrier; dQ follows it and is waited for with everything.
                        wgmma_fence();
                        gemm_accumulate_rows(dk, ds_frag, tiles.q_mn);
                        wgmma_commit();
                    }

                    // dS for dQ, into this step's buffer (the other one may still be read by the
                    // other warpgroup's dQ of the step before).
                    const unsigned ds_tile = base + OFF_DS + (step & 1u) * DS_BYTES;
#if FC_BWD_DQ_TRANSPOSED
                    store_ds_query_major(ds_tile, ds_frag, cw * WG_KEYS, warp, lane);
#else
                    store_ds_t(ds_tile, ds_frag, cw * WG_KEYS + key_in_wg, lane);
#endif
                    fence_proxy_async_smem();
                    named_bar_sync(BAR_DS, CONSUMER_THREADS);

                    float dq[DQ_REGS];
                    wgmma_fence();
#if FC_BWD_DQ_TRANSPOSED
                    gemm_dq_transposed(dq, k_cols, make_desc_sw128(ds_tile, 16, 1024));
#else
                    gemm_dq(dq,
                            make_desc_sw128(ds_tile + dq_query_box * DS_BOX_BYTES + dq_key0 * ROW_BYTES, DS_BOX_BYTES,
                                            1024),
                            k_cols);
#endif
                    wgmma_commit();
                    if constexpr (DQ_BEFORE_DK) {
                        // dK after dQ: the dQ slice is staged and reduced while dK runs.
                        wgmma_fence();
                        gemm_accumulate_rows(dk, ds_frag, tiles.q_mn);
                        wgmma_commit();
                        wgmma_wait<1>();  // dV and dQ (dK may still run)
                        fence_regs(dq);
                        fence_regs(dv);
                        fence_regs(p_frag);
                    } else {
                        wgmma_wait<0>();  // dV, dK and dQ: Q, dO and the stats of this stage are free
                        fence_regs(dq);
                        fence_regs(dv);
                        fence_regs(dk);
                        fence_regs(p_frag);
                        fence_regs(ds_frag);
                        release_stage();
                    }

                    // The warp's 16 rows of the dQ slice: staged, then bulk-reduced by lane 0 once the
                    // previous step's reduce has read the staging quarter.
                    if (lane == 0) wait_dq_staging_read();
                    __syncwarp();
                    stage_dq(warp_staging, dq, lane);
                    fence_proxy_async_smem();
                    __syncwarp();
                    if (lane == 0) {
                        const long long bh = (long long)u.b * p.heads_q + u.h_kv * group + gi;
                        reduce_dq_quarter(
                            dq_slice(p, bh, m * DQ_BLOCKS_PER_STEP + dq_query_box, dq_slice_index) + warp * DQ_WARP_FLOATS,
                            warp_staging);
                    }
                    if constexpr (DQ_BEFORE_DK) {
                        wgmma_wait<0>();  // dK: Q, dO and the stats of this stage are free
                        fence_regs(dk);
                        fence_regs(ds_frag);
                        release_stage();
                    }
                }
            }
            // K and V may be overwritten (every wgmma on them is done): the producer loads the
            // next unit's while the rows below are stored.
            trace.mark(unit_index, MARK_STEPS_DONE);
            const int len_k = unit_lengths(p, base).len_k;  // (before the producer may rewrite it)
            mbar_arrive(bar_kv_empty);

            // ---- epilogue: dV, dK (scaled) rows of the warpgroup's keys, through its dQ staging ----
            const unsigned wg_staging = base + OFF_DQ + cw * DQ_WG_STAGING_BYTES;
            if (lane == 0) wait_dq_staging_read();
            const int k_row0 = bwd_k_row(p, u.b, 0);
            store_key_rows(static_cast<elem_t*>(g.dv) + dv_offset(g, u.b, u.h_kv, k_row0), g.dv_row_stride, dv, key0,
                           len_k, p.head_dim, 1.f, wg_staging, BAR_EPILOGUE + cw, warp, lane, tid);
            store_key_rows(static_cast<elem_t*>(g.dk) + dk_offset(g, u.b, u.h_kv, k_row0), g.dk_row_stride, dk, key0,
                           len_k, p.head_dim, p.softmax_scale, wg_staging, BAR_EPILOGUE + cw, warp, lane, tid);
            trace.mark(unit_index, MARK_STORED);
        }
        if (lane == 0) wait_dq_reduces();
        trace.print(unit_index);
#endif  // FC_HEAD_DIM > 128
    }
}

// ---- 3. dQ = scale · accumulator ----
// One CTA per (batch·heads_q, DQ_SLICE_QUERIES-row block): the block's slices come in whole with
// 16-byte loads, all in flight at once, and go through a shared-memory [query][column] tile that
// undoes their permutation (dq_reduce.cuh); the rows leave 16 bytes a thread.
extern "C" __global__ void __launch_bounds__(CONVERT_THREADS)
bwd_hopper_dq_convert(const __grid_constant__ AttentionParams p, const __grid_constant__ BackwardParams g) {
    constexpr int TILE_ROW = D + 4;  // floats; + 4 keeps 16-byte rows and spreads the scattered stores
    __shared__ __align__(16) float tile[DQ_SLICE_QUERIES * TILE_ROW];
    constexpr int QUADS = DQ_SLICE_FLOATS / 4 / CONVERT_THREADS;  // float4s a thread loads per slice
    const int blocks_per_head = (p.seq_q + DQ_SLICE_QUERIES - 1) / DQ_SLICE_QUERIES;
    const long long items = (long long)p.batch * p.heads_q * blocks_per_head;
    for (long long item = blockIdx.x; item < items; item += gridDim.x) {
        const long long bh = item / blocks_per_head;
        const int block = (int)(item % blocks_per_head);
        const int b = (int)(bh / p.heads_q), h = (int)(bh % p.heads_q);
        const int len_q = bwd_len_q(p, b);
        // A varlen sequence's blocks past its rows: nothing was accumulated (nor zeroed) there.
        // (b, h and len_q are read before the loads in every build, as measured: call 4 above.)
        if (VARLEN && block * DQ_SLICE_QUERIES >= len_q) continue;
        float4 v[DQ_SLICES][QUADS];
#pragma unroll
        for (int slice = 0; slice < DQ_SLICES; ++slice) {
            const float4* src = reinterpret_cast<const float4*>(dq_slice(p, bh, block, slice));
#pragma unroll
            for (int k = 0; k < QUADS; ++k) v[slice][k] = src[threadIdx.x + CONVERT_THREADS * k];
        }
#pragma unroll
        for (int slice = 0; slice < DQ_SLICES; ++slice) {
#pragma unroll
            for (int k = 0; k < QUADS; ++k) {
                const SliceQuad e = dq_slice_quad(threadIdx.x + CONVERT_THREADS * k, slice);
                tile[e.query * TILE_ROW + e.col] = v[slice][k].x;
                tile[(e.query + e.next_query.x) * TILE_ROW + e.col + e.next_col.x] = v[slice][k].y;
                tile[(e.query + e.next_query.y) * TILE_ROW + e.col + e.next_col.y] = v[slice][k].z;
                tile[(e.query + e.next_query.x + e.next_query.y) * TILE_ROW + e.col + e.next_col.x + e.next_col.y] =
                    v[slice][k].w;
            }
        }
        __syncthreads();
        constexpr int CHUNKS = D / 8;  // 16-byte pieces of a dQ row
        for (int i = threadIdx.x; i < DQ_SLICE_QUERIES * CHUNKS; i += CONVERT_THREADS) {
            const int r = i / CHUNKS, c = i % CHUNKS, row = block * DQ_SLICE_QUERIES + r;
            if (row < len_q && chunk_in_head<PADDED_HEAD>(p.head_dim, c)) {
                const float4 lo = *reinterpret_cast<const float4*>(&tile[r * TILE_ROW + 8 * c]);
                const float4 hi = *reinterpret_cast<const float4*>(&tile[r * TILE_ROW + 8 * c + 4]);
                const float sc = p.softmax_scale;
                const uint4 out = {pack2_u32(lo.x * sc, lo.y * sc), pack2_u32(lo.z * sc, lo.w * sc),
                                   pack2_u32(hi.x * sc, hi.y * sc), pack2_u32(hi.z * sc, hi.w * sc)};
                *reinterpret_cast<uint4*>(static_cast<elem_t*>(g.dq) + dq_offset(g, b, h, bwd_q_row(p, b, row)) +
                                          8 * c) = out;
            }
        }
        __syncthreads();
    }
}
