//! `flash_attn_with_kvcache`'s argument rules on candle's CPU tensors (dtypes, shapes, strides:
//! no GPU and no `cuda` feature needed), the fp8 cache's above all.

use candle::{DType, Result, Tensor};
use flashcore::KvScales;

use super::FlashAttnKvCache;
use crate::test_tensors::{descale_layouts, f32s, zeros};

const B: usize = 2;
const HK: usize = 2;

/// A decode call: q bf16 `(2, 1, 8, 64)`, caches `(2, 256, 2, 64)` of `cache`, seqused_k u32.
fn call(cache: DType) -> FlashAttnKvCache {
    FlashAttnKvCache {
        k_cache: zeros(&[B, 256, HK, 64], cache),
        v_cache: zeros(&[B, 256, HK, 64], cache),
        k_new: None,
        v_new: None,
        seqused_k: zeros(&[B], DType::U32),
        block_table: None,
        alibi_slopes: None,
        k_descale: None,
        v_descale: None,
        softmax_scale: 0.125,
        window_size_left: None,
        window_size_right: Some(0),
        softcap: None,
    }
}

fn q() -> Tensor {
    zeros(&[B, 1, 8, 64], DType::BF16)
}

/// The call's problem on `q`, with its default descales (as the op builds it).
fn problem(op: &FlashAttnKvCache, q: &Tensor) -> Result<flashcore::AttentionProblem> {
    let (k, v) = op.descales()?;
    op.problem(q.dtype(), q.layout(), (k.as_ref(), v.as_ref()))
}

fn refusal(op: &FlashAttnKvCache, q: &Tensor) -> String {
    problem(op, q).unwrap_err().to_string()
}

#[test]
fn sixteen_bit_caches_are_unchanged() {
    let p = problem(&call(DType::BF16), &q()).unwrap();
    assert_eq!(p.modes.kv_fp8, None);
    assert!(p.causal && p.modes.seqused_k);
}

#[test]
fn f8e4m3_caches_take_every_descale_layout() {
    for (descale, scales) in descale_layouts(B, HK) {
        let mut op = call(DType::F8E4M3);
        op.k_descale = Some(descale.clone());
        op.v_descale = Some(descale);
        let p = problem(&op, &q()).unwrap();
        assert_eq!(p.modes.kv_fp8, Some(scales));
        assert_eq!(p.dtype, flashcore::DType::Bf16);
    }
    // Paged, with rows to append in q's dtype.
    let mut op = call(DType::F8E4M3);
    op.k_cache = zeros(&[8, 64, HK, 64], DType::F8E4M3);
    op.v_cache = zeros(&[8, 64, HK, 64], DType::F8E4M3);
    op.block_table = Some(zeros(&[B, 4], DType::U32));
    op.k_new = Some(zeros(&[B, 1, HK, 64], DType::BF16));
    op.v_new = Some(zeros(&[B, 1, HK, 64], DType::BF16));
    let p = problem(&op, &q()).unwrap();
    assert_eq!(p.modes.append, Some(1));
    assert_eq!(p.modes.kv_fp8, Some(KvScales::PerTensor));
}

#[test]
fn a_missing_descale_is_one() {
    // Neither: one f32 one for both.
    let op = call(DType::F8E4M3);
    let (k, v) = op.descales().unwrap();
    for t in [k.unwrap(), v.unwrap()] {
        assert_eq!((t.dims(), t.dtype()), (&[1][..], DType::F32));
        assert_eq!(t.to_vec1::<f32>().unwrap(), [1.0]);
    }
    // One: ones shaped as the other, both contiguous (an expanded one is copied).
    let mut op = call(DType::F8E4M3);
    op.v_descale = Some(f32s(&[1]).broadcast_as((B, HK)).unwrap());
    let (k, v) = op.descales().unwrap();
    let (k, v) = (k.unwrap(), v.unwrap());
    assert_eq!(k.dims(), [B, HK]);
    assert!(k.is_contiguous() && v.is_contiguous());
    let p = op.problem(q().dtype(), q().layout(), (Some(&k), Some(&v)));
    assert_eq!(p.unwrap().modes.kv_fp8, Some(KvScales::PerBatchKvHead));
    // A 16-bit cache gets none.
    assert_eq!(
        call(DType::BF16)
            .descales()
            .map(|(k, v)| (k.is_none(), v.is_none()))
            .unwrap(),
        (true, true)
    );
}

#[test]
fn bad_mixes_are_candle_errors() {
    let fp8 = DType::F8E4M3;
    // An fp8 q.
    let err = refusal(&call(fp8), &zeros(&[B, 1, 8, 64], fp8));
    assert!(err.contains("q must be f16/bf16"), "{err}");
    // One cache fp8, the other not.
    let mut op = call(fp8);
    op.v_cache = zeros(&[B, 256, HK, 64], DType::BF16);
    let err = refusal(&op, &q());
    assert!(err.contains("must both be e4m3"), "{err}");
    // Another dtype for the cache.
    let err = refusal(&call(DType::F32), &q());
    assert!(err.contains("k is f32"), "{err}");
    // Descales of the wrong dtype, shape or strides, or laid out unlike each other.
    for (k, v, want) in [
        (
            zeros(&[B, HK], DType::F16),
            f32s(&[B, HK]),
            "k_descale must be f32",
        ),
        (f32s(&[3, HK]), f32s(&[3, HK]), "k_descale must have shape"),
        (
            f32s(&[HK, B]).t().unwrap(),
            f32s(&[HK, B]).t().unwrap(),
            "not a table",
        ),
        (f32s(&[B, HK]), f32s(&[HK]), "laid out alike"),
    ] {
        let mut op = call(fp8);
        op.k_descale = Some(k);
        op.v_descale = Some(v);
        let err = refusal(&op, &q());
        assert!(err.contains(want), "{want}: {err}");
    }
    // Descales with a 16-bit cache.
    let mut op = call(DType::BF16);
    op.k_descale = Some(f32s(&[1]));
    let err = refusal(&op, &q());
    assert!(err.contains("not e4m3"), "{err}");
    // fp8 rows to append.
    let mut op = call(fp8);
    op.k_new = Some(zeros(&[B, 1, HK, 64], fp8));
    op.v_new = Some(zeros(&[B, 1, HK, 64], fp8));
    let err = refusal(&op, &q());
    assert!(err.contains("stay in q's dtype"), "{err}");
    // K/V rows copied 16 bytes at a time: one KV head of 8 bytes is refused.
    let mut op = call(fp8);
    op.k_cache = zeros(&[B, 64, 1, 8], fp8);
    op.v_cache = zeros(&[B, 64, 1, 8], fp8);
    let err = refusal(&op, &zeros(&[B, 1, 2, 8], DType::BF16));
    assert!(err.contains("multiple of 16"), "{err}");
    // Every refusal reads as flashcore's.
    assert!(err.starts_with("flashcore: "), "{err}");
}
