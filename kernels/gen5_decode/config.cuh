// Generation 5, decode: the build's configuration. Every FC_DECODE_* define with its default, and
// the constants that follow from them: head dim, ring depth, warps and their share of a tile, the
// cache kind's loader, and the shared-memory map.
//
// Dynamic shared memory (bytes), T = R * D * 2 (one tile of R = kv_tile_rows keys; R * D for e4m3):
//   [0, STAGES * 2T)            K/V ring: stage i = K at 2T i, V at 2T i + T
//                               (reused by the epilogue for the key slices' f32 accumulators:
//                               key_slices * 16 * D * 4 <= 2T * STAGES)
//   [STAGES * 2T, + 16 * D * 2) the packed Q tile
//   [.., + 4 * 16 * 2 * 4)      each warp's per-row (max, sum)
// Keep in sync with crates/gen5-persistent/src/decode.rs (smem_bytes).
#pragma once
#include "../common/params.cuh"
#include "../common/smem_layout.cuh"
#include "../common/kv_operand.cuh"

#ifndef FC_HEAD_DIM
#error "compile with -DFC_HEAD_DIM=<64|128|256|512>"
#endif
#ifndef FC_DECODE_STAGES
#define FC_DECODE_STAGES 3
#endif
// L2 prefetch of each CTA's first tiles before griddepcontrol.wait (prefetch_first_tiles).
#ifndef FC_DECODE_PREFETCH
#define FC_DECODE_PREFETCH 0
#endif
#ifndef FC_DECODE_MIN_BLOCKS
#define FC_DECODE_MIN_BLOCKS 2
#endif
// Batch-invariant plans (decode.rs): a unit's key tiles in chunks of this many tiles (0: the
// default plan's num_splits balanced pieces). See chunk_size.
#ifndef FC_DECODE_CHUNK_TILES
#define FC_DECODE_CHUNK_TILES 0
#endif
// Words of the workspace in front of this kernel's partials (a routed plan's persistent kernel
// keeps its counters there).
#ifndef FC_DECODE_WS_OFFSET
#define FC_DECODE_WS_OFFSET 0
#endif
// K and V are e4m3 bytes with per-(batch, KV head) descales (kv_operand.cuh, docs/MODES.md).
#ifndef FC_KV_E4M3
#define FC_KV_E4M3 0
#endif
// Where K/V rows live (decode.rs KvCache, set by every plan): 0 a strided tensor (dense, packed
// or a contiguous cache), 1 a paged cache whose pages hold whole key tiles (block_size a multiple
// of kv_tile_rows), 2 one of smaller pages. A build holds only its own loader (see load_kv).
#ifndef FC_DECODE_KV_CACHE
#define FC_DECODE_KV_CACHE 0
#endif
// The problem's head dims are narrower than the build's (see the top of gen5_decode.cu).
#ifndef FC_DECODE_PADDED
#define FC_DECODE_PADDED 0
#endif
// V's and O's head dim where it differs from Q's and K's (a padded build); 0: p.head_dim.
#ifndef FC_HEAD_DIM_V
#define FC_HEAD_DIM_V 0
#endif
#if FC_DECODE_PADDED && FC_KV_E4M3
#error "an e4m3 cache is decoded at the build's head dim only"
#endif
#if FC_HEAD_DIM_V != 0 && !FC_DECODE_PADDED
#error "V's own head dim is taken by padded builds (FC_DECODE_PADDED)"
#endif

