// Generation 5 (Hopper) forward: the producer's K/V fetch, the one place that knows where key
// rows live (strided or paged; TMA boxes, zeroed tails).
#pragma once

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

// The page of this lane's row group of key tile [k0, k0 + BN) (paged K/V in the modes build; 0
// otherwise, and for lanes past the tile's groups). The producer reads it before it waits for the
// tile's ring slots, so the table read overlaps that wait instead of delaying the copies after it
// (a shallow ring leaves about one tile's time between a slot's release and its use).
__device__ __forceinline__ int tile_page(const AttentionParams& p, const SeqInfo& seq, int b, int k0, int lane) {
    if (!MODES || p.block_table == nullptr) return 0;
    const int group = paged_box_rows(p.block_size);
    const int valid = min(BN, seq.len_k - k0);
    if (lane * group >= valid) return 0;
    return p.block_table[(long long)b * p.max_blocks_per_seq + (k0 + lane * group) / p.block_size];
}

// One K or V tile: keys [k0, k0 + BN) of sequence b, kv head h_kv, into the stage at `dst`,
// completing `full`. Called by the producer's lanes (PRODUCER_LANES: the whole warp in the modes
// build); lane 0 issues the strided copies, lane g the copies of page group g (`page`, from
// tile_page).
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
                                              int page, unsigned dst, const CUtensorMap* map, unsigned full,
                                              unsigned landed, int lane, unsigned* landed_phase) {
    const int valid = min(BN, seq.len_k - k0);  // >= 1: the tile holds a visible key
    const bool per_sequence_k = MODES && (p.seqused_k != nullptr || p.cu_seqlens_k != nullptr);
    const bool zero_tail = landed != 0u && per_sequence_k && valid < BN;
    const unsigned bar = zero_tail ? landed : full;
    if (!MODES || p.block_table == nullptr) {
        if (lane == 0) {
            mbar_arrive_expect_tx(bar, KV_TILE_BYTES);
            const int kv_batch = MODES && p.cu_seqlens_k != nullptr ? 0 : b;
#pragma unroll
            for (int c = 0; c < NBOX; ++c)
                tma_load_4d(dst + c * KV_BOX_BYTES, map, bar, c * 64, (int)seq.k_row0 + k0, h_kv, kv_batch);
        }
    } else {
        // Paged (modes build: the whole warp is here). Lane g issues the boxes of page group g,
        // so a tile's groups go out together: one lane walking them waited out each table read
        // before the next (its TMA asm orders them), 8 in a row at block 16. Pages are multiples
        // of 16 rows, so a tile has at most BN / 16 groups, one per lane.
        static_assert(BN / 16 <= 32, "one page group per producer lane");
        const int group = paged_box_rows(p.block_size);
        const int groups = (valid + group - 1) / group;
        if (lane == 0) mbar_arrive_expect_tx(bar, (unsigned)(groups * group * ROW_BYTES * NBOX));
        __syncwarp();  // the expected bytes are set before any box can complete
        if (lane < groups) {
            const int j = k0 + lane * group;
#pragma unroll
            for (int c = 0; c < NBOX; ++c)
                tma_load_4d(dst + c * KV_BOX_BYTES + lane * group * ROW_BYTES, map, bar, c * 64, j % p.block_size,
                            h_kv, page);
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

}  // namespace fch
