// Defined result when there is no key at all (seq_k == 0, or empty K/V storage), the same for
// every generation: O = 0 and LSE = +inf, as FlashAttention does. The core launches this instead
// of a generation. Rows past a sequence's len_q (varlen: seq_q is the longest) are not written.
#include "common/types.cuh"
#include "common/seqlen.cuh"

extern "C" __global__ void fill_no_keys(const __grid_constant__ AttentionParams p) {
    const long long rows = (long long)p.batch * p.heads_q * p.seq_q;
    elem_t* o = static_cast<elem_t*>(p.o);
    for (long long r = (long long)blockIdx.x * blockDim.y + threadIdx.y; r < rows;
         r += (long long)gridDim.x * blockDim.y) {
        const int row = (int)(r % p.seq_q);
        const int head = (int)((r / p.seq_q) % p.heads_q);
        const int batch = (int)(r / ((long long)p.seq_q * p.heads_q));
        const SeqInfo seq = seq_info(p, batch);
        if (row >= seq.len_q) continue;
        const long long base = seq_o_offset(p, seq, batch, head, row);
        for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x) o[base + d] = from_float(0.0f);
        if (threadIdx.x == 0) p.lse[seq_lse_offset(p, seq, batch, head, row)] = __int_as_float(0x7f800000);
    }
}
