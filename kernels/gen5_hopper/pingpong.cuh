// Generation 5 (Hopper) forward: the consumer warpgroups' GEMM ping-pong (named barriers).
#pragma once
#include "config.cuh"
#include "../common/hopper/mbarrier.cuh"
#include "../common/hopper/named_barrier.cuh"

namespace fch {

// ---- inter-warpgroup ping-pong (FC_HOPPER_PINGPONG) -----------------------------------------
// Consumer cw waits on its own scheduler barrier before issuing a key tile's GEMMs and, once they
// are issued, arrives on the next one's: the GEMM issue slots go round the warpgroups in turn,
// WG1, WG2, (WG3,) WG1, ... (protocol and deadlock argument: docs/generations/gen5-persistent.md,
// "Ping-pong"). Every barrier pairs one waiting and one arriving warpgroup: 2 x 128 threads.
__device__ __forceinline__ void pp_sync(int cw) {
#if FC_HOPPER_PINGPONG
    named_bar_sync(BAR_SCHED + cw, 2 * 128);
#else
    (void)cw;
#endif
}
__device__ __forceinline__ void pp_arrive(int cw) {
#if FC_HOPPER_PINGPONG
    // (1 - cw for two: the form the two-warpgroup builds were verified with)
    const int next = CONSUMER_WGS == 2 ? 1 - cw : (cw + 1 == CONSUMER_WGS ? 0 : cw + 1);
    named_bar_arrive(BAR_SCHED + next, 2 * 128);
#else
    (void)cw;
#endif
}

// ---- a warpgroup with no rows in the item ----------------------------------------------------
// The last q tile of a varlen sequence or cache chunk may end inside the first warpgroup's rows.
// The second warpgroup then has nothing to compute, but it still takes its part in every barrier
// of the item's key tiles: it releases each K and V slot once it has landed (the "empty" barriers
// count both warpgroups; waiting for "full" first keeps its arrivals in the slot's phase) and
// takes its ping-pong turns at once, so the other warpgroup issues its GEMMs back to back.
__device__ __forceinline__ void pass_key_tiles(int n_blocks, int cw, unsigned bar_k_full, unsigned bar_k_empty,
                                               unsigned bar_v_full, unsigned bar_v_empty, int& stage,
                                               unsigned& phase, unsigned q_empty, bool release_q_after_qk) {
    for (int kb = 0; kb < n_blocks; ++kb) {
        mbar_wait(bar_k_full + 8 * stage, phase, TAG_K_FULL);
        pp_sync(cw);
        pp_arrive(cw);
        mbar_arrive(bar_k_empty + 8 * stage);
        if (release_q_after_qk && kb == n_blocks - 1) mbar_arrive(q_empty);
        mbar_wait(bar_v_full + 8 * stage, phase, TAG_V_FULL);
        mbar_arrive(bar_v_empty + 8 * stage);
        if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
        }
    }
}

}  // namespace fch
