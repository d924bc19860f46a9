// Generation 5 (Hopper): persistent, warp-specialized FlashAttention-3-style forward kernel.
// sm_90a only: TMA (cp.async.bulk.tensor) + mbarrier + wgmma.mma_async + setmaxnreg.
//
//   * gridDim.x = number of SMs; each CTA walks work items (batch, head, 128-row q tile)
//     item = blockIdx.x + k * gridDim.x, in an order that keeps a few heads' K/V hot in L2 and,
//     for causal, puts the longest (last) q tiles first.
//   * Warpgroup 0 = producer (one thread issues TMA): Q once per item, K and V tiles into a
//     FC_HOPPER_STAGES-deep ring with separate full/empty barriers for K and V.
//   * Warpgroups 1, 2 = consumers, 64 q rows each: S = Q K^T (wgmma SS, K-major both), online
//     softmax in f32 registers, O += P V (wgmma RS, P from registers, V MN-major from smem).
//   * FC_HOPPER_OVERLAP=1: issue S_{j+1} = Q K_{j+1} and O += P_j V_j back to back and do the
//     softmax of S_{j+1} while the PV wgmma runs (FA3's intra-warpgroup overlap).
//   * FC_HOPPER_PINGPONG=1 (needs OVERLAP=1): the two consumer warpgroups take turns issuing their
//     GEMMs (named barriers 1 and 2), so one's softmax runs under the other's GEMMs (FA3).
//   * FC_HOPPER_Q_STAGES=2: two Q buffers; the next item's Q is loaded while this one runs.
//   * FC_HOPPER_SMEM_EPILOGUE=1 (needs Q_STAGES=2): O is staged through the item's own (finished)
//     Q buffer and written with coalesced 16-byte stores.
//   * FC_HOPPER_SPLIT_KV=1 (small problems): a work *unit* is (item, split); split s of an item
//     visits key tiles [s n / S, (s+1) n / S) (S = p.num_splits, n = the item's key tiles), writes
//     its unnormalised partial O and (m, l) to p.workspace, and the last of the S units to arrive
//     (per warp: an arrival counter in the workspace) combines them and writes O and LSE.
//
// Barrier protocol, smem map, register budget: docs/generations/gen5-persistent.md (Hopper);
// split-KV protocol and workspace layout: docs/generations/gen5-split-kv.md.
//
// Defines: FC_HEAD_DIM (64|128, required), FC_HOPPER_BLOCK_N (keys per tile, 64|128|176, default 128),
// FC_HOPPER_STAGES (K/V ring depth, default 2), FC_HOPPER_OVERLAP (0|1, default 0),
// FC_HOPPER_L2_SECTION_BYTES (K/V bytes the scheduler tries to keep hot, default 32 MiB),
// FC_HOPPER_PINGPONG (0|1, default 0), FC_HOPPER_Q_STAGES (1|2, default 1),
// FC_HOPPER_SMEM_EPILOGUE (0|1, default 0), FC_HOPPER_CONSUMER_REGS (232|240, default 232; the
// producer gets 40|24), FC_HOPPER_SPLIT_KV (0|1, default 0; the split count is p.num_splits at run
// time), FC_HOPPER_HEAD_MAJOR (0|1, default 1: one head per L2 section without causal masking),
// FC_HOPPER_DEBUG (bounded mbarrier waits that trap instead of hanging).
#include "common/params.cuh"
#include "common/types.cuh"
#include "common/masking.cuh"
#include "common/tensor_index.cuh"
#include "common/seqlen.cuh"
#include "common/score_mod.cuh"
#include "common/hopper/mbarrier.cuh"
#include "common/hopper/tma.cuh"
#include "common/hopper/wgmma.cuh"
#include "common/hopper/named_barrier.cuh"
#include "common/work_counter.cuh"

#ifndef FC_HEAD_DIM
#error "compile with -DFC_HEAD_DIM=64 or 128"
#endif
#if FC_HEAD_DIM != 64 && FC_HEAD_DIM != 128
#error "gen5_persistent_hopper supports FC_HEAD_DIM 64 and 128"
#endif
#ifndef FC_HOPPER_BLOCK_N
#define FC_HOPPER_BLOCK_N 128
#endif
#ifndef FC_HOPPER_STAGES
#define FC_HOPPER_STAGES 2
#endif
#ifndef FC_HOPPER_OVERLAP
#define FC_HOPPER_OVERLAP 0
#endif
#ifndef FC_HOPPER_L2_SECTION_BYTES
#define FC_HOPPER_L2_SECTION_BYTES (32u << 20)
#endif
// Head-major order without causal masking: one head per L2 section (see make_schedule). Measured
// +0-4 % and steadier than the head-inner order (docs/results/2026-11-23-portable-d128-h100, ab14).
#ifndef FC_HOPPER_HEAD_MAJOR
#define FC_HOPPER_HEAD_MAJOR 1
#endif
#ifndef FC_HOPPER_PINGPONG
#define FC_HOPPER_PINGPONG 0
#endif
#ifndef FC_HOPPER_Q_STAGES
#define FC_HOPPER_Q_STAGES 1
#endif
#ifndef FC_HOPPER_SMEM_EPILOGUE
#define FC_HOPPER_SMEM_EPILOGUE 0
#endif
#ifndef FC_HOPPER_CONSUMER_REGS
#define FC_HOPPER_CONSUMER_REGS 232
#endif
#ifndef FC_HOPPER_SPLIT_KV
#define FC_HOPPER_SPLIT_KV 0
#endif
// Inference modes (docs/MODES.md: varlen, KV cache, pages, windows, softcap, ALiBi). The plan
// builds with 1 only for problems that use them: the block info's general form costs consumer
// registers that the dense build's key loop does not have to spare (it would spill at D = 128).
#ifndef FC_HOPPER_MODES
#define FC_HOPPER_MODES 0
#endif
#if FC_HOPPER_MODES && FC_HOPPER_SPLIT_KV
#error "FC_HOPPER_MODES=1 has no split-KV path (the plan does not split mode problems)"
#endif
// Dynamic schedule: the producer takes work units from a global counter (workspace words 0 and
// 1: next unit, CTAs done; zero at launch, zero again when the last CTA has taken its last
// unit) and hands each one to the consumers beside its Q buffer, instead of the static
// blockIdx.x + k * gridDim.x. Causal units differ in length; greedy taking in longest-first
// order evens the CTAs out.
#ifndef FC_HOPPER_DYNAMIC
#define FC_HOPPER_DYNAMIC 0
#endif
#if FC_HOPPER_DYNAMIC && FC_HOPPER_SPLIT_KV
#error "FC_HOPPER_DYNAMIC and FC_HOPPER_SPLIT_KV both use the workspace's first words"
#endif
#if FC_HOPPER_PINGPONG && !FC_HOPPER_OVERLAP
#error "FC_HOPPER_PINGPONG=1 needs FC_HOPPER_OVERLAP=1"
#endif
#if FC_HOPPER_SMEM_EPILOGUE && FC_HOPPER_Q_STAGES < 2
#error "FC_HOPPER_SMEM_EPILOGUE=1 needs FC_HOPPER_Q_STAGES=2 (O is staged in the item's own Q buffer)"
#endif
#if FC_HOPPER_SPLIT_KV && FC_HOPPER_SMEM_EPILOGUE
#error "FC_HOPPER_SPLIT_KV=1 uses the register epilogue (FC_HOPPER_SMEM_EPILOGUE=0)"
#endif

