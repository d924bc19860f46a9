// The dynamic schedule's global work counter (generation 5, both paths): two workspace words,
// [0] the next work unit and [1] the CTAs done taking. They are zero when a launch starts (the
// plan declares them as LaunchPlan::workspace_counters) and zero again when it ends.
#pragma once

// The next work unit for this CTA; one thread calls it, when the CTA is ready for a unit.
__device__ __forceinline__ int take_work(unsigned* counter) { return (int)atomicAdd(&counter[0], 1u); }

// Called once per CTA, by the thread that takes, after a take returned an index past the end.
// The last CTA to get here resets both words: every other CTA took its last index before
// counting itself done and takes no more, so the next launch on the stream finds them zero.
__device__ __forceinline__ void finish_taking(unsigned* counter) {
    __threadfence();
    if (atomicAdd(&counter[1], 1u) == gridDim.x - 1) {
        atomicExch(&counter[0], 0u);
        atomicExch(&counter[1], 0u);
    }
}
