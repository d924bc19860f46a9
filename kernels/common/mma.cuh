// Warp-level tensor-core primitives: mma.sync m16n8k16 (f32 accumulate) and ldmatrix.
//
// Why mma.sync and not WMMA: WMMA fragments are opaque (the element-to-thread mapping is
// unspecified), so a softmax on WMMA accumulators has to go through shared memory to find each
// element's row. The mma.sync fragment layout is documented in the PTX ISA ("Matrix Fragments
// for mma.m16n8k16"), so the online softmax runs directly on the accumulator registers: each
// thread knows which two rows and which columns it holds, a row max is two quad shuffles, and the
// S accumulator of Q·Kᵀ converts in registers into the A operand of P·V (see `p_fragment`).
//
// Fragment layout (lane = 4*group + tig, group = lane/4 in 0..7, tig = lane%4 in 0..3):
//   A 16x16 (row major, 4 x b32 = 8 elements):
//     a[0] = A[group    ][2*tig, 2*tig+1]      a[2] = A[group    ][2*tig+8, 2*tig+9]
//     a[1] = A[group + 8][2*tig, 2*tig+1]      a[3] = A[group + 8][2*tig+8, 2*tig+9]
//   B 16x8 (k x n, "col": 2 x b32):
//     b[0] = B[2*tig, 2*tig+1][group]          b[1] = B[2*tig+8, 2*tig+9][group]
//   C/D 16x8 f32 (4 floats):
//     c[0], c[1] = C[group    ][2*tig, 2*tig+1]
//     c[2], c[3] = C[group + 8][2*tig, 2*tig+1]
// The lower-indexed element of a pair sits in the low 16 bits of its b32 register.
//
// ldmatrix.x4 loads four 8x8 b16 matrices; lanes 8*i .. 8*i+7 give the row addresses of matrix i
// (16 contiguous bytes each), and register r[i] of lane L receives matrix i's elements
// [L/4][2*(L%4), 2*(L%4)+1] — exactly an A/B fragment piece. With .trans lane L receives
// [2*(L%4), 2*(L%4)+1][L/4] instead, which turns a row-major [key][d] V tile into the B operand
// of P·V without a transpose in memory.
#pragma once
#include "types.cuh"
#include "smem_layout.cuh"

// A operand of one m16n8k16: a 16x16 tile. (B operands are passed as their two registers.)
struct FragA {
    unsigned r[4];
};

// d = a·b + d, f32 accumulation, element type chosen by FC_DTYPE_*. Not volatile: it is a pure
// function of its registers, so the compiler may schedule it freely between the (volatile)
// shared-memory loads.
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const FragA& a, unsigned b0, unsigned b1) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32." FC_ELEM_PTX "." FC_ELEM_PTX ".f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b0), "r"(b1));
}

// One k16 step over 16 columns: d0 and d1 += a·b, `b` the four registers of an x4 ldmatrix B
// fragment, the first two d0's n8 block and the last two d1's.
__device__ __forceinline__ void mma_m16n16k16(float (&d0)[4], float (&d1)[4], const FragA& a,
                                              const unsigned (&b)[4]) {
    mma_m16n8k16(d0, a, b[0], b[1]);
    mma_m16n8k16(d1, a, b[2], b[3]);
}

