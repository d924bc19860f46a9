//! The Hopper plan's choices and sizes on synthetic devices, without a GPU.

use flashcore_core::KvStorage;

use super::*;

#[test]
fn smem_formula_matches_kernel() {
    // Kernel: Q + 2*STAGES*KV + 128 (11 barriers + 2 unit words -> 96 B -> 128) + 1024.
    assert_eq!(smem_bytes(128, 2), 32768 + 131072 + 128 + 1024);
    assert_eq!(smem_bytes(64, 2), 16384 + 65536 + 128 + 1024);
}

#[test]
fn plans_on_h100() {
    let dev = DeviceInfo::synthetic_h100();
    for d in [64, 128] {
        let p = AttentionProblem::new(4, 16, 2048, d).with_causal(true);
        let plan = PersistentHopper.plan(&p, &dev).expect("plans");
        let l = &plan.launches[0];
        assert_eq!(l.grid, (132, 1, 1));
        // D = 64: three consumer warpgroups (704 items of 192 rows, 5.3 rounds).
        assert_eq!(l.block, (if d == 64 { 512 } else { 384 }, 1, 1));
        assert!(l.dynamic_smem_bytes as usize <= 227 * 1024);
    }
}

fn overrides(pairs: &'static [(&'static str, &'static str)]) -> Result<HopperConfig, String> {
    HopperConfig::from_lookup(|name| {
        pairs
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    })
}

#[test]
fn forward_launches_programmatically_unless_turned_off() {
    let dev = DeviceInfo::synthetic_h100();
    let p = AttentionProblem::new(1, 8, 512, 64);
    assert!(default_plan(&p, &dev).launches[0].programmatic_launch);
    let off = overrides(&[("FLASHCORE_HOPPER_PDL", "0")]).unwrap();
    let plan = PersistentHopper.plan_with(&off, &p, &dev).unwrap();
    assert!(!plan.launches[0].programmatic_launch);
    assert!(overrides(&[("FLASHCORE_HOPPER_PDL", "2")]).is_err());
    // Mode problems launch plainly unless forced.
    let cache = AttentionProblem::new(4, 32, 128, 128)
        .with_kv(8, 8192)
        .with_modes(flashcore_core::Modes {
            seqused_k: true,
            ..flashcore_core::Modes::default()
        });
    assert!(!default_plan(&cache, &dev).launches[0].programmatic_launch);
    let on = overrides(&[("FLASHCORE_HOPPER_PDL", "1")]).unwrap();
    assert!(
        PersistentHopper
            .plan_with(&on, &cache, &dev)
            .unwrap()
            .launches[0]
            .programmatic_launch
    );
}

/// Whether `cfg`'s plan of `p` on the H100 sets the kernel define `name` to 1.
fn plan_sets(cfg: &HopperConfig, p: &AttentionProblem, name: &str) -> bool {
    let plan = PersistentHopper
        .plan_with(cfg, p, &DeviceInfo::synthetic_h100())
        .unwrap();
    plan.launches[0]
        .defines
        .contains(&(name.to_string(), "1".to_string()))
}

/// Shared memory of a key-split plan: Q (2 x 64 rows) + 4 (D = 64) or 2 stages of K and V
/// + barriers (4 or 2 stages: 256 or 128 bytes) + the warpgroups' exchange + slack.
fn key_split_smem(d: usize) -> usize {
    let stages = if d == 64 { 4 } else { 2 };
    let exchange = 2 * (d / 16 + 1) * 128 * 16;
    2 * 64 * d * 2 + 2 * stages * 128 * d * 2 + 128 * (stages / 2) + exchange + 1024
}

#[test]
fn cluster_key_split_takes_two_ctas_an_item() {
    let dev = DeviceInfo::synthetic_h100();
    assert!(overrides(&[("FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT", "2")]).is_err());
    let default = HopperConfig::default();
    for d in [64, 128] {
        for causal in [false, true] {
            // 64 items of 8 key tiles, a cluster each on 128 of 132 SMs.
            let p = AttentionProblem::new(1, 4, 1024, d).with_causal(causal);
            let plan = default_plan(&p, &dev);
            let l = &plan.launches[0];
            assert!(plan_sets(&default, &p, "FC_HOPPER_WG_KEY_SPLIT"));
            assert!(plan_sets(&default, &p, "FC_HOPPER_CLUSTER_KEY_SPLIT"));
            assert!(!plan_sets(&default, &p, "FC_HOPPER_DYNAMIC"));
            assert_eq!(l.grid, (128, 1, 1));
            assert_eq!(l.block, (384, 1, 1));
            // The cluster's exchange after the warpgroups': 256 threads, D / 32 float4s and
            // an (m, l) slot each; the barrier area as without it at these depths.
            assert_eq!(
                l.dynamic_smem_bytes as usize,
                key_split_smem(d) + (d / 32 + 1) * 256 * 16
            );
            assert!(l.dynamic_smem_bytes <= dev.max_shared_memory_per_block_optin);
        }
    }
    // Past one round of clusters, or with short items (the mission shape's 4 key tiles), the
    // default keeps one CTA an item.
    for (b, h, s, d) in [(1, 8, 1024, 64), (1, 8, 512, 64), (1, 8, 512, 128)] {
        let p = AttentionProblem::new(b, h, s, d);
        assert!(plan_sets(&default, &p, "FC_HOPPER_WG_KEY_SPLIT"));
        assert!(!plan_sets(&default, &p, "FC_HOPPER_CLUSTER_KEY_SPLIT"));
    }
    // Forced, any problem that takes the key split: two CTAs an item, static schedule.
    let forced = overrides(&[
        ("FLASHCORE_HOPPER_WG_KEY_SPLIT", "1"),
        ("FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT", "1"),
    ])
    .unwrap();
    let big = AttentionProblem::new(4, 16, 2048, 128).with_causal(true);
    let plan = PersistentHopper.plan_with(&forced, &big, &dev).unwrap();
    assert_eq!(plan.launches[0].grid, (2 * 4 * 16 * 32, 1, 1));
    assert!(plan_sets(&forced, &big, "FC_HOPPER_CLUSTER_KEY_SPLIT"));
    assert!(!plan_sets(&forced, &big, "FC_HOPPER_DYNAMIC"));
    // Off, or without the warpgroups' key split (modes), no cluster.
    let off = overrides(&[("FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT", "0")]).unwrap();
    let mission = AttentionProblem::new(1, 8, 512, 64);
    assert!(!plan_sets(&off, &mission, "FC_HOPPER_CLUSTER_KEY_SPLIT"));
    assert_eq!(
        PersistentHopper
            .plan_with(&off, &mission, &dev)
            .unwrap()
            .launches[0]
            .grid,
        (64, 1, 1)
    );
    let cluster_only = overrides(&[
        ("FLASHCORE_HOPPER_WG_KEY_SPLIT", "0"),
        ("FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT", "1"),
    ])
    .unwrap();
    assert!(!plan_sets(
        &cluster_only,
        &mission,
        "FC_HOPPER_CLUSTER_KEY_SPLIT"
    ));
    let paged = mission.with_modes(flashcore_core::Modes {
        seqused_k: true,
        ..flashcore_core::Modes::default()
    });
    assert!(!plan_sets(&forced, &paged, "FC_HOPPER_CLUSTER_KEY_SPLIT"));
}

