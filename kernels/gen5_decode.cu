// Generation 5, decode: split keys across CTAs, query heads of a KV group packed into one tile
// (FlashDecoding with FlashAttention-3's pack-GQA). Both gen-5 paths plan it for problems whose
// queries per KV head fit one 16-row MMA tile (decode, speculative decoding): there the
// persistent kernels give one CTA a whole key range and fill 1 of 128 MMA rows, while this one
// streams K/V through every SM at once and reads each KV head once per group.
//
// Work unit (one CTA): (batch b, KV head h_kv, packed q tile, key split). Packed row r of a
// sequence is query row r / G of query head h_kv * G + r % G (G = heads_q / heads_kv); a tile is
// 16 packed rows, so K/V of a group are read once for all its heads. The unit's key tiles (the
// visited range of seqlen.cuh, cut into num_splits balanced pieces) stream through a
// FC_DECODE_STAGES-deep cp.async ring of 64-key K and V tiles (32-key at D = 512); up to D = 256
// warp w owns keys [16 w, 16 w + 16) of every tile and keeps its own online-softmax state and
// 16 x D accumulator (at D = 512 every warp takes all 32 keys and a quarter of the columns, see
// column_warps):
//
//   prologue: Q (16 packed rows, gathered per row) + the first STAGES-1 K/V tiles
//   per tile t: wait tile t; barrier; issue tile t+STAGES-1 into the slot tile t-1 used;
//               S = Q·K_wᵀ (16 x 16), score modifier, masks, online softmax, O_w += P·V_w
//   epilogue:   the warps' (max, sum, O) merged through shared memory; one split: O and
//               LSE written; several: the split's normalised O (f32) and log2-LSE go to the
//               workspace and attention_decode_combine merges them, splits in order.
//
// Masks, score modifiers and K/V addressing are the shared headers' (seqlen.cuh, score_mod.cuh,
// kv_rows.cuh, async_copy.cuh), so every inference mode holds under splitting; a split never
// crosses a sequence (a unit belongs to one sequence).
//
// An e4m3 cache (FC_KV_E4M3) changes only how tiles are stored and read (kv_operand.cuh: rows of
// D bytes, operands widened in registers) and adds the descales: the key one scales the logits,
// the value one the unit's O before the warps' merge.
//
// Padded head dims (FC_DECODE_PADDED, common/padded_head.cuh): one build at D = 64, 128, 256 or
// 512 serves every head dim (a multiple of 8) that rounds up to it, and V's own head dim
// (FC_HEAD_DIM_V) up to it: Q, K and V tiles hold D columns of which only the problem's are
// loaded (the rest zero-filled: they add nothing to either product), and only V's columns of O
// are stored. 16-bit caches only; an e4m3 cache is read at the build dims exactly.
//
// Dynamic shared memory (bytes), T = R * D * 2 (one tile of R = kv_tile_rows keys; R * D for e4m3):
//   [0, STAGES * 2T)            K/V ring: stage i = K at 2T i, V at 2T i + T
//                               (reused by the epilogue for the key slices' f32 accumulators:
//                               key_slices * 16 * D * 4 <= 2T * STAGES)
//   [STAGES * 2T, + 16 * D * 2) the packed Q tile
//   [.., + 4 * 16 * 2 * 4)      each warp's per-row (max, sum)
// Keep in sync with crates/gen5-persistent/src/decode.rs (smem_bytes).
#include "common/params.cuh"
#include "common/types.cuh"
#include "common/masking.cuh"
#include "common/seqlen.cuh"
#include "common/kv_rows.cuh"
#include "common/smem_layout.cuh"
#include "common/mma.cuh"
#include "common/async_copy.cuh"
#include "common/online_softmax.cuh"
#include "common/work_item.cuh"
#include "common/grid_dependency.cuh"
#include "common/kv_operand.cuh"
#include "common/padded_head.cuh"
#include "common/opaque.cuh"
#include "common/decode_trace.cuh"

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
// The problem's head dims are narrower than the build's (see the top of the file).
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
// in each, at the cost of computing S four times over) and a quarter of O's columns; the tile
// is 32 keys there, so that a ring of three fits the shared memory (64 KiB a stage).
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

// An e4m3 cache's descale of (sequence b, KV head h_kv): per tensor, per KV head or per both.
__device__ __forceinline__ float kv_descale(const AttentionParams& p, const float* table, int b, int h_kv) {
    return table[(long long)b * p.descale_batch_stride + (long long)h_kv * p.descale_head_stride];
}

// The workspace this kernel owns.
__device__ __forceinline__ float* workspace_of(const AttentionParams& p) { return p.workspace + FC_DECODE_WS_OFFSET; }

