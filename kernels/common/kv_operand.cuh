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
// Precision: the products run on f16 operands whatever Q's dtype. e4m3 -> f16 is exact and one
// instruction a pair (cvt.rn.f16x2.e4m3x2, sm_89+; there is no e4m3 -> bf16 cvt on sm_90, and
// building bf16 bits took four more a pair, which made the kernel issue-bound). Q (f16 or bf16)
// is taken to f16 once per work unit, each row times a power of two that puts its largest
// magnitude in [2^14, 2^15): exact for every element within 2^28 of the row's largest (f16 has
// 11 significant bits, bf16 8), and the logits are scaled back by the same power. P goes to f16
// times 2^14 (undone on O), so no weight above 2^-38 is lost to f16's subnormal range.
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
    // Q's fragments are the tile's elements as they are.
    struct QScale {};
    __device__ __forceinline__ static QScale q_scale(unsigned, int) { return {}; }
    __device__ __forceinline__ static void load_q(FragA (&q)[kHeadDim / 16], const QScale&, unsigned q_tile,
                                                  int lane) {
        load_q_fragments<kHeadDim>(q, q_tile, 0, lane);
    }
    template <int kKeys>
    __device__ __forceinline__ static void qk(float (&s)[kKeys / 8][4], const FragA (&q)[kHeadDim / 16],
                                              const QScale&, unsigned k_rows, int lane) {
        warp_qk<kHeadDim, kKeys>(s, q, k_rows, lane);
    }
    template <int kKeys>
    __device__ __forceinline__ static void qk_q_in_smem(float (&s)[kKeys / 8][4], unsigned q_tile, const QScale&,
                                                        unsigned k_rows, int lane) {
        warp_qk_q_in_smem<kHeadDim, kKeys>(s, q_tile, 0, k_rows, lane);
    }
    // o += P·V over kCols columns of V from v_rows (a warp's column slice: whole swizzle periods).
    template <int kKeys, int kCols = kHeadDim>
    __device__ __forceinline__ static void pv(float (&o)[kCols / 8][4], const float (&p)[kKeys / 8][4],
                                              unsigned v_rows, int lane) {
        warp_pv<kHeadDim, kKeys, kCols>(o, p, v_rows, lane);
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

// d += a·b on f16 operands, f32 accumulation (the products of this file, whatever elem_t is).
__device__ __forceinline__ void mma_f16(float (&d)[4], const FragA& a, unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b0), "r"(b1));
}

// The four e4m3 bytes of `word` as two f16x2 operands, exactly: bytes (0, 1) into lo, (2, 3)
// into hi, the lower byte in the lower half.
__device__ __forceinline__ void to_operands(unsigned word, unsigned& lo, unsigned& hi) {
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
        : "=r"(lo), "=r"(hi)
        : "r"(word));
}

// Two floats as an f16x2 operand (lo in the lower half).
__device__ __forceinline__ unsigned f16x2(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&h);
}

// A 32-bit pair of elem_t (Q's dtype) as two floats.
__device__ __forceinline__ float2 elem_pair(unsigned x) {
    const elem_t* e = reinterpret_cast<const elem_t*>(&x);
    return make_float2(to_float(e[0]), to_float(e[1]));
}

// 2^k for k in [-126, 127], from its bits.
__device__ __forceinline__ float exp2i(int k) { return __int_as_float((k + 127) << 23); }

