// Thread-block cluster helpers for the Hopper kernels (PTX ISA: %cluster_ctarank, mapa,
// barrier.cluster, st.async; sm_90). A CTA reaches a partner's shared memory through the
// cluster's shared window: mapa turns one of its own shared addresses into the partner's copy of
// it, and st.async stores there and counts the bytes off an mbarrier in the partner's memory, so
// the partner learns that its data has landed by waiting on its own barrier.
#pragma once

// This CTA's rank in its cluster.
__device__ __forceinline__ unsigned cluster_cta_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

// The address in the cluster's shared window of CTA `rank`'s copy of our shared address `addr`.
__device__ __forceinline__ unsigned cluster_map_shared(unsigned addr, unsigned rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
    return remote;
}

// Every thread of the cluster arrives once; barrier.cluster.wait returns when all non-exited
// threads have. Release / acquire: the partner's barrier initialisation before the arrive is
// visible to whoever returns from the wait.
__device__ __forceinline__ void cluster_arrive_release() {
    asm volatile("barrier.cluster.arrive.release;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait_acquire() {
    asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}

// 16 and 8 bytes into a partner's shared memory (`remote`, `remote_bar` from cluster_map_shared),
// each completing its byte count on the partner's mbarrier.
__device__ __forceinline__ void st_async_v4_f32(unsigned remote, float a, float b, float c, float d,
                                                unsigned remote_bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(
                     remote),
                 "f"(a), "f"(b), "f"(c), "f"(d), "r"(remote_bar)
                 : "memory");
}
__device__ __forceinline__ void st_async_v2_f32(unsigned remote, float a, float b, unsigned remote_bar) {
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(remote),
                 "f"(a), "f"(b), "r"(remote_bar)
                 : "memory");
}

// mbar_wait with cluster scope: the bytes it waits for were written by another CTA's st.async.
__device__ __forceinline__ void mbar_wait_cluster(unsigned bar, unsigned parity) {
    unsigned ok = 0;
    while (!ok) {
        asm volatile(
            "{\n\t.reg .pred p;\n\t"
            "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n\t"
            "selp.u32 %0, 1, 0, p;\n\t}"
            : "=r"(ok)
            : "r"(bar), "r"(parity)
            : "memory");
    }
}
