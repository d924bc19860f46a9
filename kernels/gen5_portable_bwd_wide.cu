// Generation 5, portable path: the deterministic backward on 32-row warp tiles (sm_80+, where
// shared memory holds them; crates/gen5-persistent/src/backward.rs, `Tiling`). Launch 1
// (D = rowsum(dO ∘ O)), the dQ pass above head_dim 64 and the 16-row kernels for 99 KiB devices
// are gen5_portable_bwd.cu's.
//
// Why: on mma.sync the backward's products were bound by shared-memory reads, and a warp that owns
// 16 rows reads half again as many operand bytes per product as one that owns 32
// (common/warp_gemm.cuh). FlashAttention-2's tiling, kept deterministic: dQ has its own pass, no
// atomics, every gradient element summed by one warp in a fixed order
// (docs/generations/gen5-portable-bwd.md).
//
// bwd_portable_dk_dv_wide, one block per (key tile, batch, KV head), streaming the query tiles
// of every query head of the group that see those keys (walk_steps), in two layouts:
//   head_dim 96 and up: 8 warps, 64 queries a step. 32 keys' dK and dV over the whole head dim
//     would take 2·head_dim registers, so the warps split the work in two phases:
//       1. each warp a tile of Sᵀ = K·Qᵀ → Pᵀ, dPᵀ = V·dOᵀ → dSᵀ = Pᵀ ∘ (dPᵀ − D), stored as
//          elem_t into [keys][queries] tiles;
//       2. each warp dV += Pᵀ·dO, dK += dSᵀ·Q for its keys × a share of the columns.
//     Up to head_dim 128: 128 keys a block; step 1 tiles of 32 keys × 32 queries, step 2 of 32
//     keys × head_dim/2. Above (FlashAttention-2's 64 × 64 tiles there): 64 keys a block, so a
//     warp's dK and dV take head_dim / 2 registers; step 1 tiles of 32 × 16, step 2 of 32 keys ×
//     head_dim/4 (192, 256) or 16 keys × head_dim/2 (160, 224: a quarter is no whole 16-column
//     read). FC_BWD_STEP32 (above 128 only, where 64-query buffers do not fit the device's
//     shared memory): 32 queries a step, step 1 tiles of 16 × 16.
//   head_dim 32, 64: 4 warps of 32 keys, 128 keys a block, 32 queries a step. A warp's dK and dV
//     fit, so it feeds its own Pᵀ and dSᵀ from the accumulators into dV and dK (no shared round
//     trip, one barrier). (The atomic schedule's padded 64 build takes the layout above:
//     FC_BWD_TWO_PHASE.)
// bwd_portable_dq_wide (head_dim 32, 64), one block of 4 warps per (128-row query tile, batch,
//   head): each warp's 32 rows walk the keys 32 at a time, S → P, dP → dS, dQ += dS·K.
//
// FC_BWD_ATOMIC_DQ builds FA2's schedule on these tiles (the `persistent-portable-atomic`
// backward): each step of the dK/dV pass also computes dQ = dS·K for its queries over its block's
// keys from the dSᵀ shared tile (a fifth product per tile pair, against the deterministic schedule's
// seven) and adds it into an f32 accumulator with 16-byte reductions straight from registers
// (common/dq_accumulator.cuh); bwd_portable_dq_convert then scales and rounds it into dQ. The
// order of the additions, and so the last bits of dQ, vary from run to run.
// FC_BWD_STEP64 (the plan's choice on sm_90; FLASHCORE_PORTABLE_BWD_STEP_QUERIES=32|64 overrides
// it): at head_dim <= 64 the dK/dV pass of either schedule takes 64 queries a step, each warp's
// products in two 32-query halves, with one barrier (and, atomic, one dQ product) per 64 queries
// (3-10 % faster on the H100, 31e7ea5).
//
// FC_BWD_MODES: sliding windows, softcap and ALiBi (common/backward_scores.cuh), as in
// gen5_portable_bwd.cu: a key tile walks the query tiles that see it (KeyItem's first and end), a
// query tile the key tiles it sees; each step's two products come first, then P and dS together
// (bwd_tile_scores), so dS can take softcap's 1 − tanh² of the raw score.
// FC_BWD_VARLEN (a modes build): packed sequences with cu_seqlens, as in gen5_portable_bwd.cu.
//
// Tails: rows past a sequence's end are zero-filled by cp.async; queries past seq_q get
// LSE = +inf (P = 0 exactly); keys past seq_k take the element mask in the dQ pass and in the
// dK/dV pass only reach their own rows, which are not written. A padded head dim
// (FC_BWD_PADDED_HEAD, as in gen5_portable_bwd.cu) reads and writes nothing past p.head_dim: the
// loads zero-fill the columns past it and the stores skip them.
//
// Tried and not kept (2026-11-26, 090c856): the dQ pass
// in the two-phase tiling at D = 128 (868 µs against the 16-row kernel's 815 under ncu at
// (4,16,2048,128)); 4-warp blocks of the two-phase layout (level at D = 128, 10 % slower at
// (8,32,4096,128)); the two-phase layout at D = 64 (728 against 685 µs).
#include "common/params.cuh"
#include "common/types.cuh"
#include "common/tensor_index.cuh"
#include "common/masking.cuh"
#include "common/smem_layout.cuh"
#include "common/mma.cuh"
#include "common/warp_gemm.cuh"
#include "common/async_copy.cuh"
#include "common/backward_params.cuh"
#include "common/work_item.cuh"
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
// The dK/dV pass's two-phase layout (8 warps, Pᵀ and dSᵀ through shared memory): above head_dim
// 64, and in the atomic schedule's padded 64 build (FC_BWD_TWO_PHASE), where the register path,
// at 253-255 registers already, spilled 4-52 bytes with the padded columns' bounds.
#if FC_HEAD_DIM > 64 || defined(FC_BWD_TWO_PHASE)
#define FC_BWD_TWO_PHASE_LAYOUT 1
#else
#define FC_BWD_TWO_PHASE_LAYOUT 0
#endif

#define FC_LOG2E 1.4426950408889634f

