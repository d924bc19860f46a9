//! The portable plan's configurations, shared memory and overrides on synthetic devices,
//! without a GPU.

use super::*;

fn dev(cc: (u32, u32), optin_kib: u32) -> DeviceInfo {
    DeviceInfo {
        ordinal: 0,
        name: "synthetic".into(),
        compute_capability: cc,
        sm_count: 108,
        max_shared_memory_per_block: 48 * 1024,
        max_shared_memory_per_block_optin: optin_kib * 1024,
        l2_bytes: 40 << 20,
        total_memory: 40 << 30,
    }
}

fn define<'a>(l: &'a KernelLaunch, k: &str) -> &'a str {
    &l.defines.iter().find(|(n, _)| n == k).unwrap().1
}

fn plan(p: &AttentionProblem, d: &DeviceInfo) -> Result<LaunchPlan, Unsupported> {
    PersistentPortable.plan_with(p, d, &Overrides::default(), false)
}

/// The (first) launch of the plan for `p` on `d` with the overrides `ov`.
fn launch_with(p: &AttentionProblem, d: &DeviceInfo, ov: &Overrides) -> KernelLaunch {
    let mut plan = PersistentPortable.plan_with(p, d, ov, false).unwrap();
    plan.launches.remove(0)
}

/// The (first) launch of the default plan for `p` on `d`.
fn launch(p: &AttentionProblem, d: &DeviceInfo) -> KernelLaunch {
    launch_with(p, d, &Overrides::default())
}

/// Overrides of the consumer warps alone.
fn warps(n: usize) -> Overrides {
    Overrides {
        warps: Some(n),
        ..Default::default()
    }
}

/// What `smem_bytes` says for the configuration a launch's defines name.
fn smem_of_defines(l: &KernelLaunch, d: usize) -> usize {
    let n = |k: &str| -> usize { define(l, k).parse().unwrap() };
    smem_bytes(
        d,
        16 * n("FC_PORTABLE_WARPS"),
        n("FC_PORTABLE_BLOCK_N"),
        n("FC_PORTABLE_STAGES"),
        n("FC_PORTABLE_Q_STAGES"),
    )
}

#[test]
fn smem_formula_matches_kernel() {
    // Kernel: Q_STAGES * 128 * D * 2 + 2 * STAGES * 64 * D * 2 + 256.
    assert_eq!(smem_bytes(64, 128, 64, 4, 1), 16384 + 65536 + 256);
    assert_eq!(smem_bytes(128, 128, 64, 4, 1), 32768 + 131072 + 256);
    assert_eq!(smem_bytes(128, 128, 64, 2, 1), 32768 + 65536 + 256);
    assert_eq!(smem_bytes(128, 128, 64, 4, 2), 65536 + 131072 + 256);
    assert_eq!(smem_bytes(64, 64, 64, 3, 1), 8192 + 49152 + 256);
}

#[test]
fn h100_persistent_grid_and_block() {
    let h100 = DeviceInfo::synthetic_h100();
    for d in [64, 128] {
        for causal in [false, true] {
            let p = AttentionProblem::new(4, 16, 2048, d).with_causal(causal);
            // Default on sm_90: at D = 64, 4 consumer warps + the producer, two CTAs per SM;
            // at D = 128, 7 + the producer, one CTA per SM (8 warps: 255 registers).
            let l = &launch(&p, &h100);
            if d == 64 {
                assert_eq!(l.grid, (264, 1, 1));
                assert_eq!(l.block, (160, 1, 1));
            } else {
                assert_eq!(l.grid, (132, 1, 1));
                assert_eq!(l.block, (256, 1, 1));
                assert_eq!(define(l, "FC_PORTABLE_MIN_BLOCKS"), "1");
            }
            let l = &launch_with(&p, &h100, &warps(8));
            assert_eq!(l.grid, (132, 1, 1));
            assert_eq!(l.block, (288, 1, 1));
            assert_eq!(l.entry, ENTRY);
            assert_eq!(l.source, SOURCE);
            assert!(l.dynamic_smem_bytes as usize <= 227 * 1024);
        }
    }
    // D = 128 on sm_90 with 8 warps: 6 Q slices in registers, Q double-buffered, 4 stages.
    let eight = warps(8);
    let l = &launch_with(&AttentionProblem::new(1, 16, 16384, 128), &h100, &eight);
    assert_eq!(define(l, "FC_PORTABLE_Q_REG_SLICES"), "6");
    assert_eq!(define(l, "FC_PORTABLE_Q_STAGES"), "2");
    assert_eq!(define(l, "FC_PORTABLE_STAGES"), "4");
    assert_eq!(l.dynamic_smem_bytes, 65536 + 131072 + 256);
    let l = &launch_with(&AttentionProblem::new(1, 16, 16384, 64), &h100, &eight);
    assert_eq!(define(l, "FC_PORTABLE_Q_REG_SLICES"), "4");
    assert_eq!(define(l, "FC_PORTABLE_Q_STAGES"), "1");
    assert_eq!(define(l, "FC_PORTABLE_STAGES"), "4");
}

