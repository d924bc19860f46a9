//! `flash_attn_fp8`'s argument rules on candle's CPU tensors (dtypes, shapes, strides: no GPU
//! and no `cuda` feature needed).

use candle::{DType, Result, Tensor};
use flashcore::KvScales;

use super::FlashAttnFp8;
use crate::test_tensors::{descale_layouts, f32s, zeros};

const B: usize = 2;
const HQ: usize = 4;
const HK: usize = 2;
const D: usize = 128;

/// A causal call with descales per (sequence, KV head).
fn call() -> FlashAttnFp8 {
    FlashAttnFp8 {
        q_descale: f32s(&[B, HK]),
        k_descale: f32s(&[B, HK]),
        v_descale: f32s(&[B, HK]),
        softmax_scale: 0.125,
        causal: true,
    }
}

/// Q `(2, 300, 4, 128)`, K/V `(2, 300, 2, 128)`, of `dtype`.
fn qkv(dtype: DType) -> [Tensor; 3] {
    [
        zeros(&[B, 300, HQ, D], dtype),
        zeros(&[B, 300, HK, D], dtype),
        zeros(&[B, 300, HK, D], dtype),
    ]
}

fn problem(op: &FlashAttnFp8, [q, k, v]: &[Tensor; 3]) -> Result<flashcore::AttentionProblem> {
    op.problem(
        (q.dtype(), q.layout()),
        (k.dtype(), k.layout()),
        (v.dtype(), v.layout()),
    )
}

fn refusal(op: &FlashAttnFp8, t: &[Tensor; 3]) -> String {
    problem(op, t).unwrap_err().to_string()
}

#[test]
fn e4m3_qkv_is_the_fp8_forward_with_bf16_out() {
    let p = problem(&call(), &qkv(DType::F8E4M3)).unwrap();
    assert!(p.modes.q_fp8 && p.causal);
    assert_eq!(p.modes.kv_fp8, Some(KvScales::PerBatchKvHead));
    assert_eq!(p.dtype, flashcore::DType::Bf16);
    assert_eq!(
        (p.batch, p.seq_q, p.heads_q, p.heads_kv, p.head_dim),
        (B, 300, HQ, HK, D)
    );
    let mut op = call();
    op.causal = false;
    assert!(!problem(&op, &qkv(DType::F8E4M3)).unwrap().causal);
}

#[test]
fn every_descale_layout_of_one_kind() {
    for (descale, scales) in descale_layouts(B, HK) {
        let op = FlashAttnFp8 {
            q_descale: descale.clone(),
            k_descale: descale.clone(),
            v_descale: descale,
            ..call()
        };
        let p = problem(&op, &qkv(DType::F8E4M3)).unwrap();
        assert_eq!(p.modes.kv_fp8, Some(scales));
    }
}

#[test]
fn sixteen_bit_or_mixed_inputs_are_refused() {
    for dtype in [DType::BF16, DType::F16, DType::F32] {
        let e = refusal(&call(), &qkv(dtype));
        assert!(e.contains("f8e4m3") && e.contains("q is"), "{e}");
    }
    let [q, k, _] = qkv(DType::F8E4M3);
    let v = zeros(&[B, 300, HK, D], DType::BF16);
    let e = refusal(&call(), &[q, k, v]);
    assert!(e.contains("v is bf16"), "{e}");
}

#[test]
fn descales_of_another_dtype_shape_or_layout_are_refused() {
    let t = qkv(DType::F8E4M3);
    let bf16 = f32s(&[B, HK]).to_dtype(DType::BF16).unwrap();
    for (name, set) in [("q_descale", 0usize), ("k_descale", 1), ("v_descale", 2)] {
        let mut op = call();
        let slot = [&mut op.q_descale, &mut op.k_descale, &mut op.v_descale];
        *slot.into_iter().nth(set).unwrap() = bf16.clone();
        let e = refusal(&op, &t);
        assert!(e.contains(name) && e.contains("f32"), "{e}");
    }
    // A shape the problem does not have.
    let mut op = call();
    op.k_descale = f32s(&[B, HQ]);
    assert!(refusal(&op, &t).contains("k_descale"));
    // Q's table of another layout than K's and V's.
    let mut op = call();
    op.q_descale = f32s(&[HK]);
    let e = refusal(&op, &t);
    assert!(
        e.contains("q_descale") && e.contains("laid out alike"),
        "{e}"
    );
    // K's and V's of different layouts: the facade's rule.
    let mut op = call();
    op.v_descale = f32s(&[1]);
    assert!(refusal(&op, &t).contains("laid out alike"));
    // Strides the kernels cannot index (a transposed (batch, heads_kv) table).
    let mut op = call();
    let tr = f32s(&[HK, B]).t().unwrap();
    op.q_descale = tr.clone();
    op.k_descale = tr.clone();
    op.v_descale = tr;
    assert!(refusal(&op, &t).contains("strides"));
}

#[test]
fn shapes_and_scale_follow_flash_attn() {
    let [q, k, v] = qkv(DType::F8E4M3);
    // Heads that do not divide.
    let k3 = zeros(&[B, 300, 3, D], DType::F8E4M3);
    let v3 = zeros(&[B, 300, 3, D], DType::F8E4M3);
    let mut op = call();
    for t in [&mut op.q_descale, &mut op.k_descale, &mut op.v_descale] {
        *t = f32s(&[1]);
    }
    assert!(refusal(&op, &[q.clone(), k3, v3]).contains("must divide"));
    // K of another head dim than Q.
    let k64 = zeros(&[B, 300, HK, 64], DType::F8E4M3);
    assert!(refusal(&call(), &[q.clone(), k64, v.clone()]).contains("shape mismatch"));
    let mut op = call();
    op.softmax_scale = f32::NAN;
    assert!(refusal(&op, &[q, k, v]).contains("softmax_scale"));
}
