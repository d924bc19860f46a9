// The one parameter block every flashcore kernel takes, by value.
// Mirrored field for field by `flashcore_core::launch::AttentionParams` (Rust, #[repr(C)]):
// change both together.
#pragma once

struct AttentionParams {
    const void* q;  // [batch, heads_q, seq_q, head_dim] addressed through the strides below
    const void* k;  // [batch, heads_kv, seq_k, head_dim]
    const void* v;  // [batch, heads_kv, seq_k, head_dim]
    void* o;        // [batch, heads_q, seq_q, head_dim], same dtype as q
    float* lse;     // [batch, heads_q, seq_q] contiguous, natural-log log-sum-exp of the scaled scores
    float* workspace;  // scratch owned by the host for multi-pass plans (split-KV); may be null

    // Strides in elements (not bytes). The head_dim stride is always 1.
    long long q_batch_stride, q_head_stride, q_row_stride;
    long long k_batch_stride, k_head_stride, k_row_stride;
    long long v_batch_stride, v_head_stride, v_row_stride;
    long long o_batch_stride, o_head_stride, o_row_stride;

    int batch;
    int heads_q;
    int heads_kv;
    int seq_q;
    int seq_k;
    int head_dim;
    int q_heads_per_kv;  // heads_q / heads_kv (GQA group size)
    int causal;          // bottom-right aligned: query i sees key j iff j <= i + (seq_k - seq_q)

    float softmax_scale;  // multiplies q·k
    float scale_log2;     // softmax_scale * log2(e), for exp2-based softmax

    int num_splits;  // split-KV plans: how many key ranges each (batch, head, q tile) is cut into
    int reserved;    // keeps the struct size a multiple of 8 on both sides
};