namespace wide_bwd {

constexpr int head_dim = FC_HEAD_DIM;
static_assert(head_dim % 32 == 0 && head_dim >= 32 && head_dim <= 256,
              "the portable backward is built for head_dim 32, 64, .., 256");
enum : bool { PADDED_HEAD = FC_BWD_PADDED_HEAD != 0 };  // (an enum: a constexpr bool became a PTX global)

constexpr int warp_rows = 32;  // two m16 slices per warp
constexpr int row_tiles = warp_rows / 16;
using RowTile = SwizzledTile<head_dim>;

#if defined(FC_BWD_ATOMIC_DQ)
using DqAcc = PortableDqAccumulator;
// k steps of the dQ product unrolled: rolled, every step waited on its ldmatrix (a profile of
// 2026-11-26); unrolled by 4 it ran 2-5 % faster, by all 8 another 1-3 % (af6a7fc:
// at D = 128 with the paired Sᵀ/dPᵀ loop). At D <= 64 below sm_90, 8 spills.
#if defined(FC_BWD_STEP64) && FC_HEAD_DIM <= 64
constexpr int dq_k_unroll = 4;  // 64-query steps, one 32-row tile a warp: the build measured (31e7ea5)
#elif FC_HEAD_DIM > 128
constexpr int dq_k_unroll = 2;  // (64 keys: 4 steps) beside dK and dV of 64 keys, all 4 spilled on sm_90a
#elif FC_BWD_TWO_PHASE_LAYOUT || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)
constexpr int dq_k_unroll = 8;
#else
constexpr int dq_k_unroll = 4;
#endif
// Per (Q, dO) buffer, the address of its step's dQ accumulator block, written with the step's row
// statistics: kept in shared memory, not in a register across the step's first products (at
// 255 registers every extra live value spilled).
constexpr int step_slot_bytes = 2 * 16;
#else
constexpr int step_slot_bytes = 0;
#endif

// The (LSE·log2e, D) pair of a query row; rows past their sequence's end get LSE = +inf, so
// P = 0 exactly.
struct RowStats {
    float lse, dvec;
};
__device__ __forceinline__ RowStats row_stats(const AttentionParams& p, int b, int h, int row) {
    if (row >= bwd_len_q(p, b)) return {INFINITY, 0.f};
    const long long at = bwd_lse_offset(p, b, h, row);
    return {p.lse[at] * FC_LOG2E, p.workspace[at]};
}

// Stores a warp's accumulator (rows row0 + 16 mt + group (+8), columns col0 + 8 nt + 2 tig) times
// `scale` into a row-major gradient tensor; rows at or past `valid_rows`, and a padded build's
// columns past `cols` (p.head_dim), are not written.
template <int kMT, int kNT>
__device__ __forceinline__ void store_gradient_rows(elem_t* base, long long row_stride, const float (&acc)[kMT][kNT][4],
                                                    int row0, int col0, int valid_rows, int cols, float scale,
                                                    int lane) {
    const int group = lane / 4, tig = lane % 4;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = row0 + 16 * mt + group + 8 * r;
            if (row < valid_rows) {
                elem_t* dst = base + (long long)row * row_stride + col0 + 2 * tig;
#pragma unroll
                for (int nt = 0; nt < kNT; ++nt)
                    if (chunk_in_head<PADDED_HEAD>(cols, col0 / 8 + nt))
                        *reinterpret_cast<elem2_t*>(dst + 8 * nt) =
                            pack2(acc[mt][nt][2 * r] * scale, acc[mt][nt][2 * r + 1] * scale);
            }
        }
}

// The dK/dV item loop's index. 32-bit for the 64-query steps on sm_90 (the plan refuses more than
// 2^31 - 1 items there): with a 64-bit item and bound that build spilled 24 bytes. 64-bit
// elsewhere: with 32 bits, ptxas spilled the sm_80-89 builds at D = 64 instead.
#if defined(FC_BWD_STEP64) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
using ItemIndex = int;
#else
using ItemIndex = long long;
#endif

// Which (query head, query tile) a step loads: the heads of the KV group one after another, each
// over its query tiles from the first that sees the key tile. Advanced per step, so the step loop
// has no division.
#if defined(FC_BWD_ROTATE)
// Each head's walk starts at query tile `start` and wraps: key tiles of one head start at
// different query tiles, so their dQ reductions do not all hit the same rows at once.
struct StepCursor {
    int head, q_tile;
    __device__ __forceinline__ void advance(int first_q_tile, int q_tiles, int start) {
        if (++q_tile == q_tiles) q_tile = first_q_tile;
        if (q_tile == start) ++head;
    }
};
#else
struct StepCursor {
    int head, q_tile;
    __device__ __forceinline__ void advance(int first_q_tile, int q_tiles) {
        if (++q_tile == q_tiles) {
            q_tile = first_q_tile;
            ++head;
        }
    }
};
#endif

