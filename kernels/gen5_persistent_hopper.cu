// Generation 5 (Hopper): persistent, warp-specialized FlashAttention-3-style forward kernel.
// sm_90a only: TMA (cp.async.bulk.tensor) + mbarrier + wgmma.mma_async + setmaxnreg.
//
//   * gridDim.x = number of SMs; each CTA walks work items (batch, head, BM-row q tile)
//     item = blockIdx.x + k * gridDim.x, in an order that keeps a few heads' K/V hot in L2 and,
//     for causal, puts the longest (last) q tiles first.
//   * Warpgroup 0 = producer (one thread issues TMA): Q once per item, K and V tiles into a
//     FC_HOPPER_STAGES-deep ring with separate full/empty barriers for K and V.
//   * Warpgroups 1, 2 (and 3 with FC_HOPPER_CONSUMER_WGS=3: BM = 192) = consumers, 64 q rows
//     each: S = Q K^T (wgmma SS, K-major both), online softmax in f32 registers, O += P V
//     (wgmma RS, P from registers, V MN-major from smem).
//   * FC_HOPPER_OVERLAP=1: issue S_{j+1} = Q K_{j+1} and O += P_j V_j back to back and do the
//     softmax of S_{j+1} while the PV wgmma runs (FA3's intra-warpgroup overlap).
//   * FC_HOPPER_PINGPONG=1 (needs OVERLAP=1): the consumer warpgroups take turns issuing their
//     GEMMs (named barriers 1 .. CONSUMER_WGS), so one's softmax runs under the others' GEMMs (FA3).
//   * FC_HOPPER_Q_STAGES=2: two Q buffers; the next item's Q is loaded while this one runs.
//   * FC_HOPPER_SMEM_EPILOGUE=1 (needs Q_STAGES=2): O is staged through the item's own (finished)
//     Q buffer and written with coalesced 16-byte stores.
//   * FC_HOPPER_SPLIT_KV=1 (small problems): a work *unit* is (item, split); split s of an item
//     visits key tiles [s n / S, (s+1) n / S) (S = p.num_splits, n = the item's key tiles), writes
//     its unnormalised partial O and (m, l) to p.workspace, and the last of the S units to arrive
//     (per warp: an arrival counter in the workspace) combines them and writes O and LSE.
//   * FC_HOPPER_WG_KEY_SPLIT=1 (one-round problems): both consumer warpgroups take the same 64-row
//     q tile, each every other key tile, and merge in shared memory before the epilogue
//     (gen5_hopper/wg_key_split.cuh): half the chain of dependent tiles a CTA walks.
//   * FC_HOPPER_CLUSTER_KEY_SPLIT=1 (with the key split, long one-round items): a cluster of two CTAs
//     takes each item, each half its key tiles, and they merge through each other's shared memory
//     (common/hopper/cluster.cuh, wg_key_split.cuh); the grid is two CTAs an item.
//
// This file is the kernel itself: barrier setup, the producer loop and the consumer loop with its
// epilogue. The parts it is built from live in gen5_hopper/, one concern each, as in
// FlashAttention-3's hopper/: config (defines, tile shapes, smem map), block_info (which rows and
// keys an item sees), tile_scheduler (items, their order, split units), consumer_math (GEMMs,
// masks and score modifiers, online softmax), pingpong, kv_fetch (where key rows live),
// split_epilogue, wg_key_split and trace (an optional timeline); its shared-memory helpers are
// common/hopper/smem_io.cuh. Splitting them out left the PTX of every checked build unchanged.
//
// Barrier protocol, smem map, register budget: docs/generations/gen5-persistent.md (Hopper);
// split-KV protocol and workspace layout: docs/generations/gen5-split-kv.md.
//
// Defines: FC_HEAD_DIM (64|128, required), FC_HOPPER_BLOCK_N (keys per tile, 64|128|176, default 128),
// FC_HOPPER_STAGES (K/V ring depth, default 2), FC_HOPPER_OVERLAP (0|1, default 0),
// FC_HOPPER_L2_SECTION_BYTES (K/V bytes the scheduler tries to keep hot, default 32 MiB),
// FC_HOPPER_PINGPONG (0|1, default 0), FC_HOPPER_Q_STAGES (1|2, default 1),
// FC_HOPPER_SMEM_EPILOGUE (0|1, default 0), FC_HOPPER_CONSUMER_REGS (232|240, default 232; the
// producer gets 40|24), FC_HOPPER_SPLIT_KV (0|1, default 0; the split count is p.num_splits at run
// time), FC_HOPPER_HEAD_MAJOR (0|1, default 1: one head per L2 section without causal masking),
// FC_HOPPER_CONSUMER_WGS (2|3, default 2; 3: 192-row items at D = 64, 160 consumer registers),
// FC_HOPPER_PREFETCH (0|1, default 0: L2 prefetch of the first unit's Q and first K/V tiles before
// griddepcontrol.wait; dense builds), FC_HOPPER_WG_KEY_SPLIT (0|1, default 0: key-split
// warpgroups, 64-row items; dense, unsplit, overlapped, register epilogue),
// FC_HOPPER_CLUSTER_KEY_SPLIT (0|1, default 0: with FC_HOPPER_WG_KEY_SPLIT, two CTAs an item), FC_HOPPER_DEBUG
// (bounded mbarrier waits that trap instead of hanging), FC_HOPPER_TRACE (clock64 stamps of three
// CTAs' units, printed: gen5_hopper/trace.cuh).
#include "common/params.cuh"
#include "common/types.cuh"
#include "common/masking.cuh"
#include "common/tensor_index.cuh"
#include "common/seqlen.cuh"
#include "common/kv_rows.cuh"
#include "common/score_mod.cuh"
#include "common/hopper/mbarrier.cuh"
#include "common/hopper/tma.cuh"
#include "common/hopper/wgmma.cuh"
#include "common/hopper/smem_io.cuh"
#include "common/hopper/named_barrier.cuh"
#include "common/hopper/cluster.cuh"
#include "common/grid_dependency.cuh"
#include "common/work_counter.cuh"

