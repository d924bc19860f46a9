// Generation 5, portable path (sm_80 / sm_86 / sm_89, and runnable on sm_90 for comparison):
// persistent, warp-specialized, cp.async multi-stage ring + mma.sync.
//
//   * gridDim.x = number of SMs x CTAs per SM (capped at the item count); CTA c walks the work
//     items item = c + k * gridDim.x, an item being (batch, q head, BM-row q tile). Items are
//     ordered as on the Hopper path: L2 sections of a few heads, q tile outer / head inner, the
//     q tile index descending under causal masking (longest items first); without causal masking
//     one head per section (FC_PORTABLE_HEAD_MAJOR). With FC_PORTABLE_DYNAMIC the items are taken
//     in that order from a global counter instead.
//   * Warps 0 .. W-1 are consumers, 16 query rows each (BM = 16 W rows per item): Q fragments,
//     the f32 O accumulator and the softmax row state stay in registers for the whole item;
//     S = Q·Kᵀ and O += P·V run on mma.sync m16n8k16 with ldmatrix(.trans) fragments.
//   * Warp W is the producer: its 32 lanes issue every 16-byte cp.async (Q once per item into a
//     Q_STAGES-deep Q ring, K and V tile by tile into a STAGES-deep K/V ring) and never touch the
//     tensor cores.
//   * Synchronisation (protocol and deadlock argument: docs/generations/gen5-persistent.md,
//     "Portable path"):
//       full  (data landed):  mbarriers, completed by the hardware through
//                             cp.async.mbarrier.arrive.noinc (one arrival per producer lane,
//                             performed when that lane's copies have landed); consumers poll
//                             them with a parity, each warp on its own (no consumer lockstep).
//       empty (buffer free):  named barriers: every consumer warp bar.arrive-s (never blocks),
//                             the producer bar.sync-s before refilling the buffer.
//     The pipeline state (stages, phases) carries across work items; nothing is drained between
//     items, only once at the very end.
//
// Shared memory (dynamic, bytes), T(r) = r * D * 2, TV(r) = r * DV * 2:
//   [0, QS * T(BM))                    Q ring (QS = Q_STAGES buffers)
//   [.., + STAGES * T(BN))             K ring
//   [.., + STAGES * TV(BN))            V ring
//   [.., + 256)                        mbarriers (full; + empty in debug builds), then 8 bytes of
//                                      item info per consumer warp
//   SMEM_BYTES = QS * T(BM) + STAGES * (T(BN) + TV(BN)) + 256 (crates/gen5-persistent/src/portable.rs
//   repeats it)
//
// Defines: FC_HEAD_DIM (32 | 64 | 96 | 128 | 160 | 192 | 224 | 256 | 512, required); FC_HEAD_DIM_V (V's
// and O's head dim DV, a multiple of 32 up to 256, default FC_HEAD_DIM: see below);
// FC_PORTABLE_V_BLOCKS (V's and O's columns in this many blocks of DV, an item each; see below);
// FC_PORTABLE_PAD_D
// (0|1, default 0: p.head_dim is below FC_HEAD_DIM, see below); FC_PORTABLE_WARPS (consumer warps, 4 | 8; default 8);
// FC_PORTABLE_BLOCK_N (keys per K/V tile, 64 | 128; default 64); FC_PORTABLE_STAGES (K/V ring
// depth; default 3); FC_PORTABLE_Q_STAGES (Q buffers, 1 | 2; default 1); FC_PORTABLE_Q_REG_SLICES
// (16-wide Q slices held in registers, the rest re-read per K tile; default D / 16);
// FC_PORTABLE_MIN_BLOCKS (CTAs per SM for __launch_bounds__; default 1);
// FC_PORTABLE_L2_SECTION_BYTES (K/V bytes the schedule keeps hot); FC_PORTABLE_HEAD_MAJOR (0|1,
// default 1: one head per L2 section without causal masking); FC_PORTABLE_DEBUG (every wait
// bounded: the "empty" signals become mbarriers too, a stuck wait prints and traps);
// FC_PORTABLE_EMPTY_MBAR (mbarriers for "empty" without the debug build, for an A/B);
// FC_PORTABLE_MODES (0|1, default 0: the inference modes of docs/MODES.md, see below).
//
// Inference modes (FC_PORTABLE_MODES=1; the plan sets it only for problems that use them, so the
// dense build is the code above, unchanged): the block info of common/seqlen.cuh gives each
// item's sequence lengths and the key tiles its rows see (causal, window, per-sequence lengths;
// tiles outside are never loaded), common/kv_rows.cuh where K/V rows live (strided or paged; rows
// past the sequence's keys are zero-filled by cp.async, never read), common/score_mod.cuh the
// logits (softcap, ALiBi). Items whose q tile starts past their sequence's end visit no tile and
// write nothing. Each consumer warp parks its item's batch, head and lengths in shared memory
// (MODE_INFO) beside its first row and last tile, and re-reads them per tile.
#include "common/params.cuh"
#include "common/types.cuh"
#include "common/tensor_index.cuh"
#include "common/masking.cuh"
#include "common/smem_layout.cuh"
#include "common/mma.cuh"
#include "common/async_copy.cuh"
#include "common/online_softmax.cuh"
#include "common/pipeline.cuh"
#include "common/work_counter.cuh"
#include "common/seqlen.cuh"
#include "common/kv_rows.cuh"
#include "common/padded_head.cuh"

