//! Batch-invariant plans (`docs/MODES.md`, *Batch invariance*) choose everything that sets the
//! order a row's keys are summed in from the sequence alone: these tests plan the same sequence
//! in batches of every size, on devices of several SM counts, and compare the plans' arithmetic.
//! (The device side, the bits themselves, is `cargo xtask reliability --only batchinv`.)

use flashcore_core::{
    Attention, AttentionProblem, DType, DeviceInfo, KvStorage, LaunchPlan, Modes,
};
use flashcore_persistent::decode::{self, DecodeConfig};
use flashcore_persistent::{PersistentHopper, PersistentPortable};

/// Defines that only schedule work, stage memory or size the ring: they move no value. The
/// shared-memory epilogue is here too (each row's arithmetic is the same code in either), and so
/// is the warpgroup count (the q tile's height: the key tiles a causal tile walks past a row's
/// diagonal leave its max alone, and the consumer rescales an unchanged max by exactly 1); the
/// `batchinv` check's dense scenarios run them against each other on the GPU.
const SCHEDULE_ONLY: &[&str] = &[
    "FC_HOPPER_DYNAMIC",
    "FC_HOPPER_HEAD_MAJOR",
    "FC_HOPPER_L2_SECTION_BYTES",
    "FC_HOPPER_PREFETCH",
    "FC_HOPPER_SMEM_EPILOGUE",
    "FC_HOPPER_CONSUMER_REGS",
    "FC_HOPPER_CONSUMER_WGS",
    "FC_HOPPER_Q_STAGES",
    "FC_HOPPER_STAGES",
    "FC_HOPPER_SPREAD_PAGES",
    "FC_PORTABLE_DYNAMIC",
    "FC_PORTABLE_L2_SECTION_BYTES",
    "FC_PORTABLE_Q_REG_SLICES",
    "FC_PORTABLE_Q_STAGES",
    "FC_PORTABLE_STAGES",
    "FC_PORTABLE_MIN_BLOCKS",
    "FC_DECODE_PREFETCH",
    "FC_DECODE_STAGES",
    "FC_DECODE_MIN_BLOCKS",
    "FC_DECODE_WS_OFFSET",
];

/// What of a plan decides the arithmetic: each launch's kernel and its value-moving defines.
fn arithmetic(plan: &LaunchPlan) -> Vec<(String, Vec<(String, String)>)> {
    plan.launches
        .iter()
        .map(|l| {
            let mut d: Vec<(String, String)> = l
                .defines
                .iter()
                .filter(|(k, _)| !SCHEDULE_ONLY.contains(&k.as_str()))
                .cloned()
                .collect();
            d.sort();
            (format!("{}:{}", l.source, l.entry), d)
        })
        .collect()
}

fn devices() -> Vec<DeviceInfo> {
    [66, 114, 132]
        .into_iter()
        .map(|sm_count| DeviceInfo {
            sm_count,
            ..DeviceInfo::synthetic_h100()
        })
        .collect()
}

fn dense(batch: usize, heads: usize, seq: usize, d: usize, causal: bool) -> AttentionProblem {
    AttentionProblem::new(batch, heads, seq, d)
        .with_dtype(DType::Bf16)
        .with_causal(causal)
        .with_batch_invariant(true)
}

fn paged_decode(batch: usize, keys: usize) -> AttentionProblem {
    let block_size = 64;
    let max_blocks = keys.div_ceil(block_size);
    AttentionProblem::new(batch, 32, 1, 128)
        .with_kv(8, max_blocks * block_size)
        .with_dtype(DType::Bf16)
        .with_modes(Modes {
            kv: KvStorage::Paged {
                num_blocks: batch * max_blocks,
                block_size,
                max_blocks_per_seq: max_blocks,
            },
            seqused_k: true,
            ..Modes::default()
        })
        .with_batch_invariant(true)
}

fn varlen(batch: usize, max_q: usize, max_k: usize, d: usize, causal: bool) -> AttentionProblem {
    AttentionProblem::new(batch, 8, max_q, d)
        .with_kv(2, max_k)
        .with_dtype(DType::Bf16)
        .with_causal(causal)
        .with_modes(Modes {
            packed_q: Some(batch * max_q / 2),
            kv: KvStorage::Packed {
                total_k: batch * max_k / 2,
            },
            ..Modes::default()
        })
        .with_batch_invariant(true)
}

fn plans(k: &dyn Attention, p: &AttentionProblem) -> Vec<LaunchPlan> {
    devices()
        .iter()
        .map(|dev| k.plan(p, dev).unwrap_or_else(|e| panic!("{p}: {e}")))
        .collect()
}

