// Generation 1: the scalar baseline and the correctness anchor on the GPU.
//
// One block per query row (grid-stride over all rows). Each thread scores one key of a chunk
// with a plain dot product, the block reduces max and sum through shared memory, and the output
// row accumulates in shared memory (one element per thread). Online softmax with f32 state, in
// the log2 domain (scores pre-multiplied by scale·log2 e so exp is one exp2). No tensor cores,
// no vector loads: every later generation must match what this computes.
//
// It takes every mode of docs/MODES.md through the shared block info (common/seqlen.cuh: lengths,
// key ranges), score modifiers (common/score_mod.cuh) and K/V addressing (common/kv_rows.cuh);
// only keys in the row's [lo, hi) are ever read.
#include "common/types.cuh"
#include "common/seqlen.cuh"
#include "common/score_mod.cuh"
#include "common/kv_rows.cuh"

#define SCALAR_THREADS 128
#define SCALAR_MAX_HEAD_DIM 512  // gen1-scalar's capabilities (q_row and acc: 4 KiB of shared memory)

// Block-wide reduction through shared memory; every thread gets the result.
template <bool IsMax>
__device__ float block_reduce(float x, float* scratch) {
    scratch[threadIdx.x] = x;
    __syncthreads();
    for (int stride = SCALAR_THREADS / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) {
            float a = scratch[threadIdx.x], b = scratch[threadIdx.x + stride];
            scratch[threadIdx.x] = IsMax ? fmaxf(a, b) : a + b;
        }
        __syncthreads();
    }
    float r = scratch[0];
    __syncthreads();  // scratch is reused by the next reduction
    return r;
}

extern "C" __global__ void __launch_bounds__(SCALAR_THREADS)
attention_scalar(const __grid_constant__ AttentionParams p) {
    __shared__ float q_row[SCALAR_MAX_HEAD_DIM];
    __shared__ float acc[SCALAR_MAX_HEAD_DIM];
    __shared__ float probs[SCALAR_THREADS];
    __shared__ float scratch[SCALAR_THREADS];

    const elem_t* q = static_cast<const elem_t*>(p.q);
    const elem_t* k = static_cast<const elem_t*>(p.k);
    const elem_t* v = static_cast<const elem_t*>(p.v);
    elem_t* o = static_cast<elem_t*>(p.o);
    const int tid = threadIdx.x;
    const long long rows = (long long)p.batch * p.heads_q * p.seq_q;

    for (long long row_id = blockIdx.x; row_id < rows; row_id += gridDim.x) {
        const int row = (int)(row_id % p.seq_q);
        const int head = (int)((row_id / p.seq_q) % p.heads_q);
        const int batch = (int)(row_id / ((long long)p.seq_q * p.heads_q));
        const int kv_head = head / p.q_heads_per_kv;
        const SeqInfo seq = seq_info(p, batch);
        if (row >= seq.len_q) continue;  // past this sequence's end (seq_q is the max): block-uniform
        const long long q_base = seq_q_offset(p, seq, batch, head, row);

        for (int d = tid; d < p.head_dim; d += SCALAR_THREADS) {
            q_row[d] = to_float(q[q_base + d]);
            acc[d] = 0.0f;
        }
        __syncthreads();

        const KeyRange keys = key_range(p, seq, row);
        float running_max = -INFINITY;  // log2 domain
        float running_sum = 0.0f;

        for (int chunk = keys.lo; chunk < keys.hi; chunk += SCALAR_THREADS) {
            const int key = chunk + tid;
            float score = -INFINITY;
            if (key < keys.hi) {
                const long long k_base = k_row_offset(p, seq, batch, kv_head, key);
                float dot = 0.0f;
                for (int d = 0; d < p.head_dim; ++d) dot += q_row[d] * to_float(k[k_base + d]);
                // (the modifier is rebuilt per key, from constants: kept live across the key loop,
                // ptxas spilled 4-8 bytes on sm_80)
                score = logit_log2(score_mod(p, seq, batch, head), dot, row, key);
            }
            // key 0 of every chunk is visible (chunk < keys.hi), so the new max is finite unless
            // the logits themselves are -inf.
            const float new_max = fmaxf(running_max, block_reduce<true>(score, scratch));
            // A max still at -inf shifts by 0, so -inf - -inf never forms a NaN (all p are 0 then).
            const float shift = new_max == -INFINITY ? 0.0f : new_max;
            const float correction = running_max == -INFINITY ? 0.0f : exp2f(running_max - shift);
            const float prob = (key < keys.hi) ? exp2f(score - shift) : 0.0f;
            probs[tid] = prob;
            running_sum = running_sum * correction + block_reduce<false>(prob, scratch);
            running_max = new_max;

            const int chunk_keys = min(SCALAR_THREADS, keys.hi - chunk);
            for (int d = tid; d < p.head_dim; d += SCALAR_THREADS) {
                float a = acc[d] * correction;
                for (int t = 0; t < chunk_keys; ++t)
                    a += probs[t] * to_float(v[v_row_offset(p, seq, batch, kv_head, chunk + t) + d]);
                acc[d] = a;
            }
            __syncthreads();  // probs is rewritten by the next chunk
        }

        const long long o_base = seq_o_offset(p, seq, batch, head, row);
        // l = 0 with visible keys takes -inf logits (infinite inputs): softmax is 0/0 there, NaN
        // as in the f64 reference. With no visible key it is the defined empty row.
        const bool sees_keys = keys.hi > keys.lo;
        const float inv_sum = running_sum != 0.0f ? 1.0f / running_sum : (sees_keys ? __int_as_float(0x7fc00000) : 0.0f);
        for (int d = tid; d < p.head_dim; d += SCALAR_THREADS) o[o_base + d] = from_float(acc[d] * inv_sum);
        if (tid == 0) {
            // Natural-log LSE; a row that saw no key has sum 0 and LSE +inf.
            p.lse[seq_lse_offset(p, seq, batch, head, row)] =
                running_sum != 0.0f ? (running_max + log2f(running_sum)) * 0.69314718055994531f
                                    : (sees_keys ? __int_as_float(0x7fc00000) : INFINITY);
        }
        __syncthreads();  // q_row and acc are rewritten for the next row
    }
}
