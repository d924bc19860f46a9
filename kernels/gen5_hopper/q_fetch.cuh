// Generation 5 (Hopper) forward: the producer's unit and Q side, shared by both producer loops (the
// whole-warp one in gen5_persistent_hopper.cu and the four-warp one in producer_spread.cuh).
#pragma once
#include "config.cuh"
#include "tile_scheduler.cuh"
#include "../common/params.cuh"
#include "../common/work_counter.cuh"
#include "../common/hopper/mbarrier.cuh"
#include "../common/hopper/smem_io.cuh"
#include "../common/hopper/tma.cuh"

namespace fch {

// Dynamic schedule: lane 0 (`leader`) takes units from the counter, for the warp, until one has
// query rows (units past a varlen sequence's end are skipped; the consumers skip them too) or none
// is left. Returns the unit (n_units or more when none is left) and decodes it into w; taken when
// this CTA is ready for it, not one ahead: claiming ahead was measured worse under causal masking
// (it breaks the greedy longest-first balance at the tail).
__device__ __forceinline__ int take_next_unit(const AttentionParams& p, const Schedule& sched, unsigned* counters,
                                              int n_units, bool leader, Work& w) {
    for (;;) {
        int t = 0;
        if (leader) t = take_work(counters);
        if constexpr (PRODUCER_LANES > 1) t = __shfl_sync(0xffffffffu, t, 0);
        if (t >= n_units) return t;
        w = decode_unit(p, sched, t);
        if (w.n_blocks >= 0) return t;
    }
}

// Dynamic schedule, once Q buffer qs is free: lane 0 (`leader`) writes unit t beside the buffer
// for the consumers (the arrive on its "full" barrier then publishes it with the Q fill), or -1
// when `done`, completing that phase with a plain arrival (no copy) and leaving the counters zero
// if this is the last CTA. Returns `done`.
__device__ __forceinline__ bool hand_off_unit(unsigned base, unsigned q_full, int qs, bool leader, int t, bool done,
                                              unsigned* counters) {
    if (leader) st_shared_u32(base + OFF_ITEM + 4 * qs, (unsigned)(done ? -1 : t));
    if (done) {
        if (leader) {
            mbar_arrive(q_full);
            finish_taking(counters);
        }
        return true;
    }
    return false;
}

// Lane 0 (`leader`) fills Q buffer qs with unit w's query tile (its rows from q_row0, the
// sequence's first row in a packed Q), completing q_full.
__device__ __forceinline__ void fill_q(const AttentionParams& p, unsigned sQ, const CUtensorMap* tm_q, unsigned q_full,
                                       int qs, bool leader, const Work& w, long long q_row0) {
    if (!leader) return;
    mbar_arrive_expect_tx(q_full, Q_BYTES);
    const int q_batch = MODES && p.cu_seqlens_q != nullptr ? 0 : w.b;  // packed Q: one "batch"
#pragma unroll
    for (int c = 0; c < NBOX; ++c)
        tma_load_4d(sQ + qs * Q_BYTES + c * Q_BOX_BYTES, tm_q, q_full, c * BOX_COLS, (int)q_row0 + w.m * BM, w.h, q_batch);
}

}  // namespace fch
