// Warp tiles larger than one m16 slice: 16·kMT rows × 8·kNT columns per warp on mma.sync, with
// the operands in SwizzledTile shared tiles.
//
// Why larger tiles: an ldmatrix.x4 feeds one m16n8k16 pair per 16 rows it covers, so a warp that
// owns 16 rows reads (16 + N)·K/256 x4 loads for 16·N·K/2048 products. At 32 × 32 it is half the
// loads per product of 16 × 32, and shared-memory bandwidth, not the tensor pipe, is what bounds
// the backward's products on mma.sync (gen5-portable-bwd.md, ncu profile of 2026-11-26).
//
// accumulator acc[mt][nt] holds rows 16·mt + {group, group + 8} and columns 8·nt + 2·tig (+1) of
// the warp's tile, in mma.cuh's C layout.
#pragma once
#include "mma.cuh"
#include "smem_layout.cuh"
#include "opaque.cuh"

// The lane index, hidden from the optimizer. Each product derives its lane's shared-memory offsets
// from it where it runs: left visible, the compiler hoists every product's offsets out of the
// caller's loop and keeps them all live (4 registers per operand at D = 128), which is what
// spilled the 32-row backward kernels.
__device__ __forceinline__ int fresh_lane(int lane) { return opaque(lane); }

// One k16 step of a warp tile: the kMT A fragments (`a_frag(mt)`), then for each 16 rows or
// columns of B (`b_at(np)`, the lane's ldmatrix address, read transposed when kTransB) its two n8
// fragments times every A fragment. Every product below is a walk of these steps.
template <int kMT, int kNT, bool kTransB, class AFrag, class BAt>
__device__ __forceinline__ void warp_k_step(float (&acc)[kMT][kNT][4], AFrag&& a_frag, BAt&& b_at) {
    FragA a[kMT];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) a[mt] = a_frag(mt);
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np) {
        unsigned b[4];
        if constexpr (kTransB) {
            ldmatrix_x4_trans(b, b_at(np));
        } else {
            ldmatrix_x4(b, b_at(np));
        }
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
            mma_m16n16k16(acc[mt][2 * np], acc[mt][2 * np + 1], a[mt], b);
        }
    }
}

// The A fragment whose lane address is `addr` (ldmatrix.x4).
__device__ __forceinline__ FragA load_a_fragment(unsigned addr) {
    FragA a;
    ldmatrix_x4(a.r, addr);
    return a;
}

// acc += A·Bᵀ: A is rows a_row0 .. +16·kMT of a [rows][kK] tile, B rows b_row0 .. +8·kNT of a
// [rows][kK] tile (both contiguous along the contraction: S = Q·Kᵀ's layout). kUnroll < kK / 16
// unrolls the k loop only that far, for callers whose accumulators leave no registers for ptxas to
// hoist every step's loads into; the addresses are then computed per step (a table indexed by a
// run-time step would live in local memory).
template <int kK, int kMT, int kNT, int kUnroll = kK / 16>
__device__ __forceinline__ void warp_gemm_abt(float (&acc)[kMT][kNT][4], unsigned a_tile, int a_row0, unsigned b_tile,
                                              int b_row0, int lane) {
    static_assert(kNT % 2 == 0, "B is read 16 rows (two n8 tiles) at a time");
    if constexpr (kUnroll == kK / 16) {
        lane = fresh_lane(lane);
        const SliceAddresses<kK> a_addr(a_row0 + lane_row_a(lane), lane_chunk_a(lane));
        const SliceAddresses<kK> b_addr(b_row0 + lane_row_k(lane), lane_chunk_k(lane));
#pragma unroll
        for (int ks = 0; ks < kK / 16; ++ks)
            warp_k_step<kMT, kNT, false>(
                acc, [&](int mt) { return load_a_fragment(a_tile + a_addr.at(ks, 16 * mt)); },
                [&](int np) { return b_tile + b_addr.at(ks, 16 * np); });
    } else {
        using Tile = SwizzledTile<kK>;
        const int a_row = a_row0 + lane_row_a(lane), a_half = lane_chunk_a(lane);
        const int b_row = b_row0 + lane_row_k(lane), b_half = lane_chunk_k(lane);
#pragma unroll kUnroll
        for (int ks = 0; ks < kK / 16; ++ks)
            warp_k_step<kMT, kNT, false>(
                acc,
                [&](int mt) { return load_a_fragment(a_tile + Tile::offset(a_row + 16 * mt, 2 * ks + a_half) * 2); },
                [&](int np) { return b_tile + Tile::offset(b_row + 16 * np, 2 * ks + b_half) * 2; });
    }
}