#ifndef FC_HEAD_DIM
#error "compile with -DFC_HEAD_DIM=32, 64, 96, 128, 160, 192, 224, 256 or 512"
#endif
// Multiples of 32 up to 256: the swizzled tile (common/smem_layout.cuh) takes rows of 4k chunks.
// At 512 O's columns must be at most 256: V blocks (below) or a V head dim of its own.
#if FC_HEAD_DIM % 32 != 0 || FC_HEAD_DIM < 32 || (FC_HEAD_DIM > 256 && FC_HEAD_DIM != 512)
#error "gen5_persistent_portable supports FC_HEAD_DIM 32, 64, 96, 128, 160, 192, 224, 256 and 512"
#endif
// V blocks (D = 512): O is DV / 2 f32 a thread, which at 512 is every register there is. So V's
// and O's columns are cut into FC_PORTABLE_V_BLOCKS blocks of DV = D / blocks, and each (item,
// block) pair is a work item of its own: it computes S = Q·Kᵀ over the whole head dim and O's
// columns of its block. S is computed once per block (a 512-wide head takes 1.5x the tensor-core
// work of one pass); the two blocks of an item are consecutive, so they run side by side on the
// same K tiles in L2. Padded head dims pad V per block (the last block's columns past p.head_dim
// are zero-filled and unstored). With one block (every other build) nothing changes.
#ifndef FC_PORTABLE_V_BLOCKS
#define FC_PORTABLE_V_BLOCKS 1
#endif
#if FC_PORTABLE_V_BLOCKS != 1 && (defined(FC_HEAD_DIM_V) || FC_HEAD_DIM % FC_PORTABLE_V_BLOCKS != 0)
#error "FC_PORTABLE_V_BLOCKS cuts V's head dim (= FC_HEAD_DIM) into equal blocks; not with FC_HEAD_DIM_V"
#endif
// V's and O's head dim where it differs from Q's and K's (FlashAttention 3's headdim_v: DeepSeek's
// 192 / 128). Only the parts that touch V or O read it: the V ring and its loads, the P·V product
// (warp_pv) and the O accumulator, the epilogue's stores. S = Q·Kᵀ and the softmax do not change.
// A distinct DV is an instance of its own (never padded); FC_PORTABLE_PAD_D then pads Q and K only.
#ifndef FC_HEAD_DIM_V
#define FC_HEAD_DIM_V (FC_HEAD_DIM / FC_PORTABLE_V_BLOCKS)
#define FC_PORTABLE_PAD_V (FC_PORTABLE_PAD_D != 0)  // V's and O's columns padded as Q's and K's
#else
#define FC_PORTABLE_PAD_V 0
#endif
#if FC_HEAD_DIM_V % 32 != 0 || FC_HEAD_DIM_V < 32 || FC_HEAD_DIM_V > 256
#error "gen5_persistent_portable supports FC_HEAD_DIM_V 32, 64, ..., 256"
#endif
#ifndef FC_PORTABLE_WARPS
#define FC_PORTABLE_WARPS 8
#endif
#ifndef FC_PORTABLE_WARP_M_TILES
#define FC_PORTABLE_WARP_M_TILES 1
#endif
#ifndef FC_PORTABLE_BLOCK_N
#define FC_PORTABLE_BLOCK_N 64
#endif
#ifndef FC_PORTABLE_STAGES
#define FC_PORTABLE_STAGES 3
#endif
#ifndef FC_PORTABLE_Q_STAGES
#define FC_PORTABLE_Q_STAGES 1
#endif
#ifndef FC_PORTABLE_Q_REG_SLICES
#define FC_PORTABLE_Q_REG_SLICES (FC_HEAD_DIM / 16)
#endif
#ifndef FC_PORTABLE_MIN_BLOCKS
#define FC_PORTABLE_MIN_BLOCKS 1
#endif
#ifndef FC_PORTABLE_L2_SECTION_BYTES
#define FC_PORTABLE_L2_SECTION_BYTES (16ull << 20)
#endif
// The "empty" side as mbarriers instead of named barriers: always in debug builds, where every
// wait must be bounded (a bar.sync cannot be), and selectable on its own for an A/B.
#if defined(FC_PORTABLE_DEBUG) && !defined(FC_PORTABLE_EMPTY_MBAR)
#define FC_PORTABLE_EMPTY_MBAR 1
#endif
#ifndef FC_PORTABLE_EMPTY_MBAR
#define FC_PORTABLE_EMPTY_MBAR 0
#endif
// Dynamic schedule: the producer takes items from a global counter (workspace words 0 and 1,
// zero at launch, zero again when the last CTA leaves) instead of the static c + k * gridDim.x.
// Under causal masking items differ in length and the static round-robin leaves some CTAs with
// far more work than others; greedy taking in longest-first order evens them out.
#ifndef FC_PORTABLE_DYNAMIC
#define FC_PORTABLE_DYNAMIC 0
#endif
// Head-major order without causal masking: one head per L2 section (see decode). Measured
// +0-3 % and steadier than the head-inner order (docs/results/2026-11-23-portable-d128-h100, ab14).
#ifndef FC_PORTABLE_HEAD_MAJOR
#define FC_PORTABLE_HEAD_MAJOR 1
#endif
// A head dim below the build's (FC_HEAD_DIM, an instance), padded as FlashAttention-2 pads: the
// loads zero-fill the columns from p.head_dim on and the epilogue stores only the first p.head_dim.
// Exact head dims build without it.
#ifndef FC_PORTABLE_PAD_D
#define FC_PORTABLE_PAD_D 0
#endif
// Inference modes (varlen, KV cache, pages, windows, softcap, ALiBi): 1 only for problems that use
// them (the general block info costs registers and instructions the dense build does without).
#ifndef FC_PORTABLE_MODES
#define FC_PORTABLE_MODES 0
#endif

