// Generation 1 backward: the scalar baseline of dQ, dK, dV, slow and obviously right.
//
// Three launches, in order, on one stream (docs/generations/gen1-scalar.md, "Backward"):
//   1. bwd_scalar_dot_do_o: one thread per query row, D_i = rowsum(dO_i ∘ O_i) in f32 into the
//      plan's workspace (written whole before it is read: no counters, nothing to clear).
//   2. bwd_scalar_dk_dv: one block per (batch, kv head, key j). For every query head of the
//      group and every row i that sees key j (bottom-right causal, or the window), recompute
//      p_ij = exp(scale·q_i·k_j − LSE_i) from the forward's LSE, dp_ij = dO_i·v_j and
//      ds_ij = p_ij·(dp_ij − D_i); dV_j = Σ p_ij dO_i, dK_j = scale · Σ ds_ij q_i.
//   3. bwd_scalar_dq: one block per (batch, query head, row i): dQ_i = scale · Σ_j ds_ij k_j
//      over the keys row i sees.
// Each output element is summed by one thread in a fixed order: deterministic, no atomics.
// Rows are processed SCALAR_BWD_THREADS at a time (one thread per row or key computes the
// scalars p, ds by plain dot products), then each thread accumulates its own columns
// (tid, tid + 128) in f32 registers. A row that sees no key gets dQ = 0, a key no row sees
// dK = dV = 0 (its loops are empty).
//
// Modes (FC_BWD_MODES builds, common/backward_scores.cuh): a sliding window bounds the rows that
// see a key and the keys a row sees (both one range), and p and ds come from the forward's
// logit (softcap, ALiBi), ds times softcap's 1 − tanh². The three parts below are the only
// difference; a dense build keeps the causal rule.
// Varlen (FC_BWD_VARLEN builds): each sequence's own lengths and first storage rows
// (backward_scores.cuh); a key or row past its sequence's end has nothing to write.
#include "common/types.cuh"
#include "common/tensor_index.cuh"
#include "common/masking.cuh"
#include "common/backward_params.cuh"
#include "common/backward_scores.cuh"
#include "common/opaque.cuh"

#define SCALAR_BWD_THREADS 128
#define SCALAR_BWD_MAX_HEAD_DIM 256
#define SCALAR_BWD_COLS (SCALAR_BWD_MAX_HEAD_DIM / SCALAR_BWD_THREADS)
#define FC_LOG2E 1.4426950408889634f

#if FC_BWD_MODES
// The query rows that see `key`, and the keys `row` sees: the window's (and causal) ranges.
__device__ __forceinline__ QueryRange rows_seeing(const AttentionParams& p, int b, int key) {
    return query_range(p, bwd_seq(p, b), key);
}
__device__ __forceinline__ int rows_end(const AttentionParams&, const QueryRange& rows) { return rows.end; }
__device__ __forceinline__ KeyRange keys_seen(const AttentionParams& p, int b, int row) {
    return key_range(p, bwd_seq(p, b), row);
}

// p_ij and ds_ij of a pair the ranges above hold, from the raw dot products and the row's
// natural-log LSE and D: the forward's logit (softcap, ALiBi of head h of batch b). The modifier
// is rebuilt per pair (its slope an L1 hit): hoisted out of the row loop, its registers beside
// the accumulators spilled 4 bytes on sm_80.
__device__ __forceinline__ void prob_and_ds(const AttentionParams& p, int b, int h, int row, int key, float dot,
                                            float dp, float lse, float d_i, float& pr, float& ds) {
    const ScoreMod mod = score_mod(p, bwd_seq(p, b), b, opaque(h));
    const BwdScore s = bwd_score(mod, dot, dp, lse * FC_LOG2E, d_i, row, key, true);
    pr = s.p;
    ds = s.ds;
}
#else
// Bottom-right causal: the rows from key - (seq_k - seq_q) on see it, a row the keys before
// causal_key_end. (The rows' end read as p.seq_q where it is used, as it always was.)
__device__ __forceinline__ QueryRange rows_seeing(const AttentionParams& p, int, int key) {
    long long first = p.causal ? (long long)key - ((long long)p.seq_k - p.seq_q) : 0;
    return {first < 0 ? 0 : (first > p.seq_q ? p.seq_q : (int)first), p.seq_q};
}
__device__ __forceinline__ int rows_end(const AttentionParams& p, const QueryRange&) { return p.seq_q; }
__device__ __forceinline__ KeyRange keys_seen(const AttentionParams& p, int, int row) {
    return {0, causal_key_end(p, row)};  // empty for a row that sees no key
}

// p_ij from the raw dot product and the row's natural-log LSE (log2 domain: one exp2), and ds_ij.
__device__ __forceinline__ void prob_and_ds(const AttentionParams& p, int, int, int, int, float dot, float dp,
                                            float lse, float d_i, float& pr, float& ds) {
    pr = exp2f(dot * p.scale_log2 - lse * FC_LOG2E);
    ds = pr * (dp - d_i);
}
#endif

