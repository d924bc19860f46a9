// Generation 5 (Hopper) forward: the split-KV epilogue (FC_HOPPER_SPLIT_KV): partial O and
// (m, l) per split, the last-arriving combine; and the weights with which every merge of two
// partial softmaxes (this combine, the key splits' merges) weighs its parts.
#pragma once
#include "config.cuh"
#include "tile_scheduler.cuh"
#include "../common/params.cuh"
#include "../common/padded_head.cuh"
#include "../common/types.cuh"
#include "../common/masking.cuh"
#include "../common/tensor_index.cuh"

namespace fch {

// Two partial softmaxes of the same rows, a's and b's (m the raw running max, l the row sum
// relative to it), weighed into one with the online softmax's rules: a part with no finite max
// weighs 0, and no -inf - -inf is formed; the products are rounded on their own (__fmul_rn, no
// contraction into an FMA), so an unchanged max rescales by exactly 1. Every merge of parts goes
// through here: the split-KV combine (its running part as a) and the key splits' merges (the
// lower keys' part as a, so that whoever merges the same parts gets the same bits).
struct PartWeights {
    float wa, wb;  // what a's and b's O (and l) are multiplied by
    float m, l;    // the merged part's max and sum
};
__device__ __forceinline__ PartWeights part_weights(float ma, float la, float mb, float lb, float c) {
    PartWeights w;
    w.m = fmaxf(ma, mb);
    const float shift = w.m == -INFINITY ? 0.f : __fmul_rn(w.m, c);
    w.wa = ma == -INFINITY ? 0.f : exp2f(__fmul_rn(ma, c) - shift);
    w.wb = mb == -INFINITY ? 0.f : exp2f(__fmul_rn(mb, c) - shift);
    w.l = __fadd_rn(__fmul_rn(la, w.wa), __fmul_rn(lb, w.wb));
    return w;
}

// ---- split-KV combine (FC_HOPPER_SPLIT_KV) -----------------------------------------------------
// Protocol, memory-ordering argument and workspace layout: docs/generations/gen5-split-kv.md.
#if FC_HOPPER_SPLIT_KV
// Workspace layout, in 4-byte words from p.workspace (hopper.rs::split_workspace_f32 repeats it):
//   [0, ctr_words)  arrival counters (u32), one per (item t, consumer warpgroup cw, warp):
//                   word t*8 + cw*4 + warp; ctr_words = items*8 rounded up to 32 (128 bytes).
//                   Zero when a launch starts (the host's side of the workspace contract on
//                   LaunchPlan: it zeroes the buffer when it allocates it, not per call); the
//                   last arriver puts its counter back to zero, so they end zero too (ours).
//   then one slot of SPLIT_SLOT_FLOATS per (item t, split s, cw), slot index (t*S + s)*2 + cw:
//     O part  [0, 64*DV)       float4 number j*128 + tid = this thread's o[4j .. 4j+3]
//                             (unnormalised: sum over the split's keys of p * v, p relative to m)
//     (m, l)  [64*DV, 64*DV+512) float4 number tid = (m[0], m[1], l[0], l[1]) of the thread's two
//                             rows (raw-score running max; quad-reduced sum), the same in a quad.
// The combining warp reads exactly the (row, col) elements it owns itself, from every split's slot.
constexpr int SPLIT_CTRS_PER_ITEM = 8;  // 2 consumer warpgroups x 4 warps
constexpr int SPLIT_SLOT_FLOATS = WG_M * DV + 4 * 128;
static_assert(SPLIT_SLOT_FLOATS % 32 == 0, "slots stay 128-byte aligned");

// L2-only (.cg) 16-byte global accesses: partials are written by one SM and read by another,
// never through a possibly stale L1 line.
__device__ __forceinline__ void st_cg_f4(float* ptr, float a, float b, float c, float d) {
    asm volatile("st.global.cg.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "f"(a), "f"(b), "f"(c), "f"(d)
                 : "memory");
}
__device__ __forceinline__ float4 ld_cg_f4(const float* ptr) {
    float4 v;
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(ptr)
                 : "memory");
    return v;
}
// One arrival: release (our partials before the increment) and acquire (the other arrivers'
// partials before our reads), gpu scope. Returns the count before the increment.
__device__ __forceinline__ unsigned atom_add_acq_rel_gpu(unsigned* ptr, unsigned v) {
    unsigned old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(ptr), "r"(v) : "memory");
    return old;
}
__device__ __forceinline__ void st_relaxed_gpu_u32(unsigned* ptr, unsigned v) {
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(ptr), "r"(v) : "memory");
}

// One step of the combine, for split partial (ml = (m0, m1, l0, l1), v = this thread's O elements
// of that split), in split order 0..S-1: the online softmax's update across splits. The running
// max mx (raw scores) and the shift follow the kernel's -inf rule (a row with no finite max yet
// shifts by 0; a running or split max of -inf weighs 0), so no -inf - -inf is ever formed. The
// products are rounded on their own (__fmul_rn, no contraction into an FMA): an unchanged max
// rescales by exactly 1 and the split holding the max weighs exactly 1.
__device__ __forceinline__ void combine_step(float (&o)[DV / 2], float (&lsum)[2], float (&mx)[2], const float4& ml,
                                             const float4 (&v)[DV / 8], float c) {
    float scale[2], wt[2];
    const float ms[2] = {ml.x, ml.y};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        // (The sums are updated below with FMAs, as this combine was verified; pw.l is unused.)
        const PartWeights pw = part_weights(mx[r], 0.f, ms[r], 0.f, c);
        scale[r] = pw.wa;
        wt[r] = pw.wb;
        mx[r] = pw.m;
    }
    lsum[0] = fmaf(wt[0], ml.z, lsum[0] * scale[0]);
    lsum[1] = fmaf(wt[1], ml.w, lsum[1] * scale[1]);
