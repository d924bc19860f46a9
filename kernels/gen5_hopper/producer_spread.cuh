// Generation 5 (Hopper) forward, modes build: the producer's loop when a paged tile's page groups
// are spread over the producer warpgroup's four warps (FC_HOPPER_SPREAD_PAGES, config.cuh). Warp 0 takes the
// units, issues Q, sets each tile's expected bytes and finishes a zeroed V tail; warp w issues the
// boxes of groups g with g % 4 == w. Warps 1-3 follow warp 0 through the same units: the static
// order by the same arithmetic, dynamic units read where the consumers read them, beside the Q
// buffer once its "full" barrier has completed; they arrive on its "empty" barrier once read, so
// the next fill waits for them (an item may need no box of theirs: a short tile has < 4 groups).
// A loop of its own, so the other producer loop (the dense build's among them) carries none of
// its state through the producer's 40 registers.
#pragma once
#include "config.cuh"
#include "tile_scheduler.cuh"
#include "block_info.cuh"
#include "q_fetch.cuh"
#include "kv_fetch.cuh"
#include "../common/params.cuh"
#include "../common/seqlen.cuh"
#include "../common/hopper/mbarrier.cuh"
#include "../common/hopper/smem_io.cuh"
#include "../common/hopper/tma.cuh"