#[test]
fn grid_never_exceeds_items() {
    let p = AttentionProblem::new(1, 2, 300, 64); // 2 heads x 5 q tiles of 64 rows (sm_90)
    let l = &launch(&p, &DeviceInfo::synthetic_h100());
    assert_eq!(l.grid, (10, 1, 1));
}

#[test]
fn ampere_and_ada_configurations_fit() {
    // A100: 163 KB -> D = 128 keeps all of Q in registers, 4 stages (164 096 bytes).
    let a100 = dev((8, 0), 163);
    let l = &launch(&AttentionProblem::new(2, 8, 1024, 128), &a100);
    assert_eq!(define(l, "FC_PORTABLE_Q_REG_SLICES"), "8");
    assert_eq!(define(l, "FC_PORTABLE_Q_STAGES"), "1");
    assert_eq!(define(l, "FC_PORTABLE_STAGES"), "4");
    assert_eq!(l.grid, (108, 1, 1));
    // sm_86 / sm_89: 99 KB -> D = 128 gets 2 stages (98 560 bytes).
    for cc in [(8, 6), (8, 9)] {
        let d = dev(cc, 99);
        let l = &launch(&AttentionProblem::new(2, 8, 1024, 128), &d);
        assert_eq!(define(l, "FC_PORTABLE_STAGES"), "2");
        assert_eq!(l.dynamic_smem_bytes, 98560);
        let l = &launch(&AttentionProblem::new(2, 8, 1024, 64), &d);
        assert_eq!(define(l, "FC_PORTABLE_STAGES"), "4");
    }
}

#[test]
fn too_little_shared_memory_says_how_much() {
    let small = dev((8, 6), 64);
    let err = PersistentPortable
        .supports(&AttentionProblem::new(1, 1, 128, 128), &small)
        .unwrap_err();
    assert!(err.reason.contains("98560"), "{err}");
    assert!(err.reason.contains("65536"), "{err}");
}

#[test]
fn pre_ampere_is_unsupported() {
    let p = AttentionProblem::new(1, 1, 8, 64);
    assert!(PersistentPortable.supports(&p, &dev((7, 5), 64)).is_err());
}

#[test]
fn item_count_limit() {
    // 64-row items on sm_90: 2^11 * 2^6 * 2^8 = 2^25 items
    let p = AttentionProblem::new(1 << 11, 1 << 6, 1 << 14, 64);
    let err = plan(&p, &DeviceInfo::synthetic_h100()).unwrap_err();
    assert!(err.reason.contains("work items"), "{err}");
    let p = AttentionProblem::new(1 << 10, 1 << 6, 1 << 14, 64);
    assert!(plan(&p, &DeviceInfo::synthetic_h100()).is_ok());
}

#[test]
fn four_warp_variant_shares_the_sm() {
    let ov = warps(4);
    let h100 = DeviceInfo::synthetic_h100();
    let p = AttentionProblem::new(4, 16, 2048, 128);
    let l = &launch_with(&p, &h100, &ov);
    assert_eq!(l.block, (160, 1, 1));
    assert_eq!(l.grid, (264, 1, 1));
    assert_eq!(define(l, "FC_PORTABLE_MIN_BLOCKS"), "2");
    assert!(2 * (l.dynamic_smem_bytes as usize + 1024) <= 228 * 1024);
}