namespace fch {

constexpr int D = FC_HEAD_DIM;
constexpr int BM = 128;                 // q rows per work item (= Q TMA box rows)
constexpr int WG_M = 64;                // q rows per consumer warpgroup
constexpr int BN = FC_HOPPER_BLOCK_N;   // keys per K/V tile (= K/V TMA box rows)
constexpr int STAGES = FC_HOPPER_STAGES;
constexpr int Q_STAGES = FC_HOPPER_Q_STAGES;
constexpr int NBOX = D / 64;            // 64-column (128-byte) TMA boxes per row of a tile
constexpr int ROW_BYTES = 128;          // one swizzled box row
constexpr int Q_BOX_BYTES = BM * ROW_BYTES;
constexpr int KV_BOX_BYTES = BN * ROW_BYTES;
constexpr int Q_BYTES = NBOX * Q_BOX_BYTES;
constexpr int KV_TILE_BYTES = NBOX * KV_BOX_BYTES;

// Shared memory map (offsets from the 1024-byte aligned base).
constexpr int OFF_Q = 0;
constexpr int OFF_K = OFF_Q + Q_STAGES * Q_BYTES;
constexpr int OFF_V = OFF_K + STAGES * KV_TILE_BYTES;
constexpr int OFF_BAR = OFF_V + STAGES * KV_TILE_BYTES;
// q_full[QS], q_empty[QS], k_full[S], k_empty[S], v_full[S], v_empty[S], v_landed (the
// producer's own barrier for a V tile it zeroes the tail of, see fetch_kv_tile)
constexpr int NUM_BARS = 2 * Q_STAGES + 4 * STAGES + 1;
// Dynamic schedule: the unit index each Q buffer holds (-1: no more), one int per buffer, after
// the barriers (8 bytes reserved either way).
constexpr int OFF_ITEM = OFF_BAR + NUM_BARS * 8;
constexpr int SMEM_USED = OFF_BAR + ((NUM_BARS * 8 + 8 + 127) / 128) * 128;
constexpr int SMEM_ALIGN_SLACK = 1024;
constexpr bool MODES = FC_HOPPER_MODES;
// Producer threads: warp 0 in the modes build (it zeroes tail rows), thread 0 otherwise.
constexpr int PRODUCER_LANES = MODES ? 32 : 1;
// What the host must request as dynamic shared memory (crates/gen5-persistent/src/hopper.rs
// repeats this formula).
constexpr int SMEM_BYTES = SMEM_USED + SMEM_ALIGN_SLACK;

constexpr int CONSUMER_THREADS = 256;
constexpr int CONSUMER_REGS = FC_HOPPER_CONSUMER_REGS;
constexpr int PRODUCER_REGS = CONSUMER_REGS >= 240 ? 24 : 40;
// Named barrier ids (named_barrier.cuh): scheduler barrier of consumer cw = BAR_SCHED + cw,
// warpgroup-local barrier of consumer cw = BAR_WG + cw.
enum : unsigned { BAR_SCHED = 1, BAR_WG = 3 };

static_assert(BN == 64 || BN == 128 || BN == 176, "FC_HOPPER_BLOCK_N must be 64, 128 or 176");
static_assert(STAGES >= 2 && STAGES <= 8, "FC_HOPPER_STAGES in 2..8");
static_assert(Q_STAGES == 1 || Q_STAGES == 2, "FC_HOPPER_Q_STAGES must be 1 or 2");
static_assert(CONSUMER_REGS == 232 || CONSUMER_REGS == 240, "FC_HOPPER_CONSUMER_REGS must be 232 or 240");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory over the sm_90 opt-in limit");
static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 256 <= 65536, "register file overcommitted");

// Debug tags for mbar_wait (which barrier a stuck wait was on).
enum { TAG_Q_EMPTY = 1, TAG_K_EMPTY = 2, TAG_V_EMPTY = 3, TAG_Q_FULL = 4, TAG_K_FULL = 5, TAG_V_FULL = 6 };

// Block info for this build: the general form (seqlen.cuh) with FC_HOPPER_MODES, else the dense
// one the compiler can see through (lengths from the parameter block, keys [0, causal end)).
__device__ __forceinline__ SeqInfo block_seq(const AttentionParams& p, int b) {
    if constexpr (MODES) return seq_info(p, b);
    SeqInfo s;
    s.len_q = p.seq_q;
    s.len_k = p.seq_k;
    s.q_row0 = 0;
    s.k_row0 = 0;
    return s;
}
__device__ __forceinline__ KeyRange block_keys(const AttentionParams& p, const SeqInfo& seq, int row) {
    if constexpr (MODES) return key_range(p, seq, row);
    KeyRange r;
    r.lo = 0;
    r.hi = causal_key_end(p, row);
    return r;
}

struct Work {
    int b, h, m;    // batch, q head, q tile index
    int kb0;        // first key tile of this work unit (a window's first visible tile, or a split's)
    int n_blocks;   // key tiles this unit visits: [kb0, kb0 + n_blocks); -1: the q tile starts past
                    // its (varlen) sequence's end, and producer and consumers skip the unit
#if FC_HOPPER_SPLIT_KV
    int item;       // schedule index of the item (indexes the workspace)
    int split;      // which of p.num_splits key ranges
#endif
};

// Static schedule shared by producer and consumers (they must agree item by item).
// Items are grouped in L2 sections of G (batch, head) pairs; inside a section the q-tile index is
// the outer loop (descending for causal: longest tiles first) and the head the inner one, so the
// CTAs running at one time share the K/V of at most G heads. Without causal masking G = 1
// (FC_HOPPER_HEAD_MAJOR): a head's q tiles run side by side over the same K/V.
struct Schedule {
    int nm;     // q tiles per (batch, head)
    int bh;     // batch * heads_q
    int total;  // work items
    int g;      // heads per L2 section
};

__device__ __forceinline__ Schedule make_schedule(const AttentionParams& p) {
    Schedule s;
    s.nm = (p.seq_q + BM - 1) / BM;
    s.bh = p.batch * p.heads_q;
    s.total = s.nm * s.bh;
    int qpk = p.q_heads_per_kv > 0 ? p.q_heads_per_kv : 1;
    unsigned long long kv_bytes = 2ull * (unsigned long long)(p.seq_k > 0 ? p.seq_k : 1) * D * sizeof(elem_t) / qpk;
    if (kv_bytes == 0) kv_bytes = 1;
    unsigned long long g = (unsigned long long)FC_HOPPER_L2_SECTION_BYTES / kv_bytes;
    if (g < 1) g = 1;
    if (g > (unsigned long long)s.bh) g = s.bh;
#if FC_HOPPER_HEAD_MAJOR
    // Without causal masking every item is equally long and needs no longest-first order: one
    // head per section (its q tiles consecutive) puts all the CTAs of a head on its K/V at the
    // same time, so each K/V tile comes from DRAM once and is reused from L2 while still hot.
    if (!p.causal) g = 1;
#endif
    s.g = (int)g;
    return s;
}

