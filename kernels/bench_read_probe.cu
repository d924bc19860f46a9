// The decode suite's read probes: kernels that only read N bytes, timed beside the
// device-to-device copy of the same N bytes, so that a decode row's GB/s can be read against what
// a pure read stream reaches on that machine (the copy also writes N, which a decode call never
// does). Two designs, the faster at each size counting: `read_probe` through the load units and
// `read_probe_bulk` through the copy engine (TMA).
//
// read_probe: every thread keeps READ_PROBE_UNROLL (the bench passes it) independent 16-byte loads in
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

// read_probe_bulk: the same read through the copy engine of each SM (TMA, cp.async.bulk, sm_90):
// one thread a block streams READ_PROBE_CHUNK-byte pieces into a READ_PROBE_STAGES-deep
// shared-memory ring, each piece completing on its stage's mbarrier, chunk c to block c % grid.
// 32 KiB pieces, 4 stages and one block an SM read 1.5-2 % faster than read_probe at 128 MiB to
// 1 GiB (2026-11-27, cc26e55); 8 KiB pieces read no faster than it.
#include "common/hopper/mbarrier.cuh"
#include "common/hopper/tma.cuh"

// The host passes both (bandwidth.rs); these defaults are its BULK_DEFAULT.
#ifndef READ_PROBE_CHUNK
#define READ_PROBE_CHUNK 32768
#endif
#ifndef READ_PROBE_STAGES
#define READ_PROBE_STAGES 4
#endif

extern "C" __global__ void __launch_bounds__(32)
    read_probe_bulk(const unsigned char* __restrict__ src, unsigned long long n16, unsigned* out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) unsigned char ring[];
    __shared__ __align__(8) unsigned long long bars[READ_PROBE_STAGES];
    const unsigned long long bytes = n16 * 16;
    const unsigned long long chunks = (bytes + READ_PROBE_CHUNK - 1) / READ_PROBE_CHUNK;
    const unsigned ring_base = smem_u32(ring);
    auto chunk_of = [&](unsigned long long k) { return blockIdx.x + k * gridDim.x; };
    auto issue = [&](int stage, unsigned long long c) {
        const unsigned long long at = c * READ_PROBE_CHUNK;
        const unsigned n = (unsigned)min((unsigned long long)READ_PROBE_CHUNK, bytes - at);
        const unsigned bar = smem_u32(&bars[stage]);
        mbar_arrive_expect_tx(bar, n);
        bulk_load(ring_base + stage * READ_PROBE_CHUNK, src + at, n, bar);
    };
    if (threadIdx.x == 0) {
        for (int s = 0; s < READ_PROBE_STAGES; ++s) mbar_init(smem_u32(&bars[s]), 1);
        mbar_fence_init();
        for (int s = 0; s < READ_PROBE_STAGES && chunk_of(s) < chunks; ++s) issue(s, chunk_of(s));
        for (unsigned long long k = 0; chunk_of(k) < chunks; ++k) {
            const int stage = (int)(k % READ_PROBE_STAGES);
            mbar_wait(smem_u32(&bars[stage]), (unsigned)((k / READ_PROBE_STAGES) & 1));
            if (chunk_of(k + READ_PROBE_STAGES) < chunks) issue(stage, chunk_of(k + READ_PROBE_STAGES));
        }
    }
    __syncthreads();
    // A use of the bytes, as read_probe's XOR (the copies need none to happen).
    if (chunks > blockIdx.x) {
        const unsigned v = reinterpret_cast<const unsigned*>(ring)[threadIdx.x];
        if (v == 0x9e3779b9u) out[blockIdx.x] = v;
    }
#else
    __trap();  // the bench times it on sm_90 and later only; the module must still build below
#endif
}
