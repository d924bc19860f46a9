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
// Masks and modes (docs/MODES.md) plug in through the shared headers: common/seqlen.cuh gives the
// sequence's lengths and the key tiles a query tile visits (causal, window, per-sequence lengths:
// tiles outside are never loaded; tiles that are not fully visible to every row run the element
// mask, all others skip it), common/score_mod.cuh turns q·k into logits (scale, softcap, ALiBi)
// and common/kv_rows.cuh finds K/V rows (strided or paged).
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
#include "common/seqlen.cuh"
#include "common/kv_rows.cuh"
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

// A paged tile by 16-row groups whose pages the caller read a tile ahead (lane g holds group g's
// address): only rows wide enough for the warps to share addresses (D >= 64; see async_copy.cuh).
__device__ __forceinline__ void load_groups_ahead(unsigned dst, const elem_t* lane_group, long long row_stride,
                                                  int rows, int tid) {
    if constexpr (2 * head_dim >= num_threads)
        load_tile_groups_async_from<kv_tile_rows, head_dim, num_threads>(dst, lane_group, row_stride, rows, tid);
}
static_assert(kv_tile_rows == 64, "ahead_row (the kernel) takes lane % 4 as a tile's 16-row group");

}  // namespace tile64

// Blocks per SM the register allocation is sized for (__launch_bounds__ minBlocksPerSM): the
// largest count that still compiles without spills (ptxas, sm_80..sm_90a). D=128 at 3 blocks
// (168 registers) spills, so it gets 2 (8 warps per SM); D=256 needs every register. D=96 held
// 3 blocks until the inference modes (sequence tables, paged rows, score modifiers) cost it a few
// registers: at 168 it spilled 12-28 bytes on sm_80, so it gets 2 as well (on sm_86/89 shared
// memory allowed only 2 blocks of 48 KiB anyway). D=32 reading mm_prefix_ranges spilled 8 bytes
// on sm_80 at 4 blocks (128 registers), so that build gets 3.
// Overridable with -DFC_TILE64_MIN_BLOCKS=n for tuning runs.
#ifndef FC_TILE64_MIN_BLOCKS
#if FC_HEAD_DIM <= 32 && !FC_MM_PREFIX
#define FC_TILE64_MIN_BLOCKS 4
#elif FC_HEAD_DIM <= 32
#define FC_TILE64_MIN_BLOCKS 3
#elif FC_HEAD_DIM <= 64
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
        const QTileItem item_tile = q_tile_item<q_tile_rows, kv_tile_rows>(p, item, num_q_tiles);
        const int b = item_tile.b, h = item_tile.h, h_kv = item_tile.h_kv, q0 = item_tile.q0;
        const SeqInfo seq = seq_info(p, b);
        if (q0 >= seq.len_q) continue;  // past this sequence's end (seq_q is the longest): block-uniform
        const int q_rows = min(q_tile_rows, seq.len_q - q0);
        const KeyTiles kt = visited_key_tiles(p, seq, q0, q_rows, kv_tile_rows);
        const int row_lo = q0 + warp_row0 + group;
        // (The rows' key ranges and the score modifier are recomputed where they are used, not
        // kept in registers across the K/V loop: D = 96 has 168 registers and no more.)

        const elem_t* q_ptr = static_cast<const elem_t*>(p.q) + seq_q_offset(p, seq, b, h, q0);
        const bool paged = p.block_table != nullptr;
        // Paged K/V: a tile inside one page (block size a multiple of the tile) is strided from its
        // first row; smaller pages go by 16-row groups, lane g of each warp finding group g. Either
        // way each thread's page (`page_ahead`: that of row ahead_row(k0), group lane % 4 of the
        // tile, or group 0 where that group holds no key) is read a tile before the tile is loaded,
        // once for K and V, so the table's latency is off the issuing warps' path. Narrow rows
        // (D = 32) split groups over the block differently and keep a lookup per group and load.
        const bool one_page = paged && p.block_size % kv_tile_rows == 0;
        const bool pages_ahead = one_page || (paged && 2 * head_dim >= num_threads);
        int page_ahead = 0;
        auto ahead_row = [&](int k0) {
            const int j = k0 + 16 * (lane & 3);
            return j < seq.len_k ? j : k0;
        };
        auto read_page_ahead = [&](int k0) {
            if (pages_ahead) page_ahead = page_of_row(p, b, ahead_row(k0));
        };
        // Strided K/V: row j at k_ptr + j * row_stride; paged ones from the tensor's base (one
        // pointer each either way: D = 96 has no registers to spare).
        const elem_t* k_ptr = static_cast<const elem_t*>(p.k) + (paged ? 0 : k_row_offset(p, seq, b, h_kv, 0));
        const elem_t* v_ptr = static_cast<const elem_t*>(p.v) + (paged ? 0 : v_row_offset(p, seq, b, h_kv, 0));
        // One K or V tile (keys [k0, k0 + 64)) from `base` with that tensor's strides.
        auto load_kv = [&](unsigned dst, int k0, const elem_t* base, long long batch_stride, long long head_stride,
                           long long row_stride) {
            const int rows = min(kv_tile_rows, seq.len_k - k0);
            if (one_page)
                load_tile_async<kv_tile_rows, head_dim, num_threads>(
                    dst, base + paged_row_offset(p, page_ahead, h_kv, k0, batch_stride, head_stride, row_stride),
                    row_stride, rows, tid);
            else if (pages_ahead)
                load_groups_ahead(
                    dst, base + paged_row_offset(p, page_ahead, h_kv, ahead_row(k0), batch_stride, head_stride, row_stride),
                    row_stride, rows, tid);
            else if (paged)
                load_tile_groups_async<kv_tile_rows, head_dim, num_threads>(
                    dst,
                    [&](int g) {
                        return base + kv_row_offset(p, seq, b, h_kv, k0 + 16 * g, batch_stride, head_stride, row_stride);
                    },
                    row_stride, rows, tid);
            else
                load_tile_async<kv_tile_rows, head_dim, num_threads>(dst, base + (long long)k0 * row_stride, row_stride,
                                                                     rows, tid);
        };
        auto load_k = [&](unsigned dst, int k0) {
            load_kv(dst, k0, k_ptr, p.k_batch_stride, p.k_head_stride, p.k_row_stride);
        };
        auto load_v = [&](unsigned dst, int k0) {
            load_kv(dst, k0, v_ptr, p.v_batch_stride, p.v_head_stride, p.v_row_stride);
        };

        float o[out_tiles][4];
        zero_accumulator(o);
        SoftmaxRows st;
        softmax_init(st);

        if (kt.end > kt.first) {
            // Prologue: group 1 = Q + K(first), group 2 = V(first). The previous item ended on a
            // barrier after its last shared-memory read, so every buffer is free.
            load_tile_async<q_tile_rows, head_dim, num_threads>(q_tile, q_ptr, p.q_row_stride, q_rows, tid);
            read_page_ahead(kt.first * kv_tile_rows);
            load_k(smem_base + k_buffer(0), kt.first * kv_tile_rows);
            cp_async_commit();
            load_v(smem_base + v_buffer(0), kt.first * kv_tile_rows);
            cp_async_commit();
            if (kt.first + 1 < kt.end) read_page_ahead((kt.first + 1) * kv_tile_rows);
            cp_async_wait<1>();  // Q and K(first) have landed (V(first) may still be in flight)
            __syncthreads();

            FragA q_frag[head_dim / 16];
            if constexpr (q_in_registers) load_q_fragments<head_dim>(q_frag, q_tile, warp_row0, lane);

            for (int n = kt.first; n < kt.end; ++n) {
                const int buf = (n - kt.first) & 1;
                const int k0 = n * kv_tile_rows;
                const bool has_next = n + 1 < kt.end;
                const int next_k0 = k0 + kv_tile_rows;  // only used when has_next (then < len_k)

                // K(n+1) -> K[buf^1]: its previous reader, Q·K(n-1)ᵀ, finished before the
                // barrier that ended iteration n-1. An empty group keeps the wait counts uniform.
                if (has_next) load_k(smem_base + k_buffer(buf ^ 1), next_k0);
                cp_async_commit();

                float s[key_tiles][4];
                if constexpr (q_in_registers)
                    warp_qk<head_dim, kv_tile_rows>(s, q_frag, smem_base + k_buffer(buf), lane);
                else
                    warp_qk_q_in_smem<head_dim, kv_tile_rows>(s, q_tile, warp_row0, smem_base + k_buffer(buf), lane);

                if (has_score_mod(p))
                    modify_scores(s, score_mod(p, seq, b, h), row_lo, k0 + 2 * tig);
                else
                    scale_scores(s, p.scale_log2);
                if (tile_needs_mask(kt, k0, kv_tile_rows)) {  // lengths, causal diagonal, window edges
                    const KeyRange r0 = key_range(p, seq, row_lo), r1 = key_range(p, seq, row_lo + 8);
                    const int lo[2] = {r0.lo - k0, r1.lo - k0};
                    const int hi[2] = {r0.hi - k0, r1.hi - k0};
                    mask_scores_range(s, 2 * tig, lo, hi);
                }
                online_softmax_update(s, o, st);

                cp_async_wait<1>();  // V(n) has landed (K(n+1) may still be in flight)
                // V(n) is visible to every warp; every warp is past P·V(n-1), so V[buf^1] is free,
                // and past its Q fragment load (Q is staged in V buffer 1).
                __syncthreads();
                if (has_next) load_v(smem_base + v_buffer(buf ^ 1), next_k0);
                cp_async_commit();
                // The page of tile n + 2, read now and used next iteration (after the PV below).
                if (n + 2 < kt.end) read_page_ahead(next_k0 + kv_tile_rows);

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
        // n8 tile. Rows past the sequence's end are never written.
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = row_lo + 8 * r;
            if (row < seq.len_q) {
                // l = 0 with visible keys means all logits -inf (infinite inputs): NaN, as the
                // f64 reference; with no visible key it is the defined empty row.
                const KeyRange keys = key_range(p, seq, row);
                const float undefined = (lse[r] == FC_INF && keys.hi > keys.lo) ? FC_QNAN : 1.f;
                elem_t* o_row = static_cast<elem_t*>(p.o) + seq_o_offset(p, seq, b, h, row);
#pragma unroll
                for (int j = 0; j < out_tiles; ++j)
                    *reinterpret_cast<elem2_t*>(o_row + 8 * j + 2 * tig) = pack2(o[j][2 * r] * undefined, o[j][2 * r + 1] * undefined);
                if (tig == 0 && p.lse != nullptr) p.lse[seq_lse_offset(p, seq, b, h, row)] = lse[r] * undefined;
            }
        }
    }
}