namespace fcp {

constexpr int D = FC_HEAD_DIM;
// V's and O's columns. (An enumerator, not a constant: a new namespace-scope constant would be
// emitted into the PTX of every build.)
enum : int { DV = FC_HEAD_DIM_V };
// Items per (batch, head, q tile): one per block of V's columns (FC_PORTABLE_V_BLOCKS).
enum : int { V_BLOCKS = FC_PORTABLE_V_BLOCKS };
constexpr int CONSUMER_WARPS = FC_PORTABLE_WARPS;
// m16 row tiles per consumer warp. Two (32 rows, FlashAttention-2's split) make every K and V
// fragment read from shared memory feed two mma.sync instead of one: half the ldmatrix traffic
// per flop, which is what bounds the 16-row warp on an H100 (~85 % of the shared-memory pipe).
constexpr int M_TILES = FC_PORTABLE_WARP_M_TILES;
constexpr int WARP_ROWS = 16 * M_TILES;
constexpr int BM = WARP_ROWS * CONSUMER_WARPS;  // query rows per work item
constexpr int BN = FC_PORTABLE_BLOCK_N;  // keys per K/V tile
constexpr int STAGES = FC_PORTABLE_STAGES;
constexpr int Q_STAGES = FC_PORTABLE_Q_STAGES;
constexpr int CONSUMER_THREADS = 32 * CONSUMER_WARPS;
constexpr int THREADS = CONSUMER_THREADS + 32;  // + one producer warp
constexpr int PRODUCER_WARP = CONSUMER_WARPS;
// 16-wide slices of Q held in registers for the whole item; the others are re-read from the Q
// buffer for every K tile, which then stays in use until the item's last Q·Kᵀ.
constexpr int Q_REG_SLICES = FC_PORTABLE_Q_REG_SLICES;
constexpr bool Q_ALL_IN_REGISTERS = Q_REG_SLICES == D / 16;
constexpr int Q_REG_ARRAY = Q_REG_SLICES > 0 ? Q_REG_SLICES : 1;  // (no zero-length arrays)

static_assert(CONSUMER_WARPS >= 1 && CONSUMER_WARPS <= 8, "FC_PORTABLE_WARPS must be in 1..8");
static_assert(M_TILES == 1 || M_TILES == 2, "FC_PORTABLE_WARP_M_TILES must be 1 or 2");
static_assert(BN == 32 || BN == 64 || BN == 128, "FC_PORTABLE_BLOCK_N must be 32, 64 or 128");
static_assert(Q_STAGES == 1 || Q_STAGES == 2, "FC_PORTABLE_Q_STAGES must be 1 or 2");
static_assert(Q_REG_SLICES >= 0 && Q_REG_SLICES <= D / 16, "FC_PORTABLE_Q_REG_SLICES must be in 0..D/16");
// Named barrier ids 1 .. Q_STAGES + 2 * STAGES (id 0 is __syncthreads; a CTA has 16).
static_assert(STAGES >= 2 && Q_STAGES + 2 * STAGES <= 15, "FC_PORTABLE_STAGES too large for 16 named barriers");

using Tile = SwizzledTile<D>;
constexpr int Q_BYTES = Tile::bytes(BM);
constexpr int KV_BYTES = Tile::bytes(BN);                // a K stage
enum : int { V_BYTES = SwizzledTile<DV>::bytes(BN) };  // a V stage
constexpr int OFF_Q = 0;
constexpr int OFF_K = OFF_Q + Q_STAGES * Q_BYTES;
constexpr int OFF_V = OFF_K + STAGES * KV_BYTES;
constexpr int OFF_BAR = OFF_V + STAGES * V_BYTES;
constexpr int BAR_BYTES = 256;
constexpr bool MODES = FC_PORTABLE_MODES;
// Modes build: per consumer warp, 8 ints after the barrier region (first row, one past the last
// K/V tile, batch, head, len_q, len_k of its item; see MODE_INFO_*).
constexpr int OFF_MODE_INFO = OFF_BAR + BAR_BYTES;
constexpr int MODE_INFO_BYTES = MODES ? 32 * CONSUMER_WARPS : 0;
// What the host must request (crates/gen5-persistent/src/portable.rs repeats the formula).
constexpr int SMEM_BYTES = OFF_BAR + BAR_BYTES + MODE_INFO_BYTES;
// (Entries 0 and 1 are the item_info of the dense build: first row, one past the last K/V tile.)
enum { MODE_INFO_B = 2, MODE_INFO_H = 3, MODE_INFO_LEN_Q = 4, MODE_INFO_LEN_K = 5 };

// Every synchronised buffer has a slot number `which`:
//   b = Q buffer b,  Q_STAGES + s = K stage s,  Q_STAGES + STAGES + s = V stage s.
// Its "full" mbarrier is at OFF_BAR + 8 * which; its "empty" signal is named barrier 1 + which
// (or, with FC_PORTABLE_EMPTY_MBAR, the mbarrier at OFF_BAR + 8 * (NUM_SLOTS + which)).
constexpr int NUM_SLOTS = Q_STAGES + 2 * STAGES;
constexpr int OFF_INFO = OFF_BAR + 2 * NUM_SLOTS * 8;  // per consumer warp: first row, K/V tiles
// Dynamic schedule: the item index that Q buffer b holds (-1: no more items), one int per buffer.
constexpr int OFF_ITEM = OFF_INFO + 8 * CONSUMER_WARPS;
static_assert(2 * NUM_SLOTS * 8 + 8 * CONSUMER_WARPS + 4 * Q_STAGES <= BAR_BYTES, "barrier region too small");
// Arrivals that complete a Q "full" phase: one per producer lane (cp.async noinc), plus, with the
// dynamic schedule, one ordinary arrive (release) by lane 0 after it wrote the item index.
constexpr unsigned Q_FULL_COUNT = FC_PORTABLE_DYNAMIC ? 33u : 32u;
__device__ __forceinline__ int slot_q(int b) { return b; }
__device__ __forceinline__ int slot_k(int s) { return Q_STAGES + s; }
__device__ __forceinline__ int slot_v(int s) { return Q_STAGES + STAGES + s; }

// Consumers keep their whole pipeline position and the item index in one register (at D = 128
// the K/V loop has none to spare):
//   bits 0-2  K/V stage               bit 3  parity of the K/V ring's current lap
//   bits 4-5  Q fills so far, mod 4   bits 6-31  work item (the plan keeps items below 2^25)
constexpr int RING_ITEM_SHIFT = 6;
__device__ __forceinline__ int ring_q_buffer(unsigned ring) { return Q_STAGES == 2 ? (int)((ring >> 4) & 1u) : 0; }
__device__ __forceinline__ unsigned ring_q_phase(unsigned ring) { return (ring >> (Q_STAGES == 2 ? 5 : 4)) & 1u; }
// The Q buffer of the item in progress (its fill was already counted in bits 4-5).
__device__ __forceinline__ int ring_q_buffer_in_use(unsigned ring) { return Q_STAGES == 2 ? (int)(((ring >> 4) & 1u) ^ 1u) : 0; }

// 16-byte chunks of a Q, K or V row in memory: the tile's, or fewer when the head dim is padded.
// (The switch stays a macro: a namespace-scope constant is emitted into the PTX of every build.)
__device__ __forceinline__ int row_chunks(const AttentionParams& p) { return head_chunks<FC_PORTABLE_PAD_D != 0, D>(p.head_dim); }
// The same for V's rows (DV wide) in V block `vb` (columns vb * DV on).
__device__ __forceinline__ int v_block_head_dim(const AttentionParams& p, int vb) { return p.head_dim - vb * DV; }
__device__ __forceinline__ int v_row_chunks(const AttentionParams& p, int vb) {
    return head_chunks<FC_PORTABLE_PAD_V, DV>(v_block_head_dim(p, vb));
}

// Debug tags (pl_mbar_wait reports): which side waited on which kind of buffer.
enum { TAG_Q_EMPTY = 1, TAG_K_EMPTY = 2, TAG_V_EMPTY = 3, TAG_Q_FULL = 4, TAG_K_FULL = 5, TAG_V_FULL = 6 };

__device__ __forceinline__ int tag_of(int which, bool full) {
    const int kind = which < Q_STAGES ? 0 : (which < Q_STAGES + STAGES ? 1 : 2);
    return (full ? TAG_Q_FULL : TAG_Q_EMPTY) + kind;
}

// ---- "empty" signalling -------------------------------------------------------------------
// Consumer side: this warp is done reading buffer `which` (for the current use). Never blocks.
__device__ __forceinline__ void release(unsigned bars, int which) {
#if FC_PORTABLE_EMPTY_MBAR
    pl_mbar_arrive(bars + 8 * (NUM_SLOTS + which));  // every consumer thread; count CONSUMER_THREADS
#else
    (void)bars;
    __syncwarp();
    pl_named_arrive(1 + which, THREADS);
#endif
}

// Producer side: wait until every consumer warp has released use `use` of buffer `which`.
// The named barrier needs no use index: the producer's bar.sync calls and the consumers'
// bar.arrive calls on one id pair up use by use (see the protocol in the generation page).
__device__ __forceinline__ void wait_released(unsigned bars, int which, unsigned use) {
#if FC_PORTABLE_EMPTY_MBAR
    pl_mbar_wait(bars + 8 * (NUM_SLOTS + which), use & 1u, tag_of(which, false), which, (int)use);
#else
    (void)bars;
    (void)use;
    pl_named_sync(1 + which, THREADS);
#endif
}

// ---- static schedule (the producer and every consumer warp walk the same item sequence) -----

struct Work {
    int b, h, m;   // batch, q head, q tile index
    int vb;        // block of V's and O's columns (0 with one block)
    int kb0;       // first K/V tile this item visits (0 in the dense build)
    int n_blocks;  // K/V tiles [kb0, kb0 + n_blocks) this item visits (0: no visible key at all, or,
                   // modes build, the q tile starts past its sequence's end)
};

__device__ __forceinline__ int ceil_div(int a, int b) { return a / b + (a % b != 0); }

#if FC_PORTABLE_MODES
// seq_info (seqlen.cuh) with the tables' pointers read where it is called: otherwise their null
// checks are computed once for the whole kernel and held (as predicates) across every K/V loop,
// which is where ptxas then spills them.
__device__ __forceinline__ SeqInfo item_seq(const AttentionParams& p, int b) {
    AttentionParams q = p;
    q.cu_seqlens_q = opaque(p.cu_seqlens_q);
    q.cu_seqlens_k = opaque(p.cu_seqlens_k);
    q.seqused_k = opaque(p.seqused_k);
    return seq_info(q, b);
}
#endif

// causal_key_end (masking.cuh) in 32-bit arithmetic, for rows < seq_q + BM: (row - seq_q) is in
// [-seq_q, BM), so nothing overflows, and no 64-bit temporaries (sign-extension registers) are
// created in the K/V loop.
__device__ __forceinline__ int key_end(const AttentionParams& p, int query_row) {
    if (!p.causal) return p.seq_k;
    const int end = (query_row - p.seq_q) + p.seq_k + 1;
    return min(max(end, 0), p.seq_k);
}

// Work items of the launch: batch * heads_q * (q tiles per head) * V_BLOCKS. The plan rejects
// problems with 2^25 items or more (see RING_ITEM_SHIFT), so item indices are small ints.
__device__ __forceinline__ int total_items(const AttentionParams& p) {
    return opaque(p.batch) * p.heads_q * ceil_div(opaque(p.seq_q), BM) * V_BLOCKS;  // not hoisted: see decode
}

// Item t -> (b, h, m). Items are cut into L2 sections of g (batch, head) pairs, g = the number
// of heads whose K + V fit in FC_PORTABLE_L2_SECTION_BYTES (a GQA group shares them); inside a
// section the q tile index is the outer loop (descending under causal: longest first) and the
// head the inner one, so the CTAs in flight share the K/V of at most g heads.
// Everything is recomputed from the parameter block (constant bank) per call rather than kept in
// registers: the producer and every consumer warp call it once or twice per item.
__device__ __forceinline__ Work decode(const AttentionParams& p, int t) {
    // An item's V blocks are consecutive (the same Q and K tiles at once).
    const int vb = t % V_BLOCKS;
    t /= V_BLOCKS;
    // 32-bit arithmetic only: a 64-bit division is a subroutine call in SASS, and calling it in the
    // epilogue (O live in 64 registers) made ptxas spill. The plan guarantees items < 2^25.
    // The shape is read through opaque(): otherwise the compiler hoists nm, g, ... out of the item
    // loop and keeps them in registers across the whole K/V loop (where ptxas then spills them).
    const int seq_q = opaque(p.seq_q);
    const int seq_k = opaque(p.seq_k);
    const int nm = ceil_div(seq_q, BM);
    const int bh_total = opaque(p.batch) * p.heads_q;
    const int qpk = p.q_heads_per_kv > 0 ? p.q_heads_per_kv : 1;
    // K + V KiB one q head streams (a GQA group shares them): 2 * seq_k * D * sizeof(elem_t).
    unsigned kv_kib;
    if constexpr (1024 % (4 * D) == 0) {
        kv_kib = (unsigned)(seq_k > 0 ? seq_k : 1) / (1024 / (4 * D)) / qpk;
    } else {  // (D = 96, 160, 192, 224: 4D does not divide a KiB)
        kv_kib = (unsigned)((unsigned long long)(seq_k > 0 ? seq_k : 1) * (4 * D) / 1024) / qpk;
    }
    int g = (int)(((unsigned)(FC_PORTABLE_L2_SECTION_BYTES >> 10)) / (kv_kib > 0 ? kv_kib : 1u));
    if (g < 1) g = 1;
    if (g > bh_total) g = bh_total;
#if FC_PORTABLE_HEAD_MAJOR
    // Without causal masking every item is equally long and needs no longest-first order: one
    // head per section (its q tiles consecutive) puts all the CTAs of a head on its K/V at the
    // same time, so each K/V tile comes from DRAM once and is reused from L2 while still hot.
    if (!p.causal) g = 1;
#endif

    // The partial section (bh_total mod g heads, if any) first, as on the Hopper path: under
    // causal masking the last section's longest items would otherwise start last.
    const int per_section = g * nm;
    const int rem = bh_total % g;
    int first_bh, g_here, within;
    if (t < rem * nm) {
        first_bh = bh_total - rem;
        g_here = rem;
        within = t;
    } else {
        const int u = t - rem * nm;
        const int section = u / per_section;
        within = u - section * per_section;
        first_bh = section * g;
        g_here = g;
    }
    const int m_idx = within / g_here;
    const int bh = first_bh + (within - m_idx * g_here);
    Work w;
    w.vb = vb;
    w.b = bh / p.heads_q;
    w.h = bh - w.b * p.heads_q;
    w.m = p.causal ? (nm - 1 - m_idx) : m_idx;
#if FC_PORTABLE_MODES
    // Block info (seqlen.cuh): the key tiles some row of the q tile sees (causal, window and the
    // sequence's lengths); none when the tile starts past the sequence's end (seq_q is the
    // longest sequence).
    const SeqInfo seq = item_seq(p, w.b);
    const int q0 = w.m * BM;
    const KeyTiles kt = visited_key_tiles(p, seq, q0, min(BM, seq.len_q - q0), BN);
    w.kb0 = kt.first;
    w.n_blocks = kt.end - kt.first;
#else
    // Keys the tile's last valid row sees (the most of any row): tiles past them are skipped.
    const int tile_key_end = key_end(p, min(w.m * BM + BM, seq_q) - 1);
    w.kb0 = 0;
    w.n_blocks = tile_key_end > 0 ? ceil_div(tile_key_end, BN) : 0;
#endif
    return w;
}

// ---- warp-level GEMMs with one address register per operand -----------------------------------
// The same products as warp_qk / warp_pv in mma.cuh, addressed more frugally: at D = 128 a 9-warp
// CTA gets 168 registers per thread, and mma.cuh's SliceAddresses (4 per-lane offsets per
// operand mapping, held across the K/V loop) are what does not fit next to Q (32), O (64) and
// S (32).
//
// A lane's ldmatrix address for 16-wide slice ds of a SwizzledTile<D> with D a multiple of 64
// (8k chunks per row, physical chunk = chunk ^ (row % 8)) is
//     row * 2D + 16 * ((2 ds + half) ^ (row % 8))
// and, writing ds = 4 c + j (j < 4), (2 ds + half) ^ (row % 8) = 8 c + (2 j + half) ^ (row % 8),
// whose bits 1-2 are j ^ ((row % 8) / 2) and bit 0 is half ^ (row & 1). So
//     address(ds) = (address(0) ^ (32 j)) + 128 c
// as long as the tile base has address bits 5 and 6 clear (it is 128-byte aligned) and row * 2D
// has too (2D is a multiple of 128). With D = 64 k + 32 (4-chunk swizzle period, physical chunk =
// chunk ^ ((row / 2) % 4)) the same argument over a period of 2 slices gives
//     address(ds) = (address(0) ^ (32 j)) + 64 c,  ds = 2 c + j (j < 2),
// as row * 2D has bit 5 clear (2D is a multiple of 64). One register per operand (the lane's
// slice-0 address) plus one XOR per distinct j per tile replaces the offsets. Rows further down by
// a multiple of 16 (the n16 blocks of K and V) keep the swizzle's row bits and only add a constant.
//
// Which lane addresses which row: Q (A operand) and V (B operand through .trans) use the A-style
// mapping (lane_row_a / lane_chunk_a, identical to lane_row_v / lane_chunk_v), K the K-style one
// (lane_row_k / lane_chunk_k), so that ldmatrix returns the registers in the order HMMA wants them
// (A in 4, B in 2 consecutive registers: a permuted load would cost register moves).
// (kCols: the tile's width, D for Q and K, DV for V.)
template <int kCols = D>
__device__ __forceinline__ unsigned lane_slice0(int row, int chunk) {
    return 2u * (unsigned)SwizzledTile<kCols>::offset(row, chunk);
}

template <int kCols = D>
__device__ __forceinline__ unsigned slice_address(unsigned lane_addr, int ds, int row_shift) {
    using T = SwizzledTile<kCols>;
    constexpr int kSlices = T::kSlicesPerPeriod;           // 4, or 2 when kCols % 64 == 32
    constexpr int kPeriodBytes = 16 * T::kPeriodChunks;   // 128, or 64
    return (lane_addr ^ (unsigned)(32 * (ds % kSlices))) + (unsigned)(kPeriodBytes * (ds / kSlices)) +
           (unsigned)(row_shift * kCols * 2);
}

// Q fragments of slices 0 .. kQRegs-1 of each of the warp's m16 row tiles (held in registers for
// the whole item). `q_lane` = this lane's A-style slice-0 address in the Q tile, rows of this warp.
template <int kQRegs>
__device__ __forceinline__ void load_q_slices(FragA (&q)[M_TILES][Q_REG_ARRAY], unsigned q_lane) {
#pragma unroll
    for (int mt = 0; mt < M_TILES; ++mt) {
#pragma unroll
        for (int ds = 0; ds < kQRegs; ++ds) ldmatrix_x4(q[mt][ds].r, slice_address(q_lane, ds, 16 * mt));
    }
}

// acc[mt][2 n16], acc[mt][2 n16 + 1] += a[mt]·b for each of the warp's m16 row tiles: one B
// fragment (two n8 tiles) shared by all of them, in both products.
template <int kN8>
__device__ __forceinline__ void mma_row_tiles(float (&acc)[M_TILES][kN8][4], const FragA (&a)[M_TILES],
                                              const unsigned (&b)[4], int n16) {
#pragma unroll
    for (int mt = 0; mt < M_TILES; ++mt) {
        mma_m16n16k16(acc[mt][2 * n16], acc[mt][2 * n16 + 1], a[mt], b);
    }
}

// S = Q·Kᵀ for the warp's WARP_ROWS rows x kKeys keys: slices < kQRegs of Q from registers, the
// rest re-read from the Q tile. Each K fragment is loaded once and used by every m16 row tile.
// `k_lane` = this lane's K-style slice-0 address in the K tile.
template <int kKeys, int kQRegs>
__device__ __forceinline__ void warp_qk(float (&s)[M_TILES][kKeys / 8][4], const FragA (&q)[M_TILES][Q_REG_ARRAY],
                                        unsigned q_lane, unsigned k_lane) {
#pragma unroll
    for (int mt = 0; mt < M_TILES; ++mt) zero_accumulator(s[mt]);
#pragma unroll
    for (int ds = 0; ds < D / 16; ++ds) {
        FragA a[M_TILES];
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt) {
            if (ds < kQRegs)
                a[mt] = q[mt][ds < kQRegs ? ds : 0];
            else
                ldmatrix_x4(a[mt].r, slice_address(q_lane, ds, 16 * mt));
        }
#pragma unroll
        for (int np = 0; np < kKeys / 16; ++np) {
            unsigned b[4];
            ldmatrix_x4(b, slice_address(k_lane, ds, 16 * np));
            mma_row_tiles(s, a, b, np);
        }
    }
}

