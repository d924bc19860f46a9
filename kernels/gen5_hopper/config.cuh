// Generation 5 (Hopper) forward: the build's defines (defaults and the combinations that are
// refused), tile shapes, the shared-memory map, barrier ids and the register split.
// Part of gen5_persistent_hopper.cu; see that file for the design. Every part of gen5_hopper/
// includes it first: it needs -DFC_HEAD_DIM and gives the other FC_HOPPER_* switches defaults.
#pragma once

#ifndef FC_HEAD_DIM
#error "compile with -DFC_HEAD_DIM=32, 64, 128, 192 or 256"
#endif
#if FC_HEAD_DIM != 32 && FC_HEAD_DIM != 64 && FC_HEAD_DIM != 128 && FC_HEAD_DIM != 192 && FC_HEAD_DIM != 256
#error "gen5_persistent_hopper supports FC_HEAD_DIM 32, 64, 128, 192 and 256"
#endif
// 1: the problem's head dim (p.head_dim, a multiple of 8) is below the build's and padded up to it
// (FlashAttention-2's rounding: the plan takes every multiple of 8 up to 256 in the next build of
// 64 columns). The tensor maps' rows are the problem's, so TMA fills Q's and K's columns past it
// with zeros (they add nothing to QK^T) and V's too (O's columns past it stay 0); the epilogues
// write only its columns (common/padded_head.cuh). A run-time bound, so one module serves every
// padded head dim.
#ifndef FC_HOPPER_PADDED_HEAD
#define FC_HOPPER_PADDED_HEAD 0
#endif
// V's and O's head dim where it differs from Q's and K's (FlashAttention 3's headdim_v: DeepSeek's
// 192 / 128). Only what touches V or O reads it: the V ring and its boxes, the P·V wgmma (N = DV),
// the O accumulator and the epilogue. Q·K, the softmax and the scheduler keep FC_HEAD_DIM. A
// distinct DV is a whole number of boxes and never padded (FC_HOPPER_PADDED_HEAD then pads Q and
// K only), and at most FC_HEAD_DIM, so O's registers stay within the build's budget.
#ifndef FC_HEAD_DIM_V
#define FC_HEAD_DIM_V FC_HEAD_DIM
#define FC_HOPPER_PADDED_V (FC_HOPPER_PADDED_HEAD != 0)  // O's columns padded as Q's and K's
#else
#define FC_HOPPER_PADDED_V 0
#endif
#if FC_HEAD_DIM == 32 ? FC_HEAD_DIM_V != 32 : (FC_HEAD_DIM_V % 64 != 0 || FC_HEAD_DIM_V < 64 || FC_HEAD_DIM_V > FC_HEAD_DIM)
#error "FC_HEAD_DIM_V must be 64, 128, 192 or 256 and at most FC_HEAD_DIM (32 only with FC_HEAD_DIM 32)"
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
// L2 prefetch of the first unit's boxes before griddepcontrol.wait (kv_fetch.cuh): the plan sets
// it for dense problems launched programmatically whose units fit one round (hopper.rs).
#ifndef FC_HOPPER_PREFETCH
#define FC_HOPPER_PREFETCH 0
#endif
// Consumer warpgroups, 64 q rows each: 2 (128-row items) or 3 (192-row items, FlashAttention-3's
// D = 64 tile: each K/V tile feeds 1.5x the rows, and 12 consumer warps instead of 8 hide the
// softmax's dependent latency). Three fit the register file only at 160 registers a consumer
// thread, which holds D = 64's S, P and O but not D = 128's.
#ifndef FC_HOPPER_CONSUMER_WGS
#define FC_HOPPER_CONSUMER_WGS 2
#endif
#if FC_HOPPER_CONSUMER_WGS != 2 && FC_HOPPER_CONSUMER_WGS != 3
#error "FC_HOPPER_CONSUMER_WGS must be 2 or 3"
#endif
#if FC_HOPPER_CONSUMER_WGS == 3 && (FC_HEAD_DIM > 64 || FC_HOPPER_MODES || FC_HOPPER_SPLIT_KV || FC_HOPPER_SMEM_EPILOGUE)
#error "FC_HOPPER_CONSUMER_WGS=3 is the dense D = 32 or 64 build (register epilogue, no split, no modes)"
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
// Paged caches whose TMA boxes hold fewer than 64 rows (block sizes 16, 32, 48, ...: eight boxes
// or more per 128-key tile): all four producer warps issue the boxes (producer_spread.cuh). The
// plan sets it for those problems only: the loop of its own made the other modes builds' code
// larger, and chunked prefill on 64- and 256-row pages 4-5 % slower (2026-11-26, 658b48a).
#ifndef FC_HOPPER_SPREAD_PAGES
#define FC_HOPPER_SPREAD_PAGES 0
#endif
#if FC_HOPPER_SPREAD_PAGES && !FC_HOPPER_MODES
#error "FC_HOPPER_SPREAD_PAGES=1 needs FC_HOPPER_MODES=1 (a paged cache)"
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
// Key-split warpgroups: both consumer warpgroups take the same 64 q rows, each every other key
// tile of the item, and merge their halves in shared memory before the epilogue
// (wg_key_split.cuh). Halves the dependent chain of QK^T, softmax and PV a CTA walks, for
// problems whose items fit one round of the SMs twice over (the plan decides, hopper/config.rs);
// with FC_HOPPER_MODES, for the batch-invariant plans' sequences of few rows (the static schedule,
// and the producer warp that does not spread small pages).
#ifndef FC_HOPPER_WG_KEY_SPLIT
#define FC_HOPPER_WG_KEY_SPLIT 0
#endif
#if FC_HOPPER_WG_KEY_SPLIT && (FC_HOPPER_CONSUMER_WGS != 2 || FC_HOPPER_SPLIT_KV || FC_HOPPER_SMEM_EPILOGUE || \
                               !FC_HOPPER_OVERLAP)