// The partial section (the bh mod G heads left over, when there are any) comes first: under causal
// masking a section's longest items start as it begins, and the last section's would otherwise
// start last and run on alone while the other CTAs idle.
__device__ __forceinline__ Work decode(const AttentionParams& p, const Schedule& s, int t) {
    const int per_section = s.g * s.nm;
    const int rem = s.bh % s.g;
    int first_bh, g_here, within;
    if (t < rem * s.nm) {
        first_bh = s.bh - rem;
        g_here = rem;
        within = t;
    } else {
        const int u = t - rem * s.nm;
        const int section = u / per_section;
        within = u - section * per_section;
        first_bh = section * s.g;
        g_here = s.g;
    }
    const int m_idx = within / g_here;
    const int bh = first_bh + (within - m_idx * g_here);
    Work w;
    w.b = bh / p.heads_q;
    w.h = bh - w.b * p.heads_q;
    w.m = p.causal ? (s.nm - 1 - m_idx) : m_idx;
    // Block info (seqlen.cuh): the key tiles some row of the q tile sees (causal, window and the
    // sequence's lengths); tiles outside are never loaded.
    const SeqInfo seq = block_seq(p, w.b);
    const int q0 = w.m * BM;
    if (q0 >= seq.len_q) {
        w.kb0 = 0;
        w.n_blocks = -1;
        return w;
    }
    if constexpr (MODES) {
        const KeyTiles kt = visited_key_tiles(p, seq, q0, min(BM, seq.len_q - q0), BN);
        w.kb0 = kt.first;
        w.n_blocks = kt.end - kt.first;
    } else {
        const int key_end = p.causal ? causal_key_end_for_tile(p, q0, q0 + BM) : p.seq_k;
        w.kb0 = 0;
        w.n_blocks = key_end <= 0 ? 0 : (key_end + BN - 1) / BN;
    }
    return w;
}

// Splits per item: p.num_splits in the split-KV build, 1 otherwise (a compile-time constant, so
// the unsplit build's unit loop is exactly its old item loop).
__device__ __forceinline__ int splits_of(const AttentionParams& p) {
#if FC_HOPPER_SPLIT_KV
    return p.num_splits > 1 ? p.num_splits : 1;
#else
    (void)p;
    return 1;
#endif
}

// Work unit u = item t * splits + split. Producer and consumers walk the same unit sequence and
// get the same [kb0, kb0 + n_blocks) from here, which is what the barrier protocol needs. Split s
// of an item with n key tiles takes tiles [s n / S, (s+1) n / S): sizes differ by at most one and
// a split is empty only when n < S (its unit loads Q, visits no tile and still takes part in the
// combine with an empty partial).
__device__ __forceinline__ Work decode_unit(const AttentionParams& p, const Schedule& s, int u) {
#if FC_HOPPER_SPLIT_KV
    const int ns = splits_of(p);
    const int t = u / ns;
    const int split = u - t * ns;
    Work w = decode(p, s, t);
    const long long n = w.n_blocks;  // (split plans are dense: every unit has rows)
    const int kb0 = (int)(((long long)split * n) / ns);
    const int kb1 = (int)(((long long)(split + 1) * n) / ns);
    w.kb0 += kb0;
    w.n_blocks = kb1 - kb0;
    w.item = t;
    w.split = split;
    return w;
#else
    return decode(p, s, u);
#endif
}

// ---- consumer math ---------------------------------------------------------------------------

// S[64 x BN] = Q[64 x D] * K[BN x D]^T for this warpgroup's 64 rows.
__device__ __forceinline__ void gemm_qk(float (&s)[BN / 2], unsigned long long q_desc, unsigned long long k_desc) {
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
        // k16 step k: 32 bytes into the 128-byte swizzled row, box k/4 (columns 64*(k/4)...).
        const unsigned long long qa = q_desc + (unsigned long long)(((k % 4) * 32 + (k / 4) * Q_BOX_BYTES) >> 4);
        const unsigned long long kb = k_desc + (unsigned long long)(((k % 4) * 32 + (k / 4) * KV_BOX_BYTES) >> 4);
        wgmma_ss(s, qa, kb, k > 0 ? 1 : 0);  // N = BN (overload on the accumulator size)
    }
}

// O[64 x D] += P[64 x BN] * V[BN x D]; P as packed elem_t pairs in the A-fragment layout.
__device__ __forceinline__ void gemm_pv(float (&o)[D / 2], const unsigned (&pr)[BN / 4], unsigned long long v_desc) {
#pragma unroll
    for (int t = 0; t < BN / 16; ++t) {
        const unsigned a[4] = {pr[4 * t + 0], pr[4 * t + 1], pr[4 * t + 2], pr[4 * t + 3]};
        // keys 16t..16t+15 = 16 swizzled rows = 2048 bytes further into both V boxes.
        const unsigned long long vb = v_desc + (unsigned long long)((t * 16 * ROW_BYTES) >> 4);
        wgmma_rs_tb(o, a, vb, 1);  // N = D
    }
}

// Keys outside each row's [lo, hi) become -inf (windows and per-sequence lengths; the causal-only
// apply_mask below is the same with lo = 0). col0 = first key this thread holds.
__device__ __forceinline__ void apply_mask_range(float (&s)[BN / 2], int col0, const KeyRange& r0, const KeyRange& r1) {
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        const int c = col0 + 8 * j;
        if (c < r0.lo || c >= r0.hi) s[4 * j + 0] = -INFINITY;
        if (c + 1 < r0.lo || c + 1 >= r0.hi) s[4 * j + 1] = -INFINITY;
        if (c < r1.lo || c >= r1.hi) s[4 * j + 2] = -INFINITY;
        if (c + 1 < r1.lo || c + 1 >= r1.hi) s[4 * j + 3] = -INFINITY;
    }
}

// Raw scores to log2-domain logits with the score modifiers (score_mod.cuh), on the wgmma
// accumulator layout (rows row0 and row0 + 8, keys col0 + 8 j + {0, 1}). With modifiers the
// online softmax then runs with scale 1.
__device__ __forceinline__ void modify_scores(float (&s)[BN / 2], const ScoreMod& mod, int row0, int col0) {
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e)
            s[4 * j + e] = logit_log2(mod, s[4 * j + e], row0 + 8 * (e >> 1), col0 + 8 * j + (e & 1));
    }
}

// Scores of key tile [k0, k0 + BN) of sequence b, head h, as the softmax takes them: modified
// (softcap, ALiBi; score_mod.cuh) when the problem has modifiers, then masked unless every row of
// the warpgroup (rows wg_row0 .. wg_row0 + WG_M - 1) sees the whole tile. Registers are the limit
// in the consumers, so nothing of the block info is kept across the key loop: the lengths come
// from the parameter block (constant bank) or, for per-sequence lengths, are reloaded per tile
// (an L1 hit; the loop's barrier asm keeps the compiler from hoisting them).
__device__ __forceinline__ void prepare_scores(const AttentionParams& p, float (&s)[BN / 2], int b, int h, int row0,
                                               int wg_row0, int k0, int col_in_block) {
    const SeqInfo seq = block_seq(p, b);
    if (MODES && has_score_mod(p)) {
        const ScoreMod mod = score_mod(p, seq, b, h);
        modify_scores(s, mod, row0, k0 + col_in_block);
    }
    const int wg_lo = block_keys(p, seq, wg_row0 + WG_M - 1).lo;
    const int wg_hi = block_keys(p, seq, wg_row0).hi;
    if (k0 < wg_lo || k0 + BN > wg_hi)
        apply_mask_range(s, k0 + col_in_block, block_keys(p, seq, row0), block_keys(p, seq, row0 + 8));
}

// Epilogue rules with the block info (as masking.cuh's, for any mask): a row with l = 0 that sees
// keys got only -inf logits (infinite inputs), which is 0/0 = NaN as in the f64 reference; a row
// that sees none is the defined empty row, O = 0 and LSE = +inf.
__device__ __forceinline__ float row_inverse(float l, const KeyRange& keys) {
    if (l != 0.f) return 1.f / l;
    return keys.hi > keys.lo ? FC_QNAN : 0.f;
}
__device__ __forceinline__ float row_log_sum_exp(float l, const KeyRange& keys, float lse_if_nonzero) {
    if (l != 0.f) return lse_if_nonzero;
    return keys.hi > keys.lo ? FC_QNAN : __int_as_float(0x7f800000);
}

