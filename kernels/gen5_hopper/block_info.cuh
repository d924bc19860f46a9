// Generation 5 (Hopper) forward: block info, which rows and keys a work item sees (the dense
// build's form the compiler can see through, or seqlen.cuh's general form with the modes).
#pragma once
#include "config.cuh"
#include "../common/params.cuh"
#include "../common/masking.cuh"
#include "../common/seqlen.cuh"
#include "../common/tensor_index.cuh"

namespace fch {

// Block info for this build: the general form (seqlen.cuh) with FC_HOPPER_MODES, else the dense
// one the compiler can see through (lengths from the parameter block, keys [0, causal end)).
__device__ __forceinline__ SeqInfo block_seq(const AttentionParams& p, int b) {
    if constexpr (MODES) return seq_info(p, b);
    return seq_of_lengths(b, p.seq_q, p.seq_k);
}
__device__ __forceinline__ KeyRange block_keys(const AttentionParams& p, const SeqInfo& seq, int row) {
    if constexpr (MODES) return key_range(p, seq, row);
    KeyRange r;
    r.lo = 0;
    r.hi = causal_key_end(p, row);
    return r;
}
// Where row `row`'s LSE goes. The dense build must not test `cu_seqlens_q` (seq_lse_offset does):
// that parameter line is read nowhere else there, so the test is a cold constant-cache miss on the
// epilogue's critical path (stall samples, 2026-11-25; 17a898f). Equal in a dense problem, whose
// cu_seqlens_q is absent by validation.
__device__ __forceinline__ long long block_lse_offset(const AttentionParams& p, const SeqInfo& seq, int b, int h,
                                                      int row) {
    if constexpr (MODES) return seq_lse_offset(p, seq, b, h, row);
    return lse_offset(p, b, h, row);
}

}  // namespace fch