// acc1 += A1·B1ᵀ and acc2 += A2·B2ᵀ (each as in warp_gemm_abt, rolled form) in one k loop: two
// products of one shape at the same rows, e.g. Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ. Both products' loads of
// a k step come before either's MMAs, so one product's ldmatrix latency hides behind the other's
// MMAs instead of stalling a loop of its own.
template <int kK, int kMT, int kNT, int kUnroll>
__device__ __forceinline__ void warp_gemm_abt_pair(float (&acc1)[kMT][kNT][4], unsigned a1_tile, unsigned b1_tile,
                                                   float (&acc2)[kMT][kNT][4], unsigned a2_tile, unsigned b2_tile,
                                                   int a_row0, int b_row0, int lane) {
    static_assert(kNT % 2 == 0, "B is read 16 rows (two n8 tiles) at a time");
    using Tile = SwizzledTile<kK>;
    const int a_row = a_row0 + lane_row_a(lane), a_half = lane_chunk_a(lane);
    const int b_row = b_row0 + lane_row_k(lane), b_half = lane_chunk_k(lane);
#pragma unroll kUnroll
    for (int ks = 0; ks < kK / 16; ++ks) {
        auto a_frag = [&](unsigned tile, int mt) {
            return load_a_fragment(tile + Tile::offset(a_row + 16 * mt, 2 * ks + a_half) * 2);
        };
        auto b_at = [&](unsigned tile, int np) { return tile + Tile::offset(b_row + 16 * np, 2 * ks + b_half) * 2; };
        warp_k_step<kMT, kNT, false>(
            acc1, [&](int mt) { return a_frag(a1_tile, mt); }, [&](int np) { return b_at(b1_tile, np); });
        warp_k_step<kMT, kNT, false>(
            acc2, [&](int mt) { return a_frag(a2_tile, mt); }, [&](int np) { return b_at(b2_tile, np); });
    }
}

// The lane's ldmatrix.trans addresses for B = columns b_col0 .. of a row-major [k][kCols] tile
// (b_col0 % 16 == 0): the column offset goes into the chunk, which SliceAddresses allows because
// the swizzle's XOR never carries past its period.
template <int kCols>
__device__ __forceinline__ SliceAddresses<kCols> b_trans_addresses(int b_row0, int b_col0, int lane) {
    return SliceAddresses<kCols>(b_row0 + lane_row_v(lane), lane_chunk_v(lane) + 2 * (b_col0 / 16));
}

// acc1 += A1·B1 and acc2 += A2·B2 in one k loop (dV += Pᵀ·dO and dK += dSᵀ·Q): each A is rows
// a_row0 .. +16·kMT, columns 0 .. kK of a [rows][kACols] tile; each B is rows 0 .. kK, columns
// b_col0 .. +8·kNT of a row-major [k][kBCols] tile, read with ldmatrix.trans (as V in P·V). Both
// products' loads of a k step come before either's MMAs, so one hides the other's latency (1-2 %
// over two loops, c0bce7e). The k loop is not unrolled: unrolled, ptxas hoisted all of its
// loads above the first product, and beside the 128 registers of dK and dV that spilled at
// D = 128. Each step's A address is computed, not looked up: a table indexed by a run-time step
// would live in local memory.
template <int kACols, int kBCols, int kK, int kMT, int kNT>
__device__ __forceinline__ void warp_gemm_ab_pair(float (&acc1)[kMT][kNT][4], unsigned a1_tile, unsigned b1_tile,
                                                  float (&acc2)[kMT][kNT][4], unsigned a2_tile, unsigned b2_tile,
                                                  int a_row0, int b_col0, int lane) {
    static_assert(kNT % 2 == 0, "B is read 16 columns (two n8 tiles) at a time");
    lane = fresh_lane(lane);
    using ATile = SwizzledTile<kACols>;
    const int a_row = a_row0 + lane_row_a(lane), a_half = lane_chunk_a(lane);
    const SliceAddresses<kBCols> b_addr = b_trans_addresses<kBCols>(0, b_col0, lane);
#pragma unroll 1
    for (int ks = 0; ks < kK / 16; ++ks) {
        const unsigned b_shift = ks * (16 * kBCols * 2);
        auto a_frag = [&](unsigned tile, int mt) {
            return load_a_fragment(tile + ATile::offset(a_row + 16 * mt, 2 * ks + a_half) * 2);
        };
        warp_k_step<kMT, kNT, true>(
            acc1, [&](int mt) { return a_frag(a1_tile, mt); }, [&](int np) { return b1_tile + b_shift + b_addr.at(np, 0); });
        warp_k_step<kMT, kNT, true>(
            acc2, [&](int mt) { return a_frag(a2_tile, mt); }, [&](int np) { return b2_tile + b_shift + b_addr.at(np, 0); });
    }
}

