// The decode suite's read probe: a kernel that only reads N bytes, timed beside the
// device-to-device copy of the same N bytes, so that a decode row's GB/s can be read against what
// a pure read stream reaches on that machine (the copy also writes N, which a decode call never
// does). Every thread keeps READ_PROBE_UNROLL (the bench passes it) independent 16-byte loads in
// flight, each unrolled load a coalesced grid-wide sweep, and XORs them together; the store is
// data-dependent so that the loads are not dead code, and on the random bytes the bench fills it
// practically never happens. The parameter block is unused: every kernel file carries it.
#include "common/params.cuh"

#ifndef READ_PROBE_UNROLL
#define READ_PROBE_UNROLL 8
#endif

extern "C" __global__ void __launch_bounds__(512)
    read_probe(const uint4* __restrict__ src, unsigned long long n16, unsigned* out) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned acc = 0;
    for (; i + (READ_PROBE_UNROLL - 1) * stride < n16; i += READ_PROBE_UNROLL * stride) {
        uint4 v[READ_PROBE_UNROLL];
        // All loads issued before any is used: READ_PROBE_UNROLL requests in flight per thread.
#pragma unroll
        for (int u = 0; u < READ_PROBE_UNROLL; ++u) v[u] = __ldg(src + i + u * stride);
#pragma unroll
        for (int u = 0; u < READ_PROBE_UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n16; i += stride) {
        const uint4 v = __ldg(src + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) out[blockIdx.x] = acc;
}
