// How a warp turns K and V tiles in shared memory into the mma.sync operands of S = Q·Kᵀ and
// O += P·V, by the cache's storage type. The decode kernel picks one with FC_KV_E4M3:
//
//   HalfKv<D>  K/V in the problem's dtype: SwizzledTile<D> tiles read with ldmatrix (mma.cuh).
//   E4m3Kv<D>  K/V as e4m3 bytes (docs/MODES.md, "fp8 KV cache"): a row of D bytes is stored as
//              a SwizzledTile<D / 2> row of 16-bit words, so the 16-byte copies, swizzle and
//              bank-conflict rules of the 16-bit tiles hold unchanged. Operands are built in
//              registers: ld.shared of whole 16-byte chunks, then an exact conversion to f16/bf16.
//
// E4m3Kv never moves a byte twice. ldmatrix cannot widen bytes, so instead the two products read
// K and V in the orders the bytes already have:
//   Q·Kᵀ: a lane's B fragment needs 4 elements of one K row per k16 step. The dot product is
//         the same for any order of the head dim taken alike by Q and K, so lane (g, t) reads
//         whole 16-byte chunks of its key's row (k_chunk) and each 4-byte word is one k step;
//         Q's fragments are gathered in that order once per work unit (q_fragment).
//   P·V:  a lane's B fragment needs one column of V across keys 2t, 2t+1, 2t+8, 2t+9. The
//         output columns may be permuted too (the epilogue puts them back, out_col), so lane g
//         owns D/8 consecutive bytes of each of its four rows, and byte j of them is its column
//         of n8 block j; prmt pairs the rows' bytes up for the conversion.
// Both patterns read 8 distinct 16-byte slots per quarter warp (D = 128, 256; at D = 64 the V
// reads conflict two ways).
//
// Exactness: e4m3 -> f16 is exact (cvt.rn.f16x2.e4m3x2, sm_89+). For bf16 there is no such cvt on
// sm_90; the f16 bits of an e4m3 value (3 mantissa bits, exponent -9..8) shifted right by 3 are
// the bf16 bits of the value times 2^-112, and a bf16 multiply by 2^56 leaves the operand at
// value x 2^-56: every nonzero e4m3 value stays a normal bf16 with no rounding. Q (and P) are
// multiplied by 2^56 in turn, exactly, so every product is the true one and no product of
// ordinary magnitude becomes an f32 subnormal.
#pragma once
#include "types.cuh"
#include "mma.cuh"
#include "smem_layout.cuh"

template <int kHeadDim>
struct HalfKv {
    static constexpr bool kE4m3 = false;
    static constexpr int kTileCols = kHeadDim;  // 16-bit words per row in shared memory
    static constexpr int kRowBytes = kHeadDim * 2;
    // Strides (in elements) per 16-bit word: the loaders count in words.
    static constexpr int kElemsPerWord = 1;

    __device__ __forceinline__ static const elem_t* row_ptr(const void* base, long long offset) {
        return static_cast<const elem_t*>(base) + offset;
    }
    __device__ __forceinline__ static void load_q(FragA (&q)[kHeadDim / 16], unsigned q_tile, int lane) {
        load_q_fragments<kHeadDim>(q, q_tile, 0, lane);
    }
    template <int kKeys>
    __device__ __forceinline__ static void qk(float (&s)[kKeys / 8][4], const FragA (&q)[kHeadDim / 16],
                                              unsigned k_rows, int lane) {
        warp_qk<kHeadDim, kKeys>(s, q, k_rows, lane);
    }
    template <int kKeys>
    __device__ __forceinline__ static void qk_q_in_smem(float (&s)[kKeys / 8][4], unsigned q_tile, unsigned k_rows,
                                                        int lane) {
        warp_qk_q_in_smem<kHeadDim, kKeys>(s, q_tile, 0, k_rows, lane);
    }
    template <int kKeys>
    __device__ __forceinline__ static void pv(float (&o)[kHeadDim / 8][4], const float (&p)[kKeys / 8][4],
                                              unsigned v_rows, int lane) {
        warp_pv<kHeadDim, kKeys>(o, p, v_rows, lane);
    }
    // The output column of accumulator block j, column n of the n8 block.
    __device__ __forceinline__ static int out_col(int j, int n) { return 8 * j + n; }
};