extern "C" __global__ void __launch_bounds__(SCALAR_BWD_THREADS)
bwd_scalar_dot_do_o(const __grid_constant__ AttentionParams p, const __grid_constant__ BackwardParams g) {
    const elem_t* o = static_cast<const elem_t*>(p.o);
    const elem_t* d_o = static_cast<const elem_t*>(g.d_o);
    const long long rows = bwd_flat_rows(p);
    for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < rows;
         r += (long long)gridDim.x * blockDim.x) {
        const auto [batch, head, row] = bwd_flat_row(p, r);
        const long long ob = o_offset(p, batch, head, row), db = do_offset(g, batch, head, row);
        float acc = 0.0f;
        for (int c = 0; c < p.head_dim; ++c) acc += to_float(d_o[db + c]) * to_float(o[ob + c]);
        p.workspace[FC_BWD_VARLEN ? r : lse_offset(p, batch, head, row)] = acc;  // (varlen: r is the LSE index)
    }
}

extern "C" __global__ void __launch_bounds__(SCALAR_BWD_THREADS)
bwd_scalar_dk_dv(const __grid_constant__ AttentionParams p, const __grid_constant__ BackwardParams g) {
    __shared__ float k_row[SCALAR_BWD_MAX_HEAD_DIM];
    __shared__ float v_row[SCALAR_BWD_MAX_HEAD_DIM];
    __shared__ float ps[SCALAR_BWD_THREADS];
    __shared__ float dss[SCALAR_BWD_THREADS];

    const elem_t* q = static_cast<const elem_t*>(p.q);
    const elem_t* k = static_cast<const elem_t*>(p.k);
    const elem_t* v = static_cast<const elem_t*>(p.v);
    const elem_t* d_o = static_cast<const elem_t*>(g.d_o);
    elem_t* dk = static_cast<elem_t*>(g.dk);
    elem_t* dv = static_cast<elem_t*>(g.dv);
    const float* dvec = p.workspace;
    const int tid = threadIdx.x;
    const long long keys = (long long)p.batch * p.heads_kv * p.seq_k;

    for (long long key_id = blockIdx.x; key_id < keys; key_id += gridDim.x) {
        const int key = (int)(key_id % p.seq_k);
        const int kv_head = (int)((key_id / p.seq_k) % p.heads_kv);
        const int batch = (int)(key_id / ((long long)p.seq_k * p.heads_kv));
        if (FC_BWD_VARLEN && key >= bwd_len_k(p, batch)) continue;  // past its sequence's keys (varlen): nothing to write
        const int key_row = bwd_k_row(p, batch, key);
        const long long kb = k_offset(p, batch, kv_head, key_row), vb = v_offset(p, batch, kv_head, key_row);
        for (int c = tid; c < p.head_dim; c += SCALAR_BWD_THREADS) {
            k_row[c] = to_float(k[kb + c]);
            v_row[c] = to_float(v[vb + c]);
        }
        __syncthreads();

        const QueryRange rows = rows_seeing(p, batch, key);

        float dk_acc[SCALAR_BWD_COLS], dv_acc[SCALAR_BWD_COLS];
#pragma unroll
        for (int m = 0; m < SCALAR_BWD_COLS; ++m) dk_acc[m] = dv_acc[m] = 0.0f;

        for (int h = kv_head * p.q_heads_per_kv; h < (kv_head + 1) * p.q_heads_per_kv; ++h) {
            for (int chunk = rows.first; chunk < rows_end(p, rows); chunk += SCALAR_BWD_THREADS) {
                const int row = chunk + tid;
                float pr = 0.0f, ds = 0.0f;
                if (row < rows_end(p, rows)) {
                    const long long qb = q_offset(p, batch, h, bwd_q_row(p, batch, row));
                    const long long db = do_offset(g, batch, h, bwd_q_row(p, batch, row));
                    float dot = 0.0f, dp = 0.0f;
                    for (int c = 0; c < p.head_dim; ++c) {
                        dot += to_float(q[qb + c]) * k_row[c];
                        dp += to_float(d_o[db + c]) * v_row[c];
                    }
                    const long long r = bwd_lse_offset(p, batch, h, row);
                    prob_and_ds(p, batch, h, row, key, dot, dp, p.lse[r], dvec[r], pr, ds);
                }
                ps[tid] = pr;
                dss[tid] = ds;
                __syncthreads();
                const int n = min(SCALAR_BWD_THREADS, rows_end(p, rows) - chunk);
#pragma unroll
                for (int m = 0; m < SCALAR_BWD_COLS; ++m) {
                    const int c = tid + m * SCALAR_BWD_THREADS;
                    if (c < p.head_dim) {
                        float a = dv_acc[m], b = dk_acc[m];
                        for (int t = 0; t < n; ++t) {
                            a += ps[t] * to_float(d_o[do_offset(g, batch, h, bwd_q_row(p, batch, chunk + t)) + c]);
                            b += dss[t] * to_float(q[q_offset(p, batch, h, bwd_q_row(p, batch, chunk + t)) + c]);
                        }
                        dv_acc[m] = a;
                        dk_acc[m] = b;
                    }
                }
                __syncthreads();  // ps and dss are rewritten by the next chunk
            }
        }
        const long long gk = dk_offset(g, batch, kv_head, key_row), gv = dv_offset(g, batch, kv_head, key_row);
#pragma unroll
        for (int m = 0; m < SCALAR_BWD_COLS; ++m) {
            const int c = tid + m * SCALAR_BWD_THREADS;
            if (c < p.head_dim) {
                dk[gk + c] = from_float(dk_acc[m] * p.softmax_scale);
                dv[gv + c] = from_float(dv_acc[m]);
            }
        }
        __syncthreads();  // k_row and v_row are rewritten for the next key
    }
}

