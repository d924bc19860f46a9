//! A V head dim of its own (`AttentionProblem::head_dim_v`, FlashAttention 3's `headdim_v`):
//! strides, lengths, validation and the capability refusal, without a GPU.

use flashcore_core::plan::{Capabilities, HeadDims};
use flashcore_core::{
    AttentionProblem, DeviceInfo, InvalidProblem, KvStorage, Layout, Modes, ProblemStrides,
    TensorStrides,
};

/// DeepSeek-V2/V3 prefill's dims: Q and K 192, V and O 128.
fn deepseek(layout: Layout) -> AttentionProblem {
    AttentionProblem::new(2, 4, 33, 192)
        .with_kv(2, 65)
        .with_layout(layout)
        .with_head_dim_v(128)
}

fn h100() -> DeviceInfo {
    DeviceInfo::synthetic_h100()
}

#[test]
fn equal_dims_are_the_default_and_compare_equal() {
    let p = AttentionProblem::new(1, 2, 3, 64);
    assert_eq!(p.head_dim_v(), 64);
    assert!(!p.has_distinct_head_dim_v());
    assert_eq!(p.clone().with_head_dim_v(64), p);
    assert_eq!(p.clone().with_head_dim_v(64).head_dim_v, None);
}

#[test]
fn v_and_o_strides_and_lengths_use_the_v_dim() {
    let p = deepseek(Layout::Bshd);
    let s = p.strides();
    assert_eq!(
        s.q,
        TensorStrides {
            batch: 33 * 4 * 192,
            head: 192,
            row: 4 * 192
        }
    );
    assert_eq!(s.k.row, 2 * 192);
    assert_eq!(
        s.v,
        TensorStrides {
            batch: 65 * 2 * 128,
            head: 128,
            row: 2 * 128
        }
    );
    assert_eq!(
        s.o,
        TensorStrides {
            batch: 33 * 4 * 128,
            head: 128,
            row: 4 * 128
        }
    );
    assert_eq!(p.q_len(), 2 * 33 * 4 * 192);
    assert_eq!(p.k_len(), 2 * 65 * 2 * 192);
    assert_eq!(p.v_len(), 2 * 65 * 2 * 128);
    assert_eq!(p.o_len(), 2 * 33 * 4 * 128);
    assert_eq!(p.lse_len(), 2 * 4 * 33);
    p.validate().unwrap();

    let p = deepseek(Layout::Bhsd);
    assert_eq!(p.strides().v.head, 65 * 128);
    assert_eq!(p.strides().o.head, 33 * 128);
    assert_eq!(p.v_len(), 2 * 2 * 65 * 128);
    assert_eq!(p.o_len(), 2 * 4 * 33 * 128);
}

#[test]
fn packed_and_paged_storage_use_the_v_dim_for_v_and_o() {
    let p = AttentionProblem::new(3, 4, 16, 192)
        .with_kv(2, 32)
        .with_head_dim_v(128)
        .with_modes(Modes {
            packed_q: Some(40),
            kv: KvStorage::Packed { total_k: 70 },
            ..Modes::default()
        });
    assert_eq!(p.o_len(), 40 * 4 * 128);
    assert_eq!(p.q_len(), 40 * 4 * 192);
    assert_eq!(p.v_len(), 70 * 2 * 128);
    assert_eq!(p.k_len(), 70 * 2 * 192);
    let p = AttentionProblem::new(2, 4, 1, 192)
        .with_kv(2, 64)
        .with_head_dim_v(128)
        .with_modes(Modes {
            kv: KvStorage::Paged {
                num_blocks: 5,
                block_size: 16,
                max_blocks_per_seq: 4,
            },
            seqused_k: true,
            ..Modes::default()
        });
    assert_eq!(p.v_len(), 5 * 16 * 2 * 128);
    assert_eq!(p.k_len(), 5 * 16 * 2 * 192);
}

#[test]
fn a_zero_v_dim_is_refused_by_name() {
    let mut p = AttentionProblem::new(1, 1, 8, 64);
    p.head_dim_v = Some(0);
    let e = p.validate().unwrap_err();
    assert_eq!(e, InvalidProblem::ZeroHeadDimV);
    assert!(e.to_string().contains("head_dim_v is 0"), "{e}");
}

#[test]
fn v_rows_narrower_than_the_v_dim_overlap() {
    let p = AttentionProblem::new(1, 1, 8, 64).with_head_dim_v(128);
    let dense = p.strides();
    let mut p2 = p.clone();
    // V rows 64 apart hold 128 elements each: they overlap, though 64 is Q's and K's row width.
    p2.custom_strides = Some(ProblemStrides {
        v: TensorStrides {
            batch: 8 * 64,
            head: 8 * 64,
            row: 64,
        },
        ..dense
    });
    match p2.validate().unwrap_err() {
        InvalidProblem::OverlappingRows {
            tensor: "v",
            row_stride: 64,
            head_dim: 128,
        } => {}
        e => panic!("{e}"),
    }
    // O's elements alias when its rows are Q's width.
    let mut p3 = p.clone();
    p3.custom_strides = Some(ProblemStrides {
        o: dense.q,
        ..dense
    });
    assert!(p3.validate().is_err());
}

