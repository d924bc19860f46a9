// Generation 5 (Hopper) forward: a consumer warpgroup's key-tile steps (FlashAttention-3's mainloop
// mma): S = Q K^T (wgmma SS), the masks, score modifiers and online softmax in f32 registers
// (consumer_math.cuh), O += P V (wgmma RS, P from registers). The overlapped loop
// (FC_HOPPER_OVERLAP) issues each tile's QK^T beside the previous tile's PV and runs its softmax
// under that PV (FA3's intra-warpgroup overlap): qk_tile and scores_to_p for the warpgroup's first
// tile, next_key_tile for each further one, pv_tile for the last PV; the ping-pong's turns
// (pingpong.cuh) go around each GEMM issue. The serial loop takes serial_key_tile a tile (qk_tile,
// scores_to_p, pv_tile one after another). The loops themselves are the kernel's
// (gen5_persistent_hopper.cu says why).
//
// The steps' arguments, by value (a struct bundling them, built for each unit, changed the compiled
// kernel): the unit's sequence b, head h and first key tile kb0 (tile_scheduler.cuh's Work), its
// n_blocks tiles, the tile kb; the consumer warpgroup cw (its ping-pong turns); the wgmma
// descriptors of the unit's Q buffer and of the ring's first K and V slots; the ring slot (`stage`,
// `phase`) and the Q buffer's release q_empty; the thread's first row grow0, the warpgroup's first
// row wg_row0, the thread's first column of each 8-column block and the warpgroup's unmasked keys
// (prepare_scores in consumer_math.cuh says why only these are kept); whether the scores are
// modified (softcap, ALiBi: logits in log2 units, softmax scale 1) and the softmax's scale.
#pragma once
#include "config.cuh"
#include "smem_map.cuh"
#include "consumer_math.cuh"
#include "pingpong.cuh"
#include "trace.cuh"
#include "../common/params.cuh"
#include "../common/seqlen.cuh"
#include "../common/hopper/mbarrier.cuh"
#include "../common/hopper/wgmma.cuh"

