// Generation 5, decode: the combine kernel's shape (attention_decode_combine).
#pragma once
#include "config.cuh"
#include "../common/params.cuh"

namespace decode {

constexpr int max_splits = 256;  // decode.rs MAX_SPLITS
constexpr int lse_per_lane = max_splits / 32;
constexpr int combine_warps = 4;   // decode.rs COMBINE_WARPS
constexpr int combine_cols = 64;   // decode.rs COMBINE_COLS
constexpr int combine_batch = 32;  // splits whose O loads a lane has in flight at once
constexpr int col_slices = head_dim / combine_cols;

// Packed rows a unit can have (decode.rs combine_rows): the tile's 16, or fewer where every
// sequence's queries pack into fewer (decode: G).
__device__ __forceinline__ int combine_rows(const AttentionParams& p) {
    const long long rows = (long long)p.seq_q * p.q_heads_per_kv;
    return rows < q_tile_rows ? (int)rows : q_tile_rows;
}

}  // namespace decode