#[test]
fn register_budget_follows_warps_per_sub_partition() {
    // 8 warps per SM: 2 per sub-partition; 9 or 10: 3 on one; 16: 4.
    assert_eq!(register_budget(7, 1), 255);
    assert_eq!(register_budget(3, 2), 255);
    assert_eq!(register_budget(8, 1), 168);
    assert_eq!(register_budget(4, 2), 168);
    assert_eq!(register_budget(3, 4), 128);
}

#[test]
fn head_dim_128_on_sm90_is_seven_warps_of_128_key_tiles() {
    let h100 = DeviceInfo::synthetic_h100();
    let l = &launch(&AttentionProblem::new(1, 16, 16384, 128), &h100);
    assert_eq!(define(l, "FC_PORTABLE_WARPS"), "7");
    assert_eq!(define(l, "FC_PORTABLE_BLOCK_N"), "128");
    // All 8 Q slices in registers, so one Q buffer; 3 stages of 128-key K and V.
    assert_eq!(define(l, "FC_PORTABLE_Q_REG_SLICES"), "8");
    assert_eq!(define(l, "FC_PORTABLE_Q_STAGES"), "1");
    assert_eq!(define(l, "FC_PORTABLE_STAGES"), "3");
    // 112 x 128 x 2 (Q) + 2 x 3 x 128 x 128 x 2 (K, V) + 256
    assert_eq!(l.dynamic_smem_bytes, 28672 + 196608 + 256);
    assert!(l.dynamic_smem_bytes as usize <= 227 * 1024);
}

#[test]
fn block_n_128_at_head_dim_128_needs_the_full_register_budget() {
    let ov = Overrides {
        block_n: Some(128),
        ..Default::default()
    };
    let h100 = DeviceInfo::synthetic_h100();
    let p = AttentionProblem::new(1, 1, 256, 64);
    let l = &launch_with(&p, &h100, &ov);
    assert_eq!(define(l, "FC_PORTABLE_BLOCK_N"), "128");
    // D = 128 with 4 warps x 2 CTAs (10 warps per SM, 168 registers): S + O + Q spill.
    let four = Overrides {
        warps: Some(4),
        ..ov
    };
    let p = AttentionProblem::new(1, 1, 256, 128);
    let err = PersistentPortable
        .plan_with(&p, &h100, &four, false)
        .unwrap_err();
    assert!(err.reason.contains("255-register"), "{err}");
    // The sm_90 D = 128 default (7 warps, one CTA) takes it.
    assert!(PersistentPortable.plan_with(&p, &h100, &ov, false).is_ok());
}

#[test]
fn dynamic_schedule_only_past_one_round() {
    let h100 = DeviceInfo::synthetic_h100();
    // (4,16,2048,128) with 4 warps: 2048 items of 64 rows for 264 CTA slots -> dynamic, two
    // counter words.
    let four = warps(4);
    let p = PersistentPortable
        .plan_with(
            &AttentionProblem::new(4, 16, 2048, 128),
            &h100,
            &four,
            false,
        )
        .unwrap();
    let l = &p.launches[0];
    assert_eq!(define(l, "FC_PORTABLE_DYNAMIC"), "1");
    assert_eq!(p.workspace_f32, DYNAMIC_COUNTER_WORDS);
    assert_eq!(p.workspace_counters, DYNAMIC_COUNTER_WORDS);
    // The dynamic hand-over costs a register: 5 Q slices in registers at D = 128, 4 warps.
    assert_eq!(define(l, "FC_PORTABLE_Q_REG_SLICES"), "5");
    // (1,8,512,64): 8 x 4 items of 128 rows (D = 64 on sm_90) <= 264 slots -> static.
    let plan = plan(&AttentionProblem::new(1, 8, 512, 64), &h100).unwrap();
    assert!(plan.launches[0]
        .defines
        .iter()
        .all(|(n, _)| n != "FC_PORTABLE_DYNAMIC"));
    assert_eq!(plan.workspace_f32, 0);
    // Forced off.
    let off = Overrides {
        dynamic: Some(false),
        ..four
    };
    let plan = PersistentPortable
        .plan_with(&AttentionProblem::new(4, 16, 2048, 128), &h100, &off, false)
        .unwrap();
    assert_eq!(plan.workspace_f32, 0);
    assert_eq!(define(&plan.launches[0], "FC_PORTABLE_Q_REG_SLICES"), "6");
}