#if FC_BWD_TWO_PHASE_LAYOUT
// ---- dK, dV: Pᵀ and dSᵀ through shared memory ----
namespace dkdv {
constexpr int num_warps = 8;
constexpr int num_threads = 32 * num_warps;
// Keys a block: four 32-key blocks up to head_dim 128; two above, where a warp's share of 128
// keys' dK and dV would pass 128 registers.
constexpr int key_rows = head_dim <= 128 ? 4 * warp_rows : 2 * warp_rows;
// Queries a step: 64, or 32 with FC_BWD_STEP32 above head_dim 128 (the plan's choice where two
// 64-row (Q, dO) buffers do not fit the device's shared memory).
#if defined(FC_BWD_STEP32) && FC_HEAD_DIM > 128
constexpr int query_rows = warp_rows;
#else
constexpr int query_rows = 2 * warp_rows;
#endif
// Step 1's warp tile of Sᵀ and dPᵀ, s_keys × s_queries: the eight tiles of [key_rows][query_rows].
constexpr int s_keys = head_dim <= 128 || query_rows == 64 ? 32 : 16;
constexpr int s_queries = key_rows * query_rows / (num_warps * s_keys);
// Step 2's warp tile of dK and dV, g_keys × g_cols: the eight tiles of [key_rows][head_dim], 32 keys
// a tile except at 160 and 224 (a quarter of those head dims is no whole 16-column read).
constexpr int g_keys = head_dim <= 128 || head_dim % 64 == 0 ? 32 : 16;
constexpr int g_cols = key_rows * head_dim / (num_warps * g_keys);
constexpr int s_mt = s_keys / 16, s_nt = s_queries / 8;
constexpr int g_mt = g_keys / 16, g_nt = g_cols / 8;
static_assert(s_nt % 2 == 0 && g_cols % 16 == 0, "B is read 16 rows or columns at a time");
// Warps along the queries of step 1 and along the columns of step 2: 2 or 4 (a shift of 1 or 2).
constexpr int s_query_shift = query_rows / s_queries == 4 ? 2 : 1;
constexpr int g_col_shift = head_dim / g_cols == 4 ? 2 : 1;
static_assert(query_rows / s_queries == 1 << s_query_shift && head_dim / g_cols == 1 << g_col_shift,
              "two or four warps along a tile's columns");
// k steps unrolled in the Sᵀ and dPᵀ products. At D = 128, dK and dV take 128 registers, and with
// all 8 steps unrolled ptxas hoisted their loads and spilled; above 128 (head_dim / 2 registers,
// up to 128 again) the same, and in padded builds (their column bounds spilled the atomic 96 build,
// at 254-255 registers, by 8-12 bytes with all 6 unrolled).
constexpr int k_unroll = head_dim >= 128 || PADDED_HEAD ? 2 : head_dim / 16;
using ProbTile = SwizzledTile<query_rows>;  // Pᵀ and dSᵀ: [keys][queries]

// Shared memory: K | V | 2 x (Q | dO) | Pᵀ | dSᵀ | 2 x the rows' (LSE·log2e, D). Keep in sync with
// crates/gen5-persistent/src/backward.rs (`wide_dkdv_smem_bytes`).
constexpr int kv_bytes = RowTile::bytes(key_rows);
constexpr int q_bytes = RowTile::bytes(query_rows);
constexpr int prob_bytes = ProbTile::bytes(key_rows);
constexpr int rowstat_bytes = query_rows * 8;
constexpr int k_at = 0;
constexpr int v_at = kv_bytes;
__device__ __forceinline__ int q_at(int buf) { return 2 * kv_bytes + buf * 2 * q_bytes; }
__device__ __forceinline__ int do_at(int buf) { return q_at(buf) + q_bytes; }
constexpr int pt_at = 2 * kv_bytes + 4 * q_bytes;
constexpr int dst_at = pt_at + prob_bytes;
constexpr int stats_at = dst_at + prob_bytes;
__device__ __forceinline__ int row_stats_at(int buf) { return stats_at + buf * rowstat_bytes; }
constexpr int step_at = stats_at + 2 * rowstat_bytes;
constexpr int smem_bytes = step_at + step_slot_bytes;

}  // namespace dkdv
#else
// ---- dK, dV with Pᵀ and dSᵀ in registers (head_dim <= 64, where 32 keys' dK and dV take 64
// registers or fewer) ----
namespace dkdv {
constexpr int num_warps = 4;
constexpr int num_threads = 32 * num_warps;
constexpr int key_rows = num_warps * warp_rows;  // a 32-key block per warp
#if defined(FC_BWD_STEP64)
// 64 queries a step, which each warp's products take as two halves of 32 (Sᵀ and dPᵀ in registers
// beside dK and dV): half the steps, so half the barriers, cp.async waits and step bookkeeping
// per query, for the same registers.
constexpr int half_rows = 32;
constexpr int query_rows = 2 * half_rows;  // per step
constexpr int query_tiles8 = half_rows / 8;
#else
constexpr int query_rows = 32;  // per step
constexpr int query_tiles8 = query_rows / 8;
#endif
// k steps unrolled in the Sᵀ and dPᵀ products: at D = 64, with all 4 unrolled, ptxas hoisted their
// loads beside dK and dV and spilled on sm_90a.
constexpr int k_unroll = head_dim == 64 ? 2 : head_dim / 16;

// Shared memory: K | V | 2 x (Q | dO) | 2 x the rows' (LSE·log2e, D). Keep in sync with
// crates/gen5-persistent/src/backward.rs (`wide_dkdv_smem_bytes`).
constexpr int kv_bytes = RowTile::bytes(key_rows);
constexpr int q_bytes = RowTile::bytes(query_rows);
constexpr int rowstat_bytes = query_rows * 8;
constexpr int k_at = 0;
constexpr int v_at = kv_bytes;
__device__ __forceinline__ int q_at(int buf) { return 2 * kv_bytes + buf * 2 * q_bytes; }
__device__ __forceinline__ int do_at(int buf) { return q_at(buf) + q_bytes; }
constexpr int stats_at = 2 * kv_bytes + 4 * q_bytes;
__device__ __forceinline__ int row_stats_at(int buf) { return stats_at + buf * rowstat_bytes; }
#if defined(FC_BWD_ATOMIC_DQ)
// The step's dSᵀ, [128 keys][32 queries], the A operand of dQ = dS·K.
using DsTile = SwizzledTile<query_rows>;
constexpr int ds_at = stats_at + 2 * rowstat_bytes;
constexpr int step_at = ds_at + DsTile::bytes(key_rows);
#else
constexpr int step_at = stats_at + 2 * rowstat_bytes;
#endif
constexpr int smem_bytes = step_at + step_slot_bytes;
}  // namespace dkdv

// ---- dQ (head_dim <= 64): each warp's 32 rows walk the keys 32 at a time ----
namespace dq {
constexpr int num_warps = 4;
constexpr int num_threads = 32 * num_warps;
constexpr int query_rows = num_warps * warp_rows;
constexpr int key_chunk = 32;  // keys per warp product
constexpr int key_rows = 64;   // keys per shared tile (per barrier)
constexpr int key_tiles8 = key_chunk / 8;

// Shared memory: Q | dO | 2 x (K | V) | the rows' (LSE·log2e, D). Keep in sync with backward.rs
// (`wide_dq_smem_bytes`).
constexpr int q_bytes = RowTile::bytes(query_rows);
constexpr int kv_bytes = RowTile::bytes(key_rows);
constexpr int q_at = 0;
constexpr int do_at = q_bytes;
__device__ __forceinline__ int k_at(int buf) { return 2 * q_bytes + buf * 2 * kv_bytes; }
__device__ __forceinline__ int v_at(int buf) { return k_at(buf) + kv_bytes; }
constexpr int stats_at = 2 * q_bytes + 4 * kv_bytes;
constexpr int smem_bytes = stats_at + query_rows * 8;
}  // namespace dq
#endif

