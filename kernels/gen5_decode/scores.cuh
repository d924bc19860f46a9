// Generation 5, decode: a warp's scores of a key tile, S = Q·Kᵀ, with Q where the build keeps it.
//
//   D <= 128: Q's fragments in registers, loaded once per unit;
//   D = 256:  a warp's 16 x 256 accumulator leaves no room for them, so Q is read from its shared
//             tile one 16-wide slice at a time;
//   D = 512:  every warp takes all of a tile's keys and a quarter of O's columns (config.cuh,
//             column_warps), so every warp needs the whole 16 x 32 S. Each warp computes S over
//             its own quarter of the head dim, with that quarter of Q in registers, and the warps
//             add their partials through shared memory: a quarter of the products and K reads of
//             computing the whole S in every warp, and no Q reads in the key loop.
#pragma once
#include "config.cuh"
#include "../common/mma.cuh"
#include "../common/kv_operand.cuh"
#include "../common/hopper/smem_io.cuh"

namespace decode {

// (Not in padded builds, 264-504 in the 512 one: with the epilogue's column tests their registers
// spilled; they keep every warp computing all of S, and the merge.)
enum : bool { split_d_scores = column_warps > 1 && !padded };
// Q's fragments a warp holds in registers (none used at D = 256).
// (Enums, as config.cuh's flags: a namespace-scope constexpr int is emitted into every build's PTX.)
enum : int { q_frags = (split_d_scores ? warp_cols : head_dim) / 16 };

// Column warps: a warp's columns of a Q or K row start this many bytes in (whole swizzle periods).
enum : int { slice_row_bytes = warp_cols * 2 };

// The column warps' partial scores live in the Q tile, which no one reads once the fragments are
// in registers: warp w's go to rows 0-7 of its own column slice, where only warp w read Q, so a
// warp never overwrites Q that another is still loading. Float4 j of lane `lane` is byte
// x = 512 j + 16 lane of those 2 KiB: the 8 lanes of one v4 store phase fill a 128-byte line.
__device__ __forceinline__ unsigned partial_score_offset(int warp, int j, int lane) {
    const int x = j * 32 * 16 + lane * 16;
    return (x / slice_row_bytes) * Tile::bytes(1) + warp * slice_row_bytes + x % slice_row_bytes;
}

// Once per unit, when Q has landed: the fragments this build keeps in registers.
// (Templates, so that only the build's own branch is instantiated.)
template <int kFrags>
__device__ __forceinline__ void load_q_operand(FragA (&q)[kFrags], const typename Kv::QScale& q_scale, unsigned q_tile,
                                               int warp, int lane) {
    if constexpr (split_d_scores)
        load_q_fragments<head_dim, warp_cols>(q, q_tile + warp * slice_row_bytes, 0, lane);
    else if constexpr (q_in_registers)
        Kv::load_q(q, q_scale, q_tile, lane);
}

// Column warps: S over this warp's columns, then the four partials added in warp order (the same
// sum, bit for bit, in every warp, so their softmax states agree). Every thread of the block
// calls it; the key loop's next barrier keeps the next tile's partials behind these loads.
template <int kKeys>
__device__ __forceinline__ void split_d_qk(float (&s)[kKeys / 8][4], const FragA (&q)[warp_cols / 16],
                                           unsigned q_tile, unsigned k_rows, int warp, int lane) {
    static_assert(!Kv::kE4m3, "column warps read 16-bit K only");
    static_assert(kKeys / 8 * 32 * 16 <= 8 * slice_row_bytes, "a warp's partials fit its slice's first 8 rows");
    float part[kKeys / 8][4];
    warp_qk<head_dim, kKeys, warp_cols>(part, q, k_rows + warp * slice_row_bytes, lane);
    __syncwarp();  // this warp's loads of its Q slice are done before its partials overwrite it
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j)
        st_shared_v4_f32(q_tile + partial_score_offset(warp, j, lane), part[j][0], part[j][1], part[j][2], part[j][3]);
    __syncthreads();
    zero_accumulator(s);
#pragma unroll
    for (int w = 0; w < num_warps; ++w) {
#pragma unroll
        for (int j = 0; j < kKeys / 8; ++j) {
            const float4 v = ld_shared_v4_f32(q_tile + partial_score_offset(w, j, lane));
            s[j][0] += v.x, s[j][1] += v.y, s[j][2] += v.z, s[j][3] += v.w;
        }
    }
}

// This warp's S for its kKeys keys of the tile: k_rows is the K slot plus the warp's first key's
// row (0 for column warps).
template <int kKeys, int kFrags>
__device__ __forceinline__ void tile_scores(float (&s)[kKeys / 8][4], const FragA (&q)[kFrags],
                                            const typename Kv::QScale& q_scale, unsigned q_tile, unsigned k_rows,
                                            int warp, int lane) {
    if constexpr (split_d_scores)
        split_d_qk<kKeys>(s, q, q_tile, k_rows, warp, lane);
    else if constexpr (q_in_registers)
        Kv::template qk<kKeys>(s, q, q_scale, k_rows, lane);
    else
        Kv::template qk_q_in_smem<kKeys>(s, q_tile, q_scale, k_rows, lane);
}
}  // namespace decode
