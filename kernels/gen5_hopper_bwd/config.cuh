// Generation 5 (Hopper) backward: tile shapes, the shared-memory map, barrier ids and the
// register split. Part of gen5_hopper_bwd.cu; see that file for the design.
#pragma once

#ifndef FC_HEAD_DIM
#error "compile with -DFC_HEAD_DIM=64, 128, 192 or 256"
#endif
#if FC_HEAD_DIM != 64 && FC_HEAD_DIM != 128 && FC_HEAD_DIM != 192 && FC_HEAD_DIM != 256
#error "gen5_hopper_bwd supports FC_HEAD_DIM 64, 128, 192 and 256"
#endif

// 1: the problem's head dim (p.head_dim, a multiple of 8) is below the build's and padded up to it,
// as in the forward (gen5_hopper/config.cuh): TMA zero-fills Q's, K's, V's and dO's columns past it,
// which adds nothing to any product; rowsum(dO ∘ O) reads only its columns, and dQ, dK and dV are
// stored only there (common/padded_head.cuh).
#ifndef FC_HOPPER_PADDED_HEAD
#define FC_HOPPER_PADDED_HEAD 0
#endif

// Q/dO ring depth (the plan passes 2 unless FLASHCORE_HOPPER_BWD_STAGES says 3; 3 fills the
// shared memory at D = 128).
#ifndef FC_BWD_STAGES
#define FC_BWD_STAGES 2
#endif
// Queries per step: 64; 128 at D = 64 (FLASHCORE_HOPPER_BWD_QUERY_ROWS=128; halves the per-step
// fixed costs where the steps are shortest); 80 at D = 128 (FlashAttention-3's non-causal choice:
// a quarter more work per step's fixed costs, and what the registers allow); 32 at D = 192 and 256
// (the wide builds, below).
#ifndef FC_BWD_QUERY_ROWS
#define FC_BWD_QUERY_ROWS 64
#endif
// 1: the problem has a sliding window, softcap, ALiBi or varlen (the core's backward_mode_defines).
// The scores take common/backward_scores.cuh's rules.
#ifndef FC_BWD_MODES
#define FC_BWD_MODES 0
#endif
// 1 (with FC_BWD_MODES): packed Q, K, V, O, dO and gradients with cu_seqlens_q/k (FlashAttention
// 2's varlen layout). Units and query blocks count the longest sequence's tiles; each unit takes its
// sequence's lengths and first storage rows (seqlen.cuh's SeqInfo), and TMA boxes start at them. A
// box past a sequence's end holds the next sequence's rows (or TMA's zeros past the last): the mask
// makes their P and dS 0, so they add nothing (block_info.cuh's needs_mask).
#ifndef FC_BWD_VARLEN
#define FC_BWD_VARLEN 0
#endif
// 1: a step issues dQ before dK and stages and reduces its dQ slice while dK runs (FlashAttention
// 3's order; 1.4-3.2 % faster on every dense row at D = 64 and 128 in one run,
// docs/results/2026-12-02-hopper-bwd-step-order-h200, call 2); 0: dK before the dS barrier, dQ
// last, its staging after every product is done.
#ifndef FC_BWD_DQ_BEFORE_DK
#define FC_BWD_DQ_BEFORE_DK 1
#endif
// 1: 64-query steps store dSᵀ with stmatrix (4 instructions a thread) rather than 16 32-bit stores
// (1.1-1.5 % faster on the causal D = 128 rows, level on the others: the same folder, call 3).
#ifndef FC_BWD_DS_STMATRIX
#define FC_BWD_DS_STMATRIX 1
#endif
// Work units per L2 section (block_info.cuh's decode_unit); the plan passes the SM count.
#ifndef FC_BWD_SECTION_UNITS
#define FC_BWD_SECTION_UNITS 132
#endif