// ---- The dK/dV pass's items and loads, the same in both layouts ----
namespace dkdv {
// A (key tile, batch, KV head) item. Items run in L2 sections of FC_BWD_SECTION_HEADS (batch, KV
// head) pairs (all of them when undefined); inside a section key tile major, so under causal
// masking the heaviest items start first, while the blocks running at once share the Q, dO (and
// dQ accumulator) rows of a few heads in L2 instead of streaming one head each from memory.
struct KeyItem {
    int b, h_kv, k0, valid_keys, first_q_tile;
    int steps;  // (query head, query tile) pairs that see the keys; 0 when no query does
};
__device__ __forceinline__ KeyItem key_item(const AttentionParams& p, long long item, int q_tiles) {
    const long long heads = (long long)p.batch * p.heads_kv;
    KeyItem it;
#if defined(FC_BWD_SECTION_HEADS)
    const long long section_items = (long long)FC_BWD_SECTION_HEADS * ceil_div(p.seq_k, key_rows);
    const long long first_head = item / section_items * FC_BWD_SECTION_HEADS;
    const long long section_heads = min((long long)FC_BWD_SECTION_HEADS, heads - first_head);
    const long long in_section = item % section_items;
    const long long bh = first_head + in_section % section_heads;
    it.b = (int)(bh / p.heads_kv);
    it.h_kv = (int)(bh % p.heads_kv);
    it.k0 = (int)(in_section / section_heads) * key_rows;
#else
    it.b = (int)((item % heads) / p.heads_kv);
    it.h_kv = (int)(item % p.heads_kv);
    it.k0 = (int)(item / heads) * key_rows;
#endif
    // (Varlen: none past its sequence's keys; then no query sees them and nothing is stored.)
    it.valid_keys = min(key_rows, bwd_len_k(p, it.b) - it.k0);
    const TileRange walk = walked_query_tiles(p, it.b, it.k0, key_rows, query_rows, q_tiles);
    it.first_q_tile = walk.first;
    it.steps = (walk.end - walk.first) * p.q_heads_per_kv;
    return it;
}

// One past the last query tile of the item's walk: the last tile of the sequence in a dense
// build; in a modes build the window's, recomputed from the key tile at each use rather than
// kept in a register across the item (the modes builds run at 255 registers).
__device__ __forceinline__ int walk_end([[maybe_unused]] const AttentionParams& p,
                                        [[maybe_unused]] const KeyItem& it, int q_tiles) {
#if FC_BWD_MODES
    return walked_query_tiles(p, it.b, opaque(it.k0), key_rows, query_rows, q_tiles).end;
#else
    return q_tiles;
#endif
}

// A [kRows][head_dim] tile of Q, K, V or dO (cp.async, not committed) by kThreads threads; a padded
// build's columns past p.head_dim are zero-filled, not read.
template <int kRows, int kThreads>
__device__ __forceinline__ void load_head_tile(const AttentionParams& p, unsigned smem_tile, const elem_t* src,
                                               long long row_stride, int valid_rows, int tid) {
    load_tile_async<kRows, head_dim, kThreads, PADDED_HEAD>(smem_tile, src, row_stride, valid_rows, tid,
                                                            head_chunks<PADDED_HEAD, head_dim>(p.head_dim));
}

// The item's K and V tiles (cp.async, not committed).
__device__ __forceinline__ void load_key_tile(const AttentionParams& p, unsigned smem_base, const KeyItem& it,
                                              int tid) {
    const int row = bwd_k_row(p, it.b, it.k0);
    load_head_tile<key_rows, num_threads>(p, smem_base + k_at,
                                          static_cast<const elem_t*>(p.k) + k_offset(p, it.b, it.h_kv, row),
                                          p.k_row_stride, it.valid_keys, tid);
    load_head_tile<key_rows, num_threads>(p, smem_base + v_at,
                                          static_cast<const elem_t*>(p.v) + v_offset(p, it.b, it.h_kv, row),
                                          p.v_row_stride, it.valid_keys, tid);
}

#if defined(FC_BWD_ATOMIC_DQ)
__device__ __forceinline__ float** step_dq_block(unsigned char* smem, int buf) {
    return reinterpret_cast<float**>(smem + step_at + 16 * buf);
}
#endif

// Thread 0 notes step `at`'s dQ accumulator block in buffer `buf`'s slot (atomic builds).
__device__ __forceinline__ void note_step_block([[maybe_unused]] const AttentionParams& p,
                                                [[maybe_unused]] unsigned char* smem, [[maybe_unused]] int b,
                                                [[maybe_unused]] StepCursor at, [[maybe_unused]] int buf,
                                                [[maybe_unused]] int tid) {
#if defined(FC_BWD_ATOMIC_DQ)
    if (tid == 0) *step_dq_block(smem, buf) = DqAcc::tile(p, (long long)b * p.heads_q + at.head, at.q_tile, 0);
#endif
}

// Step `at`'s Q and dO tiles into buffer `buf` (cp.async, not committed) and its rows' (LSE, D) by
// plain stores, visible after the barrier that ends the step before this buffer is read.
__device__ __forceinline__ void load_query_step(const AttentionParams& p, const BackwardParams& g, unsigned char* smem,
                                                int b, StepCursor at, int buf, int tid) {
    const unsigned smem_base = shared_address(smem);
    const int q0 = at.q_tile * query_rows;
    const int rows = min(query_rows, bwd_len_q(p, b) - q0);
    const int row0 = bwd_q_row(p, b, q0);
    if constexpr (query_rows * RowTile::kChunksPerRow % num_threads == 0) {
        load_head_tile<query_rows, num_threads>(p, smem_base + q_at(buf),
                                                static_cast<const elem_t*>(p.q) + q_offset(p, b, at.head, row0),
                                                p.q_row_stride, rows, tid);
        load_head_tile<query_rows, num_threads>(p, smem_base + do_at(buf),
                                                static_cast<const elem_t*>(g.d_o) + do_offset(g, b, at.head, row0),
                                                g.do_row_stride, rows, tid);
    } else {
        // A tile's chunks do not split evenly over the block (32-query steps at head_dim 160 and
        // 224): each half of the block (whole warps) loads one of the two tiles.
        constexpr int half = num_threads / 2;
        const bool second = tid >= half;
        const elem_t* src = second ? static_cast<const elem_t*>(g.d_o) + do_offset(g, b, at.head, row0)
                                   : static_cast<const elem_t*>(p.q) + q_offset(p, b, at.head, row0);
        load_head_tile<query_rows, half>(p, smem_base + (second ? do_at(buf) : q_at(buf)), src,
                                         second ? g.do_row_stride : p.q_row_stride, rows, second ? tid - half : tid);
    }
    if (tid < query_rows)
        reinterpret_cast<RowStats*>(smem + row_stats_at(buf))[tid] = row_stats(p, b, at.head, q0 + tid);
}

#if defined(FC_BWD_ROTATE)
// The query tile every head's walk of the key tile at k0 starts at. Recomputed at each use rather
// than kept in a register across the step (with it live, the D = 64 kernel spilled).
__device__ __forceinline__ int walk_start(int k0, int first_q_tile, int q_tiles) {
    k0 = opaque(k0);
    return first_q_tile + (k0 / key_rows) % (q_tiles - first_q_tile);
}
#endif

// Runs `step(q0, buf, head)` over the item's (query head, query tile) steps, with step s+1's Q, dO and
// row statistics streaming into the other buffer while step s runs, and a barrier after each step
// (its tiles free, the next ones visible). Nothing happens when no query sees the keys.
template <class Step>
__device__ __forceinline__ void walk_steps(const AttentionParams& p, const BackwardParams& g, unsigned char* smem,
                                           const KeyItem& it, int q_tiles, int tid, Step&& step) {
    if (it.steps == 0) return;
    // The previous item ended on a barrier after its last shared-memory read.
    load_key_tile(p, shared_address(smem), it, tid);
#if defined(FC_BWD_ROTATE)
    StepCursor cur{it.h_kv * p.q_heads_per_kv, walk_start(it.k0, it.first_q_tile, walk_end(p, it, q_tiles))};
#else
    StepCursor cur{it.h_kv * p.q_heads_per_kv, it.first_q_tile};
#endif
    load_query_step(p, g, smem, it.b, cur, 0, tid);
    note_step_block(p, smem, it.b, cur, 0, tid);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    for (int s = 0; s < it.steps; ++s) {
        const int buf = s & 1;
        const int q0 = cur.q_tile * query_rows, head = cur.head;
#if defined(FC_BWD_ROTATE)
        cur.advance(it.first_q_tile, walk_end(p, it, q_tiles),
                    walk_start(it.k0, it.first_q_tile, walk_end(p, it, q_tiles)));
#else
        cur.advance(it.first_q_tile, walk_end(p, it, q_tiles));
#endif
        // The other buffer's last readers finished before the barrier ending step s-1.
        if (s + 1 < it.steps) load_query_step(p, g, smem, it.b, cur, buf ^ 1, tid);
        cp_async_commit();
        step(q0, buf, head);
        // After the step's products, so its address arithmetic is not live beside them.
        if (s + 1 < it.steps) note_step_block(p, smem, it.b, cur, buf ^ 1, tid);
        cp_async_wait<0>();
        // Step s+1's tiles are visible; every warp is done with buffer buf.
        __syncthreads();
    }
}

}  // namespace dkdv

