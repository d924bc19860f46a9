// cp.async (sm_80+): global -> shared copies that bypass registers and complete asynchronously,
// so the next K/V tile streams in while the tensor cores work on the current one.
//
// Groups: every cp.async issued since the last commit belongs to the next committed group;
// `cp_async_wait<N>()` blocks until at most N of this thread's groups are still in flight.
// It only covers this thread's own copies: a __syncthreads() must follow before other threads
// read the tile.
#pragma once
#include "types.cuh"
#include "smem_layout.cuh"
#include "opaque.cuh"

// 16 bytes global -> shared, cached in L2 only (.cg: the tile is used once per block, from
// shared memory). When `in_bounds` is false the source size is 0: nothing is read from global
// memory and the 16 destination bytes are zero-filled. That is how rows past seq_q / seq_k become
// zeros without ever touching memory past the end (NaN padding there must not leak in through
// 0 * NaN). `src` must still be a valid address; callers pass a row that exists.
__device__ __forceinline__ void cp_async_16_zfill(unsigned smem_addr, const void* src, bool in_bounds) {
    const int src_bytes = in_bounds ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(src), "r"(src_bytes)
                 : "memory");
}

// Closes the current group of cp.async operations (an empty group is legal and keeps the
// group arithmetic of a pipeline uniform on its last iteration).
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most `kPending` of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Fills a [kRows][kCols] SwizzledTile at shared address `smem_tile` from the global rows
// gmem_row0 + r * row_stride, r < valid_rows (1 <= valid_rows); rows at or past valid_rows are
// zero-filled with no global read. Every one of the kThreads threads of the block calls it; thread
// `tid` copies chunks tid, tid + kThreads, ... of the row-major tile, so 8 consecutive threads
// read 128 contiguous bytes of one row (coalesced) and write 8 distinct bank slots (see
// smem_layout.cuh). Does not commit: the caller groups copies.
//
// Register budget matters more than anything here: written naively (fully unrolled, offsets
// computed per copy) the compiler hoists one 64-bit global offset and one shared offset per copy
// out of the K/V loop — 48 registers for a 64 x 128 K+V pair, enough to spill D = 128/256.
//   * Full tiles (all but the last of a sequence) take an unrolled path in which each thread
//     keeps one chunk column and walks rows kRowStep apart: the shared address of copy i is one
//     of kPatterns per-thread offsets plus a compile-time constant (row % 8 repeats every
//     kPatterns copies), and the global address is a running pointer bumped by an opaque step.
//     About 3 instructions per 16-byte copy.
//     When the chunk count of a row does not divide the block but the block covers whole rows
//     that tile the tile's height (a 32-lane producer warp at D = 96, 160, 192, 224: 2 rows of 12
//     chunks, or 1 row of 20, 24, 28), the threads past those rows sit out and the rest walk the
//     same way: fewer lanes busy, but the per-copy arithmetic of the division below made a
//     producer warp the bottleneck of the portable kernel (H200: about 122 TFLOP/s at each of
//     those head dims against 323 at D = 256).
//   * Partial tiles take a rolled loop that bounds-checks every row; a block that does not cover
//     whole rows so (tile64's 128 threads at D = 96), a rolled loop that divides per copy.
//   * Rows wider than the block (a 32-lane producer warp at D = 512: 64 chunks a row) take a row
//     walk: each thread copies the same chunks of every row, 8 rows at a time.
//
// kPadCols: the rows are a padded head dim's, `valid_chunks` 16-byte chunks of them in memory (a
// head dim of 80 in the 96 tile); the chunks past them are zero-filled, never read (their source
// is the row's first chunk).
template <int kRows, int kCols, int kThreads, bool kPadCols = false>
__device__ __forceinline__ void load_tile_async(unsigned smem_tile, const elem_t* gmem_row0, long long row_stride,
                                                int valid_rows, int tid, int valid_chunks = 0) {
    using Tile = SwizzledTile<kCols>;
    constexpr int kChunks = kRows * Tile::kChunksPerRow;
    constexpr int kCopies = kChunks / kThreads;  // per thread
    static_assert(kChunks % kThreads == 0, "tile chunks must divide evenly over the block");
    // Rows one pass of the block covers whole, and whether the passes tile the height.
    constexpr int kRowStep = kThreads / Tile::kChunksPerRow;
    constexpr bool kColumnWalk = kRowStep >= 1 && kRows % kRowStep == 0;
    constexpr bool kRowWalk = kRowStep == 0 && Tile::kChunksPerRow % kThreads == 0;
    if constexpr (kRowWalk) {
        // Each thread copies chunks tid, tid + kThreads, ... of every row. Rows go 8 at a time,
        // the swizzle's period (rows of 8k chunks: physical chunk = chunk ^ (row % 8)), so each
        // shared address is the row block's base plus a compile-time offset and one XOR.
        static_assert(Tile::kChunksPerRow % 8 == 0 && kRows % 8 == 0, "row walk: 8k chunks a row, 8k rows");
        constexpr int kPerRow = Tile::kChunksPerRow / kThreads;
        const elem_t* src = gmem_row0;
#pragma unroll 1
        for (int r8 = 0; r8 < kRows; r8 += 8) {
#pragma unroll
            for (int r = 0; r < 8; ++r) {
                const bool row_in = r8 + r < valid_rows;
#pragma unroll
                for (int j = 0; j < kPerRow; ++j) {
                    const int chunk = tid + j * kThreads;
                    const bool in_bounds = row_in && (!kPadCols || chunk < valid_chunks);
                    const unsigned dst = smem_tile + 2u * (unsigned)((r8 + r) * kCols + (chunk ^ r) * 8);
                    // (Out-of-range copies point the unread source at row 0's first chunk.)
                    cp_async_16_zfill(dst, in_bounds ? src + (long long)r * row_stride + chunk * 8 : gmem_row0,
                                      in_bounds);
                }
            }
            src += 8 * row_stride;
        }
    } else if constexpr (kColumnWalk) {
        // (= kCopies when the chunk count divides the block.)
        constexpr int kCopiesPerThread = kRows / kRowStep;
        if (kThreads % Tile::kChunksPerRow != 0 && tid >= kRowStep * Tile::kChunksPerRow) return;
        // row % 8 (which fixes the swizzle) repeats every kPatterns copies.
        constexpr int kPatterns = kRowStep % 8 == 0 ? 1 : (kRowStep % 4 == 0 ? 2 : (kRowStep % 2 == 0 ? 4 : 8));
        const int chunk = tid % Tile::kChunksPerRow;
        const int row0 = tid / Tile::kChunksPerRow;
        const bool col_in = !kPadCols || chunk < valid_chunks;
        if (valid_rows >= kRows) {
            unsigned lane_off[kPatterns];
#pragma unroll
            for (int j = 0; j < kPatterns; ++j) lane_off[j] = Tile::offset(row0 + j * kRowStep, chunk) * 2;
            const long long step = opaque((long long)kRowStep * row_stride);
            const elem_t* src = gmem_row0 + (long long)row0 * row_stride + (col_in ? chunk * 8 : 0);
#pragma unroll
            for (int i = 0; i < kCopiesPerThread; ++i) {
                const unsigned dst =
                    smem_tile + lane_off[i % kPatterns] + (i / kPatterns) * (kPatterns * kRowStep * kCols * 2);
                cp_async_16_zfill(dst, src, col_in);
                src += step;
            }
            return;
        }
        int row = row0;
        const elem_t* src = gmem_row0 + (long long)row0 * row_stride + (col_in ? chunk * 8 : 0);
        const long long step = (long long)kRowStep * row_stride;
#pragma unroll 1
        for (int i = 0; i < kCopiesPerThread; ++i) {
            const bool in_bounds = row < valid_rows && col_in;
            // Out-of-range rows point the (unread) source at row 0, which exists.
            cp_async_16_zfill(smem_tile + Tile::offset(row, chunk) * 2, in_bounds ? src : gmem_row0, in_bounds);
            row += kRowStep;
            src += step;
        }
    } else {
#pragma unroll 1
        for (int i = 0; i < kCopies; ++i) {
            const int idx = tid + i * kThreads;
            const int row = idx / Tile::kChunksPerRow;
            const int chunk = idx % Tile::kChunksPerRow;
            const bool in_bounds = row < valid_rows && (!kPadCols || chunk < valid_chunks);
            // (A padded chunk's source is its row's first: row 0's when the row is out of range too.)
            const elem_t* src =
                gmem_row0 + (in_bounds ? (long long)row * row_stride : 0ll) + (kPadCols && !in_bounds ? 0 : chunk * 8);
            cp_async_16_zfill(smem_tile + Tile::offset(row, chunk) * 2, src, in_bounds);
        }
    }
}

