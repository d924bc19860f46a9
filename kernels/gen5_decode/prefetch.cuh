// Generation 5, decode: the L2 prefetch of a CTA's first ring tiles (FC_DECODE_PREFETCH).
#pragma once
#include "config.cuh"
#include "work_split.cuh"
#include "../common/params.cuh"
#include "../common/seqlen.cuh"
#include "../common/kv_rows.cuh"
#include "../common/work_item.cuh"

namespace decode {

// L2 prefetch of the first ring tiles of CTA `work`'s unit, for the time before
// griddepcontrol.wait: launched programmatically, the CTA gets there while the kernel before it
// (the previous call's combine) still runs, and DRAM can start on its first tiles then. It reads
// kernel parameters and the block table only, and a prefetch changes no memory, so nothing it
// reads early can be wrong in a way that matters: a table entry the kernel before is still
// writing at worst prefetches another page of the pool (entries outside the pool are skipped),
// and lengths taken from p.seq_k (seqused_k may still be written) at worst other rows of the
// sequence's cache. Packed K/V (cu_seqlens_k) is left alone: its rows need the table.
__device__ __forceinline__ void prefetch_first_tiles(const AttentionParams& p, long long work, int splits, int tid) {
#if FC_DECODE_PREFETCH
    if (p.cu_seqlens_k != nullptr) return;
    const Unit unit = unit_of(p, work / splits);
    const int split = (int)(work % splits);
    // The split's share of the key tiles as if every key were visible.
    const KeyTiles every_key = {0, ceil_div(p.seq_k, kv_tile_rows), 0, 0};
    int first, last;
    split_tiles(every_key, split, splits, first, last);
    const int n = min(last - first, stages - 1);
    static_assert(num_threads >= 2 * kv_tile_rows, "a thread per K row and one per V row of a tile");
    if constexpr (num_threads > 2 * kv_tile_rows)  // D = 512's 32-key tiles: threads to spare
        if (tid >= 2 * kv_tile_rows) return;
    const bool is_k = tid < kv_tile_rows;  // threads [0, rows) take a K row, [rows, 2 rows) the same V row
    const void* base = is_k ? p.k : p.v;
    const long long batch_stride = is_k ? p.k_batch_stride : p.v_batch_stride;
    const long long head_stride = is_k ? p.k_head_stride : p.v_head_stride;
    const long long row_stride = is_k ? p.k_row_stride : p.v_row_stride;
    for (int t = 0; t < n; ++t) {
        const int j = (first + t) * kv_tile_rows + tid % kv_tile_rows;
        if (j >= p.seq_k) break;
        long long offset;
        if constexpr (paged_cache) {
            const PageRow at = page_row(p, j);
            if (at.slot >= p.max_blocks_per_seq) break;
            const int page = p.block_table[(long long)unit.b * p.max_blocks_per_seq + at.slot];
            if (page < 0 || page >= p.num_blocks) continue;
            offset = paged_row_offset(p, page, unit.h_kv, j, batch_stride, head_stride, row_stride);
        } else {
            offset = (long long)unit.b * batch_stride + (long long)j * row_stride + (long long)unit.h_kv * head_stride;
        }
        const char* row = reinterpret_cast<const char*>(Kv::row_ptr(base, offset));
        // A padded row ends at its own head dim (the last row of a tensor ends there too).
        const int row_bytes = padded ? 2 * (is_k ? p.head_dim : v_dim(p)) : Kv::kRowBytes;
#pragma unroll
        for (int line = 0; line < row_bytes; line += 128)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(row + line));
    }
#else
    (void)p, (void)work, (void)splits, (void)tid;
#endif
}
}  // namespace decode