#if defined(FC_BWD_ATOMIC_DQ)
// The step's dQ = dS·K (dS from the [kKeys][kQueries] dSᵀ tile, K from the key tile), warp tiles
// warp, warp + kWarps, .. of it added into the step's accumulator block.
template <int kQueries, int kKeys, int kWarps>
__device__ __forceinline__ void add_dq(float* block, unsigned ds_tile, unsigned k_tile, int warp, int lane) {
    static_assert(kQueries == DqAcc::block_rows, "a step is one accumulator block");
#pragma unroll 1
    for (int tile = warp; tile < DqAcc::tiles; tile += kWarps) {
        float dq[DqAcc::kMT][DqAcc::kNT][4];
        zero_warp_tile(dq);
        warp_gemm_atb<kQueries, head_dim, kKeys, DqAcc::kMT, DqAcc::kNT, dq_k_unroll>(
            dq, ds_tile, DqAcc::tile_row0(tile), k_tile, DqAcc::tile_col0(tile), lane);
        DqAcc::add(block + tile * DqAcc::tile_floats, dq, lane);
    }
}
#endif

}  // namespace wide_bwd

using namespace wide_bwd;

#if FC_BWD_TWO_PHASE_LAYOUT
extern "C" __global__ void __launch_bounds__(dkdv::num_threads, 1)
bwd_portable_dk_dv_wide(const __grid_constant__ AttentionParams p, const __grid_constant__ BackwardParams g) {
    using namespace dkdv;
    extern __shared__ __align__(128) unsigned char smem[];
    const unsigned smem_base = shared_address(smem);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int group = lane / 4, tig = lane % 4;
    // Step 1: keys s_key0 .., queries s_query0 ..; step 2: keys g_key0 .., columns g_col0 ..
    // (Shifts and masks: warp is signed, and a division by 2 or 4 of it is not one.)
    const int s_key0 = (warp >> s_query_shift) * s_keys;
    const int s_query0 = (warp & ((1 << s_query_shift) - 1)) * s_queries;
    const int g_key0 = (warp >> g_col_shift) * g_keys;
    const int g_col0 = (warp & ((1 << g_col_shift) - 1)) * g_cols;

    const int key_tiles = ceil_div(p.seq_k, key_rows);
    const int q_tiles = ceil_div(p.seq_q, query_rows);
    const long long items = (long long)p.batch * p.heads_kv * key_tiles;
    for (long long item = blockIdx.x; item < items; item += gridDim.x) {
        const KeyItem it = key_item(p, item, q_tiles);
        const int b = it.b, h_kv = it.h_kv, k0 = it.k0;

        float dk[g_mt][g_nt][4], dv[g_mt][g_nt][4];
        zero_warp_tile(dk);
        zero_warp_tile(dv);

        walk_steps(p, g, smem, it, q_tiles, tid, [&](int q0, int buf, [[maybe_unused]] int head) {
            const RowStats* stats = reinterpret_cast<const RowStats*>(smem + row_stats_at(buf)) + s_query0;

            // 1. Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ in one k loop, each product's loads behind the other's
            // MMAs (1-3 % over two loops, af6a7fc); Sᵀ → Pᵀ (causal: the element mask only on
            // tile pairs that cross the diagonal).
            float pt[s_mt][s_nt][4], dpt[s_mt][s_nt][4];
            zero_warp_tile(pt);
            zero_warp_tile(dpt);
            warp_gemm_abt_pair<head_dim, s_mt, s_nt, k_unroll>(pt, smem_base + k_at, smem_base + q_at(buf), dpt,
                                                               smem_base + v_at, smem_base + do_at(buf), s_key0,
                                                               s_query0, lane);
#if FC_BWD_MODES
            // (The head and k0 opaque: the slope's load and the mask's bounds are computed here,
            // not hoisted beside the products; these builds run at 255 registers.)
            bwd_tile_scores<true>(p, b, score_mod(p, bwd_seq(p, b), b, opaque(head)), pt, dpt,
                                  k0 + s_key0, q0 + s_query0,
                                  key_tile_needs_mask(p, b, opaque(k0), key_rows, q0, query_rows),
                                  [&](int q) { return make_float2(stats[q].lse, stats[q].dvec); }, lane);
            store_warp_tile<query_rows>(smem + pt_at, pt, s_key0, s_query0, lane);
            store_warp_tile<query_rows>(smem + dst_at, dpt, s_key0, s_query0, lane);
#else
            const bool masked = p.causal && k0 + key_rows - 1 > q0 + causal_offset(p);
#pragma unroll
            for (int mt = 0; mt < s_mt; ++mt)
#pragma unroll
                for (int j = 0; j < s_nt; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int qc = 8 * j + 2 * tig + (e & 1);
                        float prob = exp2f(pt[mt][j][e] * p.scale_log2 - stats[qc].lse);
                        const int key = k0 + s_key0 + 16 * mt + group + 8 * (e >> 1);
                        if (masked && key > q0 + s_query0 + qc + causal_offset(p)) prob = 0.f;
                        pt[mt][j][e] = prob;
                    }
            store_warp_tile<query_rows>(smem + pt_at, pt, s_key0, s_query0, lane);
            // dPᵀ → dSᵀ = Pᵀ ∘ (dPᵀ − D), in place of Pᵀ.
#pragma unroll
            for (int mt = 0; mt < s_mt; ++mt)
#pragma unroll
                for (int j = 0; j < s_nt; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        pt[mt][j][e] *= dpt[mt][j][e] - stats[8 * j + 2 * tig + (e & 1)].dvec;
            store_warp_tile<query_rows>(smem + dst_at, pt, s_key0, s_query0, lane);
#endif
            __syncthreads();  // every warp's Pᵀ and dSᵀ are in their tiles

            // 2. dV += Pᵀ·dO and dK += dSᵀ·Q over the step's queries, in one k loop (1-2 % over two
            // loops, c0bce7e).
            warp_gemm_ab_pair<query_rows, head_dim, query_rows, g_mt, g_nt>(
                dv, smem_base + pt_at, smem_base + do_at(buf), dk, smem_base + dst_at, smem_base + q_at(buf), g_key0,
                g_col0, lane);
#if defined(FC_BWD_ATOMIC_DQ)
            // 3. dQ += dS·K over the step's queries and the block's keys.
            add_dq<query_rows, key_rows, num_warps>(*step_dq_block(smem, buf), smem_base + dst_at, smem_base + k_at, warp,
                                                    lane);
#endif
        });

        const int key_row0 = bwd_k_row(p, b, k0);
        store_gradient_rows(static_cast<elem_t*>(g.dk) + dk_offset(g, b, h_kv, key_row0), g.dk_row_stride, dk,
                            g_key0, g_col0, it.valid_keys, p.head_dim, p.softmax_scale, lane);
        store_gradient_rows(static_cast<elem_t*>(g.dv) + dv_offset(g, b, h_kv, key_row0), g.dv_row_stride, dv,
                            g_key0, g_col0, it.valid_keys, p.head_dim, 1.f, lane);
    }
}
#else
// (A modes build of this half of the file holds the dQ kernel alone: the modes problems' dK/dV pass
// takes the two-phase layout, `WideLayout::for_problem`.)
#if !FC_BWD_MODES
extern "C" __global__ void __launch_bounds__(dkdv::num_threads, 2)
bwd_portable_dk_dv_wide(const __grid_constant__ AttentionParams p, const __grid_constant__ BackwardParams g) {
    using namespace dkdv;
    extern __shared__ __align__(128) unsigned char smem[];
    const unsigned smem_base = shared_address(smem);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int group = lane / 4, tig = lane % 4;
    const int warp_key0 = warp * warp_rows;

    const int key_tiles = ceil_div(p.seq_k, key_rows);
    const int q_tiles = ceil_div(p.seq_q, query_rows);
    const ItemIndex items = (ItemIndex)p.batch * p.heads_kv * key_tiles;
    for (ItemIndex item = blockIdx.x; item < items; item += gridDim.x) {
        const KeyItem it = key_item(p, item, q_tiles);
        const int b = it.b, h_kv = it.h_kv, k0 = it.k0;

        float dk[row_tiles][head_dim / 8][4], dv[row_tiles][head_dim / 8][4];
        zero_warp_tile(dk);
        zero_warp_tile(dv);

        walk_steps(p, g, smem, it, q_tiles, tid, [&](int q0, int buf, [[maybe_unused]] int head) {
            // The warp's products over the step's queries hq0 .. hq0 + 32 (its dSᵀ stored into the
            // step's tile in atomic builds).
            auto half_products = [&](int hq0, int buf, int q0) {
                const RowStats* stats = reinterpret_cast<const RowStats*>(smem + row_stats_at(buf)) + hq0;
                // The half's Q and dO rows as tiles of their own (the swizzle repeats every 8 rows),
                // so the products' lane addresses are those of a 32-query step.
                auto q_half = [&] { return smem_base + q_at(buf) + hq0 * (head_dim * 2); };
                auto do_half = [&] { return smem_base + do_at(buf) + hq0 * (head_dim * 2); };
                // Sᵀ → Pᵀ (causal: the element mask only on tile pairs that cross the diagonal).
                float pt[row_tiles][query_tiles8][4];
                zero_warp_tile(pt);
                warp_gemm_abt<head_dim, row_tiles, query_tiles8, k_unroll>(pt, smem_base + k_at, warp_key0,
                                                                           q_half(), 0, lane);
                const bool masked = p.causal && k0 + key_rows - 1 > q0 + hq0 + causal_offset(p);
#pragma unroll
                for (int mt = 0; mt < row_tiles; ++mt)
#pragma unroll
                    for (int j = 0; j < query_tiles8; ++j)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int qc = 8 * j + 2 * tig + (e & 1);
                            float prob = exp2f(pt[mt][j][e] * p.scale_log2 - stats[qc].lse);
                            const int key = k0 + warp_key0 + 16 * mt + group + 8 * (e >> 1);
                            if (masked && key > q0 + hq0 + qc + causal_offset(p)) prob = 0.f;
                            pt[mt][j][e] = prob;
                        }
                float dpt[row_tiles][query_tiles8][4];
                zero_warp_tile(dpt);
                warp_gemm_abt<head_dim, row_tiles, query_tiles8, k_unroll>(dpt, smem_base + v_at, warp_key0,
                                                                           do_half(), 0, lane);
                // dV += Pᵀ·dO, then dSᵀ = Pᵀ ∘ (dPᵀ − D) in place of Pᵀ and dK += dSᵀ·Q: Pᵀ and dSᵀ
                // leave the accumulators already in the A layout.
                warp_gemm_rb<head_dim, row_tiles, query_tiles8>(dv, pt, do_half(), 0, lane);
#pragma unroll
                for (int mt = 0; mt < row_tiles; ++mt)
#pragma unroll
                    for (int j = 0; j < query_tiles8; ++j)
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            pt[mt][j][e] *= dpt[mt][j][e] - stats[8 * j + 2 * tig + (e & 1)].dvec;
                warp_gemm_rb<head_dim, row_tiles, query_tiles8>(dk, pt, q_half(), 0, lane);
#if defined(FC_BWD_ATOMIC_DQ)
                store_warp_tile<query_rows>(smem + ds_at, pt, warp_key0, hq0, lane);
#endif
            };
#if defined(FC_BWD_STEP64)
            // Rolled, and buf and q0 hidden so what derives from them is computed per half: unrolled
            // or with them hoisted, ptxas spilled beside dK and dV.
#pragma unroll 1
            for (int hq0 = 0; hq0 < query_rows; hq0 += 8 * query_tiles8) half_products(hq0, opaque(buf), opaque(q0));
#else
            half_products(0, buf, q0);
#endif
#if defined(FC_BWD_ATOMIC_DQ)
            __syncthreads();  // every warp's dSᵀ is in the tile
            // dQ += dS·K over the step's queries and 128 keys.
            add_dq<query_rows, key_rows, num_warps>(*step_dq_block(smem, buf), smem_base + ds_at, smem_base + k_at, warp,
                                                    lane);
#endif
        });

        store_gradient_rows(static_cast<elem_t*>(g.dk) + dk_offset(g, b, h_kv, k0), g.dk_row_stride, dk, warp_key0,
                            0, it.valid_keys, p.head_dim, p.softmax_scale, lane);
        store_gradient_rows(static_cast<elem_t*>(g.dv) + dv_offset(g, b, h_kv, k0), g.dv_row_stride, dv, warp_key0,
                            0, it.valid_keys, p.head_dim, 1.f, lane);
    }
}
#endif