namespace fch {

// With the smem epilogue the Q buffer is released after O went through it, not after the last
// QK^T.
enum : bool { RELEASE_Q_AFTER_QK = !SMEM_EPILOGUE };

// The wgmma descriptor of ring slot `stage`, from slot 0's.
__device__ __forceinline__ unsigned long long slot_desc(unsigned long long desc0, int stage) {
    return desc0 + ((unsigned long long)(stage * KV_TILE_BYTES) >> 4);
}
// The same for the V ring, whose stages are V_TILE_BYTES (DV columns).
__device__ __forceinline__ unsigned long long v_slot_desc(unsigned long long desc0, int stage) {
    return desc0 + ((unsigned long long)(stage * V_TILE_BYTES) >> 4);
}

// S = Q K^T for the tile in ring slot `stage`, alone (the overlapped loop's first tile of the
// warpgroup: no PV yet), waited for, and K's slot released. The ping-pong turn covers the GEMM's
// issue.
__device__ __forceinline__ void qk_tile(const SmemMap& sm, int cw, unsigned long long q_desc,
                                         unsigned long long k_desc0, int stage, unsigned phase, float (&s)[BN / 2],
                                         UnitTrace& trace, int it) {
    const unsigned kf = sm.k_full + 8 * stage, ke = sm.k_empty + 8 * stage;
    mbar_wait(kf, phase, TAG_K_FULL);
    trace.mark(it, MARK_K0_READY);
    pp_sync(cw);
    wgmma_fence();
    gemm_qk(s, q_desc, slot_desc(k_desc0, stage));
    wgmma_commit();
    pp_arrive(cw);
    wgmma_wait<0>();
    fence_regs(s);
    trace.mark(it, MARK_S0_DONE);
    mbar_arrive(ke);
}

// S of key tile kb to P: the scores made and masked, the online softmax step, P packed as the PV
// operand.
__device__ __forceinline__ void scores_to_p(const AttentionParams& p, int b, int h, int kb0, int kb, int grow0,
                                            int wg_row0, int col_in_block, const KeyRange& wg_unmasked,
                                            bool score_modified, float softmax_scale_log2, float (&s)[BN / 2],
                                            unsigned (&pr)[P_REGS], float (&row_max)[2], float (&l)[2],
                                            float (&alpha)[2]) {
    prepare_scores(p, s, b, h, grow0, wg_row0, (kb0 + kb) * BN, col_in_block, wg_unmasked, score_modified);
    online_softmax(s, row_max, l, alpha, softmax_scale_log2);
    convert_p(s, pr);
}

// A further tile kb of the overlapped loop: S_kb (slot `stage`) issued beside the PV of the tile
// before (its V in slot `vstage`), and S_kb's softmax run while that PV is in flight.
__device__ __forceinline__ void next_key_tile(const AttentionParams& p, int b, int h, int kb0, int n_blocks, int kb,
                                              int cw, unsigned long long q_desc, unsigned long long k_desc0,
                                              unsigned long long v_desc0, const SmemMap& sm, int stage, unsigned phase,
                                              int vstage, unsigned vphase, unsigned q_empty, int grow0, int wg_row0,
                                              int col_in_block, const KeyRange& wg_unmasked, bool score_modified,
                                              float softmax_scale_log2, float (&s)[BN / 2], unsigned (&pr)[P_REGS],
                                              float (&o)[DV / 2], float (&row_max)[2], float (&l)[2],
                                              float (&alpha)[2]) {
    const unsigned kf = sm.k_full + 8 * stage, ke = sm.k_empty + 8 * stage;
    const unsigned vf = sm.v_full + 8 * vstage, ve = sm.v_empty + 8 * vstage;
    mbar_wait(kf, phase, TAG_K_FULL);
    pp_sync(cw);
    wgmma_fence();
    gemm_qk(s, q_desc, slot_desc(k_desc0, stage));
    wgmma_commit();
    mbar_wait(vf, vphase, TAG_V_FULL);
    wgmma_fence();  // (does not wait for S_kb; orders our writes of o/pr before the PV reads)
    gemm_pv(o, pr, v_slot_desc(v_desc0, vstage));
    wgmma_commit();
    pp_arrive(cw);
    wgmma_wait<1>();  // S_kb done; the previous PV may still run
    fence_regs(s);
    mbar_arrive(ke);
    if (RELEASE_Q_AFTER_QK && (KEY_SPLIT ? kb + KEY_STEP >= n_blocks : kb == n_blocks - 1)) mbar_arrive(q_empty);
    prepare_scores(p, s, b, h, grow0, wg_row0, (kb0 + kb) * BN, col_in_block, wg_unmasked, score_modified);
    online_softmax(s, row_max, l, alpha, softmax_scale_log2);
    wgmma_wait<0>();  // the previous PV done: O and P registers are ours again
    fence_regs(o);
    fence_regs(pr);
    mbar_arrive(ve);
    rescale_o(o, alpha);
    convert_p(s, pr);
}

// O += P V for the tile whose V is in ring slot `vstage`, alone (the overlapped loop's last PV,
// outside the ping-pong: no issue slot), waited for, and V's slot released.
__device__ __forceinline__ void pv_tile(const SmemMap& sm, unsigned long long v_desc0, int vstage, unsigned vphase,
                                        unsigned (&pr)[P_REGS], float (&o)[DV / 2], UnitTrace& trace, int it) {
    const unsigned vf = sm.v_full + 8 * vstage, ve = sm.v_empty + 8 * vstage;
    mbar_wait(vf, vphase, TAG_V_FULL);
    wgmma_fence();
    gemm_pv(o, pr, v_slot_desc(v_desc0, vstage));
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(o);
    fence_regs(pr);
    mbar_arrive(ve);
    trace.mark(it, MARK_LOOP_DONE);
}

// The serial loop's step (FC_HOPPER_OVERLAP=0, which no plan builds), for the tile kb in ring slot
// `stage`: S_kb, its softmax, O rescaled, then PV_kb, each waited for. (Its timeline marks, which
// name the overlapped loop's first and last GEMMs, stamp each tile's here.)
__device__ __forceinline__ void serial_key_tile(const AttentionParams& p, int b, int h, int kb0, int n_blocks, int kb,
                                                unsigned long long q_desc, unsigned long long k_desc0,
                                                unsigned long long v_desc0, const SmemMap& sm, int stage,
                                                unsigned phase, unsigned q_empty, int grow0, int wg_row0,
                                                int col_in_block, const KeyRange& wg_unmasked, bool score_modified,
                                                float softmax_scale_log2, float (&o)[DV / 2], float (&row_max)[2],
                                                float (&l)[2], float (&alpha)[2], UnitTrace& trace, int it) {
    float s[BN / 2];
    unsigned pr[P_REGS];
    qk_tile(sm, 0, q_desc, k_desc0, stage, phase, s, trace, it);  // (no ping-pong without the overlap)
    if (RELEASE_Q_AFTER_QK && kb == n_blocks - 1) mbar_arrive(q_empty);
    scores_to_p(p, b, h, kb0, kb, grow0, wg_row0, col_in_block, wg_unmasked, score_modified, softmax_scale_log2, s, pr,
                row_max, l, alpha);
    rescale_o(o, alpha);
    pv_tile(sm, v_desc0, stage, phase, pr, o, trace, it);
}

}  // namespace fch
