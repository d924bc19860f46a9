// Producer/consumer synchronisation that works from sm_80 on: named barriers (bar.sync /
// bar.arrive with an id and a thread count) and the sm_80 forms of the shared-memory mbarrier,
// including the one instruction that ties an mbarrier to cp.async completion.
//
// Used by kernels/gen5_persistent_portable.cu; the protocol built from these pieces is written up
// in docs/generations/gen5-persistent.md ("Portable path"). Names carry a `pl_` prefix so this
// header can sit next to common/hopper/mbarrier.cuh in one translation unit.
//
// Named barriers (PTX `barrier{.cta}`, 16 per CTA, id 0 is __syncthreads):
//   * `bar.sync id, n` marks the executing warp's arrival and waits until n threads (a multiple
//     of 32) have arrived; `bar.arrive id, n` only marks the arrival. When the n-th thread arrives
//     the barrier completes, releases its waiters and starts over from zero.
//   * Arrivals are per warp: the whole warp must execute the instruction (convergent).
//   * Memory ordering: arrive is a release, sync an acquire+release, so shared-memory reads a
//     warp made before its bar.arrive are ordered before anything a bar.sync-ing warp does after
//     the barrier completes (that is what makes "buffer empty" signalling safe).
//   * A barrier has no notion of phase: a warp that arrives twice before the barrier completed
//     once is counted twice. Protocols must make that impossible (see the kernel's write-up).
//   * Waits are in hardware (the warp is descheduled, no polling), and cannot be bounded.
//
// mbarriers (8 bytes of shared memory each):
//   * Initialised with an expected arrival count; a fresh barrier is in phase 0. When the count
//     is reached, the current phase completes, the parity flips and the count reloads.
//   * `pl_mbar_wait(bar, parity)` returns once the phase with that parity has completed: waiting
//     parity 0 on a fresh barrier blocks until its first completion, parity 1 returns at once.
//   * `cp.async.mbarrier.arrive.noinc` makes the barrier track every cp.async this thread issued
//     before it: the arrival is performed, asynchronously, once they have all landed, and their
//     writes are visible to any thread that then observes the phase complete. `.noinc` means the
//     instruction does not add an expected arrival: the init count must include it (one per
//     issuing thread). This is how cuda::memcpy_async with a cuda::barrier is built on sm_80.
//   * sm_80..sm_89 poll with mbarrier.test_wait (try_wait, which can suspend, is sm_90+); on
//     sm_90 the same loop uses try_wait.
//
// FC_PORTABLE_DEBUG: every mbarrier wait gives up after FC_PORTABLE_DEBUG_TIMEOUT_CYCLES
// (clock64) and prints who was stuck where before __trap(), so a protocol bug surfaces as a
// launch error instead of a hung GPU.
#pragma once

#ifndef FC_PORTABLE_DEBUG_TIMEOUT_CYCLES
#define FC_PORTABLE_DEBUG_TIMEOUT_CYCLES (1ll << 33)  // ~4-5 s at 1.4-1.9 GHz
#endif

// ---- named barriers ------------------------------------------------------------------------

__device__ __forceinline__ void pl_named_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void pl_named_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---- mbarriers (sm_80 forms) -----------------------------------------------------------------

__device__ __forceinline__ void pl_mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// One ordinary arrival (release semantics).
__device__ __forceinline__ void pl_mbar_arrive(unsigned bar) {
    unsigned long long state;
    asm volatile("mbarrier.arrive.shared.b64 %0, [%1];\n" : "=l"(state) : "r"(bar) : "memory");
    (void)state;
}

// One arrival, performed once every cp.async this thread issued so far has landed.
__device__ __forceinline__ void pl_cp_async_arrive_noinc(unsigned bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Non-blocking probe: has the phase with parity `parity` completed?
__device__ __forceinline__ bool pl_mbar_test(unsigned bar, unsigned parity) {
    unsigned ok;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}\n"
        : "=r"(ok)
        : "r"(bar), "r"(parity)
        : "memory");
#else
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.test_wait.parity.shared.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}\n"
        : "=r"(ok)
        : "r"(bar), "r"(parity)
        : "memory");
#endif
    return ok != 0;
}

// Blocks until the phase with parity `parity` has completed. `tag`, `a` and `b` only appear in
// the debug report (which barrier, and e.g. stage and use counter).
__device__ __forceinline__ void pl_mbar_wait(unsigned bar, unsigned parity, int tag, int a, int b) {
#if defined(FC_PORTABLE_DEBUG)
    if (pl_mbar_test(bar, parity)) return;
    const long long start = clock64();
    while (!pl_mbar_test(bar, parity)) {
        if (clock64() - start > (long long)FC_PORTABLE_DEBUG_TIMEOUT_CYCLES) {
            printf("flashcore persistent-portable: mbarrier wait timed out: block %d thread %d tag %d "
                   "(%d, %d) bar 0x%x parity %u\n",
                   (int)blockIdx.x, (int)threadIdx.x, tag, a, b, bar, parity);
            __trap();
        }
    }
#else
    (void)tag;
    (void)a;
    (void)b;
    while (!pl_mbar_test(bar, parity)) {
    }
#endif
}

// Waits for every cp.async this thread has issued (commits the open group first).
__device__ __forceinline__ void pl_cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
