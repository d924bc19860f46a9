// Generation 5 (Hopper) backward: an optional timeline (FLASHCORE_HOPPER_BWD_TRACE, which builds
// with FC_BWD_TRACE; off in every measured build), printed for the module's third launch.
// - 1: the first consumer thread of CTAs 0, gridDim.x / 2 and gridDim.x - 1 stamps %globaltimer
//   at each unit's boundaries: where a unit's time goes outside its steps (dbf6e12).
// - 2: the grid's schedule: every CTA prints a line a unit (up to TRACE_UNITS) with its SM, the
//   unit's index and steps, and its start and end on the globaltimer (absolute ns, one clock for
//   every SM), so idle SMs, the tail and the cost of units without steps can be read off.
#pragma once

#ifndef FC_BWD_TRACE
#define FC_BWD_TRACE 0
#endif

namespace fhb {

enum TraceMark { MARK_UNIT, MARK_KV_LANDED, MARK_FIRST_Q, MARK_STEPS_DONE, MARK_STORED, TRACE_MARKS };

#if FC_BWD_TRACE
constexpr int TRACE_UNITS = 12;
constexpr unsigned TRACE_LAUNCH = 2;
__device__ unsigned trace_launches;  // launches started by CTA 0 since the module was loaded

struct UnitTrace {
    unsigned long long start = 0, t[TRACE_UNITS][TRACE_MARKS] = {};
    long long unit_ids[TRACE_UNITS] = {};
    int steps[TRACE_UNITS] = {};
    bool on = false;

    __device__ static unsigned long long now() {
        unsigned long long v;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(v));
        return v;
    }
    __device__ void begin(bool traced_thread) {
        on = traced_thread && (FC_BWD_TRACE >= 2 || blockIdx.x == 0 || blockIdx.x == gridDim.x / 2 ||
                               blockIdx.x == gridDim.x - 1);
        if (on && blockIdx.x == 0) atomicAdd(&trace_launches, 1u);
        if (on) start = now();
    }
    __device__ void begin_unit(int unit, long long id) {
        if (on && unit < TRACE_UNITS) unit_ids[unit] = id;
        mark(unit, MARK_UNIT);
    }
    __device__ void mark(int unit, TraceMark m) {
        if (on && unit < TRACE_UNITS) t[unit][m] = now();
    }
    __device__ void count_step(int unit) {
        if (on && unit < TRACE_UNITS) ++steps[unit];
    }
    // At the CTA's end: CTA 0 starts first (on a persistent grid every CTA is resident; on one CTA
    // a unit the hardware issues CTAs in order), so its increment has happened and the count is the
    // launch's number plus one. A CTA that ended before CTA 0 started would print nothing.
    __device__ void print(int units) {
        if (!on || *(volatile unsigned*)&trace_launches != TRACE_LAUNCH + 1) return;
        if (FC_BWD_TRACE >= 2) {
            unsigned sm;
            asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
            for (int u = 0; u < min(units, TRACE_UNITS); ++u)
                printf("bwd-sched cta %d sm %u unit %lld steps %d start %llu end %llu\n", (int)blockIdx.x, sm,
                       unit_ids[u], steps[u], t[u][MARK_UNIT], t[u][MARK_STORED]);
            return;
        }
        for (int u = 0; u < min(units, TRACE_UNITS); ++u)
            printf("bwd-trace cta %d unit %d at %llu us: kv +%llu ns, first q +%llu ns, %d steps %llu ns, "
                   "stores %llu ns\n",
                   (int)blockIdx.x, u, (t[u][MARK_UNIT] - start) / 1000, t[u][MARK_KV_LANDED] - t[u][MARK_UNIT],
                   t[u][MARK_FIRST_Q] - t[u][MARK_UNIT], steps[u], t[u][MARK_STEPS_DONE] - t[u][MARK_FIRST_Q],
                   t[u][MARK_STORED] - t[u][MARK_STEPS_DONE]);
    }
};
#else
struct UnitTrace {
    __device__ void begin(bool) {}
    __device__ void begin_unit(int, long long) {}
    __device__ void mark(int, TraceMark) {}
    __device__ void count_step(int) {}
    __device__ void print(int) {}
};
#endif

}  // namespace fhb