#pragma unroll
    for (int j = 0; j < DV / 8; ++j) {
        o[4 * j + 0] = fmaf(wt[0], v[j].x, o[4 * j + 0] * scale[0]);
        o[4 * j + 1] = fmaf(wt[0], v[j].y, o[4 * j + 1] * scale[0]);
        o[4 * j + 2] = fmaf(wt[1], v[j].z, o[4 * j + 2] * scale[1]);
        o[4 * j + 3] = fmaf(wt[1], v[j].w, o[4 * j + 3] * scale[1]);
    }
}

// The epilogue of a unit when p.num_splits > 1, per warp (16 rows): publish this split's partial,
// count the arrival, and if this warp is the last of the item's S units to arrive, combine all S
// partials of its rows in split order 0..S-1 (deterministic whoever is last) and write O and LSE
// with the unsplit epilogue's conventions. Never waits for another CTA.
// Called by all 32 lanes of the warp (the arrival and the branch on it are warp-uniform).
__device__ __forceinline__ void split_epilogue(const AttentionParams& p, int n_items, const Work& w, int cw, int tid,
                                               float (&o)[DV / 2], const float (&m)[2], const float (&l)[2], int grow0,
                                               int col_in_block) {
    const int ns = p.num_splits;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const long long ctr_words = ((long long)n_items * SPLIT_CTRS_PER_ITEM + 31) & ~31ll;
    unsigned* ctr = reinterpret_cast<unsigned*>(p.workspace) + (long long)w.item * SPLIT_CTRS_PER_ITEM + cw * 4 + warp;
    // Slot of split s: slots + (slot0 + 2 s) * SPLIT_SLOT_FLOATS.
    const float* slots = p.workspace + ctr_words;
    const long long slot0 = (long long)w.item * ns * 2 + cw;
    float* mine = p.workspace + ctr_words + (slot0 + 2ll * w.split) * SPLIT_SLOT_FLOATS;

    // 1. This split's partial (every lane, its own elements; coalesced 512-byte runs per warp).
#pragma unroll
    for (int j = 0; j < DV / 8; ++j)
        st_cg_f4(mine + 4 * (j * 128 + tid), o[4 * j + 0], o[4 * j + 1], o[4 * j + 2], o[4 * j + 3]);
    st_cg_f4(mine + WG_M * DV + 4 * tid, m[0], m[1], l[0], l[1]);

    // 2. Publish: each lane's stores are ordered before the warp barrier by its own fence, the
    //    barrier orders all 32 lanes before lane 0's acq_rel increment (the release).
    __threadfence();
    __syncwarp();
    unsigned old = 0;
    if (lane == 0) old = atom_add_acq_rel_gpu(ctr, 1u);
    old = __shfl_sync(0xffffffffu, old, 0);
    if (old != (unsigned)(ns - 1)) return;  // not the last: another warp combines (warp-uniform)

    // 3. Last arriver: lane 0's increment read the S-1 earlier increments (acquire); the warp
    //    barrier and each lane's fence order every lane's loads below after it.
    __syncwarp();
    __threadfence();
    // One pass over the splits in order (the result does not depend on which warp is last); a
    // split's loads do not depend on the previous split's math, so two splits' loads are in
    // flight at once (more would not fit the 168 registers ptxas compiles the kernel to).
    const float c = p.scale_log2;
    float mx[2] = {-INFINITY, -INFINITY};
    float lsum[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < DV / 2; ++i) o[i] = 0.f;
#pragma unroll 2
    for (int sp = 0; sp < ns; ++sp) {
        const float* part = slots + (slot0 + 2ll * sp) * SPLIT_SLOT_FLOATS;
        const float4 ml = ld_cg_f4(part + WG_M * DV + 4 * tid);
        float4 v[DV / 8];
#pragma unroll
        for (int j = 0; j < DV / 8; ++j) v[j] = ld_cg_f4(part + 4 * (j * 128 + tid));
        combine_step(o, lsum, mx, ml, v, c);
    }

    // 4. O and LSE exactly as the unsplit epilogue (l = 0 rules of masking.cuh).
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int grow = grow0 + 8 * r;
        if (grow < p.seq_q) {
            const float inv = row_sum_inverse(p, grow, lsum[r]);
            elem_t* orow = reinterpret_cast<elem_t*>(p.o) + o_offset(p, w.b, w.h, grow);
#pragma unroll
            for (int j = 0; j < DV / 8; ++j) {
                if (chunk_in_head<PADDED_V>(p.head_dim, j))
                    *reinterpret_cast<elem2_t*>(orow + 8 * j + col_in_block) =
                        pack2(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
            }
            if ((lane & 3) == 0) {
                p.lse[lse_offset(p, w.b, w.h, grow)] =
                    row_lse(p, grow, lsum[r], (mx[r] * c + __log2f(lsum[r])) * 0.69314718055994531f);
            }
        }
    }

    // 5. All S arrivals of this counter have happened (we saw S-1 before ours): nobody touches it
    //    again in this launch, and the next launch is stream-ordered after this one.
    if (lane == 0) st_relaxed_gpu_u32(ctr, 0u);
}
#else
// (No split-KV path in this build: the epilogue never takes this call; see epilogue.cuh.)
__device__ __forceinline__ void split_epilogue(const AttentionParams&, int, const Work&, int, int, float (&)[DV / 2],
                                               const float (&)[2], const float (&)[2], int, int) {}
#endif

}  // namespace fch
