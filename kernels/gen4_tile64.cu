// Generation 4: 64 x 64 tiles, 4 warps, cp.async double-buffered K/V, ldmatrix fragments.
//
// One block = 4 warps = one 64-row query tile of one (batch, head); each warp owns 16 query rows
// and keeps, for the whole pass over K/V, its Q fragments (D <= 128), its 16 x D O accumulator
// and its softmax row state in registers. Per 64-key tile n, with the two K and two V buffers
// alternating (buf = n % 2):
//
//   issue cp.async K(n+1) -> K[buf^1]          streams in during everything below
//   S = Q·K(n)ᵀ                                ldmatrix (K[buf]) + mma.sync, f32
//   scale, mask (only tail / diagonal tiles), online softmax, rescale O
//   wait V(n); __syncthreads
//   issue cp.async V(n+1) -> V[buf^1]          streams in during P·V and the next Q·Kᵀ + softmax
//   O += P·V(n)                                P from the S registers, ldmatrix.trans (V[buf])
//   wait K(n+1); __syncthreads
//
// so each tile's load has about one iteration of compute to hide behind, and the V(n) load
// overlaps Q·K(n)ᵀ and the softmax. Two barriers per iteration: the first makes V(n) visible and
// proves every warp has finished P·V(n-1) (V[buf^1] is free); the second makes K(n+1) visible and
// proves every warp has finished Q·K(n)ᵀ (K[buf] is free for K(n+2)).
//
// Causal: K/V tiles past the tile's last visible key are never loaded; tiles that cross the
// diagonal (or the seq_k tail) run the mask, all others skip it.
//
// Dynamic shared memory (bytes), T = 64 * FC_HEAD_DIM * 2 (one 64-row tile):
//   [0, T) K buffer 0 | [T, 2T) K buffer 1 | [2T, 3T) V buffer 0 | [3T, 4T) V buffer 1
//   D <= 128: Q is staged in V buffer 1 (read into registers before V(1) is issued)  -> 4T
//   D == 256: Q stays in shared memory for every Q·Kᵀ, in [4T, 5T)                 -> 5T
//   D = 32: 16384, 64: 32768, 96: 49152, 128: 65536, 256: 163840.
// Above 48 KB the host opts in with cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES).
#include "common/params.cuh"
#include "common/types.cuh"
#include "common/masking.cuh"
#include "common/tensor_index.cuh"
#include "common/smem_layout.cuh"
#include "common/mma.cuh"
#include "common/async_copy.cuh"
#include "common/online_softmax.cuh"
#include "common/work_item.cuh"

#ifndef FC_HEAD_DIM
#error "compile with -DFC_HEAD_DIM=<32|64|96|128|256>"
#endif

namespace tile64 {

constexpr int head_dim = FC_HEAD_DIM;
static_assert(head_dim == 32 || head_dim == 64 || head_dim == 96 || head_dim == 128 || head_dim == 256,
              "gen4 is built for head_dim 32, 64, 96, 128, 256");

constexpr int q_tile_rows = 64;
constexpr int kv_tile_rows = 64;
constexpr int num_warps = 4;
constexpr int num_threads = 32 * num_warps;
constexpr int warp_q_rows = q_tile_rows / num_warps;  // 16: one mma M extent per warp
static_assert(warp_q_rows == 16, "each warp owns exactly one m16 slice");

constexpr int key_tiles = kv_tile_rows / 8;  // n8 tiles of S per warp (32 f32 registers)
constexpr int out_tiles = head_dim / 8;      // n8 tiles of O per warp (head_dim / 2 f32 registers)

// Q fragments cost head_dim / 4 registers; at D = 256 that (64) plus O (128) and S (32) would
// not fit in 255, so Q is re-read from shared memory there.
constexpr bool q_in_registers = head_dim <= 128;

using Tile = SwizzledTile<head_dim>;
constexpr int tile_bytes = Tile::bytes(kv_tile_rows);
static_assert(Tile::bytes(q_tile_rows) == tile_bytes, "Q and K/V tiles share one size");

__device__ __forceinline__ unsigned k_buffer(int buf) { return buf * tile_bytes; }
__device__ __forceinline__ unsigned v_buffer(int buf) { return (2 + buf) * tile_bytes; }
constexpr int q_buffer = q_in_registers ? 3 * tile_bytes : 4 * tile_bytes;
// Keep in sync with crates/gen4-tile64 (dynamic_smem_bytes).
constexpr int smem_bytes = (q_in_registers ? 4 : 5) * tile_bytes;

}  // namespace tile64

