//! Bad input, tried and shown without a GPU: every malformed problem or buffer set gets its own
//! test and a clear error (or a defined result), and random problems — huge, zero, odd strides,
//! non-finite scales — never make validation panic. Validation runs before any device call, so
//! all of this is the same on a machine with a GPU. docs/RELIABILITY.md lists each case.

use flashcore_core::tensors::check_buffers;
use flashcore_core::{
    AttentionProblem, Capabilities, DType, DeviceInfo, HeadDims, InvalidProblem, Layout,
    ProblemStrides, TensorStrides,
};
use proptest::prelude::*;

fn h100() -> DeviceInfo {
    DeviceInfo::synthetic_h100()
}

/// Element counts a correct caller passes for `p`: Q, K, V, O, LSE.
fn lens(p: &AttentionProblem) -> [usize; 5] {
    [p.q_len(), p.k_len(), p.v_len(), p.o_len(), p.lse_len()]
}

fn tags(d: DType) -> [DType; 4] {
    [d; 4]
}

/// Capabilities like a 16-byte-load tensor-core generation's: head dims 32..=256 step 8... as a
/// list, causal, GQA, both layouts, sm_80+, 8-element alignment.
fn fast_caps() -> Capabilities {
    Capabilities::all_features(HeadDims::List(&[32, 64, 96, 128, 256]), (8, 0))
}

