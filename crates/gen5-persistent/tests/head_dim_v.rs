//! A V head dim of its own (FlashAttention 3's `headdim_v`, DeepSeek-V2/V3 prefill's 192 / 128):
//! the portable path's build for it, and the refusals of the kernels that take one head dim.

use flashcore_core::{
    Attention, AttentionBackward, AttentionProblem, DeviceInfo, KvStorage, LaunchPlan, Modes,
};
use flashcore_persistent::portable::{choose_config, Overrides};
use flashcore_persistent::{
    Persistent, PersistentHopper, PersistentPortable, PortableAtomicBackward,
};

fn define<'a>(plan: &'a LaunchPlan, name: &str) -> Option<&'a str> {
    plan.launches[0]
        .defines
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn deepseek(batch: usize, seq: usize) -> AttentionProblem {
    AttentionProblem::new(batch, 16, seq, 192)
        .with_causal(true)
        .with_head_dim_v(128)
}

#[test]
fn the_portable_path_builds_192_with_a_128_wide_v() {
    let h100 = DeviceInfo::synthetic_h100();
    for p in [deepseek(2, 1024), deepseek(4, 4096)] {
        let plan = PersistentPortable.plan(&p, &h100).unwrap();
        assert_eq!(define(&plan, "FC_HEAD_DIM"), Some("192"));
        assert_eq!(define(&plan, "FC_HEAD_DIM_V"), Some("128"));
        assert_eq!(define(&plan, "FC_PORTABLE_PAD_D"), None);
        // The V ring is 128 columns wide: Q (112 x 192) + stages x 64 x (192 + 128), 2 bytes each.
        let cfg =
            choose_config(192, 128, false, false, false, &h100, &Overrides::default()).unwrap();
        assert_eq!(
            cfg.smem_bytes(),
            112 * 192 * 2 + cfg.stages * 64 * (192 + 128) * 2 + 256
        );
        assert_eq!(
            plan.launches[0].dynamic_smem_bytes as usize,
            cfg.smem_bytes()
        );
        // Equal dims keep their build: no FC_HEAD_DIM_V.
        let same = AttentionProblem::new(2, 16, 1024, 192).with_causal(true);
        let plan = PersistentPortable.plan(&same, &h100).unwrap();
        assert_eq!(define(&plan, "FC_HEAD_DIM_V"), None);
    }
    // A padded Q/K head dim with an instance V dim: Q and K padded, V exact.
    let p = AttentionProblem::new(1, 8, 512, 184).with_head_dim_v(128);
    let plan = PersistentPortable.plan(&p, &h100).unwrap();
    assert_eq!(define(&plan, "FC_PORTABLE_PAD_D"), Some("1"));
    assert_eq!(define(&plan, "FC_HEAD_DIM_V"), Some("128"));
    // And on the smaller shared memory of sm_86.
    PersistentPortable
        .plan(&deepseek(2, 1024), &DeviceInfo::synthetic_sm86())
        .unwrap();
}

#[test]
fn distinct_v_dims_the_build_cannot_take_are_refused_with_the_reason() {
    let h100 = DeviceInfo::synthetic_h100();
    for dv in [104, 256] {
        let p = AttentionProblem::new(1, 8, 512, 192).with_head_dim_v(dv);
        let e = PersistentPortable.plan(&p, &h100).unwrap_err();
        assert!(e.reason.contains(&format!("head_dim_v {dv}")), "{e}");
    }
}

#[test]
fn persistent_takes_the_hopper_path_with_a_128_wide_v() {
    let h100 = DeviceInfo::synthetic_h100();
    let p = deepseek(2, 1024);
    assert_eq!(Persistent::path(&p, &h100).name(), "persistent-hopper");
    let plan = Persistent.plan(&p, &h100).unwrap();
    assert_eq!(plan.launches[0].entry, "attention_persistent_hopper");
    assert_eq!(define(&plan, "FC_HEAD_DIM"), Some("192"));
    assert_eq!(define(&plan, "FC_HEAD_DIM_V"), Some("128"));
    // Off Hopper the portable path takes it, as before.
    let sm86 = DeviceInfo::synthetic_sm86();
    assert_eq!(Persistent::path(&p, &sm86).name(), "persistent-portable");
}

#[test]
fn decode_shaped_problems_take_the_padded_decode_kernel() {
    let h100 = DeviceInfo::synthetic_h100();
    // One query per sequence against a 4096-key cache: the decode kernel's 256 build, Q and K
    // padded from 192, V and O from 128.
    let p = AttentionProblem::new(4, 16, 1, 192)
        .with_kv(16, 4096)
        .with_head_dim_v(128);
    for plan in [
        PersistentPortable.plan(&p, &h100).unwrap(),
        PersistentHopper.plan(&p, &h100).unwrap(),
    ] {
        assert_eq!(plan.launches[0].entry, "attention_decode_split");
        assert_eq!(define(&plan, "FC_HEAD_DIM"), Some("256"));
        assert_eq!(define(&plan, "FC_HEAD_DIM_V"), Some("128"));
        assert_eq!(define(&plan, "FC_DECODE_PADDED"), Some("1"));
    }
    // Past one packed tile of queries the persistent kernel takes it.
    let chunk = AttentionProblem::new(4, 16, 64, 192)
        .with_kv(16, 4096)
        .with_head_dim_v(128);
    let plan = PersistentPortable.plan(&chunk, &h100).unwrap();
    assert_eq!(plan.launches.len(), 1);
    assert_eq!(plan.launches[0].entry, "attention_persistent_portable");
    // A paged cache too (no append: the core's append kernel takes one head dim).
    let paged = p.clone().with_modes(Modes {
        kv: KvStorage::Paged {
            num_blocks: 4 * 64,
            block_size: 64,
            max_blocks_per_seq: 64,
        },
        seqused_k: true,
        ..Modes::default()
    });
    let plan = PersistentPortable.plan(&paged, &h100).unwrap();
    assert_eq!(plan.launches[0].entry, "attention_decode_split");
    let paged_chunk = chunk.clone().with_modes(paged.modes.clone());
    let plan = PersistentPortable.plan(&paged_chunk, &h100).unwrap();
    assert_eq!(define(&plan, "FC_PORTABLE_MODES"), Some("1"));
    let append = paged.clone().with_modes(Modes {
        append: Some(1),
        ..paged.modes.clone()
    });
    assert!(PersistentPortable.supports(&append, &h100).is_err());
}

#[test]
fn the_backward_kernels_refuse_a_distinct_v_dim() {
    let h100 = DeviceInfo::synthetic_h100();
    // (128, 64): a head dim every backward kernel takes, so the refusal is the V dim's.
    let p = AttentionProblem::new(1, 8, 512, 128).with_head_dim_v(64);
    let kernels: [&dyn AttentionBackward; 3] = [
        &PortableAtomicBackward,
        &PersistentPortable,
        &PersistentHopper,
    ];
    for k in kernels {
        let e = k.supports_backward(&p, &h100).unwrap_err();
        assert!(e.reason.contains("head_dim_v"), "{}: {e}", k.name());
    }
}
