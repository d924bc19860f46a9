//! The facade's fallbacks, without a GPU: a problem one generation does not take (head dim, scale,
//! alignment, architecture) goes to one that does, a problem no generation takes says why, and
//! no problem — however large, empty or malformed — makes a generation's `supports` or
//! `best_for` panic. The same with real misaligned device pointers runs on the GPU in
//! `cargo xtask reliability --only badinput`.

use flashcore::{
    best_for, first_that_takes, kernel, kernels, Attention, AttentionProblem, DType, DeviceInfo,
    Error, Layout, ProblemStrides, TensorStrides, Unsupported,
};
use proptest::prelude::*;

fn h100() -> DeviceInfo {
    DeviceInfo::synthetic_h100()
}

fn best(p: &AttentionProblem, dev: &DeviceInfo) -> &'static str {
    best_for(p, dev)
        .unwrap_or_else(|| panic!("no generation takes {p}"))
        .name()
}

#[test]
fn scalar_is_compiled_in_and_last() {
    // Every fallback below ends at the scalar generation: it takes any valid problem with a
    // head dim up to 256, any alignment, any architecture flashcore targets.
    let names: Vec<&str> = kernels().iter().map(|k| k.name()).collect();
    assert_eq!(names.last(), Some(&"scalar"), "{names:?}");
}

#[test]
fn odd_head_dim_falls_back_to_scalar() {
    for d in [1, 3, 63, 65, 127, 255] {
        let p = AttentionProblem::new(2, 4, 100, d).with_causal(true);
        assert_eq!(best(&p, &h100()), "scalar", "d = {d}");
    }
}

#[test]
fn head_dims_a_fast_generation_lacks_fall_back_to_one_that_has_them() {
    for d in [8, 16, 40, 72, 96, 160, 200, 256] {
        let p = AttentionProblem::new(1, 4, 256, d);
        let k = best_for(&p, &h100()).expect("some generation takes it");
        k.supports(&p, &h100()).unwrap();
        // Every generation ahead of it in the list says why it does not.
        for other in kernels().iter().take_while(|o| o.name() != k.name()) {
            let why = other.supports(&p, &h100()).unwrap_err();
            assert!(!why.reason.is_empty());
        }
    }
}

#[test]
fn head_dim_over_512_or_zero_has_no_generation() {
    for d in [0, 513, 1024, 1 << 20] {
        let p = AttentionProblem::new(1, 4, 64, d);
        assert!(best_for(&p, &h100()).is_none(), "d = {d}");
    }
    let p = AttentionProblem::new(1, 4, 64, 513);
    for k in kernels() {
        let e = k.supports(&p, &h100()).unwrap_err();
        assert!(e.reason.contains("513"), "{}: {e}", k.name());
    }
    // Past 256, multiples of 8 up to 512 take generation 5's portable path (its V-blocked 512
    // build); other head dims the scalar forward.
    for (d, path) in [
        (257, "scalar"),
        (264, "persistent-portable"),
        (512, "persistent-portable"),
    ] {
        assert_eq!(
            best(&AttentionProblem::new(1, 4, 64, d), &h100()),
            path,
            "d = {d}"
        );
    }
}

#[test]
fn zero_and_negative_scales_fall_back_past_the_hopper_generation() {
    let Some(hopper) = kernel("persistent-hopper") else {
        return; // feature off
    };
    let p = AttentionProblem::new(2, 8, 512, 128).with_causal(true);
    hopper.supports(&p, &h100()).unwrap();
    assert_eq!(best(&p, &h100()), "persistent-hopper");
    for s in [0.0, -0.0, -0.125, -3.0] {
        let ps = p.clone().with_scale(s);
        let e = hopper.supports(&ps, &h100()).unwrap_err();
        assert!(e.reason.contains("softmax_scale"), "{e}");
        let k = best(&ps, &h100());
        assert_ne!(k, "persistent-hopper", "scale {s}");
        kernel(k).unwrap().supports(&ps, &h100()).unwrap();
    }
}

#[test]
fn non_finite_scale_has_no_generation() {
    for s in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let p = AttentionProblem::new(1, 2, 64, 64).with_scale(s);
        assert!(best_for(&p, &h100()).is_none());
    }
}

