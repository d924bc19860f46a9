//! e4m3 Q, K and V (`Modes::q_fp8` beside `Modes::kv_fp8`, FlashAttention 3's fp8 forward)
//! without a device: the problem rules, Q's descale table, Q's element check, the buffers, the
//! parameter block, the capability check, the backward's refusal and the host path's encoding.

use flashcore_core::backward::validate_backward;
use flashcore_core::host::e4m3_bytes;
use flashcore_core::params::AttentionParams;
use flashcore_core::tensors::{check_buffers, check_q_dtype};
use flashcore_core::{
    AttentionProblem, Capabilities, DType, DeviceInfo, HeadDims, HostTables, InvalidProblem,
    KvScales, ModeSupport, Modes, ProblemStrides, TensorStrides,
};
use ndarray::{ArrayD, IxDyn};

/// A dense fp8 forward: batch 3, 8 query heads over 2 KV heads, 100 rows over 333 keys.
fn fp8_qkv(scales: KvScales) -> AttentionProblem {
    AttentionProblem::new(3, 8, 100, 128)
        .with_kv(2, 333)
        .with_dtype(DType::Bf16)
        .with_causal(true)
        .with_modes(Modes {
            kv_fp8: Some(scales),
            q_fp8: true,
            ..Modes::default()
        })
}

fn tables<'a>(k: &'a [f32], v: &'a [f32], q: Option<&'a [f32]>) -> HostTables<'a> {
    HostTables {
        k_descale: Some(k),
        v_descale: Some(v),
        q_descale: q,
        ..HostTables::default()
    }
}

fn mode_reason(field: &'static str, e: InvalidProblem) -> String {
    match e {
        InvalidProblem::Mode { field: f, reason } if f == field => reason,
        other => panic!("expected a {field} error, got {other:?}"),
    }
}

#[test]
fn q_fp8_needs_kv_fp8() {
    let mut p = fp8_qkv(KvScales::PerTensor);
    p.validate().unwrap();
    p.modes.kv_fp8 = None;
    let reason = mode_reason("q_fp8", p.validate().unwrap_err());
    assert!(reason.contains("kv_fp8"), "{reason}");
    // Not a default: a dense problem stays as it was.
    assert!(!Modes::default().q_fp8);
}

#[test]
fn q_strides_must_be_whole_16_byte_copies() {
    // Custom strides: Q's row stride off by 8 bytes; K and V are fine.
    let mut p = fp8_qkv(KvScales::PerKvHead);
    let s = p.strides();
    p.custom_strides = Some(ProblemStrides {
        q: TensorStrides {
            row: s.q.row + 8,
            ..s.q
        },
        ..s
    });
    let reason = mode_reason("q_fp8", p.validate().unwrap_err());
    assert!(reason.contains("q row stride 1032 bytes"), "{reason}");
    // The same strides with a 16-bit Q are fine (its strides are 2-byte elements).
    p.modes.q_fp8 = false;
    p.validate().unwrap();
}

#[test]
fn q_descale_has_k_descales_shape_and_is_checked_like_it() {
    for (scales, len) in [
        (KvScales::PerTensor, 1),
        (KvScales::PerKvHead, 2),
        (KvScales::PerBatchKvHead, 6),
    ] {
        let p = fp8_qkv(scales);
        let good = vec![0.5; len];
        tables(&good, &good, Some(&good)).validate(&p).unwrap();

        let long = vec![0.5; len + 1];
        match tables(&good, &good, Some(&long)).validate(&p).unwrap_err() {
            InvalidProblem::Table { field, reason } => {
                assert_eq!(field, "q_descale", "{scales:?}");
                assert!(reason.contains(&format!("needs {len}")), "{reason}");
            }
            other => panic!("expected a table error, got {other:?}"),
        }
        match tables(&good, &good, None).validate(&p).unwrap_err() {
            InvalidProblem::Table { field, reason } => {
                assert_eq!(field, "q_descale");
                assert!(reason.contains("none was given"), "{reason}");
            }
            other => panic!("expected a table error, got {other:?}"),
        }
        // A Q table on a problem whose Q is 16-bit is refused, not ignored.
        let mut half_q = p.clone();
        half_q.modes.q_fp8 = false;
        match tables(&good, &good, Some(&good))
            .validate(&half_q)
            .unwrap_err()
        {
            InvalidProblem::Table { field, reason } => {
                assert_eq!(field, "q_descale");
                assert!(reason.contains("does not use it"), "{reason}");
            }
            other => panic!("expected a table error, got {other:?}"),
        }

        for bad in [0.0, -2.0, f32::NAN, f32::INFINITY] {
            let mut q = good.clone();
            q[len - 1] = bad;
            match tables(&good, &good, Some(&q)).validate(&p).unwrap_err() {
                InvalidProblem::BadDescale {
                    table,
                    index,
                    value,
                } => {
                    assert_eq!((table, index), ("q_descale", len - 1));
                    assert_eq!(value.to_bits(), bad.to_bits());
                }
                other => panic!("{bad}: expected BadDescale, got {other:?}"),
            }
        }
    }
}

