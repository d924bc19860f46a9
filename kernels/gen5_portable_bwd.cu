// Generation 5, portable path: the backward pass on mma.sync (sm_80+), deterministic.
//
// Three launches on one stream (docs/generations/gen5-portable-bwd.md):
//   1. bwd_portable_dot_do_o: D_i = rowsum(dO_i ∘ O_i) (f32), or in a modes build rowsum(P_i ∘ dP_i)
//      for a row that sees at most 32 keys (common/short_row_delta.cuh), several rows a warp, into the
//      plan's workspace, written whole before it is read (nothing to clear).
//   2. bwd_portable_dk_dv: one block per (key tile of 64 keys, batch, KV head); each of the 4 warps
//      owns 16 keys and keeps their dK and dV rows in f32 registers while the block streams the
//      query tiles (of every query head of the KV group) that see them:
//        Sᵀ = K·Qᵀ, Pᵀ = exp(scale·Sᵀ − LSE), dPᵀ = V·dOᵀ, dSᵀ = Pᵀ ∘ (dPᵀ − D),
//        dV += Pᵀ·dO, dK += dSᵀ·Q      (dK scaled once at the end).
//      Keys sit on the MMA's row side, so P and dS come out transposed for free and feed the next
//      products straight from the accumulator registers (mma.cuh's p_fragment), as in the forward.
//      Built up to head_dim 128 (above it a warp's dK and dV would take 2·head_dim registers; the
//      wide kernels take those dims).
//   3. bwd_portable_dq: one block per (query tile of 64 rows, batch, head); each warp owns 16 rows
//      and walks the key tiles they see (64 keys a tile, 32 above head_dim 128, where dQ takes
//      head_dim / 2 registers): S = Q·Kᵀ, P, dP = dO·Vᵀ, dS, dQ += dS·K.
// dQ is recomputed in its own kernel instead of accumulated with atomics from launch 2 (FA2's
// way): 7 products per (query, key) tile pair instead of 5, but every output element is summed
// by one warp in a fixed order, so repeated runs are bit-identical with no ordering machinery.
//
// FC_BWD_ATOMIC_DQ builds launch 1 for FA2's schedule instead (the `persistent-portable-atomic`
// backward, whose dK/dV pass and convert kernel are gen5_portable_bwd_wide.cu's): it also zeroes
// the f32 dQ accumulator (common/dq_accumulator.cuh).
//
// Tiles live in shared memory in SwizzledTile layout, filled with cp.async and double-buffered:
// the next query tile (launch 2) or key tile (launch 3) streams in while the current one is
// multiplied. Rows past a sequence's end are zero-filled (never read); their probabilities are
// forced to 0 through LSE = +inf (query tails) or the element mask (key tails), so neither a tail
// nor the NaN padding past it reaches a gradient.
//
// FC_BWD_PADDED_HEAD (0|1): p.head_dim is below the build's FC_HEAD_DIM and padded up to it
// (common/padded_head.cuh): the loads zero-fill the columns from p.head_dim on, rowsum(dO ∘ O)
// reads only the problem's, and dQ, dK, dV are stored only there.
//
// FC_BWD_MODES (0|1): sliding windows, softcap and ALiBi (common/backward_scores.cuh). A key tile
// walks the query tiles that see it and a query tile the key tiles it sees (walked_query_tiles,
// walked_keys); each step takes both its products first, then P and dS together from the
// forward's logit (softcap's 1 − tanh² needs the raw score where dS is formed), the element mask
// on the tile pairs a window's edge or a tail crosses.
//
// FC_BWD_VARLEN (0|1, a modes build): packed sequences with cu_seqlens (common/backward_scores.cuh):
// each item's sequence has its own lengths and first storage rows, and a tile past its end exits.
#include "common/params.cuh"
#include "common/types.cuh"
#include "common/tensor_index.cuh"
#include "common/masking.cuh"
#include "common/smem_layout.cuh"
#include "common/mma.cuh"
#include "common/async_copy.cuh"
#include "common/backward_params.cuh"
#include "common/work_item.cuh"
#include "common/row_dot.cuh"
#include "common/short_row_delta.cuh"
#include "common/padded_head.cuh"
#include "common/backward_scores.cuh"
#if defined(FC_BWD_ATOMIC_DQ)
#include "common/dq_accumulator.cuh"
#endif

