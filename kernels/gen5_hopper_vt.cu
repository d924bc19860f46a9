// Generation 5 (Hopper), e4m3 forward: V's transposed copy, the launch before the attention kernel
// (FC_HOPPER_E4M3, config.cuh). fp8 wgmma takes K-major operands only, so P·V needs V with the keys
// contiguous: Vt[b][h_kv][c][key], bytes, in the plan's workspace at FC_VT_OFFSET, each row padded
// to a whole number of 128-key tiles with zeros (the kernel's V boxes never leave the copy, and a
// key past seq_k contributes 0 · 0). Within every 16 keys the order is the one the kernel's P
// fragment has (common/hopper/wgmma_e4m3.cuh): position 4q + i holds key i < 2 ? 2q + i : 6 + 2q + i.
// FlashAttention 3 transposes V in shared memory inside its mainloop instead; here one pass over V
// (its bytes read and written once) keeps the kernel's producer a single TMA thread.
//
// Grid (keys padded / 64, heads_kv, batch), 256 threads: a 64-key × head_dim tile through shared
// memory, read in V's rows (16 bytes a thread) and written in Vt's (16 keys a thread).
// Defines: FC_HEAD_DIM (V's head dim, a multiple of 16 up to 256), FC_VT_OFFSET (bytes).
#include "common/params.cuh"

#ifndef FC_HEAD_DIM
#error "compile with -DFC_HEAD_DIM"
#endif
#ifndef FC_VT_OFFSET
#error "compile with -DFC_VT_OFFSET (the copy's byte offset in the workspace)"
#endif

namespace fch_vt {
enum : int {
    D = FC_HEAD_DIM,
    TILE_KEYS = 64,
    THREADS = 256,
    KEY_PAD = 128,  // the attention kernel's key tile: Vt rows are whole tiles
    ROW_CHUNKS = D / 16,
};
static_assert(D % 16 == 0 && D <= 256, "V's head dim: a multiple of 16 up to 256");

// Key of position `pos` (0..15) in a group of 16: the P fragment's order.
__device__ __forceinline__ int key_at(int pos) {
    const int q = pos >> 2, i = pos & 3;
    return i < 2 ? 2 * q + i : 6 + 2 * q + i;
}
}  // namespace fch_vt

extern "C" __global__ void __launch_bounds__(fch_vt::THREADS) transpose_v_e4m3(const __grid_constant__ AttentionParams p) {
    using namespace fch_vt;
    __shared__ __align__(16) unsigned char tile[TILE_KEYS][D + 16];  // (+16: spreads a column's banks)
    const int key0 = blockIdx.x * TILE_KEYS;
    const int h_kv = blockIdx.y;
    const int b = blockIdx.z;
    const long long keys_padded = (long long)(p.seq_k + KEY_PAD - 1) / KEY_PAD * KEY_PAD;
    const unsigned char* v = static_cast<const unsigned char*>(p.v) + b * p.v_batch_stride + h_kv * p.v_head_stride;
    for (int i = threadIdx.x; i < TILE_KEYS * ROW_CHUNKS; i += THREADS) {
        const int r = i / ROW_CHUNKS, c = i % ROW_CHUNKS;
        const int key = key0 + r;
        uint4 x = make_uint4(0u, 0u, 0u, 0u);
        if (key < p.seq_k) x = *reinterpret_cast<const uint4*>(v + key * p.v_row_stride + 16 * c);
        *reinterpret_cast<uint4*>(&tile[r][16 * c]) = x;
    }
    __syncthreads();
    unsigned char* out = reinterpret_cast<unsigned char*>(p.workspace) + FC_VT_OFFSET +
                         ((long long)b * p.heads_kv + h_kv) * D * keys_padded + key0;
    // Thread i writes 16 keys (group g) of column c; a quad of threads covers a column's 64 keys.
    for (int i = threadIdx.x; i < D * (TILE_KEYS / 16); i += THREADS) {
        const int c = i / (TILE_KEYS / 16), g = i % (TILE_KEYS / 16);
        unsigned w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            unsigned word = 0;
#pragma unroll
            for (int j = 0; j < 4; ++j) word |= (unsigned)tile[16 * g + key_at(4 * k + j)][c] << (8 * j);
            w[k] = word;
        }
        *reinterpret_cast<uint4*>(out + c * keys_padded + 16 * g) = make_uint4(w[0], w[1], w[2], w[3]);
    }
}