#[test]
fn strides_breaking_16_byte_alignment_fall_back_to_scalar() {
    let mut p = AttentionProblem::new(2, 4, 128, 64).with_layout(Layout::Bhsd);
    // Dense but for K's row stride of 68 elements = 136 bytes: rows are not 16-byte aligned.
    let mut s = p.strides();
    s.k = TensorStrides {
        batch: 4 * 128 * 68,
        head: 128 * 68,
        row: 68,
    };
    p.custom_strides = Some(s);
    p.validate().unwrap();
    assert_eq!(best(&p, &h100()), "scalar");
    for k in kernels() {
        if k.capabilities().alignment_elems > 1 {
            let e = k.supports(&p, &h100()).unwrap_err();
            assert!(
                e.reason.contains("stride") && e.reason.contains("16-byte"),
                "{e}"
            );
        }
    }
}

#[test]
fn older_architectures_fall_back_past_hopper_only_generations() {
    let p = AttentionProblem::new(2, 8, 512, 128).with_causal(true);
    let k = best(&p, &DeviceInfo::synthetic_sm86());
    assert_ne!(k, "persistent-hopper");
}

#[test]
fn invalid_problems_have_no_generation() {
    let cases = [
        AttentionProblem::new(1, 6, 64, 64).with_kv(4, 64), // heads not divisible
        AttentionProblem::new(1, 0, 64, 64),
        AttentionProblem::new(usize::MAX, 1, 64, 64),
        AttentionProblem::new(1, 1 << 30, 1 << 30, 1 << 30),
    ];
    for p in cases {
        assert!(best_for(&p, &h100()).is_none(), "{p}");
    }
}

#[test]
fn degenerate_but_valid_problems_have_a_generation() {
    for p in [
        AttentionProblem::new(0, 4, 64, 64),               // batch 0
        AttentionProblem::new(2, 4, 0, 64).with_kv(4, 64), // seq_q 0
        AttentionProblem::new(2, 4, 5, 64).with_kv(2, 0),  // seq_k 0
        AttentionProblem::new(2, 4, 300, 64)
            .with_kv(4, 100)
            .with_causal(true), // empty rows
        AttentionProblem::new(4200, 16, 64, 64),           // batch*heads > 65535
    ] {
        p.validate().unwrap();
        assert!(best_for(&p, &h100()).is_some(), "{p}");
    }
}

// ---------------------------------------------------------------------------------------------
// The fallback rule of forward_auto

fn unsupported(k: &dyn Attention, why: &str) -> Error {
    Error::Unsupported(Unsupported::new(k.name(), why))
}

#[test]
fn the_walk_takes_the_first_kernel_that_does_not_say_unsupported() {
    let mut tried = Vec::new();
    let (name, value) = first_that_takes(kernels(), |k| {
        tried.push(k.name());
        if k.name() == "scalar" {
            Ok(42)
        } else {
            Err(unsupported(k, "q base address 0x2 is not 16-byte aligned"))
        }
    })
    .unwrap();
    assert_eq!((name, value), ("scalar", 42));
    let all: Vec<&str> = kernels().iter().map(|k| k.name()).collect();
    assert_eq!(
        tried, all,
        "every generation ahead of scalar is tried, in order"
    );
}

#[test]
fn the_walk_stops_at_a_real_error() {
    let mut calls = 0;
    let e = first_that_takes(kernels(), |_| -> Result<(), Error> {
        calls += 1;
        Err(Error::Cuda {
            context: "launch".into(),
            message: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
        })
    })
    .unwrap_err();
    assert_eq!(calls, 1);
    assert!(matches!(e, Error::Cuda { .. }));
}

#[test]
fn the_walk_lists_every_reason_when_nothing_takes_it() {
    let e = first_that_takes(kernels(), |k| -> Result<(), Error> {
        Err(unsupported(k, "head_dim 300 is not supported"))
    })
    .unwrap_err();
    let Error::Unsupported(u) = e else {
        panic!("expected Unsupported")
    };
    for k in kernels() {
        assert!(u.reason.contains(k.name()), "{}", u.reason);
    }
    assert!(!u.reason.contains('\n'));
    let e = first_that_takes(Vec::new(), |_| -> Result<(), Error> { Ok(()) }).unwrap_err();
    assert!(e.to_string().contains("no generation is compiled in"));
}