namespace decode {

constexpr int head_dim = FC_HEAD_DIM;
static_assert(head_dim == 64 || head_dim == 128 || head_dim == 256 || head_dim == 512,
              "the decode kernel is built for head_dim 64, 128, 256 and 512");
// At D = 256 a warp's 16 x D accumulator is 128 registers a lane, and Q's fragments (64 more) do
// not fit beside it: QK^T reads Q from its shared tile one 16-wide slice at a time.
enum : bool { q_in_registers = head_dim <= 128 };
enum : bool { padded = FC_DECODE_PADDED };
// V's (and O's) columns in memory: the problem's head dim unless V has its own.
__device__ __forceinline__ int v_dim(const AttentionParams& p) { return FC_HEAD_DIM_V > 0 ? FC_HEAD_DIM_V : p.head_dim; }
constexpr int stages = FC_DECODE_STAGES;
static_assert(stages >= 2, "a ring needs two slots");

constexpr int q_tile_rows = 16;  // packed rows: one mma M extent
constexpr int num_warps = 4;
constexpr int num_threads = 32 * num_warps;
// A warp's share of a tile. Up to D = 256 the warps split its keys (16 each), each with its own
// online-softmax state and a 16 x D accumulator, merged at the end. At D = 512 that accumulator
// would be 256 registers a lane, so every warp takes all the tile's keys (the same softmax state
// in each: each computes S over a quarter of the head dim and the warps add their partials,
// scores.cuh) and a quarter of O's columns; the tile is 32 keys there, so that a ring of
// three fits the shared memory (64 KiB a stage).
constexpr int column_warps = head_dim > 256 ? num_warps : 1;  // warps sharing one key slice
constexpr int key_slices = num_warps / column_warps;
constexpr int kv_tile_rows = head_dim > 256 ? 32 : 64;  // decode.rs kv_tile_rows
constexpr int warp_keys = kv_tile_rows / key_slices;
constexpr int warp_cols = head_dim / column_warps;
constexpr int out_tiles = warp_cols / 8;

// The K/V loader of this build (FC_DECODE_KV_CACHE). All three inlined side by side, K's and V's,
// behind run-time tests made the sm_90a D = 128 e4m3 mainloop 1 296 instructions, 792 of them
// loaders, and 16 % of its stalls waited on instruction fetch; one a build: 926-1 002.
enum KvCache { strided_cache = 0, page_tiles = 1, page_groups = 2 };
enum : int { kv_cache = FC_DECODE_KV_CACHE };
static_assert(kv_cache == strided_cache || kv_cache == page_tiles || kv_cache == page_groups,
              "FC_DECODE_KV_CACHE is 0 (strided), 1 (pages of whole tiles) or 2 (smaller pages)");
enum : bool { paged_cache = kv_cache != strided_cache };
// Whether the launch's K/V are the kind this build loads. The plan makes them so; a launch that
// did not would address K/V by the wrong rule (a strided build on a pool of pages, a page's
// worth of rows past a small page), so the kernel traps rather than read there.
__device__ __forceinline__ bool cache_matches(const AttentionParams& p) {
    const bool paged = p.block_table != nullptr;
    if (kv_cache == strided_cache) return !paged;
    if (kv_cache == page_tiles) return paged && p.block_size % kv_tile_rows == 0;
    return paged;  // (page_groups reads any page of 16 d rows, whole-tile ones too)
}

using Tile = SwizzledTile<head_dim>;
// How K/V tiles are stored and read (16-bit or e4m3 rows): their tiles are KvTile rows of words.
using Kv = KvOperand<head_dim>;
using KvTile = SwizzledTile<Kv::kTileCols>;
constexpr int kv_tile_bytes = KvTile::bytes(kv_tile_rows);
constexpr int ring_bytes = stages * 2 * kv_tile_bytes;
constexpr int q_offset = ring_bytes;
constexpr int stats_offset = q_offset + Tile::bytes(q_tile_rows);
constexpr int smem_bytes = stats_offset + num_warps * q_tile_rows * 2 * 4;
static_assert(key_slices * q_tile_rows * head_dim * 4 <= ring_bytes, "the merge reuses the ring");

__device__ __forceinline__ unsigned k_slot(int slot) { return slot * 2 * kv_tile_bytes; }
__device__ __forceinline__ unsigned v_slot(int slot) { return slot * 2 * kv_tile_bytes + kv_tile_bytes; }
// An e4m3 cache's descale of (sequence b, KV head h_kv): per tensor, per KV head or per both.
__device__ __forceinline__ float kv_descale(const AttentionParams& p, const float* table, int b, int h_kv) {
    return table[(long long)b * p.descale_batch_stride + (long long)h_kv * p.descale_head_stride];
}
}  // namespace decode
