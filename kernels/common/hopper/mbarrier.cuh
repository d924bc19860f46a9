// mbarrier helpers for the Hopper kernels (PTX ISA: mbarrier.*, sm_90).
// Every barrier lives in shared memory and is addressed by its 32-bit shared-window address.
//
// Phase/parity convention (the same everywhere in flashcore):
//   * A freshly initialised barrier is in phase 0, not yet complete.
//   * mbar_wait(bar, parity) returns once the phase whose parity is `parity` has completed.
//     Waiting on parity 1 of a fresh barrier returns at once (the "previous" phase counts as
//     complete), which is how producers start on "empty" barriers without a priming arrive.
//   * With FC_HOPPER_DEBUG defined, a wait still unfinished after FC_HOPPER_DEBUG_WAIT_NS (10 s)
//     prints the barrier, the parity and the CTA, then traps, so a protocol bug shows up as a
//     launch error instead of a hang.
#pragma once

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// Makes mbarrier.init visible to other threads and to the async proxy (TMA complete_tx).
__device__ __forceinline__ void mbar_fence_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// One arrival plus `bytes` expected transaction bytes (the producer, before issuing TMA).
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
}

// Expected transaction bytes without an arrival: the producer posts a stage's TMA bytes before it
// issues the copies, and arrives later, after its own writes to the stage.
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// One plain arrival (consumers releasing a buffer).
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ bool mbar_try_wait(unsigned bar, unsigned parity) {
    unsigned ok;
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(ok)
        : "r"(bar), "r"(parity)
        : "memory");
    return ok != 0;
}

#if defined(FC_HOPPER_DEBUG)
#include "../globaltimer.cuh"
#ifndef FC_HOPPER_DEBUG_WAIT_NS
#define FC_HOPPER_DEBUG_WAIT_NS 10000000000ull  // 10 s: no legitimate wait comes near it
#endif
#endif

// `tag` only appears in the debug report (which barrier: see the kernel's FC_BAR_* tags).
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity, int tag = 0) {
#if defined(FC_HOPPER_DEBUG)
    // Bounded by time, not by spins: a try_wait may suspend the thread for a while before it
    // fails, and 2^30 of them did not report within a 200 s call (10b4272).
    const unsigned long long start = globaltimer_ns();
    while (!mbar_try_wait(bar, parity)) {
        if (globaltimer_ns() - start > FC_HOPPER_DEBUG_WAIT_NS) {
            printf("flashcore hopper: mbarrier wait stuck: block %d thread %d tag %d bar 0x%x parity %u\n",
                   (int)blockIdx.x, (int)threadIdx.x, tag, bar, parity);
            __trap();
        }
    }
#else
    (void)tag;
    while (!mbar_try_wait(bar, parity)) {
    }
#endif
}
