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

// The same append into an e4m3 cache (Modes::kv_fp8): each stored byte is the new value divided
// by the descale of its (sequence, KV head), rounded to nearest (f32, then e4m3 with ties to
// even, saturating at +-448), so that decode(byte) * descale gives it back as closely as e4m3
// can. One thread writes one pair of adjacent columns (cvt's e4m3x2 packs two), as one 16-bit
// store: head_dim is even and e4m3 rows start on 16 bytes. The cvt exists from sm_89; the core
// refuses an e4m3 append below that, so older builds leave the kernel out.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
__device__ __forceinline__ unsigned short e4m3x2(float lo, float hi) {
    unsigned short r;
    // The first source goes to the upper byte, the second to the lower (little-endian: column d).
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

extern "C" __global__ void append_kv_e4m3(const __grid_constant__ AttentionParams p,
                                          const elem_t* __restrict__ k_new, const elem_t* __restrict__ v_new) {
    unsigned char* k = static_cast<unsigned char*>(const_cast<void*>(p.k));
    unsigned char* v = static_cast<unsigned char*>(const_cast<void*>(p.v));
    const int pairs = p.head_dim / 2;
    const long long row_pairs = (long long)p.heads_kv * pairs;
    const long long total = (long long)p.batch * p.seqlen_new * row_pairs;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const int d = 2 * (int)(i % pairs);
        const int h = (int)((i / pairs) % p.heads_kv);
        const long long bt = i / row_pairs;
        const int t = (int)(bt % p.seqlen_new);
        const int b = (int)(bt / p.seqlen_new);
        SeqInfo s;
        s.k_row0 = 0;
        const int j = p.seqused_k[b] + t;
        const long long scale_at = (long long)b * p.descale_batch_stride + (long long)h * p.descale_head_stride;
        const float ks = p.k_descale[scale_at];
        const float vs = p.v_descale[scale_at];
        // k_new / v_new are dense: element pair i starts at 2i.
        const long long src = 2 * i;
        *reinterpret_cast<unsigned short*>(k + k_row_offset(p, s, b, h, j) + d) =
            e4m3x2(__fdiv_rn(to_float(k_new[src]), ks), __fdiv_rn(to_float(k_new[src + 1]), ks));
        *reinterpret_cast<unsigned short*>(v + v_row_offset(p, s, b, h, j) + d) =
            e4m3x2(__fdiv_rn(to_float(v_new[src]), vs), __fdiv_rn(to_float(v_new[src + 1]), vs));
    }
}
#endif