// O += P·V (as warp_pv in mma.cuh), each V fragment shared by the warp's m16 row tiles. O and the
// V tile are DV columns wide. `v_lane` = this lane's A-style slice-0 address in the V tile.
template <int kKeys>
__device__ __forceinline__ void warp_pv(float (&o)[M_TILES][DV / 8][4], const float (&p)[M_TILES][kKeys / 8][4],
                                        unsigned v_lane) {
#pragma unroll
    for (int ks = 0; ks < kKeys / 16; ++ks) {
        FragA a[M_TILES];
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt) a[mt] = p_fragment(p[mt], ks);
#pragma unroll
        for (int dp = 0; dp < DV / 16; ++dp) {
            unsigned b[4];
            ldmatrix_x4_trans(b, slice_address<DV>(v_lane, dp, 16 * ks));
            mma_row_tiles(o, a, b, dp);
        }
    }
}

// Consumers: what a warp keeps of its item in shared memory (item_info; MODE_INFO in the modes
// build), written once per item by the warp's lane 0 before its __syncwarp.
__device__ __forceinline__ void park_item(const AttentionParams& p, const Work& w, int warp_row0,
                                          volatile int* item_info) {
    item_info[0] = w.m * BM + warp_row0;
#if FC_PORTABLE_MODES
    item_info[1] = w.kb0 + w.n_blocks;
    const SeqInfo seq = item_seq(p, w.b);
    item_info[MODE_INFO_B] = w.b;
    item_info[MODE_INFO_H] = w.h;
    item_info[MODE_INFO_LEN_Q] = seq.len_q;
    item_info[MODE_INFO_LEN_K] = seq.len_k;
#else
    item_info[1] = w.n_blocks;
#endif
}