#ifndef FC_HEAD_DIM
#error "compile with -DFC_HEAD_DIM=<a multiple of 32 up to 256>"
#endif
#ifndef FC_BWD_PADDED_HEAD
#define FC_BWD_PADDED_HEAD 0
#endif

#define FC_LOG2E 1.4426950408889634f

namespace portable_bwd {

constexpr int head_dim = FC_HEAD_DIM;
static_assert(head_dim % 32 == 0 && head_dim >= 32 && head_dim <= 256,
              "the portable backward is built for head_dim 32, 64, .., 256");
enum : bool { PADDED_HEAD = FC_BWD_PADDED_HEAD != 0 };  // (an enum: a constexpr bool became a PTX global)

constexpr int num_warps = 4;
constexpr int num_threads = 32 * num_warps;
constexpr int warp_rows = 16;  // one m16 slice per warp: 16 keys (dK/dV) or 16 queries (dQ)
constexpr int out_tiles = head_dim / 8;

#if FC_HEAD_DIM <= 128
// Launch 2: 64 keys per block; query tiles of 64 rows, 32 above D = 64 (the dK and dV
// accumulators take head_dim f32 registers per lane already; Sᵀ and dPᵀ then take 16 each).
constexpr int dkdv_key_rows = num_warps * warp_rows;
constexpr int dkdv_query_rows = head_dim <= 64 ? 64 : 32;
#endif
// Launch 3: 64 queries per block; 64-key tiles, 32 above head_dim 128 (dQ takes head_dim / 2
// registers a lane there, and a 32-key tile halves S's and dS's beside it and the K/V buffers).
constexpr int dq_query_rows = num_warps * warp_rows;
constexpr int dq_key_rows = head_dim <= 128 ? 64 : 32;

using Tile = SwizzledTile<head_dim>;

#if FC_HEAD_DIM <= 128

// Launch 2's shared memory: K | V | 2 x (Q | dO) | 2 x (LSE·log2e | D). Keep in sync with
// crates/gen5-persistent/src/backward.rs.
constexpr int dkdv_kv_bytes = Tile::bytes(dkdv_key_rows);
constexpr int dkdv_q_bytes = Tile::bytes(dkdv_query_rows);
constexpr int dkdv_rowstat_bytes = dkdv_query_rows * 4;
constexpr int dkdv_k = 0;
constexpr int dkdv_v = dkdv_kv_bytes;
__device__ __forceinline__ int dkdv_q(int buf) { return 2 * dkdv_kv_bytes + buf * 2 * dkdv_q_bytes; }
__device__ __forceinline__ int dkdv_do(int buf) { return dkdv_q(buf) + dkdv_q_bytes; }
constexpr int dkdv_stats = 2 * dkdv_kv_bytes + 4 * dkdv_q_bytes;
__device__ __forceinline__ int dkdv_lse(int buf) { return dkdv_stats + buf * 2 * dkdv_rowstat_bytes; }
__device__ __forceinline__ int dkdv_dvec(int buf) { return dkdv_lse(buf) + dkdv_rowstat_bytes; }
constexpr int dkdv_smem_bytes = dkdv_stats + 4 * dkdv_rowstat_bytes;
#endif

// Launch 3's shared memory: Q | dO | 2 x (K | V).
constexpr int dq_q_bytes = Tile::bytes(dq_query_rows);
constexpr int dq_kv_bytes = Tile::bytes(dq_key_rows);
constexpr int dq_q = 0;
constexpr int dq_do = dq_q_bytes;
__device__ __forceinline__ int dq_k(int buf) { return 2 * dq_q_bytes + buf * 2 * dq_kv_bytes; }
__device__ __forceinline__ int dq_v(int buf) { return dq_k(buf) + dq_kv_bytes; }
constexpr int dq_smem_bytes = 2 * dq_q_bytes + 4 * dq_kv_bytes;

// Stores a warp's 16 x head_dim f32 accumulator rows (rows row0 + group, + 8) times `scale` into
// a row-major gradient tensor; rows at or past `valid_rows`, and a padded build's columns past
// `cols` (p.head_dim), are not written. Each quad writes 16 contiguous bytes per n8 tile.
__device__ __forceinline__ void store_warp_rows(elem_t* base, long long row_stride, const float (&acc)[out_tiles][4],
                                                int row0, int valid_rows, int cols, float scale, int lane) {
    const int group = lane / 4, tig = lane % 4;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int row = row0 + group + 8 * r;
        if (row < valid_rows) {
            elem_t* dst = base + (long long)row * row_stride;
#pragma unroll
            for (int j = 0; j < out_tiles; ++j)
                if (chunk_in_head<PADDED_HEAD>(cols, j))
                    *reinterpret_cast<elem2_t*>(dst + 8 * j + 2 * tig) =
                        pack2(acc[j][2 * r] * scale, acc[j][2 * r + 1] * scale);
        }
    }
}


