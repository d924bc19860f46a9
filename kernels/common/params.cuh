// The one parameter block every flashcore kernel takes, by value.
// Mirrored field for field by `flashcore_core::launch::AttentionParams` (Rust, #[repr(C)]):
// change both together.
#pragma once

struct AttentionParams {
    const void* q;  // [batch, heads_q, seq_q, head_dim] addressed through the strides below
    const void* k;  // [batch, heads_kv, seq_k, head_dim]
    const void* v;  // [batch, heads_kv, seq_k, head_dim]
    void* o;        // [batch, heads_q, seq_q, head_dim], same dtype as q
    float* lse;     // [batch, heads_q, seq_q] contiguous ([heads_q, total_q] for packed Q), natural-log
                    // log-sum-exp of the logits
    float* workspace;  // scratch owned by the host for multi-pass plans (split-KV); may be null

    // Strides in elements (not bytes; e4m3 K/V's elements are bytes). The head_dim stride is always 1.
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
    int total_q;     // packed Q: rows of the packed tensor (cu_seqlens_q[batch]), else 0

    // ---- inference modes (docs/MODES.md); all null / off for a dense problem ----
    const int* cu_seqlens_q;   // [batch + 1]: Q/O are packed [total_q, heads, d] (batch stride 0)
    const int* cu_seqlens_k;   // [batch + 1]: K/V are packed [total_k, heads_kv, d]
    const int* seqused_k;      // [batch]: keys of sequence b are 0 .. seqused_k[b] + seqlen_new
    const int* block_table;    // [batch, max_blocks_per_seq]: paged K/V, "batch" stride = one block
    const float* alibi_slopes; // [heads_q] or [batch, heads_q]
    int alibi_batch_stride;    // 0 for [heads_q], heads_q for [batch, heads_q]
    int window_left;           // -1: unbounded
    int window_right;          // -1: unbounded (causal problems use 0 whatever this says)
    float softcap_pre;         // softmax_scale / softcap, 0 without softcap
    float softcap_log2;        // softcap * log2(e)
    int block_size;            // rows per page (paged K/V), else 0
    int max_blocks_per_seq;    // block_table row length
    int seqlen_new;            // rows appended at seqused_k before this launch
    unsigned block_size_magic; // ceil(2^31 / (block_size / 16)): page_row's division by the block size
    int num_blocks;            // paged K/V: pages in the pool (every valid table entry is below it), else 0
    const int* mm_prefix_ranges;  // [batch, mm_prefix_n, 2] key ranges [start, end) (FC_MM_PREFIX builds)
    int mm_prefix_n;              // ranges per sequence, else 0

    // ---- e4m3 K/V (Modes::kv_fp8): the true value of a stored byte is its e4m3 value times the
    // factor of its (batch b, KV head h_kv): k_descale[b * descale_batch_stride + h_kv * descale_head_stride]
    const float* k_descale;    // [1], [heads_kv] or [batch, heads_kv]; null unless K/V are e4m3
    const float* v_descale;    // the same shape as k_descale
    int descale_batch_stride;  // heads_kv for [batch, heads_kv], else 0
    int descale_head_stride;   // 1 for [heads_kv] and [batch, heads_kv], 0 for [1]

    // ---- e4m3 Q (Modes::q_fp8): Q's factors, k_descale's shape and strides (indexed by the
    // query head's KV head). Last, so that every field before it keeps its offset.
    const float* q_descale;    // null unless Q is e4m3
};

// The Rust mirror asserts the same size (crates/core/src/params.rs).
static_assert(sizeof(AttentionParams) == 320, "AttentionParams must match its Rust mirror");
