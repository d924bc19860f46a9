//! e4m3 K/V (`Modes::kv_fp8`) without a device: the descale tables, the K/V element check, the
//! parameter block, the problem rules, the capability check and the host path's encoding.

use flashcore_core::backward::validate_backward;
use flashcore_core::host::{e4m3_bytes, e4m3_value};
use flashcore_core::launch::check_e4m3_append;
use flashcore_core::params::AttentionParams;
use flashcore_core::tensors::check_kv_dtypes;
use flashcore_core::{
    AttentionProblem, Capabilities, DType, DeviceInfo, HeadDims, HostTables, InvalidProblem,
    KvScales, KvStorage, ModeSupport, Modes, ProblemStrides, TensorStrides,
};
use half::{bf16, f16};
use ndarray::{ArrayD, IxDyn};

const SCALES: [KvScales; 3] = [
    KvScales::PerTensor,
    KvScales::PerKvHead,
    KvScales::PerBatchKvHead,
];

/// A decode step over an e4m3 contiguous cache: batch 3, 8 query heads over 2 KV heads.
fn fp8(scales: KvScales) -> AttentionProblem {
    AttentionProblem::new(3, 8, 1, 128)
        .with_kv(2, 256)
        .with_modes(Modes {
            seqused_k: true,
            kv_fp8: Some(scales),
            ..Modes::default()
        })
}

fn tables<'a>(used: &'a [i32], k: &'a [f32], v: &'a [f32]) -> HostTables<'a> {
    HostTables {
        seqused_k: Some(used),
        k_descale: Some(k),
        v_descale: Some(v),
        ..HostTables::default()
    }
}

fn table_error(e: InvalidProblem) -> (&'static str, String) {
    match e {
        InvalidProblem::Table { field, reason } => (field, reason),
        other => panic!("expected a table error, got {other:?}"),
    }
}

#[test]
fn descale_tables_have_the_length_of_their_shape() {
    let used = [5, 0, 256];
    for (scales, len) in SCALES.into_iter().zip([1, 2, 6]) {
        let p = fp8(scales);
        p.validate().unwrap();
        assert_eq!(scales.table_len(3, 2), len);
        let good = vec![0.5; len];
        tables(&used, &good, &good).validate(&p).unwrap();

        let long = vec![0.5; len + 1];
        let (field, reason) = table_error(tables(&used, &good, &long).validate(&p).unwrap_err());
        assert_eq!(field, "v_descale", "{scales:?}");
        assert!(reason.contains(&format!("needs {len}")), "{reason}");

        let missing = HostTables {
            k_descale: None,
            ..tables(&used, &good, &good)
        };
        let (field, reason) = table_error(missing.validate(&p).unwrap_err());
        assert_eq!(field, "k_descale");
        assert!(reason.contains("none was given"), "{reason}");
    }
}

#[test]
fn descale_tables_without_kv_fp8_are_refused() {
    let mut p = fp8(KvScales::PerTensor);
    p.modes.kv_fp8 = None;
    let (field, reason) = table_error(tables(&[1, 2, 3], &[1.0], &[1.0]).validate(&p).unwrap_err());
    assert_eq!(field, "k_descale");
    assert!(reason.contains("does not use it"), "{reason}");
}

#[test]
fn a_descale_that_is_not_finite_and_positive_is_named_with_its_index() {
    let p = fp8(KvScales::PerBatchKvHead);
    let used = [1, 2, 3];
    for bad in [0.0, -0.0, -1.5, f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut k = vec![0.25; 6];
        k[4] = bad;
        let v = vec![0.25; 6];
        for (table, k, v) in [("k_descale", &k, &v), ("v_descale", &v, &k)] {
            match tables(&used, k, v).validate(&p).unwrap_err() {
                InvalidProblem::BadDescale {
                    table: t,
                    index,
                    value,
                } => {
                    assert_eq!((t, index), (table, 4), "{bad}");
                    assert_eq!(value.to_bits(), bad.to_bits());
                }
                other => panic!("{bad}: expected BadDescale, got {other:?}"),
            }
        }
    }
    // The smallest positive factor is a factor.
    let tiny = vec![f32::from_bits(1); 6];
    tables(&used, &tiny, &tiny).validate(&p).unwrap();
}

