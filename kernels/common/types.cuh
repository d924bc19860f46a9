// Element type selection: every kernel module is compiled once per dtype with
// -DFC_DTYPE_F16 or -DFC_DTYPE_BF16 (the host adds it), so kernels name one type, `elem_t`.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>

// NVRTC has no <math.h>: spell infinity through its bit pattern.
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

// FC_ELEM_PTX: the element type's name in the PTX of the tensor-core instructions (mma.sync,
// wgmma.mma_async).
#if defined(FC_DTYPE_F16)
#define FC_ELEM_PTX "f16"
typedef __half elem_t;
typedef __half2 elem2_t;
__device__ __forceinline__ float to_float(elem_t x) { return __half2float(x); }
__device__ __forceinline__ elem_t from_float(float x) { return __float2half_rn(x); }
__device__ __forceinline__ elem2_t pack2(float lo, float hi) { return __floats2half2_rn(lo, hi); }
#elif defined(FC_DTYPE_BF16)
#define FC_ELEM_PTX "bf16"
typedef __nv_bfloat16 elem_t;
typedef __nv_bfloat162 elem2_t;
__device__ __forceinline__ float to_float(elem_t x) { return __bfloat162float(x); }
__device__ __forceinline__ elem_t from_float(float x) { return __float2bfloat16_rn(x); }
__device__ __forceinline__ elem2_t pack2(float lo, float hi) { return __floats2bfloat162_rn(lo, hi); }
#else
#error "compile with -DFC_DTYPE_F16 or -DFC_DTYPE_BF16"
#endif

// Packs two floats into the 32-bit register an mma.sync A/B operand expects.
__device__ __forceinline__ unsigned pack2_u32(float lo, float hi) {
    elem2_t v = pack2(lo, hi);
    return *reinterpret_cast<unsigned*>(&v);
}