// Online softmax step on raw scores s (in place: s becomes p = exp2(s*scale_log2 - m*scale_log2)).
// Updates the running max m[2] (raw units) and the per-thread partial row sums l[2]; returns the
// factors alpha[2] the old O rows must be multiplied by. -inf rows stay finite: a row whose max
// is still -inf uses 0 as its shift, so every p is exp2(-inf) = 0 and alpha = 0 (O is 0 anyway).
__device__ __forceinline__ void online_softmax(float (&s)[BN / 2], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                               float scale_log2) {
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        mx[0] = fmaxf(mx[0], fmaxf(s[4 * j + 0], s[4 * j + 1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[4 * j + 2], s[4 * j + 3]));
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    }
    float shift[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        shift[r] = (mx[r] == -INFINITY) ? 0.f : mx[r] * scale_log2;
        alpha[r] = (m[r] == -INFINITY) ? 0.f : exp2f(m[r] * scale_log2 - shift[r]);  // O, l are 0 then
        m[r] = mx[r];
    }
    float sum[2] = {0.f, 0.f};
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        s[4 * j + 0] = exp2f(fmaf(s[4 * j + 0], scale_log2, -shift[0]));
        s[4 * j + 1] = exp2f(fmaf(s[4 * j + 1], scale_log2, -shift[0]));
        s[4 * j + 2] = exp2f(fmaf(s[4 * j + 2], scale_log2, -shift[1]));
        s[4 * j + 3] = exp2f(fmaf(s[4 * j + 3], scale_log2, -shift[1]));
        sum[0] += s[4 * j + 0] + s[4 * j + 1];
        sum[1] += s[4 * j + 2] + s[4 * j + 3];
    }
    l[0] = l[0] * alpha[0] + sum[0];
    l[1] = l[1] * alpha[1] + sum[1];
}

__device__ __forceinline__ void rescale_o(float (&o)[D / 2], const float (&alpha)[2]) {
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
        o[4 * j + 0] *= alpha[0];
        o[4 * j + 1] *= alpha[0];
        o[4 * j + 2] *= alpha[1];
        o[4 * j + 3] *= alpha[1];
    }
}

// The S accumulator layout is the A-fragment layout, register for register (see wgmma.cuh).
__device__ __forceinline__ void convert_p(const float (&s)[BN / 2], unsigned (&pr)[BN / 4]) {
#pragma unroll
    for (int i = 0; i < BN / 4; ++i) pr[i] = pack2_u32(s[2 * i], s[2 * i + 1]);
}

// ---- inter-warpgroup ping-pong (FC_HOPPER_PINGPONG) -----------------------------------------
// Consumer cw waits on its own scheduler barrier before issuing a key tile's GEMMs and, once they
// are issued, arrives on the other one's: the GEMM issue slots strictly alternate WG1, WG2, WG1,
// ... (protocol and deadlock argument: docs/generations/gen5-persistent.md, "Ping-pong").
__device__ __forceinline__ void pp_sync(int cw) {
#if FC_HOPPER_PINGPONG
    named_bar_sync(BAR_SCHED + cw, 2 * 128);
#else
    (void)cw;
#endif
}
__device__ __forceinline__ void pp_arrive(int cw) {
#if FC_HOPPER_PINGPONG
    named_bar_arrive(BAR_SCHED + 1 - cw, 2 * 128);
#else
    (void)cw;
#endif
}

__device__ __forceinline__ void st_shared_u32(unsigned addr, unsigned v) {
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_shared_u32(unsigned addr) {
    unsigned v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
    return v;
}
__device__ __forceinline__ uint4 ld_shared_v4(unsigned addr) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}

// 16-byte global store (the O row base and strides are 16-byte aligned: alignment_elems = 8).
__device__ __forceinline__ void st_global_v4(void* ptr, const uint4& v) {
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}

// ---- K/V fetch (the producer's one place that knows where key rows live) --------------------

__device__ __forceinline__ void st_shared_zero_v4(unsigned addr) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(addr), "r"(0) : "memory");
}

// Rows per TMA box of a paged tile: the largest power of two dividing both the block size and
// BN (a box never straddles two pages). Mirrors flashcore_core::launch::paged_box_rows.
__device__ __forceinline__ int paged_box_rows(int block_size) {
    int rows = BN & -BN;
    while (rows > 1 && block_size % rows != 0) rows >>= 1;
    return rows;
}

// One K or V tile: keys [k0, k0 + BN) of sequence b, kv head h_kv, into the stage at `dst`,
// completing `full`. Called by the whole producer warp; lane 0 issues the copies.
//   * strided (dense tensor, contiguous cache, packed varlen): one TMA box per 64 columns, at
//     the sequence's first storage row (packed tensors are one "batch");
//   * paged: one box per page-aligned group of rows through the block table; groups past the
//     sequence's keys are not loaded (their table entries need not be valid).
// When the tile runs past the sequence's keys and the rows there hold something else (a cache's
// unused slots, the next packed sequence, pages never loaded), a V tile (`landed` != 0) must not
// let them in: P = 0 there, but 0 * NaN = NaN would reach O. Its copies then complete on the
// producer's own `landed` barrier, the warp zeroes the rows past the keys, fences them for the
// async proxy (wgmma reads them next) and lane 0 completes `full` with a plain arrive. K tiles
// need none of this: the consumers overwrite those columns' scores with -inf.
// (A dense problem's rows past seq_k lie outside the tensor map, and TMA zero-fills them.)
__device__ __forceinline__ void fetch_kv_tile(const AttentionParams& p, const SeqInfo& seq, int b, int h_kv, int k0,
                                              unsigned dst, const CUtensorMap* map, unsigned full, unsigned landed,
                                              int lane, unsigned* landed_phase) {
    const int valid = min(BN, seq.len_k - k0);  // >= 1: the tile holds a visible key
    const bool per_sequence_k = MODES && (p.seqused_k != nullptr || p.cu_seqlens_k != nullptr);
    const bool zero_tail = landed != 0u && per_sequence_k && valid < BN;
    const unsigned bar = zero_tail ? landed : full;
    if (lane == 0) {
        if (!MODES || p.block_table == nullptr) {
            mbar_arrive_expect_tx(bar, KV_TILE_BYTES);
            const int kv_batch = MODES && p.cu_seqlens_k != nullptr ? 0 : b;
#pragma unroll
            for (int c = 0; c < NBOX; ++c)
                tma_load_4d(dst + c * KV_BOX_BYTES, map, bar, c * 64, (int)seq.k_row0 + k0, h_kv, kv_batch);
        } else {
            const int group = paged_box_rows(p.block_size);
            const int groups = (valid + group - 1) / group;
            mbar_arrive_expect_tx(bar, (unsigned)(groups * group * ROW_BYTES * NBOX));
            const int* table = p.block_table + (long long)b * p.max_blocks_per_seq;
            for (int g = 0; g < groups; ++g) {
                const int j = k0 + g * group;
                const int block = table[j / p.block_size];
#pragma unroll
                for (int c = 0; c < NBOX; ++c)
                    tma_load_4d(dst + c * KV_BOX_BYTES + g * group * ROW_BYTES, map, bar, c * 64, j % p.block_size,
                                h_kv, block);
            }
        }
    }
    if (zero_tail) {
        mbar_wait(landed, *landed_phase, TAG_V_FULL);
        *landed_phase ^= 1u;
        // Whole rows [valid, BN) of every column box: zeros need no swizzle.
        const int chunks = (BN - valid) * (ROW_BYTES / 16);
#pragma unroll
        for (int c = 0; c < NBOX; ++c) {
            const unsigned rows = dst + c * KV_BOX_BYTES + valid * ROW_BYTES;
            for (int i = lane; i < chunks; i += 32) st_shared_zero_v4(rows + 16 * i);
        }
        fence_proxy_async_smem();
        __syncwarp();
        if (lane == 0) mbar_arrive(full);
    }
}

