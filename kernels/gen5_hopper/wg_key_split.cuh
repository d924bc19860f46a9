// Generation 5 (Hopper) forward: key-split warpgroups (FC_HOPPER_WG_KEY_SPLIT). Both consumer
// warpgroups take the item's 64 q rows; warpgroup cw takes key tiles cw, cw + 2, cw + 4, ... and
// the two partial softmaxes are merged through shared memory, each warpgroup finishing half of
// O's columns. A one-round grid's CTA then walks half the key tiles one after another (each tile's
// QK^T, softmax and PV is a dependent chain of ~2 300 cycles at D = 64), for a merge inside the
// SM instead of a split across CTAs and a combine through global memory.
#pragma once
#include "config.cuh"
#include "tile_scheduler.cuh"
#include "block_info.cuh"
#include "consumer_math.cuh"
#include "pingpong.cuh"
#include "kv_fetch.cuh"
#include "split_epilogue.cuh"
#include "../common/params.cuh"
#include "../common/types.cuh"
#include "../common/seqlen.cuh"
#include "../common/hopper/mbarrier.cuh"
#include "../common/hopper/named_barrier.cuh"
#include "../common/hopper/smem_io.cuh"
#include "../common/hopper/tma.cuh"
#include "../common/hopper/cluster.cuh"

namespace fch {

// The consumer's step to its next key tile in the K/V ring. Tile g of the CTA's sequence of
// tiles (over all its items) sits in slot g mod STAGES, filled for the (g / STAGES)-th time.
__device__ __forceinline__ void advance_ring(int& stage, unsigned& phase) {
    if constexpr (KEY_STEP == 1) {
        step_ring(stage, phase);
    } else {
        static_assert(KEY_STEP <= STAGES, "a step skips no whole ring turn");
        stage += KEY_STEP;
        if (stage >= STAGES) {
            stage -= STAGES;
            phase ^= 1;
        }
    }
}

// The producer's K/V tiles of one item in pairs, each pair's K tiles before its V tiles (K_0, K_1,
// V_0, V_1, ...): warpgroup 1 starts on tile 1, whose K then lands right behind tile 0's. Every
// wait is for a slot's release by the warpgroup holding the tile STAGES back, which needs only
// tiles issued before (no cycle). Dense build: lane 0 alone, no zeroed tails. Modes build (the
// batch-invariant plans' key-split sequences): the whole producer warp, each lane its page group,
// and a V tile running past the sequence's keys zeroed through `bar_v_landed` (fetch_kv_tile).
__device__ __forceinline__ void produce_key_split_pairs(const AttentionParams& p, const SeqInfo& seq, const Work& w,
                                                        int h_kv, unsigned sK, unsigned sV, unsigned bar_k_full,
                                                        unsigned bar_k_empty, unsigned bar_v_full,
                                                        unsigned bar_v_empty, const CUtensorMap* tm_k,
                                                        const CUtensorMap* tm_v, int& stage, unsigned& phase,
                                                        int lane, unsigned bar_v_landed, unsigned& landed_phase) {
    // (Constants in the dense build, which keeps lane 0 and no zeroed tails.)
    const int fetch_lane = MODES ? lane : 0;
    const unsigned v_landed = MODES ? bar_v_landed : 0u;
    for (int kb = 0; kb < w.n_blocks; kb += 2) {
        const int n = min(2, w.n_blocks - kb);  // (an odd count ends with a pair of one)
        int st[2];
        unsigned ph[2];
        KvTile tile[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            if (i < n) {
                st[i] = stage;
                ph[i] = phase;
                tile[i] = plan_kv_tile(p, seq, w.b, (w.kb0 + kb + i) * BN, fetch_lane);
                step_ring(stage, phase);
            }
        }
        // The pair's tiles of one tensor (K or V), each into its slot once the slot is free.
        auto fetch_pair = [&](unsigned s_base, const CUtensorMap* tm, unsigned bar_full, unsigned bar_empty,
                              int empty_tag, unsigned landed) {
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                if (i < n) {
                    mbar_wait(bar_empty + 8 * st[i], ph[i] ^ 1, empty_tag);
                    fetch_kv_tile(p, tile[i], h_kv, s_base + st[i] * KV_TILE_BYTES, tm, bar_full + 8 * st[i], landed,
                                  fetch_lane, MODES ? &landed_phase : nullptr);
                }
            }
        };
        fetch_pair(sK, tm_k, bar_k_full, bar_k_empty, TAG_K_EMPTY, 0u);
        fetch_pair(sV, tm_v, bar_v_full, bar_v_empty, TAG_V_EMPTY, v_landed);
    }
}

// Where warpgroup cw's first tile of an item sits: `ring` tiles went before the item.
__device__ __forceinline__ void key_split_ring_start(int ring, int cw, int& stage, unsigned& phase) {
    const int g = ring + cw;
    stage = g % STAGES;
    phase = (unsigned)((g / STAGES) & 1);
}