#[test]
fn kv_must_be_e4m3_exactly_when_the_problem_says_so() {
    let p = fp8(KvScales::PerKvHead);
    check_kv_dtypes(&p, [("k", "e4m3"), ("v", "e4m3")]).unwrap();
    assert_eq!(
        check_kv_dtypes(&p, [("k", "e4m3"), ("v", "f16")]),
        Err(InvalidProblem::KvDTypeMismatch {
            tensor: "v",
            got: "f16",
            expected: "e4m3",
        })
    );
    let half = AttentionProblem::new(1, 2, 8, 64).with_dtype(DType::Bf16);
    check_kv_dtypes(&half, [("k", "bf16"), ("v", "bf16")]).unwrap();
    let e = check_kv_dtypes(&half, [("k", "e4m3"), ("v", "bf16")]).unwrap_err();
    assert_eq!(
        e,
        InvalidProblem::KvDTypeMismatch {
            tensor: "k",
            got: "e4m3",
            expected: "bf16",
        }
    );
    assert!(e.to_string().contains("kv_fp8"), "{e}");
}

#[test]
fn params_carry_the_descale_strides_of_each_shape() {
    assert_eq!(std::mem::size_of::<AttentionParams>(), 320);
    // After mm_prefix_n and its padding, as params.cuh has them.
    assert_eq!(std::mem::offset_of!(AttentionParams, k_descale), 288);
    assert_eq!(std::mem::offset_of!(AttentionParams, v_descale), 296);
    assert_eq!(
        std::mem::offset_of!(AttentionParams, descale_batch_stride),
        304
    );
    assert_eq!(
        std::mem::offset_of!(AttentionParams, descale_head_stride),
        308
    );
    for (scales, strides) in SCALES.into_iter().zip([(0, 0), (0, 1), (2, 1)]) {
        let p = AttentionParams::from_problem(&fp8(scales));
        assert_eq!(
            (p.descale_batch_stride, p.descale_head_stride),
            strides,
            "{scales:?}"
        );
        // Every (b, h_kv) reads an entry of its table, and distinct ones where the shape has them.
        let len = scales.table_len(3, 2) as i32;
        let index = |b: i32, h: i32| b * p.descale_batch_stride + h * p.descale_head_stride;
        assert_eq!(index(2, 1), len - 1, "{scales:?}");
    }
    let mut dense = fp8(KvScales::PerBatchKvHead);
    dense.modes.kv_fp8 = None;
    let p = AttentionParams::from_problem(&dense);
    assert_eq!((p.descale_batch_stride, p.descale_head_stride), (0, 0));
    assert_eq!((p.k_descale, p.v_descale), (0, 0));
}

#[test]
fn kv_strides_must_be_whole_16_byte_copies_and_v_keeps_the_head_dim() {
    let mode = |field: &'static str, e: InvalidProblem| match e {
        InvalidProblem::Mode { field: f, reason } if f == field => reason,
        other => panic!("expected a {field} error, got {other:?}"),
    };
    // Head dim 72: BSHD's head stride is 72 bytes.
    let p = AttentionProblem::new(1, 2, 1, 72)
        .with_kv(2, 64)
        .with_modes(Modes {
            kv_fp8: Some(KvScales::PerTensor),
            ..Modes::default()
        });
    let reason = mode("kv_fp8", p.validate().unwrap_err());
    assert!(reason.contains("k head stride 72"), "{reason}");
    // The same head dim with 16-bit K/V is fine.
    let mut half = p.clone();
    half.modes.kv_fp8 = None;
    half.validate().unwrap();

    // Custom strides: V's row stride off by 8 bytes.
    let mut p = fp8(KvScales::PerTensor);
    let s = p.strides();
    p.custom_strides = Some(ProblemStrides {
        v: TensorStrides {
            row: s.v.row + 8,
            ..s.v
        },
        ..s
    });
    let reason = mode("kv_fp8", p.validate().unwrap_err());
    assert!(reason.contains("v row stride 264 bytes"), "{reason}");

    let p = fp8(KvScales::PerKvHead).with_head_dim_v(64);
    let reason = mode("kv_fp8", p.validate().unwrap_err());
    assert!(reason.contains("head_dim_v 64"), "{reason}");

    // A paged e4m3 cache of 16-row pages passes.
    let paged = AttentionProblem::new(2, 8, 1, 64)
        .with_kv(2, 64)
        .with_modes(Modes {
            kv: KvStorage::Paged {
                num_blocks: 8,
                block_size: 16,
                max_blocks_per_seq: 4,
            },
            seqused_k: true,
            kv_fp8: Some(KvScales::PerBatchKvHead),
            ..Modes::default()
        });
    paged.validate().unwrap();
}