namespace fhb {

constexpr int D = FC_HEAD_DIM;
enum : bool { PADDED_HEAD = FC_HOPPER_PADDED_HEAD != 0 };  // (an enum: see config.cuh of the forward)
enum : bool { MODES = FC_BWD_MODES != 0, VARLEN = FC_BWD_VARLEN != 0 };
enum : bool { DQ_BEFORE_DK = FC_BWD_DQ_BEFORE_DK != 0, DS_STMATRIX = FC_BWD_DS_STMATRIX != 0 };
// The wide builds (D = 192, 256; consumer_wide.cuh): one warpgroup's dK and dV over 64 keys would
// take D registers a thread, more than a consumer has. So both consumers take the same 64 keys and
// split the step's work by product instead of by keys: warpgroup 1 computes Sᵀ, Pᵀ and dV, and
// warpgroup 2 dPᵀ, dSᵀ and dK (Pᵀ passes between them through shared memory); each then takes part
// of dQᵀ's 64-column slices. 32 queries a step keep the shared memory within the limit at D = 256.
enum : bool { WIDE = D > 128 };
constexpr int KEY_ROWS = WIDE ? 64 : 128;  // keys per CTA work unit (K/V TMA box rows)
constexpr int WG_KEYS = 64;       // keys per consumer warpgroup (the wgmma M side)
constexpr int QUERY_ROWS = FC_BWD_QUERY_ROWS;  // queries per step (Q/dO TMA box rows, the wgmma N side)
static_assert(WIDE ? QUERY_ROWS == 32
                   : QUERY_ROWS == 64 || (QUERY_ROWS == 128 && D == 64) || (QUERY_ROWS == 80 && D == 128),
              "FC_BWD_QUERY_ROWS: 64, 128 at D = 64, 80 at D = 128, or 32 at D = 192 and 256");
// A modes build's step: with 64 queries, P and dS in one pass once Sᵀ and dPᵀ are both done
// (softcap's dS needs the tanh of the same score as P, and keeping 1 − tanh² in registers between
// two passes spills; with a window, ALiBi or varlen the dense flow ran slower at D = 128:
// docs/results/2026-11-30-hopper-bwd-dense-flow-h200). With 128 queries (D = 64, no softcap: the
// plan's choice) the dense flow, P under dPᵀ, with ALiBi in the probabilities and the window and
// varlen in the mask; one pass spills there.
enum : bool { ONE_PASS = MODES && QUERY_ROWS != 128 };
constexpr int ACC_REGS = QUERY_ROWS / 2;      // Sᵀ or dPᵀ accumulator registers per thread
constexpr int FRAG_REGS = QUERY_ROWS / 4;     // Pᵀ or dSᵀ as packed A fragments
constexpr int STAGES = FC_BWD_STAGES;  // Q/dO ring depth
static_assert(STAGES == 2 || STAGES == 3, "FC_BWD_STAGES must be 2 or 3");
constexpr int NBOX = D / 64;      // 64-column (128-byte) TMA boxes per row
constexpr int ROW_BYTES = 128;    // one swizzled box row
constexpr int KV_BOX_BYTES = KEY_ROWS * ROW_BYTES;
constexpr int KV_TILE_BYTES = NBOX * KV_BOX_BYTES;
constexpr int Q_BOX_BYTES = QUERY_ROWS * ROW_BYTES;
constexpr int Q_TILE_BYTES = NBOX * Q_BOX_BYTES;
// dQ's product. With 64 or 128 queries a step, dQ = dS·K puts the queries on the wgmma M side (64
// a warpgroup). 80 and 32 queries are not a multiple of 64, so those builds compute dQᵀ = Kᵀ·dSᵀ
// instead: the head dim on M (64-column slices: at D = 128 each warpgroup its half; in the wide
// builds WG0_DQ_SLICES to warpgroup 1, the rest to warpgroup 2), the step's queries on N.
#define FC_BWD_DQ_TRANSPOSED (FC_BWD_QUERY_ROWS == 80 || FC_HEAD_DIM > 128)  // for #if: the two dQ forms have different register counts
constexpr bool DQ_TRANSPOSED = FC_BWD_DQ_TRANSPOSED;
// dS of one step in shared memory, double-buffered so a step's writes never race the other
// warpgroup's dQ reads of the step before; 128-byte swizzled rows, one 64-wide box after the other:
//   dSᵀ [128 keys][QUERY_ROWS queries] in 64-query boxes (dQ's MN-major A operand), or, with
//   DQ_TRANSPOSED, dS [80 queries][128 keys] in 64-key boxes (dQᵀ's K-major B operand).
constexpr int DS_BOXES = DQ_TRANSPOSED ? KEY_ROWS / 64 : QUERY_ROWS / 64;
constexpr int DS_BOX_BYTES = (DQ_TRANSPOSED ? QUERY_ROWS : KEY_ROWS) * ROW_BYTES;
constexpr int DS_BYTES = DS_BOXES * DS_BOX_BYTES;
// dQ: each warpgroup produces one 64 x DQ_SLICE_QUERIES f32 slice per step and stages it for the
// bulk reduce into the workspace accumulator:
//   D = 128, 64 queries: its half of the head dim, 64 queries, all 128 keys;
//   D = 128, 80 queries (transposed): its half of the head dim, 80 queries, all 128 keys;
//   D = 64, 64 queries: the whole head dim over its own 64 keys (both add into one slice);
//   D = 64, 128 queries: its half of the queries, the whole head dim, all 128 keys;
//   D = 192 / 256 (wide), 32 queries: 1-2 slices of 64 columns each, all 64 keys.
constexpr int DQ_SLICE_QUERIES = DQ_TRANSPOSED ? QUERY_ROWS : 64;
constexpr int DQ_SLICE_FLOATS = 64 * DQ_SLICE_QUERIES;
constexpr int DQ_SLICE_BYTES = DQ_SLICE_FLOATS * 4;
constexpr int DQ_REGS = DQ_SLICE_FLOATS / 128;  // the slice's accumulator registers per thread
constexpr int DQ_SLICES = D / 64;  // slices per query block in the accumulator
constexpr int DQ_BLOCKS_PER_STEP = QUERY_ROWS / DQ_SLICE_QUERIES;  // accumulator query blocks per step
constexpr bool DQ_SPLIT_KEYS = D == 64 && QUERY_ROWS == 64;
constexpr int DQ_KEYS = DQ_SPLIT_KEYS ? WG_KEYS : KEY_ROWS;  // keys each warpgroup's dQ product sums
// Wide builds: warpgroup 1's dQᵀ slices (it also has the probabilities' exp2 to do); warpgroup 2
// takes the other DQ_SLICES - WG0_DQ_SLICES. Each warpgroup stages up to DQ_WG_SLICES per step.
constexpr int WG0_DQ_SLICES = WIDE ? DQ_SLICES / 2 : 1;
constexpr int DQ_WG_SLICES = WIDE ? DQ_SLICES - WG0_DQ_SLICES : 1;
static_assert(!WIDE || (WG0_DQ_SLICES >= 1 && DQ_WG_SLICES >= 1),
              "each wide consumer takes a dQ slice: its last one releases the step's stage");
// What runs under a step's dPᵀ = V·dOᵀ (measured choices, 921f288):
//   64 queries: Pᵀ, and dV += Pᵀ·dO is issued before dPᵀ is waited for;
//   128 queries (D = 64): Pᵀ (2-3 % faster than waiting for Sᵀ and dPᵀ together);
//   80 queries (D = 128): nothing: Sᵀ and dPᵀ are waited for together, 1-2 % faster than computing
//   Pᵀ under dPᵀ. Issuing dV early would keep Sᵀ, dPᵀ and Pᵀ live at once: with 40 or 64
//   registers each, that spills.
//   Modes builds of 64 or 80 queries: nothing (P and dS in one pass, see ONE_PASS).
//   Wide builds: Sᵀ and dPᵀ are in different warpgroups (consumer_wide.cuh).
constexpr bool OVERLAP_DV_WITH_DP = QUERY_ROWS == 64 && !ONE_PASS;
constexpr bool OVERLAP_P_WITH_DP = QUERY_ROWS == 128 && !ONE_PASS;
static_assert(!(MODES && !ONE_PASS && OVERLAP_DV_WITH_DP), "a modes build masks Pᵀ after dPᵀ: dV must not take it before");
// The step's LSE·log2(e) and D = rowsum(dO ∘ O), QUERY_ROWS floats each, per stage.
constexpr int STATS_BYTES = 2 * QUERY_ROWS * 4;

// Shared memory map (offsets from the 1024-byte aligned base; every tile starts on a swizzle atom).
constexpr int OFF_K = 0;
constexpr int OFF_V = OFF_K + KV_TILE_BYTES;
constexpr int OFF_Q = OFF_V + KV_TILE_BYTES;
constexpr int OFF_DO = OFF_Q + STAGES * Q_TILE_BYTES;
constexpr int OFF_DS = OFF_DO + STAGES * Q_TILE_BYTES;
constexpr int OFF_DQ = OFF_DS + 2 * DS_BYTES;
constexpr int DQ_WG_STAGING_BYTES = DQ_WG_SLICES * DQ_SLICE_BYTES;  // a warpgroup's dQ staging
// Wide builds: the step's Pᵀ (f32, in warpgroup 1's accumulator order) for warpgroup 2.
constexpr int P_EXCHANGE_BYTES = WIDE ? 128 * (QUERY_ROWS / 2) * 4 : 0;
constexpr int OFF_P_EXCHANGE = OFF_DQ + 2 * DQ_WG_STAGING_BYTES;
constexpr int OFF_STATS = OFF_P_EXCHANGE + P_EXCHANGE_BYTES;
constexpr int OFF_BAR = OFF_STATS + STAGES * STATS_BYTES;
// kv_full, kv_empty, q_full[STAGES], q_empty[STAGES]
constexpr int NUM_BARS = 2 + 2 * STAGES;
// Varlen: the unit's sequence lengths (len_q, len_k), two ints in the barriers' 128-byte block.
constexpr int OFF_SEQ = OFF_BAR + NUM_BARS * 8;
static_assert(NUM_BARS * 8 + 8 <= ((NUM_BARS * 8 + 127) / 128) * 128, "the lengths must fit the barriers' block");
constexpr int SMEM_USED = OFF_BAR + ((NUM_BARS * 8 + 127) / 128) * 128;
constexpr int SMEM_ALIGN_SLACK = 1024;
// What the host requests as dynamic shared memory (crates/gen5-persistent/src/hopper_bwd.rs
// repeats this formula).
constexpr int SMEM_BYTES = SMEM_USED + SMEM_ALIGN_SLACK;
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory over the sm_90 opt-in limit");

constexpr int THREADS = 384;  // producer warpgroup + two consumer warpgroups
constexpr int CONSUMER_THREADS = 256;
constexpr int PRODUCER_LANES = 32;  // warp 0 issues TMA and stages LSE and D
constexpr int CONSUMER_REGS = 240;
constexpr int PRODUCER_REGS = 24;
static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * 256 <= 65536, "register file overcommitted");

// Named barriers: both consumers after writing dS (256 threads), before either reads it for dQ;
// and each consumer warpgroup's own (128 threads, ids 2 and 3) around its dK/dV staging. Wide
// builds: Pᵀ written (warpgroup 1 arrives, warpgroup 2 waits), and both consumers done with a
// unit's K and V (their tiles then stage dK and dV).
enum : unsigned { BAR_DS = 1, BAR_EPILOGUE = 2, BAR_P = 4, BAR_UNIT_DONE = 5 };

enum { TAG_KV_EMPTY = 1, TAG_KV_FULL = 2, TAG_Q_EMPTY = 3, TAG_Q_FULL = 4 };

constexpr float LOG2E = 1.4426950408889634f;

}  // namespace fhb
