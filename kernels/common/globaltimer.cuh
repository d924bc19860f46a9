// The GPU's global nanosecond timer (PTX %globaltimer; it ticks coarsely, about a microsecond on
// Hopper) and the SM a thread runs on: for the debug builds' bounded waits and the timelines,
// which line CTAs on different SMs up (clock64 counts one SM's cycles only).
#pragma once

__device__ __forceinline__ unsigned long long globaltimer_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ unsigned sm_id() {
    unsigned v;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(v));
    return v;
}
