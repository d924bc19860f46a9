// A value the compiler cannot see through: an empty volatile asm takes it and gives it back, so
// what is derived from it is computed where it is used instead of being hoisted out of the loop
// around it into registers of its own. Each caller says which hoist it stops; most of them spilled.
#pragma once

__device__ __forceinline__ int opaque(int x) {
    asm volatile("" : "+r"(x));
    return x;
}
__device__ __forceinline__ long long opaque(long long x) {
    asm volatile("" : "+l"(x));
    return x;
}
__device__ __forceinline__ unsigned long long opaque(unsigned long long x) {
    asm volatile("" : "+l"(x));
    return x;
}
template <class T>
__device__ __forceinline__ const T* opaque(const T* x) {
    asm volatile("" : "+l"(x));
    return x;
}