// Workspace: per (unit, split, packed row) a normalised f32 O row, then all the log2-LSEs.
__device__ __forceinline__ long long partial_row(const AttentionParams& p, long long u, int s, int r) {
    return (u * p.num_splits + s) * q_tile_rows + r;
}
__device__ __forceinline__ long long partial_lse_base(const AttentionParams& p, long long units) {
    return units * p.num_splits * q_tile_rows * head_dim;
}

// One row's result, whoever produces it: O unnormalised by l, log2-domain max m.
// l = 0 with visible keys means every logit was -inf (infinite inputs): NaN, as the f64
// reference; with no visible key it is the defined empty row (O = 0, LSE = +inf).
__device__ __forceinline__ float final_scale(float l, bool sees_keys) {
    if (l != 0.f) return 1.f / l;
    return sees_keys ? FC_QNAN : 0.f;
}
__device__ __forceinline__ float final_lse(float m, float l, bool sees_keys) {
    if (l != 0.f) return (m + __log2f(l)) * FC_LN2;
    return sees_keys ? FC_QNAN : FC_INF;
}

// Full tiles of a paged cache with small pages (a multiple of 16 rows but not of 64: 16, 32, 48,
// 80, ...): four 16-row groups, each strided inside its own page. Every thread copies the same
// rows and chunk of each group, so its offsets are fixed for the kernel; lane g of each warp
// holds group g's first row and passes it round by shuffle. A group then costs two shuffles, an
// add and its copies. The general group loader (load_tile_groups_async, kept for a sequence's
// last tile) works each copy's address, bounds and swizzle out again: at block 16 its case ran
// 48 % more instructions than the contiguous one and took 1.09-1.10x its time, this one
// 1.06-1.07x (2026-11-27, 70d02a6).
constexpr int group_rows = 16;
constexpr int groups_per_tile = kv_tile_rows / group_rows;
constexpr int rows_per_pass = num_threads / Tile::kChunksPerRow;  // 4 at D = 256, 8 at D = 128, 16 at D = 64
constexpr int copies_per_group = group_rows / rows_per_pass;
static_assert(group_rows % rows_per_pass == 0, "whole passes a group");
// From 8 rows a pass on, each thread's rows keep one swizzle pattern (it repeats every 8 rows), so
// one offset serves every copy; at D = 256 (4 rows a pass) odd passes flip the pattern's bit 2.
enum : bool { one_swizzle_per_thread = rows_per_pass % 8 == 0 };

// One thread's share of a group, for a tensor with row stride `row_stride`.
struct GroupCopy {
    unsigned dst;    // bytes from the group's first row in shared memory
    long long src;   // elements from the group's first row in global memory
    long long step;  // elements between this thread's rows
};
__device__ __forceinline__ GroupCopy group_copy(long long row_stride, int tid) {
    const int row = tid / Tile::kChunksPerRow, chunk = tid % Tile::kChunksPerRow;
    return {(unsigned)Tile::offset(row, chunk) * 2, row * row_stride + chunk * 8, rows_per_pass * row_stride};
}
// Where copy i of a group lands, from the group's first row.
__device__ __forceinline__ unsigned group_copy_dst(const GroupCopy& c, int i) {
    if constexpr (one_swizzle_per_thread) return Tile::bytes(i * rows_per_pass) + c.dst;
    // Rows row + 4i (row < 4): the pattern row & 7 gains 4 on odd passes, flipping the chunk's bit 2.
    return Tile::bytes(i * rows_per_pass) + (c.dst ^ (unsigned)((i & 1) * 4 * 16));
}

// Group (lane % groups_per_tile)'s first row of the full tile at key k0, in K and in V (they share
// the block table, so one lookup serves both).
struct GroupRows {
    const elem_t* k;
    const elem_t* v;
};
__device__ __forceinline__ GroupRows group_first_rows(const AttentionParams& p, int b, int h_kv, int k0, int lane) {
    const int j = k0 + group_rows * (lane % groups_per_tile);
    const int page = page_of_row(p, b, j);
    return {static_cast<const elem_t*>(p.k) +
                paged_row_offset(p, page, h_kv, j, p.k_batch_stride, p.k_head_stride, p.k_row_stride),
            static_cast<const elem_t*>(p.v) +
                paged_row_offset(p, page, h_kv, j, p.v_batch_stride, p.v_head_stride, p.v_row_stride)};
}