// 32-bit shared-state-space address of a generic pointer into shared memory (what ldmatrix and
// cp.async take). Named apart from hopper/mbarrier.cuh's smem_u32 so both headers can be included.
__device__ __forceinline__ unsigned shared_address(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// ldmatrix stays volatile: it reads shared memory that __syncthreads-separated phases rewrite,
// and a non-volatile asm without memory operands could be merged or hoisted across them.
// Four 8x8 b16 matrices; `addr` is this lane's row address (shared state space, 16-byte aligned).
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// Same, each matrix transposed on the way into registers.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// ---- Which row/column of a tile each lane addresses for the x4 loads used by attention. ----
// All three return (row, 16-byte chunk) pairs relative to the 16x16 tile's top-left corner;
// the caller adds the tile origin and applies the shared-memory swizzle.

// A operand (Q, row major [row][d]): matrices {rows 0-7, rows 8-15} x {cols 0-7, cols 8-15} in
// the order a[0..3] wants: (r0-7,c0-7), (r8-15,c0-7), (r0-7,c8-15), (r8-15,c8-15).
__device__ __forceinline__ int lane_row_a(int lane) { return lane & 15; }
__device__ __forceinline__ int lane_chunk_a(int lane) { return lane >> 4; }

// B operand from K (row major [key][d]) for S = Q·Kᵀ: 16 keys x 16 d, as two n8 fragments.
// Matrices: (keys 0-7, d 0-7) -> r[0], (keys 0-7, d 8-15) -> r[1], (keys 8-15, d 0-7) -> r[2],
// (keys 8-15, d 8-15) -> r[3]; so {r[0], r[1]} is keys 0-7 and {r[2], r[3]} is keys 8-15.
__device__ __forceinline__ int lane_row_k(int lane) { return (lane & 7) + ((lane >> 4) << 3); }
__device__ __forceinline__ int lane_chunk_k(int lane) { return (lane >> 3) & 1; }

// B operand from V (row major [key][d]) for O += P·V, loaded with .trans: 16 keys x 16 d as two
// n8 fragments. Matrices: (keys 0-7, d 0-7) -> r[0], (keys 8-15, d 0-7) -> r[1],
// (keys 0-7, d 8-15) -> r[2], (keys 8-15, d 8-15) -> r[3]; {r[0], r[1]} is d 0-7 and
// {r[2], r[3]} is d 8-15.
__device__ __forceinline__ int lane_row_v(int lane) { return (lane & 7) + (((lane >> 3) & 1) << 3); }
__device__ __forceinline__ int lane_chunk_v(int lane) { return lane >> 4; }

// The A operand of P·V for keys [16*kstep, 16*kstep + 16) straight from the f32 accumulator of
// S = Q·Kᵀ (n8 tiles 2*kstep and 2*kstep+1): the C layout of two adjacent n8 tiles is the A
// layout of one k16 step, so this is only a conversion to elem_t — no data movement.
template <int kKeyTiles>
__device__ __forceinline__ FragA p_fragment(const float (&p)[kKeyTiles][4], int kstep) {
    FragA a;
    a.r[0] = pack2_u32(p[2 * kstep][0], p[2 * kstep][1]);
    a.r[1] = pack2_u32(p[2 * kstep][2], p[2 * kstep][3]);
    a.r[2] = pack2_u32(p[2 * kstep + 1][0], p[2 * kstep + 1][1]);
    a.r[3] = pack2_u32(p[2 * kstep + 1][2], p[2 * kstep + 1][3]);
    return a;
}

// Zeroes an accumulator tile.
template <int kTiles>
__device__ __forceinline__ void zero_accumulator(float (&acc)[kTiles][4]) {
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
        acc[j][0] = 0.f;
        acc[j][1] = 0.f;
        acc[j][2] = 0.f;
        acc[j][3] = 0.f;
    }
}

// ---- Warp tile operations on SwizzledTile<kHeadDim> shared tiles (byte addresses). ----
// One warp computes a 16-row slice of the block's query tile; these name the three products of
// the attention inner loop.

// q[ds] = A fragments of the warp's 16 query rows (rows q_row0 .. q_row0+15 of the Q tile,
// q_row0 % 16 == 0), one per 16-wide slice ds of head_dim. kCols < kHeadDim: the first kCols
// columns from `q_tile`, which may start a whole number of swizzle periods into the rows.
template <int kHeadDim, int kCols = kHeadDim>
__device__ __forceinline__ void load_q_fragments(FragA (&q)[kCols / 16], unsigned q_tile, int q_row0, int lane) {
    static_assert(kCols == kHeadDim || kCols % 64 == 0, "a column slice is whole swizzle periods");
    const SliceAddresses<kHeadDim> addr(q_row0 + lane_row_a(lane), lane_chunk_a(lane));
#pragma unroll
    for (int ds = 0; ds < kCols / 16; ++ds) ldmatrix_x4(q[ds].r, q_tile + addr.at(ds, 0));
}