#error "FC_HOPPER_WG_KEY_SPLIT=1 is the unsplit, overlapped two-warpgroup build with the register epilogue"
#endif
#if FC_HOPPER_WG_KEY_SPLIT && FC_HOPPER_MODES && (FC_HOPPER_DYNAMIC || FC_HOPPER_SPREAD_PAGES)
#error "FC_HOPPER_WG_KEY_SPLIT=1 with FC_HOPPER_MODES=1 takes the static schedule and warp 0's page loads"
#endif
// Cluster key split: a cluster of two CTAs takes one item; CTA r takes the r-th half of its key
// tiles (its two warpgroups split those as above), and the two CTAs merge their parts through each
// other's shared memory (wg_key_split.cuh), each finishing half of the item's rows. One item per
// cluster: the plan's grid is two CTAs an item, so the exchange's buffer and barrier serve once.
#ifndef FC_HOPPER_CLUSTER_KEY_SPLIT
#define FC_HOPPER_CLUSTER_KEY_SPLIT 0
#endif
#if FC_HOPPER_CLUSTER_KEY_SPLIT && (!FC_HOPPER_WG_KEY_SPLIT || FC_HOPPER_DYNAMIC)
#error "FC_HOPPER_CLUSTER_KEY_SPLIT=1 needs FC_HOPPER_WG_KEY_SPLIT=1 and the static schedule"
#endif
// V's own head dim runs on the row warpgroups' unsplit path with the register epilogue (what the
// plan builds for it): the key split's paired loads, the split-KV workspace and the staged O are
// laid out for one head dim and have not been run with two.
#if FC_HEAD_DIM_V != FC_HEAD_DIM && (FC_HOPPER_WG_KEY_SPLIT || FC_HOPPER_SPLIT_KV || FC_HOPPER_SMEM_EPILOGUE)
#error "FC_HEAD_DIM_V != FC_HEAD_DIM takes neither the key split, split-KV nor the smem epilogue"
#endif
// e4m3 Q, K and V (Modes::q_fp8; O in the module's 16-bit dtype, elem_t): both products on e4m3
// wgmma (k32, K-major operands only). V reaches the kernel transposed, [batch, heads_kv, head_dim,
// keys] with its keys permuted in groups of 16 (gen5_hopper_vt.cu), so that P, packed from the S
// accumulators in place, is the A fragment of P·V (consumer_math.cuh's convert_p). The dense,
// unsplit, row-warpgroup build with the register epilogue and 128-key tiles at D = 128 (at 256 its O,
// S and P spilled: 48 bytes).
#ifndef FC_HOPPER_E4M3
#define FC_HOPPER_E4M3 0
#endif
#if FC_HOPPER_E4M3 && (FC_HOPPER_MODES || FC_HOPPER_SPLIT_KV || FC_HOPPER_WG_KEY_SPLIT || FC_HOPPER_SMEM_EPILOGUE || \
                       FC_HOPPER_PREFETCH || FC_HOPPER_CONSUMER_WGS != 2 || FC_HOPPER_BLOCK_N != 128 ||             \
                       FC_HOPPER_PADDED_HEAD || FC_HEAD_DIM_V != FC_HEAD_DIM || FC_HEAD_DIM != 128)