#if FC_PORTABLE_MODES
// ---- inference modes (FC_PORTABLE_MODES) ------------------------------------------------------

// Producer: Q rows [q0, q0 + BM) of (b, h) into the Q buffer at `dst`, at the sequence's storage
// rows (packed varlen Q: cu_seqlens_q[b] + row); rows past the sequence's end are zero-filled,
// never read (they are the next sequence's).
__device__ __forceinline__ void load_q_tile(const AttentionParams& p, const SeqInfo& seq, int b, int h, int q0,
                                            unsigned dst, int lane) {
    load_tile_async<BM, D, 32, FC_PORTABLE_PAD_D != 0>(dst, static_cast<const elem_t*>(p.q) + seq_q_offset(p, seq, b, h, q0),
                               p.q_row_stride, min(BM, seq.len_q - q0), lane, row_chunks(p));
}

// Producer: key rows [k0, k0 + BN) of sequence b, kv head h_kv, of K (kIsK, D columns) or V (DV)
// into the stage at `dst`, through kv_rows.cuh (strided: dense tensor, contiguous cache, packed varlen; paged:
// one lookup per 16-row group, or per tile inside one page). Rows at or past len_k (a cache's unused slots, unused
// pages, the next packed sequence) are zero-filled with no global read: P is 0 there, but
// 0 * NaN would still reach O. k0 < len_k (the tile holds a visible key).
template <bool kIsK>
__device__ __forceinline__ void load_kv_tile(const AttentionParams& p, const SeqInfo& seq, int b, int h_kv, int k0,
                                             int vb, unsigned dst, int lane) {
    const int rows = min(BN, seq.len_k - k0);
    const elem_t* base = kIsK ? static_cast<const elem_t*>(p.k) : static_cast<const elem_t*>(p.v) + vb * DV;
    // A tile inside one page (block_size a multiple of BN; tiles start at multiples of BN) is
    // strided from its first row and loads like a dense tile: one table lookup per tile. Smaller
    // pages: one lookup per 16-row group, each lane looking up one group (a lookup per copy made the
    // producer warp the bottleneck, 3.4-5.4x the contiguous time; every lane walking every group,
    // 1.31x).
    constexpr int kCols = kIsK ? D : DV;
    constexpr bool kPad = kIsK ? FC_PORTABLE_PAD_D != 0 : FC_PORTABLE_PAD_V;
    if (p.block_table != nullptr && p.block_size % BN != 0) {
        load_tile_groups_async<BN, kCols, 32, kPad>(
            dst,
            [&](int g) {
                return base + (kIsK ? k_row_offset(p, seq, b, h_kv, k0 + 16 * g)
                                    : v_row_offset(p, seq, b, h_kv, k0 + 16 * g));
            },
            kIsK ? p.k_row_stride : p.v_row_stride, rows, lane, kIsK ? row_chunks(p) : v_row_chunks(p, vb));
    } else {
        load_tile_async<BN, kCols, 32, kPad>(dst,
                                   base + (kIsK ? k_row_offset(p, seq, b, h_kv, k0) : v_row_offset(p, seq, b, h_kv, k0)),
                                   kIsK ? p.k_row_stride : p.v_row_stride, rows, lane, kIsK ? row_chunks(p) : v_row_chunks(p, vb));
    }
}