// ---- split-KV combine (FC_HOPPER_SPLIT_KV) -----------------------------------------------------
// Protocol, memory-ordering argument and workspace layout: docs/generations/gen5-split-kv.md.
#if FC_HOPPER_SPLIT_KV
// Workspace layout, in 4-byte words from p.workspace (hopper.rs::split_workspace_f32 repeats it):
//   [0, ctr_words)  arrival counters (u32), one per (item t, consumer warpgroup cw, warp):
//                   word t*8 + cw*4 + warp; ctr_words = items*8 rounded up to 32 (128 bytes).
//                   Zero when a launch starts (the host's side of the workspace contract on
//                   LaunchPlan: it zeroes the buffer when it allocates it, not per call); the
//                   last arriver puts its counter back to zero, so they end zero too (ours).
//   then one slot of SPLIT_SLOT_FLOATS per (item t, split s, cw), slot index (t*S + s)*2 + cw:
//     O part  [0, 64*D)       float4 number j*128 + tid = this thread's o[4j .. 4j+3]
//                             (unnormalised: sum over the split's keys of p * v, p relative to m)
//     (m, l)  [64*D, 64*D+512) float4 number tid = (m[0], m[1], l[0], l[1]) of the thread's two
//                             rows (raw-score running max; quad-reduced sum), the same in a quad.
// The combining warp reads exactly the (row, col) elements it owns itself, from every split's slot.
constexpr int SPLIT_CTRS_PER_ITEM = 8;  // 2 consumer warpgroups x 4 warps
constexpr int SPLIT_SLOT_FLOATS = WG_M * D + 4 * 128;
static_assert(SPLIT_SLOT_FLOATS % 32 == 0, "slots stay 128-byte aligned");

// L2-only (.cg) 16-byte global accesses: partials are written by one SM and read by another,
// never through a possibly stale L1 line.
__device__ __forceinline__ void st_cg_f4(float* ptr, float a, float b, float c, float d) {
    asm volatile("st.global.cg.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "f"(a), "f"(b), "f"(c), "f"(d)
                 : "memory");
}
__device__ __forceinline__ float4 ld_cg_f4(const float* ptr) {
    float4 v;
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(ptr)
                 : "memory");
    return v;
}
// One arrival: release (our partials before the increment) and acquire (the other arrivers'
// partials before our reads), gpu scope. Returns the count before the increment.
__device__ __forceinline__ unsigned atom_add_acq_rel_gpu(unsigned* ptr, unsigned v) {
    unsigned old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(ptr), "r"(v) : "memory");
    return old;
}
__device__ __forceinline__ void st_relaxed_gpu_u32(unsigned* ptr, unsigned v) {
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(ptr), "r"(v) : "memory");
}

// One step of the combine, for split partial (ml = (m0, m1, l0, l1), v = this thread's O elements
// of that split), in split order 0..S-1: the online softmax's update across splits. The running
// max mx (raw scores) and the shift follow the kernel's -inf rule (a row with no finite max yet
// shifts by 0; a running or split max of -inf weighs 0), so no -inf - -inf is ever formed. The
// products are rounded on their own (__fmul_rn, no contraction into an FMA): an unchanged max
// rescales by exactly 1 and the split holding the max weighs exactly 1.
__device__ __forceinline__ void combine_step(float (&o)[D / 2], float (&lsum)[2], float (&mx)[2], const float4& ml,
                                             const float4 (&v)[D / 8], float c) {
    float scale[2], wt[2];
    const float ms[2] = {ml.x, ml.y};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float m_new = fmaxf(mx[r], ms[r]);
        const float shift = m_new == -INFINITY ? 0.f : __fmul_rn(m_new, c);
        scale[r] = mx[r] == -INFINITY ? 0.f : exp2f(__fmul_rn(mx[r], c) - shift);
        wt[r] = ms[r] == -INFINITY ? 0.f : exp2f(__fmul_rn(ms[r], c) - shift);
        mx[r] = m_new;
    }
    lsum[0] = fmaf(wt[0], ml.z, lsum[0] * scale[0]);
    lsum[1] = fmaf(wt[1], ml.w, lsum[1] * scale[1]);
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
        o[4 * j + 0] = fmaf(wt[0], v[j].x, o[4 * j + 0] * scale[0]);
        o[4 * j + 1] = fmaf(wt[0], v[j].y, o[4 * j + 1] * scale[0]);
        o[4 * j + 2] = fmaf(wt[1], v[j].z, o[4 * j + 2] * scale[1]);
        o[4 * j + 3] = fmaf(wt[1], v[j].w, o[4 * j + 3] * scale[1]);
    }
}

// The epilogue of a unit when p.num_splits > 1, per warp (16 rows): publish this split's partial,
// count the arrival, and if this warp is the last of the item's S units to arrive, combine all S
// partials of its rows in split order 0..S-1 (deterministic whoever is last) and write O and LSE
// with the unsplit epilogue's conventions. Never waits for another CTA.
// Called by all 32 lanes of the warp (the arrival and the branch on it are warp-uniform).
__device__ __forceinline__ void split_epilogue(const AttentionParams& p, int n_items, const Work& w, int cw, int tid,
                                               float (&o)[D / 2], const float (&m)[2], const float (&l)[2], int grow0,
                                               int col_in_block) {
    const int ns = p.num_splits;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const long long ctr_words = ((long long)n_items * SPLIT_CTRS_PER_ITEM + 31) & ~31ll;
    unsigned* ctr = reinterpret_cast<unsigned*>(p.workspace) + (long long)w.item * SPLIT_CTRS_PER_ITEM + cw * 4 + warp;
    // Slot of split s: slots + (slot0 + 2 s) * SPLIT_SLOT_FLOATS.
    const float* slots = p.workspace + ctr_words;
    const long long slot0 = (long long)w.item * ns * 2 + cw;
    float* mine = p.workspace + ctr_words + (slot0 + 2ll * w.split) * SPLIT_SLOT_FLOATS;

    // 1. This split's partial (every lane, its own elements; coalesced 512-byte runs per warp).
#pragma unroll
    for (int j = 0; j < D / 8; ++j)
        st_cg_f4(mine + 4 * (j * 128 + tid), o[4 * j + 0], o[4 * j + 1], o[4 * j + 2], o[4 * j + 3]);
    st_cg_f4(mine + WG_M * D + 4 * tid, m[0], m[1], l[0], l[1]);

    // 2. Publish: each lane's stores are ordered before the warp barrier by its own fence, the
    //    barrier orders all 32 lanes before lane 0's acq_rel increment (the release).
    __threadfence();
    __syncwarp();
    unsigned old = 0;
    if (lane == 0) old = atom_add_acq_rel_gpu(ctr, 1u);
    old = __shfl_sync(0xffffffffu, old, 0);
    if (old != (unsigned)(ns - 1)) return;  // not the last: another warp combines (warp-uniform)

    // 3. Last arriver: lane 0's increment read the S-1 earlier increments (acquire); the warp
    //    barrier and each lane's fence order every lane's loads below after it.
    __syncwarp();
    __threadfence();
    // One pass over the splits in order (the result does not depend on which warp is last); a
    // split's loads do not depend on the previous split's math, so two splits' loads are in
    // flight at once (more would not fit the 168 registers ptxas compiles the kernel to).
    const float c = p.scale_log2;
    float mx[2] = {-INFINITY, -INFINITY};
    float lsum[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
#pragma unroll 2
    for (int sp = 0; sp < ns; ++sp) {
        const float* part = slots + (slot0 + 2ll * sp) * SPLIT_SLOT_FLOATS;
        const float4 ml = ld_cg_f4(part + WG_M * D + 4 * tid);
        float4 v[D / 8];
#pragma unroll
        for (int j = 0; j < D / 8; ++j) v[j] = ld_cg_f4(part + 4 * (j * 128 + tid));
        combine_step(o, lsum, mx, ml, v, c);
    }

    // 4. O and LSE exactly as the unsplit epilogue (l = 0 rules of masking.cuh).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int grow = grow0 + 8 * r;
        if (grow < p.seq_q) {
            const float inv = row_sum_inverse(p, grow, lsum[r]);
            elem_t* orow = reinterpret_cast<elem_t*>(p.o) + o_offset(p, w.b, w.h, grow);
#pragma unroll
            for (int j = 0; j < D / 8; ++j) {
                *reinterpret_cast<elem2_t*>(orow + 8 * j + col_in_block) =
                    pack2(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
            }
            if ((lane & 3) == 0) {
                p.lse[lse_offset(p, w.b, w.h, grow)] =
                    row_lse(p, grow, lsum[r], (mx[r] * c + __log2f(lsum[r])) * 0.69314718055994531f);
            }
        }
    }

    // 5. All S arrivals of this counter have happened (we saw S-1 before ours): nobody touches it
    //    again in this launch, and the next launch is stream-ordered after this one.
    if (lane == 0) st_relaxed_gpu_u32(ctr, 0u);
}
#endif

}  // namespace fch

