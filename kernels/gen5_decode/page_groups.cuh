// Generation 5, decode: the loader of full key tiles on small pages (copy_groups).
#pragma once
#include "config.cuh"
#include "../common/params.cuh"
#include "../common/types.cuh"
#include "../common/kv_rows.cuh"
#include "../common/async_copy.cuh"

namespace decode {

// Full tiles of a paged cache with small pages (a multiple of 16 rows but not of 64: 16, 32, 48,
// 80, ...): four 16-row groups, each strided inside its own page. Every thread copies the same
// rows and chunk of each group, so its offsets are fixed for the kernel; lane g of each warp
// holds group g's first row and passes it round by shuffle. A group then costs two shuffles, an
// add and its copies. The general group loader (load_tile_groups_async, kept for a sequence's
// last tile) works each copy's address, bounds and swizzle out again: at block 16 its case ran
// 48 % more instructions than the contiguous one and took 1.09-1.10x its time, this one
// 1.06-1.07x (2026-11-27, 70d02a6).
constexpr int group_rows = 16;
constexpr int groups_per_tile = kv_tile_rows / group_rows;
constexpr int rows_per_pass = num_threads / Tile::kChunksPerRow;  // 4 at D = 256, 8 at D = 128, 16 at D = 64
constexpr int copies_per_group = group_rows / rows_per_pass;
static_assert(group_rows % rows_per_pass == 0, "whole passes a group");
// From 8 rows a pass on, each thread's rows keep one swizzle pattern (it repeats every 8 rows), so
// one offset serves every copy; at D = 256 (4 rows a pass) odd passes flip the pattern's bit 2.
enum : bool { one_swizzle_per_thread = rows_per_pass % 8 == 0 };

// One thread's share of a group, for a tensor with row stride `row_stride`.
struct GroupCopy {
    unsigned dst;    // bytes from the group's first row in shared memory
    long long src;   // elements from the group's first row in global memory
    long long step;  // elements between this thread's rows
};
__device__ __forceinline__ GroupCopy group_copy(long long row_stride, int tid) {
    const int row = tid / Tile::kChunksPerRow, chunk = tid % Tile::kChunksPerRow;
    return {(unsigned)Tile::offset(row, chunk) * 2, row * row_stride + chunk * 8, rows_per_pass * row_stride};
}
// Where copy i of a group lands, from the group's first row.
__device__ __forceinline__ unsigned group_copy_dst(const GroupCopy& c, int i) {
    if constexpr (one_swizzle_per_thread) return Tile::bytes(i * rows_per_pass) + c.dst;
    // Rows row + 4i (row < 4): the pattern row & 7 gains 4 on odd passes, flipping the chunk's bit 2.
    return Tile::bytes(i * rows_per_pass) + (c.dst ^ (unsigned)((i & 1) * 4 * 16));
}

// Group (lane % groups_per_tile)'s first row of the full tile at key k0, in K and in V (they share
// the block table, so one lookup serves both).
struct GroupRows {
    const elem_t* k;
    const elem_t* v;
};
__device__ __forceinline__ GroupRows group_first_rows(const AttentionParams& p, int b, int h_kv, int k0, int lane) {
    const int j = k0 + group_rows * (lane % groups_per_tile);
    const int page = page_of_row(p, b, j);
    return {static_cast<const elem_t*>(p.k) +
                paged_row_offset(p, page, h_kv, j, p.k_batch_stride, p.k_head_stride, p.k_row_stride),
            static_cast<const elem_t*>(p.v) +
                paged_row_offset(p, page, h_kv, j, p.v_batch_stride, p.v_head_stride, p.v_row_stride)};
}

// A full tile's groups into the tile at `dst`, `mine` this lane's group's first row.
__device__ __forceinline__ void copy_groups(unsigned dst, const elem_t* mine, const GroupCopy& c) {
#pragma unroll
    for (int g = 0; g < groups_per_tile; ++g) {
        const elem_t* src =
            reinterpret_cast<const elem_t*>(__shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(mine), g)) +
            c.src;
#pragma unroll
        for (int i = 0; i < copies_per_group; ++i)
            cp_async_16_zfill(dst + Tile::bytes(g * group_rows) + group_copy_dst(c, i), src + i * c.step, true);
    }
}
}  // namespace decode
