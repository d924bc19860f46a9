// Appending new K/V rows into a cache before attending (flash_attn_with_kvcache's k/v): row t
// of sequence b's k_new / v_new ([batch, seqlen_new, heads_kv, head_dim], dense) is written at
// cache row seqused_k[b] + t, through the block table when the cache is paged. The core launches
// this ahead of any generation's kernel on the same stream, so the attention launch that follows
// sees the rows (docs/MODES.md). One thread copies one element pair-free: this is bandwidth on a
// few rows per sequence, not worth vector code.
#include "common/types.cuh"
#include "common/seqlen.cuh"
#include "common/kv_rows.cuh"

extern "C" __global__ void append_kv(const __grid_constant__ AttentionParams p, const elem_t* __restrict__ k_new,
                                     const elem_t* __restrict__ v_new) {
    elem_t* k = static_cast<elem_t*>(const_cast<void*>(p.k));
    elem_t* v = static_cast<elem_t*>(const_cast<void*>(p.v));
    const long long row_elems = (long long)p.heads_kv * p.head_dim;
    const long long total = (long long)p.batch * p.seqlen_new * row_elems;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const int d = (int)(i % p.head_dim);
        const int h = (int)((i / p.head_dim) % p.heads_kv);
        const long long bt = i / row_elems;
        const int t = (int)(bt % p.seqlen_new);
        const int b = (int)(bt / p.seqlen_new);
        // The cache rows before the append: seqused_k[b] (SeqInfo would add seqlen_new).
        SeqInfo s;
        s.k_row0 = 0;
        const int j = p.seqused_k[b] + t;
        k[k_row_offset(p, s, b, h, j) + d] = k_new[i];
        v[v_row_offset(p, s, b, h, j) + d] = v_new[i];
    }
}
