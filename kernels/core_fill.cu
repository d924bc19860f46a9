// Defined result for seq_k == 0 (no key at all), the same for every generation:
// O = 0 and LSE = +inf, as FlashAttention does. The core launches this instead of a generation.
#include "common/types.cuh"
#include "common/tensor_index.cuh"

extern "C" __global__ void fill_no_keys(const __grid_constant__ AttentionParams p) {
    const long long rows = (long long)p.batch * p.heads_q * p.seq_q;
    elem_t* o = static_cast<elem_t*>(p.o);
    for (long long r = (long long)blockIdx.x * blockDim.y + threadIdx.y; r < rows;
         r += (long long)gridDim.x * blockDim.y) {
        const int row = (int)(r % p.seq_q);
        const int head = (int)((r / p.seq_q) % p.heads_q);
        const int batch = (int)(r / ((long long)p.seq_q * p.heads_q));
        const long long base = o_offset(p, batch, head, row);
        for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x) o[base + d] = from_float(0.0f);
        if (threadIdx.x == 0) p.lse[lse_offset(p, batch, head, row)] = __int_as_float(0x7f800000);
    }
}
