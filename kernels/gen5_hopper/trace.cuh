// Generation 5 (Hopper) forward: an optional timeline (FLASHCORE_HOPPER_TRACE=1, which builds with
// FC_HOPPER_TRACE=1; off in every measured build). Thread 0 of each consumer warpgroup of CTAs 0,
// gridDim.x / 2 and gridDim.x - 1 stamps clock64 at the CTA's start, after the grid-dependency
// wait and at each unit's boundaries, in the module's third launch: where a unit's time goes
// outside its key loop (1016eb2). The stamps go straight to a module variable; the plan's second
// launch, attention_persistent_hopper_trace_print (one thread, same module), prints them once.
// What the stamps must not change (2026-11-26): a printf in the kernel made ptxas serialize its
// wgmma pipeline (C7510: every wgmma waited for at once), and stamps inside the key loop moved the
// softmax above the wait for PV (a store there is a point ptxas does not hoist that wait across),
// so there are none in the loop. Cycles, since %globaltimer ticks in microseconds; the CTA's start
// is also recorded in %globaltimer ns to line CTAs up.
#pragma once

#ifndef FC_HOPPER_TRACE
#define FC_HOPPER_TRACE 0
#endif
#if FC_HOPPER_TRACE
#include "../common/globaltimer.cuh"
#endif

namespace fch {

enum TraceMark { MARK_BEGIN, MARK_Q_READY, MARK_K0_READY, MARK_S0_DONE, MARK_LOOP_DONE, MARK_STORED, TRACE_MARKS };

#if FC_HOPPER_TRACE
constexpr int TRACE_UNITS = 10;
constexpr int TRACE_CTAS = 3, TRACE_WGS = 3;  // CTAs 0, gridDim.x / 2, gridDim.x - 1; consumer warpgroups
constexpr unsigned TRACE_LAUNCH = 3;         // the launch whose stamps are kept (counted from 1)

struct TraceRecord {
    long long entry, waited, end;  // clock64
    unsigned long long entry_ns, end_ns;
    int cta, units;
    int tiles[TRACE_UNITS];
    long long t[TRACE_UNITS][TRACE_MARKS];
};
__device__ unsigned trace_launches;  // launches started by CTA 0 since the module was loaded
__device__ int trace_printed;
__device__ TraceRecord trace_records[TRACE_CTAS][TRACE_WGS];

struct UnitTrace {
    TraceRecord* rec = nullptr;  // this thread's record, in the kept launch only
    long long entry = 0;
    unsigned long long entry_ns = 0;
    int slot = -1;

    // At the kernel's first instruction (every thread calls it; the traced ones keep the stamps).
    __device__ void begin(bool traced_thread) {
        const int b = blockIdx.x;
        slot = b == 0 ? 0 : b == (int)gridDim.x / 2 ? 1 : b == (int)gridDim.x - 1 ? 2 : -1;
        if (!traced_thread || slot < 0) {
            slot = -1;
            return;
        }
        entry = clock64();
        entry_ns = globaltimer_ns();
        if (b == 0 && threadIdx.x == 128) atomicAdd(&trace_launches, 1u);
    }
    // After the grid-dependency wait (and the setup's __syncthreads): CTA 0's count is visible in
    // CTA 0, and in practice in the other CTAs of its launch, which started beside it.
    __device__ void after_wait() {
        if (slot < 0 || *(volatile unsigned*)&trace_launches != TRACE_LAUNCH) return;
        rec = &trace_records[slot][threadIdx.x / 128 - 1];
        rec->entry = entry;
        rec->entry_ns = entry_ns;
        rec->waited = clock64();
        rec->cta = blockIdx.x;
    }
    __device__ void mark(int unit, TraceMark m) {
        if (rec && unit < TRACE_UNITS) rec->t[unit][m] = clock64();
    }
    __device__ void set_tiles(int unit, int n) {
        if (rec && unit < TRACE_UNITS) rec->tiles[unit] = n;
    }
    // At the warpgroup's end.
    __device__ void finish(int units) {
        if (!rec) return;
        rec->end = clock64();
        rec->end_ns = globaltimer_ns();
        rec->units = units;
    }
};

// The printer's body (one thread): the kept launch's records, once.
__device__ __forceinline__ void print_trace() {
    if (*(volatile unsigned*)&trace_launches < TRACE_LAUNCH || trace_printed) return;
    trace_printed = 1;
    for (int c = 0; c < TRACE_CTAS; ++c)
        for (int w = 0; w < TRACE_WGS; ++w) {
            const TraceRecord& r = trace_records[c][w];
            if (r.entry == 0) continue;
            printf("fwd-trace launch %u cta %d wg %d entry %llu ns: wait done +%lld cyc, end +%lld cyc = %llu ns\n",
                   TRACE_LAUNCH, r.cta, w + 1, r.entry_ns, r.waited - r.entry, r.end - r.entry, r.end_ns - r.entry_ns);
            for (int u = 0; u < min(r.units, TRACE_UNITS); ++u)
                printf("fwd-trace cta %d wg %d unit %d (%d tiles) begin +%lld: q %lld, k0 %lld, s0 %lld, loop %lld, "
                       "stored %lld cyc\n",
                       r.cta, w + 1, u, r.tiles[u], r.t[u][MARK_BEGIN] - r.entry,
                       r.t[u][MARK_Q_READY] - r.t[u][MARK_BEGIN], r.t[u][MARK_K0_READY] - r.t[u][MARK_Q_READY],
                       r.t[u][MARK_S0_DONE] - r.t[u][MARK_K0_READY], r.t[u][MARK_LOOP_DONE] - r.t[u][MARK_S0_DONE],
                       r.t[u][MARK_STORED] - r.t[u][MARK_LOOP_DONE]);
        }
}
#else
struct UnitTrace {
    __device__ void begin(bool) {}
    __device__ void after_wait() {}
    __device__ void mark(int, TraceMark) {}
    __device__ void set_tiles(int, int) {}
    __device__ void finish(int) {}
};
#endif

}  // namespace fch