// A warp's 16-row accumulator tiles as bwd_tile_scores takes them (one m16 slice).
template <int kNT>
__device__ __forceinline__ float (&as_tiles(float (&a)[kNT][4]))[1][kNT][4] {
    return reinterpret_cast<float(&)[1][kNT][4]>(a);
}

}  // namespace portable_bwd

using namespace portable_bwd;

// ---- 1. D = rowsum(dO ∘ O) (common/row_dot.cuh: several rows a warp, 16-byte chunks), or in a
// modes build rowsum(P ∘ dP) for a row that sees few keys (common/short_row_delta.cuh) ----
using Dot = RowDot<head_dim>;

extern "C" __global__ void __launch_bounds__(num_threads)
bwd_portable_dot_do_o(const __grid_constant__ AttentionParams p, const __grid_constant__ BackwardParams g) {
    const elem_t* o = static_cast<const elem_t*>(p.o);
    const elem_t* d_o = static_cast<const elem_t*>(g.d_o);
    const int lane = threadIdx.x % 32;
    const int sub_row = lane / Dot::lanes, chunk = lane % Dot::lanes;
    const long long rows = bwd_flat_rows(p);
    const long long stride = (long long)gridDim.x * num_warps * Dot::rows_per_warp;
    for (long long r0 = ((long long)blockIdx.x * num_warps + threadIdx.x / 32) * Dot::rows_per_warp; r0 < rows;
         r0 += stride) {
        const long long r = r0 + sub_row;
        float acc = 0.f;
        if (r < rows && chunk < Dot::chunks && chunk_in_head<PADDED_HEAD>(p.head_dim, chunk)) {
            const auto [batch, head, row] = bwd_flat_row(p, r);
            acc = Dot::partial(o + o_offset(p, batch, head, row), d_o + do_offset(g, batch, head, row), chunk);
        }
        acc = Dot::reduce(acc);
#if FC_BWD_MODES
        {
            const bool real = r < rows;
            const FlatRow f = bwd_flat_row(p, real ? r : 0);
            const SeqRow at = bwd_flat_seq_row(p, f);
            acc = short_row_delta<Dot, PADDED_HEAD>(p, g, real, at.seq, f.head, at.row, chunk, acc);
        }
#endif
        if (chunk == 0 && r < rows) p.workspace[r] = acc;  // r is the row's LSE index
    }
#if defined(FC_BWD_ATOMIC_DQ)
    float4* dq_acc = reinterpret_cast<float4*>(PortableDqAccumulator::base(p));
    const long long words4 = PortableDqAccumulator::floats(p) / 4;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < words4;
         i += (long long)gridDim.x * blockDim.x)
        dq_acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
