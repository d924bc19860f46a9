//! The (q, k, v) ops' problems on candle's CPU tensors (no GPU and no `cuda` feature needed):
//! what their backward takes (the forward's problem, modes and varlen layout included) and which
//! calls refuse one, with the reason.

use candle::{DType, Device, Result, Tensor};
use flashcore::{AlibiSlopes, AttentionProblem, KvStorage};

use super::{backward_problem, FlashAttn, FlashAttnVarLen};

fn zeros(shape: &[usize], dtype: DType) -> Tensor {
    Tensor::zeros(shape, dtype, &Device::Cpu).unwrap()
}

fn dense_op(
    window: (Option<usize>, Option<usize>),
    softcap: Option<f32>,
    alibi: Option<&[usize]>,
) -> FlashAttn {
    FlashAttn {
        softmax_scale: 0.125,
        alibi_slopes: alibi.map(|d| zeros(d, DType::F32)),
        window_size_left: window.0,
        window_size_right: window.1,
        softcap,
    }
}

/// q `(2, 37, 8, 64)`, k/v `(2, 53, 2, 64)` bf16 (GQA 4:1).
fn dense_problem(op: &FlashAttn) -> Result<AttentionProblem> {
    let (q, k) = (
        zeros(&[2, 37, 8, 64], DType::BF16),
        zeros(&[2, 53, 2, 64], DType::BF16),
    );
    op.problem(flashcore::DType::Bf16, [q.layout(), k.layout(), k.layout()])
}

/// Four packed sequences: cumulative lengths `[0, 5, 17, 40, 41]` (queries) and
/// `[0, 9, 20, 50, 90]` (keys), q `(41, 8, 64)`, k/v `(90, 2, 64)` f16.
fn varlen_op() -> FlashAttnVarLen {
    FlashAttnVarLen {
        softmax_scale: 0.125,
        max_seqlen_q: 23,
        max_seqlen_k: 40,
        seqlens_q: Tensor::new(&[0u32, 5, 17, 40, 41], &Device::Cpu).unwrap(),
        seqlens_k: Tensor::new(&[0u32, 9, 20, 50, 90], &Device::Cpu).unwrap(),
        block_table: None,
        mm_prefix_ranges: None,
        page_block_size: None,
        alibi_slopes: None,
        window_size_left: None,
        window_size_right: None,
        softcap: None,
    }
}

fn varlen_problem(op: &FlashAttnVarLen) -> Result<AttentionProblem> {
    let (q, k) = (
        zeros(&[41, 8, 64], DType::F16),
        zeros(&[90, 2, 64], DType::F16),
    );
    op.problem(flashcore::DType::F16, [q.layout(), k.layout(), k.layout()])
}

#[test]
fn dense_backward_takes_the_forwards_modes() {
    let p =
        backward_problem(dense_problem(&dense_op((None, Some(0)), None, None)).unwrap()).unwrap();
    assert!(p.causal && p.modes.is_dense());
    let op = dense_op((Some(8), Some(0)), Some(30.0), Some(&[2, 8]));
    let p = backward_problem(dense_problem(&op).unwrap()).unwrap();
    assert_eq!(
        (p.modes.window_left, p.modes.window_right),
        (Some(8), Some(0))
    );
    assert_eq!(p.modes.softcap, Some(30.0));
    assert_eq!(p.modes.alibi, Some(AlibiSlopes::PerBatchHead));
    assert!(!p.causal);
    // A window larger than the keys is none (candle-flash-attn's rule), so causal stays causal.
    let p = dense_problem(&dense_op((Some(1000), Some(0)), None, Some(&[8]))).unwrap();
    assert!(p.causal);
    assert_eq!(p.modes.alibi, Some(AlibiSlopes::PerHead));
}

