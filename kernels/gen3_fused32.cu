// Generation 3: fused attention on tensor cores, 32 x 32 tiles.
//
// One block = 2 warps = one 32-row query tile of one (batch, head). Each warp owns 16 query rows
// and walks every visible 32-key K/V tile once:
//
//   S = Q·Kᵀ      mma.sync m16n8k16, f32 accumulators (16 x 32 per warp)
//   online softmax on the S registers (scale, mask, running max/sum, rescale O)
//   O += P·V      P converted to elem_t in registers, V via ldmatrix.trans
//
// and ends with O /= l, LSE = ln(sum). No atomics, one pass over K/V, nothing but registers
// between the two products. Loads are 16-byte cp.async copies issued and then waited for at once,
// with no overlap (the pipelined version is gen4): cp.async rather than ld.global + st.shared
// because staging a D=256 tile through registers next to the 128-register O accumulator spills.
// The tiles are XOR-swizzled (smem_layout.cuh) so the ldmatrix fragment loads are
// bank-conflict free, and so three D=256 tiles fit exactly in the 48 KB static limit.
//
// Shared memory (static): Q, K, V tiles of 32 rows x FC_HEAD_DIM elem_t = 3 * 32 * D * 2 bytes
//   D = 32: 6 KB, 64: 12 KB, 96: 18 KB, 128: 24 KB, 256: 48 KB (49152 B, the static maximum).
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

namespace fused32 {

constexpr int head_dim = FC_HEAD_DIM;
static_assert(head_dim == 32 || head_dim == 64 || head_dim == 96 || head_dim == 128 || head_dim == 256,
              "gen3 is built for head_dim 32, 64, 96, 128, 256");

constexpr int q_tile_rows = 32;
constexpr int kv_tile_rows = 32;
constexpr int num_warps = 2;
constexpr int num_threads = 32 * num_warps;
constexpr int warp_q_rows = q_tile_rows / num_warps;  // 16: one mma M extent per warp
static_assert(warp_q_rows == 16, "each warp owns exactly one m16 slice");

constexpr int key_tiles = kv_tile_rows / 8;  // n8 tiles of S per warp
constexpr int out_tiles = head_dim / 8;      // n8 tiles of O per warp

using Tile = SwizzledTile<head_dim>;
constexpr int tile_bytes = Tile::bytes(q_tile_rows);
static_assert(3 * tile_bytes <= 48 * 1024, "static shared memory is limited to 48 KB");

}  // namespace fused32

using namespace fused32;

extern "C" __global__ void __launch_bounds__(num_threads, 1) attention_fused32(const __grid_constant__ AttentionParams p) {
    __shared__ __align__(128) elem_t q_smem[q_tile_rows * head_dim];
    __shared__ __align__(128) elem_t k_smem[kv_tile_rows * head_dim];
    __shared__ __align__(128) elem_t v_smem[kv_tile_rows * head_dim];
    const unsigned q_tile = shared_address(q_smem);
    const unsigned k_tile = shared_address(k_smem);
    const unsigned v_tile = shared_address(v_smem);

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

        for (int n = 0; n < num_kv_tiles; ++n) {
            const int k0 = n * kv_tile_rows;
            const int kv_rows = min(kv_tile_rows, p.seq_k - k0);
            // Both warps are done with the previous K/V tile (or, for n == 0, with the previous
            // item's Q/K/V tiles).
            __syncthreads();
            // Q rides in the first tile's copy group (so it is only loaded when a key is visible:
            // no copy is ever left uncommitted).
            if (n == 0) load_tile_async<q_tile_rows, head_dim, num_threads>(q_tile, q_ptr, p.q_row_stride, q_rows, tid);
            load_tile_async<kv_tile_rows, head_dim, num_threads>(k_tile, k_ptr + (long long)k0 * p.k_row_stride,
                                                                 p.k_row_stride, kv_rows, tid);
            load_tile_async<kv_tile_rows, head_dim, num_threads>(v_tile, v_ptr + (long long)k0 * p.v_row_stride,
                                                                 p.v_row_stride, kv_rows, tid);
            cp_async_commit();
            cp_async_wait<0>();  // no pipelining: this thread's copies (and Q's) have landed
            __syncthreads();     // ... and everybody's: Q and this K/V tile are visible to both warps

            float s[key_tiles][4];
            warp_qk_q_in_smem<head_dim, kv_tile_rows>(s, q_tile, warp_row0, k_tile, lane);
            scale_scores(s, p.scale_log2);
            if (first_row_key_end - k0 < kv_tile_rows)  // tail of seq_k, or the causal diagonal
                mask_scores(s, 2 * tig, key_end_lo - k0, key_end_hi - k0);
            online_softmax_update(s, o, st);
            warp_pv<head_dim, kv_tile_rows>(o, s, v_tile, lane);
        }

        float lse[2];
        softmax_finalize(o, st, lse);

        // Each quad writes 8 contiguous elements (16 bytes) of a row per n8 tile; rows past
        // seq_q are never written.
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