#[test]
fn key_split_warpgroups_share_one_64_row_tile() {
    let dev = DeviceInfo::synthetic_h100();
    // (The warpgroups' split alone: the cluster split has its own test below.)
    let on = overrides(&[
        ("FLASHCORE_HOPPER_WG_KEY_SPLIT", "1"),
        ("FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT", "0"),
    ])
    .unwrap();
    assert!(overrides(&[("FLASHCORE_HOPPER_WG_KEY_SPLIT", "2")]).is_err());
    for d in [64, 128] {
        for causal in [false, true] {
            let p = AttentionProblem::new(1, 8, 512, d).with_causal(causal);
            let plan = PersistentHopper.plan_with(&on, &p, &dev).unwrap();
            let l = &plan.launches[0];
            assert!(plan_sets(&on, &p, "FC_HOPPER_WG_KEY_SPLIT"));
            assert!(!plan_sets(&on, &p, "FC_HOPPER_SMEM_EPILOGUE"));
            // Two consumer warpgroups on 64-row items: 8 heads x 8 tiles.
            assert_eq!(l.block, (384, 1, 1));
            assert_eq!(l.grid, (64, 1, 1));
            assert_eq!(l.tensor_maps.unwrap().q_box_rows, 64);
            assert_eq!(l.tensor_maps.unwrap().kv_box_rows, 128);
            assert_eq!(l.dynamic_smem_bytes as usize, key_split_smem(d));
            // The default rule takes the mission shape too (64 of 132 SMs).
            assert!(plan_sets(
                &HopperConfig::default(),
                &p,
                "FC_HOPPER_WG_KEY_SPLIT"
            ));
        }
    }
    // Not with modes, key-range splits or three warpgroups: those plans keep their builds.
    let paged = AttentionProblem::new(1, 8, 512, 64).with_modes(flashcore_core::Modes {
        seqused_k: true,
        ..flashcore_core::Modes::default()
    });
    assert!(!plan_sets(&on, &paged, "FC_HOPPER_WG_KEY_SPLIT"));
    let p = AttentionProblem::new(1, 8, 512, 64);
    let split = overrides(&[
        ("FLASHCORE_HOPPER_WG_KEY_SPLIT", "1"),
        ("FLASHCORE_HOPPER_SPLITS", "4"),
    ])
    .unwrap();
    assert!(!plan_sets(&split, &p, "FC_HOPPER_WG_KEY_SPLIT"));
    let three = overrides(&[
        ("FLASHCORE_HOPPER_WG_KEY_SPLIT", "1"),
        ("FLASHCORE_HOPPER_CONSUMER_WGS", "3"),
    ])
    .unwrap();
    let big = AttentionProblem::new(4, 16, 2048, 64);
    assert!(!plan_sets(&three, &big, "FC_HOPPER_WG_KEY_SPLIT"));
    assert!(plan_sets(&on, &big, "FC_HOPPER_WG_KEY_SPLIT"));
    let off = overrides(&[("FLASHCORE_HOPPER_WG_KEY_SPLIT", "0")]).unwrap();
    assert!(!plan_sets(&off, &p, "FC_HOPPER_WG_KEY_SPLIT"));
}

#[test]
fn default_key_split_rule() {
    let rule = |b, h, s, d| default_wg_key_split(&AttentionProblem::new(b, h, s, d), 132);
    // Half the SMs or fewer: the mission shape, one key tile, D = 128.
    assert!(rule(1, 8, 512, 64) && rule(1, 8, 128, 64) && rule(1, 8, 512, 128));
    // One round of 128 CTAs: D = 64 items of 8 key tiles or more only.
    assert!(rule(1, 8, 1024, 64) && rule(1, 4, 2048, 64));
    assert!(!rule(1, 16, 512, 64) && !rule(1, 8, 1024, 128));
    // More than one round: never.
    assert!(!rule(4, 16, 2048, 64) && !rule(2, 8, 1024, 64));
}

#[test]
fn one_round_d64_plans_take_the_smem_epilogue() {
    let has =
        |cfg: &HopperConfig, p: &AttentionProblem| plan_sets(cfg, p, "FC_HOPPER_SMEM_EPILOGUE");
    let default = HopperConfig::default();
    for causal in [false, true] {
        // (One round at 128 rows; at 64, 128 CTAs of 4 key tiles: not key-split.)
        assert!(has(
            &default,
            &AttentionProblem::new(1, 16, 512, 64).with_causal(causal)
        ));
        // Many rounds, D = 128 (the wide tile, or unmeasured), or turned off: not.
        assert!(!has(
            &default,
            &AttentionProblem::new(4, 16, 2048, 64).with_causal(causal)
        ));
        assert!(!has(
            &default,
            &AttentionProblem::new(1, 8, 512, 128).with_causal(causal)
        ));
    }
    let off = overrides(&[("FLASHCORE_HOPPER_SMEM_EPILOGUE", "0")]).unwrap();
    assert!(!has(&off, &AttentionProblem::new(1, 16, 512, 64)));
    // One Q buffer leaves no room to stage O: not.
    let one_q = overrides(&[("FLASHCORE_HOPPER_Q_STAGES", "1")]).unwrap();
    assert!(!has(&one_q, &AttentionProblem::new(1, 16, 512, 64)));
    // Forced on, many rounds too.
    let on = overrides(&[("FLASHCORE_HOPPER_SMEM_EPILOGUE", "1")]).unwrap();
    assert!(has(&on, &AttentionProblem::new(4, 16, 2048, 64)));
}

#[test]
fn one_round_programmatic_plans_prefetch_before_the_wait() {
    let has = |cfg: &HopperConfig, p: &AttentionProblem| plan_sets(cfg, p, "FC_HOPPER_PREFETCH");
    let default = HopperConfig::default();
    // The mission shape: 32 items, one round, launched programmatically.
    let small = AttentionProblem::new(1, 8, 512, 64);
    assert!(has(&default, &small));
    assert!(has(&default, &small.clone().with_causal(true)));
    // Many rounds (the dynamic schedule), without PDL, or turned off: no prefetch.
    assert!(!has(&default, &AttentionProblem::new(4, 16, 2048, 128)));
    let no_pdl = overrides(&[("FLASHCORE_HOPPER_PDL", "0")]).unwrap();
    assert!(!has(&no_pdl, &small));
    let off = overrides(&[("FLASHCORE_HOPPER_PREFETCH", "0")]).unwrap();
    assert!(!has(&off, &small));
    // Mode problems: the kernel does not work out its first unit early.
    let forced = overrides(&[("FLASHCORE_HOPPER_PREFETCH", "1")]).unwrap();
    let cache = AttentionProblem::new(1, 8, 128, 128)
        .with_kv(2, 4096)
        .with_modes(flashcore_core::Modes {
            seqused_k: true,
            ..flashcore_core::Modes::default()
        });
    assert!(!has(&forced, &cache));
}