#[test]
fn head_dim_64_on_sm90_takes_128_key_tiles() {
    let h100 = DeviceInfo::synthetic_h100();
    let l = &launch(&AttentionProblem::new(4, 16, 2048, 64), &h100);
    assert_eq!(define(l, "FC_PORTABLE_BLOCK_N"), "128");
    assert_eq!(define(l, "FC_PORTABLE_STAGES"), "3");
    // 64 x 64 x 2 (Q) + 2 x 3 x 128 x 64 x 2 (K, V) + 256
    assert_eq!(l.dynamic_smem_bytes, 8192 + 98304 + 256);
    // Ampere keeps 64-key tiles.
    let l = &launch(&AttentionProblem::new(4, 16, 2048, 64), &dev((8, 0), 163));
    assert_eq!(define(l, "FC_PORTABLE_BLOCK_N"), "64");
}

#[test]
fn two_row_tiles_per_warp_double_the_item() {
    let ov = Overrides {
        warps: Some(3),
        m_tiles: Some(2),
        ..Default::default()
    };
    let h100 = DeviceInfo::synthetic_h100();
    let l = &launch_with(&AttentionProblem::new(1, 2, 960, 64), &h100, &ov);
    // 96-row items: 2 heads x 10 q tiles; 3 consumer warps + the producer.
    assert_eq!(l.grid, (20, 1, 1));
    assert_eq!(l.block, (128, 1, 1));
    assert_eq!(define(l, "FC_PORTABLE_WARP_M_TILES"), "2");
    let bad = Overrides {
        m_tiles: Some(3),
        ..Default::default()
    };
    let err = PersistentPortable
        .plan_with(&AttentionProblem::new(1, 2, 960, 64), &h100, &bad, false)
        .unwrap_err();
    assert!(err.reason.contains("WARP_M_TILES=3"), "{err}");
}

/// Paged cache with seqused_k, window, softcap, ALiBi, causal, GQA (as check-kernels'
/// every-mode problem).
fn every_mode(d: usize) -> AttentionProblem {
    use flashcore_core::{AlibiSlopes, KvStorage, Modes};
    AttentionProblem::new(2, 8, 512, d)
        .with_kv(2, 1024)
        .with_causal(true)
        .with_modes(Modes {
            kv: KvStorage::Paged {
                num_blocks: 32,
                block_size: 64,
                max_blocks_per_seq: 16,
            },
            seqused_k: true,
            append: Some(3),
            window_left: Some(256),
            softcap: Some(30.0),
            alibi: Some(AlibiSlopes::PerBatchHead),
            ..Modes::default()
        })
}

/// Varlen: packed Q/O (3 sequences, max_seqlen_q 300) and packed K/V.
fn varlen(d: usize) -> AttentionProblem {
    use flashcore_core::{KvStorage, Modes};
    AttentionProblem::new(3, 4, 300, d)
        .with_kv(4, 700)
        .with_modes(Modes {
            packed_q: Some(555),
            kv: KvStorage::Packed { total_k: 1200 },
            window_right: Some(7),
            ..Modes::default()
        })
}

