// Combining partial attention results (context parallelism, ring attention): each K/V block a
// rank attends to gives a partial O (elem_t) and its f32 LSE for the same query rows; the forward
// merges them by LSE as split-KV does, the backward sums per-block gradients. The core launches
// these through `flashcore_core::partials` (crates/core/src/partials.rs), which checks every
// length first.
//
// Shapes (merge_partial): batch = p.batch, rows = p.seq_q, heads = p.heads_q, width = p.head_dim
// (the host sets it to V's head dim). O tensors are dense BSHD [batch, rows, heads, width], LSE
// tensors dense [batch, heads, rows], natural log.
//
// Accuracy under the project's --use_fast_math: expf becomes ex2.approx(x * log2(e)), logf
// becomes lg2.approx * ln(2) and `/` becomes div.approx. The merge therefore takes
// - exp only of d = min - max <= 0 for the smaller LSE's weight w (the larger's is exactly 1):
//   ex2.approx is within 2 ulp, and the rounding of d * log2(e) costs a relative |d| * 2^-24 in
//   w, whose share of the result is w / (1 + w) <= e^d, so at most 2^-24 * max(|d| e^d) < 2.5e-8;
// - log1pf(w) (a polynomial fast math leaves alone) rather than logf(1 + w);
// - correctly rounded reciprocals (__frcp_rn),
// so a merged row is within a few ulp (~1e-6 relative at worst) of the exact merge.
#include "common/params.cuh"
#include "common/types.cuh"

// A row's LSE of +inf means "no keys": its O is 0 and it weighs nothing. NaN is never dropped: a
// NaN LSE makes the row's LSE and every O element NaN, and an O element is always multiplied by
// its weight (0 for an empty side), so a NaN (or inf) in either O reaches the result.
struct MergeWeights {
    float acc;  // weight of the accumulator's O
    float blk;  // weight of the block's O
    float lse;  // the merged LSE
};

__device__ __forceinline__ MergeWeights merge_weights(float a, float b) {
    const float inf = __int_as_float(0x7f800000);
    if (a != a || b != b) {
        const float nan = __int_as_float(0x7fffffff);
        return {nan, nan, nan};
    }
    if (b == inf) return {1.0f, 0.0f, a};  // the block has no keys (or neither has: a = +inf)
    if (a == inf) return {0.0f, 1.0f, b};  // the accumulator has none yet
    const bool a_max = a >= b;
    const float m = a_max ? a : b;
    // a == b includes -inf twice (whose difference would be NaN): equal weights.
    const float d = (a == b) ? 0.0f : (a_max ? b - a : a - b);
    const float w = expf(d);                 // the smaller side's weight, in [0, 1]
    const float big = __frcp_rn(1.0f + w);   // 1 / (1 + w)
    const float small = __fmul_rn(w, big);   // w / (1 + w)
    const float lse = m + log1pf(w);
    return a_max ? MergeWeights{big, small, lse} : MergeWeights{small, big, lse};
}

// One warp per (batch, head, row), rows taken in LSE order; blocks of (32, k) threads, one row per
// warp at a time. The weights are computed once per row (by every lane alike, no shuffle), lane 0
// writes the LSE, the lanes stride the row's width.
// `first`: the accumulator is set to the block (its old contents, maybe uninitialised, unread).
extern "C" __global__ void merge_partial(const __grid_constant__ AttentionParams p, float* __restrict__ acc_o,
                                         float* __restrict__ acc_lse, const elem_t* __restrict__ o,
                                         const float* __restrict__ lse, int first) {
    const long long total = (long long)p.batch * p.heads_q * p.seq_q;
    const int width = p.head_dim;
    for (long long r = (long long)blockIdx.x * blockDim.y + threadIdx.y; r < total;
         r += (long long)gridDim.x * blockDim.y) {
        const int s = (int)(r % p.seq_q);
        const int h = (int)((r / p.seq_q) % p.heads_q);
        const long long b = r / ((long long)p.seq_q * p.heads_q);
        const long long base = ((b * p.seq_q + s) * p.heads_q + h) * width;
        const float lb = lse[r];
        if (first) {
            for (int d = threadIdx.x; d < width; d += blockDim.x) acc_o[base + d] = to_float(o[base + d]);
            if (threadIdx.x == 0) acc_lse[r] = lb;
            continue;
        }
        const MergeWeights w = merge_weights(acc_lse[r], lb);
        for (int d = threadIdx.x; d < width; d += blockDim.x) {
            const long long i = base + d;
            acc_o[i] = __fmaf_rn(w.acc, acc_o[i], __fmul_rn(w.blk, to_float(o[i])));
        }
        // Every lane read acc_lse[r] above; the lanes may part in the loop, so wait for all of
        // them before lane 0 overwrites it (a row's lanes are one whole warp: blockDim.x = 32).
        __syncwarp();
        if (threadIdx.x == 0) acc_lse[r] = w.lse;
    }
}

// Summing per-block gradients: acc[i] += x[i] in f32 (first: acc[i] = x[i], acc unread).
extern "C" __global__ void add_partial(const __grid_constant__ AttentionParams p, float* __restrict__ acc,
                                       const elem_t* __restrict__ x, long long n, int first) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const float v = to_float(x[i]);
        acc[i] = first ? v : acc[i] + v;
    }
}

// The f32 accumulator back to elem_t, rounded to nearest (ties to even).
extern "C" __global__ void cast_partial(const __grid_constant__ AttentionParams p, const float* __restrict__ acc,
                                        elem_t* __restrict__ out, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        out[i] = from_float(acc[i]);
    }
}
