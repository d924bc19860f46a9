// Generation 2: the scalar algorithm with the memory work done right.
//
// Same math as gen1 (online softmax, f32 state per query row, log2 domain, no tensor cores);
// what changes is how data moves:
//   - Q, K, V, O move in 16-byte pieces (uint4 = 8 elements), consecutive lanes on consecutive
//     pieces of a row, so every warp access is coalesced.
//   - A block of 4 warps owns 16 query rows of one (batch, head): 4 rows per warp. K and V are
//     staged tile by tile in shared memory and read by all 16 rows, so global/L2 traffic per row
//     drops 16x. The tile is converted to f32 once while it is staged (each element is converted
//     once per block instead of once per warp: the inner loop has no conversions at all), and
//     each f32 read from shared memory feeds the FMAs of 4 rows (R = 4), so the inner loop needs
//     1 byte of shared-memory bandwidth per FMA, well under the 128 B/clk/SM available.
//   - Reductions are warp shuffles, never shared memory; no atomics; 2 __syncthreads per K/V tile.
//
// Lane mapping inside a warp (head_dim D is a run-time value):
//   D8 = D/8 pieces per row; G = next power of two >= D8 lanes form a "key group"; the warp has
//   NG = 32/G groups. Lane (g, c) = (lane / G, lane % G) holds piece c (dims 8c..8c+7) of its 4
//   query rows and of their 4 output accumulators, and scores keys t0 + t*NG + g. The partial
//   dot products of a group are summed with log2(G) xor-shuffles. Each group runs its own online
//   softmax over its keys (its own max/sum), so no cross-group traffic happens inside the loop;
//   the NG partial states are merged once per work item at the end. Lanes with c >= D8 (D/8 not
//   a power of two, e.g. D = 96) carry zeros.
//
// Work items are (batch, head, 16-row query tile), 64-bit, walked by a grid-stride loop on
// grid.x. Within one head, the heaviest (last) query tiles come first so causal tails are short,
// and the tiles of one head are adjacent so the blocks running together share K/V in L2.
#include "common/types.cuh"
#include "common/masking.cuh"
#include "common/tensor_index.cuh"

// Must match crates/gen2-vectorized/src/lib.rs.
#define VEC_WARPS 4
#define VEC_ROWS_PER_WARP 4
#define VEC_THREADS (VEC_WARPS * 32)
#define VEC_BLOCK_M (VEC_WARPS * VEC_ROWS_PER_WARP)
// Elements of one K (or V) tile in shared memory, stored as f32: 4096 floats = 16 KB, 32 KB for
// K + V, under the 48 KB that needs no opt-in. Tile rows = min(128, (4096 / D) rounded down to
// 16): 128 rows for D <= 32, 64 for D = 64, 32 for D = 128, 16 for D = 256.
#define VEC_TILE_ELEMS 4096
#define VEC_MAX_TILE_ROWS 128
// 16-byte pieces each thread stages per tile: VEC_TILE_ELEMS / 8 / VEC_THREADS.
#define VEC_STAGE_ROUNDS 4
static_assert(VEC_STAGE_ROUNDS * VEC_THREADS * 8 == VEC_TILE_ELEMS, "staging covers a tile");
// Keys each group scores before one online-softmax update (amortizes the rescale and its exp).
#define VEC_KEYS_PER_STEP 4

__device__ __forceinline__ int vec_tile_rows(int head_dim) {
    const int r = (VEC_TILE_ELEMS / head_dim) & ~15;
    return r < VEC_MAX_TILE_ROWS ? r : VEC_MAX_TILE_ROWS;
}

__device__ __forceinline__ float2 to_float2(elem2_t x) {
#if defined(FC_DTYPE_F16)
    return __half22float2(x);
#else
    return __bfloat1622float2(x);
#endif
}

// 16 bytes -> 8 floats.
__device__ __forceinline__ void unpack8(const uint4& u, float f[8]) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        elem2_t h = *reinterpret_cast<const elem2_t*>(&w[i]);
        const float2 x = to_float2(h);
        f[2 * i] = x.x;
        f[2 * i + 1] = x.y;
    }
}

__device__ __forceinline__ uint4 ldg16(const elem_t* ptr) {
    return __ldg(reinterpret_cast<const uint4*>(ptr));
}