// Ping-pong turns alternate between the warpgroups, one a tile. An item with an odd number of
// tiles gives warpgroup 0 one more: warpgroup 1 then takes an empty turn after its last, so that
// every scheduler barrier pairs up and the next item starts with warpgroup 0's turn again.
__device__ __forceinline__ void key_split_balance_turns(int n_blocks, int cw) {
    if (cw == 1 && (n_blocks & 1)) {
        pp_sync(cw);
        pp_arrive(cw);
    }
}

// One exchange slot: float4 number `slot` of thread tid, in the half received by warpgroup `to`.
__device__ __forceinline__ unsigned xchg_addr(unsigned sx, int to, int slot, int tid) {
    return sx + (unsigned)(((to * XCHG_SLOTS + slot) * 128 + tid) * 16);
}

#if FC_HOPPER_CLUSTER_KEY_SPLIT
// The cluster key split's second merge. Each thread holds its two rows' half of O merged over its
// CTA's key tiles (v, the row's m and l); CTA r finishes row r of the two. The partner, thread
// for thread, sends the row we finish into our shared memory (st.async, counted off our barrier)
// and we send it its row. Both merge rank 0's part (the lower keys) as a.
__device__ __forceinline__ void merge_cluster_row(const float (&keep)[DV / 4], const float (&mx)[2],
                                                  const float (&lsum)[2], int cw, int tid, float c, unsigned base,
                                                  float (&row)[DV / 8], PartWeights& pw) {
    constexpr int H = DV / 16;
    const bool r1 = cluster_cta_rank() != 0;
    const unsigned peer = r1 ? 0u : 1u;
    const unsigned slot0 = base + OFF_CXCHG + (unsigned)((cw * 128 + tid) * 16);
    const unsigned remote0 = cluster_map_shared(slot0, peer);
    const unsigned remote_bar = cluster_map_shared(base + OFF_BAR_CXCHG, peer);
    cluster_wait_acquire();  // the partner's barrier is initialised (and its CTA running)
    // The partner's row is row 1 - r: values 2, 3 of a column block's quadruple for rank 0.
#pragma unroll
    for (int q = 0; q < H / 2; ++q) {
        const int j0 = 2 * q, j1 = 2 * q + 1;
        st_async_v4_f32(remote0 + q * 256 * 16, r1 ? keep[4 * j0] : keep[4 * j0 + 2],
                        r1 ? keep[4 * j0 + 1] : keep[4 * j0 + 3], r1 ? keep[4 * j1] : keep[4 * j1 + 2],
                        r1 ? keep[4 * j1 + 1] : keep[4 * j1 + 3], remote_bar);
    }
    st_async_v2_f32(remote0 + (H / 2) * 256 * 16, r1 ? mx[0] : mx[1], r1 ? lsum[0] : lsum[1], remote_bar);
    mbar_wait_cluster(base + OFF_BAR_CXCHG, 0);
    float theirs[2 * H];
#pragma unroll
    for (int q = 0; q < H / 2; ++q) {
        const float4 t = ld_shared_v4_f32(slot0 + q * 256 * 16);
        theirs[4 * q] = t.x;
        theirs[4 * q + 1] = t.y;
        theirs[4 * q + 2] = t.z;
        theirs[4 * q + 3] = t.w;
    }
    const float2 ml = ld_shared_v2_f32(slot0 + (H / 2) * 256 * 16);
    const float my_m = r1 ? mx[1] : mx[0], my_l = r1 ? lsum[1] : lsum[0];
    pw = part_weights(r1 ? ml.x : my_m, r1 ? ml.y : my_l, r1 ? my_m : ml.x, r1 ? my_l : ml.y, c);
#pragma unroll
    for (int j = 0; j < H; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const float mine = r1 ? keep[4 * j + 2 + e] : keep[4 * j + e];
            const float a = r1 ? theirs[2 * j + e] : mine, b = r1 ? mine : theirs[2 * j + e];
            row[2 * j + e] = __fadd_rn(__fmul_rn(a, pw.wa), __fmul_rn(b, pw.wb));
        }
    }
}
#endif