#[test]
fn default_config_emits_the_verified_defines() {
    let c = overrides(&[]).unwrap();
    assert_eq!(c, HopperConfig::default());
    let names: Vec<String> = c
        .defines(128, 25 << 20)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(names, UNSPLIT_DEFINES);
    // The serial loop stays reachable: overlap off takes ping-pong with it.
    let serial = overrides(&[("FLASHCORE_HOPPER_OVERLAP", "0")]).unwrap();
    assert!(!serial.overlap && !serial.pingpong);
}

#[test]
fn variant_overrides() {
    let c = overrides(&[
        ("FLASHCORE_HOPPER_PINGPONG", "1"),
        ("FLASHCORE_HOPPER_SMEM_EPILOGUE", "1"),
        ("FLASHCORE_HOPPER_CONSUMER_REGS", "240"),
    ])
    .unwrap();
    assert!(c.pingpong && c.smem_epilogue == Some(true) && c.overlap);
    assert_eq!(c.q_stages, 2, "the smem epilogue implies two Q buffers");
    let d = c.defines(64, 1 << 24);
    for (k, v) in [
        ("FC_HOPPER_PINGPONG", "1"),
        ("FC_HOPPER_Q_STAGES", "2"),
        ("FC_HOPPER_SMEM_EPILOGUE", "1"),
        ("FC_HOPPER_CONSUMER_REGS", "240"),
    ] {
        assert!(d.contains(&(k.to_string(), v.to_string())), "{k}");
    }
    assert!(overrides(&[
        ("FLASHCORE_HOPPER_PINGPONG", "1"),
        ("FLASHCORE_HOPPER_OVERLAP", "0")
    ])
    .is_err());
    assert!(overrides(&[("FLASHCORE_HOPPER_STAGES", "7")]).is_err());
    assert!(overrides(&[("FLASHCORE_HOPPER_Q_STAGES", "x")]).is_err());
}

#[test]
fn the_timeline_is_a_build_of_its_own() {
    let dev = DeviceInfo::synthetic_h100();
    let p = AttentionProblem::new(1, 8, 512, 64).with_causal(true);
    let traced = overrides(&[("FLASHCORE_HOPPER_TRACE", "1")]).unwrap();
    assert!(traced.trace);
    let with = PersistentHopper.plan_with(&traced, &p, &dev).unwrap();
    let without = default_plan(&p, &dev);
    assert!(define_names(&with).contains(&"FC_HOPPER_TRACE".to_string()));
    assert!(!define_names(&without).contains(&"FC_HOPPER_TRACE".to_string()));
    // The printer runs after the kernel, in its module: same source and defines.
    assert_eq!(without.launches.len(), 1);
    assert_eq!(with.launches.len(), 2);
    let (kernel, printer) = (&with.launches[0], &with.launches[1]);
    assert_eq!(printer.entry, TRACE_PRINT_ENTRY);
    assert_eq!(
        (printer.source, &printer.defines),
        (kernel.source, &kernel.defines)
    );
    assert_eq!((printer.grid, printer.block), ((1, 1, 1), (1, 1, 1)));
    assert!(overrides(&[("FLASHCORE_HOPPER_TRACE", "2")]).is_err());
}

#[test]
fn variant_smem_fits_or_is_rejected() {
    let limit = 227 * 1024;
    // D = 128: 3 K/V stages fit with one Q buffer, and 2 Q buffers fit with 2 stages...
    assert_eq!(smem_bytes_for(128, 2, 3, 1), 32768 + 196608 + 128 + 1024);
    assert!(smem_bytes_for(128, 2, 3, 1) <= limit);
    assert_eq!(smem_bytes_for(128, 2, 2, 2), 65536 + 131072 + 128 + 1024);
    assert!(smem_bytes_for(128, 2, 2, 2) <= limit);
    // ...but not both (the plan rejects it); at D = 64 everything up to 4 stages fits.
    assert!(smem_bytes_for(128, 2, 3, 2) > limit);
    assert!(smem_bytes_for(64, 2, 4, 2) <= limit);
}

fn define_names(plan: &LaunchPlan) -> Vec<String> {
    plan.launches[0]
        .defines
        .iter()
        .map(|(k, _)| k.clone())
        .collect()
}

const UNSPLIT_DEFINES: [&str; 7] = [
    "FC_HEAD_DIM",
    "FC_HOPPER_BLOCK_N",
    "FC_HOPPER_STAGES",
    "FC_HOPPER_OVERLAP",
    "FC_HOPPER_L2_SECTION_BYTES",
    "FC_HOPPER_PINGPONG",
    "FC_HOPPER_Q_STAGES",
];

/// A launch's defines as `NAME=value`.
fn defines(l: &flashcore_core::KernelLaunch) -> Vec<String> {
    l.defines.iter().map(|(k, v)| format!("{k}={v}")).collect()
}

fn default_plan(p: &AttentionProblem, dev: &DeviceInfo) -> LaunchPlan {
    PersistentHopper
        .plan_with(&HopperConfig::default(), p, dev)
        .unwrap()
}

#[test]
fn strided_caches_take_the_wide_tile_and_pages_keep_128_keys() {
    use flashcore_core::Modes;
    let dev = DeviceInfo::synthetic_h100();
    let block_n = |p: &AttentionProblem| {
        let plan = default_plan(p, &dev);
        defines(&plan.launches[0])
            .into_iter()
            .find_map(|d| d.strip_prefix("FC_HOPPER_BLOCK_N=").map(str::to_string))
            .unwrap_or_else(|| "128".to_string())
    };
    // The chunked-prefill row: 128 queries a sequence against an 8192-key cache.
    let chunk = |kv: KvStorage, causal: bool| {
        AttentionProblem::new(4, 32, 128, 128)
            .with_kv(8, 8192)
            .with_causal(causal)
            .with_modes(Modes {
                kv,
                seqused_k: true,
                softcap: Some(30.0),
                ..Modes::default()
            })
    };
    assert_eq!(block_n(&chunk(KvStorage::Dense, false)), "176");
    assert_eq!(block_n(&chunk(KvStorage::Dense, true)), "128");
    let pages = KvStorage::Paged {
        num_blocks: 4 * 8192 / 64,
        block_size: 64,
        max_blocks_per_seq: 8192 / 64,
    };
    assert_eq!(block_n(&chunk(pages, false)), "128");
    // Past one round of items the modes build takes the dynamic schedule, which spills
    // with 176-key tiles: 128 there.
    let big = AttentionProblem::new(16, 32, 128, 128)
        .with_kv(8, 8192)
        .with_modes(Modes {
            seqused_k: true,
            ..Modes::default()
        });
    assert_eq!(block_n(&big), "128");
    assert_eq!(block_n(&AttentionProblem::new(4, 16, 2048, 128)), "176");
}