template <int kRows, int kCols, int kThreads, bool kPadCols = false>
__device__ __forceinline__ void load_tile_groups_async_from(unsigned smem_tile, const elem_t* mine,
                                                            long long row_stride, int valid_rows, int tid,
                                                            int valid_chunks = 0);

// The same fill for a tile whose rows are strided within 16-row groups while the groups lie
// anywhere: a paged K/V cache (pages hold a multiple of 16 rows, so a group never straddles two).
// `group_ptr(g)` is the global address of row 16 g; it is asked only for groups that hold a valid
// row (rows at or past valid_rows are zero-filled from group 0's address, unread; valid_rows > 0).
// One page lookup per group and warp: lane g looks up group g, all at once, and the warp shares
// the addresses by shuffle. A lookup per 16-byte copy made paged tiles 1.6-5x the strided time
// (H100, 2026-11-25, 4ad4cb5: the address arithmetic, not the table's latency); every thread
// looking up every group still cost the portable path 1.31x at block 64 (6031875). Every thread
// of each warp calls this (the shuffles). Narrow rows keep a lookup per thread and pass.
// kPadCols, valid_chunks: as for load_tile_async.
template <int kRows, int kCols, int kThreads, bool kPadCols = false, class GroupPtr>
__device__ __forceinline__ void load_tile_groups_async(unsigned smem_tile, const GroupPtr& group_ptr,
                                                       long long row_stride, int valid_rows, int tid,
                                                       int valid_chunks = 0) {
    using Tile = SwizzledTile<kCols>;
    constexpr int kGroupRows = 16;
    static_assert(kRows % kGroupRows == 0, "tiles hold whole 16-row groups");
    constexpr int kGroups = kRows / kGroupRows;
    static_assert(kGroups <= 32, "one group per lane");
    constexpr int kGroupChunks = kGroupRows * Tile::kChunksPerRow;
    constexpr int kCopiesPerGroup = (kGroupChunks + kThreads - 1) / kThreads;
    if constexpr (kGroupChunks < kThreads) {
        // Narrow rows (tile64 at D = 32): the block covers several groups per pass, one each
        // thread, so each thread looks up its own group (sharing them spilled there).
        static_assert(kThreads % kGroupChunks == 0 && kGroups % (kThreads / kGroupChunks) == 0,
                      "groups must split evenly over the block");
        constexpr int kGroupsPerPass = kThreads / kGroupChunks;
        const int r = (tid % kGroupChunks) / Tile::kChunksPerRow;
        const int chunk = tid % Tile::kChunksPerRow;
#pragma unroll 1
        for (int g = tid / kGroupChunks; g < kGroups; g += kGroupsPerPass) {
            const int row = g * kGroupRows + r;
            const bool in_bounds = row < valid_rows && (!kPadCols || chunk < valid_chunks);
            const elem_t* src = group_ptr(g * kGroupRows < valid_rows ? g : 0) +
                                (in_bounds ? (long long)r * row_stride : 0ll) + (kPadCols && !in_bounds ? 0 : chunk * 8);
            cp_async_16_zfill(smem_tile + Tile::offset(row, chunk) * 2, src, in_bounds);
        }
    } else {
        const int lane = tid & 31;
        // Lanes past the groups, and groups past the valid rows, take group 0's address (never read).
        load_tile_groups_async_from<kRows, kCols, kThreads, kPadCols>(
            smem_tile, group_ptr(lane < kGroups && lane * kGroupRows < valid_rows ? lane : 0), row_stride, valid_rows,
            tid, valid_chunks);
    }
}

