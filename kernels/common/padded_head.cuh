// The columns of a padded head dim. One build of a kernel, at head dim FC_HEAD_DIM, serves every
// problem head dim (p.head_dim, a multiple of 8) that rounds up to it, as FlashAttention-2 rounds:
// its tiles hold the build's columns, of which only the first head_dim are the tensors'. Loads
// zero-fill the others (a zero column adds nothing to any product) and stores skip them, so nothing
// past a row's head_dim is read or written. kPadded is the build's switch (FC_HOPPER_PADDED_HEAD,
// FC_PORTABLE_PAD_D, FC_BWD_PADDED_HEAD); where it is false the tests below are constants and
// the build's code is what it was without them.
#pragma once

// Whether 16-byte chunk `c` of a row (columns 8c .. 8c + 7) is one of the problem's head_dim
// columns (a padded head dim ends at a chunk).
template <bool kPadded>
__device__ __forceinline__ bool chunk_in_head(int head_dim, int c) {
    return !kPadded || 8 * c < head_dim;
}

// The 16-byte chunks of a row in memory: the build's kBuildDim / 8, or head_dim / 8 when padded.
template <bool kPadded, int kBuildDim>
__device__ __forceinline__ int head_chunks(int head_dim) {
    return kPadded ? head_dim / 8 : kBuildDim / 8;
}