#[test]
fn dense_plans_sum_every_row_alike_whatever_the_batch_and_the_gpu() {
    for k in [&PersistentHopper as &dyn Attention, &PersistentPortable] {
        for d in [64, 128] {
            for causal in [false, true] {
                for (heads, seq) in [(8, 512), (16, 2048), (8, 128)] {
                    let first = arithmetic(&plans(k, &dense(1, heads, seq, d, causal))[0]);
                    for batch in [1, 2, 4, 7, 64, 256] {
                        for plan in plans(k, &dense(batch, heads, seq, d, causal)) {
                            assert_eq!(
                                arithmetic(&plan),
                                first,
                                "{} B={batch} H={heads} S={seq} D={d} causal {causal}",
                                k.name()
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn the_default_mode_does_not_promise_it() {
    // The reason the mode exists: by default a small batch takes the key-split warpgroups.
    let one = dense(1, 8, 512, 64, false).with_batch_invariant(false);
    let many = dense(64, 8, 512, 64, false).with_batch_invariant(false);
    let dev = DeviceInfo::synthetic_h100();
    assert_ne!(
        arithmetic(&PersistentHopper.plan(&one, &dev).unwrap()),
        arithmetic(&PersistentHopper.plan(&many, &dev).unwrap())
    );
}

#[test]
fn varlen_plans_match_the_dense_plan_of_one_sequence() {
    // A sequence alone (a dense batch of one) and inside a varlen batch must take the same key
    // tile width: at D = 128 without causal masking the wide tile, whatever the item count.
    for k in [&PersistentHopper as &dyn Attention, &PersistentPortable] {
        for d in [64, 128] {
            for causal in [false, true] {
                let alone = plans(k, &dense(1, 8, 300, d, causal));
                let block_n = |p: &LaunchPlan| {
                    p.launches[0]
                        .defines
                        .iter()
                        .find(|(n, _)| n.ends_with("_BLOCK_N"))
                        .map(|(_, v)| v.clone())
                };
                for batch in [2, 64, 512] {
                    for plan in plans(k, &varlen(batch, 300, 600, d, causal)) {
                        assert_eq!(
                            block_n(&plan),
                            block_n(&alone[0]),
                            "{} B={batch} D={d} causal {causal}",
                            k.name()
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn decode_chunks_follow_the_keys_not_the_batch() {
    let cfg = DecodeConfig::default();
    for keys in [1, 64, 2048, 2049, 8192, 32768] {
        let first = arithmetic(&plans(&PersistentHopper, &paged_decode(1, keys))[0]);
        for batch in [1, 7, 64, 256] {
            let p = paged_decode(batch, keys);
            assert!(decode::takes(&p, &cfg));
            for plan in plans(&PersistentHopper, &p) {
                assert_eq!(arithmetic(&plan), first, "B={batch} keys={keys}");
                // The split count covers the most chunks a sequence of this capacity has.
                let want = decode::max_chunks_within(
                    decode::visited_tiles_bound(&p),
                    decode::BATCH_INVARIANT_CHUNK_TILES,
                );
                assert_eq!(plan.num_splits as usize, want, "B={batch} keys={keys}");
                assert_eq!(plan.launches.len(), if want > 1 { 2 } else { 1 });
            }
        }
    }
}

#[test]
fn chunks_stay_within_the_combine_and_cover_the_keys() {
    let base = decode::BATCH_INVARIANT_CHUNK_TILES;
    for tiles in [0, 1, 31, 32, 33, 512, 8192, 8193, 100_000] {
        let size = decode::chunk_tiles_for(tiles, base);
        let n = decode::chunks_for(tiles, base);
        assert!((1..=decode::MAX_SPLITS).contains(&n), "{tiles}: {n} chunks");
        assert!(n * size >= tiles, "{tiles}: {n} x {size} tiles short");
        assert!(size >= base / 2);
    }
    // The suite's rows: the long sequence keeps its 16 splits of 2048 keys; 8192 keys take two
    // splits, 4096 and 2048 one.
    assert_eq!(decode::chunks_for(512, base), 16);
    assert_eq!(decode::chunks_for(128, base), 2);
    assert_eq!(decode::chunks_for(64, base), 1);
    assert_eq!(decode::chunks_for(32, base), 1);
}

#[test]
fn the_split_count_bounds_every_shorter_unit() {
    // Every unit the plan may meet (at most the bound's tiles) has at most its split count of
    // chunks, across the half-chunk switch and the cap, for the default and small bases.
    for base in [1, 2, 3, 64] {
        let mut most = 0;
        for bound in 0..70_000 {
            most = most.max(decode::chunks_for(bound, base));
            assert_eq!(
                decode::max_chunks_within(bound, base),
                most,
                "base {base}, bound {bound}"
            );
        }
    }
}

#[test]
fn windows_may_straddle_one_more_tile() {
    // A 100-key window whose range starts mid-tile spans three 64-key tiles: the bound on the
    // split count must allow for it.
    let mut p = paged_decode(1, 4096);
    p.modes.window_left = Some(100);
    let window_tiles = (100usize + 1).div_ceil(64);
    assert!(decode::visited_tiles_bound(&p) > window_tiles);
    assert!(decode::visited_tiles_bound(&p) <= decode::max_key_tiles(&paged_decode(1, 4096)));
}

#[test]
fn varlen_batches_with_long_queries_route_the_short_ones_to_the_decode_kernel() {
    let cfg = DecodeConfig::default();
    let p = varlen(16, 300, 5000, 128, true);
    assert!(decode::routes_per_sequence(&p, &cfg));
    assert!(!decode::routes_per_sequence(
        &p.clone().with_batch_invariant(false),
        &cfg
    ));
    for k in [&PersistentHopper as &dyn Attention, &PersistentPortable] {
        let plan = k.plan(&p, &DeviceInfo::synthetic_h100()).unwrap();
        let route = |i: usize| {
            plan.launches[i]
                .defines
                .iter()
                .find(|(n, _)| n == "FC_SEQ_ROUTE")
                .map(|(_, v)| v.as_str())
        };
        // The Hopper path runs its persistent part in two launches (the sequences within the key
        // split's 1024 keys, and the others).
        let persistent = if k.name() == "persistent-hopper" {
            2
        } else {
            1
        };
        assert_eq!(
            plan.launches.len(),
            persistent + 2,
            "{}: persistent, split, combine",
            k.name()
        );
        for i in 0..persistent {
            assert_eq!(route(i), Some("1"));
        }
        assert_eq!(route(persistent), Some("2"));
        assert_eq!(plan.launches[persistent].entry, decode::SPLIT_ENTRY);
        // The decode partials sit behind the persistent kernel's counters.
        assert!(plan.workspace_counters <= decode::ROUTED_WORKSPACE_OFFSET);
        assert!(plan.workspace_f32 > decode::ROUTED_WORKSPACE_OFFSET);
        assert_eq!(
            plan.num_splits as usize,
            decode::max_chunks_within(
                decode::visited_tiles_bound(&p),
                decode::BATCH_INVARIANT_CHUNK_TILES
            )
        );
    }
    // Queries that fit one decode tile go there whole: no route.
    let short = varlen(16, 2, 5000, 128, false);
    assert!(!decode::routes_per_sequence(&short, &cfg));
}

/// Whether a launch sums a row's keys in two warpgroups' halves, and its key tile width.
fn key_order(l: &flashcore_core::KernelLaunch) -> (bool, Option<String>) {
    let get = |name: &str| {
        l.defines
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    (
        get("FC_HOPPER_WG_KEY_SPLIT").as_deref() == Some("1"),
        get("FC_HOPPER_BLOCK_N"),
    )
}

fn route(l: &flashcore_core::KernelLaunch) -> Option<&str> {
    l.defines
        .iter()
        .find(|(k, _)| k == "FC_SEQ_KEY_SPLIT_ROUTE")
        .map(|(_, v)| v.as_str())
}

#[test]
fn short_sequences_take_the_key_split_alone_and_in_any_batch() {
    // 8 query heads: up to 512 rows (8 items of 64 rows a head) and 1024 keys is key-split shaped.
    for d in [64, 128] {
        for causal in [false, true] {
            let alone = |seq: usize| {
                let plans = plans(
                    &PersistentHopper,
                    &dense(1, 8, seq, d, causal).with_kv(8, seq),
                );
                let orders: Vec<_> = plans.iter().map(|p| key_order(&p.launches[0])).collect();
                assert!(
                    orders.windows(2).all(|w| w[0] == w[1]),
                    "S={seq}: {orders:?}"
                );
                orders[0].clone()
            };
            let short = alone(300);
            let long = alone(2048);
            assert!(short.0 && !long.0, "D={d} causal {causal}");
            assert_eq!(alone(512), short);
            assert_eq!(alone(513), long);
            let keys = |k: usize| {
                let p = dense(1, 8, 300, d, causal).with_kv(8, k);
                key_order(
                    &PersistentHopper
                        .plan(&p, &DeviceInfo::synthetic_h100())
                        .unwrap()
                        .launches[0],
                )
            };
            assert_eq!(keys(1024), short);
            assert!(!keys(1025).0);
            for batch in [1, 2, 64, 512] {
                for plan in plans(&PersistentHopper, &varlen(batch, 2048, 4096, d, causal)) {
                    let persistent: Vec<_> = plan
                        .launches
                        .iter()
                        .filter(|l| l.source == "gen5_persistent_hopper.cu")
                        .collect();
                    assert_eq!(persistent.len(), 2, "B={batch} D={d}");
                    assert_eq!(route(persistent[0]), Some("1"));
                    assert_eq!(key_order(persistent[0]), short);
                    assert_eq!(route(persistent[1]), Some("2"));
                    assert_eq!(key_order(persistent[1]), long);
                }
                // A batch of short sequences only: one key-split launch, no route.
                for plan in plans(&PersistentHopper, &varlen(batch, 512, 1024, d, causal)) {
                    assert_eq!(key_order(&plan.launches[0]), short);
                    assert!(plan.launches.iter().all(|l| route(l).is_none()));
                }
            }
        }
    }
}

#[test]
fn a_cache_routes_by_each_sequence_s_key_count() {
    // Dense queries of few rows over a paged cache: the key count is each sequence's own.
    for batch in [1, 7, 64] {
        let p = AttentionProblem::new(batch, 8, 128, 128)
            .with_kv(2, 8192)
            .with_dtype(DType::Bf16)
            .with_causal(true)
            .with_modes(Modes {
                kv: KvStorage::Paged {
                    num_blocks: batch * 128,
                    block_size: 64,
                    max_blocks_per_seq: 128,
                },
                seqused_k: true,
                ..Modes::default()
            })
            .with_batch_invariant(true);
        for plan in plans(&PersistentHopper, &p) {
            let routes: Vec<_> = plan.launches.iter().map(route).collect();
            assert_eq!(routes, [Some("1"), Some("2")], "B={batch}");
            assert!(key_order(&plan.launches[0]).0 && !key_order(&plan.launches[1]).0);
            let bound = |l: &flashcore_core::KernelLaunch, name: &str| {
                l.defines
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
            };
            assert_eq!(
                bound(&plan.launches[0], "FC_SEQ_KEY_SPLIT_ROWS").as_deref(),
                Some("512")
            );
            assert_eq!(
                bound(&plan.launches[1], "FC_SEQ_KEY_SPLIT_KEYS").as_deref(),
                Some("1024")
            );
        }
    }
}

#[test]
fn the_key_split_route_keeps_its_q_tiles_to_the_short_sequences() {
    // 32 heads: sequences up to 128 rows; the key-split launch's grid counts 2 q tiles a head
    // (64 units for one sequence, where all of a 4096-row one's would fill the SMs).
    let p = AttentionProblem::new(1, 32, 4096, 128)
        .with_kv(8, 4096)
        .with_dtype(DType::Bf16)
        .with_modes(Modes {
            packed_q: Some(4096),
            kv: KvStorage::Packed { total_k: 4096 },
            ..Modes::default()
        })
        .with_batch_invariant(true);
    let dev = DeviceInfo::synthetic_h100();
    let plan = PersistentHopper.plan(&p, &dev).unwrap();
    let short = &plan.launches[0];
    assert_eq!(route(short), Some("1"));
    assert_eq!(short.grid.0, 32 * 2);
}

/// At a head dim the routed plans do not take (`ROUTED_HEAD_DIMS`), a batch of long and
/// decode-shaped queries runs every sequence in the persistent kernel, so a decode-shaped
/// sequence alone must run there too: alone in the decode kernel it summed its keys another way
/// (reliability's `batchinv` at D = 32, 2026-12-01). At the routed head dims it takes the decode
/// kernel alone and in the batch alike.
#[test]
fn a_decode_shaped_sequence_takes_the_kernel_its_batch_would_give_it() {
    let dev = DeviceInfo::synthetic_h100();
    let cfg = DecodeConfig::default();
    for d in [32, 64, 96, 128, 160, 256] {
        let alone = varlen(1, 2, 3500, d, false);
        let batch = varlen(16, 300, 3500, d, false);
        let routed = decode::ROUTED_HEAD_DIMS.contains(&d);
        assert_eq!(decode::routes_per_sequence(&batch, &cfg), routed, "D={d}");
        for k in [&PersistentHopper as &dyn Attention, &PersistentPortable] {
            let plan = k.plan(&alone, &dev).unwrap();
            let on_decode = plan.launches[0].entry == decode::SPLIT_ENTRY;
            assert_eq!(on_decode, routed, "{} D={d}", k.name());
        }
        // Not batch-invariant: decode-shaped problems keep the decode kernel at every head dim.
        let plan = PersistentHopper
            .plan(&alone.clone().with_batch_invariant(false), &dev)
            .unwrap();
        assert_eq!(plan.launches[0].entry, decode::SPLIT_ENTRY, "D={d}");
    }
}
