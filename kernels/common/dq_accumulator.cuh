// The f32 dQ accumulator of the portable backward's atomic schedule (FC_BWD_ATOMIC_DQ:
// gen5_portable_bwd_wide.cu adds each step's dQ = dS·K into it, launch 1 zeroes it, the convert
// kernel scales and rounds it into dQ).
//
// Layout: after the D vector (rounded up to 4 words), per (batch·heads_q, block of kBlockRows
// query rows) the block's kBlockRows × head_dim partial as warp tiles of kTileRows × kTileCols,
// tile t at rows (t / col_tiles)·kTileRows, columns (t % col_tiles)·kTileCols. Inside a tile the
// words follow the mma.sync C layout of the warp that adds it: lane l's n8 tile j (acc[mt][nt],
// j = mt·kNT + nt) is the float4 at word 4·(32·j + l). So a warp adds its whole partial with
// coalesced 16-byte reductions straight from its registers, no shared-memory staging and no
// block barrier; only the convert kernel needs the (row, col) of a word. Query rows are padded
// to whole blocks (the padding takes adds of exact zeros and is never read back).
// Keep in sync with crates/gen5-persistent/src/backward.rs (`atomic_dq_*`).
#pragma once
#include "params.cuh"

template <int kHeadDim, int kBlockRows, int kTileRows, int kTileCols>
struct DqAccumulator {
    static_assert(kTileRows % 16 == 0 && kTileCols % 16 == 0 && kHeadDim % kTileCols == 0 &&
                      kBlockRows % kTileRows == 0,
                  "whole m16 x n16 slices per tile, whole tiles per block");
    static constexpr int kMT = kTileRows / 16, kNT = kTileCols / 8;
    static constexpr int col_tiles = kHeadDim / kTileCols;
    static constexpr int tiles = (kBlockRows / kTileRows) * col_tiles;
    static constexpr int tile_floats = kTileRows * kTileCols;
    static constexpr int block_floats = kBlockRows * kHeadDim;
    static constexpr int block_rows = kBlockRows;
    // Where tile t sits in its block.
    __device__ __forceinline__ static constexpr int tile_row0(int t) { return (t / col_tiles) * kTileRows; }
    __device__ __forceinline__ static constexpr int tile_col0(int t) { return (t % col_tiles) * kTileCols; }

    __device__ __forceinline__ static int query_blocks(const AttentionParams& p) {
        return (p.seq_q + kBlockRows - 1) / kBlockRows;
    }
    // Words of the accumulator (padded rows included).
    __device__ __forceinline__ static long long floats(const AttentionParams& p) {
        return (long long)p.batch * p.heads_q * query_blocks(p) * block_floats;
    }
    __device__ __forceinline__ static float* base(const AttentionParams& p) {
        const long long rows = (long long)p.batch * p.heads_q * p.seq_q;
        return p.workspace + (rows + 3) / 4 * 4;
    }
    // Tile t of query block `q_block` of flat head bh = b·heads_q + h.
    __device__ __forceinline__ static float* tile(const AttentionParams& p, long long bh, int q_block, int t) {
        return base(p) + ((bh * query_blocks(p) + q_block) * tiles + t) * tile_floats;
    }