// Blocks per SM the register allocation is sized for (__launch_bounds__ minBlocksPerSM): the
// largest count that still compiles without spills (ptxas, sm_80..sm_90a). D=128 at 3 blocks
// (168 registers) spills, so it gets 2 (8 warps per SM); D=256 needs every register.
// Overridable with -DFC_TILE64_MIN_BLOCKS=n for tuning runs.
#ifndef FC_TILE64_MIN_BLOCKS
#if FC_HEAD_DIM <= 32
#define FC_TILE64_MIN_BLOCKS 4
#elif FC_HEAD_DIM <= 96
#define FC_TILE64_MIN_BLOCKS 3
#elif FC_HEAD_DIM <= 128
#define FC_TILE64_MIN_BLOCKS 2
#else
#define FC_TILE64_MIN_BLOCKS 1
#endif
#endif

using namespace tile64;

extern "C" __global__ void __launch_bounds__(num_threads, FC_TILE64_MIN_BLOCKS) attention_tile64(const __grid_constant__ AttentionParams p) {
    extern __shared__ __align__(128) unsigned char smem[];
    const unsigned smem_base = shared_address(smem);
    const unsigned q_tile = smem_base + q_buffer;

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int group = lane / 4;  // this lane's rows: group and group + 8 of the warp's 16
    const int tig = lane % 4;    // this lane's columns: 2*tig, 2*tig+1 of every n8 tile
    const int warp_row0 = warp * warp_q_rows;

    if (p.seq_q <= 0) return;
    const int num_q_tiles = ceil_div(p.seq_q, q_tile_rows);
    const long long total_items = (long long)p.batch * p.heads_q * num_q_tiles;

    // Work item = (batch, head, q tile): see common/work_item.cuh for the order.
    for (long long item = blockIdx.x; item < total_items; item += gridDim.x) {
        const auto [b, h, h_kv, q0, q_rows, num_kv_tiles, first_row_key_end] =
            q_tile_item<q_tile_rows, kv_tile_rows>(p, item, num_q_tiles);
        const int row_lo = q0 + warp_row0 + group;
        const int key_end_lo = causal_key_end(p, row_lo);
        const int key_end_hi = causal_key_end(p, row_lo + 8);

        const elem_t* q_ptr = static_cast<const elem_t*>(p.q) + q_offset(p, b, h, q0);
        const elem_t* k_ptr = static_cast<const elem_t*>(p.k) + k_offset(p, b, h_kv, 0);
        const elem_t* v_ptr = static_cast<const elem_t*>(p.v) + v_offset(p, b, h_kv, 0);

        float o[out_tiles][4];
        zero_accumulator(o);
        SoftmaxRows st;
        softmax_init(st);

        if (num_kv_tiles > 0) {
            // Prologue: group 1 = Q + K(0), group 2 = V(0). The previous item ended on a barrier
            // after its last shared-memory read, so every buffer is free.
            load_tile_async<q_tile_rows, head_dim, num_threads>(q_tile, q_ptr, p.q_row_stride, q_rows, tid);
            load_tile_async<kv_tile_rows, head_dim, num_threads>(smem_base + k_buffer(0), k_ptr, p.k_row_stride,
                                                                 min(kv_tile_rows, p.seq_k), tid);
            cp_async_commit();
            load_tile_async<kv_tile_rows, head_dim, num_threads>(smem_base + v_buffer(0), v_ptr, p.v_row_stride,
                                                                 min(kv_tile_rows, p.seq_k), tid);
            cp_async_commit();
            cp_async_wait<1>();  // Q and K(0) have landed (V(0) may still be in flight)
            __syncthreads();

            FragA q_frag[head_dim / 16];
            if constexpr (q_in_registers) load_q_fragments<head_dim>(q_frag, q_tile, warp_row0, lane);

            for (int n = 0; n < num_kv_tiles; ++n) {
                const int buf = n & 1;
                const int k0 = n * kv_tile_rows;
                const bool has_next = n + 1 < num_kv_tiles;
                const int next_k0 = k0 + kv_tile_rows;  // only used when has_next (then < seq_k)

                // K(n+1) -> K[buf^1]: its previous reader, Q·K(n-1)ᵀ, finished before the
                // barrier that ended iteration n-1. An empty group keeps the wait counts uniform.
                if (has_next)
                    load_tile_async<kv_tile_rows, head_dim, num_threads>(
                        smem_base + k_buffer(buf ^ 1), k_ptr + (long long)next_k0 * p.k_row_stride, p.k_row_stride,
                        min(kv_tile_rows, p.seq_k - next_k0), tid);
                cp_async_commit();

                float s[key_tiles][4];
                if constexpr (q_in_registers)
                    warp_qk<head_dim, kv_tile_rows>(s, q_frag, smem_base + k_buffer(buf), lane);
                else
                    warp_qk_q_in_smem<head_dim, kv_tile_rows>(s, q_tile, warp_row0, smem_base + k_buffer(buf), lane);

                scale_scores(s, p.scale_log2);
                if (first_row_key_end - k0 < kv_tile_rows)  // tail of seq_k, or the causal diagonal
                    mask_scores(s, 2 * tig, key_end_lo - k0, key_end_hi - k0);
                online_softmax_update(s, o, st);

                cp_async_wait<1>();  // V(n) has landed (K(n+1) may still be in flight)
                // V(n) is visible to every warp; every warp is past P·V(n-1), so V[buf^1] is free,
                // and past its Q fragment load (Q is staged in V buffer 1).
                __syncthreads();
                if (has_next)
                    load_tile_async<kv_tile_rows, head_dim, num_threads>(
                        smem_base + v_buffer(buf ^ 1), v_ptr + (long long)next_k0 * p.v_row_stride, p.v_row_stride,
                        min(kv_tile_rows, p.seq_k - next_k0), tid);
                cp_async_commit();

                warp_pv<head_dim, kv_tile_rows>(o, s, smem_base + v_buffer(buf), lane);

                cp_async_wait<1>();  // K(n+1) has landed (V(n+1) may still be in flight)
                // K(n+1) is visible; every warp is past Q·K(n)ᵀ (K[buf] is free for K(n+2)) and,
                // after the last tile, past every shared-memory read of this item.
                __syncthreads();
            }
        }

        float lse[2];
        softmax_finalize(o, st, lse);

        // Straight from registers: each quad writes 8 contiguous elements (16 bytes) of a row per
        // n8 tile. Rows past seq_q are never written.
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = row_lo + 8 * r;
            if (row < p.seq_q) {
                const float undefined = undefined_row_factor(p, row, lse[r]);  // all scores -inf: NaN
                elem_t* o_row = static_cast<elem_t*>(p.o) + o_offset(p, b, h, row);
#pragma unroll
                for (int j = 0; j < out_tiles; ++j)
                    *reinterpret_cast<elem2_t*>(o_row + 8 * j + 2 * tig) = pack2(o[j][2 * r] * undefined, o[j][2 * r + 1] * undefined);
                if (tig == 0 && p.lse != nullptr) p.lse[lse_offset(p, b, h, row)] = lse[r] * undefined;
            }
        }
    }
}