#[test]
fn small_pages_get_the_spread_producer_build() {
    use flashcore_core::Modes;
    let dev = DeviceInfo::synthetic_h100();
    let paged = |block_size: usize| {
        AttentionProblem::new(8, 32, 128, 128)
            .with_kv(8, 8192)
            .with_causal(true)
            .with_modes(Modes {
                kv: KvStorage::Paged {
                    num_blocks: 8 * 8192 / block_size,
                    block_size,
                    max_blocks_per_seq: 8192 / block_size,
                },
                seqused_k: true,
                ..Modes::default()
            })
    };
    // Box rows at 128-key tiles: 16 -> 16, 32 -> 32, 48 -> 16, 64 -> 64, 256 -> 128.
    for (block_size, spread) in [
        (16, true),
        (32, true),
        (48, true),
        (64, false),
        (256, false),
    ] {
        let names = define_names(&default_plan(&paged(block_size), &dev));
        assert!(names.contains(&"FC_HOPPER_MODES".to_string()));
        assert_eq!(
            names.contains(&"FC_HOPPER_SPREAD_PAGES".to_string()),
            spread,
            "block size {block_size}"
        );
    }
    // A ring of three: the spread loop's counters need a power of two, so warp 0 issues.
    let three_stages = overrides(&[
        ("FLASHCORE_HOPPER_STAGES", "3"),
        ("FLASHCORE_HOPPER_Q_STAGES", "1"),
    ])
    .unwrap();
    let plan = PersistentHopper
        .plan_with(&three_stages, &paged(16), &dev)
        .unwrap();
    assert!(!define_names(&plan).contains(&"FC_HOPPER_SPREAD_PAGES".to_string()));
    // Not without pages: contiguous caches and dense problems keep their builds.
    let contiguous = AttentionProblem::new(8, 32, 128, 128)
        .with_kv(8, 8192)
        .with_modes(Modes {
            seqused_k: true,
            ..Modes::default()
        });
    for p in [contiguous, AttentionProblem::new(4, 16, 2048, 128)] {
        let names = define_names(&default_plan(&p, &dev));
        assert!(
            !names.contains(&"FC_HOPPER_SPREAD_PAGES".to_string()),
            "{p}"
        );
    }
}

#[test]
fn head_dim_128_non_causal_takes_176_key_tiles() {
    let dev = DeviceInfo::synthetic_h100();
    let wide = &default_plan(&AttentionProblem::new(4, 16, 2048, 128), &dev).launches[0];
    assert!(defines(wide).contains(&"FC_HOPPER_BLOCK_N=176".to_string()));
    assert!(defines(wide).contains(&"FC_HOPPER_CONSUMER_REGS=240".to_string()));
    // One Q buffer (the kernel's default: no define) so that 2 x (K + V) of 176 keys fit.
    assert!(!defines(wide)
        .iter()
        .any(|d| d.starts_with("FC_HOPPER_Q_STAGES")));
    assert_eq!(wide.tensor_maps.as_ref().unwrap().kv_box_rows, 176);
    assert_eq!(
        wide.dynamic_smem_bytes as usize,
        smem_bytes_with_block_n(128, 2, 2, 1, 176)
    );
    assert!(wide.dynamic_smem_bytes as usize <= 227 * 1024);
    // Causal, D = 64, or a forced width: 128-key tiles with two Q buffers.
    for p in [
        AttentionProblem::new(4, 16, 2048, 128).with_causal(true),
        AttentionProblem::new(4, 16, 2048, 64),
    ] {
        let l = &default_plan(&p, &dev).launches[0];
        assert!(
            defines(l).contains(&"FC_HOPPER_BLOCK_N=128".to_string()),
            "{p}"
        );
        assert!(
            defines(l).contains(&"FC_HOPPER_Q_STAGES=2".to_string()),
            "{p}"
        );
    }
    let forced = HopperConfig::from_lookup(|name| {
        (name == "FLASHCORE_HOPPER_BLOCK_N").then(|| "128".to_string())
    })
    .unwrap();
    let l = &PersistentHopper
        .plan_with(&forced, &AttentionProblem::new(4, 16, 2048, 128), &dev)
        .unwrap()
        .launches[0];
    assert!(defines(l).contains(&"FC_HOPPER_BLOCK_N=128".to_string()));
}

#[test]
fn three_consumer_warpgroups_only_where_the_kernel_builds_them() {
    use flashcore_core::Modes;
    let dev = DeviceInfo::synthetic_h100();
    let three = overrides(&[("FLASHCORE_HOPPER_CONSUMER_WGS", "3")]).unwrap();
    assert_eq!(three.consumer_wgs, Some(3));
    assert!(overrides(&[("FLASHCORE_HOPPER_CONSUMER_WGS", "4")]).is_err());
    // Dense D = 64, causal or not: 192-row items, 512 threads, Q boxes of 192 rows.
    for causal in [false, true] {
        let p = AttentionProblem::new(2, 16, 8192, 64).with_causal(causal);
        let plan = PersistentHopper.plan_with(&three, &p, &dev).unwrap();
        let l = &plan.launches[0];
        assert_eq!(l.block, (512, 1, 1));
        assert_eq!(l.tensor_maps.unwrap().q_box_rows, 192);
        assert!(defines(l).contains(&"FC_HOPPER_CONSUMER_WGS=3".to_string()));
        assert!(!defines(l)
            .iter()
            .any(|d| d.starts_with("FC_HOPPER_CONSUMER_REGS")));
        // Two Q buffers of 192 x 64 + two K/V stages of 128 x 64 + barriers + slack.
        assert_eq!(
            l.dynamic_smem_bytes as usize,
            2 * 192 * 64 * 2 + 2 * 2 * 128 * 64 * 2 + 128 + 1024
        );
        // 8192 / 192 = 42.7 -> 43 q tiles a head: 1376 items, dynamic past one round.
        assert!(defines(l).contains(&"FC_HOPPER_DYNAMIC=1".to_string()));
    }
    // (1,8,512,64): 3 q tiles of 192 rows a head, 24 items, 24 CTAs.
    let small = PersistentHopper
        .plan_with(&three, &AttentionProblem::new(1, 8, 512, 64), &dev)
        .unwrap();
    assert_eq!(small.launches[0].grid, (24, 1, 1));
    // Everywhere else two: D = 128, a split, the smem epilogue, inference modes.
    let two = |cfg: &HopperConfig, p: &AttentionProblem| {
        let plan = PersistentHopper.plan_with(cfg, p, &dev).unwrap();
        let l = &plan.launches[0];
        assert_eq!(l.block, (384, 1, 1), "{p}");
        assert_eq!(l.tensor_maps.unwrap().q_box_rows, 128, "{p}");
        assert!(
            !defines(l).iter().any(|d| d.contains("CONSUMER_WGS")),
            "{p}"
        );
    };
    two(&three, &AttentionProblem::new(4, 16, 2048, 128));
    two(
        &HopperConfig {
            splits: Some(4),
            ..three
        },
        &AttentionProblem::new(1, 8, 512, 64),
    );
    two(
        &HopperConfig {
            smem_epilogue: Some(true),
            ..three
        },
        &AttentionProblem::new(4, 16, 2048, 64),
    );
    two(
        &three,
        &AttentionProblem::new(4, 16, 2048, 64).with_modes(Modes {
            window_left: Some(256),
            ..Modes::default()
        }),
    );
    // The default: three once the 192-row items fill four rounds of the SMs.
    let default_wgs = |b, h, s| {
        let p = AttentionProblem::new(b, h, s, 64);
        default_plan(&p, &dev).launches[0].block.0 / 128 - 1
    };
    assert_eq!(default_wgs(2, 16, 8192), 3); // 1376 items, 10.4 rounds
    assert_eq!(default_wgs(4, 16, 2048), 3); // 704 items, 5.3 rounds
    assert_eq!(default_wgs(1, 16, 2048), 2); // 176 items, 1.3 rounds
    assert_eq!(default_wgs(1, 8, 512), 2); // the mission shape: 24 items
    assert_eq!(default_wgs(1, 24, 4224), 3); // 24 x 22 = 528 items = 4 x 132
    assert_eq!(default_wgs(1, 23, 4224), 2); // 506
    two(
        &overrides(&[("FLASHCORE_HOPPER_CONSUMER_WGS", "2")]).unwrap(),
        &AttentionProblem::new(2, 16, 8192, 64),
    );
}