extern "C" __global__ void __launch_bounds__(VEC_THREADS, 3)
attention_vectorized(const __grid_constant__ AttentionParams p) {
    // Shared memory, as float4: [K lo | K hi | V lo | V hi], each [tile_rows][D8]. "lo" holds
    // dims 8c..8c+3 of piece c, "hi" dims 8c+4..8c+7. Splitting the halves (rather than storing
    // 8 floats per piece contiguously) makes a warp's 16-byte reads contiguous for every D, so
    // they are free of bank conflicts.
    extern __shared__ float4 smem[];

    constexpr int R = VEC_ROWS_PER_WARP;
    constexpr int KPS = VEC_KEYS_PER_STEP;
    constexpr unsigned FULL = 0xffffffffu;
    const float NEG_INF = __int_as_float(0xff800000);

    const int D = p.head_dim;
    const int D8 = D >> 3;
    int G = 1;
    while (G < D8) G <<= 1;
    const int log2G = __ffs(G) - 1;
    const int NG = 32 >> log2G;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int g = lane >> log2G;
    const int c = lane & (G - 1);
    const bool active = c < D8;
    // Lanes past the row's last piece (D/8 not a power of two) read piece 0 instead: finite data
    // times their zero q contributes 0 to the scores, and their accumulators are never stored.
    const int c_ld = active ? c : 0;

    const int tile_rows = vec_tile_rows(D);
    const int plane = tile_rows * D8;  // float4s in one of the four planes
    float4* sK_lo = smem;
    float4* sK_hi = smem + plane;
    float4* sV_lo = smem + 2 * plane;
    float4* sV_hi = smem + 3 * plane;
    // Staging walks the tile's pieces in steps of VEC_THREADS; (row, piece) advance by this much
    // per step (no integer division per piece).
    const int step_rows = VEC_THREADS / D8;
    const int step_pieces = VEC_THREADS - step_rows * D8;
    const int first_row = threadIdx.x / D8;
    const int first_piece = threadIdx.x - first_row * D8;

    const elem_t* Qg = static_cast<const elem_t*>(p.q);
    const elem_t* Kg = static_cast<const elem_t*>(p.k);
    const elem_t* Vg = static_cast<const elem_t*>(p.v);
    elem_t* Og = static_cast<elem_t*>(p.o);

    const long long n_qt = (p.seq_q + VEC_BLOCK_M - 1) / VEC_BLOCK_M;
    const long long items = (long long)p.batch * p.heads_q * n_qt;

    for (long long item = blockIdx.x; item < items; item += gridDim.x) {
        const long long bh = item / n_qt;
        const int qt = (int)(n_qt - 1 - (item - bh * n_qt));  // heaviest tile of the head first
        const int b = (int)(bh / p.heads_q);
        const int h = (int)(bh - (long long)b * p.heads_q);
        const int h_kv = h / p.q_heads_per_kv;
        const int q_block0 = qt * VEC_BLOCK_M;
        const int row0 = q_block0 + warp * R;

        // Per-row state. q is pre-multiplied by scale*log2(e): scores come out in the log2 domain.
        float q[R][8], acc[R][8], m[R], l[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int row = row0 + r;
            const bool valid = row < p.seq_q;
            uint4 raw = make_uint4(0u, 0u, 0u, 0u);
            if (valid && active) raw = ldg16(Qg + q_offset(p, b, h, row) + 8 * c);
            unpack8(raw, q[r]);
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                q[r][e] *= p.scale_log2;
                acc[r][e] = 0.0f;
            }
            m[r] = NEG_INF;
            l[r] = 0.0f;
        }

        // Keys past this are invisible to every row of the block: not loaded, not scored.
        const int block_kend = causal_key_end_for_tile(p, q_block0, q_block0 + VEC_BLOCK_M);
        const elem_t* Kh = Kg + k_offset(p, b, h_kv, 0);
        const elem_t* Vh = Vg + v_offset(p, b, h_kv, 0);

        for (int kt0 = 0; kt0 < block_kend; kt0 += tile_rows) {
            const int n_tile = min(tile_rows, block_kend - kt0);  // rows < seq_k only
            const int n_pieces = n_tile * D8;

            __syncthreads();  // every warp is done reading the previous tile (or item)
            // Stage K and V: consecutive threads take consecutive 16-byte pieces of a row, so
            // each warp load is coalesced. A tile is at most VEC_TILE_ELEMS / 8 = 4 * VEC_THREADS
            // pieces, so each thread issues all of its (up to 8) loads before its first store:
            // one round of memory latency per tile. Converted to f32 once, here. Slots past the
            // tile's rows (a short last tile) are zeroed: the inner loop reads whole steps of
            // keys without bounds checks, so every float it can touch must be finite (a masked
            // key has p = 0, and 0 * stale NaN would still be NaN).
            {
                uint4 kraw[VEC_STAGE_ROUNDS], vraw[VEC_STAGE_ROUNDS];
                int rr = first_row, cc = first_piece;
#pragma unroll
                for (int u = 0; u < VEC_STAGE_ROUNDS; ++u) {
                    kraw[u] = make_uint4(0u, 0u, 0u, 0u);
                    vraw[u] = kraw[u];
                    if (threadIdx.x + u * VEC_THREADS < n_pieces) {
                        kraw[u] = ldg16(Kh + (long long)(kt0 + rr) * p.k_row_stride + 8 * cc);
                        vraw[u] = ldg16(Vh + (long long)(kt0 + rr) * p.v_row_stride + 8 * cc);
                    }
                    rr += step_rows;
                    cc += step_pieces;
                    if (cc >= D8) {
                        cc -= D8;
                        ++rr;
                    }
                }
#pragma unroll
                for (int u = 0; u < VEC_STAGE_ROUNDS; ++u) {
                    const int i = threadIdx.x + u * VEC_THREADS;
                    if (i < plane) {
                        float kf[8], vf[8];
                        unpack8(kraw[u], kf);
                        unpack8(vraw[u], vf);
                        sK_lo[i] = make_float4(kf[0], kf[1], kf[2], kf[3]);
                        sK_hi[i] = make_float4(kf[4], kf[5], kf[6], kf[7]);
                        sV_lo[i] = make_float4(vf[0], vf[1], vf[2], vf[3]);
                        sV_hi[i] = make_float4(vf[4], vf[5], vf[6], vf[7]);
                    }
                }
            }
            __syncthreads();

            // This warp's keys in the tile: [0, n_w), bounded by what its last valid row sees.
            // Row r sees [0, lim[r]) of them; rows are consecutive, so lim[0] is the smallest.
            // (Recomputed per tile rather than kept live across the loop: registers are the
            // constraint here. Padding rows past seq_q are scored like real rows, harmlessly:
            // their q is zero and their output is never written.)
            const int last_row = min(row0 + R, p.seq_q) - 1;  // < row0: the warp is all padding
            const int n_w = last_row < row0 ? 0 : min(n_tile, causal_key_end(p, last_row) - kt0);
            int lim[R];
#pragma unroll
            for (int r = 0; r < R; ++r) lim[r] = min(n_w, causal_key_end(p, row0 + r) - kt0);

            // A step is NG*KPS keys, which divides tile_rows for every D (tile_rows is a
            // multiple of 16, and NG*KPS = 128/G is 4..16, or 32..128 only for D <= 32, where
            // tile_rows = 128): a step never leaves the tile, so its shared-memory reads need no
            // bounds checks. Keys at or past n_w are zeros or staged data, masked below.
            const float4* kq_lo = sK_lo + g * D8 + c_ld;
            const float4* kq_hi = sK_hi + g * D8 + c_ld;
            const float4* vq_lo = sV_lo + g * D8 + c_ld;
            const float4* vq_hi = sV_hi + g * D8 + c_ld;
            const int key_stride = NG * D8;  // float4s between a group's consecutive keys
            for (int t0 = 0; t0 < n_w; t0 += NG * KPS) {
                const int base = t0 * D8;
                float s[KPS][R];
#pragma unroll
                for (int t = 0; t < KPS; ++t) {
                    // Key t0 + t*NG + g: the groups read adjacent rows, so a warp's 16-byte
                    // reads are contiguous (no bank conflicts).
                    const float4 k0 = kq_lo[base + t * key_stride];
                    const float4 k1 = kq_hi[base + t * key_stride];
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        float d = q[r][0] * k0.x;
                        d = fmaf(q[r][1], k0.y, d);
                        d = fmaf(q[r][2], k0.z, d);
                        d = fmaf(q[r][3], k0.w, d);
                        d = fmaf(q[r][4], k1.x, d);
                        d = fmaf(q[r][5], k1.y, d);
                        d = fmaf(q[r][6], k1.z, d);
                        d = fmaf(q[r][7], k1.w, d);
                        s[t][r] = d;
                    }
                }
                // Sum the partial dot products over the G lanes of each group (xor offsets < G
                // stay inside the group); every lane of the group ends with the full score.
                for (int off = 1; off < G; off <<= 1) {
#pragma unroll
                    for (int t = 0; t < KPS; ++t)
#pragma unroll
                        for (int r = 0; r < R; ++r) s[t][r] += __shfl_xor_sync(FULL, s[t][r], off);
                }
                // Only steps that cross a row's last visible key need the per-row mask
                // (warp-uniform test: the causal diagonal, the tile's tail, padding rows).
                if (t0 + NG * KPS > lim[0]) {
#pragma unroll
                    for (int t = 0; t < KPS; ++t) {
                        const int j = t0 + t * NG + g;
#pragma unroll
                        for (int r = 0; r < R; ++r)
                            if (j >= lim[r]) s[t][r] = NEG_INF;
                    }
                }
                // Online softmax, one update per row for the group's KPS keys. The rescale of
                // (l, acc) is needed only when some row's max grew; once the max settles that
                // is rare, and a warp vote skips it (exact: the factor would be exp2(0) = 1).
                float mx[R];
                bool grew = false;
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    mx[r] = m[r];
#pragma unroll
                    for (int t = 0; t < KPS; ++t) mx[r] = fmaxf(mx[r], s[t][r]);
                    grew |= mx[r] > m[r];
                }
                if (__any_sync(FULL, grew)) {
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        // A row that has seen nothing visible keeps max -inf; subtracting 0
                        // then gives exp2(-inf) = 0 rather than exp2(-inf - -inf) = NaN.
                        const float mu = (mx[r] == NEG_INF) ? 0.0f : mx[r];
                        const float corr = exp2f(m[r] - mu);
                        l[r] *= corr;
#pragma unroll
                        for (int e = 0; e < 8; ++e) acc[r][e] *= corr;
                    }
                }
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    m[r] = mx[r];
                    const float mu = (mx[r] == NEG_INF) ? 0.0f : mx[r];
