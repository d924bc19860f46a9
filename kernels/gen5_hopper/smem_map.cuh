// Generation 5 (Hopper) forward: the shared-memory map's addresses (config.cuh's offsets from the
// 1024-byte aligned base) and which Q buffer an item takes. Producer and consumers address every
// buffer and barrier through these.
#pragma once
#include "config.cuh"
#include "../common/hopper/mbarrier.cuh"

namespace fch {

// Shared-window addresses. Barrier groups are arrays of 8-byte mbarriers: q_full[qs] is
// q_full + 8 qs, k_full[s] is k_full + 8 s, and so on. Built in place (a constructor, not a
// returned copy): copied, the addresses lost what the compiler knew of them (base is a multiple of
// 1024, so no barrier address is 0), and tests on them came back into the producer's loop.
struct SmemMap {
    unsigned base;  // 1024-byte aligned (128-byte swizzled TMA boxes need it)
    unsigned q, k, v;
    unsigned q_full, q_empty, k_full, k_empty, v_full, v_empty, v_landed;

    // `smem_raw` is the kernel's dynamic shared memory, declared 16-aligned on purpose: with
    // __align__(1024) the compiler may fold the round-up below away.
    __device__ __forceinline__ explicit SmemMap(const unsigned char* smem_raw)
        : base((smem_u32(smem_raw) + 1023u) & ~1023u),
          q(base + OFF_Q),
          k(base + OFF_K),
          v(base + OFF_V),
          q_full(base + OFF_BAR_Q_FULL),
          q_empty(base + OFF_BAR_Q_EMPTY),
          k_full(base + OFF_BAR_K_FULL),
          k_empty(base + OFF_BAR_K_EMPTY),
          v_full(base + OFF_BAR_V_FULL),
          v_empty(base + OFF_BAR_V_EMPTY),
          v_landed(base + OFF_BAR_V_LANDED) {}
};

// The ring's barriers, set up by one thread before the kernel's setup __syncthreads. Arrivals:
// a Q buffer's "empty" barrier counts every consumer thread (and, with spread pages and the
// dynamic schedule, the producer's follower warps), a K/V slot's the consumers of its tile (one
// warpgroup a tile when they split keys); "full" barriers complete on one arrival and the copies'
// bytes. The cluster key split's exchange barrier expects the partner's st.async bytes at once.
__device__ __forceinline__ void init_barriers(const SmemMap& s, unsigned q_empty_arrivals) {
#pragma unroll
    for (int i = 0; i < Q_STAGES; ++i) {
        mbar_init(s.q_full + 8 * i, 1);
        mbar_init(s.q_empty + 8 * i, q_empty_arrivals);
    }
#pragma unroll
    for (int i = 0; i < STAGES; ++i) {
        mbar_init(s.k_full + 8 * i, 1);
        mbar_init(s.k_empty + 8 * i, KV_CONSUMER_THREADS);
        mbar_init(s.v_full + 8 * i, 1);
        mbar_init(s.v_empty + 8 * i, KV_CONSUMER_THREADS);
    }
    mbar_init(s.v_landed, 1);
    if constexpr (CLUSTER_CTAS > 1) {
        mbar_init(s.base + OFF_BAR_CXCHG, 1);
        mbar_arrive_expect_tx(s.base + OFF_BAR_CXCHG, CXCHG_TX_BYTES);
    }
    mbar_fence_init();
}

}  // namespace fch
