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
// This file is the kernel: the CTA's setup, then each warpgroup's loop over its work units and key
// tiles. The parts live in gen5_hopper/, one concern each, in the shape of FlashAttention-3's
// hopper/ (flash_fwd_kernel_sm90.h, its mainloop's load and mma, epilogue, softmax, scheduler):
//   config.cuh          the build's switches (FC_HOPPER_*, also as constants for `if constexpr`),
//                       tile shapes, the shared-memory map; smem_map.cuh: its addresses, barrier setup
//   tile_scheduler.cuh  work units, their order and splits; block_info.cuh: the rows and keys they see
//   producer.cuh        load_kv_tile, one K/V tile into the ring (Q: q_fetch.cuh's fill_q; where rows
//                       live: kv_fetch.cuh; small pages: producer_spread.cuh's own loop)
//   mainloop.cuh        a consumer's key-tile steps: qk_tile, scores_to_p, next_key_tile and pv_tile
//                       (overlapped), serial_key_tile; their math (GEMMs, masks, score modifiers,
//                       online softmax) in consumer_math.cuh; pingpong.cuh the GEMM turns
//   epilogue.cuh        O staged through shared memory; split_epilogue.cuh the split-KV combine,
//                       wg_key_split.cuh the key splits' merge; the register epilogue is below
//   trace.cuh           an optional timeline.
// A feature plugs into its part, switched with `if constexpr`. What stays here, and why: the loops
// over units and key tiles, and the register epilogue. Moved into device functions of their own they
// came out of NVVM as other PTX (each function is simplified alone before it is inlined: the K/V
// ring step's two selects changed order, the key split lost that its first tile is >= 0, the split
// build's combine gained copies), and the PTX of every checked build is kept as it was measured. The
// helpers take scalars, not structs of the kernel's values, for the same reason (a struct's fields
// are not the kernel's own values until it is inlined). The static and dynamic schedules' unit loops
// differ in shape (a stride, against a take-then-hand-off that may end mid-unit), hence their #if.
//
// Barrier protocol, smem map, register budget: docs/generations/gen5-persistent.md (Hopper);
// split-KV protocol and workspace layout: docs/generations/gen5-split-kv.md.
//
// Defines: FC_HEAD_DIM (32|64|128|192|256, required; 32: 64-byte rows, config.cuh), FC_HEAD_DIM_V (V's and O's head dim, 64|128|192|256
// up to FC_HEAD_DIM, default FC_HEAD_DIM: FlashAttention 3's headdim_v; config.cuh), FC_HOPPER_PADDED_HEAD (0|1, default 0: the
// problem's head dim is padded up to FC_HEAD_DIM; config.cuh), FC_HOPPER_BLOCK_N (keys per tile, 64|80|112|128|176, default 128),
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
// FC_HOPPER_CLUSTER_KEY_SPLIT (0|1, default 0: with FC_HOPPER_WG_KEY_SPLIT, two CTAs an item),
// FC_HOPPER_E4M3 (0|1, default 0: e4m3 Q, K and V, V transposed by gen5_hopper_vt.cu; config.cuh), FC_HOPPER_DEBUG
// (bounded mbarrier waits that trap instead of hanging), FC_HOPPER_TRACE (clock64 stamps of three
// CTAs' units, printed: gen5_hopper/trace.cuh).
#include "common/params.cuh"
#include "common/types.cuh"
#include "common/masking.cuh"
#include "common/tensor_index.cuh"
#include "common/padded_head.cuh"
#include "common/seqlen.cuh"
#include "common/kv_rows.cuh"
#include "common/score_mod.cuh"
#include "common/hopper/mbarrier.cuh"
#include "common/hopper/tma.cuh"
#include "common/hopper/wgmma.cuh"
#include "common/hopper/wgmma_e4m3.cuh"
#include "common/hopper/smem_io.cuh"
#include "common/hopper/named_barrier.cuh"
#include "common/hopper/cluster.cuh"
#include "common/grid_dependency.cuh"
#include "common/work_counter.cuh"

// The parts, in the order they build on each other:
#include "gen5_hopper/config.cuh"
#include "gen5_hopper/smem_map.cuh"
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
#include "gen5_hopper/producer.cuh"
#include "gen5_hopper/mainloop.cuh"
#include "gen5_hopper/epilogue.cuh"

