// 2^x on the FMA and integer pipes instead of the XU (MUFU) pipe: for a kernel whose exponentials
// outrun the XU pipe's 16 lanes an SM (the Hopper e4m3 forward: its GEMMs take half the time the
// 16-bit ones did, its softmax as long). FlashAttention 4 does the same on Blackwell.
//
// x = j + f with j = round(x) (the 1.5·2^23 trick: adding it leaves round(x) in the low mantissa
// bits) and f in [-0.5, 0.5]; 2^f by a cubic fitted to the relative error on that interval
// (max 1.0e-4, mean 2e-5: far below the 2^-4 of the e4m3 P it feeds); 2^j multiplied in as a float
// built in the exponent field. For x <= 8 (the Hopper softmax's largest, P_LOG2_SCALE):
//   * x = -inf (a masked key) and anything below -127 give +0 (the clamp makes 2^j = 0);
//   * NaN stays NaN (max.NaN keeps it, and p · 2^j of a NaN p is NaN);
//   * x in (-127, -126] may give a denormal where ex2.approx.ftz gives 0: both are 0 to the e4m3
//     P and nothing to l.
#pragma once

__device__ __forceinline__ float exp2_poly(float x) {
    float c;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(c) : "f"(x), "f"(-127.f));
    // (_rn intrinsics: never contracted or reassociated, which would undo the rounding trick)
    const float t = __fadd_rn(c, 12582912.f);  // 1.5 * 2^23
    const float j = __fsub_rn(t, 12582912.f);  // round(c)
    const float f = __fsub_rn(c, j);
    const float p = fmaf(fmaf(fmaf(0.05500891f, f, 0.24221107f), f, 0.69328294f), f, 1.f);
    // round(c) + 127 into the exponent field: t's low bits hold round(c) (mod 2^9 after the
    // shift, enough for -127 .. 8), 0x4B400000 << 23 wraps to 0.
    const float scale = __int_as_float((__float_as_int(t) << 23) + (127 << 23));
    return p * scale;
}
