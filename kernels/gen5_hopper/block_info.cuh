// Generation 5 (Hopper) forward: block info, which rows and keys a work item sees (the dense
// build's form the compiler can see through, or seqlen.cuh's general form with the modes).
#pragma once

namespace fch {

// Block info for this build: the general form (seqlen.cuh) with FC_HOPPER_MODES, else the dense
// one the compiler can see through (lengths from the parameter block, keys [0, causal end)).
__device__ __forceinline__ SeqInfo block_seq(const AttentionParams& p, int b) {
    if constexpr (MODES) return seq_info(p, b);
    SeqInfo s;
    s.len_q = p.seq_q;
    s.len_k = p.seq_k;
    s.q_row0 = 0;
    s.k_row0 = 0;
    return s;
}
__device__ __forceinline__ KeyRange block_keys(const AttentionParams& p, const SeqInfo& seq, int row) {
    if constexpr (MODES) return key_range(p, seq, row);
    KeyRange r;
    r.lo = 0;
    r.hi = causal_key_end(p, row);
    return r;
}

}  // namespace fch
