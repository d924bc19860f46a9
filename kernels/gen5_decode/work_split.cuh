// Generation 5, decode: work units (sequence, KV head, packed q tile) and how their key tiles are
// cut into splits (balanced pieces, or a batch-invariant plan's fixed chunks).
#pragma once
#include "config.cuh"
#include "../common/params.cuh"
#include "../common/types.cuh"
#include "../common/seqlen.cuh"
#include "../common/work_item.cuh"

namespace decode {

// A work unit's place: the sequence, KV head and packed q tile; the split comes on top.
struct Unit {
    int b, h_kv, q_tile;
};

__device__ __forceinline__ int packed_q_tiles(const AttentionParams& p) {
    // A routed launch takes only sequences whose packed rows fit one tile (seqlen.cuh).
    if (FC_SEQ_ROUTE == 2) return 1;
    return ceil_div(p.seq_q * p.q_heads_per_kv, q_tile_rows);
}

__device__ __forceinline__ Unit unit_of(const AttentionParams& p, long long u) {
    const int tiles = packed_q_tiles(p);
    Unit x;
    x.q_tile = (int)(u % tiles);
    const long long bh = u / tiles;
    x.h_kv = (int)(bh % p.heads_kv);
    x.b = (int)(bh / p.heads_kv);
    return x;
}

// Packed row r of a sequence: query row r / G of head h_kv * G + r % G.
struct PackedRow {
    int q_row, head;
};
__device__ __forceinline__ PackedRow packed_row(const AttentionParams& p, int h_kv, int r) {
    PackedRow x;
    x.q_row = r / p.q_heads_per_kv;
    x.head = h_kv * p.q_heads_per_kv + r % p.q_heads_per_kv;
    return x;
}

// Key tiles [lo, hi) of split s out of n splits of the visited range: balanced, sizes differ by
// at most one, empty only when the range has fewer tiles than splits.
__device__ __forceinline__ void split_tiles(const KeyTiles& kt, int s, int n, int& lo, int& hi) {
    const long long tiles = kt.end - kt.first;
    lo = kt.first + (int)(tiles * s / n);
    hi = kt.first + (int)(tiles * (s + 1) / n);
}

// Batch-invariant chunks: fixed-size pieces of the visited range counted from its first tile,
// so they follow from the sequence alone. A unit of at least four chunks takes half chunks, one
// longer than max_splits chunks larger ones (decode.rs chunk_tiles_for, which says why). The
// plan's num_splits covers the most chunks any unit has; the last split takes whatever is left,
// so a table that lies about lengths still loses no key.
// (Functions, not constants: a namespace-scope constant is emitted into every build's PTX.)
__host__ __device__ constexpr int chunk_tiles() { return FC_DECODE_CHUNK_TILES; }
__host__ __device__ constexpr int max_chunks() { return 256; }  // decode.rs MAX_SPLITS
__device__ __forceinline__ int chunk_size(const KeyTiles& kt) {
    constexpr int base = decode::chunk_tiles();
    const int tiles = kt.end - kt.first;
    const int by_length = tiles >= 4 * base ? base / 2 : base;  // decode.rs LONG_CHUNKS
    const int by_count = ceil_div(tiles, max_chunks());
    const int size = by_length > by_count ? by_length : by_count;
    return size > 1 ? size : 1;
}
// Splits that carry keys of this unit: its chunks (at most the plan's count), or every split.
__device__ __forceinline__ int unit_splits(const KeyTiles& kt, int splits) {
    if (chunk_tiles() == 0) return splits;
    const int chunks = ceil_div(kt.end - kt.first, chunk_size(kt));
    return chunks < 1 ? 1 : (chunks < splits ? chunks : splits);
}
__device__ __forceinline__ void chunk_of(const KeyTiles& kt, int s, int n, int& lo, int& hi) {
    const int size = chunk_size(kt);
    lo = kt.first + s * size;
    hi = s == n - 1 ? kt.end : lo + size;
}
}  // namespace decode