extern "C" __global__ void __launch_bounds__(dq::num_threads, 2)
bwd_portable_dq_wide(const __grid_constant__ AttentionParams p, const __grid_constant__ BackwardParams g) {
    using namespace dq;
    extern __shared__ __align__(128) unsigned char smem[];
    const unsigned smem_base = shared_address(smem);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int group = lane / 4, tig = lane % 4;
    const int warp_row0 = warp * warp_rows;

    const int q_tiles = ceil_div(p.seq_q, query_rows);
    const long long heads = (long long)p.batch * p.heads_q;
    // Each warp writes and reads only its own 32 rows' statistics.
    RowStats* stats = reinterpret_cast<RowStats*>(smem + stats_at) + warp_row0;
    auto row_lse = [&](int mt, int r) { return stats[16 * mt + group + 8 * r].lse; };
    auto row_dvec = [&](int mt, int r) { return stats[16 * mt + group + 8 * r].dvec; };
    // Last query tile first: under causal masking it sees the most keys.
    for (long long item = blockIdx.x; item < heads * q_tiles; item += gridDim.x) {
        const int q_tile = q_tiles - 1 - (int)(item / heads);
        const int b = (int)((item % heads) / p.heads_q);
        const int h = (int)(item % p.heads_q);
        const int h_kv = h / p.q_heads_per_kv;
        const int q0 = q_tile * query_rows;
        const int valid_rows = min(query_rows, bwd_len_q(p, b) - q0);
        if (FC_BWD_VARLEN && valid_rows <= 0) continue;  // past its sequence's queries: nothing to write
        const KeyWalk walk = walked_keys(p, b, q0, valid_rows, key_rows);
        const int key_tiles = (walk.key_end > 0 ? ceil_div(walk.key_end, key_rows) : 0) - walk.first_tile;

        const elem_t* k_ptr = static_cast<const elem_t*>(p.k) + k_offset(p, b, h_kv, bwd_k_row(p, b, 0));
        const elem_t* v_ptr = static_cast<const elem_t*>(p.v) + v_offset(p, b, h_kv, bwd_k_row(p, b, 0));
        auto load_kv = [&](int n, int buf) {
            const int kk0 = (walk.first_tile + n) * key_rows, rows = min(key_rows, bwd_len_k(p, b) - kk0);
            load_tile_async<key_rows, head_dim, num_threads, PADDED_HEAD>(
                smem_base + k_at(buf), k_ptr + (long long)kk0 * p.k_row_stride, p.k_row_stride, rows, tid,
                head_chunks<PADDED_HEAD, head_dim>(p.head_dim));
            load_tile_async<key_rows, head_dim, num_threads, PADDED_HEAD>(
                smem_base + v_at(buf), v_ptr + (long long)kk0 * p.v_row_stride, p.v_row_stride, rows, tid,
                head_chunks<PADDED_HEAD, head_dim>(p.head_dim));
        };

        float dq_acc[row_tiles][head_dim / 8][4];
        zero_warp_tile(dq_acc);
        if (key_tiles > 0) {
            // The previous item ended on a barrier after its last shared-memory read.
            load_tile_async<query_rows, head_dim, num_threads, PADDED_HEAD>(
                smem_base + q_at, static_cast<const elem_t*>(p.q) + q_offset(p, b, h, bwd_q_row(p, b, q0)),
                p.q_row_stride, valid_rows, tid, head_chunks<PADDED_HEAD, head_dim>(p.head_dim));
            load_tile_async<query_rows, head_dim, num_threads, PADDED_HEAD>(
                smem_base + do_at, static_cast<const elem_t*>(g.d_o) + do_offset(g, b, h, bwd_q_row(p, b, q0)),
                g.do_row_stride, valid_rows, tid, head_chunks<PADDED_HEAD, head_dim>(p.head_dim));
            load_kv(0, 0);
            cp_async_commit();
            stats[lane] = row_stats(p, b, h, q0 + warp_row0 + lane);
            cp_async_wait<0>();
            __syncthreads();

            for (int n = 0; n < key_tiles; ++n) {
                const int buf = n & 1;
                if (n + 1 < key_tiles) load_kv(n + 1, buf ^ 1);
                cp_async_commit();
                const int kk0 = (walk.first_tile + n) * key_rows;
#if FC_BWD_MODES
#pragma unroll 1
                for (int c = 0; c < key_rows / key_chunk; ++c) {
                    // S and dP, then P and dS together (dS in place of dP), and dQ += dS·K.
                    float s[row_tiles][key_tiles8][4], dp[row_tiles][key_tiles8][4];
                    zero_warp_tile(s);
                    warp_gemm_abt<head_dim, row_tiles, key_tiles8>(s, smem_base + q_at, warp_row0,
                                                                   smem_base + k_at(buf), c * key_chunk, lane);
                    zero_warp_tile(dp);
                    warp_gemm_abt<head_dim, row_tiles, key_tiles8>(dp, smem_base + do_at, warp_row0,
                                                                   smem_base + v_at(buf), c * key_chunk, lane);
                    const int kc0 = kk0 + c * key_chunk;
                    bwd_tile_scores<false>(p, b, score_mod(p, bwd_seq(p, b), b, h), s, dp, q0 + warp_row0, kc0,
                                           query_tile_needs_mask(p, b, q0 + warp_row0, warp_rows, kc0, key_chunk),
                                           [&](int r) { return make_float2(stats[r].lse, stats[r].dvec); }, lane);
                    warp_gemm_rb<head_dim, row_tiles, key_tiles8>(dq_acc, dp, smem_base + k_at(buf), c * key_chunk,
                                                                  lane);
                }
#else
                // Key tails and the causal diagonal take the element mask.
                const bool masked = kk0 + key_rows > p.seq_k ||
                                    (p.causal && kk0 + key_rows - 1 > q0 + warp_row0 + causal_offset(p));
#pragma unroll 1
                for (int c = 0; c < key_rows / key_chunk; ++c) {
                    // S → P, dP, then dS = P ∘ (dP − D) in place of P, and dQ += dS·K.
                    float s[row_tiles][key_tiles8][4];
                    zero_warp_tile(s);
                    warp_gemm_abt<head_dim, row_tiles, key_tiles8>(s, smem_base + q_at, warp_row0,
                                                                   smem_base + k_at(buf), c * key_chunk, lane);
#pragma unroll
                    for (int mt = 0; mt < row_tiles; ++mt)
#pragma unroll
                        for (int j = 0; j < key_tiles8; ++j)
#pragma unroll
                            for (int e = 0; e < 4; ++e) {
                                const int r = e >> 1;
                                float prob = exp2f(s[mt][j][e] * p.scale_log2 - row_lse(mt, r));
                                if (masked) {
                                    const int key = kk0 + c * key_chunk + 8 * j + 2 * tig + (e & 1);
                                    const int row = q0 + warp_row0 + 16 * mt + group + 8 * r;
                                    if (key >= p.seq_k || (p.causal && key > row + causal_offset(p))) prob = 0.f;
                                }
                                s[mt][j][e] = prob;
                            }
                    float dp[row_tiles][key_tiles8][4];
                    zero_warp_tile(dp);
                    warp_gemm_abt<head_dim, row_tiles, key_tiles8>(dp, smem_base + do_at, warp_row0,
                                                                   smem_base + v_at(buf), c * key_chunk, lane);
#pragma unroll
                    for (int mt = 0; mt < row_tiles; ++mt)
#pragma unroll
                        for (int j = 0; j < key_tiles8; ++j)
#pragma unroll
                            for (int e = 0; e < 4; ++e) s[mt][j][e] *= dp[mt][j][e] - row_dvec(mt, e >> 1);
                    warp_gemm_rb<head_dim, row_tiles, key_tiles8>(dq_acc, s, smem_base + k_at(buf), c * key_chunk,
                                                                  lane);
                }
#endif

                cp_async_wait<0>();
                // Key tile n+1 is visible; every warp is done with buffer buf.
                __syncthreads();
            }
        }
        store_gradient_rows(static_cast<elem_t*>(g.dq) + dq_offset(g, b, h, bwd_q_row(p, b, q0)), g.dq_row_stride,
                            dq_acc, warp_row0, 0, valid_rows, p.head_dim, p.softmax_scale, lane);
    }
}
#endif