// acc += A·B with A stored transposed: A's rows are columns a_col0 .. +16·kMT of a [kK][kACols]
// tile whose rows run along the contraction (dSᵀ [keys][queries] for dQ = dS·K), read with
// ldmatrix.trans; B as in warp_gemm_ab_pair. The k loop is unrolled kUnroll steps at a time.
template <int kACols, int kBCols, int kK, int kMT, int kNT, int kUnroll = 1>
__device__ __forceinline__ void warp_gemm_atb(float (&acc)[kMT][kNT][4], unsigned a_tile, int a_col0, unsigned b_tile,
                                              int b_col0, int lane) {
    static_assert(kNT % 2 == 0, "B is read 16 columns (two n8 tiles) at a time");
    lane = fresh_lane(lane);
    const SliceAddresses<kACols> a_addr(lane_row_k(lane), lane_chunk_k(lane) + 2 * (a_col0 / 16));
    const SliceAddresses<kBCols> b_addr = b_trans_addresses<kBCols>(0, b_col0, lane);
#pragma unroll kUnroll
    for (int ks = 0; ks < kK / 16; ++ks) {
        const unsigned a_step = a_tile + ks * (16 * kACols * 2);
        const unsigned b_step = b_tile + ks * (16 * kBCols * 2);
        warp_k_step<kMT, kNT, true>(
            acc,
            [&](int mt) {
                FragA a;
                ldmatrix_x4_trans(a.r, a_step + a_addr.at(mt, 0));
                return a;
            },
            [&](int np) { return b_step + b_addr.at(np, 0); });
    }
}

// acc += P·B with P in registers: the f32 accumulator of an earlier product (kMT × kKT n8 tiles,
// converted to elem_t per k16 step by p_fragment: the C layout of two n8 tiles is the A layout of
// one k16 step), B rows b_row0 .. +8·kKT, all kBCols columns of a row-major [k][kBCols] tile, read
// with ldmatrix.trans.
template <int kBCols, int kMT, int kKT>
__device__ __forceinline__ void warp_gemm_rb(float (&acc)[kMT][kBCols / 8][4], const float (&p)[kMT][kKT][4],
                                             unsigned b_tile, int b_row0, int lane) {
    static_assert(kKT % 2 == 0, "P gives one k16 step per two n8 tiles");
    lane = fresh_lane(lane);
    const SliceAddresses<kBCols> b_addr = b_trans_addresses<kBCols>(b_row0, 0, lane);
#pragma unroll
    for (int ks = 0; ks < kKT / 2; ++ks)
        warp_k_step<kMT, kBCols / 8, true>(
            acc, [&](int mt) { return p_fragment(p[mt], ks); },
            [&](int np) { return b_tile + b_addr.at(np, 16 * ks); });
}

// Zeroes a warp tile's accumulator.
template <int kMT, int kNT>
__device__ __forceinline__ void zero_warp_tile(float (&acc)[kMT][kNT][4]) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) zero_accumulator(acc[mt]);
}

// Stores a warp tile's accumulator (rows row0 + 16·mt + group (+8), columns col0 + 8·nt + 2·tig)
// as elem_t into a [rows][kCols] SwizzledTile at byte address `tile` (col0 % 8 == 0). Conflict
// free: the 8 groups write one logical chunk of 8 consecutive rows, which the swizzle spreads
// over 8 bank slots, and the 4 lanes of a quad the 4 words of that chunk.
template <int kCols, int kMT, int kNT>
__device__ __forceinline__ void store_warp_tile(unsigned char* tile, const float (&acc)[kMT][kNT][4], int row0,
                                                int col0, int lane) {
    using Tile = SwizzledTile<kCols>;
    const int group = lane / 4, tig = lane % 4;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int row = row0 + 16 * mt + group + 8 * r;
                *reinterpret_cast<elem2_t*>(tile + (Tile::offset(row, col0 / 8 + nt) + 2 * tig) * 2) =
                    pack2(acc[mt][nt][2 * r], acc[mt][nt][2 * r + 1]);
            }
}
