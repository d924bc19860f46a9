// Generation 5 (Hopper) forward: the producer's K/V fetch, the one place that knows where key
// rows live (strided or paged; TMA boxes, zeroed tails).
#pragma once
#include "config.cuh"
#include "tile_scheduler.cuh"
#include "../common/params.cuh"
#include "../common/seqlen.cuh"
#include "../common/kv_rows.cuh"
#include "../common/hopper/mbarrier.cuh"
#include "../common/hopper/named_barrier.cuh"
#include "../common/hopper/tma.cuh"
#include "../common/hopper/cluster.cuh"

namespace fch {

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

// With FC_HOPPER_SPREAD_PAGES (small pages) the producer warpgroup's four warps issue a paged
// tile's boxes, lane g of warp g % 4 issuing group g. UTMALDG takes warp-uniform operands, so one
// warp's lanes issue their boxes one after another; on paged-16 the producer warp issued all the
// time and hardly ever waited for a slot (stall samples, 2026-11-26, d8d4083; against a producer
// that waits on "empty" for contiguous tiles).
enum : int { KV_ISSUE_WARPS = 4 };  // (an enum: a constexpr int is emitted as a PTX global)

// Where one K/V tile's rows come from (keys [k0, k0 + BN) of one sequence), for this producer
// lane, worked out before the producer waits for the tile's ring slots: after a slot is released
// only the copies are left to issue. With a two-stage ring a slot's refill is on the consumers'
// critical path; paged tiles (the same copies as contiguous ones at block 256) ran 3-13 % behind
// with the table read, the divisions by the block size and the byte count between the wait and
// the copies (2026-11-25, e01564b).
struct KvTile {
    int valid;        // rows of the tile inside the sequence's keys (>= 1)
    int row;          // strided: the tile's first storage row; paged: this lane's group's row in its page
    int batch;        // strided: the batch coordinate; paged: this lane's page
    int groups;       // paged: page groups holding valid rows (lane g < groups issues group g)
    unsigned bytes;   // the copies' bytes, for the "full" barrier's expect_tx
    unsigned dst_off; // paged: this lane's group's offset in the stage
};

__device__ __forceinline__ KvTile plan_kv_tile(const AttentionParams& p, const SeqInfo& seq, int b, int k0, int lane) {
    KvTile t;
    t.valid = min(BN, seq.len_k - k0);
    if (!MODES || p.block_table == nullptr) {
        t.row = (int)seq.k_row0 + k0;
        t.batch = MODES && p.cu_seqlens_k != nullptr ? 0 : b;  // packed K/V: one "batch"
        t.groups = 1;
        t.bytes = KV_TILE_BYTES;
        t.dst_off = 0;
        return t;
    }
    // Paged: one box per page-aligned group of rows; groups past the sequence's keys are not
    // loaded (their table entries need not be valid). Pages are multiples of 16 rows, so a tile
    // has at most BN / 16 groups, one per lane.
    const int group = paged_box_rows(p.block_size);  // a power of two
    const int j = k0 + lane * group;
    t.groups = (t.valid + group - 1) >> (__ffs(group) - 1);
    const PageRow at = page_row(p, j);
    t.batch = lane < t.groups ? p.block_table[(long long)b * p.max_blocks_per_seq + at.slot] : 0;
    t.row = at.row;
    t.bytes = (unsigned)(t.groups * group * ROW_BYTES * NBOX);
    t.dst_off = (unsigned)(lane * group * ROW_BYTES);
    return t;
}

// Whether a V tile's rows past the sequence's keys are zeroed by the producer (fetch_kv_tile).
__device__ __forceinline__ bool v_tail_zeroed(const AttentionParams& p, const KvTile& t) {
    const bool per_sequence_k = MODES && (p.seqused_k != nullptr || p.cu_seqlens_k != nullptr);
    return per_sequence_k && t.valid < BN;
}

// Whether producer warp `warp` issues boxes of a tile (SPREAD_PAGES); warp 0 always does.
// A follower warp waits on a slot's "empty" barrier only for tiles it issues into: the slot's
// next release needs its boxes, so the barrier cannot run a phase ahead of the warp's wait (a
// warp that also waited on tiles it does not touch could be lapped and wait on the wrong phase).
__device__ __forceinline__ bool issues_boxes(const KvTile& t, int warp, bool v_tile_zeroed) {
    return warp == 0 || (!v_tile_zeroed && t.groups > warp);
}

// One K or V tile, as planned, into the stage at `dst`, completing `full`. Called by the
// producer's lanes (PRODUCER_LANES: the whole warp in the modes build); lane 0 issues the strided
// copies, lane g the copies of page group g.
// When the tile runs past the sequence's keys and the rows there hold something else (a cache's
// unused slots, the next packed sequence, pages never loaded), a V tile (`landed` != 0) must not
// let them in: P = 0 there, but 0 * NaN = NaN would reach O. Its copies then complete on the
// producer's own `landed` barrier, the warp zeroes the rows past the keys, fences them for the
// async proxy (wgmma reads them next) and lane 0 completes `full` with a plain arrive. K tiles
// need none of this: the consumers overwrite those columns' scores with -inf.
// (A dense problem's rows past seq_k lie outside the tensor map, and TMA zero-fills them.)
// kBoxes: the tile's column boxes, NBOX for K, NBOX_V for V (V's own head dim); the plan's
// byte count (`t.bytes`) is K's.
// With SPREAD_PAGES every producer warp calls this for the tile, `warp` its index: warp 0 sets
// the expected bytes and finishes a zeroed tail, each warp issues its groups. (A box of another
// warp may complete before warp 0's expect-tx: the barrier's tx-count goes negative for a while,
// and the phase cannot complete before warp 0's arrival.)
template <int kBoxes = NBOX>
__device__ __forceinline__ void fetch_kv_tile(const AttentionParams& p, const KvTile& t, int h_kv, unsigned dst,
                                              const CUtensorMap* map, unsigned full, unsigned landed, int lane,
                                              unsigned* landed_phase, int warp = 0) {
    const bool lead = warp == 0;
    const bool zero_tail = landed != 0u && v_tail_zeroed(p, t);
    const unsigned bar = zero_tail ? landed : full;
    if (!MODES || p.block_table == nullptr) {
        if (lane == 0 && lead) {
            mbar_arrive_expect_tx(bar, kBoxes * KV_BOX_BYTES);
#pragma unroll
            for (int c = 0; c < kBoxes; ++c) tma_load_4d(dst + c * KV_BOX_BYTES, map, bar, c * BOX_COLS, t.row, h_kv, t.batch);
        }
    } else {
        static_assert(BN / 16 <= 32, "one page group per producer lane");
        if (lane == 0 && lead) mbar_arrive_expect_tx(bar, kBoxes == NBOX ? t.bytes : t.bytes / NBOX * kBoxes);
        __syncwarp();  // the expected bytes are set before any box of this warp can complete
        // A V tile with a zeroed tail completes on `landed`, one barrier that only warp 0 waits on:
        // warp 0 issues all of it, or a follower could put the next such tile's boxes on `landed`
        // before warp 0 has seen this one's phase (it hung on 2026-11-26; 658b48a).
        const bool spread_here = SPREAD_PAGES && !zero_tail;
        if (lane < t.groups && (spread_here ? lane % KV_ISSUE_WARPS == warp : lead)) {
            const unsigned group_dst = dst + t.dst_off;
#pragma unroll
            for (int c = 0; c < kBoxes; ++c) tma_load_4d(group_dst + c * KV_BOX_BYTES, map, bar, c * BOX_COLS, t.row, h_kv, t.batch);
        }
    }
    if (zero_tail && lead) {
        mbar_wait(landed, *landed_phase, TAG_V_FULL);
        *landed_phase ^= 1u;
        // Whole rows [valid, BN) of every column box: zeros need no swizzle.
        const int chunks = (BN - t.valid) * (ROW_BYTES / 16);
#pragma unroll
        for (int c = 0; c < kBoxes; ++c) {
            const unsigned rows = dst + c * KV_BOX_BYTES + t.valid * ROW_BYTES;
            for (int i = lane; i < chunks; i += 32) st_shared_zero_v4(rows + 16 * i);
        }
        fence_proxy_async_smem();
        __syncwarp();
        if (lane == 0) mbar_arrive(full);
    }
}

// e4m3 build: keys [k0, k0 + BN) of V's transposed copy (gen5_hopper_vt.cu; its map views it as
// (keys, head_dim, heads_kv, batch), padded to whole tiles of zeros) into the stage at `dst`: one
// box of DV rows of BN key bytes, the K-major B operand of P·V. Dense only, so every tile is whole.
__device__ __forceinline__ void fetch_vt_tile(unsigned dst, const CUtensorMap* map, unsigned full, int k0, int h_kv,
                                              int b, int lane) {
    if (lane != 0) return;
    mbar_arrive_expect_tx(full, V_TILE_BYTES);
    tma_load_4d(dst, map, full, k0, 0, h_kv, b);
}

#if FC_HOPPER_PREFETCH
// L2 prefetch of a unit's Q tile and its first PREFETCH_TILES K and V tiles (dense build: every
// coordinate comes from kernel parameters). Issued before griddepcontrol.wait: launched
// programmatically, the CTA gets there while the kernel before it still runs, and its first copies
// then find their boxes in L2. A prefetch changes no memory, so it may run ahead of that kernel's
// writes: the copies after the wait read what it wrote.
constexpr int PREFETCH_TILES = 4;
__device__ __forceinline__ void prefetch_unit_l2(const AttentionParams& p, const CUtensorMap* tm_q,
                                                 const CUtensorMap* tm_k, const CUtensorMap* tm_v, const Work& w,
                                                 int q_tiles_per_head) {
#pragma unroll
    for (int c = 0; c < NBOX; ++c) tma_prefetch_l2_4d(tm_q, c * BOX_COLS, w.m * BM, w.h, w.b);
    const int h_kv = w.h / p.q_heads_per_kv;
    if constexpr (KEY_SPLIT) {
        // The head's q tiles share the prefetch of its first K/V tiles: box j (K_{j/2} for even
        // j, V_{j/2} for odd) by q tile j mod q_tiles_per_head. Each CTA prefetching all of them
        // queued 136 KiB of requests in its own TMA unit, and its Q load after the wait landed
        // up to 1 900 cycles later instead of ~450 (timeline of ecfd9dc). With the cluster key split
        // the head's CTAs are CLUSTER_CTAS a q tile.
        const int boxes = 2 * min((p.seq_k + BN - 1) / BN, PREFETCH_TILES);
        const int prefetcher = CLUSTER_CTAS > 1 ? w.m * CLUSTER_CTAS + (int)cluster_cta_rank() : w.m;
        for (int j = prefetcher; j < boxes; j += q_tiles_per_head * CLUSTER_CTAS) {
            const int k0 = (j >> 1) * BN;
#pragma unroll
            for (int c = 0; c < NBOX; ++c) tma_prefetch_l2_4d((j & 1) ? tm_v : tm_k, c * BOX_COLS, k0, h_kv, w.b);
        }
        return;
    }
    const int n = min(w.n_blocks, PREFETCH_TILES);
    for (int kb = 0; kb < n; ++kb) {
        const int k0 = (w.kb0 + kb) * BN;
#pragma unroll
        for (int c = 0; c < NBOX; ++c) {
            tma_prefetch_l2_4d(tm_k, c * BOX_COLS, k0, h_kv, w.b);
            if (c < NBOX_V) tma_prefetch_l2_4d(tm_v, c * BOX_COLS, k0, h_kv, w.b);
        }
    }
}
#else
// (No prefetch in this build.)
__device__ __forceinline__ void prefetch_unit_l2(const AttentionParams&, const CUtensorMap*, const CUtensorMap*,
                                                 const CUtensorMap*, const Work&, int) {}
#endif

}  // namespace fch
