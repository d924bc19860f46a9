// TMA (cp.async.bulk.tensor) helpers for the Hopper kernels.
// The host encodes the maps (cuTensorMapEncodeTiled, see flashcore_core::plan::TensorMapSpec) and
// passes them as `const __grid_constant__ CUtensorMap` kernel parameters; the kernel takes their
// (generic) address.
#pragma once

#if !defined(CUDA_VERSION) && !defined(__CUDA_H__) && !defined(FC_HAVE_CUTENSORMAP)
#define FC_HAVE_CUTENSORMAP 1
// Layout-compatible stand-in for the driver's opaque 128-byte, 64-byte-aligned map.
struct alignas(64) CUtensorMap {
    unsigned long long opaque[16];
};
#endif

// Warms the descriptor cache; any thread may issue it (we use the producer thread).
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}

// L2 prefetch of one 4-D box (coordinates as tma_load_4d's): a hint that changes no memory, so a
// kernel may issue it before griddepcontrol.wait, while the kernel it waits for still runs.
__device__ __forceinline__ void tma_prefetch_l2_4d(const CUtensorMap* map, int c0, int c1, int c2, int c3) {
    asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];" ::"l"(
                     reinterpret_cast<unsigned long long>(map)),
                 "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}

// 4-D tiled load of one box into shared memory at `dst` (1024-byte aligned for 128B swizzle),
// completing `box bytes` transaction bytes on mbarrier `bar`. Coordinates innermost first:
// (column, row, head, batch). Out-of-range rows are zero-filled and still count as bytes.
__device__ __forceinline__ void tma_load_4d(unsigned dst, const CUtensorMap* map, unsigned bar, int c0, int c1,
                                            int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}

// 1-D bulk copy of `bytes` (a multiple of 16; 16-byte aligned ends) from global memory into
// shared memory at `dst`, completing `bytes` transaction bytes on mbarrier `bar`. No tensor map:
// any address the caller computes (a paged row, a packed sequence's row).
__device__ __forceinline__ void bulk_load(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(reinterpret_cast<unsigned long long>(src)), "r"(bytes), "r"(bar)
                 : "memory");
}