#[test]
fn modes_build_only_for_mode_problems() {
    let devices = [
        DeviceInfo::synthetic_h100(),
        dev((8, 0), 163),
        dev((8, 6), 99),
        dev((8, 9), 99),
    ];
    for device in &devices {
        for d in [64, 128] {
            // Dense: no FC_PORTABLE_MODES, shared memory as before.
            for p in [
                AttentionProblem::new(2, 8, 1024, d),
                AttentionProblem::new(4, 16, 2048, d).with_causal(true),
            ] {
                let l = &launch(&p, device);
                assert!(l.defines.iter().all(|(n, _)| n != "FC_PORTABLE_MODES"));
                assert_eq!(l.dynamic_smem_bytes as usize, smem_of_defines(l, d));
            }
            // Every mode (and varlen): the capabilities pass, the modes build is asked for,
            // with the per-warp item info after the barriers.
            for p in [every_mode(d), varlen(d)] {
                PersistentPortable
                    .capabilities()
                    .check(NAME, &p, device)
                    .unwrap();
                PersistentPortable.supports(&p, device).unwrap();
                let l = &launch(&p, device);
                assert_eq!(define(l, "FC_PORTABLE_MODES"), "1");
                let warps: usize = define(l, "FC_PORTABLE_WARPS").parse().unwrap();
                assert_eq!(
                    l.dynamic_smem_bytes as usize,
                    smem_of_defines(l, d) + 32 * warps
                );
                assert!(
                    l.dynamic_smem_bytes <= device.max_shared_memory_per_block_optin,
                    "{p} on {:?}",
                    device.compute_capability
                );
            }
        }
    }
}

#[test]
fn modes_take_64_key_tiles_at_head_dim_64_on_sm90() {
    let h100 = DeviceInfo::synthetic_h100();
    let l = &launch(&every_mode(64), &h100);
    assert_eq!(define(l, "FC_PORTABLE_WARPS"), "4");
    assert_eq!(define(l, "FC_PORTABLE_BLOCK_N"), "64");
    // D = 128 keeps its 7 warps and 128-key tiles (255 registers: room for the block info).
    let l = &launch(&every_mode(128), &h100);
    assert_eq!(define(l, "FC_PORTABLE_WARPS"), "7");
    assert_eq!(define(l, "FC_PORTABLE_BLOCK_N"), "128");
    // An explicit override still wins.
    let ov = Overrides {
        block_n: Some(128),
        ..Default::default()
    };
    let l = &launch_with(&every_mode(64), &h100, &ov);
    assert_eq!(define(l, "FC_PORTABLE_BLOCK_N"), "128");
}

#[test]
fn varlen_items_cover_max_seqlen_q_tiles() {
    // 3 sequences x 4 heads x ceil(300 / BM) q tiles, whatever each sequence's own length:
    // the kernel finishes the items past a sequence's end at once.
    let a100 = dev((8, 0), 163);
    let p = varlen(128);
    let l = &launch(&p, &a100);
    assert_eq!(define(l, "FC_PORTABLE_WARPS"), "8"); // 128-row items
    assert_eq!(l.grid, (3 * 4 * 3, 1, 1)); // 36 items < 108 SMs: one CTA each
    assert!(l.defines.iter().all(|(n, _)| n != "FC_PORTABLE_DYNAMIC"));
    // sm_90, D = 64: 64-row items, 3 x 4 x 5 = 60.
    let l = &launch(&varlen(64), &DeviceInfo::synthetic_h100());
    assert_eq!(l.grid, (60, 1, 1));
    // Many items: the dynamic schedule, with its counters, in the modes build too.
    let big = AttentionProblem::new(16, 32, 4096, 128)
        .with_causal(true)
        .with_modes(flashcore_core::Modes {
            packed_q: Some(16 * 4096),
            ..Default::default()
        });
    let plan = plan(&big, &a100).unwrap();
    let l = &plan.launches[0];
    assert_eq!(define(l, "FC_PORTABLE_MODES"), "1");
    assert_eq!(define(l, "FC_PORTABLE_DYNAMIC"), "1");
    assert_eq!(plan.workspace_counters, DYNAMIC_COUNTER_WORDS);
    assert_eq!(l.grid, (108, 1, 1));
}

#[test]
fn debug_define() {
    let p = AttentionProblem::new(1, 1, 64, 64);
    let plan = PersistentPortable
        .plan_with(
            &p,
            &DeviceInfo::synthetic_h100(),
            &Overrides::default(),
            true,
        )
        .unwrap();
    assert_eq!(define(&plan.launches[0], "FC_PORTABLE_DEBUG"), "1");
}

