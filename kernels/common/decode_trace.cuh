// The decode kernel's optional timeline (FLASHCORE_DECODE_TRACE=1 builds with FC_DECODE_TRACE=1;
// off in every measured build; without it the stamps below compile to nothing).
//
// Thread 0 of every split CTA of a module's `traced` launches stamps %globaltimer (ns) at
// its start and end, and clock64 at the grid-dependency wait, its first tile and the end of its
// key loop, and prints one `dtrace` line when it ends. The combine's first and last blocks print
// a `ctrace` line: when they started, when the wait released them, when they ended. Where a
// launch's time goes across its CTAs (who starts late, who ends early) is what this is for:
// docs/results/2026-12-01-decode-one-sequence-h200/timeline.py summarises the lines.
// The printf at each CTA's end delays its grid's completion, so the combine's release is later
// than in an untraced launch; the split CTAs' own marks are not moved (no stamp in the key loop).
#pragma once

#ifndef FC_DECODE_TRACE
#define FC_DECODE_TRACE 0
#endif
#if FC_DECODE_TRACE
#include "globaltimer.cuh"
#endif

namespace decode_trace {

enum Mark { kStart, kWaited, kFirstTile, kLoopDone, kEnd, kMarks };

#if FC_DECODE_TRACE
// Launches whose CTAs print (counted from 0 per loaded module): past a bench's warm-up.
__device__ __forceinline__ bool traced(unsigned launch) { return launch == 40 || launch == 41; }
__device__ unsigned launches;  // split launches started since the module was loaded

// The launch this grid is (a split's, or for a combine the split's before it): read before this
// grid has completed, so the next split launch cannot have counted itself yet.
__device__ __forceinline__ unsigned this_launch() { return *(volatile unsigned*)&launches - 1; }
#endif

// A split CTA's stamps (every thread keeps them; thread 0 prints).
struct SplitTrace {
#if FC_DECODE_TRACE
    unsigned long long start_ns = 0;
    long long cycles[kMarks] = {};
#endif
    // At the kernel's first instruction.
    __device__ __forceinline__ void start() {
#if FC_DECODE_TRACE
        start_ns = globaltimer_ns();
        cycles[kStart] = clock64();
        if (threadIdx.x == 0 && blockIdx.x == 0) atomicAdd(&launches, 1u);
#endif
    }
    __device__ __forceinline__ void mark(Mark m) {
#if FC_DECODE_TRACE
        cycles[m] = clock64();
#else
        (void)m;
#endif
    }
    // At the kernel's end: `dtrace launch cta sm start_ns end_ns` and the marks' cycles from the
    // start (waited, first tile, loop done, end).
    __device__ __forceinline__ void finish() {
#if FC_DECODE_TRACE
        cycles[kEnd] = clock64();
        const unsigned long long end_ns = globaltimer_ns();
        const unsigned launch = this_launch();
        if (threadIdx.x == 0 && traced(launch))
            printf("dtrace %u %d %u %llu %llu %lld %lld %lld %lld\n", launch, (int)blockIdx.x, sm_id(),
                   start_ns, end_ns, cycles[kWaited] - cycles[kStart], cycles[kFirstTile] - cycles[kStart],
                   cycles[kLoopDone] - cycles[kStart], cycles[kEnd] - cycles[kStart]);
#endif
    }
};

// A combine block's stamps.
struct CombineTrace {
#if FC_DECODE_TRACE
    unsigned long long start_ns = 0, released_ns = 0;
    unsigned launch = 0;
#endif
    __device__ __forceinline__ void start() {
#if FC_DECODE_TRACE
        start_ns = globaltimer_ns();
        launch = this_launch();  // the split launch before it
#endif
    }
    __device__ __forceinline__ void released() {
#if FC_DECODE_TRACE
        released_ns = globaltimer_ns();
#endif
    }
    // `ctrace launch block start_ns released_ns end_ns` from the first and last blocks.
    __device__ __forceinline__ void finish() {
#if FC_DECODE_TRACE
        __syncthreads();
        if (threadIdx.x == 0 && traced(launch) && (blockIdx.x == 0 || blockIdx.x == gridDim.x - 1))
            printf("ctrace %u %d %llu %llu %llu\n", launch, (int)blockIdx.x, start_ns, released_ns, globaltimer_ns());
#endif
    }
};

}  // namespace decode_trace
