// Generation 5 (Hopper) forward: the two consumer warpgroups' GEMM ping-pong (named barriers).
#pragma once

namespace fch {

// ---- inter-warpgroup ping-pong (FC_HOPPER_PINGPONG) -----------------------------------------
// Consumer cw waits on its own scheduler barrier before issuing a key tile's GEMMs and, once they
// are issued, arrives on the other one's: the GEMM issue slots strictly alternate WG1, WG2, WG1,
// ... (protocol and deadlock argument: docs/generations/gen5-persistent.md, "Ping-pong").
__device__ __forceinline__ void pp_sync(int cw) {
#if FC_HOPPER_PINGPONG
    named_bar_sync(BAR_SCHED + cw, 2 * 128);
#else
    (void)cw;
#endif
}
__device__ __forceinline__ void pp_arrive(int cw) {
#if FC_HOPPER_PINGPONG
    named_bar_arrive(BAR_SCHED + 1 - cw, 2 * 128);
#else
    (void)cw;
#endif
}

}  // namespace fch