// P's factor on its way to f16 (and 2^-14 on O).
constexpr float kPUp = 16384.0f;
constexpr float kPDown = 1.0f / 16384.0f;

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

    // Per-row powers of two of the lane's rows g and g + 8: Q is multiplied by up[r] on its way
    // to f16, the logits by down[r] = 1 / up[r] (see the top of the file).
    struct QScale {
        float up[2], down[2];
    };
    // The scale of each of the lane's two rows from their largest magnitude (the quad's lanes
    // together hold every column of both rows).
    __device__ __forceinline__ static QScale q_scale(unsigned q_tile, int lane) {
        const QAddresses q(q_tile, lane);
        float m[2] = {0.f, 0.f};
#pragma unroll
        for (int ks = 0; ks < kHeadDim / 16; ++ks)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float2 v = e4m3::elem_pair(e4m3::lds32(q.of(ks, i & 1, i >> 1)));
                m[i & 1] = fmaxf(m[i & 1], fmaxf(fabsf(v.x), fabsf(v.y)));
            }
        QScale s;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            m[r] = fmaxf(m[r], __shfl_xor_sync(0xffffffffu, m[r], 1));
            m[r] = fmaxf(m[r], __shfl_xor_sync(0xffffffffu, m[r], 2));
            // max in [2^(e-127), 2^(e-126)): times 2^(141 - e) it lies in [2^14, 2^15). A NaN
            // max gives e = 255 (the row's logits are NaN whatever the scale).
            const int e = (__float_as_int(m[r]) >> 23) & 0xff;
            const int k = min(max(141 - e, -126), 126);
            s.up[r] = e4m3::exp2i(k);
            s.down[r] = e4m3::exp2i(-k);
        }
        return s;
    }
    __device__ __forceinline__ static FragA q_fragment(const QAddresses& q, const QScale& s, int ks) {
        FragA a;
#pragma unroll
        for (int i = 0; i < 4; ++i) {  // a.r[i]: row g + 8 (i & 1), columns + 2 (i >> 1)
            const float2 v = e4m3::elem_pair(e4m3::lds32(q.of(ks, i & 1, i >> 1)));
            a.r[i] = e4m3::f16x2(v.x * s.up[i & 1], v.y * s.up[i & 1]);
        }
        return a;
    }
    __device__ __forceinline__ static void load_q(FragA (&q)[kHeadDim / 16], const QScale& s, unsigned q_tile,
                                                  int lane) {
        const QAddresses addr(q_tile, lane);
#pragma unroll
        for (int ks = 0; ks < kHeadDim / 16; ++ks) q[ks] = q_fragment(addr, s, ks);
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
                e4m3::mma_f16(s[0], q, b0, b1);
                e4m3::to_operands(w1[w], b0, b1);
                e4m3::mma_f16(s[1], q, b0, b1);
            }
        }
    }
    // The logits back at Q's scale (QScale::down of each row).
    __device__ __forceinline__ static void scale_down(float (&s)[2][4], const QScale& q) {
#pragma unroll
        for (int nb = 0; nb < 2; ++nb)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[nb][e] *= q.down[e >> 1];
    }
    template <int kKeys>
    __device__ __forceinline__ static void qk(float (&s)[kKeys / 8][4], const FragA (&q)[kHeadDim / 16],
                                              const QScale& scale, unsigned k_rows, int lane) {
        static_assert(kKeys == 16, "16 keys a warp");
        qk_keys(s, [&](int ks) { return q[ks]; }, k_rows, lane);
        scale_down(s, scale);
    }
    template <int kKeys>
    __device__ __forceinline__ static void qk_q_in_smem(float (&s)[kKeys / 8][4], unsigned q_tile,
                                                        const QScale& scale, unsigned k_rows, int lane) {
        static_assert(kKeys == 16, "16 keys a warp");
        const QAddresses addr(q_tile, lane);
        qk_keys(s, [&](int ks) { return q_fragment(addr, scale, ks); }, k_rows, lane);
        scale_down(s, scale);
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
    template <int kKeys, int kCols = kHeadDim>
    __device__ __forceinline__ static void pv(float (&o)[kHeadDim / 8][4], const float (&p)[kKeys / 8][4],
                                              unsigned v_rows, int lane) {
        static_assert(kKeys == 16 && kCols == kHeadDim, "one k16 step a warp, every column");
        const int g = lane / 4, t = lane % 4;
        FragA a;  // P as f16 times 2^14: the caller takes kPDown off O
        a.r[0] = e4m3::f16x2(p[0][0] * e4m3::kPUp, p[0][1] * e4m3::kPUp);
        a.r[1] = e4m3::f16x2(p[0][2] * e4m3::kPUp, p[0][3] * e4m3::kPUp);
        a.r[2] = e4m3::f16x2(p[1][0] * e4m3::kPUp, p[1][1] * e4m3::kPUp);
        a.r[3] = e4m3::f16x2(p[1][2] * e4m3::kPUp, p[1][3] * e4m3::kPUp);
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
                for (int c = 0; c < 4; ++c) e4m3::mma_f16(o[j0 + c], a, b0[c], b1[c]);
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