namespace fch {

// Arrivals a Q buffer's "empty" barrier takes besides the consumers': with the dynamic schedule
// and spread tiles, warps 1-3 read each unit index beside the Q buffer and arrive once read.
enum : unsigned { Q_EMPTY_FOLLOWER_ARRIVALS = FC_HOPPER_DYNAMIC && SPREAD_PAGES ? KV_ISSUE_WARPS - 1 : 0 };

struct ProducerCounts {
    unsigned both = 0;
    // (Only this build keeps them so: the others take any ring depth the plan allows.)
    static_assert(!SPREAD_PAGES || (Q_STAGES <= 2 && (STAGES & (STAGES - 1)) == 0), "counts kept mod 2^16");
    __device__ __forceinline__ unsigned items() const { return both >> 16; }
    __device__ __forceinline__ unsigned tiles() const { return both & 0xffffu; }
    __device__ __forceinline__ int q_buffer() const { return Q_STAGES == 1 ? 0 : (int)(items() & 1u); }
    __device__ __forceinline__ unsigned q_parity() const { return (items() / Q_STAGES) & 1u; }
    __device__ __forceinline__ unsigned stage() const { return tiles() % STAGES; }
    __device__ __forceinline__ unsigned phase() const { return (tiles() / STAGES) & 1u; }
    __device__ __forceinline__ void next_item() { both += 1u << 16; }
    __device__ __forceinline__ void next_tile() { both = (both & 0xffff0000u) | ((both + 1u) & 0xffffu); }
};

// `base`: the shared-memory map's base (config.cuh); buffers and barriers are at fixed offsets
// from it, so the loop keeps one register for all of them (the producer has 40).
__device__ __forceinline__ void produce_spread(const AttentionParams& p, const Schedule& sched, int n_units,
                                            unsigned base, const CUtensorMap* tm_q, const CUtensorMap* tm_k,
                                            const CUtensorMap* tm_v) {
    const unsigned sQ = base + OFF_Q, sK = base + OFF_K, sV = base + OFF_V;
    const unsigned bar_q_full = base + OFF_BAR_Q_FULL, bar_q_empty = base + OFF_BAR_Q_EMPTY;
    const unsigned bar_k_full = base + OFF_BAR_K_FULL, bar_k_empty = base + OFF_BAR_K_EMPTY;
    const unsigned bar_v_full = base + OFF_BAR_V_FULL, bar_v_empty = base + OFF_BAR_V_EMPTY;
    const unsigned bar_v_landed = base + OFF_BAR_V_LANDED;
    const int lane = threadIdx.x & 31;
    const int copy_warp = (int)(threadIdx.x >> 5);
    const bool leader = threadIdx.x == 0;
    // Items taken (high half) and K/V tiles issued (low half), one register: only each count's
    // value mod 4 is used (Q buffer and parity; ring stage and phase), and 2^16 is a multiple of
    // 4. Two registers spilled one of them at D = 128 with the dynamic schedule.
    ProducerCounts counts;
    unsigned landed_phase = 0;
#if FC_HOPPER_DYNAMIC
    unsigned* counters = reinterpret_cast<unsigned*>(p.workspace);  // [0] next unit, [1] CTAs done
    for (;;) {
        const int qs = counts.q_buffer();
        const unsigned qpar = counts.q_parity();
        // Warp 0 takes the next unit; the followers read it beside Q buffer qs.
        int t;
        bool done;
        Work w;
        if (copy_warp == 0) {
            t = take_next_unit(p, sched, counters, n_units, leader, w);
            done = t >= n_units;
        } else {
            mbar_wait(bar_q_full + 8 * qs, qpar, TAG_Q_FULL);
            t = (int)ld_shared_u32(base + OFF_ITEM + 4 * qs);
            // Read: the slot's next unit index may be written (q_empty counts this arrival, so
            // warp 0 cannot lap a follower that issues nothing for this item).
            __syncwarp();
            if (lane == 0) mbar_arrive(bar_q_empty + 8 * qs);
            done = t < 0;
            if (done) break;
            w = decode_unit(p, sched, t);
        }
#else
    for (int t = blockIdx.x; t < n_units; t += gridDim.x) {
        const Work w = decode_unit(p, sched, t);
        if (w.n_blocks < 0) continue;  // past a varlen sequence's end: the consumers skip it too
        const int qs = counts.q_buffer();
        const unsigned qpar = counts.q_parity();
#endif
        if (copy_warp == 0) {
            // Q buffer qs free? (item counts.items() - Q_STAGES's consumers released it; its first
            // use waits parity 1 of a fresh barrier and passes at once)
            mbar_wait(bar_q_empty + 8 * qs, qpar ^ 1, TAG_Q_EMPTY);
#if FC_HOPPER_DYNAMIC
            if (hand_off_unit(base, bar_q_full + 8 * qs, qs, leader, t, done, counters)) break;
#endif
        }
        // (After the hand-off: when warp 0 has no unit left, w holds none.)
        const SeqInfo seq = block_seq(p, w.b);
        if (copy_warp == 0) fill_q(p, sQ, tm_q, bar_q_full + 8 * qs, qs, leader, w, seq.q_row0);
        const int h_kv = w.h / p.q_heads_per_kv;
        for (int kb = 0; kb < w.n_blocks; ++kb, counts.next_tile()) {
            const unsigned stage = counts.stage(), phase = counts.phase();
            const unsigned kf = bar_k_full + 8 * stage, ke = bar_k_empty + 8 * stage;
            const unsigned vf = bar_v_full + 8 * stage, ve = bar_v_empty + 8 * stage;
            const int k0 = (w.kb0 + kb) * BN;
            const KvTile tile = plan_kv_tile(p, seq, w.b, k0, lane);  // while the slots drain
            if (issues_boxes(tile, copy_warp, false)) {
                mbar_wait(ke, phase ^ 1, TAG_K_EMPTY);
                fetch_kv_tile(p, tile, h_kv, sK + stage * KV_TILE_BYTES, tm_k, kf, 0, lane, nullptr, copy_warp);
            }
            if (issues_boxes(tile, copy_warp, v_tail_zeroed(p, tile))) {
                mbar_wait(ve, phase ^ 1, TAG_V_EMPTY);
                fetch_kv_tile<NBOX_V>(p, tile, h_kv, sV + stage * V_TILE_BYTES, tm_v, vf, bar_v_landed, lane,
                              &landed_phase, copy_warp);
            }
        }
        counts.next_item();
    }
    // Nothing to wait for here: the producer only ever waits on an "empty" barrier right
    // before filling that stage, and every stage it filled is consumed (and waited on
    // through its "full" barrier) by both consumer warpgroups before they exit.
}

}  // namespace fch