#error "FC_HOPPER_E4M3=1 is the dense, unsplit two-warpgroup build with 128-key tiles at D = 128"
#endif
// The narrow build (FC_HEAD_DIM 32): a row of Q, K or V is one 64-byte box (TMA's and wgmma's
// 64-byte swizzle), so Q·K takes two k16 steps and P·V is m64n32, half the tensor-core work of the
// 64 build a 32-column head would otherwise be padded into. The row warpgroups' path only: the
// key split's and the staged epilogue's exchanges are laid out in 128-byte rows (the plan pads
// those problems into the 64 build).
#if FC_HEAD_DIM == 32 && (FC_HOPPER_WG_KEY_SPLIT || FC_HOPPER_SMEM_EPILOGUE || FC_HOPPER_E4M3)
#error "FC_HEAD_DIM=32 takes neither the key split, the smem epilogue nor e4m3"
#endif
#if FC_HOPPER_CLUSTER_KEY_SPLIT
#define FC_HOPPER_CLUSTER_DIMS __cluster_dims__(2, 1, 1)
#else
#define FC_HOPPER_CLUSTER_DIMS
#endif


namespace fch {


constexpr int D = FC_HEAD_DIM;
// V's and O's columns, their boxes and a V stage's bytes. (Enums, not constants: a new
// namespace-scope constant would be emitted into the PTX of every build.)
enum : int { DV = FC_HEAD_DIM_V, NBOX_V = DV / (FC_HEAD_DIM < 64 ? FC_HEAD_DIM : 64) };
constexpr int CONSUMER_WGS = FC_HOPPER_CONSUMER_WGS;
constexpr int WG_M = 64;                // q rows per consumer warpgroup
// (Enums, as below: these constexprs were emitted as PTX globals.)
enum : bool { KEY_SPLIT = FC_HOPPER_WG_KEY_SPLIT != 0 };
enum : int {
    // CTAs of a cluster, which split an item's key tiles between them (FC_HOPPER_CLUSTER_KEY_SPLIT).
    CLUSTER_CTAS = FC_HOPPER_CLUSTER_KEY_SPLIT ? 2 : 1,
    // Warpgroups that split the item's rows between them (1 when they split its keys instead).
    ROW_WGS = KEY_SPLIT ? 1 : CONSUMER_WGS,
    // A consumer warpgroup's step through an item's key tiles (and through the K/V ring).
    KEY_STEP = KEY_SPLIT ? 2 : 1,
};
constexpr int BM = WG_M * ROW_WGS;      // q rows per work item (= Q TMA box rows)
constexpr int BN = FC_HOPPER_BLOCK_N;   // keys per K/V tile (= K/V TMA box rows)
constexpr int STAGES = FC_HOPPER_STAGES;
constexpr int Q_STAGES = FC_HOPPER_Q_STAGES;
// Input elements: bytes with FC_HOPPER_E4M3, else the module's 16-bit dtype; a swizzled box row
// (128 bytes; 64 in the narrow D = 32 build) holds BOX_COLS of them. (Enums: see DV above.)
enum : bool { E4M3 = FC_HOPPER_E4M3 != 0 };
constexpr int ROW_BYTES = D < 64 ? 64 : 128;  // one swizzled box row (the swizzle's width)
enum : int { IN_BYTES = E4M3 ? 1 : 2, BOX_COLS = ROW_BYTES / IN_BYTES };
constexpr int NBOX = D / BOX_COLS;      // TMA boxes per row of a Q or K tile
constexpr int Q_BOX_BYTES = BM * ROW_BYTES;
constexpr int KV_BOX_BYTES = BN * ROW_BYTES;
constexpr int Q_BYTES = NBOX * Q_BOX_BYTES;
constexpr int KV_TILE_BYTES = NBOX * KV_BOX_BYTES;   // a K stage (a V stage when DV == D)
// A V stage: NBOX_V boxes of BN rows; e4m3: one box of V's DV transposed rows of BN key bytes.
enum : int { V_TILE_BYTES = E4M3 ? DV * BN : NBOX_V * KV_BOX_BYTES };
enum : int {
    // Registers of P, the P·V operand: two 16-bit or four e4m3 probabilities each.
    P_REGS = E4M3 ? BN / 8 : BN / 4,
    // e4m3 P is exp2(x - max + P_LOG2_SCALE), at most 256 of e4m3's 448: the row's small
    // probabilities stay normal numbers down to 2^-14 of its largest. l carries the same factor,
    // so O = (P V) / l is unchanged; only the LSE takes it back out.
    P_LOG2_SCALE = E4M3 ? 8 : 0,
};

// Shared memory map (offsets from the 1024-byte aligned base).
constexpr int OFF_Q = 0;
constexpr int OFF_K = OFF_Q + Q_STAGES * Q_BYTES;
constexpr int OFF_V = OFF_K + STAGES * KV_TILE_BYTES;
constexpr int OFF_BAR = OFF_V + STAGES * V_TILE_BYTES;
// q_full[QS], q_empty[QS], k_full[S], k_empty[S], v_full[S], v_empty[S], v_landed (the
// producer's own barrier for a V tile it zeroes the tail of, see fetch_kv_tile)
constexpr int NUM_BARS = 2 * Q_STAGES + 4 * STAGES + 1;
enum : int {  // each group's first barrier (an enum: constexpr ints here were emitted as PTX globals)
    OFF_BAR_Q_FULL = OFF_BAR,
    OFF_BAR_Q_EMPTY = OFF_BAR_Q_FULL + 8 * Q_STAGES,
    OFF_BAR_K_FULL = OFF_BAR_Q_EMPTY + 8 * Q_STAGES,
    OFF_BAR_K_EMPTY = OFF_BAR_K_FULL + 8 * STAGES,
    OFF_BAR_V_FULL = OFF_BAR_K_EMPTY + 8 * STAGES,
    OFF_BAR_V_EMPTY = OFF_BAR_V_FULL + 8 * STAGES,
    OFF_BAR_V_LANDED = OFF_BAR_V_EMPTY + 8 * STAGES,
};
// Dynamic schedule: the unit index each Q buffer holds (-1: no more), one int per buffer, after
// the barriers (8 bytes reserved either way).
constexpr int OFF_ITEM = OFF_BAR + NUM_BARS * 8;
// Key-split warpgroups' exchange (wg_key_split.cuh): per receiving warpgroup, D / 16 column
// blocks of O and one (m, l) quadruple, a float4 per thread each.
// The cluster key split's exchange: the partner's row of each thread's two (D / 32 float4s of
// this warpgroup's column half, then (m, l) in a slot of its own), slot-major over the 256
// consumer threads, and its barrier after the unit words.
enum : int {
    OFF_BAR_CXCHG = OFF_ITEM + 8,
    XCHG_SLOTS = DV / 16 + 1,
    XCHG_BYTES = KEY_SPLIT ? 2 * XCHG_SLOTS * 128 * 16 : 0,
    OFF_XCHG = OFF_BAR + ((NUM_BARS * 8 + 8 + (CLUSTER_CTAS > 1 ? 8 : 0) + 127) / 128) * 128,
    CXCHG_ROW_SLOTS = DV / 32,
    CXCHG_BYTES = CLUSTER_CTAS > 1 ? (CXCHG_ROW_SLOTS + 1) * 256 * 16 : 0,
    OFF_CXCHG = OFF_XCHG + XCHG_BYTES,
    // What the partner's st.async deliver: the row's float4s and one (m, l) pair a thread.
    CXCHG_TX_BYTES = 256 * (CXCHG_ROW_SLOTS * 16 + 8),
};
constexpr int SMEM_USED = OFF_CXCHG + CXCHG_BYTES;
constexpr int SMEM_ALIGN_SLACK = 1024;
constexpr bool MODES = FC_HOPPER_MODES;
enum : bool { SPREAD_PAGES = FC_HOPPER_SPREAD_PAGES != 0 };  // (an enum: this constexpr was emitted as a PTX global)
// The other switches, for `if constexpr` in the parts: a feature plugs into the part it changes.
enum : bool {
    OVERLAP = FC_HOPPER_OVERLAP != 0,
    PINGPONG = FC_HOPPER_PINGPONG != 0,
    DYNAMIC = FC_HOPPER_DYNAMIC != 0,
    SPLIT_KV = FC_HOPPER_SPLIT_KV != 0,
    SMEM_EPILOGUE = FC_HOPPER_SMEM_EPILOGUE != 0,
    PREFETCH = FC_HOPPER_PREFETCH != 0,
    PADDED_HEAD = FC_HOPPER_PADDED_HEAD != 0,
    PADDED_V = FC_HOPPER_PADDED_V,  // O's columns past p.head_dim are padding (not with a distinct DV)
#if defined(FC_HOPPER_DEBUG)
    DEBUG_CHECKS = true,
#else
    DEBUG_CHECKS = false,
#endif
};
// Producer threads: warp 0 in the modes build (it zeroes tail rows), thread 0 otherwise.
constexpr int PRODUCER_LANES = MODES ? 32 : 1;
// What the host must request as dynamic shared memory (crates/gen5-persistent/src/hopper.rs
// repeats this formula).
constexpr int SMEM_BYTES = SMEM_USED + SMEM_ALIGN_SLACK;

constexpr int CONSUMER_THREADS = 128 * CONSUMER_WGS;
// Consumer threads that release each K/V slot: one warpgroup takes each tile when they split keys.
enum : int { KV_CONSUMER_THREADS = KEY_SPLIT ? 128 : CONSUMER_THREADS };
constexpr int THREADS = 128 + CONSUMER_THREADS;  // the producer warpgroup first
// setmaxnreg split of the register file: 232 | 240 with two consumer warpgroups (producer 40 |
// 24), 160 with three (producer 32: 32 + 3 x 160 = 512 registers x 128 threads = 65 536).
constexpr int CONSUMER_REGS = CONSUMER_WGS == 3 ? 160 : FC_HOPPER_CONSUMER_REGS;
constexpr int PRODUCER_REGS = CONSUMER_WGS == 3 ? 32 : CONSUMER_REGS >= 240 ? 24 : 40;
// Named barrier ids (named_barrier.cuh): scheduler barrier of consumer cw = BAR_SCHED + cw,
// warpgroup-local barrier of consumer cw = BAR_WG + cw.
// BAR_PAIR: both consumer warpgroups, for the key-split exchange.
enum : unsigned { BAR_SCHED = 1, BAR_WG = 1 + CONSUMER_WGS, BAR_PAIR = 1 + 2 * CONSUMER_WGS };

static_assert(BN == 64 || BN == 80 || BN == 112 || BN == 128 || BN == 176,
              "FC_HOPPER_BLOCK_N must be 64, 80, 112, 128 or 176");
static_assert(STAGES >= 2 && STAGES <= 8, "FC_HOPPER_STAGES in 2..8");
static_assert(Q_STAGES == 1 || Q_STAGES == 2, "FC_HOPPER_Q_STAGES must be 1 or 2");
static_assert(CONSUMER_WGS == 3 || CONSUMER_REGS == 232 || CONSUMER_REGS == 240, "FC_HOPPER_CONSUMER_REGS must be 232 or 240");
static_assert(SMEM_BYTES <= 227 * 1024, "shared memory over the sm_90 opt-in limit");
static_assert(PRODUCER_REGS * 128 + CONSUMER_REGS * CONSUMER_THREADS <= 65536, "register file overcommitted");

// One slot on in the K/V ring (stage, and the parity of the slot's fill the barriers wait on):
// after the last slot, the first again in the next phase. (The unsplit producer and consumer
// loops and pass_key_tiles write it out: through this helper ptxas reordered their PTX, which was
// verified and timed as it is; b0b6866.)
__device__ __forceinline__ void step_ring(int& stage, unsigned& phase) {
    if (++stage == STAGES) {
        stage = 0;
        phase ^= 1;
    }
}

// Programmatic dependent launch: every thread waits for the previous grid right after the barrier
// setup, except in the dense key-split build with the static schedule, where each warpgroup waits
// once it has its registers (setmaxnreg) and the consumers their first unit, so that this setup too
// runs under the previous kernel. (The modes build's units read the sequence tables, which the
// previous kernel may write.)
enum : bool { SETUP_BEFORE_GRID_WAIT = KEY_SPLIT && !FC_HOPPER_DYNAMIC && !FC_HOPPER_MODES };

// Debug tags for mbar_wait (which barrier a stuck wait was on).
enum { TAG_Q_EMPTY = 1, TAG_K_EMPTY = 2, TAG_V_EMPTY = 3, TAG_Q_FULL = 4, TAG_K_FULL = 5, TAG_V_FULL = 6 };


}  // namespace fch
