// D_i = rowsum(dO_i ∘ O_i), the backward's first launch, several rows a warp: a row is read in
// 16-byte chunks, one a lane, by `lanes` lanes (head_dim / 8 rounded up to a power of two, at least
// 4; above head_dim 128 the whole warp), so each lane has a 16-byte load of O and of dO in flight
// instead of a 4-byte one (one row a warp left the pass latency-bound: 98c71b5). O and dO rows are
// 16-byte aligned (the capabilities' 8-element alignment). Host side: `dot_rows_per_warp` in
// crates/gen5-persistent/src/backward.rs.
#pragma once
#include "types.cuh"

template <int kHeadDim>
struct RowDot {
    static_assert(kHeadDim % 8 == 0 && kHeadDim <= 256, "one 16-byte chunk a lane, a row at most a warp");
    // (An enum: static constexpr members were emitted as PTX globals.)
    enum : int {
        chunks = kHeadDim / 8,
        lanes = chunks <= 4 ? 4 : chunks <= 8 ? 8 : chunks <= 16 ? 16 : 32,
        rows_per_warp = 32 / lanes,
    };

    // This lane's share of one row's dot product: 16-byte chunk `chunk` of it (< chunks).
    __device__ static __forceinline__ float partial(const elem_t* o_row, const elem_t* do_row, int chunk) {
        const uint4 a = *reinterpret_cast<const uint4*>(o_row + 8 * chunk);
        const uint4 b = *reinterpret_cast<const uint4*>(do_row + 8 * chunk);
        const elem2_t* a2 = reinterpret_cast<const elem2_t*>(&a);
        const elem2_t* b2 = reinterpret_cast<const elem2_t*>(&b);
        float acc = 0.f;
#pragma unroll
        for (int e = 0; e < 4; ++e) acc += to_float(a2[e].x) * to_float(b2[e].x) + to_float(a2[e].y) * to_float(b2[e].y);
        return acc;
    }

    // The sum over a row's `lanes` lanes, in each of them.
    __device__ static __forceinline__ float reduce(float acc) {
#pragma unroll
        for (int m = lanes / 2; m > 0; m /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, m);
        return acc;
    }
};