// A full tile's groups into the tile at `dst`, `mine` this lane's group's first row.
__device__ __forceinline__ void copy_groups(unsigned dst, const elem_t* mine, const GroupCopy& c) {
#pragma unroll
    for (int g = 0; g < groups_per_tile; ++g) {
        const elem_t* src =
            reinterpret_cast<const elem_t*>(__shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(mine), g)) +
            c.src;
#pragma unroll
        for (int i = 0; i < copies_per_group; ++i)
            cp_async_16_zfill(dst + Tile::bytes(g * group_rows) + group_copy_dst(c, i), src + i * c.step, true);
    }
}

// L2 prefetch of the first ring tiles of CTA `work`'s unit, for the time before
// griddepcontrol.wait: launched programmatically, the CTA gets there while the kernel before it
// (the previous call's combine) still runs, and DRAM can start on its first tiles then. It reads
// kernel parameters and the block table only, and a prefetch changes no memory, so nothing it
// reads early can be wrong in a way that matters: a table entry the kernel before is still
// writing at worst prefetches another page of the pool (entries outside the pool are skipped),
// and lengths taken from p.seq_k (seqused_k may still be written) at worst other rows of the
// sequence's cache. Packed K/V (cu_seqlens_k) is left alone: its rows need the table.
// The epilogue's merge area, [key slice][packed row][column] words over the ring: where row
// `row` (key_slice * 16 + packed row) keeps column `col`. Columns are XOR-swizzled inside each
// 32-word block: a warp stores one accumulator element (e4m3's permuted columns) or pair (16-bit)
// per lane, every lane in the same column block of its own row, and row strides of D words put
// all of them in one bank (32 ways for e4m3, 8 for the pairs). Row bits 0-2 go to column bits
// 3, 4 and 2 (the four rows of a half warp's pairs land on distinct banks) and column bit 5 to
// bit 1 (e4m3's lanes 2t and 2t + 1 own columns 32 apart): e4m3 stores then conflict two ways,
// 16-bit pairs not at all. Bit 0 stays, so pairs stay whole for the float2 reads.
__device__ __forceinline__ int merged_index(int row, int col) {
    const int swizzle = ((row & 3) << 3) | (row & 4) | (((col >> 5) & 1) << 1);
    return row * head_dim + (col ^ swizzle);
}

__device__ __forceinline__ void prefetch_first_tiles(const AttentionParams& p, long long work, int splits, int tid) {
#if FC_DECODE_PREFETCH
    if (p.cu_seqlens_k != nullptr) return;
    const Unit unit = unit_of(p, work / splits);
    const int split = (int)(work % splits);
    // The split's share of the key tiles as if every key were visible.
    const KeyTiles every_key = {0, ceil_div(p.seq_k, kv_tile_rows), 0, 0};
    int first, last;
    split_tiles(every_key, split, splits, first, last);
    const int n = min(last - first, stages - 1);
    static_assert(num_threads >= 2 * kv_tile_rows, "a thread per K row and one per V row of a tile");
    if constexpr (num_threads > 2 * kv_tile_rows)  // D = 512's 32-key tiles: threads to spare
        if (tid >= 2 * kv_tile_rows) return;
    const bool is_k = tid < kv_tile_rows;  // threads [0, rows) take a K row, [rows, 2 rows) the same V row
    const void* base = is_k ? p.k : p.v;
    const long long batch_stride = is_k ? p.k_batch_stride : p.v_batch_stride;
    const long long head_stride = is_k ? p.k_head_stride : p.v_head_stride;
    const long long row_stride = is_k ? p.k_row_stride : p.v_row_stride;
    for (int t = 0; t < n; ++t) {
        const int j = (first + t) * kv_tile_rows + tid % kv_tile_rows;
        if (j >= p.seq_k) break;
        long long offset;
        if constexpr (paged_cache) {
            const PageRow at = page_row(p, j);
            if (at.slot >= p.max_blocks_per_seq) break;
            const int page = p.block_table[(long long)unit.b * p.max_blocks_per_seq + at.slot];
            if (page < 0 || page >= p.num_blocks) continue;
            offset = paged_row_offset(p, page, unit.h_kv, j, batch_stride, head_stride, row_stride);
        } else {
            offset = (long long)unit.b * batch_stride + (long long)j * row_stride + (long long)unit.h_kv * head_stride;
        }
        const char* row = reinterpret_cast<const char*>(Kv::row_ptr(base, offset));
        // A padded row ends at its own head dim (the last row of a tensor ends there too).
        const int row_bytes = padded ? 2 * (is_k ? p.head_dim : v_dim(p)) : Kv::kRowBytes;
#pragma unroll
        for (int line = 0; line < row_bytes; line += 128)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(row + line));
    }
#else
    (void)p, (void)work, (void)splits, (void)tid;
#endif
}

}  // namespace decode

using namespace decode;

