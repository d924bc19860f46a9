// Named (hardware) barriers for the Hopper kernels: `bar.sync` / `bar.arrive` with an id and a
// thread count (PTX ISA: barrier{.cta}). Id 0 is __syncthreads(); the Hopper kernel uses
//   1, 2  ping-pong scheduler barriers of consumer warpgroups 1 and 2 (256 threads each use),
//   3, 4  warpgroup-local barriers of consumer warpgroups 1 and 2 (128 threads, smem epilogue),
//   5     both consumer warpgroups, key-split exchange (256 threads, FC_HOPPER_WG_KEY_SPLIT).
// A barrier completes once `count` threads have arrived (arrive or sync), counted per warp; all
// threads of a warp must execute the same instruction (they do: every call site is warp-uniform).
#pragma once

__device__ __forceinline__ void named_bar_sync(unsigned id, unsigned count) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(count) : "memory");
}

__device__ __forceinline__ void named_bar_arrive(unsigned id, unsigned count) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(count) : "memory");
}

// Orders this thread's generic-proxy shared-memory accesses before later async-proxy (TMA, wgmma)
// accesses to the same bytes (needed before handing a buffer we wrote or read back to TMA).
__device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
