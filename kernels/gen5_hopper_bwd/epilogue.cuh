// Generation 5 (Hopper) backward: a consumer warpgroup's dK and dV rows out of the accumulators
// (keys key0 + {0, 8} of this thread, head-dim columns 8 j + d_col + {0, 1}); keys past seq_k are
// not written.
#pragma once

namespace fhb {

__device__ __forceinline__ void store_key_rows(elem_t* base, long long row_stride, const float (&acc)[D / 2], int key0,
                                               int seq_k, float scale, int d_col) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int key = key0 + 8 * r;
        if (key < seq_k) {
            elem_t* row = base + (long long)key * row_stride;
#pragma unroll
            for (int j = 0; j < D / 8; ++j)
                *reinterpret_cast<elem2_t*>(row + 8 * j + d_col) = pack2(acc[4 * j + 2 * r] * scale, acc[4 * j + 2 * r + 1] * scale);
        }
    }
}

}  // namespace fhb
