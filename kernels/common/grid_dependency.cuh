// Programmatic dependent launch (PTX ISA: griddepcontrol, sm_90). A kernel launched with
// programmatic stream serialization (KernelLaunch::programmatic_launch; in a graph, a
// programmatic edge) may start while the stream's previous kernel still runs: its CTAs can set up
// shared memory and barriers, but must wait for that kernel's completion and memory before their
// first global-memory access. Without the launch attribute both instructions do nothing; below
// sm_90 they are not emitted (the plans launch programmatically on sm_90 and later only).
#pragma once

// Lets the stream's next kernel (if launched programmatically) start its CTAs once every CTA of
// this grid has signalled or exited; it does not make this grid's writes visible to it.
__device__ __forceinline__ void griddep_launch_dependents() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Waits until the grids this one depends on have completed and their memory is visible.
__device__ __forceinline__ void griddep_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