fn caps(modes: ModeSupport) -> Capabilities {
    Capabilities::all_features(HeadDims::List(&[64, 128]), (8, 0)).with_modes(modes)
}

#[test]
fn kv_fp8_needs_a_kernel_that_claims_it() {
    let p = fp8(KvScales::PerKvHead);
    let h100 = DeviceInfo::synthetic_h100();
    for modes in [ModeSupport::NONE, ModeSupport::ALL] {
        assert!(!modes.kv_fp8);
    }
    let seqused = ModeSupport {
        seqused_k: true,
        ..ModeSupport::NONE
    };
    let e = caps(seqused).check("decode", &p, &h100).unwrap_err();
    assert!(e.reason.contains("kv_fp8"), "{e}");
    let e = caps(ModeSupport::ALL)
        .check("decode", &p, &h100)
        .unwrap_err();
    assert!(e.reason.contains("e4m3"), "{e}");
    let claims = ModeSupport {
        kv_fp8: true,
        ..seqused
    };
    caps(claims).check("decode", &p, &h100).unwrap();
    assert!(claims.summary().contains("kv_fp8"));
    assert!(!ModeSupport::ALL.summary().contains("kv_fp8"));
}

#[test]
fn the_backward_refuses_e4m3_kv() {
    let mut p = AttentionProblem::new(1, 2, 16, 64);
    p.modes.kv_fp8 = Some(KvScales::PerTensor);
    p.validate().unwrap();
    let e = validate_backward(&p).unwrap_err();
    assert!(e.to_string().contains("kv_fp8"), "{e}");
    p.modes.kv_fp8 = None;
    validate_backward(&p).unwrap();
}

/// Every finite e4m3 value, by its byte (0x7f and 0xff are NaN).
fn every_e4m3() -> Vec<(u8, f32)> {
    (0..=255u8)
        .filter(|b| b & 0x7f != 0x7f)
        .map(|b| (b, float8::F8E4M3::from_bits(b).to_f32()))
        .collect()
}

#[test]
fn host_e4m3_values_encode_to_their_bytes_from_every_element_type() {
    let all = every_e4m3();
    assert_eq!(all.len(), 254);
    assert_eq!(all.iter().map(|&(_, x)| x).fold(0.0, f32::max), 448.0);
    let bytes: Vec<u8> = all.iter().map(|&(b, _)| b).collect();
    let values: Vec<f32> = all.iter().map(|&(_, x)| x).collect();
    let shape = IxDyn(&[2, 127]);
    let a32 = ArrayD::from_shape_vec(shape.clone(), values.clone()).unwrap();
    assert_eq!(e4m3_bytes("k", &a32.view()).unwrap(), bytes);
    // Every e4m3 value is an f16 and a bf16 value: the 16-bit arrays carry them exactly.
    let a16 = a32.mapv(f16::from_f32);
    assert_eq!(e4m3_bytes("k", &a16.view()).unwrap(), bytes);
    let ab16 = a32.mapv(bf16::from_f32);
    assert_eq!(e4m3_bytes("v", &ab16.view()).unwrap(), bytes);
    // Standard (row-major) order, not memory order.
    let t = a32.t();
    let expected: Vec<u8> = t
        .iter()
        .map(|&x| float8::F8E4M3::from_f32(x).to_bits())
        .collect();
    assert_eq!(e4m3_bytes("k", &t).unwrap(), expected);
}

#[test]
fn host_values_that_are_not_e4m3_are_refused_not_rounded() {
    // Between two e4m3 values, past 448 (saturation would give 448), below the smallest
    // subnormal, NaN and the infinities (e4m3fn has none).
    let refused = [
        0.3,
        1.0625,
        449.0,
        464.0,
        1e-4,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ];
    for bad in refused {
        let a = ArrayD::from_shape_vec(IxDyn(&[4]), vec![1.0, 2.0, bad, 0.5]).unwrap();
        match e4m3_bytes("v", &a.view()).unwrap_err() {
            InvalidProblem::NotE4m3 {
                tensor,
                index,
                value,
            } => {
                assert_eq!((tensor, index), ("v", 2), "{bad}");
                assert_eq!(value.to_bits(), bad.to_bits());
            }
            other => panic!("{bad}: expected NotE4m3, got {other:?}"),
        }
    }
    // An f16 value that is not e4m3 (1 + 2^-10) is refused too: no rounding on the way.
    let a = ArrayD::from_shape_vec(IxDyn(&[1]), vec![f16::from_bits(0x3c01)]).unwrap();
    assert!(matches!(
        e4m3_bytes("k", &a.view()),
        Err(InvalidProblem::NotE4m3 { index: 0, .. })
    ));
    // The edges that are e4m3: the largest, the smallest subnormal, negative zero.
    let edges =
        ArrayD::from_shape_vec(IxDyn(&[4]), vec![448.0, -448.0, 2f32.powi(-9), -0.0]).unwrap();
    assert_eq!(
        e4m3_bytes("k", &edges.view()).unwrap(),
        vec![0x7e, 0xfe, 0x01, 0x80]
    );
}