#pragma unroll
                    for (int t = 0; t < KPS; ++t) {
                        s[t][r] = exp2f(s[t][r] - mu);  // masked: exp2(-inf) = 0
                        l[r] += s[t][r];
                    }
                }
                // acc += p * V for the same keys.
#pragma unroll
                for (int t = 0; t < KPS; ++t) {
                    const float4 v0 = vq_lo[base + t * key_stride];
                    const float4 v1 = vq_hi[base + t * key_stride];
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        const float pr = s[t][r];
                        acc[r][0] = fmaf(pr, v0.x, acc[r][0]);
                        acc[r][1] = fmaf(pr, v0.y, acc[r][1]);
                        acc[r][2] = fmaf(pr, v0.z, acc[r][2]);
                        acc[r][3] = fmaf(pr, v0.w, acc[r][3]);
                        acc[r][4] = fmaf(pr, v1.x, acc[r][4]);
                        acc[r][5] = fmaf(pr, v1.y, acc[r][5]);
                        acc[r][6] = fmaf(pr, v1.z, acc[r][6]);
                        acc[r][7] = fmaf(pr, v1.w, acc[r][7]);
                    }
                }
            }
        }

        // Merge the NG groups' (max, sum, acc) states: xor offsets G..16 pair lane (g, c) with
        // lane (g ^ k, c), the same output piece. Afterwards every group holds the whole row.
        for (int off = G; off < 32; off <<= 1) {
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const float mo = __shfl_xor_sync(FULL, m[r], off);
                const float lo = __shfl_xor_sync(FULL, l[r], off);
                const float mx = fmaxf(m[r], mo);
                const float mu = (mx == NEG_INF) ? 0.0f : mx;
                const float a = exp2f(m[r] - mu);
                const float bb = exp2f(mo - mu);
                l[r] = l[r] * a + lo * bb;
                m[r] = mx;
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    const float ao = __shfl_xor_sync(FULL, acc[r][e], off);
                    acc[r][e] = acc[r][e] * a + ao * bb;
                }
            }
        }

        // Write: group 0 stores each valid row's pieces (16-byte stores, contiguous across the
        // group); lane r stores row r's LSE. O is rounded once, here.
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int row = row0 + r;
            if (row >= p.seq_q) continue;
            const float inv = row_sum_inverse(p, row, l[r]);  // no visible key: O = 0
            if (g == 0 && active) {
                uint4 out;
                out.x = pack2_u32(acc[r][0] * inv, acc[r][1] * inv);
                out.y = pack2_u32(acc[r][2] * inv, acc[r][3] * inv);
                out.z = pack2_u32(acc[r][4] * inv, acc[r][5] * inv);
                out.w = pack2_u32(acc[r][6] * inv, acc[r][7] * inv);
                *reinterpret_cast<uint4*>(Og + o_offset(p, b, h, row) + 8 * c) = out;
            }
            if (lane == r) {
                p.lse[lse_offset(p, b, h, row)] =
                    row_lse(p, row, l[r], (m[r] + log2f(l[r])) * 0.69314718055994531f);
            }
        }
    }
}