namespace e4m3 {

__device__ __forceinline__ unsigned lds32(unsigned addr) {
    unsigned r;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(r) : "r"(addr));
    return r;
}
__device__ __forceinline__ uint2 lds64(unsigned addr) {
    uint2 r;
    asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(r.x), "=r"(r.y) : "r"(addr));
    return r;
}
__device__ __forceinline__ uint4 lds128(unsigned addr) {
    uint4 r;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "r"(addr));
    return r;
}
__device__ __forceinline__ unsigned prmt(unsigned a, unsigned b, unsigned selector) {
    unsigned r;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(selector));
    return r;
}

// bf16x2 of 2^56 (exponent 56 + 127), and the same factor for f32 operands (Q, P).
#if defined(FC_DTYPE_BF16)
constexpr unsigned kOperandUp2 = 0x5B805B80u;
constexpr float kOperandUp = 72057594037927936.0f;  // 2^56
#else
constexpr float kOperandUp = 1.0f;
#endif

// The four e4m3 bytes of `word` as two operand registers: bytes (0, 1) into lo, (2, 3) into hi,
// the lower byte in the lower half. bf16 operands hold value x 2^-56 (see the top of the file).
__device__ __forceinline__ void to_operands(unsigned word, unsigned& lo, unsigned& hi) {
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
        : "=r"(lo), "=r"(hi)
        : "r"(word));
#if defined(FC_DTYPE_BF16)
    const unsigned blo = ((lo >> 3) & 0x0fff0fffu) | (lo & 0x80008000u);
    const unsigned bhi = ((hi >> 3) & 0x0fff0fffu) | (hi & 0x80008000u);
    asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(lo) : "r"(blo), "r"(kOperandUp2));
    asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(hi) : "r"(bhi), "r"(kOperandUp2));
#endif
}

// A 16-bit Q register pair times the operand factor (exact: a power of two).
__device__ __forceinline__ unsigned q_up(unsigned x) {
#if defined(FC_DTYPE_BF16)
    unsigned r;
    asm("mul.rn.bf16x2 %0, %1, %2;\n" : "=r"(r) : "r"(x), "r"(kOperandUp2));
    return r;
#else
    return x;
#endif
}

}  // namespace e4m3