// Consumers: the item's lengths as this warp parked them (MODE_INFO; the storage rows are not
// needed in the K/V loop). Re-read per tile instead of held in registers across it.
__device__ __forceinline__ SeqInfo parked_seq(const volatile int* mode_info) {
    // The sequence only where its ranges are read: a volatile load is never dropped.
    const int b = FC_MM_PREFIX ? mode_info[MODE_INFO_B] : 0;
    return seq_of_lengths(b, mode_info[MODE_INFO_LEN_Q], mode_info[MODE_INFO_LEN_K]);
}

// The key tiles the warp's rows [warp_first, warp_first + WARP_ROWS) see, valid rows only (none
// when the warp starts past the sequence's end): a tile of the item outside them is only waited
// for and released (the upper warps of a diagonal tile, the lower ones of a window's first tile).
__device__ __forceinline__ KeyTiles warp_key_tiles(const AttentionParams& p, const SeqInfo& seq, int warp_first) {
    return visited_key_tiles(p, seq, warp_first, min(WARP_ROWS, seq.len_q - warp_first), BN);
}

// Raw q·k of key tile [k0, k0 + BN) to log2-domain logits: score modifiers (softcap, ALiBi) or
// the plain scale, then the element mask unless every valid row of the warp sees the whole tile.
// The warp's key tiles (`warp_tiles`) and whether the problem has modifiers (`modified`) come from
// the item's start; the rest is recomputed here from the parked info (recomputing the tiles and
// testing the parameters on every tile measured 3 % more instructions in the key loop).
__device__ __forceinline__ void mode_scores(const AttentionParams& p, float (&s)[M_TILES][BN / 8][4],
                                            const volatile int* mode_info, const KeyTiles& warp_tiles, bool modified,
                                            int warp_first, int k0, int group, int tig) {
    const SeqInfo seq = parked_seq(mode_info);
    if (modified) {
        const ScoreMod mod = score_mod(p, seq, mode_info[MODE_INFO_B], mode_info[MODE_INFO_H]);
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt) modify_scores(s[mt], mod, warp_first + 16 * mt + group, k0 + 2 * tig);
    } else {
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt) scale_scores(s[mt], p.scale_log2);
    }
    if (tile_needs_mask(warp_tiles, k0, BN)) {  // lengths, diagonal, window
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt) {
            const int row_lo = warp_first + 16 * mt + group;
            const KeyRange r0 = key_range(p, seq, row_lo), r1 = key_range(p, seq, row_lo + 8);
            const int lo[2] = {r0.lo - k0, r1.lo - k0};
            const int hi[2] = {r0.hi - k0, r1.hi - k0};
            mask_scores_range(s[mt], 2 * tig, lo, hi);
        }
    }
}
#endif

}  // namespace fcp

using namespace fcp;

