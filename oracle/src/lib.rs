//! `flashcore-oracle`: the f64 reference every flashcore attention kernel is judged by, and the
//! one tolerance rule used for every kernel generation. See `docs/ORACLE.md`.
//!
//! * [`reference_f64`]: attention in f64 (scores, bottom-right causal mask, GQA/MQA, softmax,
//!   P·V), per selected query row, with O and the natural-log LSE.
//! * [`reference_low_precision`]: what a plain PyTorch fp16/bf16 program computes; its error
//!   against the f64 reference sets the error scale a kernel is allowed.
//!   With [`OracleProblem::p_e4m3`] (an fp8 forward) it models FlashAttention 3's fp8 program
//!   instead: scores in f32, probabilities rounded to e4m3 ([`round_e4m3`]) before P·V.
//! * [`judge`] / [`check`]: `max|kernel - f64| <= 2 · max|low_precision - f64| + floor`, for O
//!   and LSE separately, with [`F16_ABS_FLOOR`] = 2^-12 and [`BF16_ABS_FLOOR`] = 2^-9, plus exact
//!   rules for empty rows and NaN.
//! * [`gradients_f64`] / [`gradients_low_precision`] / [`judge_backward`]: dQ, dK, dV of the
//!   backward pass and the same rule applied to each (`docs/ORACLE.md`, "The backward pass").
//! * [`sample_rows`]: which rows to judge on large problems.
//! * Inference modes (`docs/MODES.md`): windows, softcap and ALiBi are fields of
//!   [`OracleProblem`]; a varlen batch or KV cache is judged one sequence at a time over the
//!   logical K/V [`gather_paged`] and [`append_rows`] build. The tolerance rule is the same.
//!
//! This crate depends on no other flashcore crate on purpose: the judge must not share code (and
//! so bugs) with what it judges.

mod backward;
mod fp8;
mod judge;
mod parallel;
mod problem;
mod reference;
mod storage;

pub use backward::{
    backward_floor, check_backward, gradients_f64, gradients_low_precision, judge_backward,
    BackwardVerdict, Gradients, TensorVerdict,
};
pub use fp8::{e4m3_value, round_e4m3, E4M3_MAX};
pub use judge::{check, judge, Verdict, BF16_ABS_FLOOR, F16_ABS_FLOOR, LOW_PRECISION_FACTOR};
pub use problem::{sample_rows, OracleProblem, Precision, Rows};
pub use reference::{
    probabilities, reference_f64, reference_low_precision, softmax_in_place, Reference,
};
pub use storage::{append_rows, gather_paged};