#[test]
fn small_problem_is_split_large_is_not() {
    let dev = DeviceInfo::synthetic_h100();
    // Not by default (measured slower), only with FLASHCORE_HOPPER_SPLITS=auto.
    let p = AttentionProblem::new(1, 8, 512, 64);
    let plan = default_plan(&p, &dev);
    assert_eq!((plan.num_splits, plan.workspace_f32), (1, 0));
    let cfg = HopperConfig {
        auto_split: true,
        ..HopperConfig::default()
    };
    // (1,8,512,64): 32 items of 4 key tiles on 132 SMs -> 4 splits, 128 units of one tile.
    for causal in [false, true] {
        let p = AttentionProblem::new(1, 8, 512, 64).with_causal(causal);
        let plan = PersistentHopper.plan_with(&cfg, &p, &dev).unwrap();
        assert_eq!(plan.num_splits, 4);
        assert_eq!(plan.launches[0].grid, (128, 1, 1));
        assert_eq!(plan.workspace_f32, split_workspace_f32(32, 4, 64).unwrap());
        assert_eq!(plan.workspace_counters, 256);
        let mut names = UNSPLIT_DEFINES.map(String::from).to_vec();
        names.push("FC_HOPPER_SPLIT_KV".into());
        names.push("FC_HOPPER_PREFETCH".into()); // one round, launched programmatically
        assert_eq!(define_names(&plan), names);
        assert!(plan.launches[0]
            .defines
            .contains(&("FC_HOPPER_SPLIT_KV".to_string(), "1".to_string())));
    }
    // The large shapes are not split; with more units than CTAs they take the dynamic
    // schedule and its two counter words.
    for (b, h, s, d) in [(4, 16, 2048, 128), (4, 16, 2048, 64), (1, 16, 16384, 128)] {
        for causal in [false, true] {
            let p = AttentionProblem::new(b, h, s, d).with_causal(causal);
            let plan = PersistentHopper.plan_with(&cfg, &p, &dev).unwrap();
            assert_eq!(plan.num_splits, 1, "{p}");
            assert_eq!(plan.workspace_f32, DYNAMIC_COUNTER_WORDS);
            assert_eq!(plan.workspace_counters, DYNAMIC_COUNTER_WORDS);
            assert_eq!(plan.launches[0].grid, (132, 1, 1));
            let mut names = UNSPLIT_DEFINES.map(String::from).to_vec();
            names.push("FC_HOPPER_DYNAMIC".into());
            assert_eq!(define_names(&plan), names);
        }
    }
    // Short keys: one key tile per item is nothing to split.
    let p = AttentionProblem::new(1, 8, 512, 64).with_kv(8, 100);
    let plan = PersistentHopper.plan_with(&cfg, &p, &dev).unwrap();
    assert_eq!(plan.num_splits, 1);
}

#[test]
fn auto_split_rule() {
    // (items, longest item's key tiles, SMs) -> splits
    for (items, tiles, sms, want) in [
        (32, 4, 132, 4),  // (1,8,512,64)
        (32, 64, 132, 4), // long keys: 132 / 32 = 4 units per item fill one wave
        (40, 8, 132, 3),  // rounded down: 120 units in one wave, not 160 in two
        (66, 4, 132, 2),  // exactly half the SMs
        (67, 4, 132, 1),  // more than half: no split
        (1, 1000, 132, 132),
        (32, 1, 132, 1), // a single key tile
        (0, 4, 132, 1),
        (128, 16, 132, 1),
    ] {
        assert_eq!(
            auto_splits(items, tiles, sms),
            want,
            "{items} {tiles} {sms}"
        );
    }
}

#[test]
fn split_workspace_formula() {
    // counters: 8 per item rounded up to 32 words; slots: items x splits x 2 warpgroups x
    // (64·D partial O + 512 words of (m, l)).
    assert_eq!(split_counter_words(32), 256);
    assert_eq!(split_counter_words(33), 288);
    assert_eq!(split_counter_words(1), 32);
    assert_eq!(
        split_workspace_f32(32, 4, 64),
        Some(256 + 32 * 4 * 2 * (64 * 64 + 512))
    );
    assert_eq!(
        split_workspace_f32(32, 4, 128),
        Some(256 + 32 * 4 * 2 * (64 * 128 + 512))
    );
    // Slots stay 128-byte aligned (the kernel's float4 accesses and its static_assert).
    for d in [64, 128] {
        assert_eq!(((BLOCK_M / 2) * d + 512) % 32, 0);
    }
    assert_eq!(split_workspace_f32(usize::MAX / 2, 4, 128), None);
}

