// Generation 5 (Hopper) forward: the consumers' per-tile math: the two wgmma GEMMs, masks and
// score modifiers, the online softmax and P's conversion to the PV operand. The wgmma accumulator
// keeps mma.sync's C layout per 8-column block (wgmma.cuh), so the masks, the score modifiers, the
// quad reductions and the empty-row rules are the portable path's (online_softmax.cuh, masking.cuh)
// on the flat accumulator seen as n8 tiles; the softmax step itself differs, see online_softmax.
#pragma once
#include "config.cuh"
#include "block_info.cuh"
#include "../common/params.cuh"
#include "../common/padded_head.cuh"
#include "../common/types.cuh"
#include "../common/masking.cuh"
#include "../common/seqlen.cuh"
#include "../common/score_mod.cuh"
#include "../common/online_softmax.cuh"
#include "../common/hopper/wgmma.cuh"
#include "../common/hopper/wgmma_e4m3.cuh"
#include "../common/hopper/smem_io.cuh"

namespace fch {

// ---- consumer math ---------------------------------------------------------------------------

// The GEMMs and P's packing are templates on the e4m3 switch and their arrays' sizes (always
// E4M3 and the build's, deduced) so that a 16-bit build never instantiates the e4m3 branch:
// outside a template, or on non-dependent arguments, `if constexpr` still checks the discarded
// branch, whose e4m3 wgmma has no overload for the 16-bit builds' tile widths.

// S[64 x BN] = Q[64 x D] * K[BN x D]^T for this warpgroup's 64 rows.
template <bool kE4m3 = E4M3, int NS>
__device__ __forceinline__ void gemm_qk(float (&s)[NS], unsigned long long q_desc, unsigned long long k_desc) {
    static_assert(NS == BN / 2, "S: BN / 2 f32 a thread");
#pragma unroll
    for (int k = 0; k < D * IN_BYTES / 32; ++k) {
        // k16 step k (k32 for e4m3): 32 bytes into the swizzled row, box k / steps_per_box.
        constexpr int steps_per_box = ROW_BYTES / 32;
        const unsigned long long qa =
            q_desc + (unsigned long long)(((k % steps_per_box) * 32 + (k / steps_per_box) * Q_BOX_BYTES) >> 4);
        const unsigned long long kb =
            k_desc + (unsigned long long)(((k % steps_per_box) * 32 + (k / steps_per_box) * KV_BOX_BYTES) >> 4);
        if constexpr (kE4m3)
            wgmma_ss_e4m3(s, qa, kb, k > 0 ? 1 : 0);
        else
            wgmma_ss(s, qa, kb, k > 0 ? 1 : 0);  // N = BN (overload on the accumulator size)
    }
}

// O[64 x DV] += P[64 x BN] * V[BN x DV]; P as packed elem_t pairs in the A-fragment layout (e4m3:
// byte quadruples, V transposed, K-major: gemm_pv_e4m3).
template <int NO, int NP>
__device__ __forceinline__ void gemm_pv_e4m3(float (&o)[NO], const unsigned (&pr)[NP], unsigned long long v_desc) {
#pragma unroll
    for (int t = 0; t < BN / 32; ++t) {
        const unsigned a[4] = {pr[4 * t + 0], pr[4 * t + 1], pr[4 * t + 2], pr[4 * t + 3]};
        // keys 32t..32t+31: 32 bytes into each transposed row of the 128-byte swizzled box.
        wgmma_rs_e4m3(o, a, v_desc + (unsigned long long)((t * 32) >> 4), 1);  // N = DV
    }
}
template <bool kE4m3 = E4M3, int NO, int NP>
__device__ __forceinline__ void gemm_pv(float (&o)[NO], const unsigned (&pr)[NP], unsigned long long v_desc) {
    static_assert(NO == DV / 2 && NP == P_REGS, "O: DV / 2 f32, P: P_REGS registers a thread");
    if constexpr (kE4m3) {
        gemm_pv_e4m3(o, pr, v_desc);
    } else {
#pragma unroll
        for (int t = 0; t < BN / 16; ++t) {
            const unsigned a[4] = {pr[4 * t + 0], pr[4 * t + 1], pr[4 * t + 2], pr[4 * t + 3]};
            // keys 16t..16t+15 = 16 swizzled rows = 2048 bytes further into both V boxes.
            const unsigned long long vb = v_desc + (unsigned long long)((t * 16 * ROW_BYTES) >> 4);
            wgmma_rs_tb(o, a, vb, 1);  // N = DV
        }
    }
}

// Keys outside each row's [lo, hi) become -inf (windows, per-sequence lengths, causal): the
// portable path's masks (online_softmax.cuh) on the wgmma accumulators, with absolute key indices
// (col0 = the first key this thread holds). Causal and length limits cut a tile from above only; a
// lower bound inside the tile comes from a window's left edge alone, so that is checked once (and
// only in the modes build, which has windows) and the common masked tile skips one compare per
// score (64 per thread at BN = 128).
__device__ __forceinline__ void apply_mask_range(float (&s)[BN / 2], int col0, const KeyRange& r0, const KeyRange& r1) {
    const bool cut_below = MODES && (r0.lo > col0 || r1.lo > col0);
    if (!cut_below) {
        mask_scores(n8_tiles(s), col0, r0.hi, r1.hi);
        return;
    }
    const int lo[2] = {r0.lo, r1.lo}, hi[2] = {r0.hi, r1.hi};
    mask_scores_window(n8_tiles(s), col0, lo, hi);
}

// Keys [lo, hi) that every row of a warpgroup (rows wg_row0 .. wg_row0 + WG_M - 1) sees: a key
// tile inside needs no element mask.
__device__ __forceinline__ KeyRange warpgroup_unmasked_keys(const AttentionParams& p, int b, int wg_row0) {
    const SeqInfo seq = block_seq(p, b);
    KeyRange r;
    r.lo = block_keys(p, seq, wg_row0 + WG_M - 1).lo;
    r.hi = block_keys(p, seq, wg_row0).hi;
    return r;
}

// Scores of key tile [k0, k0 + BN) of sequence b, head h, as the softmax takes them: modified
// (softcap, ALiBi; score_mod.cuh) when the problem has modifiers, then masked unless every row of
// the warpgroup (rows wg_row0 .. wg_row0 + WG_M - 1) sees the whole tile.
// Registers are the limit in the consumers, so little of the block info is kept across the key
// loop. The dense build recomputes everything here from the parameter block (constant bank). The
// modes build's lengths live in global memory: reloading them and deriving the warpgroup's
// bounds on every tile measured 9 % more instructions than the dense build (2026-11-25, 78550e5), so
// it takes the bounds from the item's start (`wg_unmasked`, two registers) and reloads the
// lengths only where a tile is masked or modified (an L1 hit; the loop's barrier asm keeps the
// compiler from hoisting them). Whether the problem has modifiers (`modified`) comes from the
// item's start too: tested here, the parameter loads and compares ran on every tile.
__device__ __forceinline__ void prepare_scores(const AttentionParams& p, float (&s)[BN / 2], int b, int h, int row0,
                                               int wg_row0, int k0, int col_in_block, const KeyRange& wg_unmasked,
                                               bool modified) {
    if (MODES && modified) {
        const SeqInfo seq = block_seq(p, b);
        const ScoreMod mod = score_mod(p, seq, b, h);
        modify_scores(n8_tiles(s), mod, row0, k0 + col_in_block);  // (online_softmax.cuh)
    }
    const KeyRange wg = MODES ? wg_unmasked : warpgroup_unmasked_keys(p, b, wg_row0);
    if (k0 < wg.lo || k0 + BN > wg.hi) {
        const SeqInfo seq = block_seq(p, b);
        apply_mask_range(s, k0 + col_in_block, block_keys(p, seq, row0), block_keys(p, seq, row0 + 8));
    }
}

// The epilogue rules of masking.cuh (a row with l = 0 that sees keys got only -inf logits: NaN, as
// in the f64 reference; a row that sees none is the defined empty row, O = 0 and LSE = +inf), with
// the block info's keys for any mask.
__device__ __forceinline__ float row_inverse(float l, const KeyRange& keys) {
    return row_sum_inverse_if(l, [&] { return keys.hi > keys.lo; });
}
__device__ __forceinline__ float row_log_sum_exp(float l, const KeyRange& keys, float lse_if_nonzero) {
    return row_lse_if(l, lse_if_nonzero, [&] { return keys.hi > keys.lo; });
}
// A row's LSE in natural log from its raw max m and sum l: scale*m + ln(l) = (m*scale_log2 +
// log2(l)) * ln(2), with the rules above.
__device__ __forceinline__ float row_natural_lse(float l, float m, const KeyRange& keys, float scale_log2) {
    float log2_l = __log2f(l);
    if constexpr (P_LOG2_SCALE != 0) log2_l -= (float)P_LOG2_SCALE;  // l carries P's factor
    return row_log_sum_exp(l, keys, (m * scale_log2 + log2_l) * 0.69314718055994531f);
}

// Online softmax step on raw scores s (in place: s becomes p = exp2(s*scale_log2 - m*scale_log2)).
// Updates the running max m[2] (raw units) and the per-thread partial row sums l[2]; returns the
// factors alpha[2] the old O rows must be multiplied by (exactly 1 where the max did not move).
// -inf rows stay finite: a row whose max is still -inf uses 0 as its shift, so every p is
// exp2(-inf) = 0 and alpha = 0 (O is 0 anyway).
// Not online_softmax.cuh's online_softmax_update, on purpose: that one takes scores already in the
// log2 domain (a multiply per score first) and rescales O inside; this one takes the raw wgmma
// accumulators, keeps the max in raw units and folds the scale into each exponent's FMA (one FFMA
// a score; the plan requires softmax_scale > 0, hopper.rs, for the raw max to be the scaled one),
// and leaves O's rescale to the caller, which in the overlapped loop must first wait for the PV
// wgmma that still owns O. It also takes both rows' maxima in one pass, where the portable step
// goes row by row: one shared step would change the PTX of every build of one path or the other.
__device__ __forceinline__ void online_softmax(float (&s)[BN / 2], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                               float scale_log2) {
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        mx[0] = fmaxf(mx[0], fmaxf(s[4 * j + 0], s[4 * j + 1]));
        mx[1] = fmaxf(mx[1], fmaxf(s[4 * j + 2], s[4 * j + 3]));
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) mx[r] = quad_max(mx[r]);
    float shift[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        shift[r] = (mx[r] == -INFINITY) ? 0.f : mx[r] * scale_log2;
        // An unchanged max rescales by exactly 1: exp2f(m*c - shift) contracts to an FMA whose
        // result is m*c's rounding error, not 0, and a row would then get other bits from each
        // key tile that leaves its max alone (e.g. the fully masked tiles past a causal row's
        // diagonal that a taller q tile walks), so its output would follow the tile height.
        alpha[r] = (m[r] == -INFINITY) ? 0.f : (mx[r] == m[r]) ? 1.f : exp2f(m[r] * scale_log2 - shift[r]);
        m[r] = mx[r];
    }
    if constexpr (P_LOG2_SCALE != 0) {  // (alpha above keeps the unscaled shift)
#pragma unroll
        for (int r = 0; r < 2; ++r) shift[r] -= (float)P_LOG2_SCALE;
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

// e4m3 (FC_HOPPER_E4M3): the true value of a stored byte of Q, K or V is its e4m3 value times its
// table's factor for (sequence b, KV head of h) (params.cuh). Q's times K's scales the logits, so
// it folds into the softmax's scale; V's scales O, folded into the epilogue's 1 / l.
__device__ __forceinline__ int descale_index(const AttentionParams& p, int b, int h) {
    return b * p.descale_batch_stride + (h / p.q_heads_per_kv) * p.descale_head_stride;
}
__device__ __forceinline__ float qk_descale(const AttentionParams& p, int b, int h) {
    const int i = descale_index(p, b, h);
    return p.q_descale[i] * p.k_descale[i];
}
__device__ __forceinline__ float v_descale(const AttentionParams& p, int b, int h) {
    return p.v_descale[descale_index(p, b, h)];
}

__device__ __forceinline__ void rescale_o(float (&o)[DV / 2], const float (&alpha)[2]) {
#pragma unroll
    for (int j = 0; j < DV / 8; ++j) {
        o[4 * j + 0] *= alpha[0];
        o[4 * j + 1] *= alpha[0];
        o[4 * j + 2] *= alpha[1];
        o[4 * j + 3] *= alpha[1];
    }
}

// A 4 x 4 transpose of 4-byte words across the four lanes of a quad (lane t = lane & 3): lane t's
// w[k] becomes lane k's w[t]. Two exchange rounds, each trading one bit of the lane index for one
// bit of the word index; every lane of the warp must take part.
__device__ __forceinline__ void quad_transpose(unsigned (&w)[4], int t) {
#pragma unroll
    for (int bit = 1; bit <= 2; bit <<= 1) {
        const bool high = (t & bit) != 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            if (k & bit) continue;  // the pair (k, k | bit): keep the word whose bit matches the lane's
            const unsigned sent = high ? w[k] : w[k | bit];
            const unsigned got = __shfl_xor_sync(0xffffffffu, sent, bit);
            if (high)
                w[k] = got;
            else
                w[k | bit] = got;
        }
    }
}

// BLOCKS of a row's 8-column blocks of O, normalised, in 16-byte stores: a quad's four lanes hold
// each block 4 bytes apiece, and a transpose across the quad gives each lane whole blocks (4
// times fewer stores, each a full 16 bytes; O strides are multiples of 8 elements). v[2 j + e]:
// this lane's value e of block j; the blocks start at column block `first_block`; `orow` is null
// for a row past the sequence (whose lanes still take part in the transpose); blocks past a padded
// build's `head_dim` are not written (common/padded_head.cuh; O is V's width, never padded when
// V has its own head dim).
template <int BLOCKS>
__device__ __forceinline__ void store_row_blocks(elem_t* orow, const float (&v)[2 * BLOCKS], float inv,
                                                 int first_block, int lane, int head_dim) {
    static_assert(BLOCKS % 4 == 0, "whole groups of four blocks");
#pragma unroll
    for (int g = 0; g < BLOCKS / 4; ++g) {
        unsigned blocks[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) blocks[k] = pack2_u32(v[2 * (4 * g + k)] * inv, v[2 * (4 * g + k) + 1] * inv);
        quad_transpose(blocks, lane & 3);
        if (orow != nullptr && chunk_in_head<PADDED_V>(head_dim, first_block + 4 * g + (lane & 3)))
            st_global_v4(orow + 8 * (first_block + 4 * g + (lane & 3)),
                         make_uint4(blocks[0], blocks[1], blocks[2], blocks[3]));
    }
}

// The S accumulator layout is the A-fragment layout, register for register (see wgmma.cuh); for
// e4m3 with V's keys permuted to match (wgmma_e4m3.cuh).
template <bool kE4m3 = E4M3, int NS, int NP>
__device__ __forceinline__ void convert_p(const float (&s)[NS], unsigned (&pr)[NP]) {
    static_assert(NS == BN / 2 && NP == P_REGS, "S: BN / 2 f32, P: P_REGS registers a thread");
    if constexpr (kE4m3) {
        pack_a_e4m3<2 * NS>(s, pr);
    } else {
#pragma unroll
        for (int i = 0; i < BN / 4; ++i) pr[i] = pack2_u32(s[2 * i], s[2 * i + 1]);
    }
}

}  // namespace fch