// The parts, in the order they build on each other (FlashAttention-3's hopper/ split):
#include "gen5_hopper/config.cuh"
#include "gen5_hopper/block_info.cuh"
#include "gen5_hopper/tile_scheduler.cuh"
#include "gen5_hopper/consumer_math.cuh"
#include "gen5_hopper/pingpong.cuh"
#include "gen5_hopper/q_fetch.cuh"
#include "gen5_hopper/kv_fetch.cuh"
#include "gen5_hopper/split_epilogue.cuh"
#include "gen5_hopper/wg_key_split.cuh"
#include "gen5_hopper/producer_spread.cuh"
#include "gen5_hopper/trace.cuh"

extern "C" __global__ void __launch_bounds__(fch::THREADS, 1) FC_HOPPER_CLUSTER_DIMS
    attention_persistent_hopper(const __grid_constant__ AttentionParams p, const __grid_constant__ CUtensorMap tm_q,
                                const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v) {
    using namespace fch;
    UnitTrace trace;  // (empty unless FC_HOPPER_TRACE)
    trace.begin(threadIdx.x >= 128 && threadIdx.x % 128 == 0);
    // Declared 16-aligned on purpose: with __align__(1024) the compiler may fold the round-up below away.
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const unsigned sQ = base + OFF_Q;
    const unsigned sK = base + OFF_K;
    const unsigned sV = base + OFF_V;
    // q_full[qs] = bar_q_full + 8 qs, k_full[s] = bar_k_full + 8 s, etc.
    const unsigned bar_q_full = base + OFF_BAR_Q_FULL;
    const unsigned bar_q_empty = base + OFF_BAR_Q_EMPTY;
    const unsigned bar_k_full = base + OFF_BAR_K_FULL;
    const unsigned bar_k_empty = base + OFF_BAR_K_EMPTY;
    const unsigned bar_v_full = base + OFF_BAR_V_FULL;
    const unsigned bar_v_empty = base + OFF_BAR_V_EMPTY;
    const unsigned bar_v_landed = base + OFF_BAR_V_LANDED;

    // The schedule, and in the static order the producer's first unit, are worked out before the
    // barrier setup's sync, while a thread of another warp (32) sets the barriers up: a CTA with
    // one item waits on the producer's first copy, which waited on both in turn (1fd8819).
    const Schedule sched = make_schedule(p);
    // Work units: items x splits (splits_of is the constant 1 without FC_HOPPER_SPLIT_KV).
    const int n_units = sched.total * splits_of(p);
    // (Not in the modes build nor with 24 producer registers: the unit kept in registers spilled.)
    constexpr bool kEarlyFirstUnit = !FC_HOPPER_DYNAMIC && !MODES && PRODUCER_REGS >= 40;
    Work first_unit;
    if (kEarlyFirstUnit && threadIdx.x < PRODUCER_LANES) {
        first_unit = decode_unit(p, sched, first_unit_of_cta());  // < n_units: grid <= units
#if FC_HOPPER_PREFETCH
        prefetch_unit_l2(p, &tm_q, &tm_k, &tm_v, first_unit, sched.nm);  // (before griddep_wait below)
#endif
    }
    if (threadIdx.x == (MODES ? 0 : 32)) {
#pragma unroll
        for (int s = 0; s < Q_STAGES; ++s) {
            mbar_init(bar_q_full + 8 * s, 1);
            mbar_init(bar_q_empty + 8 * s, CONSUMER_THREADS + Q_EMPTY_FOLLOWER_ARRIVALS);
        }
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(bar_k_full + 8 * s, 1);
            mbar_init(bar_k_empty + 8 * s, KV_CONSUMER_THREADS);
            mbar_init(bar_v_full + 8 * s, 1);
            mbar_init(bar_v_empty + 8 * s, KV_CONSUMER_THREADS);
        }
        mbar_init(bar_v_landed, 1);
        if constexpr (CLUSTER_CTAS > 1) {
            // The partner's half of our rows: one arrival (now) and the bytes of its st.async.
            mbar_init(base + OFF_BAR_CXCHG, 1);
            mbar_arrive_expect_tx(base + OFF_BAR_CXCHG, CXCHG_TX_BYTES);
        }
        mbar_fence_init();
        tma_prefetch_map(&tm_q);
        tma_prefetch_map(&tm_k);
        tma_prefetch_map(&tm_v);
    }