#endif
}

// ---- 2. dK, dV ----
#if FC_HEAD_DIM <= 128
extern "C" __global__ void __launch_bounds__(num_threads, 2)
bwd_portable_dk_dv(const __grid_constant__ AttentionParams p, const __grid_constant__ BackwardParams g) {
    extern __shared__ __align__(128) unsigned char smem[];
    const unsigned smem_base = shared_address(smem);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int group = lane / 4, tig = lane % 4;
    const int warp_key0 = warp * warp_rows;  // this warp's keys within the tile

    const int key_tiles = ceil_div(p.seq_k, dkdv_key_rows);
    const int query_tiles = ceil_div(p.seq_q, dkdv_query_rows);
    const long long heads = (long long)p.batch * p.heads_kv;
    // Key tile major: with causal masking the first key tiles see the most queries, so the
    // heaviest items start first.
    for (long long item = blockIdx.x; item < heads * key_tiles; item += gridDim.x) {
        const int key_tile = (int)(item / heads);
        const int b = (int)((item % heads) / p.heads_kv);
        const int h_kv = (int)(item % p.heads_kv);
        const int k0 = key_tile * dkdv_key_rows;
        const int key_rows = min(dkdv_key_rows, bwd_len_k(p, b) - k0);
        if (FC_BWD_VARLEN && key_rows <= 0) continue;  // past its sequence's keys: nothing to write
        const TileRange walk = walked_query_tiles(p, b, k0, dkdv_key_rows, dkdv_query_rows, query_tiles);
        const int first_qt = walk.first;
        const int steps_per_head = walk.end - first_qt;  // 0 when no query sees these keys
        const int steps = steps_per_head * p.q_heads_per_kv;

        // (head, query tile) of step s: every query head of the KV group, each over its tiles.
        auto step_head = [&](int s) { return h_kv * p.q_heads_per_kv + s / steps_per_head; };
        auto step_q0 = [&](int s) { return (first_qt + s % steps_per_head) * dkdv_query_rows; };
        auto load_step = [&](int s, int buf) {
            const int h = step_head(s), q0 = step_q0(s);
            const int rows = min(dkdv_query_rows, bwd_len_q(p, b) - q0);
            load_tile_async<dkdv_query_rows, head_dim, num_threads, PADDED_HEAD>(
                smem_base + dkdv_q(buf), static_cast<const elem_t*>(p.q) + q_offset(p, b, h, bwd_q_row(p, b, q0)),
                p.q_row_stride, rows, tid, head_chunks<PADDED_HEAD, head_dim>(p.head_dim));
            load_tile_async<dkdv_query_rows, head_dim, num_threads, PADDED_HEAD>(
                smem_base + dkdv_do(buf), static_cast<const elem_t*>(g.d_o) + do_offset(g, b, h, bwd_q_row(p, b, q0)),
                g.do_row_stride, rows, tid, head_chunks<PADDED_HEAD, head_dim>(p.head_dim));
            // Row statistics by plain stores (visible after the barrier that ends the step before
            // this buffer is read). Rows past the end get LSE = +inf, so their P is exactly 0.
            float* lse = reinterpret_cast<float*>(smem + dkdv_lse(buf));
            float* dvec = reinterpret_cast<float*>(smem + dkdv_dvec(buf));
            for (int r = tid; r < dkdv_query_rows; r += num_threads) {
                const bool valid = r < rows;
                const long long at = bwd_lse_offset(p, b, h, q0 + (valid ? r : 0));
                lse[r] = valid ? p.lse[at] * FC_LOG2E : INFINITY;
                dvec[r] = valid ? p.workspace[at] : 0.f;
            }
        };

        float dk[out_tiles][4], dv[out_tiles][4];
        zero_accumulator(dk);
        zero_accumulator(dv);

        if (steps > 0) {
            // The previous item ended on a barrier after its last shared-memory read.
            load_tile_async<dkdv_key_rows, head_dim, num_threads, PADDED_HEAD>(
                smem_base + dkdv_k, static_cast<const elem_t*>(p.k) + k_offset(p, b, h_kv, bwd_k_row(p, b, k0)),
                p.k_row_stride, key_rows, tid, head_chunks<PADDED_HEAD, head_dim>(p.head_dim));
            load_tile_async<dkdv_key_rows, head_dim, num_threads, PADDED_HEAD>(
                smem_base + dkdv_v, static_cast<const elem_t*>(p.v) + v_offset(p, b, h_kv, bwd_k_row(p, b, k0)),
                p.v_row_stride, key_rows, tid, head_chunks<PADDED_HEAD, head_dim>(p.head_dim));
            load_step(0, 0);
            cp_async_commit();
            cp_async_wait<0>();
            __syncthreads();

            for (int s = 0; s < steps; ++s) {
                const int buf = s & 1;
                // The other buffer's last readers finished before the barrier ending step s-1.
                if (s + 1 < steps) load_step(s + 1, buf ^ 1);
                cp_async_commit();

                const int q0 = step_q0(s);
                const float* lse = reinterpret_cast<const float*>(smem + dkdv_lse(buf));
                const float* dvec = reinterpret_cast<const float*>(smem + dkdv_dvec(buf));

                // Sᵀ (keys x queries) -> Pᵀ in place. Lane holds keys warp_key0 + group (+8),
                // queries 8 j + 2 tig (+1).
                constexpr int query_tiles8 = dkdv_query_rows / 8;
                float pt[query_tiles8][4];
                warp_qk_q_in_smem<head_dim, dkdv_query_rows>(pt, smem_base + dkdv_k, warp_key0,
                                                             smem_base + dkdv_q(buf), lane);
#if FC_BWD_MODES
                float dst[query_tiles8][4];
                warp_qk_q_in_smem<head_dim, dkdv_query_rows>(dst, smem_base + dkdv_v, warp_key0,
                                                             smem_base + dkdv_do(buf), lane);
                bwd_tile_scores<true>(p, b, score_mod(p, bwd_seq(p, b), b, step_head(s)), as_tiles(pt), as_tiles(dst),
                                      k0 + warp_key0, q0,
                                      key_tile_needs_mask(p, b, k0, dkdv_key_rows, q0, dkdv_query_rows),
                                      [&](int q) { return make_float2(lse[q], dvec[q]); }, lane);
#else
                // Causal: the tile pair needs the element mask when its last key lies past what
                // its first query sees.
                const bool masked = p.causal && k0 + dkdv_key_rows - 1 > q0 + causal_offset(p);
#pragma unroll
                for (int j = 0; j < query_tiles8; ++j) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int qc = 8 * j + 2 * tig + (e & 1);
                        float prob = exp2f(pt[j][e] * p.scale_log2 - lse[qc]);
                        if (masked && k0 + warp_key0 + group + 8 * (e >> 1) > q0 + qc + causal_offset(p)) prob = 0.f;
                        pt[j][e] = prob;
                    }
                }
                // dPᵀ = V·dOᵀ, then dSᵀ = Pᵀ ∘ (dPᵀ − D) in place.
                float dst[query_tiles8][4];
                warp_qk_q_in_smem<head_dim, dkdv_query_rows>(dst, smem_base + dkdv_v, warp_key0,
                                                             smem_base + dkdv_do(buf), lane);
#pragma unroll
                for (int j = 0; j < query_tiles8; ++j) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) dst[j][e] = pt[j][e] * (dst[j][e] - dvec[8 * j + 2 * tig + (e & 1)]);
                }