#if defined(FC_BWD_ATOMIC_DQ)
// ---- dQ = scale · the f32 accumulator, a float4 (two rows' column pair) a thread ----
extern "C" __global__ void __launch_bounds__(128)
bwd_portable_dq_convert(const __grid_constant__ AttentionParams p, const __grid_constant__ BackwardParams g) {
    const float4* acc = reinterpret_cast<const float4*>(DqAcc::base(p));
    const long long words4 = DqAcc::floats(p) / 4;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < words4;
         i += (long long)gridDim.x * blockDim.x) {
        const DqAcc::Spot at = DqAcc::locate(p, i);
        const float4 v = acc[i];
        const int b = (int)(at.bh / p.heads_q);
        elem_t* dq = static_cast<elem_t*>(g.dq) + dq_offset(g, b, (int)(at.bh % p.heads_q), bwd_q_row(p, b, at.row)) +
                     at.col;
        // (A padded build's columns past p.head_dim hold exact zeros and are not stored.)
        if (!chunk_in_head<PADDED_HEAD>(p.head_dim, at.col / 8)) continue;
        if (at.row < bwd_len_q(p, b))
            *reinterpret_cast<elem2_t*>(dq) = pack2(v.x * p.softmax_scale, v.y * p.softmax_scale);
        if (at.row + 8 < bwd_len_q(p, b))
            *reinterpret_cast<elem2_t*>(dq + 8 * g.dq_row_stride) =
                pack2(v.z * p.softmax_scale, v.w * p.softmax_scale);
    }
}
#endif
