// Generation 5 (Hopper) forward: the producer warpgroup's parts (FlashAttention-3's mainloop load).
// For each work unit the producer waits for a free Q buffer and loads Q (q_fetch.cuh), then streams
// the unit's K and V tiles into the STAGES-deep ring, each tile once its slot is released
// (load_kv_tile here; where rows live: kv_fetch.cuh). The unit loop is the kernel's; small pages
// take producer_spread.cuh's loop of their own.
#pragma once
#include "config.cuh"
#include "smem_map.cuh"
#include "kv_fetch.cuh"
#include "../common/params.cuh"
#include "../common/seqlen.cuh"
#include "../common/hopper/mbarrier.cuh"
#include "../common/hopper/tma.cuh"

namespace fch {

// The static schedule's first unit is decoded before the barrier setup's sync, by the threads that
// produce, while a thread of another warp sets the barriers up: a CTA with one item waits on the
// producer's first copy, which waited on both in turn (1fd8819). Not in the modes build nor with 24
// producer registers: the unit kept in registers spilled there.
enum : bool { EARLY_FIRST_UNIT = !FC_HOPPER_DYNAMIC && !MODES && PRODUCER_REGS >= 40 };

// The kernel's tensor maps (kernel parameters: their generic addresses).
struct TensorMaps {
    const CUtensorMap *q, *k, *v;
};

// One K/V tile into ring slot `stage` (FlashAttention-3's mainloop load, a tile): key tile kb0 + kb
// of sequence `seq` (batch b), KV head h_kv. Where its rows come from is worked out while the
// slot's previous tile drains; then K once its slot is released, then V (a V tile past the
// sequence's keys completes on the producer's own v_landed barrier first: kv_fetch.cuh).
// Lane `lane` of PRODUCER_LANES; the ring slot is (`stage`, `phase`).
__device__ __forceinline__ void load_kv_tile(const AttentionParams& p, const SeqInfo& seq, int b, int h_kv, int kb0,
                                             int kb, int lane, const SmemMap& s, const TensorMaps& maps, int stage,
                                             unsigned phase, unsigned& landed_phase) {
    const unsigned kf = s.k_full + 8 * stage, ke = s.k_empty + 8 * stage;
    const unsigned vf = s.v_full + 8 * stage, ve = s.v_empty + 8 * stage;
    const int k0 = (kb0 + kb) * BN;
    const KvTile tile = plan_kv_tile(p, seq, b, k0, lane);  // while the slots drain
    mbar_wait(ke, phase ^ 1, TAG_K_EMPTY);
    fetch_kv_tile(p, tile, h_kv, s.k + stage * KV_TILE_BYTES, maps.k, kf, 0, lane, nullptr);
    mbar_wait(ve, phase ^ 1, TAG_V_EMPTY);
    if constexpr (E4M3) {
        fetch_vt_tile(s.v + stage * V_TILE_BYTES, maps.v, vf, k0, h_kv, b, lane);
    } else {
        fetch_kv_tile<NBOX_V>(p, tile, h_kv, s.v + stage * V_TILE_BYTES, maps.v, vf, s.v_landed, lane,
                              &landed_phase);
    }
}

}  // namespace fch
