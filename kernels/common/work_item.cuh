// The (batch, q head, q tile) work items of the grid-stride kernels (generations 3 and 4): a
// block takes items blockIdx.x, blockIdx.x + gridDim.x, ... and turns each into the tile it
// covers with q_tile_item.
#pragma once
#include "params.cuh"
#include "masking.cuh"

__device__ __forceinline__ int ceil_div(int a, int b) { return a / b + (a % b != 0); }

struct QTileItem {
    int b, h, h_kv;          // batch, q head, the K/V head it reads
    int q0, q_rows;          // first query row of the tile; rows of it below seq_q
    int num_kv_tiles;        // K/V tiles any row of the tile sees: later ones are never loaded
    int first_row_key_end;   // keys the tile's first row (the one that sees fewest) sees
};

// q tile fastest, so neighbouring blocks share K/V in L2; the tile order reversed, so that under
// causal masking the longest rows start first. A K/V tile ending at or before first_row_key_end
// is fully visible to every row of the tile (no masking needed).
template <int kQTileRows, int kKvTileRows>
__device__ __forceinline__ QTileItem q_tile_item(const AttentionParams& p, long long item, int num_q_tiles) {
    QTileItem t;
    const int q_tile_idx = num_q_tiles - 1 - (int)(item % num_q_tiles);
    const long long bh = item / num_q_tiles;
    t.h = (int)(bh % p.heads_q);
    t.b = (int)(bh / p.heads_q);
    t.h_kv = t.h / p.q_heads_per_kv;
    t.q0 = q_tile_idx * kQTileRows;
    t.q_rows = min(kQTileRows, p.seq_q - t.q0);
    const int key_end = causal_key_end_for_tile(p, t.q0, t.q0 + kQTileRows);
    t.num_kv_tiles = key_end > 0 ? ceil_div(key_end, kKvTileRows) : 0;
    t.first_row_key_end = causal_key_end(p, t.q0);
    return t;
}