#[test]
fn q_must_be_e4m3_exactly_when_the_problem_says_so() {
    let p = fp8_qkv(KvScales::PerTensor);
    check_q_dtype(&p, "e4m3").unwrap();
    let e = check_q_dtype(&p, "bf16").unwrap_err();
    assert_eq!(
        e,
        InvalidProblem::QDTypeMismatch {
            got: "bf16",
            expected: "e4m3",
        }
    );
    // e4m3 K/V with a 16-bit Q (a KV cache in fp8) take a 16-bit Q only.
    let mut kv_only = p.clone();
    kv_only.modes.q_fp8 = false;
    check_q_dtype(&kv_only, "bf16").unwrap();
    let e = check_q_dtype(&kv_only, "e4m3").unwrap_err();
    assert_eq!(
        e,
        InvalidProblem::QDTypeMismatch {
            got: "e4m3",
            expected: "bf16",
        }
    );
    assert!(e.to_string().contains("q_fp8"), "{e}");
    check_q_dtype(&AttentionProblem::new(1, 2, 8, 64), "f16").unwrap();
}

#[test]
fn dense_e4m3_buffers_need_exact_lengths() {
    // e4m3 changes the element type, not where rows are: a dense problem's buffers are exact.
    let p = fp8_qkv(KvScales::PerBatchKvHead);
    let lens = [p.q_len(), p.k_len(), p.v_len(), p.o_len(), p.lse_len()];
    let tags = [p.dtype; 4];
    check_buffers(&p, lens, tags).unwrap();
    let mut long_q = lens;
    long_q[0] += 16;
    match check_buffers(&p, long_q, tags).unwrap_err() {
        InvalidProblem::LengthMismatch { tensor, .. } => assert_eq!(tensor, "q"),
        other => panic!("expected a length error, got {other:?}"),
    }
}

#[test]
fn params_end_with_q_descale_and_keep_every_other_offset() {
    assert_eq!(std::mem::size_of::<AttentionParams>(), 320);
    assert_eq!(std::mem::offset_of!(AttentionParams, k_descale), 288);
    assert_eq!(
        std::mem::offset_of!(AttentionParams, descale_head_stride),
        308
    );
    assert_eq!(std::mem::offset_of!(AttentionParams, q_descale), 312);
    // Q's table is indexed as K's: the descale strides are the shape's, and the pointer is
    // filled in at launch (0 until then).
    let p = AttentionParams::from_problem(&fp8_qkv(KvScales::PerBatchKvHead));
    assert_eq!((p.descale_batch_stride, p.descale_head_stride), (2, 1));
    assert_eq!(p.q_descale, 0);
}

#[test]
fn q_fp8_needs_a_kernel_that_claims_it() {
    let p = fp8_qkv(KvScales::PerKvHead);
    let h100 = DeviceInfo::synthetic_h100();
    for modes in [ModeSupport::NONE, ModeSupport::ALL] {
        assert!(!modes.q_fp8);
    }
    let caps =
        |modes| Capabilities::all_features(HeadDims::List(&[64, 128]), (8, 0)).with_modes(modes);
    // A kernel that reads e4m3 K/V but a 16-bit Q refuses it, naming what it lacks.
    let kv_only = ModeSupport {
        kv_fp8: true,
        ..ModeSupport::NONE
    };
    let e = caps(kv_only).check("decode", &p, &h100).unwrap_err();
    assert!(e.reason.contains("an e4m3 (fp8) Q (q_fp8)"), "{e}");
    let both = ModeSupport {
        q_fp8: true,
        ..kv_only
    };
    caps(both).check("hopper", &p, &h100).unwrap();
    assert!(both.summary().contains("kv_fp8,q_fp8"));
    assert!(!ModeSupport::ALL.summary().contains("q_fp8"));
}

#[test]
fn the_backward_refuses_e4m3_q() {
    let mut p = AttentionProblem::new(1, 2, 16, 64);
    p.modes.kv_fp8 = Some(KvScales::PerTensor);
    p.modes.q_fp8 = true;
    p.validate().unwrap();
    let e = validate_backward(&p).unwrap_err();
    assert!(e.to_string().contains("dense or varlen storage"), "{e}");
}

#[test]
fn host_q_values_go_up_as_their_e4m3_bytes_or_are_refused() {
    // The host path encodes Q with the same rule as K and V, naming Q in the error.
    let q = ArrayD::from_shape_vec(IxDyn(&[1, 1, 1, 4]), vec![1.0f32, -0.5, 448.0, 0.001953125])
        .unwrap();
    assert_eq!(
        e4m3_bytes("q", &q.view()).unwrap(),
        vec![0x38, 0xb0, 0x7e, 0x01]
    );
    let bad = ArrayD::from_shape_vec(IxDyn(&[1, 1, 1, 2]), vec![1.0f32, 1.1]).unwrap();
    match e4m3_bytes("q", &bad.view()).unwrap_err() {
        InvalidProblem::NotE4m3 { tensor, index, .. } => assert_eq!((tensor, index), ("q", 1)),
        other => panic!("expected NotE4m3, got {other:?}"),
    }
}