extern "C" __global__ void __launch_bounds__(SCALAR_BWD_THREADS)
bwd_scalar_dq(const __grid_constant__ AttentionParams p, const __grid_constant__ BackwardParams g) {
    __shared__ float q_row[SCALAR_BWD_MAX_HEAD_DIM];
    __shared__ float do_row[SCALAR_BWD_MAX_HEAD_DIM];
    __shared__ float dss[SCALAR_BWD_THREADS];

    const elem_t* q = static_cast<const elem_t*>(p.q);
    const elem_t* k = static_cast<const elem_t*>(p.k);
    const elem_t* v = static_cast<const elem_t*>(p.v);
    const elem_t* d_o = static_cast<const elem_t*>(g.d_o);
    elem_t* dq = static_cast<elem_t*>(g.dq);
    const int tid = threadIdx.x;
    const long long rows = (long long)p.batch * p.heads_q * p.seq_q;

    for (long long row_id = blockIdx.x; row_id < rows; row_id += gridDim.x) {
        const int row = (int)(row_id % p.seq_q);
        const int head = (int)((row_id / p.seq_q) % p.heads_q);
        const int batch = (int)(row_id / ((long long)p.seq_q * p.heads_q));
        const int kv_head = head / p.q_heads_per_kv;
        if (FC_BWD_VARLEN && row >= bwd_len_q(p, batch)) continue;  // past its sequence's queries (varlen): nothing to write
        const int row_stored = bwd_q_row(p, batch, row);
        const long long qb = q_offset(p, batch, head, row_stored), db = do_offset(g, batch, head, row_stored);
        for (int c = tid; c < p.head_dim; c += SCALAR_BWD_THREADS) {
            q_row[c] = to_float(q[qb + c]);
            do_row[c] = to_float(d_o[db + c]);
        }
        __syncthreads();
        const long long r = bwd_lse_offset(p, batch, head, row);
        const float lse = p.lse[r], d_i = p.workspace[r];
        const KeyRange keys = keys_seen(p, batch, row);

        float acc[SCALAR_BWD_COLS];
#pragma unroll
        for (int m = 0; m < SCALAR_BWD_COLS; ++m) acc[m] = 0.0f;
        for (int chunk = keys.lo; chunk < keys.hi; chunk += SCALAR_BWD_THREADS) {
            const int key = chunk + tid;
            float ds = 0.0f;
            if (key < keys.hi) {
                const long long kb = k_offset(p, batch, kv_head, bwd_k_row(p, batch, key));
                const long long vb = v_offset(p, batch, kv_head, bwd_k_row(p, batch, key));
                float dot = 0.0f, dp = 0.0f;
                for (int c = 0; c < p.head_dim; ++c) {
                    dot += q_row[c] * to_float(k[kb + c]);
                    dp += do_row[c] * to_float(v[vb + c]);
                }
                float pr;
                prob_and_ds(p, batch, head, row, key, dot, dp, lse, d_i, pr, ds);
            }
            dss[tid] = ds;
            __syncthreads();
            const int n = min(SCALAR_BWD_THREADS, keys.hi - chunk);
#pragma unroll
            for (int m = 0; m < SCALAR_BWD_COLS; ++m) {
                const int c = tid + m * SCALAR_BWD_THREADS;
                if (c < p.head_dim) {
                    float a = acc[m];
                    for (int t = 0; t < n; ++t)
                        a += dss[t] * to_float(k[k_offset(p, batch, kv_head, bwd_k_row(p, batch, chunk + t)) + c]);
                    acc[m] = a;
                }
            }
            __syncthreads();  // dss is rewritten by the next chunk
        }
        const long long gq = dq_offset(g, batch, head, row_stored);
#pragma unroll
        for (int m = 0; m < SCALAR_BWD_COLS; ++m) {
            const int c = tid + m * SCALAR_BWD_THREADS;
            if (c < p.head_dim) dq[gq + c] = from_float(acc[m] * p.softmax_scale);
        }
        __syncthreads();  // q_row and do_row are rewritten for the next row
    }
}