namespace fch {

// FC_HOPPER_DEBUG: launch contracts whose breach would corrupt memory or hang, trapped at the start.
__device__ __forceinline__ void check_launch(const AttentionParams& p, const unsigned char* smem_raw, unsigned base,
                                             int n_units) {
    if (threadIdx.x != 0) return;
    if ((base - smem_u32(smem_raw)) + SMEM_USED > SMEM_BYTES) {
        printf("flashcore hopper: dynamic smem base misaligned beyond the slack\n");
        __trap();
    }
    if (SPLIT_KV && p.num_splits > 1 && p.workspace == nullptr) {
        printf("flashcore hopper: num_splits %d but no workspace\n", p.num_splits);
        __trap();
    }
    if (CLUSTER_CTAS > 1 && n_units > unit_stride()) {
        printf("flashcore hopper: cluster key split with %d units on %d clusters\n", n_units, unit_stride());
        __trap();
    }
}

}  // namespace fch

extern "C" __global__ void __launch_bounds__(fch::THREADS, 1) FC_HOPPER_CLUSTER_DIMS
    attention_persistent_hopper(const __grid_constant__ AttentionParams p, const __grid_constant__ CUtensorMap tm_q,
                                const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v) {
    using namespace fch;
    UnitTrace trace;  // (empty unless FC_HOPPER_TRACE)
    trace.begin(threadIdx.x >= 128 && threadIdx.x % 128 == 0);
    // Declared 16-aligned on purpose: with __align__(1024) the compiler may fold the round-up below away.
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const SmemMap sm(smem_raw);
    const TensorMaps maps = {&tm_q, &tm_k, &tm_v};
    // The map's addresses as the kernel's own values (the loops below use these; see smem_map.cuh).
    const unsigned base = sm.base;
    const unsigned sQ = sm.q;
    const unsigned sK = sm.k;
    const unsigned sV = sm.v;
    const unsigned bar_q_full = sm.q_full;
    const unsigned bar_q_empty = sm.q_empty;
    const unsigned bar_k_full = sm.k_full;
    const unsigned bar_k_empty = sm.k_empty;
    const unsigned bar_v_full = sm.v_full;
    const unsigned bar_v_empty = sm.v_empty;

    // The schedule, and the producer's first unit (EARLY_FIRST_UNIT, producer.cuh), are worked out
    // while a thread of another warp (32) sets the barriers up.
    const Schedule sched = make_schedule(p);
    // Work units: items x splits (splits_of is the constant 1 without FC_HOPPER_SPLIT_KV).
    const int n_units = sched.total * splits_of(p);
    Work first_unit;
    if (EARLY_FIRST_UNIT && threadIdx.x < PRODUCER_LANES) {
        first_unit = decode_unit(p, sched, first_unit_of_cta());  // < n_units: grid <= units
        // (before griddep_wait below)
        if constexpr (PREFETCH) prefetch_unit_l2(p, &tm_q, &tm_k, &tm_v, first_unit, sched.nm);
    }
    if (threadIdx.x == (MODES ? 0 : 32)) {
        init_barriers(sm, CONSUMER_THREADS + Q_EMPTY_FOLLOWER_ARRIVALS);
        tma_prefetch_map(&tm_q);
        tma_prefetch_map(&tm_k);
        tma_prefetch_map(&tm_v);
    }
    if constexpr (DEBUG_CHECKS) check_launch(p, smem_raw, base, n_units);
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
    // (The key-split build waits later: SETUP_BEFORE_GRID_WAIT, config.cuh.)
    if constexpr (!SETUP_BEFORE_GRID_WAIT) {
        griddep_wait();
        if (threadIdx.x == 0) griddep_launch_dependents();
        trace.after_wait();
    }

    const int warpgroup = threadIdx.x / 128;

    if (warpgroup == 0) {
        // ===================================== producer =====================================
        warpgroup_reg_dealloc<PRODUCER_REGS>();
        if constexpr (SETUP_BEFORE_GRID_WAIT) {
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
                const Work w = EARLY_FIRST_UNIT && t == first_unit_of_cta() ? first_unit : decode_unit(p, sched, t);
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
                                            bar_v_empty, &tm_k, &tm_v, stage, phase, lane, sm.v_landed,
                                            landed_phase);
                    continue;
                }
                for (int kb = 0; kb < w.n_blocks; ++kb) {
                    load_kv_tile(p, seq, w.b, h_kv, w.kb0, kb, lane, sm, maps, stage, phase, landed_phase);
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

        // K-major, swizzled ROW_BYTES rows: SBO = 8 rows, LBO unused (16 -> encoded 1).
        const unsigned long long q_desc0 = make_desc_rows<ROW_BYTES>(sQ + row_wg * WG_M * ROW_BYTES, 16);
        const unsigned long long k_desc0 = make_desc_rows<ROW_BYTES>(sK, 16);
        // MN-major: SBO = 8 keys, LBO = the next column box (NBOX_V of them).
        // e4m3: V transposed, K-major as K is (SBO = 1024, the next 8 of V's columns).
        const unsigned long long v_desc0 =
            E4M3 ? make_desc_rows<ROW_BYTES>(sV, 16) : make_desc_rows<ROW_BYTES>(sV, KV_BOX_BYTES);

        // Ping-pong prime: warpgroup 1 holds the first issue slot (its first pp_sync pairs with this).
        if constexpr (PINGPONG) {
            if (cw == 0) named_bar_arrive(BAR_SCHED + 0, 2 * 128);
        }

        int stage = 0;
        unsigned phase = 0;
        int it = 0;
        int ring = 0;  // key split: K/V tiles of the items before this one (both warpgroups count them all)
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
            if (SETUP_BEFORE_GRID_WAIT && it == 0) {  // before this thread's first write of O
                griddep_wait();
                trace.after_wait();
            }
            trace.mark(it, MARK_BEGIN);
#endif
            trace.set_tiles(it, w.n_blocks);
            const unsigned long long q_desc = q_desc0 + ((unsigned long long)(qs * Q_BYTES) >> 4);
            const int grow0 = w.m * BM + row_in_tile;
            const int grow1 = grow0 + 8;
            // With score modifiers (prepare_scores) the logits are in log2 units before the
            // softmax, which then runs with scale 1.
            const bool score_modified = MODES && has_score_mod(p);
            const float softmax_scale_log2 =
                score_modified ? 1.f : E4M3 ? scale_log2 * qk_descale(p, w.b, w.h) : scale_log2;
            const KeyRange wg_unmasked = warpgroup_unmasked_keys(p, w.b, w.m * BM + row_wg * WG_M);
            // Modes build: the item's q tile may end before this warpgroup's rows begin. Taken
            // through a vote so the compiler sees a warp-uniform branch: the ring's stage and
            // phase stay in uniform registers (a plain load-derived condition moved them to
            // per-thread ones, and every wgmma descriptor then paid an R2UR: +3 % time).
            const bool wg_has_rows =
                !MODES || __all_sync(0xffffffffu, w.m * BM + row_wg * WG_M < block_seq(p, w.b).len_q);

            float o[DV / 2];  // O: V's head dim
#pragma unroll
            for (int i = 0; i < DV / 2; ++i) o[i] = 0.f;
            float m[2] = {-INFINITY, -INFINITY};
            float l[2] = {0.f, 0.f};
            float alpha[2];

            if constexpr (!DYNAMIC) {  // (the dynamic schedule's consumers waited to read the unit)
                mbar_wait(q_full, qpar, TAG_Q_FULL);
                trace.mark(it, MARK_Q_READY);
            }

            if constexpr (OVERLAP) {
                // Key-split warpgroups take every other tile, from tile cw; otherwise each takes all.
                const int first_kb = KEY_SPLIT ? cw : 0;
                if constexpr (KEY_SPLIT) key_split_ring_start(ring, cw, stage, phase);
                if (!wg_has_rows) {
                    pass_key_tiles(w.n_blocks, cw, bar_k_full, bar_k_empty, bar_v_full, bar_v_empty, stage, phase,
                                   q_empty, RELEASE_Q_AFTER_QK);
                    if (RELEASE_Q_AFTER_QK && w.n_blocks == 0) mbar_arrive(q_empty);
                } else if (w.n_blocks > first_kb) {
                    float s[BN / 2];
                    unsigned pr[P_REGS];
                    // ---- first key tile: S_0, softmax_0 (no PV yet) ----
                    qk_tile(sm, cw, q_desc, k_desc0, stage, phase, s, trace, it);
                    if (RELEASE_Q_AFTER_QK && (KEY_SPLIT ? first_kb + KEY_STEP >= w.n_blocks : w.n_blocks == 1))
                        mbar_arrive(q_empty);
                    scores_to_p(p, w.b, w.h, w.kb0, first_kb, grow0, w.m * BM + row_wg * WG_M, col_in_block,
                                wg_unmasked, score_modified, softmax_scale_log2, s, pr, m, l, alpha);
                    int vstage = stage;
                    unsigned vphase = phase;
                    advance_ring(stage, phase);
                    for (int kb = first_kb + KEY_STEP; kb < w.n_blocks; kb += KEY_STEP) {
                        next_key_tile(p, w.b, w.h, w.kb0, w.n_blocks, kb, cw, q_desc, k_desc0, v_desc0, sm, stage,
                                      phase, vstage, vphase, q_empty, grow0, w.m * BM + row_wg * WG_M, col_in_block,
                                      wg_unmasked, score_modified, softmax_scale_log2, s, pr, o, m, l, alpha);
                        vstage = stage;
                        vphase = phase;
                        advance_ring(stage, phase);
                    }
                    pv_tile(sm, v_desc0, vstage, vphase, pr, o, trace, it);
                } else if (RELEASE_Q_AFTER_QK) {
                    mbar_arrive(q_empty);  // no key tile (of its own): Q was loaded but is not needed
                }
                if constexpr (KEY_SPLIT) {
                    key_split_balance_turns(w.n_blocks, cw);
                    ring += w.n_blocks;
                }
            } else {
                for (int kb = 0; kb < w.n_blocks; ++kb) {
                    serial_key_tile(p, w.b, w.h, w.kb0, w.n_blocks, kb, q_desc, k_desc0, v_desc0, sm, stage, phase,
                                    q_empty, grow0, w.m * BM + row_wg * WG_M, col_in_block, wg_unmasked,
                                    score_modified, softmax_scale_log2, o, m, l, alpha, trace, it);
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
                if (RELEASE_Q_AFTER_QK && w.n_blocks == 0) mbar_arrive(q_empty);  // no key tile: Q unused
            }

            // ---- epilogue: O /= l, LSE; rows >= seq_q are never written ----
#pragma unroll
            for (int r = 0; r < 2; ++r) l[r] = quad_sum(l[r]);  // the row's sum (online_softmax.cuh)
            if constexpr (SPLIT_KV) {
                if (p.num_splits > 1) {
                    split_epilogue(p, sched.total, w, cw, tid, o, m, l, grow0, col_in_block);
                    trace.mark(it, MARK_STORED);
                    continue;  // (the epilogue below is the unsplit one)
                }
            }
            if constexpr (KEY_SPLIT) {
                key_split_epilogue(p, w, cw, tid, o, m, l, grow0, softmax_scale_log2, base);
                trace.mark(it, MARK_STORED);
                continue;
            }
            const int h = w.h, b = w.b;
            // The block info again (reloaded, not kept in registers across the key loop).
            const SeqInfo seq = block_seq(p, b);
            const KeyRange keys0 = block_keys(p, seq, grow0);
            const KeyRange keys1 = block_keys(p, seq, grow1);
            if constexpr (SMEM_EPILOGUE) {
                store_o_through_smem(p, w, cw, tid, warp, lane, col_in_block, o, m, l, seq, grow0, grow1, keys0, keys1,
                                     softmax_scale_log2, sQ, qs, q_empty);
            } else {
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
                            for (int j = 0; j < DV / 8; ++j) {
                                if (chunk_in_head<PADDED_V>(p.head_dim, j))
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
                        float inv = row_inverse(l[r], r == 0 ? keys0 : keys1);
                        if constexpr (E4M3) inv *= v_descale(p, b, h);
                        elem_t* orow = grow < seq.len_q
                                           ? reinterpret_cast<elem_t*>(p.o) + seq_o_offset(p, seq, b, h, grow)
                                           : nullptr;
                        float row[DV / 4];  // this lane's pair of each column block
#pragma unroll
                        for (int j = 0; j < DV / 8; ++j) {
                            row[2 * j] = o[4 * j + 2 * r];
                            row[2 * j + 1] = o[4 * j + 2 * r + 1];
                        }
                        store_row_blocks<DV / 8>(orow, row, inv, 0, lane, p.head_dim);
                        if (grow < seq.len_q && (lane & 3) == 0) {
                            p.lse[block_lse_offset(p, seq, b, h, grow)] =
                                row_natural_lse(l[r], m[r], r == 0 ? keys0 : keys1, softmax_scale_log2);
                        }
                    }
                }
            }
            trace.mark(it, MARK_STORED);
        }
        trace.finish(it);
        // Ping-pong drain: the last warpgroup's last arrive on barrier 1 is matched here, so every
        // scheduler barrier ends the kernel complete (with no tile at all this pairs with the prime).
        if constexpr (PINGPONG) {
            if (cw == 0) named_bar_sync(BAR_SCHED + 0, 2 * 128);
        }
    }
}

#if FC_HOPPER_TRACE
// The timeline's printer (gen5_hopper/trace.cuh): the plan's second launch, one thread.
extern "C" __global__ void attention_persistent_hopper_trace_print(const __grid_constant__ AttentionParams) {
    fch::print_trace();
}
#endif