// The same fill when the caller has looked the pages up itself (tile64 reads them a tile early):
// lane g < kRows / 16 of every warp passes group g's address (group 0's if no row of group g is
// valid); other lanes' addresses are not used. Rows of 2 D bytes with D >= 64 (a group's chunks
// cover the block at least once: the narrow form above shares no addresses).
template <int kRows, int kCols, int kThreads, bool kPadCols>
__device__ __forceinline__ void load_tile_groups_async_from(unsigned smem_tile, const elem_t* mine,
                                                            long long row_stride, int valid_rows, int tid,
                                                            int valid_chunks) {
    using Tile = SwizzledTile<kCols>;
    constexpr int kGroupRows = 16;
    constexpr int kGroups = kRows / kGroupRows;
    constexpr int kGroupChunks = kGroupRows * Tile::kChunksPerRow;
    constexpr int kCopiesPerGroup = (kGroupChunks + kThreads - 1) / kThreads;
    static_assert(kGroupChunks >= kThreads, "narrow rows look their groups up per thread");
    auto group_base = [&](int g) {
        return reinterpret_cast<const elem_t*>(__shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(mine), g));
    };
    const elem_t* group0 = group_base(0);
    if constexpr (kThreads == 32 && kGroupChunks % kThreads == 0) {
        // A 16-row group swizzles like rows 0-15 of a tile (the pattern repeats every 8 rows), so
        // each group is a small strided tile: load_tile_async's full-tile path (precomputed
        // shared offsets, no per-copy bounds) serves every group but a sequence's last. Only for a
        // loader warp of its own (the portable producer): inside tile64's block-wide loads the
        // extra offsets spilled at D = 64 and 256.
#pragma unroll 1
        for (int g = 0; g < kGroups; ++g)
            load_tile_async<kGroupRows, kCols, kThreads, kPadCols>(smem_tile + g * Tile::bytes(kGroupRows),
                                                                   group_base(g), row_stride,
                                                                   valid_rows - g * kGroupRows, tid, valid_chunks);
        return;
    }