    // tile += the warp's partial (C layout), fire-and-forget reductions.
    __device__ __forceinline__ static void add(float* tile, const float (&acc)[kMT][kNT][4], int lane) {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int nt = 0; nt < kNT; ++nt) {
                float* at = tile + 4 * (32 * (mt * kNT + nt) + lane);
                const float(&v)[4] = acc[mt][nt];
#if __CUDA_ARCH__ >= 900
                asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(at), "f"(v[0]), "f"(v[1]),
                             "f"(v[2]), "f"(v[3]));
#else
                // Vector reductions are sm_90+; one 32-bit reduction per word below that.
#pragma unroll
                for (int e = 0; e < 4; ++e) atomicAdd(at + e, v[e]);
#endif
            }
    }

    // Where float4 `i` of the accumulator belongs: flat head, query row (row + 8 for its last two
    // words) and first column (its words come in column pairs).
    struct Spot {
        long long bh;
        int row, col;
    };
    __device__ __forceinline__ static Spot locate(const AttentionParams& p, long long i) {
        const long long word = 4 * i;
        const long long block = word / block_floats;
        const int in_block = (int)(word % block_floats);
        const int t = in_block / tile_floats, in_tile = in_block % tile_floats;
        const int j = in_tile / 128, lane = (in_tile % 128) / 4;
        const int q_block = (int)(block % query_blocks(p));
        Spot s;
        s.bh = block / query_blocks(p);
        s.row = q_block * kBlockRows + tile_row0(t) + 16 * (j / kNT) + lane / 4;
        s.col = tile_col0(t) + 8 * (j % kNT) + 2 * (lane % 4);
        return s;
    }
};

// The geometry gen5_portable_bwd_wide.cu adds in: a step's queries (64 above head_dim 64, 32 at or
// below) by the head dim, in tiles of 32 x 32 or 16 x head_dim/2 (acfed8e: 32 x 16 was
// 1 % slower at D = 128; 32 x 16 at D = 64 level).
#ifndef FC_HEAD_DIM
#error "common/dq_accumulator.cuh: the portable backward's geometry needs -DFC_HEAD_DIM (its head dim)"
#endif
#if FC_HEAD_DIM > 128
// Above head_dim 128 (64-key blocks, 8 warps, dK and dV taking head_dim / 2 registers a thread):
// one tile a warp, of the shape of its dK/dV share, where that leaves the registers (16 x 80 at
// 160, 32 x 48 at 192); 32 x 32 tiles at 224 and 256 (a 16 x 112 or 32 x 64 tile beside dK and
// dV spilled on sm_90a: 14 and 16 tiles, two rounds). FC_BWD_STEP32's 32-row blocks: 16 x 48 and
// 16 x 64 at 192 and 256 (eight), 16 x 32 at 160 and 224 (10 and 14: no eight-way split of those
// has whole 16-column tiles).
#if defined(FC_BWD_STEP32)
#if FC_HEAD_DIM % 64 == 0
using PortableDqAccumulator = DqAccumulator<FC_HEAD_DIM, 32, 16, FC_HEAD_DIM / 4>;
#else
using PortableDqAccumulator = DqAccumulator<FC_HEAD_DIM, 32, 16, 32>;
#endif
#elif FC_HEAD_DIM == 160
using PortableDqAccumulator = DqAccumulator<FC_HEAD_DIM, 64, 16, FC_HEAD_DIM / 2>;
#elif FC_HEAD_DIM == 192
using PortableDqAccumulator = DqAccumulator<FC_HEAD_DIM, 64, 32, FC_HEAD_DIM / 4>;
#else
using PortableDqAccumulator = DqAccumulator<FC_HEAD_DIM, 64, 32, 32>;
#endif
#elif FC_HEAD_DIM > 64 || defined(FC_BWD_TWO_PHASE)
// (FC_BWD_TWO_PHASE: the atomic schedule's padded 64 build, on the layout of 96 and 128.)
using PortableDqAccumulator = DqAccumulator<FC_HEAD_DIM, 64, 32, 32>;
#elif defined(FC_BWD_STEP64)
// 64-query steps at head_dim <= 64 (FC_BWD_STEP64): 32-row tiles, one a warp (half the loads per
// product of 16 rows, and no second tile's loop state beside dK and dV).
using PortableDqAccumulator = DqAccumulator<FC_HEAD_DIM, 64, 32, FC_HEAD_DIM / 2>;
#else
using PortableDqAccumulator = DqAccumulator<FC_HEAD_DIM, 32, 16, FC_HEAD_DIM / 2>;
#endif