template <int kHeadDim>
struct E4m3Kv {
    static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "e4m3 tiles are built for 64, 128, 256");
    static constexpr bool kE4m3 = true;
    static constexpr int kTileCols = kHeadDim / 2;
    static constexpr int kRowBytes = kHeadDim;
    static constexpr int kElemsPerWord = 2;
    using ByteTile = SwizzledTile<kTileCols>;
    using QTile = SwizzledTile<kHeadDim>;
    static constexpr int kChunks = kHeadDim / 16;            // 16-byte chunks per row
    static constexpr int kKChunksPerLane = kChunks / 4;     // a quad's 4 lanes share a K row
    static constexpr int kVBytesPerLane = kHeadDim / 8;     // one byte per n8 block of O

    __device__ __forceinline__ static const elem_t* row_ptr(const void* base, long long offset) {
        return reinterpret_cast<const elem_t*>(static_cast<const unsigned char*>(base) + offset);
    }
    // Byte address of logical chunk c of row r of a byte tile.
    __device__ __forceinline__ static unsigned chunk_addr(unsigned tile, int r, int c) {
        return tile + ByteTile::offset(r, c) * 2;
    }
    // Lane t's m-th chunk of a K row: at D >= 128 the even chunks for m even and the odd ones for
    // m odd, so the two rows of a quarter warp fill all 8 slots.
    __device__ __forceinline__ static int k_chunk(int t, int m) {
        if constexpr (kChunks == 4) return t;
        return 2 * t + (m & 1) + 8 * (m >> 1);
    }
    // The head dim of k step ks, position e in 0..3 of lane t's 4 (positions 2t, 2t+1 then
    // 2t+8, 2t+9 of the mma's k16).
    __device__ __forceinline__ static int k_dim(int t, int ks) { return 16 * k_chunk(t, ks / 4) + 4 * (ks % 4); }

    // Where lane (g, t) reads Q's fragments in K's head-dim order, from the 16-bit Q tile. k step
    // ks reads chunk c(t) + x(ks) of rows g and g + 8, c(t) the chunk of step 0; x's low bits
    // never overlap c(t)'s, so the swizzle (an XOR of the low 3 chunk bits with the row) takes
    // them apart: 4 lane registers (x's low 2 bits) and the rest compile-time offsets, instead of
    // a hoisted address per step (64 registers at D = 256).
    struct QAddresses {
        unsigned at[4];
        __device__ __forceinline__ QAddresses(unsigned q_tile, int lane) {
            const int g = lane / 4, c = 2 * k_chunk(lane % 4, 0);
#pragma unroll
            for (int x = 0; x < 4; ++x) at[x] = q_tile + (unsigned)QTile::offset(g, c + x) * 2;
        }
        // Byte address of Q[g (+8 if upper)][k_dim(t, ks) + 2 * half].
        __device__ __forceinline__ unsigned of(int ks, bool upper, int half) const {
            const int m = ks / 4, w = ks % 4;
            const int low = kChunks == 4 ? (w >> 1) : 2 * (m & 1) + (w >> 1);
            const int chunk_high = kChunks == 4 ? 0 : 16 * (m >> 1);  // past the swizzled bits
            return at[low] + 2 * (8 * chunk_high + 4 * (w & 1) + 2 * half + (upper ? 8 * kHeadDim : 0));
        }
    };
    __device__ __forceinline__ static FragA q_fragment(const QAddresses& q, int ks) {
        FragA a;
        a.r[0] = e4m3::q_up(e4m3::lds32(q.of(ks, false, 0)));
        a.r[1] = e4m3::q_up(e4m3::lds32(q.of(ks, true, 0)));
        a.r[2] = e4m3::q_up(e4m3::lds32(q.of(ks, false, 1)));
        a.r[3] = e4m3::q_up(e4m3::lds32(q.of(ks, true, 1)));
        return a;
    }
    __device__ __forceinline__ static void load_q(FragA (&q)[kHeadDim / 16], unsigned q_tile, int lane) {
        const QAddresses addr(q_tile, lane);
#pragma unroll
        for (int ks = 0; ks < kHeadDim / 16; ++ks) q[ks] = q_fragment(addr, ks);
    }

    // s = Q·Kᵀ over the warp's 16 keys (rows 0..15 of the byte tile at k_rows), q_at(ks) giving
    // Q's fragment of k step ks: each Q fragment serves both n8 blocks once.
    template <class QAt>
    __device__ __forceinline__ static void qk_keys(float (&s)[2][4], const QAt& q_at, unsigned k_rows, int lane) {
        const int g = lane / 4, t = lane % 4;
        zero_accumulator(s);
#pragma unroll
        for (int m = 0; m < kKChunksPerLane; ++m) {
            const uint4 c0 = e4m3::lds128(chunk_addr(k_rows, g, k_chunk(t, m)));
            const uint4 c1 = e4m3::lds128(chunk_addr(k_rows, 8 + g, k_chunk(t, m)));
            const unsigned w0[4] = {c0.x, c0.y, c0.z, c0.w}, w1[4] = {c1.x, c1.y, c1.z, c1.w};
#pragma unroll
            for (int w = 0; w < 4; ++w) {
                const FragA q = q_at(4 * m + w);
                unsigned b0, b1;
                e4m3::to_operands(w0[w], b0, b1);
                mma_m16n8k16(s[0], q, b0, b1);
                e4m3::to_operands(w1[w], b0, b1);
                mma_m16n8k16(s[1], q, b0, b1);
            }
        }
    }
    template <int kKeys>
    __device__ __forceinline__ static void qk(float (&s)[kKeys / 8][4], const FragA (&q)[kHeadDim / 16],
                                              unsigned k_rows, int lane) {
        static_assert(kKeys == 16, "16 keys a warp");
        qk_keys(s, [&](int ks) { return q[ks]; }, k_rows, lane);
    }
    template <int kKeys>
    __device__ __forceinline__ static void qk_q_in_smem(float (&s)[kKeys / 8][4], unsigned q_tile, unsigned k_rows,
                                                        int lane) {
        static_assert(kKeys == 16, "16 keys a warp");
        const QAddresses addr(q_tile, lane);
        qk_keys(s, [&](int ks) { return q_fragment(addr, ks); }, k_rows, lane);
    }

    // The byte of V lane g holds for n8 block j is column out_col(j, g).
    __device__ __forceinline__ static int out_col(int j, int n) {
        if constexpr (kHeadDim == 256) return (j < 16 ? 0 : 128) + 16 * n + (j % 16);
        return kVBytesPerLane * n + j;
    }

    // V is read in pieces of up to 16 bytes a row (one chunk; 8 bytes at D = 64): piece h of
    // lane g's bytes of row r, as 32-bit words.
    static constexpr int kVPieceBytes = kVBytesPerLane < 16 ? kVBytesPerLane : 16;
    static constexpr int kVPieces = kVBytesPerLane / kVPieceBytes;
    static constexpr int kVPieceWords = kVPieceBytes / 4;
    __device__ __forceinline__ static void v_piece(unsigned (&x)[kVPieceWords], unsigned v_rows, int r, int g,
                                                   int h) {
        if constexpr (kHeadDim == 64) {
            const uint2 c = e4m3::lds64(chunk_addr(v_rows, r, g / 2) + 8 * (g % 2));
            x[0] = c.x, x[1] = c.y;
        } else {
            const uint4 c = e4m3::lds128(chunk_addr(v_rows, r, g + 8 * h));
            x[0] = c.x, x[1] = c.y, x[2] = c.z, x[3] = c.w;
        }
    }

    // o += P·V for the warp's 16 keys (kKeys = 16: one k16 step), V the byte tile at v_rows.
    template <int kKeys>
    __device__ __forceinline__ static void pv(float (&o)[kHeadDim / 8][4], const float (&p)[kKeys / 8][4],
                                              unsigned v_rows, int lane) {
        static_assert(kKeys == 16, "one k16 step a warp");
        const int g = lane / 4, t = lane % 4;
        FragA a;
        a.r[0] = pack2_u32(p[0][0] * e4m3::kOperandUp, p[0][1] * e4m3::kOperandUp);
        a.r[1] = pack2_u32(p[0][2] * e4m3::kOperandUp, p[0][3] * e4m3::kOperandUp);
        a.r[2] = pack2_u32(p[1][0] * e4m3::kOperandUp, p[1][1] * e4m3::kOperandUp);
        a.r[3] = pack2_u32(p[1][2] * e4m3::kOperandUp, p[1][3] * e4m3::kOperandUp);
#pragma unroll
        for (int h = 0; h < kVPieces; ++h) {
            unsigned x0[kVPieceWords], x1[kVPieceWords], x2[kVPieceWords], x3[kVPieceWords];  // rows 2t, 2t+1, 2t+8, 2t+9
            v_piece(x0, v_rows, 2 * t, g, h);
            v_piece(x1, v_rows, 2 * t + 1, g, h);
            v_piece(x2, v_rows, 2 * t + 8, g, h);
            v_piece(x3, v_rows, 2 * t + 9, g, h);
#pragma unroll
            for (int q = 0; q < kVPieceWords; ++q) {
                // (row 2t, row 2t+1) byte pairs of columns 4q, 4q+1 and of 4q+2, 4q+3; likewise rows 2t+8, 2t+9.
                const unsigned lo01 = e4m3::prmt(x0[q], x1[q], 0x5140u), hi01 = e4m3::prmt(x0[q], x1[q], 0x7362u);
                const unsigned lo23 = e4m3::prmt(x2[q], x3[q], 0x5140u), hi23 = e4m3::prmt(x2[q], x3[q], 0x7362u);
                unsigned b0[4], b1[4];
                e4m3::to_operands(lo01, b0[0], b0[1]);
                e4m3::to_operands(hi01, b0[2], b0[3]);
                e4m3::to_operands(lo23, b1[0], b1[1]);
                e4m3::to_operands(hi23, b1[2], b1[3]);
                const int j0 = 4 * (kVPieceWords * h + q);  // the n8 block of byte 0 of this word
#pragma unroll
                for (int c = 0; c < 4; ++c) mma_m16n8k16(o[j0 + c], a, b0[c], b1[c]);
            }
        }
    }
};

#if FC_KV_E4M3
template <int kHeadDim>
using KvOperand = E4m3Kv<kHeadDim>;
#else
template <int kHeadDim>
using KvOperand = HalfKv<kHeadDim>;
#endif