#pragma unroll 1
    for (int g = 0; g < kGroups; ++g) {
        const elem_t* base = group_base(g);
        if constexpr (kThreads % Tile::kChunksPerRow == 0 && kCopiesPerGroup > 1) {
            // Each thread keeps its column and walks down the group kRowStep rows at a time
            // (fewer live values than indexing each copy: tile64 D = 256 spilled that way; with
            // one copy per group there is nothing to walk, and tile64 D = 64 spilled walking).
            constexpr int kRowStep = kThreads / Tile::kChunksPerRow;
            const int chunk = tid % Tile::kChunksPerRow;
            const bool col_in = !kPadCols || chunk < valid_chunks;
            int row = g * kGroupRows + tid / Tile::kChunksPerRow;
            const elem_t* src = base + (long long)(tid / Tile::kChunksPerRow) * row_stride + (col_in ? chunk * 8 : 0);
#pragma unroll
            for (int i = 0; i < kCopiesPerGroup; ++i) {
                const bool in_bounds = row < valid_rows && col_in;
                cp_async_16_zfill(smem_tile + Tile::offset(row, chunk) * 2, in_bounds ? src : group0, in_bounds);
                row += kRowStep;
                src += kRowStep * row_stride;
            }
        } else {
#pragma unroll
            for (int i = 0; i < kCopiesPerGroup; ++i) {
                const int idx = tid + i * kThreads;
                if (kGroupChunks % kThreads != 0 && idx >= kGroupChunks) break;
                const int r = idx / Tile::kChunksPerRow;
                const int chunk = idx % Tile::kChunksPerRow;
                const int row = g * kGroupRows + r;
                const bool in_bounds = row < valid_rows && (!kPadCols || chunk < valid_chunks);
                const elem_t* src =
                    base + (in_bounds ? (long long)r * row_stride : 0ll) + (kPadCols && !in_bounds ? 0 : chunk * 8);
                cp_async_16_zfill(smem_tile + Tile::offset(row, chunk) * 2, src, in_bounds);
            }
        }
    }
}