extern "C" __global__ void __launch_bounds__(384, 1)
    attention_persistent_hopper(const __grid_constant__ AttentionParams p, const __grid_constant__ CUtensorMap tm_q,
                                const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v) {
    using namespace fch;
    // Declared 16-aligned on purpose: with __align__(1024) the compiler may fold the round-up below away.
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const unsigned base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const unsigned sQ = base + OFF_Q;
    const unsigned sK = base + OFF_K;
    const unsigned sV = base + OFF_V;
    const unsigned bar0 = base + OFF_BAR;
    // q_full[qs] = bar_q_full + 8 qs, k_full[s] = bar_k_full + 8 s, etc.
    const unsigned bar_q_full = bar0;
    const unsigned bar_q_empty = bar0 + 8 * Q_STAGES;
    const unsigned bar_k_full = bar0 + 16 * Q_STAGES;
    const unsigned bar_k_empty = bar_k_full + 8 * STAGES;
    const unsigned bar_v_full = bar_k_empty + 8 * STAGES;
    const unsigned bar_v_empty = bar_v_full + 8 * STAGES;
    const unsigned bar_v_landed = bar_v_empty + 8 * STAGES;

    if (threadIdx.x == 0) {
#pragma unroll
        for (int s = 0; s < Q_STAGES; ++s) {
            mbar_init(bar_q_full + 8 * s, 1);
            mbar_init(bar_q_empty + 8 * s, CONSUMER_THREADS);
        }
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(bar_k_full + 8 * s, 1);
            mbar_init(bar_k_empty + 8 * s, CONSUMER_THREADS);
            mbar_init(bar_v_full + 8 * s, 1);
            mbar_init(bar_v_empty + 8 * s, CONSUMER_THREADS);
        }
        mbar_init(bar_v_landed, 1);
        mbar_fence_init();
        tma_prefetch_map(&tm_q);
        tma_prefetch_map(&tm_k);
        tma_prefetch_map(&tm_v);
    }
#if defined(FC_HOPPER_DEBUG)
    if (threadIdx.x == 0 && (base - smem_u32(smem_raw)) + SMEM_USED > SMEM_BYTES) {
        printf("flashcore hopper: dynamic smem base misaligned beyond the slack\n");
        __trap();
    }
#if FC_HOPPER_SPLIT_KV
    if (threadIdx.x == 0 && p.num_splits > 1 && p.workspace == nullptr) {
        printf("flashcore hopper: num_splits %d but no workspace\n", p.num_splits);
        __trap();
    }