// ---------------------------------------------------------------------------------------------
// Fuzzing: no problem makes a generation's planning panic

fn count() -> impl Strategy<Value = usize> {
    prop_oneof![
        6 => 0usize..=300,
        2 => prop::sample::select(vec![1usize, 8, 16, 32, 63, 64, 65, 96, 127, 128, 129, 255, 256, 257]),
        1 => Just(65535usize),
        1 => Just(i32::MAX as usize),
        1 => Just(1usize << 40),
        1 => any::<usize>(),
    ]
}

prop_compose! {
    fn problem()(
        batch in count(), heads_kv in count(),
        group in prop_oneof![4 => 1usize..=8, 1 => count()], seq_q in count(),
        seq_k in count(), head_dim in count(),
        dtype in prop::sample::select(DType::ALL.to_vec()),
        layout in prop::sample::select(Layout::ALL.to_vec()),
        causal in any::<bool>(),
        scale in prop::option::of(prop_oneof![any::<f32>(), Just(0.0f32), Just(-1.0f32)]),
        strides in prop::option::weighted(0.3, prop::array::uniform12(prop_oneof![
            4 => (0usize..640).prop_map(|x| x * 8), 1 => 0usize..5000, 1 => any::<usize>()])),
    ) -> AttentionProblem {
        // Mostly whole GQA groups (so most problems are valid); sometimes any count.
        let heads_q = heads_kv.saturating_mul(group);
        let t = |a: &[usize]| TensorStrides { batch: a[0], head: a[1], row: a[2] };
        AttentionProblem {
            batch, heads_q, heads_kv, seq_q, seq_k, head_dim, head_dim_v: None, dtype, causal,
            softmax_scale: scale, layout,
            custom_strides: strides.map(|s| ProblemStrides {
                q: t(&s[0..3]), k: t(&s[3..6]), v: t(&s[6..9]), o: t(&s[9..12]),
            }),
            modes: Default::default(),
            batch_invariant: false,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn planning_never_panics_and_best_for_is_consistent(p in problem()) {
        let devices = [h100(), DeviceInfo::synthetic_sm86()];
        let valid = p.validate().is_ok();
        for dev in &devices {
            let best = best_for(&p, dev);
            if !valid {
                prop_assert!(best.is_none());
                continue;
            }
            for k in kernels() {
                // A valid problem: planning answers Ok or Unsupported, never panics.
                let _ = k.supports(&p, dev);
            }
            if let Some(k) = &best {
                prop_assert!(k.supports(&p, dev).is_ok());
            } else {
                // Only head dims past 256 (or layouts/strides nothing takes) go unserved; the
                // scalar generation takes every other valid problem.
                prop_assert!(p.head_dim > 256, "nothing takes {}", p);
            }
        }
    }
}

#[test]
fn the_fuzzer_reaches_valid_problems() {
    // Planning is only reached by valid problems; make sure the generator makes plenty.
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = problem();
    let valid = (0..2000)
        .filter(|_| {
            use proptest::strategy::ValueTree;
            strategy
                .new_tree(&mut runner)
                .unwrap()
                .current()
                .validate()
                .is_ok()
        })
        .count();
    assert!(
        valid > 300,
        "only {valid} of 2000 generated problems are valid"
    );
}

#[cfg(feature = "persistent")]
#[test]
fn persistent_picks_its_path_from_the_compute_capability() {
    use flashcore::DeviceInfo;
    let k = flashcore::kernel("persistent").expect("generation 5 by its family name");
    let p = flashcore::AttentionProblem::new(2, 8, 1024, 128);
    let hopper = k.plan(&p, &DeviceInfo::synthetic_h100()).unwrap();
    assert_eq!(hopper.launches[0].entry, "attention_persistent_hopper");
    let ampere = k.plan(&p, &DeviceInfo::synthetic_sm86()).unwrap();
    assert_eq!(ampere.launches[0].entry, "attention_persistent_portable");
}