#[test]
fn split_override() {
    assert_eq!(overrides(&[]).unwrap().splits, None);
    assert_eq!(
        overrides(&[("FLASHCORE_HOPPER_SPLITS", "4")])
            .unwrap()
            .splits,
        Some(4)
    );
    assert_eq!(
        overrides(&[("FLASHCORE_HOPPER_SPLITS", " 1 ")])
            .unwrap()
            .splits,
        Some(1)
    );
    for bad in ["0", "-1", "x", "", "129", "2.5"] {
        let e = HopperConfig::from_lookup(|name| {
            (name == "FLASHCORE_HOPPER_SPLITS").then(|| bad.to_string())
        })
        .unwrap_err();
        assert!(e.contains("FLASHCORE_HOPPER_SPLITS"), "{e}");
    }
    // The smem epilogue has no split path: forcing both is refused, and alone it never splits.
    assert!(overrides(&[
        ("FLASHCORE_HOPPER_SPLITS", "2"),
        ("FLASHCORE_HOPPER_SMEM_EPILOGUE", "1")
    ])
    .is_err());
    let dev = DeviceInfo::synthetic_h100();
    let small = AttentionProblem::new(1, 8, 512, 64);
    let smem = overrides(&[("FLASHCORE_HOPPER_SMEM_EPILOGUE", "1")]).unwrap();
    assert_eq!(
        PersistentHopper
            .plan_with(&smem, &small, &dev)
            .unwrap()
            .num_splits,
        1
    );

    // 1 turns splitting off for the small problem (here without the key-split warpgroups,
    // which the default plan of it takes)...
    let off = overrides(&[
        ("FLASHCORE_HOPPER_SPLITS", "1"),
        ("FLASHCORE_HOPPER_WG_KEY_SPLIT", "0"),
    ])
    .unwrap();
    let plan = PersistentHopper.plan_with(&off, &small, &dev).unwrap();
    assert_eq!((plan.num_splits, plan.workspace_f32), (1, 0));
    assert_eq!(plan.launches[0].grid, (32, 1, 1));
    assert_eq!(define_names(&plan), one_round_defines());
    // ...and N > 1 forces it on a large one (more splits than key tiles included: those
    // units are empty and still take part in the combine).
    let forced = overrides(&[("FLASHCORE_HOPPER_SPLITS", "4")]).unwrap();
    let big = AttentionProblem::new(4, 16, 2048, 128).with_causal(true);
    let plan = PersistentHopper.plan_with(&forced, &big, &dev).unwrap();
    assert_eq!(plan.num_splits, 4);
    assert_eq!(plan.launches[0].grid, (132, 1, 1));
    assert_eq!(
        plan.workspace_f32,
        split_workspace_f32(1024, 4, 128).unwrap()
    );
    assert_eq!(plan.workspace_counters, 1024 * 8);
    let one_tile = AttentionProblem::new(1, 2, 100, 64);
    let plan = PersistentHopper
        .plan_with(&forced, &one_tile, &dev)
        .unwrap();
    assert_eq!((plan.num_splits, plan.launches[0].grid), (4, (8, 1, 1)));
    // A problem whose workspace would pass the cap runs unsplit even when forced.
    let huge = AttentionProblem::new(64, 64, 8192, 128);
    let plan = PersistentHopper.plan_with(&forced, &huge, &dev).unwrap();
    assert_eq!(plan.num_splits, 1);
    assert!(!define_names(&plan).contains(&"FC_HOPPER_SPLIT_KV".to_string()));
}

/// The unsplit defines of a one-round D = 64 problem launched programmatically: the smem
/// epilogue and the L2 prefetch too.
fn one_round_defines() -> Vec<String> {
    let mut names = UNSPLIT_DEFINES.map(String::from).to_vec();
    names.push("FC_HOPPER_SMEM_EPILOGUE".into());
    names.push("FC_HOPPER_PREFETCH".into());
    names
}

#[test]
fn dynamic_schedule_past_one_round_only() {
    let dev = DeviceInfo::synthetic_h100();
    // (1,16,512,64): 64 units on 132 SMs, one round: static, no workspace.
    let p = AttentionProblem::new(1, 16, 512, 64);
    let plan = default_plan(&p, &dev);
    assert_eq!(define_names(&plan), one_round_defines());
    assert_eq!(plan.workspace_f32, 0);
    // Forced off / on through the environment lookup.
    let off =
        HopperConfig::from_lookup(|n| (n == "FLASHCORE_HOPPER_DYNAMIC").then(|| "0".to_string()))
            .unwrap();
    let big = AttentionProblem::new(4, 16, 2048, 128).with_causal(true);
    let plan = PersistentHopper.plan_with(&off, &big, &dev).unwrap();
    assert_eq!((define_names(&plan).len(), plan.workspace_f32), (7, 0));
    let on =
        HopperConfig::from_lookup(|n| (n == "FLASHCORE_HOPPER_DYNAMIC").then(|| "1".to_string()))
            .unwrap();
    let plan = PersistentHopper.plan_with(&on, &p, &dev).unwrap();
    assert_eq!(plan.workspace_counters, DYNAMIC_COUNTER_WORDS);
    assert!(HopperConfig::from_lookup(|n| {
        (n == "FLASHCORE_HOPPER_DYNAMIC").then(|| "maybe".to_string())
    })
    .is_err());
}

#[test]
fn rejects_non_hopper() {
    let dev = DeviceInfo::synthetic_sm86();
    let p = AttentionProblem::new(1, 8, 512, 64);
    assert!(PersistentHopper.supports(&p, &dev).is_err());
}

fn define_value(plan: &LaunchPlan, name: &str) -> Option<String> {
    let prefix = format!("{name}=");
    defines(&plan.launches[0])
        .into_iter()
        .find_map(|d| d.strip_prefix(&prefix).map(str::to_string))
}

#[test]
fn every_multiple_of_8_up_to_256_runs_in_the_next_64_column_build_or_the_narrow_one() {
    let dev = DeviceInfo::synthetic_h100();
    for d in (8usize..=256).step_by(8) {
        assert_eq!(build_head_dim(d), d.div_ceil(64) * 64);
        for causal in [false, true] {
            let p = AttentionProblem::new(2, 8, 1000, d).with_causal(causal);
            let cfg = HopperConfig::default().for_problem(&p, dev.sm_count as usize);
            let build = cfg.build_head_dim(d);
            let narrow = d <= 32 && !cfg.key_split() && cfg.smem_epilogue != Some(true);
            assert_eq!(
                build,
                if narrow { 32 } else { d.div_ceil(64) * 64 },
                "d = {d}"
            );
            let plan = default_plan(&p, &dev);
            assert_eq!(define_value(&plan, "FC_HEAD_DIM"), Some(build.to_string()));
            let padded = define_value(&plan, "FC_HOPPER_PADDED_HEAD");
            assert_eq!(padded, (d != build).then(|| "1".to_string()), "d = {d}");
            assert!(plan.launches[0].dynamic_smem_bytes as usize <= 227 * 1024);
            // A padded problem takes its build's plan: the same launch but for the columns it
            // writes.
            let unpadded = AttentionProblem::new(2, 8, 1000, build).with_causal(causal);
            let unpadded = default_plan(&unpadded, &dev);
            let mut padded = defines(&plan.launches[0]);
            padded.retain(|s| s != "FC_HOPPER_PADDED_HEAD=1");
            assert_eq!(padded, defines(&unpadded.launches[0]), "d = {d}");
            assert_eq!(plan.launches[0].grid, unpadded.launches[0].grid);
        }
    }
    for d in [0, 4, 12, 264, 512] {
        let p = AttentionProblem::new(1, 8, 512, d);
        assert!(PersistentHopper.plan(&p, &dev).is_err(), "d = {d}");
    }
}