#endif
#endif
    __syncthreads();

    const Schedule sched = make_schedule(p);
    // Work units: items x splits (splits_of is the constant 1 without FC_HOPPER_SPLIT_KV).
    const int n_units = sched.total * splits_of(p);
    const int warpgroup = threadIdx.x / 128;

    if (warpgroup == 0) {
        // ===================================== producer =====================================
        warpgroup_reg_dealloc<PRODUCER_REGS>();
        // Thread 0 produces: it issues every TMA and barrier operation. In the modes build the
        // whole of warp 0 runs the loop, to zero the rows of a V tile past its sequence's keys
        // (fetch_kv_tile); the dense build keeps the lone thread (31 lanes polling the barriers
        // beside it measured a few per cent slower on causal rows). The other warps idle.
        if (threadIdx.x < PRODUCER_LANES) {
            const int lane = threadIdx.x;
            const bool leader = lane == 0;
            int stage = 0;
            unsigned phase = 0;
            unsigned landed_phase = 0;
            int it = 0;
#if FC_HOPPER_DYNAMIC
            unsigned* counters = reinterpret_cast<unsigned*>(p.workspace);  // [0] next unit, [1] CTAs done
            // Taken when this CTA is ready for it, not one ahead: claiming ahead was measured
            // worse under causal masking (it breaks the greedy longest-first balance at the tail).
            for (;; ++it) {
                // The next unit with query rows (units past a varlen sequence's end are skipped).
                int t;
                bool done;
                Work w;
                for (;;) {
                    t = 0;
                    if (leader) t = take_work(counters);
                    if constexpr (PRODUCER_LANES > 1) t = __shfl_sync(0xffffffffu, t, 0);
                    done = t >= n_units;
                    if (done) break;
                    w = decode_unit(p, sched, t);
                    if (w.n_blocks >= 0) break;
                }
#else
            for (int t = blockIdx.x; t < n_units; t += gridDim.x, ++it) {
                const Work w = decode_unit(p, sched, t);
                if (w.n_blocks < 0) {  // past a varlen sequence's end: the consumers skip it too
                    --it;
                    continue;
                }
#endif
                // Q buffer qs free? (item it - Q_STAGES's consumers released it; its first use
                // waits parity 1 of a fresh barrier and passes at once)
                const int qs = Q_STAGES == 1 ? 0 : (it & 1);
                const unsigned qpar = Q_STAGES == 1 ? (unsigned)(it & 1) : (unsigned)((it >> 1) & 1);
                const unsigned q_full = bar_q_full + 8 * qs;
                mbar_wait(bar_q_empty + 8 * qs, qpar ^ 1, TAG_Q_EMPTY);
#if FC_HOPPER_DYNAMIC
                // The unit index goes beside the Q buffer; the arrive on q_full (release) below
                // publishes it with the Q fill. -1: no more units, and no copy (a plain arrive
                // completes the phase).
                if (leader) st_shared_u32(base + OFF_ITEM + 4 * qs, (unsigned)(done ? -1 : t));
                if (done) {
                    if (leader) {
                        mbar_arrive(q_full);
                        finish_taking(counters);  // the last CTA leaves the counters zero
                    }
                    break;
                }
#endif
                const SeqInfo seq = block_seq(p, w.b);
                if (leader) {
                    mbar_arrive_expect_tx(q_full, Q_BYTES);
                    const int q_batch = MODES && p.cu_seqlens_q != nullptr ? 0 : w.b;  // packed Q: one "batch"
#pragma unroll
                    for (int c = 0; c < NBOX; ++c)
                        tma_load_4d(sQ + qs * Q_BYTES + c * Q_BOX_BYTES, &tm_q, q_full, c * 64,
                                    (int)seq.q_row0 + w.m * BM, w.h, q_batch);
                }
                const int h_kv = w.h / p.q_heads_per_kv;
                for (int kb = 0; kb < w.n_blocks; ++kb) {
                    const unsigned kf = bar_k_full + 8 * stage, ke = bar_k_empty + 8 * stage;
                    const unsigned vf = bar_v_full + 8 * stage, ve = bar_v_empty + 8 * stage;
                    const int k0 = (w.kb0 + kb) * BN;
                    mbar_wait(ke, phase ^ 1, TAG_K_EMPTY);
                    fetch_kv_tile(p, seq, w.b, h_kv, k0, sK + stage * KV_TILE_BYTES, &tm_k, kf, 0, lane, nullptr);
                    mbar_wait(ve, phase ^ 1, TAG_V_EMPTY);
                    fetch_kv_tile(p, seq, w.b, h_kv, k0, sV + stage * KV_TILE_BYTES, &tm_v, vf, bar_v_landed, lane,
                                  &landed_phase);
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
            }
            // Nothing to wait for here: the producer only ever waits on an "empty" barrier right
            // before filling that stage, and every stage it filled is consumed (and waited on
            // through its "full" barrier) by both consumer warpgroups before they exit.
        }
    } else {
        // ===================================== consumers ====================================
        warpgroup_reg_alloc<CONSUMER_REGS>();
        const int cw = warpgroup - 1;  // 0 or 1: rows [64 cw, 64 cw + 64) of the q tile
        const int tid = threadIdx.x & 127;
        const int warp = tid >> 5;
        const int lane = tid & 31;
        const int row_in_tile = cw * WG_M + warp * 16 + (lane >> 2);  // and row_in_tile + 8
        const int col_in_block = 2 * (lane & 3);
        const float scale_log2 = p.scale_log2;

        // K-major, 128B swizzle: SBO = 1024 (8 rows x 128 B), LBO unused (16 -> encoded 1).
        const unsigned long long q_desc0 = make_desc_sw128(sQ + cw * WG_M * ROW_BYTES, 16, 1024);
        const unsigned long long k_desc0 = make_desc_sw128(sK, 16, 1024);
        // MN-major, 128B swizzle: SBO = 1024 (next 8 keys), LBO = next 64-column box.
        const unsigned long long v_desc0 = make_desc_sw128(sV, KV_BOX_BYTES, 1024);

#if FC_HOPPER_PINGPONG
        // Prime: warpgroup 1 holds the first issue slot (its first pp_sync pairs with this arrive).
        if (cw == 0) named_bar_arrive(BAR_SCHED + 0, 2 * 128);
#endif

        int stage = 0;
        unsigned phase = 0;
        int it = 0;
#if FC_HOPPER_DYNAMIC
        for (;; ++it) {
            const int qs = Q_STAGES == 1 ? 0 : (it & 1);
            const unsigned qpar = Q_STAGES == 1 ? (unsigned)(it & 1) : (unsigned)((it >> 1) & 1);
            const unsigned q_full = bar_q_full + 8 * qs;
            const unsigned q_empty = bar_q_empty + 8 * qs;
            mbar_wait(q_full, qpar, TAG_Q_FULL);  // acquire: the unit index below and Q
            const int t = (int)ld_shared_u32(base + OFF_ITEM + 4 * qs);
            if (t < 0) break;  // both warpgroups read the same -1: equal slot counts
            const Work w = decode_unit(p, sched, t);
#else
        for (int t = blockIdx.x; t < n_units; t += gridDim.x, ++it) {
            const Work w = decode_unit(p, sched, t);
            if (w.n_blocks < 0) {  // past a varlen sequence's end: the producer skips it too
                --it;
                continue;
            }
            const int qs = Q_STAGES == 1 ? 0 : (it & 1);
            const unsigned qpar = Q_STAGES == 1 ? (unsigned)(it & 1) : (unsigned)((it >> 1) & 1);
            const unsigned q_full = bar_q_full + 8 * qs;
            const unsigned q_empty = bar_q_empty + 8 * qs;
#endif
            const unsigned long long q_desc = q_desc0 + ((unsigned long long)(qs * Q_BYTES) >> 4);
            // With the smem epilogue the Q buffer is released after O went through it, not after
            // the last QK^T.
            constexpr bool release_q_after_qk = !FC_HOPPER_SMEM_EPILOGUE;
            const int grow0 = w.m * BM + row_in_tile;
            const int grow1 = grow0 + 8;
            // With score modifiers (prepare_scores) the logits are in log2 units before the
            // softmax, which then runs with scale 1.
            const float softmax_scale_log2 = MODES && has_score_mod(p) ? 1.f : scale_log2;

            float o[D / 2];
#pragma unroll
            for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
            float m[2] = {-INFINITY, -INFINITY};
            float l[2] = {0.f, 0.f};
            float alpha[2];

#if !FC_HOPPER_DYNAMIC
            mbar_wait(q_full, qpar, TAG_Q_FULL);
#endif

#if FC_HOPPER_OVERLAP
            if (w.n_blocks > 0) {
                float s[BN / 2];
                unsigned pr[BN / 4];
                // ---- first key tile: S_0, softmax_0 (no PV yet) ----
                {
                    const unsigned kf = bar_k_full + 8 * stage, ke = bar_k_empty + 8 * stage;
                    mbar_wait(kf, phase, TAG_K_FULL);
                    pp_sync(cw);
                    wgmma_fence();
                    gemm_qk(s, q_desc, k_desc0 + ((unsigned long long)(stage * KV_TILE_BYTES) >> 4));
                    wgmma_commit();
                    pp_arrive(cw);
                    wgmma_wait<0>();
                    fence_regs(s);
                    mbar_arrive(ke);
                    if (release_q_after_qk && w.n_blocks == 1) mbar_arrive(q_empty);
                    prepare_scores(p, s, w.b, w.h, grow0, w.m * BM + cw * WG_M, w.kb0 * BN, col_in_block);
                    online_softmax(s, m, l, alpha, softmax_scale_log2);
                    convert_p(s, pr);
                }
                int vstage = stage;
                unsigned vphase = phase;
                if (++stage == STAGES) {
                    stage = 0;
                    phase ^= 1;
                }
                for (int kb = 1; kb < w.n_blocks; ++kb) {
                    const unsigned kf = bar_k_full + 8 * stage, ke = bar_k_empty + 8 * stage;
                    const unsigned vf = bar_v_full + 8 * vstage, ve = bar_v_empty + 8 * vstage;
                    mbar_wait(kf, phase, TAG_K_FULL);
                    pp_sync(cw);
                    wgmma_fence();
                    gemm_qk(s, q_desc, k_desc0 + ((unsigned long long)(stage * KV_TILE_BYTES) >> 4));
                    wgmma_commit();
                    mbar_wait(vf, vphase, TAG_V_FULL);
                    wgmma_fence();  // (does not wait for S_kb; orders our writes of o/pr before the PV reads)
                    gemm_pv(o, pr, v_desc0 + ((unsigned long long)(vstage * KV_TILE_BYTES) >> 4));
                    wgmma_commit();
                    pp_arrive(cw);
                    wgmma_wait<1>();  // S_kb done; PV_{kb-1} may still run
                    fence_regs(s);
                    mbar_arrive(ke);
                    if (release_q_after_qk && kb == w.n_blocks - 1) mbar_arrive(q_empty);
                    prepare_scores(p, s, w.b, w.h, grow0, w.m * BM + cw * WG_M, (w.kb0 + kb) * BN,
                                   col_in_block);
                    online_softmax(s, m, l, alpha, softmax_scale_log2);
                    wgmma_wait<0>();  // PV_{kb-1} done: O and P registers are ours again
                    fence_regs(o);
                    fence_regs(pr);
                    mbar_arrive(ve);
                    rescale_o(o, alpha);
                    convert_p(s, pr);
                    vstage = stage;
                    vphase = phase;
                    if (++stage == STAGES) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
                // ---- last PV (outside the ping-pong: no issue slot) ----
                {
                    const unsigned vf = bar_v_full + 8 * vstage, ve = bar_v_empty + 8 * vstage;
                    mbar_wait(vf, vphase, TAG_V_FULL);
                    wgmma_fence();
                    gemm_pv(o, pr, v_desc0 + ((unsigned long long)(vstage * KV_TILE_BYTES) >> 4));
                    wgmma_commit();
                    wgmma_wait<0>();
                    fence_regs(o);
                    fence_regs(pr);
                    mbar_arrive(ve);
                }
            } else if (release_q_after_qk) {
                mbar_arrive(q_empty);  // no key tile: Q was loaded but is not needed
            }
#else
            for (int kb = 0; kb < w.n_blocks; ++kb) {
                const unsigned kf = bar_k_full + 8 * stage, ke = bar_k_empty + 8 * stage;
                const unsigned vf = bar_v_full + 8 * stage, ve = bar_v_empty + 8 * stage;
                float s[BN / 2];
                mbar_wait(kf, phase, TAG_K_FULL);
                wgmma_fence();
                gemm_qk(s, q_desc, k_desc0 + ((unsigned long long)(stage * KV_TILE_BYTES) >> 4));
                wgmma_commit();
                wgmma_wait<0>();
                fence_regs(s);
                mbar_arrive(ke);
                if (release_q_after_qk && kb == w.n_blocks - 1) mbar_arrive(q_empty);

                prepare_scores(p, s, w.b, w.h, grow0, w.m * BM + cw * WG_M, (w.kb0 + kb) * BN, col_in_block);
                online_softmax(s, m, l, alpha, softmax_scale_log2);
                rescale_o(o, alpha);
                unsigned pr[BN / 4];
                convert_p(s, pr);

                mbar_wait(vf, phase, TAG_V_FULL);
                wgmma_fence();
                gemm_pv(o, pr, v_desc0 + ((unsigned long long)(stage * KV_TILE_BYTES) >> 4));
                wgmma_commit();
                wgmma_wait<0>();
                fence_regs(o);
                fence_regs(pr);
                mbar_arrive(ve);
                if (++stage == STAGES) {
                    stage = 0;
                    phase ^= 1;
                }
            }
            if (release_q_after_qk && w.n_blocks == 0) mbar_arrive(q_empty);  // no key tile: Q unused
#endif

            // ---- epilogue: O /= l, LSE; rows >= seq_q are never written ----
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
                l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
            }
#if FC_HOPPER_SPLIT_KV
            if (p.num_splits > 1) {
                split_epilogue(p, sched.total, w, cw, tid, o, m, l, grow0, col_in_block);
                continue;  // (the register epilogue below is the unsplit one; no smem epilogue here)
            }
#endif
            const int h = w.h, b = w.b;
            // The block info again (reloaded, not kept in registers across the key loop).
            const SeqInfo seq = block_seq(p, b);
            const KeyRange keys0 = block_keys(p, seq, grow0);
            const KeyRange keys1 = block_keys(p, seq, grow1);
#if FC_HOPPER_SMEM_EPILOGUE
            {
                // Stage this warpgroup's 64 x D slice of O (as elem_t) in its own 64-row slice of
                // the item's Q buffer, 128B-swizzled like a Q box (16-byte chunk q of local row lr
                // sits at chunk q ^ (lr & 7)): the quad stores of one instruction hit 8 different
                // chunks (conflict-free), and so do the 16-byte reads of 8 consecutive threads.
                // Every wgmma that read this slice (the last QK^T) is complete: this warp's
                // wait_group 0 on the last PV implies all four warps issued it, after their
                // wait_group 1 on the last QK^T.
                const unsigned sO = sQ + qs * Q_BYTES + cw * WG_M * ROW_BYTES;
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int grow = r == 0 ? grow0 : grow1;
                    const int lr = warp * 16 + (lane >> 2) + 8 * r;
                    const float inv = row_inverse(l[r], r == 0 ? keys0 : keys1);
#pragma unroll
                    for (int j = 0; j < D / 8; ++j) {
                        const unsigned addr = sO + (j >> 3) * Q_BOX_BYTES + lr * ROW_BYTES +
                                              ((((unsigned)j & 7u) ^ ((unsigned)lr & 7u)) << 4) + (lane & 3) * 4;
                        st_shared_u32(addr, pack2_u32(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv));
                    }
                    if (grow < seq.len_q && (lane & 3) == 0) {
                        p.lse[seq_lse_offset(p, seq, b, h, grow)] = row_log_sum_exp(
                            l[r], r == 0 ? keys0 : keys1, (m[r] * softmax_scale_log2 + __log2f(l[r])) * 0.69314718055994531f);
                    }
                }
                named_bar_sync(BAR_WG + cw, 128);
                // 64 rows x NBOX boxes x 8 chunks: 8 consecutive threads write one 128-byte run.
#pragma unroll
                for (int i = 0; i < 4 * NBOX; ++i) {
                    const int idx = tid + 128 * i;
                    const int q = idx & 7;
                    const int lr = (idx >> 3) & 63;
                    const int c = idx >> 9;
                    const int grow = w.m * BM + cw * WG_M + lr;
                    if (grow < seq.len_q) {
                        const uint4 v =
                            ld_shared_v4(sO + c * Q_BOX_BYTES + lr * ROW_BYTES + (((unsigned)q ^ ((unsigned)lr & 7u)) << 4));
                        elem_t* orow = reinterpret_cast<elem_t*>(p.o) + seq_o_offset(p, seq, b, h, grow);
                        st_global_v4(orow + 64 * c + 8 * q, v);
                    }
                }
                // Our generic reads/writes of the buffer before the TMA that refills it (item it + 2).
                fence_proxy_async_smem();
                mbar_arrive(q_empty);
            }
#else
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int grow = r == 0 ? grow0 : grow1;
                if (grow < seq.len_q) {
                    const float inv = row_inverse(l[r], r == 0 ? keys0 : keys1);
                    elem_t* orow = reinterpret_cast<elem_t*>(p.o) + seq_o_offset(p, seq, b, h, grow);
#pragma unroll
                    for (int j = 0; j < D / 8; ++j) {
                        *reinterpret_cast<elem2_t*>(orow + 8 * j + col_in_block) =
                            pack2(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
                    }
                    if ((lane & 3) == 0) {
                        // natural log: scale*m + ln(l) = (m*scale_log2 + log2(l)) * ln(2)
                        p.lse[seq_lse_offset(p, seq, b, h, grow)] = row_log_sum_exp(
                            l[r], r == 0 ? keys0 : keys1, (m[r] * softmax_scale_log2 + __log2f(l[r])) * 0.69314718055994531f);
                    }
                }
            }
#endif
        }
#if FC_HOPPER_PINGPONG
        // Drain: warpgroup 2's last arrive on barrier 1 is matched here, so both scheduler barriers
        // end the kernel complete (with no tile at all this pairs with the priming arrive).
        if (cw == 0) named_bar_sync(BAR_SCHED + 0, 2 * 128);
#endif
    }
}