#[test]
fn an_e4m3_append_needs_sm89_and_an_even_head_dim() {
    let mut p = fp8(KvScales::PerBatchKvHead);
    p.modes.append = Some(1);
    p.validate().unwrap();
    let h100 = DeviceInfo::synthetic_h100();
    check_e4m3_append("decode", &p, &h100).unwrap();
    let sm89 = DeviceInfo {
        compute_capability: (8, 9),
        ..DeviceInfo::synthetic_sm86()
    };
    check_e4m3_append("decode", &p, &sm89).unwrap();
    let e = check_e4m3_append("decode", &p, &DeviceInfo::synthetic_sm86()).unwrap_err();
    assert!(e.reason.contains("8.9") && e.reason.contains("8.6"), "{e}");

    // An odd head dim passes the stride rule only with custom strides; the pair-writing append
    // refuses it.
    let mut odd = AttentionProblem::new(1, 2, 1, 63)
        .with_kv(2, 64)
        .with_modes(Modes {
            seqused_k: true,
            append: Some(1),
            kv_fp8: Some(KvScales::PerTensor),
            ..Modes::default()
        });
    let s = odd.strides();
    let padded = TensorStrides {
        batch: 64 * 2 * 64,
        head: 64,
        row: 2 * 64,
    };
    odd.custom_strides = Some(ProblemStrides {
        k: padded,
        v: padded,
        ..s
    });
    odd.validate().unwrap();
    let e = check_e4m3_append("decode", &odd, &h100).unwrap_err();
    assert!(e.reason.contains("head_dim 63"), "{e}");
}

#[test]
fn an_e4m3_cache_widens_back_to_its_stored_values() {
    for (byte, value) in every_e4m3() {
        assert_eq!(e4m3_value(byte).to_bits(), value.to_bits());
        // What the host path hands back (through the dtype's bits) is the value itself.
        for dtype in DType::ALL {
            assert_eq!(
                dtype.from_bits(dtype.to_bits(value)),
                value,
                "{dtype} {byte:#x}"
            );
        }
        let a = ArrayD::from_shape_vec(IxDyn(&[1]), vec![e4m3_value(byte)]).unwrap();
        assert_eq!(e4m3_bytes("k", &a.view()).unwrap(), vec![byte]);
    }
    assert!(e4m3_value(0x7f).is_nan() && e4m3_value(0xff).is_nan());
}

#[test]
fn the_host_checks_take_an_append_into_an_e4m3_cache() {
    let mut p = fp8(KvScales::PerKvHead);
    p.modes.append = Some(2);
    let (q_shape, kv_shape, _) = flashcore_core::host::storage_shapes(&p);
    let q = ArrayD::<f32>::zeros(IxDyn(&q_shape));
    let kv = ArrayD::<f32>::zeros(IxDyn(&kv_shape));
    let new = ArrayD::<f32>::zeros(IxDyn(&[3, 2, 2, 128]));
    let used = [0, 10, 254];
    let descale = [0.5, 2.0];
    let inputs = flashcore_core::HostInputs::new(q.view(), kv.view(), kv.view())
        .with_append(Some(new.view()), Some(new.view()))
        .with_tables(tables(&used, &descale, &descale));
    flashcore_core::host::check_host_inputs("decode", &p, &inputs).unwrap();
    // The last sequence has no room for two more rows: the usual capacity rule still holds.
    let full = [0, 10, 255];
    let inputs = flashcore_core::HostInputs::new(q.view(), kv.view(), kv.view())
        .with_append(Some(new.view()), Some(new.view()))
        .with_tables(tables(&full, &descale, &descale));
    let e = flashcore_core::host::check_host_inputs("decode", &p, &inputs).unwrap_err();
    assert!(e.to_string().contains("seqused_k"), "{e}");
}
