// Shared-memory layout of a [rows][kCols] elem_t tile, addressed in 16-byte chunks (8 elements)
// with an XOR swizzle that makes both access patterns of the attention kernels bank-conflict free
// without padding (padding would push the D=256 tiles of gen3 past the 48 KB static limit):
//
//   * ldmatrix: each 8x8 matrix reads the same logical chunk of 8 consecutive rows (row0 % 8 == 0);
//   * tile fills (cp.async or st.shared.v4): 8 consecutive threads write 8 consecutive chunks of
//     the row-major tile.
//
// Shared memory has 32 banks x 4 bytes = 128 bytes = 8 chunk slots per "line". Both patterns are
// conflict free when the 8 chunks of one phase land in 8 distinct slots, slot = (flat chunk) % 8.
//
//   kCols % 64 == 0 (D = 64, 128, 256; 8/16/32 chunks per row, every row starts at slot 0):
//       physical chunk = chunk ^ (row % 8)         — 8 rows, one logical chunk -> 8 slots.
//   kCols % 64 == 32 (D = 32, 96; 4/12 chunks per row, even rows start at slot 0, odd at slot 4):
//       physical chunk = chunk ^ ((row / 2) % 4)   — the XOR only moves a chunk inside its aligned
//       group of 4, so it stays inside the row; row parity picks the half-line, (row/2)%4 the slot
//       inside it.
// (Checked exhaustively for every row/chunk of 64-row tiles, D in {32, 64, 96, 128, 256}.)
#pragma once

template <int kCols>
struct SwizzledTile {
    static_assert(kCols % 32 == 0, "rows must be a multiple of 4 chunks (32 elements)");
    static constexpr int kChunksPerRow = kCols / 8;

    // Physical chunk index inside row `row` of logical chunk `chunk`.
    __device__ __forceinline__ static int physical_chunk(int row, int chunk) {
        if constexpr (kChunksPerRow % 8 == 0) {
            return chunk ^ (row & 7);
        } else {
            return chunk ^ ((row >> 1) & 3);
        }
    }

    // Element offset of logical chunk `chunk` (elements 8*chunk .. 8*chunk+7) of row `row`.
    __device__ __forceinline__ static int offset(int row, int chunk) {
        return row * kCols + physical_chunk(row, chunk) * 8;
    }

    // The XOR only touches the chunk bits below this period, so chunk c and c + kPeriodChunks
    // swizzle alike (shifted by one period).
    static constexpr int kPeriodChunks = (kChunksPerRow % 8 == 0) ? 8 : 4;
    // 16-element slices (2 chunks: one k16 step of an mma) per period.
    static constexpr int kSlicesPerPeriod = kPeriodChunks / 2;

    // Bytes of a tile with `rows` rows.
    __host__ __device__ static constexpr int bytes(int rows) { return rows * kCols * 2; }
};

// One lane's ldmatrix addresses for a walk over the 16-element slices of a SwizzledTile.
// An ldmatrix lane addresses row `row` (+ any multiple of 16 rows) and chunk 2*slice + `half` of
// slice `slice`. Shifting the row by 16 keeps row % 8, and shifting the slice by a period keeps
// the swizzled low chunk bits, so the lane needs only kSlicesPerPeriod byte offsets (registers)
// and every address of the walk is one of them plus a compile-time constant — which ptxas folds
// into the ldmatrix immediate. (Computing Tile::offset per load instead lets the compiler hoist
// one address register per (slice, row block): 80 registers at D=256.)
template <int kCols>
struct SliceAddresses {
    using Tile = SwizzledTile<kCols>;
    static constexpr int kSlots = Tile::kSlicesPerPeriod;
    unsigned off[kSlots];

    __device__ __forceinline__ SliceAddresses(int row, int half) {
#pragma unroll
        for (int j = 0; j < kSlots; ++j) off[j] = Tile::offset(row, 2 * j + half) * 2;
    }

    // Byte offset within the tile of slice `slice`, rows shifted down by `row_shift` (a multiple of
    // 16). Both arguments are compile-time constants in the unrolled loops that call this.
    __device__ __forceinline__ unsigned at(int slice, int row_shift) const {
        return off[slice % kSlots] + (slice / kSlots) * (Tile::kPeriodChunks * 16) + row_shift * (kCols * 2);
    }
};