#if FC_HEAD_DIM >= 64
// The epilogue of a key-split item. Thread tid of both warpgroups holds the same two rows and
// columns, each over its own key tiles (o unnormalised, m the raw running max, l quad-reduced).
// Warpgroup cw keeps column blocks [cw H, cw H + H) (H = DV / 16 blocks of 8 columns) and hands the
// other half, with its (m, l), to its partner; both merge in the same order (warpgroup 0's part,
// then 1's) so the two halves are normalised by bitwise the same l. Warpgroup 0 writes the LSE.
// With the cluster key split the two CTAs then merge their parts (merge_cluster_row), each
// writing one of a thread's two rows.
// One code path for both warpgroups (the halves are picked with selects on constant indices: o[]
// indexed by a run-time block number went to the stack), so each named barrier below is one
// instruction that all 256 threads reach.
__device__ __forceinline__ void key_split_epilogue(const AttentionParams& p, const Work& w, int cw, int tid,
                                                   const float (&o)[DV / 2], const float (&m)[2], const float (&l)[2],
                                                   int grow0, float c, unsigned base) {
    constexpr int H = DV / 16;
    const unsigned sx = base + OFF_XCHG;
    const bool first = cw == 0;
    const int lane = tid & 31;
    // The block info first, so that its parameter loads (cold in the constant cache) may overlap
    // the wait for the partner (measured 2026-11-26, df12f9f: the call's time did not move with it).
    const SeqInfo seq = block_seq(p, w.b);
    KeyRange keys[2];
    elem_t* orow[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int grow = grow0 + 8 * r;
        keys[r] = block_keys(p, seq, grow);
        orow[r] = grow < seq.len_q ? reinterpret_cast<elem_t*>(p.o) + seq_o_offset(p, seq, w.b, w.h, grow) : nullptr;
    }
    float keep[4 * H];
#pragma unroll
    for (int j = 0; j < H; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) keep[4 * j + e] = first ? o[4 * j + e] : o[4 * (H + j) + e];
        st_shared_v4_f32(xchg_addr(sx, 1 - cw, j, tid), first ? o[4 * (H + j) + 0] : o[4 * j + 0],
                         first ? o[4 * (H + j) + 1] : o[4 * j + 1], first ? o[4 * (H + j) + 2] : o[4 * j + 2],
                         first ? o[4 * (H + j) + 3] : o[4 * j + 3]);
    }
    st_shared_v4_f32(xchg_addr(sx, 1 - cw, H, tid), m[0], m[1], l[0], l[1]);
    named_bar_sync(BAR_PAIR, 2 * 128);
    const float4 ml = ld_shared_v4_f32(xchg_addr(sx, cw, H, tid));
    float4 part[H];
#pragma unroll
    for (int j = 0; j < H; ++j) part[j] = ld_shared_v4_f32(xchg_addr(sx, cw, j, tid));
    // The partner may overwrite our slots (its next item's exchange) only once we have read them.
    named_bar_sync(BAR_PAIR, 2 * 128);

    // Warpgroup 0's part is "a", warpgroup 1's "b", in both warpgroups.
    const float their_m[2] = {ml.x, ml.y}, their_l[2] = {ml.z, ml.w};
    float w_mine[2], w_theirs[2], lsum[2], mx[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float ma = first ? m[r] : their_m[r], mb = first ? their_m[r] : m[r];
        const float la = first ? l[r] : their_l[r], lb = first ? their_l[r] : l[r];
        const PartWeights pw = part_weights(ma, la, mb, lb, c);
        mx[r] = pw.m;
        lsum[r] = pw.l;
        w_mine[r] = first ? pw.wa : pw.wb;
        w_theirs[r] = first ? pw.wb : pw.wa;
    }
#pragma unroll
    for (int j = 0; j < H; ++j) {
        const float t[4] = {part[j].x, part[j].y, part[j].z, part[j].w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float ours = __fmul_rn(keep[4 * j + e], w_mine[e >> 1]);
            const float other = __fmul_rn(t[e], w_theirs[e >> 1]);
            // a + b whichever warpgroup holds which (fadd is commutative: the same bits).
            keep[4 * j + e] = __fadd_rn(ours, other);
        }
    }

    // O and LSE with the unsplit register epilogue's conventions (row_inverse, row_natural_lse,
    // store_row_blocks).
    const int mine = cw * H;
#if FC_HOPPER_CLUSTER_KEY_SPLIT
    float row[2 * H];
    PartWeights pw;
    merge_cluster_row(keep, mx, lsum, cw, tid, c, base, row, pw);
    const bool r1 = cluster_cta_rank() != 0;
    const int grow = grow0 + (r1 ? 8 : 0);
    const KeyRange row_keys = r1 ? keys[1] : keys[0];
    store_row_blocks<H>(r1 ? orow[1] : orow[0], row, row_inverse(pw.l, row_keys), mine, lane, p.head_dim);
    if (first && grow < seq.len_q && (lane & 3) == 0)
        p.lse[block_lse_offset(p, seq, w.b, w.h, grow)] = row_natural_lse(pw.l, pw.m, row_keys, c);
#else
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int grow = grow0 + 8 * r;
        float row[2 * H];
#pragma unroll
        for (int j = 0; j < H; ++j) {
            row[2 * j] = keep[4 * j + 2 * r];
            row[2 * j + 1] = keep[4 * j + 2 * r + 1];
        }
        store_row_blocks<H>(orow[r], row, row_inverse(lsum[r], keys[r]), mine, lane, p.head_dim);
        if (first && grow < seq.len_q && (lane & 3) == 0)
            p.lse[block_lse_offset(p, seq, w.b, w.h, grow)] = row_natural_lse(lsum[r], mx[r], keys[r], c);
    }
#endif
}
#else
// (The narrow D = 32 build has no key split, config.cuh: the kernel never takes this call. Its
// warpgroups' halves of O, D / 16 = 2 column blocks, are not whole store groups.)
__device__ __forceinline__ void key_split_epilogue(const AttentionParams&, const Work&, int, int, const float (&)[DV / 2],
                                                   const float (&)[2], const float (&)[2], int, float, unsigned) {}
#endif

}  // namespace fch