#[test]
fn kernels_without_the_capability_refuse_and_say_why() {
    let caps = Capabilities::all_features(
        HeadDims::Range {
            min: 8,
            max: 256,
            multiple_of: 8,
        },
        (8, 0),
    );
    let p = deepseek(Layout::Bshd);
    let e = caps.check("k", &p, &h100()).unwrap_err();
    assert!(
        e.reason
            .contains("head_dim_v 128 differs from head_dim 192"),
        "{e}"
    );
    // Equal dims given explicitly are not distinct.
    caps.check(
        "k",
        &AttentionProblem::new(1, 2, 8, 128).with_head_dim_v(128),
        &h100(),
    )
    .unwrap();
    let caps = caps.with_distinct_head_dim_v();
    caps.check("k", &p, &h100()).unwrap();
    // The core's append kernel writes one head dim into both caches.
    let append = p.clone().with_modes(Modes {
        kv: KvStorage::Dense,
        seqused_k: true,
        append: Some(1),
        ..Modes::default()
    });
    let e = caps.check("k", &append, &h100()).unwrap_err();
    assert!(e.reason.contains("appending"), "{e}");
}

#[test]
fn flops_and_display_count_both_dims() {
    let p = AttentionProblem::new(1, 1, 4, 192).with_head_dim_v(128);
    assert_eq!(p.flops(), 2.0 * 16.0 * (192.0 + 128.0));
    assert_eq!(
        AttentionProblem::new(1, 1, 4, 64).flops(),
        4.0 * 16.0 * 64.0
    );
    assert!(p.to_string().contains("D=192 Dv=128"), "{p}");
    assert!(!AttentionProblem::new(1, 1, 4, 64)
        .to_string()
        .contains("Dv"));
}

/// The backward's own checks take dV at V's width, so a distinct V dim reaches the kernels'
/// capability check (a clear `Unsupported`) instead of failing as aliasing gradients.
#[test]
fn backward_validation_takes_v_at_its_width() {
    for layout in [Layout::Bshd, Layout::Bhsd] {
        flashcore_core::backward::validate_backward(&deepseek(layout)).unwrap();
    }
}

/// The host path takes v_new at V's width (as `fa_args` does, FlashAttention 3's `headdim_v`), so
/// an append at a distinct V dim reaches the capability check's refusal instead of a shape error
/// that asks for V's rows at Q's width; one at Q's width is the shape error, naming v_new.
#[test]
fn the_host_path_takes_v_new_at_the_v_dim() {
    use flashcore_core::host::{check_host_inputs, storage_shapes, v_o_shapes, HostInputs};
    use flashcore_core::{Error, HostTables};
    use ndarray::{ArrayD, IxDyn};
    let p = AttentionProblem::new(2, 4, 1, 192)
        .with_kv(2, 64)
        .with_head_dim_v(128)
        .with_modes(Modes {
            seqused_k: true,
            append: Some(3),
            ..Modes::default()
        });
    let zeros = |shape: &[usize]| ArrayD::<f32>::zeros(IxDyn(shape));
    let (q_shape, k_shape, _) = storage_shapes(&p);
    let (v_shape, _) = v_o_shapes(&p);
    let (q, k, v) = (zeros(&q_shape), zeros(&k_shape), zeros(&v_shape));
    let (k_new, v_new, v_new_at_d) = (
        zeros(&[2, 3, 2, 192]),
        zeros(&[2, 3, 2, 128]),
        zeros(&[2, 3, 2, 192]),
    );
    let used = [10, 20];
    let tables = HostTables {
        seqused_k: Some(&used),
        ..HostTables::default()
    };
    fn with_v_new<'a>(
        [q, k, v, k_new]: [&'a ArrayD<f32>; 4],
        v_new: &'a ArrayD<f32>,
        tables: HostTables<'a>,
    ) -> HostInputs<'a> {
        HostInputs::new(q.view(), k.view(), v.view())
            .with_append(Some(k_new.view()), Some(v_new.view()))
            .with_tables(tables)
    }
    let inputs = |v_new| with_v_new([&q, &k, &v, &k_new], v_new, tables);
    check_host_inputs("k", &p, &inputs(&v_new)).unwrap();
    match check_host_inputs("k", &p, &inputs(&v_new_at_d)).unwrap_err() {
        Error::Invalid(InvalidProblem::ShapeMismatch {
            tensor: "v_new",
            expected,
            ..
        }) => assert_eq!(expected, vec![2, 3, 2, 128]),
        e => panic!("{e}"),
    }
    let caps = Capabilities::all_features(
        HeadDims::Range {
            min: 8,
            max: 256,
            multiple_of: 8,
        },
        (8, 0),
    )
    .with_distinct_head_dim_v();
    let e = caps.check("k", &p, &h100()).unwrap_err();
    assert!(
        e.reason.contains("appending") && e.reason.contains("head_dim_v 128"),
        "{e}"
    );
}
