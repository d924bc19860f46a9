// Generation 5 (Hopper) forward: the tile scheduler, work items (batch, head, BM-row q tile)
// and their order (L2 sections, longest-first under causal masking), split units.
#pragma once
#include "config.cuh"
#include "block_info.cuh"
#include "../common/params.cuh"
#include "../common/types.cuh"
#include "../common/masking.cuh"
#include "../common/seqlen.cuh"
#include "../common/hopper/cluster.cuh"

namespace fch {

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

// The static schedule's first unit of this CTA and its step to the next: a cluster of
// CLUSTER_CTAS CTAs takes each unit (one CTA a unit without the cluster key split).
__device__ __forceinline__ int first_unit_of_cta() { return (int)(blockIdx.x / CLUSTER_CTAS); }
__device__ __forceinline__ int unit_stride() { return (int)(gridDim.x / CLUSTER_CTAS); }

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
#if FC_SEQ_KEY_SPLIT_ROUTE == 1
    // Only sequences of few rows (seqlen.cuh): the q tiles past the longest such are never taken.
    static_assert(KEY_SPLIT, "the key-split route runs the key-split build");
    s.nm = min(s.nm, (FC_SEQ_KEY_SPLIT_ROWS + BM - 1) / BM);
#endif
    s.bh = p.batch * p.heads_q;
    s.total = s.nm * s.bh;
    if constexpr (!MODES) {
        // Heads whose K/V fit the section, in f32: a heuristic every thread computes alike, so no
        // exact division is needed. The two 64-bit divisions of the general form below
        // (subroutine calls in every thread) sat on the path to the producer's first copy, which
        // one-item CTAs wait on (2026-11-26, 1fd8819).
        const float qpk = p.q_heads_per_kv > 0 ? (float)p.q_heads_per_kv : 1.f;
        const float kv_bytes = fmaxf(2.f * (float)max(p.seq_k, 1) * (float)(D * IN_BYTES) / qpk, 1.f);
        const float g = fminf(fmaxf(floorf((float)FC_HOPPER_L2_SECTION_BYTES / kv_bytes), 1.f), (float)s.bh);
#if FC_HOPPER_HEAD_MAJOR
        // One head per section without causal masking (below), and also when every CTA gets one
        // item at most: there is no balance to keep (1fd8819).
        s.g = p.causal && s.total > unit_stride() ? (int)g : 1;
#else
        s.g = (int)g;
#endif
        return s;
    }
    // The modes build keeps the exact form: its paged suite, near its targets, moved with the
    // f32 one (1fd8819).
    int qpk = p.q_heads_per_kv > 0 ? p.q_heads_per_kv : 1;
    unsigned long long kv_bytes = 2ull * (unsigned long long)(p.seq_k > 0 ? p.seq_k : 1) * D * IN_BYTES / qpk;
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
    int m_idx, bh;
    if (!FC_HOPPER_SPLIT_KV && !MODES && s.g == 1) {
        // One head per section (every non-causal problem, and any with one item per CTA): t is
        // bh * nm + m_idx, one division where the general order takes three more (on the
        // producer's path to its first copy, which one-item CTAs wait on). The split build's
        // consumers (D = 128) spilled with both forms inlined; the modes build keeps its code as
        // its paged suite was measured.
        bh = t / s.nm;
        m_idx = t - bh * s.nm;
    } else {
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
        m_idx = within / g_here;
        bh = first_bh + (within - m_idx * g_here);
    }
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
    Work w = decode(p, s, u);
    if constexpr (CLUSTER_CTAS > 1) {
        // The cluster key split: CTA r takes the r-th half of the item's key tiles, the first
        // half the longer (the second holds the diagonal tile, masked, under causal masking).
        const int first_half = (w.n_blocks + 1) >> 1;
        if (cluster_cta_rank() != 0) {
            w.kb0 += first_half;
            w.n_blocks -= first_half;
        } else {
            w.n_blocks = first_half;
        }
    }
    return w;
#endif
}

}  // namespace fch