#[test]
fn every_head_dim_plans_within_each_architectures_shared_memory() {
    // sm_80 (A100: 163 KiB opt-in), sm_86/89 (99 KiB), sm_90 (227 KiB); dense and modes builds.
    for (cc, kib) in [((8, 0), 163), ((8, 6), 99), ((8, 9), 99), ((9, 0), 227)] {
        let d = dev(cc, kib);
        for &hd in HEAD_DIMS {
            for causal in [false, true] {
                let dense = AttentionProblem::new(2, 4, 300, hd).with_causal(causal);
                for p in [dense, varlen(hd), every_mode(hd)] {
                    let l = launch(&p, &d);
                    assert!(
                        l.dynamic_smem_bytes as usize <= kib as usize * 1024,
                        "D={hd} cc {cc:?}: {} bytes",
                        l.dynamic_smem_bytes
                    );
                    assert_eq!(define(&l, "FC_HEAD_DIM"), hd.to_string());
                }
            }
        }
    }
}

#[test]
fn wide_head_dims_take_one_cta_of_at_most_seven_warps_and_64_key_tiles() {
    let h100 = DeviceInfo::synthetic_h100();
    for hd in [160, 192, 224, 256] {
        let l = launch(&AttentionProblem::new(2, 8, 1024, hd), &h100);
        assert_eq!(define(&l, "FC_PORTABLE_WARPS"), "7", "D={hd}");
        assert_eq!(define(&l, "FC_PORTABLE_BLOCK_N"), "64", "D={hd}");
        assert_eq!(define(&l, "FC_PORTABLE_MIN_BLOCKS"), "1", "D={hd}");
        let slices: usize = define(&l, "FC_PORTABLE_Q_REG_SLICES").parse().unwrap();
        assert_eq!(slices, default_q_slices(hd, 64));
        // O + S + the Q slices stay under the register plan.
        assert!(
            hd / 2 + 32 + 4 * slices <= WIDE_HEAD_DIM_REGISTER_PLAN,
            "D={hd}"
        );
    }
    assert_eq!(default_q_slices(256, 64), 6);
    assert_eq!(default_q_slices(192, 64), 12);
    assert_eq!(default_q_slices(224, 64), 10);
    // An sm_86 part: four warps of 32-key tiles fit its 99 KiB.
    let l = launch(&AttentionProblem::new(2, 8, 1024, 256), &dev((8, 6), 99));
    assert_eq!(define(&l, "FC_PORTABLE_WARPS"), "4");
    assert_eq!(define(&l, "FC_PORTABLE_BLOCK_N"), "32");
}

#[test]
fn wide_head_dims_refuse_128_key_tiles_with_a_reason() {
    let ov = Overrides {
        block_n: Some(128),
        ..Default::default()
    };
    let err = PersistentPortable
        .plan_with(
            &AttentionProblem::new(1, 1, 64, 256),
            &DeviceInfo::synthetic_h100(),
            &ov,
            false,
        )
        .unwrap_err();
    assert!(err.reason.contains("head_dim 256"), "{err}");
}

#[test]
fn head_dims_between_instances_run_padded_in_the_next_one_up() {
    let h100 = DeviceInfo::synthetic_h100();
    for (d, instance) in [
        (8, 32),
        (40, 64),
        (80, 96),
        (120, 128),
        (136, 160),
        (248, 256),
    ] {
        let l = launch(&AttentionProblem::new(2, 4, 300, d), &h100);
        assert_eq!(define(&l, "FC_HEAD_DIM"), instance.to_string(), "D={d}");
        assert_eq!(define(&l, "FC_PORTABLE_PAD_D"), "1", "D={d}");
    }
    for &d in HEAD_DIMS {
        let l = launch(&AttentionProblem::new(2, 4, 300, d), &h100);
        assert!(
            l.defines.iter().all(|(k, _)| k != "FC_PORTABLE_PAD_D"),
            "D={d}"
        );
    }
}