/// Capabilities like the scalar generation's: any head dim 1..=256, any alignment.
fn scalar_caps() -> Capabilities {
    Capabilities {
        alignment_elems: 1,
        ..Capabilities::all_features(
            HeadDims::Range {
                min: 1,
                max: 256,
                multiple_of: 1,
            },
            (8, 0),
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Shapes and heads

#[test]
fn head_dim_zero_is_invalid() {
    let e = AttentionProblem::new(1, 2, 8, 0).validate().unwrap_err();
    assert_eq!(e, InvalidProblem::ZeroHeadDim);
    assert!(e.to_string().contains("head_dim is 0"));
}

#[test]
fn zero_heads_are_invalid() {
    let e = AttentionProblem::new(1, 0, 8, 64).validate().unwrap_err();
    assert!(
        matches!(e, InvalidProblem::ZeroHeads { heads_q: 0, .. }),
        "{e}"
    );
    let e = AttentionProblem::new(1, 4, 8, 64)
        .with_kv(0, 8)
        .validate()
        .unwrap_err();
    assert!(
        matches!(e, InvalidProblem::ZeroHeads { heads_kv: 0, .. }),
        "{e}"
    );
}

#[test]
fn heads_q_not_a_multiple_of_heads_kv_is_invalid() {
    for (hq, hkv) in [(6, 4), (3, 2), (1, 2), (7, 3)] {
        let e = AttentionProblem::new(1, hq, 8, 64)
            .with_kv(hkv, 8)
            .validate()
            .unwrap_err();
        assert_eq!(
            e,
            InvalidProblem::HeadsNotDivisible {
                heads_q: hq,
                heads_kv: hkv
            }
        );
        let msg = e.to_string();
        assert!(
            msg.contains(&hq.to_string()) && msg.contains(&hkv.to_string()),
            "{msg}"
        );
    }
    // GQA and MQA groups are fine.
    for (hq, hkv) in [(8, 2), (8, 1), (8, 8)] {
        AttentionProblem::new(1, hq, 8, 64)
            .with_kv(hkv, 8)
            .validate()
            .unwrap();
    }
}

#[test]
fn odd_head_dim_is_valid_but_only_some_generations_take_it() {
    let p = AttentionProblem::new(1, 2, 8, 63);
    p.validate().unwrap();
    let e = fast_caps().check("fast", &p, &h100()).unwrap_err();
    assert!(e.reason.contains("head_dim 63"), "{e}");
    scalar_caps().check("scalar", &p, &h100()).unwrap();
}

#[test]
fn head_dim_over_256_is_unsupported_with_a_reason() {
    let p = AttentionProblem::new(1, 2, 8, 257);
    p.validate().unwrap();
    for caps in [fast_caps(), scalar_caps()] {
        let e = caps.check("k", &p, &h100()).unwrap_err();
        assert!(e.reason.contains("head_dim 257"), "{e}");
    }
}

#[test]
fn unsupported_dtype_causal_gqa_layout_and_arch_each_say_why() {
    let caps = Capabilities {
        dtypes: &[DType::F16],
        head_dims: HeadDims::List(&[64]),
        causal: false,
        gqa: false,
        layouts: &[Layout::Bshd],
        min_compute_capability: (9, 0),
        alignment_elems: 8,
        modes: flashcore_core::ModeSupport::NONE,
        distinct_head_dim_v: false,
        decode_only: None,
    };
    let base = AttentionProblem::new(1, 4, 8, 64);
    caps.check("k", &base, &h100()).unwrap();
    let cases: Vec<(AttentionProblem, DeviceInfo, &str)> = vec![
        (base.clone().with_dtype(DType::Bf16), h100(), "dtype bf16"),
        (base.clone().with_causal(true), h100(), "causal"),
        (base.clone().with_kv(2, 8), h100(), "GQA"),
        (
            base.clone().with_layout(Layout::Bhsd),
            h100(),
            "layout bhsd",
        ),
        (
            base.clone(),
            DeviceInfo::synthetic_sm86(),
            "compute capability 9.0",
        ),
    ];
    for (p, dev, why) in cases {
        let e = caps.check("k", &p, &dev).unwrap_err();
        assert!(e.reason.contains(why), "{e} should say {why}");
        assert_eq!(e.kernel, "k");
    }
}

// ---------------------------------------------------------------------------------------------
// Empty and degenerate shapes: defined results, not errors

#[test]
fn batch_zero_or_seq_q_zero_is_a_valid_empty_output() {
    for p in [
        AttentionProblem::new(0, 2, 8, 64),
        AttentionProblem::new(2, 2, 0, 64).with_kv(2, 8),
        AttentionProblem::new(0, 2, 0, 64).with_causal(true),
    ] {
        p.validate().unwrap();
        assert!(p.is_empty_output(), "{p}");
        assert_eq!(p.o_len(), 0);
        assert_eq!(p.lse_len(), 0);
        check_buffers(&p, lens(&p), tags(p.dtype)).unwrap();
        scalar_caps().check("scalar", &p, &h100()).unwrap();
        assert_eq!(p.flops(), 0.0);
    }
}

#[test]
fn seq_k_zero_is_valid_and_needs_no_k_or_v() {
    // O = 0 and LSE = +inf (the core launches kernels/core_fill.cu); here: it validates, K and
    // V may be empty buffers, and O/LSE still need their full size.
    let p = AttentionProblem::new(2, 4, 5, 64)
        .with_kv(2, 0)
        .with_causal(true);
    p.validate().unwrap();
    assert!(!p.is_empty_output());
    assert_eq!((p.k_len(), p.v_len()), (0, 0));
    assert_eq!(p.lse_len(), 2 * 4 * 5);
    check_buffers(&p, lens(&p), tags(p.dtype)).unwrap();
}

#[test]
fn causal_with_more_queries_than_keys_is_valid() {
    // Rows 0..seq_q - seq_k see no key: O = 0, LSE = +inf (judged on the GPU by the oracle).
    let p = AttentionProblem::new(1, 2, 300, 64)
        .with_kv(2, 100)
        .with_causal(true);
    p.validate().unwrap();
    fast_caps().check("fast", &p, &h100()).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Softmax scale

#[test]
fn non_finite_scale_is_invalid() {
    for s in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let e = AttentionProblem::new(1, 1, 4, 8)
            .with_scale(s)
            .validate()
            .unwrap_err();
        assert!(matches!(e, InvalidProblem::NonFiniteScale(_)), "{e}");
        assert!(e.to_string().contains("not finite"));
    }
}

#[test]
fn zero_negative_and_tiny_scales_are_valid() {
    for s in [0.0, -0.0, -1.0, -0.125, f32::MIN_POSITIVE, 1e-30, 3.0e38] {
        let p = AttentionProblem::new(1, 1, 4, 8).with_scale(s);
        p.validate().unwrap();
        assert_eq!(p.scale().to_bits(), s.to_bits());
    }
    // The default is 1/sqrt(head_dim).
    assert_eq!(AttentionProblem::new(1, 1, 4, 64).scale(), 0.125);
}

// ---------------------------------------------------------------------------------------------
// Sizes the kernels cannot index

#[test]
fn counts_past_i32_are_too_large() {
    let mut p = AttentionProblem::new(1, 1, 4, 64);
    p.seq_k = i32::MAX as usize + 1;
    let e = p.validate().unwrap_err();
    assert!(
        matches!(e, InvalidProblem::TooLarge { what: "seq_k", .. }),
        "{e}"
    );
    let mut p = AttentionProblem::new(usize::MAX, 1, 4, 64);
    assert!(matches!(
        p.validate(),
        Err(InvalidProblem::TooLarge { what: "batch", .. })
    ));
    p.batch = 1 << 20;
    p.heads_q = 1 << 10;
    p.heads_kv = 1 << 10;
    p.seq_q = 1 << 20;
    assert!(matches!(
        p.validate(),
        Err(InvalidProblem::TooLarge {
            what: "batch*heads_q*seq_q",
            ..
        })
    ));
}

#[test]
fn offsets_past_2_pow_62_are_too_large() {
    let mut p = AttentionProblem::new(2, 1, 4, 64);
    let mut s = p.strides();
    s.k.batch = 1 << 62;
    p.custom_strides = Some(s);
    let e = p.validate().unwrap_err();
    assert!(
        matches!(e, InvalidProblem::TooLarge { what: "k", .. }),
        "{e}"
    );
}

#[test]
fn tensors_past_2_pow_31_elements_are_valid() {
    // The int32-offset failure elsewhere: flashcore indexes in 64 bits, so these are fine.
    let p = AttentionProblem::new(1, 32, 65536 + 64, 1024);
    p.validate().unwrap();
    assert!(p.q_len() > 1 << 31);
    let p = AttentionProblem::new(4200, 16, 64, 64); // batch * heads > 65535
    p.validate().unwrap();
}

// ---------------------------------------------------------------------------------------------
// Strides

#[test]
fn overlapping_rows_are_invalid() {
    let mut p = AttentionProblem::new(1, 2, 8, 64);
    let mut s = p.strides();
    s.q.row = 32;
    p.custom_strides = Some(s);
    let e = p.validate().unwrap_err();
    assert!(
        matches!(
            e,
            InvalidProblem::OverlappingRows {
                tensor: "q",
                row_stride: 32,
                head_dim: 64
            }
        ),
        "{e}"
    );
}

#[test]
fn aliasing_output_heads_are_invalid_but_broadcast_inputs_are_fine() {
    // Two heads of O on the same memory would race.
    let mut p = AttentionProblem::new(2, 4, 8, 64).with_layout(Layout::Bhsd);
    let mut s = p.strides();
    s.o.head = 0;
    p.custom_strides = Some(s);
    let e = p.validate().unwrap_err();
    assert!(
        matches!(e, InvalidProblem::OverlappingOutput { axis: "head", .. }),
        "{e}"
    );
    assert!(e.to_string().contains("race"));
    // Batches of O overlapping the previous batch's last head.
    p.custom_strides = None;
    let mut s = p.strides();
    s.o.batch = s.o.head * 3;
    p.custom_strides = Some(s);
    assert!(matches!(
        p.validate(),
        Err(InvalidProblem::OverlappingOutput { axis: "batch", .. })
    ));
    // K/V broadcast across heads (head stride 0) is a read-only alias: fine.
    p.custom_strides = None;
    let mut s = p.strides();
    s.k.head = 0;
    s.v.head = 0;
    p.custom_strides = Some(s);
    p.validate().unwrap();
    // Padded output (row capacity past seq_q, row stride past head_dim) is fine.
    let pad = TensorStrides {
        batch: 4 * 24 * 72,
        head: 24 * 72,
        row: 72,
    };
    p.custom_strides = Some(ProblemStrides {
        q: pad,
        k: pad,
        v: pad,
        o: pad,
    });
    p.validate().unwrap();
}

#[test]
fn strides_breaking_16_byte_alignment_are_unsupported_by_fast_generations_only() {
    let p0 = AttentionProblem::new(2, 4, 8, 64);
    for (tensor, axis) in [("q", "row"), ("k", "head"), ("v", "batch"), ("o", "batch")] {
        let mut p = p0.clone();
        let mut s = p.strides();
        let t = match tensor {
            "q" => &mut s.q,
            "k" => &mut s.k,
            "v" => &mut s.v,
            _ => &mut s.o,
        };
        match axis {
            "row" => t.row += 4,
            "head" => t.head += 4,
            _ => t.batch += 4,
        }
        p.custom_strides = Some(s);
        // Wider gaps still do not overlap: the problem itself is valid.
        p.validate().unwrap();
        let e = fast_caps().check("fast", &p, &h100()).unwrap_err();
        assert!(
            e.reason.contains(&format!("{tensor} {axis} stride")) && e.reason.contains("16-byte"),
            "{e}"
        );
        // The scalar generation takes any alignment: the facade falls back to it.
        scalar_caps().check("scalar", &p, &h100()).unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// Buffers: lengths and dtypes (AttentionTensors::check runs check_buffers)

#[test]
fn mismatched_buffer_lengths_name_the_tensor() {
    let p = AttentionProblem::new(2, 4, 8, 64).with_kv(2, 16);
    let good = lens(&p);
    check_buffers(&p, good, tags(DType::F16)).unwrap();
    for (i, name) in ["q", "k", "v", "o", "lse"].into_iter().enumerate() {
        for delta in [-1i64, 1] {
            let mut l = good;
            l[i] = (l[i] as i64 + delta) as usize;
            let e = check_buffers(&p, l, tags(DType::F16)).unwrap_err();
            assert_eq!(
                e,
                InvalidProblem::LengthMismatch {
                    tensor: name,
                    got: l[i],
                    needed: good[i]
                }
            );
            assert!(e.to_string().starts_with(name), "{e}");
        }
    }
}

#[test]
fn strided_views_may_sit_in_larger_buffers_but_not_smaller() {
    let mut p = AttentionProblem::new(2, 4, 8, 64);
    p.custom_strides = Some(p.strides());
    let mut l = lens(&p);
    l[1] += 1000;
    check_buffers(&p, l, tags(DType::F16)).unwrap();
    l[1] = p.k_len() - 1;
    assert!(matches!(
        check_buffers(&p, l, tags(DType::F16)),
        Err(InvalidProblem::LengthMismatch { tensor: "k", .. })
    ));
}

#[test]
fn dtype_mismatch_between_q_k_v_o_names_the_tensor() {
    let p = AttentionProblem::new(1, 2, 8, 64).with_dtype(DType::F16);
    for (i, name) in ["q", "k", "v", "o"].into_iter().enumerate() {
        let mut t = tags(DType::F16);
        t[i] = DType::Bf16;
        let e = check_buffers(&p, lens(&p), t).unwrap_err();
        assert_eq!(
            e,
            InvalidProblem::DTypeMismatch {
                tensor: name,
                got: DType::Bf16,
                expected: DType::F16
            }
        );
    }
    // All four agreeing with each other but not with the problem is a mismatch too.
    assert!(check_buffers(&p, lens(&p), tags(DType::Bf16)).is_err());
}

#[test]
fn every_validation_message_is_one_line() {
    let errors = [
        InvalidProblem::ZeroHeadDim,
        InvalidProblem::ZeroHeads {
            heads_q: 0,
            heads_kv: 1,
        },
        InvalidProblem::HeadsNotDivisible {
            heads_q: 6,
            heads_kv: 4,
        },
        InvalidProblem::NonFiniteScale(f32::NAN),
        InvalidProblem::TooLarge {
            what: "seq_q",
            value: 1 << 40,
            limit: i32::MAX as u128,
        },
        InvalidProblem::OverlappingRows {
            tensor: "k",
            row_stride: 8,
            head_dim: 64,
        },
        InvalidProblem::OverlappingOutput {
            axis: "head",
            stride: 0,
            span: 64,
        },
        InvalidProblem::LengthMismatch {
            tensor: "v",
            got: 1,
            needed: 2,
        },
        InvalidProblem::DTypeMismatch {
            tensor: "q",
            got: DType::Bf16,
            expected: DType::F16,
        },
        InvalidProblem::ShapeMismatch {
            tensor: "q",
            got: vec![1, 2],
            expected: vec![1, 3],
        },
    ];
    for e in errors {
        let m = e.to_string();
        assert!(!m.contains('\n') && !m.is_empty(), "{m:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Fuzzing: nothing a caller can put in a problem makes validation panic

/// Counts that hit the edges: zero, small, around i32::MAX, 2^31, huge, anything.
fn count() -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => 0usize..=4,
        4 => 1usize..=300,
        1 => Just(i32::MAX as usize),
        1 => Just(i32::MAX as usize + 1),
        1 => Just(1usize << 31),
        1 => Just(1usize << 40),
        1 => Just(usize::MAX),
        1 => any::<usize>(),
    ]
}

fn stride() -> impl Strategy<Value = usize> {
    prop_oneof![
        4 => 0usize..=5000,
        1 => Just(1usize << 62),
        1 => Just(usize::MAX),
        1 => any::<usize>(),
    ]
}

fn tensor_strides() -> impl Strategy<Value = TensorStrides> {
    (stride(), stride(), stride()).prop_map(|(batch, head, row)| TensorStrides { batch, head, row })
}

fn scale() -> impl Strategy<Value = Option<f32>> {
    prop_oneof![
        Just(None),
        any::<f32>().prop_map(Some),
        prop::sample::select(vec![
            0.0f32,
            -0.0,
            -1.0,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            f32::MIN_POSITIVE
        ])
        .prop_map(Some),
    ]
}

prop_compose! {
    fn problem()(
        batch in count(), heads_q in count(), heads_kv in count(), seq_q in count(),
        seq_k in count(), head_dim in count(),
        dtype in prop::sample::select(DType::ALL.to_vec()),
        layout in prop::sample::select(Layout::ALL.to_vec()),
        causal in any::<bool>(), softmax_scale in scale(),
        custom in prop::option::of((tensor_strides(), tensor_strides(), tensor_strides(), tensor_strides())),
    ) -> AttentionProblem {
        AttentionProblem {
            batch, heads_q, heads_kv, seq_q, seq_k, head_dim, head_dim_v: None, dtype, causal,
            softmax_scale, layout, custom_strides: custom.map(|(q, k, v, o)| ProblemStrides { q, k, v, o }),
            modes: Default::default(),
            batch_invariant: false,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn validation_and_checks_never_panic(
        p in problem(),
        l in prop::array::uniform5(prop_oneof![Just(0usize), 0usize..100_000, any::<usize>()]),
        t in prop::array::uniform4(prop::sample::select(DType::ALL.to_vec())),
        align in prop::sample::select(vec![1usize, 2, 8, 16]),
    ) {
        let valid = p.validate();
        // Everything a caller may ask of any problem, valid or not.
        let _ = (p.q_len(), p.k_len(), p.v_len(), p.o_len(), p.lse_len());
        let _ = (p.scale(), p.strides(), p.flops(), p.is_empty_output(), p.q_heads_per_kv());
        let _ = p.to_string();
        let _ = check_buffers(&p, l, t);
        let _ = check_buffers(&p, lens(&p), tags(p.dtype));
        let mut caps = scalar_caps();
        caps.alignment_elems = align;
        let _ = caps.check("k", &p, &h100());
        let _ = fast_caps().check("k", &p, &DeviceInfo::synthetic_sm86());
        if valid.is_ok() {
            // A valid problem's buffers are addressable in i64, and the right buffers pass.
            for n in [p.q_len(), p.k_len(), p.v_len(), p.o_len()] {
                prop_assert!(n <= flashcore_core::problem::MAX_ELEMENTS);
            }
            prop_assert!(check_buffers(&p, lens(&p), tags(p.dtype)).is_ok());
            prop_assert!(p.scale().is_finite());
            prop_assert!(p.heads_q % p.heads_kv == 0 && p.head_dim > 0);
        }
    }

    /// When validation accepts a problem, no two output elements share an address (no write
    /// race); checked exhaustively on small problems with random O strides.
    #[test]
    fn accepted_outputs_never_alias(
        batch in 1usize..=3, heads in 1usize..=3, seq in 1usize..=5, d in 1usize..=4,
        ob in 0usize..=60, oh in 0usize..=30, or in 0usize..=12,
    ) {
        let mut p = AttentionProblem::new(batch, heads, seq, d).with_layout(Layout::Bhsd);
        let mut s = p.strides();
        s.o = TensorStrides { batch: ob, head: oh, row: or };
        p.custom_strides = Some(s);
        if p.validate().is_ok() {
            let mut seen = std::collections::HashSet::new();
            for b in 0..batch { for h in 0..heads { for r in 0..seq { for c in 0..d {
                prop_assert!(seen.insert(b * ob + h * oh + r * or + c),
                    "O[{b},{h},{r},{c}] aliases with strides {:?}", s.o);
            }}}}
            prop_assert!(seen.iter().all(|&x| x < p.o_len()));
        }
    }
}