#endif
                // dV += Pᵀ·dO, dK += dSᵀ·Q (dO and Q read transposed with ldmatrix.trans).
                warp_pv<head_dim, dkdv_query_rows>(dv, pt, smem_base + dkdv_do(buf), lane);
                warp_pv<head_dim, dkdv_query_rows>(dk, dst, smem_base + dkdv_q(buf), lane);

                cp_async_wait<0>();
                // Step s+1's tiles are visible; every warp is done with buffer buf.
                __syncthreads();
            }
        }

        store_warp_rows(static_cast<elem_t*>(g.dk) + dk_offset(g, b, h_kv, bwd_k_row(p, b, k0)), g.dk_row_stride, dk,
                        warp_key0, key_rows, p.head_dim, p.softmax_scale, lane);
        store_warp_rows(static_cast<elem_t*>(g.dv) + dv_offset(g, b, h_kv, bwd_k_row(p, b, k0)), g.dv_row_stride, dv,
                        warp_key0, key_rows, p.head_dim, 1.f, lane);
    }
}
#endif

// ---- 3. dQ ----
extern "C" __global__ void __launch_bounds__(num_threads, 2)
bwd_portable_dq(const __grid_constant__ AttentionParams p, const __grid_constant__ BackwardParams g) {
    extern __shared__ __align__(128) unsigned char smem[];
    const unsigned smem_base = shared_address(smem);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int group = lane / 4, tig = lane % 4;
    const int warp_row0 = warp * warp_rows;

    const int query_tiles = ceil_div(p.seq_q, dq_query_rows);
    const long long heads = (long long)p.batch * p.heads_q;
    // Last query tile first: under causal masking it sees the most keys.
    for (long long item = blockIdx.x; item < heads * query_tiles; item += gridDim.x) {
        const int q_tile = query_tiles - 1 - (int)(item / heads);
        const int b = (int)((item % heads) / p.heads_q);
        const int h = (int)(item % p.heads_q);
        const int h_kv = h / p.q_heads_per_kv;
        const int q0 = q_tile * dq_query_rows;
        const int q_rows = min(dq_query_rows, bwd_len_q(p, b) - q0);
        if (FC_BWD_VARLEN && q_rows <= 0) continue;  // past its sequence's queries: nothing to write
        const KeyWalk walk = walked_keys(p, b, q0, q_rows, dq_key_rows);
        const int key_tiles = ceil_div(walk.key_end, dq_key_rows) - walk.first_tile;

        // This lane's two rows: LSE (log2 domain; +inf past the end, so P = 0) and D.
        float lse[2], dvec[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = q0 + warp_row0 + group + 8 * r;
            const bool valid = row < bwd_len_q(p, b);
            const long long at = bwd_lse_offset(p, b, h, valid ? row : 0);
            lse[r] = valid ? p.lse[at] * FC_LOG2E : INFINITY;
            dvec[r] = valid ? p.workspace[at] : 0.f;
        }

        const elem_t* k_ptr = static_cast<const elem_t*>(p.k) + k_offset(p, b, h_kv, bwd_k_row(p, b, 0));
        const elem_t* v_ptr = static_cast<const elem_t*>(p.v) + v_offset(p, b, h_kv, bwd_k_row(p, b, 0));
        auto load_kv = [&](int n, int buf) {
            const int kk0 = (walk.first_tile + n) * dq_key_rows, rows = min(dq_key_rows, bwd_len_k(p, b) - kk0);
            load_tile_async<dq_key_rows, head_dim, num_threads, PADDED_HEAD>(
                smem_base + dq_k(buf), k_ptr + (long long)kk0 * p.k_row_stride, p.k_row_stride, rows, tid,
                head_chunks<PADDED_HEAD, head_dim>(p.head_dim));
            load_tile_async<dq_key_rows, head_dim, num_threads, PADDED_HEAD>(
                smem_base + dq_v(buf), v_ptr + (long long)kk0 * p.v_row_stride, p.v_row_stride, rows, tid,
                head_chunks<PADDED_HEAD, head_dim>(p.head_dim));
        };

        float dq[out_tiles][4];
        zero_accumulator(dq);
        if (key_tiles > 0) {
            load_tile_async<dq_query_rows, head_dim, num_threads, PADDED_HEAD>(
                smem_base + dq_q, static_cast<const elem_t*>(p.q) + q_offset(p, b, h, bwd_q_row(p, b, q0)),
                p.q_row_stride, q_rows, tid, head_chunks<PADDED_HEAD, head_dim>(p.head_dim));
            load_tile_async<dq_query_rows, head_dim, num_threads, PADDED_HEAD>(
                smem_base + dq_do, static_cast<const elem_t*>(g.d_o) + do_offset(g, b, h, bwd_q_row(p, b, q0)),
                g.do_row_stride, q_rows, tid, head_chunks<PADDED_HEAD, head_dim>(p.head_dim));
            load_kv(0, 0);
            cp_async_commit();
            cp_async_wait<0>();
            __syncthreads();

            constexpr int key_tiles8 = dq_key_rows / 8;
            for (int n = 0; n < key_tiles; ++n) {
                const int buf = n & 1;
                if (n + 1 < key_tiles) load_kv(n + 1, buf ^ 1);
                cp_async_commit();
                const int kk0 = (walk.first_tile + n) * dq_key_rows;

                float s[key_tiles8][4];
                warp_qk_q_in_smem<head_dim, dq_key_rows>(s, smem_base + dq_q, warp_row0, smem_base + dq_k(buf), lane);
#if FC_BWD_MODES
                float ds[key_tiles8][4];
                warp_qk_q_in_smem<head_dim, dq_key_rows>(ds, smem_base + dq_do, warp_row0, smem_base + dq_v(buf),
                                                         lane);
                bwd_tile_scores<false>(
                    p, b, score_mod(p, bwd_seq(p, b), b, h), as_tiles(s), as_tiles(ds), q0 + warp_row0, kk0,
                    query_tile_needs_mask(p, b, q0 + warp_row0, warp_rows, kk0, dq_key_rows),
                    [&](int r) { return make_float2(lse[(r >> 3) & 1], dvec[(r >> 3) & 1]); }, lane);
#else
                // Key tails and the causal diagonal take the element mask.
                const bool masked = kk0 + dq_key_rows > p.seq_k ||
                                    (p.causal && kk0 + dq_key_rows - 1 > q0 + causal_offset(p));
#pragma unroll
                for (int j = 0; j < key_tiles8; ++j) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int r = e >> 1;
                        float prob = exp2f(s[j][e] * p.scale_log2 - lse[r]);
                        if (masked) {
                            const int key = kk0 + 8 * j + 2 * tig + (e & 1);
                            const int row = q0 + warp_row0 + group + 8 * r;
                            if (key >= p.seq_k || (p.causal && key > row + causal_offset(p))) prob = 0.f;
                        }
                        s[j][e] = prob;
                    }
                }
                float ds[key_tiles8][4];
                warp_qk_q_in_smem<head_dim, dq_key_rows>(ds, smem_base + dq_do, warp_row0, smem_base + dq_v(buf),
                                                         lane);
#pragma unroll
                for (int j = 0; j < key_tiles8; ++j) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) ds[j][e] = s[j][e] * (ds[j][e] - dvec[e >> 1]);
                }
#endif
                warp_pv<head_dim, dq_key_rows>(dq, ds, smem_base + dq_k(buf), lane);

                cp_async_wait<0>();
                __syncthreads();
            }
        }
        store_warp_rows(static_cast<elem_t*>(g.dq) + dq_offset(g, b, h, bwd_q_row(p, b, q0)), g.dq_row_stride, dq,
                        warp_row0, q_rows, p.head_dim, p.softmax_scale, lane);
    }
}