#[test]
fn head_dims_past_256_run_in_two_v_blocks_of_the_512_build() {
    let h100 = DeviceInfo::synthetic_h100();
    for (hd, padded) in [(512, false), (264, true), (384, true), (504, true)] {
        for p in [
            AttentionProblem::new(2, 8, 1024, hd),
            AttentionProblem::new(2, 8, 1024, hd).with_causal(true),
            varlen(hd),
            every_mode(hd),
        ] {
            let l = launch(&p, &h100);
            assert_eq!(define(&l, "FC_HEAD_DIM"), "512", "D={hd}");
            assert_eq!(define(&l, "FC_PORTABLE_V_BLOCKS"), "2", "D={hd}");
            assert!(l.defines.iter().all(|(k, _)| k != "FC_HEAD_DIM_V"));
            assert_eq!(
                l.defines.iter().any(|(k, _)| k == "FC_PORTABLE_PAD_D"),
                padded,
                "D={hd}"
            );
            // Seven warps of 32-key tiles: Q (112 rows x 1 KiB) and two stages of K (32 KiB)
            // and a V block (16 KiB).
            assert_eq!(define(&l, "FC_PORTABLE_WARPS"), "7", "D={hd}");
            assert_eq!(define(&l, "FC_PORTABLE_BLOCK_N"), "32", "D={hd}");
            assert_eq!(define(&l, "FC_PORTABLE_STAGES"), "2", "D={hd}");
            assert_eq!(
                define(&l, "FC_PORTABLE_Q_REG_SLICES"),
                V_BLOCKED_Q_SLICES.to_string()
            );
            let smem = smem_bytes_v(512, V_BLOCK_COLS, 112, 32, 2, 1);
            assert!(l.dynamic_smem_bytes as usize >= smem, "D={hd}");
            assert!(l.dynamic_smem_bytes <= h100.max_shared_memory_per_block_optin);
        }
    }
    // Items count the V blocks: 2 x 8 x ceil(1024 / 112) x 2 = 320, more than the SMs.
    let l = launch(&AttentionProblem::new(2, 8, 1024, 512), &h100);
    assert_eq!(l.grid.0, h100.sm_count);
    let l = launch(&AttentionProblem::new(1, 1, 100, 512), &h100);
    assert_eq!(l.grid, (2, 1, 1), "one q tile, two V blocks");
}

#[test]
fn head_dim_512_says_why_where_it_does_not_fit() {
    // sm_86 / sm_89 (99 KiB): Q of four warps and one 32-key stage are already past it.
    let err = plan(&AttentionProblem::new(1, 2, 300, 512), &dev((8, 6), 99)).unwrap_err();
    assert!(err.reason.contains("shared memory"), "{err}");
    // Past 512 nothing takes it.
    let err = PersistentPortable
        .supports(
            &AttentionProblem::new(1, 2, 300, 520),
            &DeviceInfo::synthetic_h100(),
        )
        .unwrap_err();
    assert!(err.reason.contains("520"), "{err}");
    // The V blocks count toward the item limit (2^24 q tiles x 2 blocks).
    let p = AttentionProblem::new(1 << 10, 1 << 7, 112 << 7, 512);
    let err = plan(&p, &DeviceInfo::synthetic_h100()).unwrap_err();
    assert!(err.reason.contains("V blocks"), "{err}");
}

#[test]
fn a_distinct_v_head_dim_past_256_is_refused_by_name() {
    for (d, dv) in [(512, 128), (384, 256)] {
        let p = AttentionProblem::new(2, 8, 1024, d).with_head_dim_v(dv);
        let err = plan(&p, &DeviceInfo::synthetic_h100()).unwrap_err();
        assert!(err.reason.contains("head_dim_v"), "{err}");
    }
}

#[test]
fn a_padded_512_head_with_mm_prefix_ranges_keeps_the_static_schedule() {
    let h100 = DeviceInfo::synthetic_h100();
    let with_ranges = |d: usize| {
        let mut p = every_mode(d).with_causal(false);
        p.batch = 8;
        p.seq_q = 2048;
        p.modes.mm_prefix = Some(2);
        p
    };
    let dynamic = |l: &KernelLaunch| l.defines.iter().any(|(k, _)| k == "FC_PORTABLE_DYNAMIC");
    // Past one round: the exact 512 build takes the dynamic schedule, the padded one does not.
    assert!(dynamic(&launch(&with_ranges(512), &h100)));
    assert!(!dynamic(&launch(&with_ranges(384), &h100)));
    let mut no_ranges = with_ranges(384);
    no_ranges.modes.mm_prefix = None;
    assert!(dynamic(&launch(&no_ranges, &h100)));
}