extern "C" __global__ void __launch_bounds__(THREADS, FC_PORTABLE_MIN_BLOCKS)
    attention_persistent_portable(const __grid_constant__ AttentionParams p) {
    extern __shared__ __align__(128) unsigned char smem[];
    const unsigned base = shared_address(smem);
    const unsigned sQ = base + OFF_Q;
    const unsigned sK = base + OFF_K;
    const unsigned sV = base + OFF_V;
    const unsigned bars = base + OFF_BAR;

    if (p.seq_q <= 0) return;  // every thread, before any barrier

    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;

    if (threadIdx.x == 0) {
        // slice_address() relies on 128-byte aligned tiles (not just on their speed).
        if (base & 127u) __trap();
        for (int i = 0; i < NUM_SLOTS; ++i)  // full: one per producer lane (+ the item index for Q)
            pl_mbar_init(bars + 8 * i, i < Q_STAGES ? Q_FULL_COUNT : 32u);
#if FC_PORTABLE_EMPTY_MBAR
        for (int i = 0; i < NUM_SLOTS; ++i) pl_mbar_init(bars + 8 * (NUM_SLOTS + i), CONSUMER_THREADS);
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // (sm_90+: as the Hopper path)
#endif
    }
    __syncthreads();  // the only CTA-wide barrier: the mbarrier inits are visible to everyone

    if (warp == PRODUCER_WARP) {
        // ===================================== producer =====================================
        // Fills buffers in exactly the order the consumers use them: per item Q, then K(0), V(0),
        // K(1), V(1), ... Filling use u >= 1 of a buffer first waits for the consumers' release
        // of its use u - 1.
        int stage = 0;
        unsigned lap = 0;    // K/V ring laps completed (= uses of each stage before this lap)
        unsigned q_use = 0;  // Q fills so far
#if FC_PORTABLE_DYNAMIC
        unsigned* counters = reinterpret_cast<unsigned*>(p.workspace);  // [0] next item, [1] CTAs done
        // Taken when this CTA is ready for it, not one ahead: claiming ahead was measured worse
        // under causal masking (it breaks the greedy longest-first balance at the tail).
        for (;;) {
            int t = 0;
            if (lane == 0) t = take_work(counters);
            t = __shfl_sync(0xffffffffu, t, 0);
            const bool done = t >= total_items(p);
            const Work w = decode(p, done ? 0 : t);
            const int qb = (int)(q_use % Q_STAGES);
            if (q_use >= Q_STAGES) wait_released(bars, slot_q(qb), q_use / Q_STAGES - 1);
            // Every item is handed over (the consumers must write O = 0 / LSE = +inf even for items
            // without a visible key), and -1 once there are none left: a Q fill like any other, so
            // the consumers' releases and the drain below pair up as usual.
            if (lane == 0) reinterpret_cast<volatile int*>(smem + OFF_ITEM)[qb] = done ? -1 : t;
            if (!done && w.n_blocks > 0) {
                const int q0 = w.m * BM;
#if FC_PORTABLE_MODES
                load_q_tile(p, item_seq(p, w.b), w.b, w.h, q0, sQ + qb * Q_BYTES, lane);
#else
                load_tile_async<BM, D, 32, FC_PORTABLE_PAD_D != 0>(sQ + qb * Q_BYTES,
                                           static_cast<const elem_t*>(p.q) + q_offset(p, w.b, w.h, q0), p.q_row_stride,
                                           min(BM, p.seq_q - q0), lane, row_chunks(p));
#endif
            }
            pl_cp_async_arrive_noinc(bars + 8 * slot_q(qb));
            if (lane == 0) pl_mbar_arrive(bars + 8 * slot_q(qb));  // release: the item index is visible
            ++q_use;
            if (done) {
                if (lane == 0) finish_taking(counters);  // the last CTA leaves the counters zero
                break;
            }
            const int h_kv = w.h / p.q_heads_per_kv;
#else
        for (int t = blockIdx.x; t < total_items(p); t += gridDim.x) {
            const Work w = decode(p, t);
            if (w.n_blocks == 0) continue;  // the consumers skip it too: no Q, no K/V
            const int qb = (int)(q_use % Q_STAGES);
            if (q_use >= Q_STAGES) wait_released(bars, slot_q(qb), q_use / Q_STAGES - 1);
            const int q0 = w.m * BM;
            const int h_kv = w.h / p.q_heads_per_kv;
#if FC_PORTABLE_MODES
            load_q_tile(p, item_seq(p, w.b), w.b, w.h, q0, sQ + qb * Q_BYTES, lane);
#else
            load_tile_async<BM, D, 32, FC_PORTABLE_PAD_D != 0>(sQ + qb * Q_BYTES, static_cast<const elem_t*>(p.q) + q_offset(p, w.b, w.h, q0),
                                       p.q_row_stride, min(BM, p.seq_q - q0), lane, row_chunks(p));
#endif
            pl_cp_async_arrive_noinc(bars + 8 * slot_q(qb));
            ++q_use;
#endif

#if FC_PORTABLE_MODES
            // Tiles [kb0, kb0 + n_blocks): the block info's, as the consumers walk them.
            const SeqInfo seq = item_seq(p, w.b);
            for (int n = w.kb0; n < w.kb0 + w.n_blocks; ++n) {
                const int k0 = n * BN;  // < len_k: the tile holds a key some row sees
                if (lap > 0) wait_released(bars, slot_k(stage), lap - 1);
                load_kv_tile<true>(p, seq, w.b, h_kv, k0, 0, sK + stage * KV_BYTES, lane);
                pl_cp_async_arrive_noinc(bars + 8 * slot_k(stage));
                if (lap > 0) wait_released(bars, slot_v(stage), lap - 1);
                load_kv_tile<false>(p, seq, w.b, h_kv, k0, w.vb, sV + stage * V_BYTES, lane);
                pl_cp_async_arrive_noinc(bars + 8 * slot_v(stage));
                if (++stage == STAGES) {
                    stage = 0;
                    ++lap;
                }
            }
#else
            const elem_t* k_ptr = static_cast<const elem_t*>(p.k) + k_offset(p, w.b, h_kv, 0);
            const elem_t* v_ptr = static_cast<const elem_t*>(p.v) + v_offset(p, w.b, h_kv, 0) + w.vb * DV;
            for (int n = 0; n < w.n_blocks; ++n) {
                const int k0 = n * BN;
                const int rows = min(BN, p.seq_k - k0);  // >= 1: n < n_blocks <= ceil(seq_k / BN)
                if (lap > 0) wait_released(bars, slot_k(stage), lap - 1);
                load_tile_async<BN, D, 32, FC_PORTABLE_PAD_D != 0>(sK + stage * KV_BYTES, k_ptr + (long long)k0 * p.k_row_stride,
                                           p.k_row_stride, rows, lane, row_chunks(p));
                pl_cp_async_arrive_noinc(bars + 8 * slot_k(stage));
                if (lap > 0) wait_released(bars, slot_v(stage), lap - 1);
                load_tile_async<BN, DV, 32, FC_PORTABLE_PAD_V>(sV + stage * V_BYTES, v_ptr + (long long)k0 * p.v_row_stride,
                                            p.v_row_stride, rows, lane, v_row_chunks(p, w.vb));
                pl_cp_async_arrive_noinc(bars + 8 * slot_v(stage));
                if (++stage == STAGES) {
                    stage = 0;
                    ++lap;
                }
            }
#endif
        }
        // Drain: wait for the consumers' release of the last use of every buffer that was ever
        // filled, so that no named barrier is left part-way through a phase when the CTA exits
        // (and, in debug builds, so that a lost release traps here instead of passing silently).
        // Cannot block forever: every fill was issued, so the consumers reach every release.
        for (int b = 0; b < Q_STAGES; ++b) {
            const unsigned fills = q_use / Q_STAGES + ((unsigned)b < q_use % Q_STAGES ? 1u : 0u);
            if (fills > 0) wait_released(bars, slot_q(b), fills - 1);
        }
        for (int s = 0; s < STAGES; ++s) {
            const unsigned fills = lap + (s < stage ? 1u : 0u);
            if (fills > 0) {
                wait_released(bars, slot_k(s), fills - 1);
                wait_released(bars, slot_v(s), fills - 1);
            }
        }
        pl_cp_async_wait_all();
        return;
    }

    // ====================================== consumers =======================================
    const int group = lane / 4;  // this lane's rows: group and group + 8 of each m16 row tile
    const int tig = lane % 4;    // this lane's columns: 2*tig, 2*tig+1 of every n8 tile
    const int warp_row0 = warp * WARP_ROWS;
    // This lane's slice-0 ldmatrix addresses relative to a tile (see slice_address).
    const unsigned a_off = lane_slice0(lane_row_a(lane), lane_chunk_a(lane));  // Q (and V when DV == D)
    const unsigned k_off = lane_slice0(lane_row_k(lane), lane_chunk_k(lane));  // K
    const unsigned v_off = DV == D ? a_off : lane_slice0<DV>(lane_row_a(lane), lane_chunk_a(lane));  // V
    // The item's shape, parked in this warp's shared-memory slot and re-read per tile (an LDS
    // instead of two registers held across the K/V loop): first query row, number of K/V tiles.
#if FC_PORTABLE_MODES
    // Modes build: 8 ints per warp (MODE_INFO); item_info[1] is one past the item's last K/V
    // tile (the loop starts at its first, kb0), and the item's batch, head and lengths follow.
    volatile int* item_info = reinterpret_cast<volatile int*>(smem + OFF_MODE_INFO) + 8 * warp;
    volatile int* mode_info = item_info;
#else
    volatile int* item_info = reinterpret_cast<volatile int*>(smem + OFF_INFO) + 2 * warp;
#endif
    // Static schedule: the item is blockIdx.x + k * gridDim.x. Dynamic: whatever the producer put
    // beside the next Q fill.
    unsigned ring = FC_PORTABLE_DYNAMIC ? 0u : (unsigned)blockIdx.x << RING_ITEM_SHIFT;  // see RING_ITEM_SHIFT

    for (;; ring += FC_PORTABLE_DYNAMIC ? 0u : gridDim.x << RING_ITEM_SHIFT) {
#if !FC_PORTABLE_DYNAMIC
        if ((int)(ring >> RING_ITEM_SHIFT) >= total_items(p)) break;
#endif
        float o[M_TILES][DV / 8][4];
        SoftmaxRows st[M_TILES];
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt) {
            zero_accumulator(o[mt]);
            softmax_init(st[mt]);
        }

        {
#if FC_PORTABLE_DYNAMIC
            const int qb = ring_q_buffer(ring);
            pl_mbar_wait(bars + 8 * slot_q(qb), ring_q_phase(ring), TAG_Q_FULL, qb, -1);
            const int t = reinterpret_cast<volatile int*>(smem + OFF_ITEM)[qb];
            ring = (ring & ~48u) | ((ring + 16u) & 48u);  // next Q fill (bits 4-5, mod 4)
            if (t < 0) {  // no more items
                release(bars, slot_q(qb));
                break;
            }
            ring = (ring & ((1u << RING_ITEM_SHIFT) - 1u)) | ((unsigned)t << RING_ITEM_SHIFT);
            const Work w = decode(p, t);
            if (w.n_blocks == 0) release(bars, slot_q(qb));  // nothing was loaded; O = 0 below
            if (w.n_blocks > 0) {
                park_item(p, w, warp_row0, item_info);
                __syncwarp();
#else
            const Work w = decode(p, (int)(ring >> RING_ITEM_SHIFT));
            if (w.n_blocks > 0) {
                park_item(p, w, warp_row0, item_info);
                __syncwarp();

                const int qb = ring_q_buffer(ring);
                pl_mbar_wait(bars + 8 * slot_q(qb), ring_q_phase(ring), TAG_Q_FULL, qb, (int)(ring >> RING_ITEM_SHIFT));
                ring = (ring & ~48u) | ((ring + 16u) & 48u);  // next Q fill (bits 4-5, mod 4)
#endif
                const unsigned q_lane = sQ + qb * Q_BYTES + warp_row0 * (D * 2) + a_off;
                FragA q_frag[M_TILES][Q_REG_ARRAY];
                load_q_slices<Q_REG_SLICES>(q_frag, q_lane);
                if (Q_ALL_IN_REGISTERS) release(bars, slot_q(qb));  // Q lives in registers now

#if FC_PORTABLE_MODES
                // The key tiles the warp's valid rows see (a tile outside them is only waited for
                // and released: the upper warps of a diagonal tile, the lower ones of a window's
                // first), and which of them need no element mask.
                const KeyTiles warp_tiles = warp_key_tiles(p, parked_seq(mode_info), item_info[0]);
                const bool modified = has_score_mod(p);
                for (int n = w.kb0; n < item_info[1]; ++n) {
#else
                for (int n = 0; n < item_info[1]; ++n) {
#endif
                    const int stage = (int)(ring & 7u);
                    const unsigned phase = (ring >> 3) & 1u;
                    const int k0 = n * BN;
                    // With part of Q re-read per tile, its buffer is free after the last Q·Kᵀ.
                    const bool release_q = !Q_ALL_IN_REGISTERS && n == item_info[1] - 1;
                    const int warp_first = item_info[0];
                    // Keys the warp's last valid row sees (the most of its rows): a tile at or past
                    // them is visible to no row of this warp (causal: the upper warps of a diagonal
                    // tile) and is only waited for and released.
#if FC_PORTABLE_MODES
                    // (The same from the block info: warp_tiles, above the loop.)
                    const bool warp_sees = n >= warp_tiles.first && n < warp_tiles.end;
#else
                    const int warp_key_hi =
                        warp_first < p.seq_q ? key_end(p, min(warp_first + WARP_ROWS - 1, p.seq_q - 1)) : 0;
#endif

                    pl_mbar_wait(bars + 8 * slot_k(stage), phase, TAG_K_FULL, stage, n);
#if FC_PORTABLE_MODES
                    if (warp_sees) {  // warp-uniform
#else
                    if (k0 < warp_key_hi) {  // warp-uniform
#endif
                        float s[M_TILES][BN / 8][4];
                        warp_qk<BN, Q_REG_SLICES>(s, q_frag, q_lane, sK + stage * KV_BYTES + k_off);
                        release(bars, slot_k(stage));
                        if (release_q) release(bars, slot_q(ring_q_buffer_in_use(ring)));

#if FC_PORTABLE_MODES
                        mode_scores(p, s, mode_info, warp_tiles, modified, warp_first, k0, group, tig);  // softcap, ALiBi, masks
#else
#pragma unroll
                        for (int mt = 0; mt < M_TILES; ++mt) scale_scores(s[mt], p.scale_log2);
                        // The warp's first row sees the fewest keys: a tile fully visible to it needs
                        // no mask (all but the seq_k tail and the causal diagonal).
                        if (key_end(p, warp_first) - k0 < BN) {
#pragma unroll
                            for (int mt = 0; mt < M_TILES; ++mt) {
                                const int row_lo = warp_first + 16 * mt + group;
                                mask_scores(s[mt], 2 * tig, key_end(p, row_lo) - k0, key_end(p, row_lo + 8) - k0);
                            }
                        }
#endif
#pragma unroll
                        for (int mt = 0; mt < M_TILES; ++mt) online_softmax_update(s[mt], o[mt], st[mt]);

                        pl_mbar_wait(bars + 8 * slot_v(stage), phase, TAG_V_FULL, stage, n);
                        warp_pv<BN>(o, s, sV + stage * V_BYTES + v_off);
                        release(bars, slot_v(stage));
                    } else {
                        release(bars, slot_k(stage));
                        if (release_q) release(bars, slot_q(ring_q_buffer_in_use(ring)));
                        pl_mbar_wait(bars + 8 * slot_v(stage), phase, TAG_V_FULL, stage, n);
                        release(bars, slot_v(stage));
                    }

                    // Next stage; past the last one, back to 0 and flip the lap parity.
                    ring = (stage + 1 == STAGES) ? ((ring & ~7u) ^ 8u) : ring + 1u;
                }
            }
        }

        // Straight from registers: each quad writes 8 contiguous elements (16 bytes) of a row per
        // n8 tile. Rows past seq_q are never written. (The item is decoded again rather than kept
        // in registers across the K/V loop; decode reads the shape through opaque(), so this is
        // not merged with the first call.)
        float lse[M_TILES][2];
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt) softmax_finalize(o[mt], st[mt], lse[mt]);  // no key: O = 0, LSE = +inf
        const Work w = decode(p, (int)(ring >> RING_ITEM_SHIFT));
#if FC_PORTABLE_MODES
        // The same at the sequence's storage rows (packed varlen O: cu_seqlens_q[b] + row; LSE
        // [heads_q, total_q]); rows past the sequence's end are never written. A row with l = 0
        // that sees keys got only -inf logits (infinite inputs): NaN, as the f64 reference; a row
        // that sees none is the defined empty row (O = 0, LSE = +inf).
        const SeqInfo seq = item_seq(p, w.b);
        const int row_end = seq.len_q;
        auto o_at = [&](int row) { return seq_o_offset(p, seq, w.b, w.h, row); };
        auto lse_at = [&](int row) { return seq_lse_offset(p, seq, w.b, w.h, row); };
#else
        const int row_end = p.seq_q;
        auto o_at = [&](int row) { return o_offset(p, w.b, w.h, row); };
        auto lse_at = [&](int row) { return lse_offset(p, w.b, w.h, row); };
#endif
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt) {
            const int row_lo = w.m * BM + warp_row0 + 16 * mt + group;
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int row = row_lo + 8 * r;
                if (row < row_end) {
#if FC_PORTABLE_MODES
                    float undefined = 1.f;
                    if (lse[mt][r] == FC_INF) {  // (the key range only matters for an empty sum)
                        const KeyRange keys = key_range(p, seq, row);
                        if (keys.hi > keys.lo) undefined = FC_QNAN;
                    }
#else
                    const float undefined = undefined_row_factor(p, row, lse[mt][r]);  // all scores -inf: NaN
#endif
                    elem_t* o_row = static_cast<elem_t*>(p.o) + o_at(row) + w.vb * DV;
#pragma unroll
                    for (int j = 0; j < DV / 8; ++j)  // O's columns: V's head dim (this V block's)
                        if (chunk_in_head<FC_PORTABLE_PAD_V>(v_block_head_dim(p, w.vb), j))
                            *reinterpret_cast<elem2_t*>(o_row + 8 * j + 2 * tig) =
                                pack2(o[mt][j][2 * r] * undefined, o[mt][j][2 * r + 1] * undefined);
                    // (Every V block computes the same LSE; the first stores it.)
                    if (tig == 0 && p.lse != nullptr && w.vb == 0) p.lse[lse_at(row)] = lse[mt][r] * undefined;
                }
            }
        }
    }
}