#if defined(FC_HOPPER_DEBUG)
    if (threadIdx.x == 0 && (base - smem_u32(smem_raw)) + SMEM_USED > SMEM_BYTES) {
        printf("flashcore hopper: dynamic smem base misaligned beyond the slack\n");
        __trap();
    }
#if FC_HOPPER_SPLIT_KV
    if (threadIdx.x == 0 && p.num_splits > 1 && p.workspace == nullptr) {
        printf("flashcore hopper: num_splits %d but no workspace\n", p.num_splits);
        __trap();
    }
#endif
    if constexpr (CLUSTER_CTAS > 1) {
        if (threadIdx.x == 0 && n_units > unit_stride()) {
            printf("flashcore hopper: cluster key split with %d units on %d clusters\n", n_units, unit_stride());
            __trap();
        }
    }
#endif
    __syncthreads();
    // The cluster key split's partner stores into our shared memory (its half of our rows): every
    // thread arrives once the barriers are set up, and waits before its first remote access.
    if constexpr (CLUSTER_CTAS > 1) cluster_arrive_release();
    // Nothing above reads or writes global memory (parameters and tensor maps are kernel
    // parameters): the previous kernel's outputs (Q, K, V, the tables, the dynamic schedule's
    // counters) are read, and O written, only after it has completed. Then the stream's next
    // kernel, if launched programmatically (as this one is by default), may start its CTAs on
    // SMs this grid leaves free and get through its setup while this grid runs. (Signalled
    // before the wait, launches ran several kernels ahead, their waiting CTAs taking SM slots.)
    // The key-split build waits later, each warpgroup once it has its registers (setmaxnreg) and
    // the consumers their first unit: that setup then runs under the previous kernel too.
    constexpr bool kSetupBeforeWait = KEY_SPLIT && !FC_HOPPER_DYNAMIC;
    if constexpr (!kSetupBeforeWait) {
        griddep_wait();
        if (threadIdx.x == 0) griddep_launch_dependents();
        trace.after_wait();
    }

    const int warpgroup = threadIdx.x / 128;

    if (warpgroup == 0) {
        // ===================================== producer =====================================
        warpgroup_reg_dealloc<PRODUCER_REGS>();
        if constexpr (kSetupBeforeWait) {
            griddep_wait();
            if (threadIdx.x == 0) griddep_launch_dependents();
        }
        // Thread 0 produces: it issues every TMA and barrier operation. In the modes build the
        // whole of warp 0 runs the loop, to zero the rows of a V tile past its sequence's keys
        // (fetch_kv_tile); the dense build keeps the lone thread (31 lanes polling the barriers
        // beside it measured a few per cent slower on causal rows). The other warps idle, except
        // in the small-pages build, where all four issue the boxes.
        if constexpr (SPREAD_PAGES) {  // small pages: all four warps issue (producer_spread.cuh)
            produce_spread(p, sched, n_units, base, &tm_q, &tm_k, &tm_v);
        } else if (threadIdx.x < PRODUCER_LANES) {
            const int lane = threadIdx.x;
            const bool leader = lane == 0;
            int stage = 0;
            unsigned phase = 0;
            unsigned landed_phase = 0;
            int it = 0;
#if FC_HOPPER_DYNAMIC
            unsigned* counters = reinterpret_cast<unsigned*>(p.workspace);  // [0] next unit, [1] CTAs done
            for (;; ++it) {
                Work w;
                const int t = take_next_unit(p, sched, counters, n_units, leader, w);
                const bool done = t >= n_units;
#else
            for (int t = first_unit_of_cta(); t < n_units; t += unit_stride(), ++it) {
                const Work w = kEarlyFirstUnit && t == first_unit_of_cta() ? first_unit : decode_unit(p, sched, t);
                if (w.n_blocks < 0) {  // past a varlen sequence's end: the consumers skip it too
                    --it;
                    continue;
                }
#endif
                // Q buffer qs free? (item it - Q_STAGES's consumers released it; its first use
                // waits parity 1 of a fresh barrier and passes at once)
                const int qs = Q_STAGES == 1 ? 0 : (it & 1);
                const unsigned qpar = Q_STAGES == 1 ? (unsigned)(it & 1) : (unsigned)((it >> 1) & 1);
                const unsigned q_full = bar_q_full + 8 * qs;
                mbar_wait(bar_q_empty + 8 * qs, qpar ^ 1, TAG_Q_EMPTY);
#if FC_HOPPER_DYNAMIC
                if (hand_off_unit(base, q_full, qs, leader, t, done, counters)) break;
#endif
                const SeqInfo seq = block_seq(p, w.b);
                fill_q(p, sQ, &tm_q, q_full, qs, leader, w, seq.q_row0);
                const int h_kv = w.h / p.q_heads_per_kv;
                if constexpr (KEY_SPLIT) {
                    // Tiles in pairs, the two K tiles first: each warpgroup's first tile waits on
                    // its K alone (with K, V, K, V the second warpgroup's first K came behind V_0).
                    produce_key_split_pairs(p, seq, w, h_kv, sK, sV, bar_k_full, bar_k_empty, bar_v_full,
                                            bar_v_empty, &tm_k, &tm_v, stage, phase);
                    continue;
                }
                for (int kb = 0; kb < w.n_blocks; ++kb) {
                    const unsigned kf = bar_k_full + 8 * stage, ke = bar_k_empty + 8 * stage;
                    const unsigned vf = bar_v_full + 8 * stage, ve = bar_v_empty + 8 * stage;
                    const int k0 = (w.kb0 + kb) * BN;
                    const KvTile tile = plan_kv_tile(p, seq, w.b, k0, lane);  // while the slots drain
                    mbar_wait(ke, phase ^ 1, TAG_K_EMPTY);
                    fetch_kv_tile(p, tile, h_kv, sK + stage * KV_TILE_BYTES, &tm_k, kf, 0, lane, nullptr);
                    mbar_wait(ve, phase ^ 1, TAG_V_EMPTY);
                    fetch_kv_tile(p, tile, h_kv, sV + stage * KV_TILE_BYTES, &tm_v, vf, bar_v_landed, lane,
                                  &landed_phase);
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
            }
            // Nothing to wait for here: the producer only ever waits on an "empty" barrier right
            // before filling that stage, and every stage it filled is consumed (and waited on
            // through its "full" barrier) by the consumer warpgroups before they exit.
        }
        if constexpr (CLUSTER_CTAS > 1) cluster_wait_acquire();  // (its arrival's pair)
    } else {
        // ===================================== consumers ====================================
        warpgroup_reg_alloc<CONSUMER_REGS>();
        const int cw = warpgroup - 1;  // 0 .. CONSUMER_WGS - 1
        // Rows [64 row_wg, 64 row_wg + 64) of the q tile; key-split warpgroups share rows 0 .. 63.
        const int row_wg = KEY_SPLIT ? 0 : cw;
        const int tid = threadIdx.x & 127;
        const int warp = tid >> 5;
        const int lane = tid & 31;
        const int row_in_tile = row_wg * WG_M + warp * 16 + (lane >> 2);  // and row_in_tile + 8
        const int col_in_block = 2 * (lane & 3);
        const float scale_log2 = p.scale_log2;

        // K-major, 128B swizzle: SBO = 1024 (8 rows x 128 B), LBO unused (16 -> encoded 1).
        const unsigned long long q_desc0 = make_desc_sw128(sQ + row_wg * WG_M * ROW_BYTES, 16, 1024);
        const unsigned long long k_desc0 = make_desc_sw128(sK, 16, 1024);
        // MN-major, 128B swizzle: SBO = 1024 (next 8 keys), LBO = next 64-column box.
        const unsigned long long v_desc0 = make_desc_sw128(sV, KV_BOX_BYTES, 1024);

#if FC_HOPPER_PINGPONG
        // Prime: warpgroup 1 holds the first issue slot (its first pp_sync pairs with this arrive).
        if (cw == 0) named_bar_arrive(BAR_SCHED + 0, 2 * 128);
#endif

        int stage = 0;
        unsigned phase = 0;
        int it = 0;
#if FC_HOPPER_WG_KEY_SPLIT
        int ring = 0;  // K/V tiles of the items before this one (both warpgroups count them all)
#endif
#if FC_HOPPER_DYNAMIC
        for (;; ++it) {
            const int qs = Q_STAGES == 1 ? 0 : (it & 1);
            const unsigned qpar = Q_STAGES == 1 ? (unsigned)(it & 1) : (unsigned)((it >> 1) & 1);
            const unsigned q_full = bar_q_full + 8 * qs;
            const unsigned q_empty = bar_q_empty + 8 * qs;
            trace.mark(it, MARK_BEGIN);
            mbar_wait(q_full, qpar, TAG_Q_FULL);  // acquire: the unit index below and Q
            trace.mark(it, MARK_Q_READY);
            const int t = (int)ld_shared_u32(base + OFF_ITEM + 4 * qs);
            if (t < 0) break;  // both warpgroups read the same -1: equal slot counts
            const Work w = decode_unit(p, sched, t);
#else
        for (int t = first_unit_of_cta(); t < n_units; t += unit_stride(), ++it) {
            const Work w = decode_unit(p, sched, t);
            if (w.n_blocks < 0) {  // past a varlen sequence's end: the producer skips it too
                --it;
                continue;
            }
            const int qs = Q_STAGES == 1 ? 0 : (it & 1);
            const unsigned qpar = Q_STAGES == 1 ? (unsigned)(it & 1) : (unsigned)((it >> 1) & 1);
            const unsigned q_full = bar_q_full + 8 * qs;
            const unsigned q_empty = bar_q_empty + 8 * qs;
            if (kSetupBeforeWait && it == 0) {  // before this thread's first write of O
                griddep_wait();
                trace.after_wait();
            }
            trace.mark(it, MARK_BEGIN);
#endif
            trace.set_tiles(it, w.n_blocks);
            const unsigned long long q_desc = q_desc0 + ((unsigned long long)(qs * Q_BYTES) >> 4);
            // With the smem epilogue the Q buffer is released after O went through it, not after
            // the last QK^T.
            constexpr bool release_q_after_qk = !FC_HOPPER_SMEM_EPILOGUE;
            const int grow0 = w.m * BM + row_in_tile;
            const int grow1 = grow0 + 8;
            // With score modifiers (prepare_scores) the logits are in log2 units before the
            // softmax, which then runs with scale 1.
            const bool score_modified = MODES && has_score_mod(p);
            const float softmax_scale_log2 = score_modified ? 1.f : scale_log2;
            const KeyRange wg_unmasked = warpgroup_unmasked_keys(p, w.b, w.m * BM + row_wg * WG_M);
            // Modes build: the item's q tile may end before this warpgroup's rows begin. Taken
            // through a vote so the compiler sees a warp-uniform branch: the ring's stage and
            // phase stay in uniform registers (a plain load-derived condition moved them to
            // per-thread ones, and every wgmma descriptor then paid an R2UR: +3 % time).
            const bool wg_has_rows =
                !MODES || __all_sync(0xffffffffu, w.m * BM + row_wg * WG_M < block_seq(p, w.b).len_q);

            float o[D / 2];
#pragma unroll
            for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
            float m[2] = {-INFINITY, -INFINITY};
            float l[2] = {0.f, 0.f};
            float alpha[2];

#if !FC_HOPPER_DYNAMIC
            mbar_wait(q_full, qpar, TAG_Q_FULL);
            trace.mark(it, MARK_Q_READY);
#endif

#if FC_HOPPER_OVERLAP
            // Key-split warpgroups take every other tile, from tile cw; otherwise each takes all.
            const int first_kb = KEY_SPLIT ? cw : 0;
#if FC_HOPPER_WG_KEY_SPLIT
            key_split_ring_start(ring, cw, stage, phase);
#endif
            if (!wg_has_rows) {
                pass_key_tiles(w.n_blocks, cw, bar_k_full, bar_k_empty, bar_v_full, bar_v_empty, stage, phase, q_empty,
                               release_q_after_qk);
                if (release_q_after_qk && w.n_blocks == 0) mbar_arrive(q_empty);
            } else if (w.n_blocks > first_kb) {
                float s[BN / 2];
                unsigned pr[BN / 4];
                // ---- first key tile: S_0, softmax_0 (no PV yet) ----
                {
                    const unsigned kf = bar_k_full + 8 * stage, ke = bar_k_empty + 8 * stage;
                    mbar_wait(kf, phase, TAG_K_FULL);
                    trace.mark(it, MARK_K0_READY);
                    pp_sync(cw);
                    wgmma_fence();
                    gemm_qk(s, q_desc, k_desc0 + ((unsigned long long)(stage * KV_TILE_BYTES) >> 4));
                    wgmma_commit();
                    pp_arrive(cw);
                    wgmma_wait<0>();
                    fence_regs(s);
                    trace.mark(it, MARK_S0_DONE);
                    mbar_arrive(ke);
                    if (release_q_after_qk && (KEY_SPLIT ? first_kb + KEY_STEP >= w.n_blocks : w.n_blocks == 1))
                        mbar_arrive(q_empty);
                    prepare_scores(p, s, w.b, w.h, grow0, w.m * BM + row_wg * WG_M, (w.kb0 + first_kb) * BN,
                                   col_in_block, wg_unmasked, score_modified);
                    online_softmax(s, m, l, alpha, softmax_scale_log2);
                    convert_p(s, pr);
                }
                int vstage = stage;
                unsigned vphase = phase;
                advance_ring(stage, phase);
                for (int kb = first_kb + KEY_STEP; kb < w.n_blocks; kb += KEY_STEP) {
                    const unsigned kf = bar_k_full + 8 * stage, ke = bar_k_empty + 8 * stage;
                    const unsigned vf = bar_v_full + 8 * vstage, ve = bar_v_empty + 8 * vstage;
                    mbar_wait(kf, phase, TAG_K_FULL);
                    pp_sync(cw);
                    wgmma_fence();
                    gemm_qk(s, q_desc, k_desc0 + ((unsigned long long)(stage * KV_TILE_BYTES) >> 4));
                    wgmma_commit();
                    mbar_wait(vf, vphase, TAG_V_FULL);
                    wgmma_fence();  // (does not wait for S_kb; orders our writes of o/pr before the PV reads)
                    gemm_pv(o, pr, v_desc0 + ((unsigned long long)(vstage * KV_TILE_BYTES) >> 4));
                    wgmma_commit();
                    pp_arrive(cw);
                    wgmma_wait<1>();  // S_kb done; PV_{kb-1} may still run
                    fence_regs(s);
                    mbar_arrive(ke);
                    if (release_q_after_qk && (KEY_SPLIT ? kb + KEY_STEP >= w.n_blocks : kb == w.n_blocks - 1))
                        mbar_arrive(q_empty);
                    prepare_scores(p, s, w.b, w.h, grow0, w.m * BM + row_wg * WG_M, (w.kb0 + kb) * BN,
                                   col_in_block, wg_unmasked, score_modified);
                    online_softmax(s, m, l, alpha, softmax_scale_log2);
                    wgmma_wait<0>();  // PV_{kb-1} done: O and P registers are ours again
                    fence_regs(o);
                    fence_regs(pr);
                    mbar_arrive(ve);
                    rescale_o(o, alpha);
                    convert_p(s, pr);
                    vstage = stage;
                    vphase = phase;
                    advance_ring(stage, phase);
                }
                // ---- last PV (outside the ping-pong: no issue slot) ----
                {
                    const unsigned vf = bar_v_full + 8 * vstage, ve = bar_v_empty + 8 * vstage;
                    mbar_wait(vf, vphase, TAG_V_FULL);
                    wgmma_fence();
                    gemm_pv(o, pr, v_desc0 + ((unsigned long long)(vstage * KV_TILE_BYTES) >> 4));
                    wgmma_commit();
                    wgmma_wait<0>();
                    fence_regs(o);
                    fence_regs(pr);
                    mbar_arrive(ve);
                    trace.mark(it, MARK_LOOP_DONE);
                }
            } else if (release_q_after_qk) {
                mbar_arrive(q_empty);  // no key tile (of its own): Q was loaded but is not needed
            }
#if FC_HOPPER_WG_KEY_SPLIT
            key_split_balance_turns(w.n_blocks, cw);
            ring += w.n_blocks;
#endif
#else
            for (int kb = 0; kb < w.n_blocks; ++kb) {
                const unsigned kf = bar_k_full + 8 * stage, ke = bar_k_empty + 8 * stage;
                const unsigned vf = bar_v_full + 8 * stage, ve = bar_v_empty + 8 * stage;
                float s[BN / 2];
                mbar_wait(kf, phase, TAG_K_FULL);
                wgmma_fence();
                gemm_qk(s, q_desc, k_desc0 + ((unsigned long long)(stage * KV_TILE_BYTES) >> 4));
                wgmma_commit();
                wgmma_wait<0>();
                fence_regs(s);
                mbar_arrive(ke);
                if (release_q_after_qk && kb == w.n_blocks - 1) mbar_arrive(q_empty);

                prepare_scores(p, s, w.b, w.h, grow0, w.m * BM + row_wg * WG_M, (w.kb0 + kb) * BN, col_in_block,
                               wg_unmasked, score_modified);
                online_softmax(s, m, l, alpha, softmax_scale_log2);
                rescale_o(o, alpha);
                unsigned pr[BN / 4];
                convert_p(s, pr);

                mbar_wait(vf, phase, TAG_V_FULL);
                wgmma_fence();
                gemm_pv(o, pr, v_desc0 + ((unsigned long long)(stage * KV_TILE_BYTES) >> 4));
                wgmma_commit();
                wgmma_wait<0>();
                fence_regs(o);
                fence_regs(pr);
                mbar_arrive(ve);
                if (++stage == STAGES) {
                    stage = 0;
                    phase ^= 1;
                }
            }
            if (release_q_after_qk && w.n_blocks == 0) mbar_arrive(q_empty);  // no key tile: Q unused
#endif

            // ---- epilogue: O /= l, LSE; rows >= seq_q are never written ----
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
                l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
            }
#if FC_HOPPER_SPLIT_KV
            if (p.num_splits > 1) {
                split_epilogue(p, sched.total, w, cw, tid, o, m, l, grow0, col_in_block);
                trace.mark(it, MARK_STORED);
                continue;  // (the register epilogue below is the unsplit one; no smem epilogue here)
            }
#endif
#if FC_HOPPER_WG_KEY_SPLIT
            key_split_epilogue(p, w, cw, tid, o, m, l, grow0, softmax_scale_log2, base);
            trace.mark(it, MARK_STORED);
            continue;
#endif
            const int h = w.h, b = w.b;
            // The block info again (reloaded, not kept in registers across the key loop).
            const SeqInfo seq = block_seq(p, b);
            const KeyRange keys0 = block_keys(p, seq, grow0);
            const KeyRange keys1 = block_keys(p, seq, grow1);
#if FC_HOPPER_SMEM_EPILOGUE
            {
                // Stage this warpgroup's 64 x D slice of O (as elem_t) in its own 64-row slice of
                // the item's Q buffer, 128B-swizzled like a Q box (16-byte chunk q of local row lr
                // sits at chunk q ^ (lr & 7)): the quad stores of one instruction hit 8 different
                // chunks (conflict-free), and so do the 16-byte reads of 8 consecutive threads.
                // Every wgmma that read this slice (the last QK^T) is complete: this warp's
                // wait_group 0 on the last PV implies all four warps issued it, after their
                // wait_group 1 on the last QK^T.
                const unsigned sO = sQ + qs * Q_BYTES + cw * WG_M * ROW_BYTES;
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int grow = r == 0 ? grow0 : grow1;
                    const int lr = warp * 16 + (lane >> 2) + 8 * r;
                    const float inv = row_inverse(l[r], r == 0 ? keys0 : keys1);
#pragma unroll
                    for (int j = 0; j < D / 8; ++j) {
                        const unsigned addr = sO + (j >> 3) * Q_BOX_BYTES + lr * ROW_BYTES +
                                              ((((unsigned)j & 7u) ^ ((unsigned)lr & 7u)) << 4) + (lane & 3) * 4;
                        st_shared_u32(addr, pack2_u32(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv));
                    }
                    if (grow < seq.len_q && (lane & 3) == 0) {
                        p.lse[block_lse_offset(p, seq, b, h, grow)] =
                            row_natural_lse(l[r], m[r], r == 0 ? keys0 : keys1, softmax_scale_log2);
                    }
                }
                named_bar_sync(BAR_WG + cw, 128);
                // 64 rows x NBOX boxes x 8 chunks: 8 consecutive threads write one 128-byte run.
#pragma unroll
                for (int i = 0; i < 4 * NBOX; ++i) {
                    const int idx = tid + 128 * i;
                    const int q = idx & 7;
                    const int lr = (idx >> 3) & 63;
                    const int c = idx >> 9;
                    const int grow = w.m * BM + cw * WG_M + lr;
                    if (grow < seq.len_q) {
                        const uint4 v =
                            ld_shared_v4(sO + c * Q_BOX_BYTES + lr * ROW_BYTES + (((unsigned)q ^ ((unsigned)lr & 7u)) << 4));
                        elem_t* orow = reinterpret_cast<elem_t*>(p.o) + seq_o_offset(p, seq, b, h, grow);
                        st_global_v4(orow + 64 * c + 8 * q, v);
                    }
                }
                // Our generic reads/writes of the buffer before the TMA that refills it (item it + 2).
                fence_proxy_async_smem();
                mbar_arrive(q_empty);
            }
#else
            // Straight from the accumulators. In 16-byte stores: a quad's four lanes hold a row's
            // 8-column blocks 4 bytes each, and a transpose across the quad gives each lane whole
            // blocks (4 times fewer store instructions, each a full 16 bytes; O strides are
            // multiples of 8 elements). Measured (2026-11-26, ae94247) 1-2.4 % faster on the ladder's
            // 128-key builds; the 176-key build's key loop came out of ptxas scheduled differently
            // and its longest rows 0.6-1.8 % slower, so it keeps a 4-byte pair a lane.
            constexpr bool kVectorStores = BN != 176;
            if constexpr (!kVectorStores) {
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int grow = r == 0 ? grow0 : grow1;
                    if (grow < seq.len_q) {
                        const float inv = row_inverse(l[r], r == 0 ? keys0 : keys1);
                        elem_t* orow = reinterpret_cast<elem_t*>(p.o) + seq_o_offset(p, seq, b, h, grow);
#pragma unroll
                        for (int j = 0; j < D / 8; ++j) {
                            *reinterpret_cast<elem2_t*>(orow + 8 * j + col_in_block) =
                                pack2(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
                        }
                        if ((lane & 3) == 0) {
                            p.lse[block_lse_offset(p, seq, b, h, grow)] =
                                row_natural_lse(l[r], m[r], r == 0 ? keys0 : keys1, softmax_scale_log2);
                        }
                    }
                }
            } else {
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int grow = r == 0 ? grow0 : grow1;
                    const float inv = row_inverse(l[r], r == 0 ? keys0 : keys1);
                    elem_t* orow =
                        grow < seq.len_q ? reinterpret_cast<elem_t*>(p.o) + seq_o_offset(p, seq, b, h, grow) : nullptr;
                    float row[D / 4];  // this lane's pair of each column block
#pragma unroll
                    for (int j = 0; j < D / 8; ++j) {
                        row[2 * j] = o[4 * j + 2 * r];
                        row[2 * j + 1] = o[4 * j + 2 * r + 1];
                    }
                    store_row_blocks<D / 8>(orow, row, inv, 0, lane);
                    if (grow < seq.len_q && (lane & 3) == 0) {
                        p.lse[block_lse_offset(p, seq, b, h, grow)] =
                            row_natural_lse(l[r], m[r], r == 0 ? keys0 : keys1, softmax_scale_log2);
                    }
                }
            }
#endif
            trace.mark(it, MARK_STORED);
        }
        trace.finish(it);
#if FC_HOPPER_PINGPONG
        // Drain: the last warpgroup's last arrive on barrier 1 is matched here, so every scheduler
        // barrier ends the kernel complete (with no tile at all this pairs with the priming arrive).
        if (cw == 0) named_bar_sync(BAR_SCHED + 0, 2 * 128);
#endif
    }
}

#if FC_HOPPER_TRACE
// The timeline's printer (gen5_hopper/trace.cuh): the plan's second launch, one thread.
extern "C" __global__ void attention_persistent_hopper_trace_print(const __grid_constant__ AttentionParams) {
    fch::print_trace();
}
#endif