#[test]
fn varlen_backward_takes_the_packed_problem_with_its_modes() {
    let mut op = varlen_op();
    let p = backward_problem(varlen_problem(&op).unwrap()).unwrap();
    assert_eq!(p.modes.packed_q, Some(41));
    assert_eq!(p.modes.kv, KvStorage::Packed { total_k: 90 });
    assert_eq!((p.batch, p.seq_q, p.seq_k), (4, 23, 40));
    // The LSE the backward reads is FlashAttention 2's varlen one, [heads_q, total_q].
    assert_eq!(p.lse_len(), 8 * 41);
    op.window_size_left = Some(6);
    op.window_size_right = Some(2);
    op.softcap = Some(0.7);
    op.alibi_slopes = Some(zeros(&[4, 8], DType::F32));
    let p = backward_problem(varlen_problem(&op).unwrap()).unwrap();
    assert_eq!(
        (p.modes.window_left, p.modes.window_right),
        (Some(6), Some(2))
    );
    assert_eq!(p.modes.softcap, Some(0.7));
    assert_eq!(p.modes.alibi, Some(AlibiSlopes::PerBatchHead));
}

#[test]
fn paged_and_mm_prefix_calls_refuse_a_backward_by_name() {
    // Paged: three sequences over a cache of 14 blocks of 32 rows, 4 blocks each.
    let mut op = varlen_op();
    op.seqlens_q = Tensor::new(&[0u32, 3, 4, 20], &Device::Cpu).unwrap();
    op.seqlens_k = Tensor::new(&[0u32, 40, 41, 141], &Device::Cpu).unwrap();
    op.max_seqlen_q = 16;
    op.max_seqlen_k = 100;
    op.block_table = Some(zeros(&[3, 4], DType::U32));
    op.page_block_size = Some(32);
    let (q, cache) = (
        zeros(&[20, 4, 128], DType::F16),
        zeros(&[14, 32, 2, 128], DType::F16),
    );
    let layouts = [q.layout(), cache.layout(), cache.layout()];
    let p = op.problem(flashcore::DType::F16, layouts).unwrap();
    let e = backward_problem(p).unwrap_err().to_string();
    assert!(e.contains("no backward for this call"), "{e}");
    assert!(
        e.contains("paged K/V (block_table) is inference only"),
        "{e}"
    );
    op.mm_prefix_ranges = Some(zeros(&[3, 2, 2], DType::I64));
    let e = op
        .problem(flashcore::DType::F16, layouts)
        .unwrap_err()
        .to_string();
    assert!(e.contains("mm_prefix_ranges must be i32"), "{e}");
    // mm_prefix_ranges on packed K/V: the forward builds it, the backward names it.
    let mut op = varlen_op();
    op.mm_prefix_ranges = Some(zeros(&[4, 2, 2], DType::I32));
    let p = varlen_problem(&op).unwrap();
    assert_eq!(p.modes.mm_prefix, Some(2));
    let e = backward_problem(p).unwrap_err().to_string();
    assert!(e.contains("mm_prefix_ranges has no backward"), "{e}");
    // No ranges is no mode: the backward runs.
    op.mm_prefix_ranges = Some(zeros(&[4, 0, 2], DType::I32));
    assert!(backward_problem(varlen_problem(&op).unwrap()).is_ok());
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let mut op = varlen_op();
    op.seqlens_k = Tensor::new(&[0u32, 9, 20], &Device::Cpu).unwrap();
    let e = varlen_problem(&op).unwrap_err().to_string();
    assert!(e.contains("same number of elements"), "{e}");
    op.seqlens_q = zeros(&[1], DType::U32);
    assert!(varlen_problem(&op).is_err());
    let mut op = varlen_op();
    op.alibi_slopes = Some(zeros(&[3, 8], DType::F32));
    let e = varlen_problem(&op).unwrap_err().to_string();
    assert!(e.contains("alibi_slopes"), "{e}");
    let op = dense_op((None, None), Some(f32::NAN), None);
    let e = dense_problem(&op).unwrap_err().to_string();
    assert!(e.contains("softcap NaN is not finite"), "{e}");
    // Packed tensors given to the dense op (and the reverse) name the rank.
    let q = zeros(&[41, 8, 64], DType::F16);
    let e = dense_op((None, None), None, None)
        .problem(flashcore::DType::F16, [q.layout(), q.layout(), q.layout()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("rank 4"), "{e}");
}