// s = Q·Kᵀ for the warp's 16 rows x kKeys keys of the K tile (rows 0 .. kKeys-1), Q in registers.
// kCols < kHeadDim: the product over the first kCols columns from `k_tile` (and q's), which may
// start a whole number of swizzle periods into the rows (a warp's share of the head dim).
template <int kHeadDim, int kKeys, int kCols = kHeadDim>
__device__ __forceinline__ void warp_qk(float (&s)[kKeys / 8][4], const FragA (&q)[kCols / 16], unsigned k_tile,
                                        int lane) {
    static_assert(kCols == kHeadDim || kCols % 64 == 0, "a column slice is whole swizzle periods");
    const SliceAddresses<kHeadDim> k_addr(lane_row_k(lane), lane_chunk_k(lane));
    zero_accumulator(s);
#pragma unroll
    for (int ds = 0; ds < kCols / 16; ++ds) {
#pragma unroll
        for (int np = 0; np < kKeys / 16; ++np) {
            unsigned b[4];
            ldmatrix_x4(b, k_tile + k_addr.at(ds, 16 * np));
            mma_m16n16k16(s[2 * np], s[2 * np + 1], q[ds], b);
        }
    }
}

// Same with Q read from its shared tile one 16-wide slice at a time (for head dims whose Q
// fragments do not fit in registers next to the O accumulator). q_row0 % 16 == 0.
template <int kHeadDim, int kKeys>
__device__ __forceinline__ void warp_qk_q_in_smem(float (&s)[kKeys / 8][4], unsigned q_tile, int q_row0,
                                                  unsigned k_tile, int lane) {
    const SliceAddresses<kHeadDim> q_addr(q_row0 + lane_row_a(lane), lane_chunk_a(lane));
    const SliceAddresses<kHeadDim> k_addr(lane_row_k(lane), lane_chunk_k(lane));
    zero_accumulator(s);
#pragma unroll
    for (int ds = 0; ds < kHeadDim / 16; ++ds) {
        FragA q;
        ldmatrix_x4(q.r, q_tile + q_addr.at(ds, 0));
#pragma unroll
        for (int np = 0; np < kKeys / 16; ++np) {
            unsigned b[4];
            ldmatrix_x4(b, k_tile + k_addr.at(ds, 16 * np));
            mma_m16n16k16(s[2 * np], s[2 * np + 1], q, b);
        }
    }
}

// o += P·V for the warp's 16 rows: P is the f32 softmax numerator in the S accumulator layout
// (converted to elem_t here, and only here), V the [kKeys][kHeadDim] tile read with ldmatrix.trans.
// kCols < kHeadDim: the first kCols columns from `v_tile`, which may start a whole number of
// swizzle periods (64 columns) into the tile's rows (a warp's column slice).
template <int kHeadDim, int kKeys, int kCols = kHeadDim>
__device__ __forceinline__ void warp_pv(float (&o)[kCols / 8][4], const float (&p)[kKeys / 8][4], unsigned v_tile,
                                        int lane) {
    static_assert(kCols == kHeadDim || kCols % 64 == 0, "a column slice is whole swizzle periods");
    const SliceAddresses<kHeadDim> v_addr(lane_row_v(lane), lane_chunk_v(lane));
#pragma unroll
    for (int ks = 0; ks < kKeys / 16; ++ks) {
        const FragA a = p_fragment(p, ks);
#pragma unroll
        for (int dp = 0; dp < kCols / 16; ++dp) {
            unsigned b[4];
            ldmatrix_x4_trans(b, v_tile + v_addr.at(dp, 16 * ks));
            mma_m16n16k16(o[2 * dp], o[2 * dp + 1], a, b);
        }
    }
}