extern "C" __global__ void __launch_bounds__(num_threads, FC_DECODE_MIN_BLOCKS)
    attention_decode_split(const __grid_constant__ AttentionParams p) {
    extern __shared__ __align__(128) unsigned char smem[];
    const unsigned smem_base = shared_address(smem);
    const unsigned q_tile = smem_base + q_offset;
    float* stats = reinterpret_cast<float*>(smem + stats_offset);  // [warp][row][max, sum]
    float* merged = reinterpret_cast<float*>(smem);                 // [warp][row][d], epilogue only

    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int group = lane / 4;
    const int tig = lane % 4;
    const int splits = p.num_splits;
    const int group_size = p.q_heads_per_kv;
    // This warp's keys of every tile, and its first column of O (its bytes into a V row).
    const int key_slice = warp / column_warps;
    const int warp_col0 = (warp % column_warps) * warp_cols;
    const unsigned warp_col_bytes = (unsigned)warp_col0 * 2;

    const long long units = (long long)p.batch * p.heads_kv * packed_q_tiles(p);
    if (!cache_matches(p)) __trap();  // K/V of another kind than this build loads
    // Programmatic dependent launch (sm_90): this grid waits for the kernel before it ahead of
    // its first global access (the sequence tables, Q, K/V) and of the workspace it overwrites,
    // which that kernel may still read. Only then may the combine (or the stream's next kernel)
    // start its CTAs, which wait for this grid in turn: signalled before the wait, a chain of
    // launches ran ahead, each kernel's waiting CTAs taking SM slots, and the two-split rows
    // ran 14-16 % slower (25afc0a).
    decode_trace::SplitTrace trace;
    trace.start();
    const GroupCopy k_copy = group_copy(p.k_row_stride, tid), v_copy = group_copy(p.v_row_stride, tid);
    if (blockIdx.x < units * splits) prefetch_first_tiles(p, blockIdx.x, splits, tid);
    griddep_wait();
    if (threadIdx.x == 0) griddep_launch_dependents();
    trace.mark(decode_trace::kWaited);
    for (long long work = blockIdx.x; work < units * splits; work += gridDim.x) {
        const long long u = work / splits;
        const int split = (int)(work % splits);
        const Unit unit = unit_of(p, u);
        const int b = unit.b, h_kv = unit.h_kv;
        const SeqInfo seq = seq_info(p, b);
        const int packed_rows = seq.len_q * group_size;
        const int r0 = unit.q_tile * q_tile_rows;
        if (r0 >= packed_rows) continue;  // past this sequence's queries: block-uniform
        const int rows = min(q_tile_rows, packed_rows - r0);
        const int q_first = r0 / group_size, q_last = (r0 + rows - 1) / group_size;
        const KeyTiles kt = visited_key_tiles(p, seq, q_first, q_last - q_first + 1, kv_tile_rows);
        // Splits of this unit: with chunks, past its last chunk there is nothing (block-uniform),
        // and one chunk is written as an unsplit unit's output, whatever the others need.
        int own_splits = splits;
        int kb0, kb1;
        if constexpr (chunk_tiles() > 0) {
            own_splits = unit_splits(kt, splits);
            if (split >= own_splits) continue;
            chunk_of(kt, split, own_splits, kb0, kb1);
        } else {
            split_tiles(kt, split, splits, kb0, kb1);
        }
        const int n_tiles = kb1 - kb0;

        // This lane's two packed rows (group, group + 8) as query rows and heads.
        const PackedRow lane_row[2] = {packed_row(p, h_kv, r0 + group), packed_row(p, h_kv, r0 + group + 8)};
        const int q_row[2] = {lane_row[0].q_row, lane_row[1].q_row};

        // Row offsets count elements (bytes for e4m3); the loaders count the tile's 16-bit words.
        const long long k_first = paged_cache ? 0 : k_row_offset(p, seq, b, h_kv, 0);
        const long long v_first = paged_cache ? 0 : v_row_offset(p, seq, b, h_kv, 0);
        // One 64-key tile of K or V, by the build's cache (FC_DECODE_KV_CACHE): strided, inside
        // one page (strided from its first row), or one page lookup per 16-row group (small
        // pages: a sequence's last tile; the others go through copy_groups).
        // `page`: the tile's page where the build's pages hold whole tiles (tile_page), read one
        // iteration ahead of the tile's copies.
        auto load_kv = [&](unsigned dst, const void* base, long long first, long long row_stride, bool is_k, int k0,
                           int page) {
            const int valid = min(kv_tile_rows, seq.len_k - k0);
            const long long word_stride = row_stride / Kv::kElemsPerWord;
            // A padded build's 16-byte chunks of the tensor's rows (the rest zero-filled).
            const int chunks = head_chunks<padded, head_dim>(is_k ? p.head_dim : v_dim(p));
            // Row j's place in page `page_j` (kv_row_offset's paged branch: the build says it is
            // paged), and in the page the table gives it.
            auto offset_in_page = [&](int page_j, int j) {
                return is_k ? paged_row_offset(p, page_j, h_kv, j, p.k_batch_stride, p.k_head_stride, p.k_row_stride)
                            : paged_row_offset(p, page_j, h_kv, j, p.v_batch_stride, p.v_head_stride, p.v_row_stride);
            };
            auto page_offset = [&](int j) { return offset_in_page(page_of_row(p, b, j), j); };
            if constexpr (kv_cache == page_groups)
                load_tile_groups_async<kv_tile_rows, Kv::kTileCols, num_threads, padded>(
                    dst, [&](int g) { return Kv::row_ptr(base, page_offset(k0 + 16 * g)); }, word_stride, valid, tid,
                    chunks);
            else if constexpr (kv_cache == page_tiles)
                load_tile_async<kv_tile_rows, Kv::kTileCols, num_threads, padded>(
                    dst, Kv::row_ptr(base, offset_in_page(page, k0)), word_stride, valid, tid, chunks);
            else
                load_tile_async<kv_tile_rows, Kv::kTileCols, num_threads, padded>(
                    dst, Kv::row_ptr(base, first + (long long)k0 * row_stride), word_stride, valid, tid, chunks);
        };
        // copy_groups' geometry is the 16-bit tile's whole rows: e4m3 pages and padded rows take
        // load_tile_groups_async.
        // (At D = 512 a pass covers 2 rows, which copy_groups' swizzle arithmetic does not take.)
        constexpr bool group_copies = kv_cache == page_groups && !Kv::kE4m3 && !padded && head_dim <= 256;
        auto load_stage = [&](int slot, int tile, int page) {
            const int k0 = tile * kv_tile_rows;
            if constexpr (group_copies) {
                if (seq.len_k - k0 >= kv_tile_rows) {
                    const GroupRows first = group_first_rows(p, b, h_kv, k0, lane);
                    copy_groups(smem_base + k_slot(slot), first.k, k_copy);
                    copy_groups(smem_base + v_slot(slot), first.v, v_copy);
                    return;
                }
            }
            load_kv(smem_base + k_slot(slot), p.k, k_first, p.k_row_stride, true, k0, page);
            load_kv(smem_base + v_slot(slot), p.v, v_first, p.v_row_stride, false, k0, page);
        };
        // The page of tile `tile` where a page holds whole tiles (0 for the other builds, unused).
        auto tile_page = [&](int tile) { return kv_cache == page_tiles ? page_of_row(p, b, tile * kv_tile_rows) : 0; };

        // e4m3: the unit's descales (the key one scales the logits, the value one O below).
        const float k_descale = Kv::kE4m3 ? kv_descale(p, p.k_descale, b, h_kv) : 1.f;
        float o[out_tiles][4];
        zero_accumulator(o);
        SoftmaxRows st;
        softmax_init(st);

        if (n_tiles > 0) {
            // Q: packed rows gathered one 16-byte chunk at a time (each row is its own head's
            // row); rows past the sequence's queries are zero-filled, never read.
            constexpr int q_chunks = q_tile_rows * Tile::kChunksPerRow;
            for (int i = tid; i < q_chunks; i += num_threads) {
                const int r = i / Tile::kChunksPerRow, chunk = i % Tile::kChunksPerRow;
                const bool in_head = chunk_in_head<padded>(p.head_dim, chunk);
                const bool valid = r < rows && in_head;
                const PackedRow pr = packed_row(p, h_kv, r0 + (r < rows ? r : 0));
                // (A padded chunk's unread source is its row's first chunk.)
                const elem_t* src = static_cast<const elem_t*>(p.q) + seq_q_offset(p, seq, b, pr.head, pr.q_row) +
                                    (in_head ? chunk * 8 : 0);
                cp_async_16_zfill(q_tile + Tile::offset(r, chunk) * 2, src, valid);
            }
            load_stage(0, kb0, tile_page(kb0));
            cp_async_commit();
#pragma unroll
            for (int i = 1; i < stages - 1; ++i) {
                if (i < n_tiles) load_stage(i, kb0 + i, tile_page(kb0 + i));
                cp_async_commit();
            }
            // The next tile's page, read an iteration before its copies are issued: its latency
            // then passes under a tile's compute instead of delaying the copies.
            int next_page = kv_cache == page_tiles && stages - 1 < n_tiles ? tile_page(kb0 + stages - 1) : 0;

            FragA q_frag[head_dim / 16];  // (never touched, so never allocated, at D = 256)
            typename Kv::QScale q_scale{};
            for (int t = 0; t < n_tiles; ++t) {
                cp_async_wait<stages - 2>();  // tile t (and Q) have landed
                // Tile t is visible to every warp, and every warp is past tile t-1, whose slot
                // the next load reuses.
                __syncthreads();
                if (t == 0) {
                    trace.mark(decode_trace::kFirstTile);
                    q_scale = Kv::q_scale(q_tile, lane);
                    if constexpr (q_in_registers) Kv::load_q(q_frag, q_scale, q_tile, lane);
                }
                if (t + stages - 1 < n_tiles) {
                    load_stage((t + stages - 1) % stages, kb0 + t + stages - 1, next_page);
                    if constexpr (kv_cache == page_tiles)
                        if (t + stages < n_tiles) next_page = tile_page(kb0 + t + stages);
                }
                cp_async_commit();

                const int slot = t % stages;
                const int tile_k0 = (kb0 + t) * kv_tile_rows;
                const int k0 = tile_k0 + key_slice * warp_keys;  // this warp's first key
                const unsigned warp_rows = KvTile::bytes(key_slice * warp_keys);
                float s[warp_keys / 8][4];
                if constexpr (q_in_registers)
                    Kv::template qk<warp_keys>(s, q_frag, q_scale, smem_base + k_slot(slot) + warp_rows, lane);
                else
                    Kv::template qk_q_in_smem<warp_keys>(s, q_tile, q_scale, smem_base + k_slot(slot) + warp_rows,
                                                         lane);
                if (has_score_mod(p)) {
                    ScoreMod mod[2] = {score_mod(p, seq, b, lane_row[0].head), score_mod(p, seq, b, lane_row[1].head)};
                    if constexpr (Kv::kE4m3)
                        for (ScoreMod& m : mod) m.scale_log2 *= k_descale, m.softcap_pre *= k_descale;
                    modify_scores_rows(s, mod, q_row, k0 + 2 * tig);
                } else {
                    scale_scores(s, Kv::kE4m3 ? p.scale_log2 * k_descale : p.scale_log2);
                }
                if (tile_needs_mask(kt, tile_k0, kv_tile_rows)) {  // lengths, causal, window edges
                    const KeyRange a = key_range(p, seq, q_row[0]), c = key_range(p, seq, q_row[1]);
                    const int lo[2] = {a.lo - k0, c.lo - k0};
                    const int hi[2] = {a.hi - k0, c.hi - k0};
                    mask_scores_range(s, 2 * tig, lo, hi);
                }
                online_softmax_update(s, o, st);
                Kv::template pv<warp_keys, warp_cols>(o, s, smem_base + v_slot(slot) + warp_rows + warp_col_bytes,
                                                      lane);
            }
            cp_async_wait<0>();
            __syncthreads();  // every warp is done with the ring: the merge may overwrite it
            trace.mark(decode_trace::kLoopDone);
        }

        if constexpr (Kv::kE4m3) {
            // (P went to f16 times 2^14: kv_operand.cuh.)
            const float v_descale = kv_descale(p, p.v_descale, b, h_kv) * e4m3::kPDown;
#pragma unroll
            for (int j = 0; j < out_tiles; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) o[j][e] *= v_descale;
        }
        // Merge the warps' key slices: each row's (max, sum) and unnormalised O (the warps of
        // one slice hold the same max and sum, and their own columns).
        // (opaque: the merge's addresses are worked out here, not hoisted over the mainloop into
        // registers of their own: 236 registers at D = 512 without it, 206 with.)
        const int merge_group = opaque(group);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = merge_group + 8 * r;
            const float l = quad_sum(st.row_sum[r]);
            if (tig == 0 && warp_col0 == 0) {
                stats[(key_slice * q_tile_rows + row) * 2] = st.row_max[r];
                stats[(key_slice * q_tile_rows + row) * 2 + 1] = l;
            }
            const int merged_row = key_slice * q_tile_rows + row;
#pragma unroll
            for (int j = 0; j < out_tiles; ++j) {
                if constexpr (Kv::kE4m3) {  // columns in the order the V bytes came (kv_operand.cuh)
                    merged[merged_index(merged_row, warp_col0 + Kv::out_col(j, 2 * tig))] = o[j][2 * r];
                    merged[merged_index(merged_row, warp_col0 + Kv::out_col(j, 2 * tig + 1))] = o[j][2 * r + 1];
                } else {
                    *reinterpret_cast<float2*>(&merged[merged_index(merged_row, warp_col0 + 8 * j + 2 * tig)]) =
                        make_float2(o[j][2 * r], o[j][2 * r + 1]);
                }
            }
        }
        __syncthreads();

        for (int i = tid; i < q_tile_rows * head_dim / 2; i += num_threads) {
            const int row = i / (head_dim / 2);
            const int col = 2 * (i % (head_dim / 2));
            if (row >= rows) continue;
            float m = -FC_INF;
#pragma unroll
            for (int w = 0; w < key_slices; ++w) m = fmaxf(m, stats[(w * q_tile_rows + row) * 2]);
            float l = 0.f, o0 = 0.f, o1 = 0.f;
#pragma unroll
            for (int w = 0; w < key_slices; ++w) {
                const float mw = stats[(w * q_tile_rows + row) * 2];
                const float lw = stats[(w * q_tile_rows + row) * 2 + 1];
                // A warp that saw no visible key (max still -inf) has l = 0 and O = 0: weight 0.
                // Its max also stays -inf when every score it saw was NaN; then l is NaN and so
                // must the row be.
                const float weight = mw == -FC_INF ? (lw == 0.f ? 0.f : FC_QNAN) : fast_exp2(mw - m);
                const float2 ow = *reinterpret_cast<const float2*>(&merged[merged_index(w * q_tile_rows + row, col)]);
                l += weight * lw;
                o0 += weight * ow.x;
                o1 += weight * ow.y;
            }
            const PackedRow pr = packed_row(p, h_kv, r0 + row);
            if (own_splits == 1) {
                const KeyRange keys = key_range(p, seq, pr.q_row);
                const bool sees_keys = keys.hi > keys.lo;
                const float scale = final_scale(l, sees_keys);
                elem_t* o_row = static_cast<elem_t*>(p.o) + seq_o_offset(p, seq, b, pr.head, pr.q_row);
                // (A padded build's columns past V's are zeros, stored nowhere; its partials keep
                // them, so the combine reads only written words.)
                if (!padded || col < v_dim(p))
                    *reinterpret_cast<elem2_t*>(o_row + col) = pack2(o0 * scale, o1 * scale);
                if (col == 0 && p.lse != nullptr)
                    p.lse[seq_lse_offset(p, seq, b, pr.head, pr.q_row)] = final_lse(m, l, sees_keys);
            } else {
                // The split's share: O normalised by its own sum and its log2-LSE (-inf: no key).
                const float inv = l != 0.f ? 1.f / l : 0.f;
                const long long slot = partial_row(p, u, split, row);
                *reinterpret_cast<float2*>(&workspace_of(p)[slot * head_dim + col]) = make_float2(o0 * inv, o1 * inv);
                if (col == 0) workspace_of(p)[partial_lse_base(p, units) + slot] = l != 0.f ? m + __log2f(l) : -FC_INF;
            }
        }
        __syncthreads();  // the stats and merge area are free for the next unit
    }
    trace.finish();
}