/// Head dims up to 32 take the narrow build (64-byte rows: one box of 32 columns, the 64-byte
/// swizzle) unless the plan takes the key split or the staged epilogue, which the narrow build
/// does not have; `narrow_head: false` pads them into the 64 build as before.
#[test]
fn head_dims_up_to_32_take_the_narrow_build_where_its_path_is_taken() {
    let dev = DeviceInfo::synthetic_h100();
    for d in [8, 16, 24, 32] {
        for causal in [false, true] {
            // Many rounds of items: the row warpgroups' path.
            let p = AttentionProblem::new(4, 16, 2048, d).with_causal(causal);
            let plan = default_plan(&p, &dev);
            assert_eq!(define_value(&plan, "FC_HEAD_DIM"), Some("32".to_string()));
            let spec = plan.launches[0].tensor_maps.expect("tensor maps");
            assert_eq!(spec.box_cols, 32);
            assert_eq!(spec.swizzle, Swizzle::B64);
            let cfg = HopperConfig::default().for_problem(&p, dev.sm_count as usize);
            assert_eq!(
                plan.launches[0].dynamic_smem_bytes as usize,
                cfg.smem_bytes(32, 2)
            );
            let wide = HopperConfig {
                narrow_head: false,
                ..HopperConfig::default()
            };
            let padded = PersistentHopper.plan_with(&wide, &p, &dev).expect("plans");
            assert_eq!(define_value(&padded, "FC_HEAD_DIM"), Some("64".to_string()));
            let spec = padded.launches[0].tensor_maps.expect("tensor maps");
            assert_eq!((spec.box_cols, spec.swizzle), (64, Swizzle::B128));
            // One round of 64-row items takes the key split: the 64 build.
            let small = AttentionProblem::new(1, 8, 512, d).with_causal(causal);
            let small_cfg = HopperConfig::default().for_problem(&small, dev.sm_count as usize);
            assert!(small_cfg.key_split());
            let plan = default_plan(&small, &dev);
            assert_eq!(define_value(&plan, "FC_HEAD_DIM"), Some("64".to_string()));
        }
    }
}

/// 128 queries a sequence against a 4096-key cache in pages of `block_size` rows.
fn paged_cache(
    batch: usize,
    heads_q: usize,
    d: usize,
    heads_kv: usize,
    block_size: usize,
) -> AttentionProblem {
    AttentionProblem::new(batch, heads_q, 128, d)
        .with_kv(heads_kv, 4096)
        .with_modes(flashcore_core::Modes {
            kv: KvStorage::Paged {
                num_blocks: batch * 4096 / block_size,
                block_size,
                max_blocks_per_seq: 4096 / block_size,
            },
            ..flashcore_core::Modes::default()
        })
}

#[test]
fn wide_heads_take_one_q_buffer_and_their_own_key_tiles() {
    let dev = DeviceInfo::synthetic_h100();
    for (d, block_n) in WIDE_HEAD_BLOCK_N {
        for causal in [false, true] {
            let p = AttentionProblem::new(4, 16, 2048, d).with_causal(causal);
            let cfg = HopperConfig::default().for_problem(&p, 132);
            assert_eq!(
                (cfg.block_n, cfg.q_stages, cfg.consumer_regs),
                (block_n, 1, 240)
            );
            assert!(!cfg.key_split() && cfg.warpgroups() == 2);
            assert_eq!(cfg.smem_epilogue, Some(false));
            let plan = PersistentHopper.plan(&p, &dev).expect("plans");
            assert_eq!(
                define_value(&plan, "FC_HOPPER_BLOCK_N"),
                Some(block_n.to_string())
            );
            assert_eq!(plan.launches[0].block, (384, 1, 1));
            assert!(plan.launches[0].dynamic_smem_bytes as usize <= 227 * 1024);
        }
        // A paged cache: the same tiles as a contiguous one (bit-identical outputs).
        let paged = paged_cache(4, 16, d, 4, 256);
        assert_eq!(
            HopperConfig::default().for_problem(&paged, 132).block_n,
            block_n
        );
        // Forced key splits do not fit beside the ring: the wide-head plan leaves them out.
        let forced = overrides(&[
            ("FLASHCORE_HOPPER_WG_KEY_SPLIT", "1"),
            ("FLASHCORE_HOPPER_CLUSTER_KEY_SPLIT", "1"),
        ])
        .unwrap();
        let p = AttentionProblem::new(1, 4, 256, d);
        assert!(!forced.for_problem(&p, 132).key_split());
        assert!(PersistentHopper.plan_with(&forced, &p, &dev).is_ok());
        // What spills at these widths is not planned: split-KV, even forced; the modes build's
        // dynamic schedule; the spread page producer.
        let split = overrides(&[("FLASHCORE_HOPPER_SPLITS", "4")]).unwrap();
        let plan = PersistentHopper.plan_with(&split, &p, &dev).unwrap();
        assert_eq!(plan.num_splits, 1);
        assert!(!define_names(&plan).contains(&"FC_HOPPER_SPLIT_KV".to_string()));
        let small_pages = paged_cache(16, 32, d, 8, 16);
        let names = define_names(&default_plan(&small_pages, &dev));
        assert!(names.contains(&"FC_HOPPER_MODES".to_string()));
        assert!(!names.contains(&"FC_HOPPER_DYNAMIC".to_string()));
        assert!(!names.contains(&"FC_HOPPER_SPREAD_PAGES".to_string()));
    }
}