// Merges the splits of every packed row, in split order (deterministic): the log-sum-exp of the
// splits' LSEs, and their O rows weighted by exp2(lse_s - lse). A warp takes one 64-column slice
// of one packed row (a float2 a lane), so a row of D columns is D / 64 warps' work and a lane
// holds up to combine_batch splits' loads at once: split s's LSE is read by lane s % 32, and the
// first combine_batch splits' O columns are loaded with the LSEs, so up to 32 splits cost one
// round trip to L2 (a lane of the warp-per-row combine this replaced held D / 32 columns, and past
// 16 splits read four splits a round trip: 8.7 us for 33 splits of the one-sequence long row,
// docs/results/2026-11-30-decode-long-row-h200). Later batches take their weights from shared
// memory. Items run (unit, packed row, slice) with only the rows a unit can have
// (combine_rows), four to a block.
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

extern "C" __global__ void __launch_bounds__(combine_warps * 32)
    attention_decode_combine(const __grid_constant__ AttentionParams p) {
    __shared__ float split_weight[combine_warps][max_splits];
    // Launched programmatically after the split kernel (sm_90): its partials are read only after
    // it has completed; then the stream's next kernel may start its setup.
    decode_trace::CombineTrace trace;
    trace.start();
    griddep_wait();
    trace.released();
    if (threadIdx.x == 0) griddep_launch_dependents();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int splits = p.num_splits;
    const long long units = (long long)p.batch * p.heads_kv * packed_q_tiles(p);
    const long long lse_base = partial_lse_base(p, units);
    const int unit_rows = combine_rows(p);
    const long long items = units * unit_rows * col_slices;
    for (long long item = (long long)blockIdx.x * combine_warps + warp; item < items;
         item += (long long)gridDim.x * combine_warps) {
        const int slice = (int)(item % col_slices);
        const long long unit_row = item / col_slices;
        const long long u = unit_row / unit_rows;
        const int row = (int)(unit_row % unit_rows);
        const Unit unit = unit_of(p, u);
        const SeqInfo seq = seq_info(p, unit.b);
        const int r = unit.q_tile * q_tile_rows + row;
        if (r >= seq.len_q * p.q_heads_per_kv) continue;  // warp-uniform
        // The splits that carry this unit's keys: its chunks in a batch-invariant plan, where a
        // unit of one chunk was written whole by the split kernel.
        int n = splits;
        if constexpr (chunk_tiles() > 0) {
            const int r0 = unit.q_tile * q_tile_rows;
            const int rows = min(q_tile_rows, seq.len_q * p.q_heads_per_kv - r0);
            const int q_first = r0 / p.q_heads_per_kv, q_last = (r0 + rows - 1) / p.q_heads_per_kv;
            n = unit_splits(visited_key_tiles(p, seq, q_first, q_last - q_first + 1, kv_tile_rows), splits);
            if (n == 1) continue;
        }
        const int col = slice * combine_cols + 2 * lane;
        auto o_of = [&](int s) {
            return *reinterpret_cast<const float2*>(&workspace_of(p)[partial_row(p, u, s, row) * head_dim + col]);
        };
        // The first batch's O columns and every LSE, issued together.
        float2 v[combine_batch];
#pragma unroll
        for (int s = 0; s < combine_batch; ++s)
            if (s < n) v[s] = o_of(s);
        float lse_s[lse_per_lane];
        float m = -FC_INF;
#pragma unroll
        for (int i = 0; i < lse_per_lane; ++i) {
            const int s = lane + 32 * i;
            lse_s[i] = s < n ? workspace_of(p)[lse_base + partial_row(p, u, s, row)] : -FC_INF;
            m = fmaxf(m, lse_s[i]);
        }
        for (int x = 16; x > 0; x >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, x));
        float sum = 0.f;
        if (m != -FC_INF) {
#pragma unroll
            for (int i = 0; i < lse_per_lane; ++i) sum += fast_exp2(lse_s[i] - m);  // 2^-inf = 0
        }
        for (int x = 16; x > 0; x >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, x);
        // sum is 0 exactly when no split saw a visible key (every lse_s = -inf); NaN propagates.
        const float lse2 = m + __log2f(sum);
        const float weight_l = fast_exp2(lse_s[0] - lse2);  // split `lane`'s (0 past n)
        float2 acc = make_float2(0.f, 0.f);
        if (sum != 0.f) {
#pragma unroll
            for (int s = 0; s < combine_batch; ++s) {
                if (s < n) {
                    const float w = __shfl_sync(0xffffffffu, weight_l, s);
                    acc.x += w * v[s].x;
                    acc.y += w * v[s].y;
                }
            }
            if (n > combine_batch) {
#pragma unroll
                for (int i = 1; i < lse_per_lane; ++i)
                    if (lane + 32 * i < n) split_weight[warp][lane + 32 * i] = fast_exp2(lse_s[i] - lse2);
                __syncwarp();
                for (int s0 = combine_batch; s0 < n; s0 += combine_batch) {
#pragma unroll
                    for (int s = 0; s < combine_batch; ++s)
                        if (s0 + s < n) v[s] = o_of(s0 + s);
#pragma unroll
                    for (int s = 0; s < combine_batch; ++s) {
                        if (s0 + s < n) {
                            const float w = split_weight[warp][s0 + s];
                            acc.x += w * v[s].x;
                            acc.y += w * v[s].y;
                        }
                    }
                }
                __syncwarp();  // the weights are read before the next item overwrites them
            }
        }
        // sum = 0 means no split saw a visible key: the defined empty row, or NaN where keys were
        // visible (all logits -inf). A padded build stores only V's columns (V's head dim is
        // even, so a pair is stored whole or not at all).
        const PackedRow pr = packed_row(p, unit.h_kv, r);
        const KeyRange keys = key_range(p, seq, pr.q_row);
        const bool sees_keys = keys.hi > keys.lo;
        const float undefined = (sum == 0.f && sees_keys) ? FC_QNAN : 1.f;
        elem_t* o_row = static_cast<elem_t*>(p.o) + seq_o_offset(p, seq, unit.b, pr.head, pr.q_row);
        if (!padded || col < v_dim(p))
            *reinterpret_cast<elem2_t*>(o_row + col) = pack2(acc.x * undefined, acc.y * undefined);
        if (slice == 0 && lane == 0 && p.lse != nullptr)
            p.lse[seq_lse_offset(p, seq, unit.b, pr.head, pr.q_row)] =
                sum != 0.f ? lse2 * FC_LN2 : (sees_keys ? FC_QNAN : FC_INF);
    }
    trace.finish();
}