/// V's own head dim (FlashAttention 3's `headdim_v`): the V ring at the V dim, `FC_HEAD_DIM_V` in
/// the defines, the unsplit row-warpgroup path; V dims that are not whole boxes at most the build's
/// are refused with the reason.
#[test]
fn a_distinct_v_dim_builds_its_own_v_ring() {
    let dev = DeviceInfo::synthetic_h100();
    for (d, dv) in [(192, 128), (128, 64), (256, 128), (96, 64), (184, 128)] {
        for causal in [false, true] {
            let p = AttentionProblem::new(2, 16, 1024, d)
                .with_causal(causal)
                .with_head_dim_v(dv);
            let plan = PersistentHopper.plan(&p, &dev).expect("plans");
            let build = build_head_dim(d);
            assert_eq!(define_value(&plan, "FC_HEAD_DIM"), Some(build.to_string()));
            assert_eq!(define_value(&plan, "FC_HEAD_DIM_V"), Some(dv.to_string()));
            let names = define_names(&plan);
            for off in [
                "FC_HOPPER_WG_KEY_SPLIT",
                "FC_HOPPER_SPLIT_KV",
                "FC_HOPPER_SMEM_EPILOGUE",
            ] {
                assert!(!names.contains(&off.to_string()), "{d}/{dv}: {off}");
            }
            let cfg = HopperConfig::default().for_problem(&p, 132);
            let smem = cfg.smem_bytes_v(build, dv, 2);
            assert_eq!(plan.launches[0].dynamic_smem_bytes as usize, smem);
            assert!(
                smem < cfg.smem_bytes(build, 2),
                "{d}/{dv}: the V ring shrinks"
            );
            // The tiles of the equal-dim problem of the Q/K build, but at D = 192 with a V of
            // at most 128 columns FlashAttention-3's 128-key tile.
            let same = AttentionProblem::new(2, 16, 1024, build).with_causal(causal);
            let same_cfg = HopperConfig::default().for_problem(&same, 132);
            let block_n = if build == 192 {
                NARROW_V_D192_BLOCK_N
            } else {
                same_cfg.block_n
            };
            assert_eq!(
                (cfg.block_n, cfg.stages, cfg.q_stages, cfg.consumer_regs),
                (
                    block_n,
                    same_cfg.stages,
                    same_cfg.q_stages,
                    same_cfg.consumer_regs
                )
            );
        }
    }
    // (192, 128): Q 128 x 192, two stages of 128 keys x (192 + 128), 2 bytes each.
    let p = AttentionProblem::new(2, 16, 4096, 192).with_head_dim_v(128);
    let plan = PersistentHopper.plan(&p, &dev).unwrap();
    assert_eq!(
        plan.launches[0].dynamic_smem_bytes as usize,
        128 * 192 * 2 + 2 * 128 * (192 + 128) * 2 + 128 + 1024
    );
    assert_eq!(
        define_value(&plan, "FC_HOPPER_BLOCK_N"),
        Some("128".to_string())
    );
    // A forced width is kept.
    let forced = overrides(&[("FLASHCORE_HOPPER_BLOCK_N", "112")]).unwrap();
    assert_eq!(forced.for_problem(&p, 132).block_n, 112);
    // Small and one-round problems stay unsplit, whatever the split rule would pick.
    for p in [
        AttentionProblem::new(1, 4, 256, 128).with_head_dim_v(64),
        AttentionProblem::new(1, 2, 64, 128).with_head_dim_v(64),
    ] {
        let plan = PersistentHopper.plan(&p, &dev).unwrap();
        assert_eq!(plan.num_splits, 1);
        assert!(!define_names(&plan).contains(&"FC_HOPPER_WG_KEY_SPLIT".to_string()));
    }
    // Modes build with it (paged cache, no append).
    let paged = paged_cache(2, 16, 192, 4, 64).with_head_dim_v(128);
    let plan = PersistentHopper.plan(&paged, &dev).unwrap();
    assert!(define_names(&plan).contains(&"FC_HOPPER_MODES".to_string()));
    assert_eq!(
        define_value(&plan, "FC_HEAD_DIM_V"),
        Some("128".to_string())
    );
    // Refused: not whole boxes, or wider than the Q/K build.
    for (d, dv) in [(192, 96), (128, 192), (64, 128), (192, 72)] {
        let p = AttentionProblem::new(1, 8, 512, d).with_head_dim_v(dv);
        let e = PersistentHopper.plan(&p, &dev).unwrap_err();
        assert!(
            e.reason.contains(&format!("head_dim_v {dv}")),
            "{d}/{dv}: {e}"
        );
    }
}

/// A dense e4m3 problem (Q, K and V in e4m3, O in bf16) at head dim 128.
fn e4m3_problem(b: usize, h: usize, s: usize, causal: bool) -> AttentionProblem {
    AttentionProblem::new(b, h, s, 128)
        .with_dtype(flashcore_core::DType::Bf16)
        .with_causal(causal)
        .with_modes(flashcore_core::Modes {
            kv_fp8: Some(flashcore_core::KvScales::PerBatchKvHead),
            q_fp8: true,
            ..flashcore_core::Modes::default()
        })
}

#[test]
fn e4m3_plans_the_transpose_then_the_e4m3_build() {
    let dev = DeviceInfo::synthetic_h100();
    for causal in [false, true] {
        let p = e4m3_problem(2, 8, 1000, causal);
        let plan = PersistentHopper.plan(&p, &dev).expect("plans");
        assert_eq!(plan.launches.len(), 2);
        let (vt, main) = (&plan.launches[0], &plan.launches[1]);
        assert_eq!(vt.source, VT_SOURCE);
        // 1000 keys padded to 1024: 16 tiles of 64, for each KV head and sequence.
        assert_eq!(vt.grid, (16, 8, 2));
        assert!(vt.tensor_maps.is_none() && !vt.programmatic_launch);
        assert!(main
            .defines
            .contains(&("FC_HOPPER_E4M3".into(), "1".into())));
        // Dense build: no modes, no split, no key split, no smem epilogue, no prefetch.
        for off in [
            "FC_HOPPER_MODES",
            "FC_HOPPER_SPLIT_KV",
            "FC_HOPPER_WG_KEY_SPLIT",
            "FC_HOPPER_SMEM_EPILOGUE",
            "FC_HOPPER_PREFETCH",
        ] {
            assert!(main.defines.iter().all(|(k, _)| k != off), "{off}");
        }
        assert!(main
            .defines
            .contains(&("FC_HOPPER_BLOCK_N".into(), BLOCK_N.to_string())));
        let spec = main.tensor_maps.expect("maps");
        assert_eq!(spec.box_cols, 128);
        let t = spec.transposed_v.expect("V from its copy");
        assert_eq!((t.keys, t.offset_bytes), (1024, VT_OFFSET_BYTES as u64));
        // The copy fits the workspace behind the counters.
        assert!(plan.workspace_f32 * 4 >= VT_OFFSET_BYTES + 2 * 8 * 128 * 1024);
        // Q 2 x 16 KiB, K and V 16 KiB a stage each: far below the 16-bit build's.
        assert!((main.dynamic_smem_bytes as usize) < 100 * 1024);
    }
}

#[test]
fn e4m3_refuses_what_its_build_lacks() {
    let dev = DeviceInfo::synthetic_h100();
    let d64 = AttentionProblem {
        head_dim: 64,
        ..e4m3_problem(1, 4, 256, false)
    };
    let err = PersistentHopper.plan(&d64, &dev).unwrap_err();
    assert!(err.to_string().contains("head_dim 128 only"), "{err}");
    let windowed = e4m3_problem(1, 4, 256, true).with_modes(flashcore_core::Modes {
        kv_fp8: Some(flashcore_core::KvScales::PerTensor),
        q_fp8: true,
        window_left: Some(16),
        ..flashcore_core::Modes::default()
    });
    let err = PersistentHopper.plan(&windowed, &dev).unwrap_err();
    assert!(err.to_string().contains("dense problems only"), "{err}");
}
