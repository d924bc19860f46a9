//! One verification case: a problem plus the seed of its random inputs, runnable on any
//! generation and judged by the oracle. A case prints as one `--case` argument that reruns it.

use anyhow::{anyhow, bail, Result};
use flashcore::{Attention, AttentionBackward, AttentionProblem, Device, Error, Layout};
use flashcore_oracle::{OracleProblem, Rows, Verdict};
use ndarray::{Array4, Axis};

use crate::inputs::{precision, random_tensor, to_layout};
use crate::mode_case::{Draw, ModeInputs, ModeKeys};

/// Whether cases parsed from a line without a `bi=` key are batch-invariant
/// (`reliability --batch-invariant`).
static BATCH_INVARIANT_DEFAULT: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Makes every case parsed from now on batch-invariant unless its line says `bi=0`.
pub fn set_batch_invariant_default(on: bool) {
    BATCH_INVARIANT_DEFAULT.store(on, std::sync::atomic::Ordering::Relaxed);
}

#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub problem: AttentionProblem,
    pub data_seed: u64,
}

impl Case {
    /// `b=2,hq=4,hkv=2,sq=65,sk=130,d=64,dtype=f16,causal=1,layout=bshd,seed=7` (+ `,scale=…`).
    pub fn to_arg(&self) -> String {
        let p = &self.problem;
        let (b, hq, hkv, sq, sk, d) =
            (p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_k, p.head_dim);
        let (dtype, causal, layout) = (p.dtype, p.causal as u8, p.layout.name());
        let mut s = format!(
            "b={b},hq={hq},hkv={hkv},sq={sq},sk={sk},d={d},dtype={dtype},causal={causal},\
             layout={layout},seed={}",
            self.data_seed
        );
        if let Some(scale) = p.softmax_scale {
            s.push_str(&format!(",scale={scale}"));
        }
        if p.has_distinct_head_dim_v() {
            s.push_str(&format!(",dv={}", p.head_dim_v()));
        }
        s.push_str(&ModeKeys::from_modes(&p.modes).to_arg());
        if p.batch_invariant {
            s.push_str(",bi=1");
        }
        s
    }

    pub fn parse(s: &str) -> Result<Case> {
        let mut p = AttentionProblem::new(1, 1, 1, 64).with_batch_invariant(
            BATCH_INVARIANT_DEFAULT.load(std::sync::atomic::Ordering::Relaxed),
        );
        let mut seed = 0u64;
        let mut hkv = None;
        let mut dv = None;
        let mut modes = ModeKeys::default();
        for kv in s.split(',').filter(|x| !x.trim().is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| anyhow!("'{kv}' is not key=value"))?;
            let num = || {
                v.trim()
                    .parse::<usize>()
                    .map_err(|_| anyhow!("{k}: '{v}' is not a count"))
            };
            if modes.parse_key(k.trim(), v)? {
                continue;
            }
            match k.trim() {
                "b" => p.batch = num()?,
                "hq" => p.heads_q = num()?,
                "hkv" => hkv = Some(num()?),
                "sq" => p.seq_q = num()?,
                "sk" => p.seq_k = num()?,
                "d" => p.head_dim = num()?,
                "dv" => dv = Some(num()?),
                "dtype" => p.dtype = v.parse().map_err(|e: String| anyhow!(e))?,
                "causal" => p.causal = matches!(v.trim(), "1" | "true" | "yes"),
                "layout" => p.layout = v.parse().map_err(|e: String| anyhow!(e))?,
                "seed" => seed = v.trim().parse()?,
                "scale" => p.softmax_scale = Some(v.trim().parse()?),
                "bi" => p.batch_invariant = matches!(v.trim(), "1" | "true" | "yes"),
                other => bail!("unknown case key '{other}'"),
            }
        }
        if modes.q_fp8 && modes.kv_fp8.is_none() {
            bail!("qfp8=1: an e4m3 Q takes its descale table's shape from fp8=tensor|head|batchhead, which is missing");
        }
        p.heads_kv = hkv.unwrap_or(p.heads_q);
        if let Some(dv) = dv {
            p = p.with_head_dim_v(dv);
        }
        crate::mode_case::apply(&mut p, &modes, seed);
        Ok(Case {
            problem: p,
            data_seed: seed,
        })
    }

    /// A mode case ready to call: the problem with its drawn tables, and its storage-order
    /// inputs.
    pub fn with_mode_inputs(&self) -> (AttentionProblem, Draw, ModeInputs) {
        let mut p = self.problem.clone();
        let draw = crate::mode_case::apply(
            &mut p,
            &ModeKeys::from_modes(&self.problem.modes),
            self.data_seed,
        );
        let inp = crate::mode_case::mode_inputs(&p, &draw, self.data_seed);
        (p, draw, inp)
    }

    /// The tables drawn from the case's seed for its modes (none for a dense case).
    pub fn draw(&self) -> Draw {
        let mut p = self.problem.clone();
        crate::mode_case::apply(
            &mut p,
            &ModeKeys::from_modes(&self.problem.modes),
            self.data_seed,
        )
    }

    /// The oracle's problem for the whole batch: dense storage, with the case's windows, softcap
    /// and ALiBi (its slopes as [`Case::draw`] draws them). Cases with varlen or a cache are
    /// judged one sequence at a time instead (`mode_case::judge`).
    pub fn oracle_problem(&self) -> OracleProblem {
        let p = &self.problem;
        let mut op = OracleProblem::dense(
            p.batch,
            p.heads_q,
            p.heads_kv,
            p.seq_q,
            p.seq_k,
            p.head_dim,
            p.causal,
            p.scale() as f64,
        );
        if !p.modes.is_dense() {
            crate::mode_case::with_score_modes(&mut op, p, &self.draw(), 0..p.batch);
        }
        op
    }

    /// Multiply-adds the oracle spends on the whole case.
    pub fn oracle_work(&self) -> usize {
        let p = &self.problem;
        p.batch * p.heads_q * p.seq_q * p.seq_k.max(1) * p.head_dim
    }
}

/// Case inputs in logical order.
pub struct Inputs {
    pub q: Array4<f32>,
    pub k: Array4<f32>,
    pub v: Array4<f32>,
}

pub fn inputs(case: &Case) -> Inputs {
    let p = &case.problem;
    let s = case.data_seed;
    Inputs {
        q: random_tensor(
            p.dtype,
            [p.batch, p.heads_q, p.seq_q, p.head_dim],
            s.wrapping_mul(3),
        ),
        k: random_tensor(
            p.dtype,
            [p.batch, p.heads_kv, p.seq_k, p.head_dim],
            s.wrapping_mul(3).wrapping_add(1),
        ),
        v: random_tensor(
            p.dtype,
            [p.batch, p.heads_kv, p.seq_k, p.head_dim_v()],
            s.wrapping_mul(3).wrapping_add(2),
        ),
    }
}

/// The outcome of a case: forward (`V` = [`Verdict`]) or backward ([`BwdOutcome`]).
pub enum Outcome<V = Verdict> {
    Pass(V),
    Fail(String, Option<V>),
    Skipped(String),
}

/// Largest oracle work judged on every row; above it a sample of rows is judged (every element
/// of the output is still checked written, since a NaN anywhere in the sampled rows fails and
/// the unsampled rows are scanned for NaN separately).
pub const FULL_ORACLE_WORK: usize = 400_000_000;
pub const SAMPLED_ROWS: usize = 2048;

/// Runs one case on one kernel and judges it.
pub fn run_case(kernel: &dyn Attention, device: &Device, case: &Case) -> Outcome {
    let p = &case.problem;
    if let Err(u) = kernel.supports(p, device.info()) {
        return Outcome::Skipped(u.reason);
    }
    if !p.modes.is_dense() {
        return run_mode_case(kernel, device, case);
    }
    let inp = inputs(case);
    let result = flashcore::forward_host(
        kernel,
        device,
        p,
        to_layout(inp.q.view(), p.layout),
        to_layout(inp.k.view(), p.layout),
        to_layout(inp.v.view(), p.layout),
    );
    let out = match result {
        Ok(o) => o,
        Err(Error::Unsupported(u)) => return Outcome::Skipped(u.reason),
        Err(e) => return Outcome::Fail(format!("error: {e}"), None),
    };
    let o_logical = to_layout(out.o.view(), p.layout);
    let op = case.oracle_problem();
    let rows = if case.oracle_work() <= FULL_ORACLE_WORK {
        Rows::All
    } else {
        flashcore_oracle::sample_rows(&op, SAMPLED_ROWS, case.data_seed)
    };
    let verdict = flashcore_oracle::check(
        &op,
        precision(p.dtype),
        inp.q.view(),
        inp.k.view(),
        inp.v.view(),
        o_logical,
        out.lse.view(),
        &rows,
    );
    if !matches!(rows, Rows::All) {
        // Unsampled rows: every element must still have been written (inputs are finite).
        let unwritten = o_logical.iter().filter(|x| x.is_nan()).count()
            + out
                .lse
                .lanes(Axis(2))
                .into_iter()
                .flatten()
                .filter(|x| x.is_nan())
                .count();
        if unwritten > 0 {
            return Outcome::Fail(
                format!("{unwritten} output elements are NaN (unwritten?)"),
                Some(verdict),
            );
        }
    }
    if verdict.pass {
        Outcome::Pass(verdict)
    } else {
        Outcome::Fail(verdict.message.clone(), Some(verdict))
    }
}

/// The outcome of a backward case.
pub type BwdOutcome = Outcome<flashcore_oracle::BackwardVerdict>;

/// dO of a backward case: fresh standard normal values (their own seed stream), logical order.
pub fn grad_output(case: &Case) -> Array4<f32> {
    let p = &case.problem;
    random_tensor(
        p.dtype,
        [p.batch, p.heads_q, p.seq_q, p.head_dim],
        case.data_seed.wrapping_mul(3).wrapping_add(0x0bad_5eed),
    )
}

/// Names the forward generation that feeds every backward kernel O and LSE, where it takes the
/// problem (triage: whether a backward's error comes with the forward's O and LSE).
pub const BWD_FORWARD_ENV: &str = "FLASHCORE_BWD_FORWARD";

/// The forward that feeds a backward kernel O and LSE: the generation [`BWD_FORWARD_ENV`] names,
/// else the generation of the same name if it takes the problem, else the fastest one that does,
/// else the scalar one (the backward is judged, not the forward).
pub fn forward_for_backward(
    backward_name: &str,
    problem: &AttentionProblem,
    device: &flashcore::DeviceInfo,
) -> Option<Box<dyn Attention>> {
    let named = std::env::var(BWD_FORWARD_ENV).ok();
    named
        .as_deref()
        .and_then(flashcore::kernel)
        .filter(|k| k.supports(problem, device).is_ok())
        .or_else(|| flashcore::kernel(backward_name))
        .filter(|k| k.supports(problem, device).is_ok())
        .or_else(|| flashcore::best_for(problem, device))
        .or_else(|| flashcore::kernel("scalar"))
}

/// Everything a backward call reads, on the host: the case's inputs and dO in logical order,
/// O (the problem's layout order) and LSE from a GPU forward ([`forward_for_backward`]).
pub struct BackwardInputs {
    pub inputs: Inputs,
    pub d_o: Array4<f32>,
    pub forward: flashcore::HostOutput<f32>,
    /// The ALiBi slopes the forward took (drawn from the case's seed), which the backward
    /// takes too.
    pub alibi_slopes: Option<Vec<f32>>,
}

/// Why a case has no backward inputs.
#[derive(Clone, Debug)]
pub enum NoInputs {
    /// The forward does not take the problem.
    Unsupported(String),
    /// There is no forward, or it failed.
    Failed(String),
}

impl From<NoInputs> for BwdOutcome {
    fn from(n: NoInputs) -> BwdOutcome {
        match n {
            NoInputs::Unsupported(r) => BwdOutcome::Skipped(r),
            NoInputs::Failed(m) => BwdOutcome::Fail(m, None),
        }
    }
}

/// Makes a case's backward inputs.
pub fn backward_inputs(
    backward_name: &str,
    device: &Device,
    case: &Case,
) -> std::result::Result<BackwardInputs, NoInputs> {
    let p = &case.problem;
    let Some(forward) = forward_for_backward(backward_name, p, device.info()) else {
        return Err(NoInputs::Failed(
            "no forward kernel to produce O and LSE".into(),
        ));
    };
    let inputs = inputs(case);
    let d_o = grad_output(case);
    let result = if p.modes.is_dense() {
        flashcore::forward_host(
            forward.as_ref(),
            device,
            p,
            to_layout(inputs.q.view(), p.layout),
            to_layout(inputs.k.view(), p.layout),
            to_layout(inputs.v.view(), p.layout),
        )
    } else {
        forward_with_score_modes(forward.as_ref(), device, case, &inputs)
    };
    match result {
        Ok(forward) => Ok(BackwardInputs {
            inputs,
            d_o,
            forward,
            alibi_slopes: case.draw().alibi_slopes,
        }),
        Err(Error::Unsupported(u)) => Err(NoInputs::Unsupported(format!("forward: {}", u.reason))),
        Err(e) => Err(NoInputs::Failed(format!("forward error: {e}"))),
    }
}

/// The forward of a dense-storage case with windows, softcap or ALiBi (the slopes drawn from
/// its seed), as the dense forward's output.
fn forward_with_score_modes(
    forward: &dyn Attention,
    device: &Device,
    case: &Case,
    inputs: &Inputs,
) -> std::result::Result<flashcore::HostOutput<f32>, Error> {
    let p = &case.problem;
    let draw = case.draw();
    fn view(a: &Array4<f32>, layout: Layout) -> ndarray::ArrayViewD<'_, f32> {
        to_layout(a.view(), layout).into_dyn()
    }
    let host = flashcore::HostInputs::new(
        view(&inputs.q, p.layout),
        view(&inputs.k, p.layout),
        view(&inputs.v, p.layout),
    )
    .with_tables(draw.host_tables());
    let out = flashcore::forward_host_modes(forward, device, p, host)?;
    let four = |a: ndarray::ArrayD<f32>| a.into_dimensionality::<ndarray::Ix4>();
    let three = |a: ndarray::ArrayD<f32>| a.into_dimensionality::<ndarray::Ix3>();
    match (four(out.o), three(out.lse)) {
        (Ok(o), Ok(lse)) => Ok(flashcore::HostOutput { o, lse }),
        _ => unreachable!("dense storage: O is 4-d, LSE 3-d"),
    }
}

/// Runs one backward case and judges dQ, dK, dV by the oracle's backward rule. O and LSE come
/// from a GPU forward ([`backward_inputs`]), as a training step would feed them; dO is fresh
/// random. The gradients are poisoned with NaN before the launch (`backward_host`) and every
/// element is judged, so an element never written fails. Windows, softcap and ALiBi come with
/// the case (the slopes drawn from its seed, for the forward and the backward alike); a kernel
/// that does not take them, or a storage mode (which no backward takes), skips the case.
pub fn run_backward_case(
    kernel: &dyn AttentionBackward,
    device: &Device,
    case: &Case,
) -> BwdOutcome {
    let p = &case.problem;
    if let Err(u) = kernel.supports_backward(p, device.info()) {
        return BwdOutcome::Skipped(u.reason);
    }
    if let Err(e) = flashcore::backward::validate_backward(p) {
        return BwdOutcome::Skipped(e.to_string());
    }
    if flashcore::backward::is_varlen(p) {
        return run_varlen_backward_case(kernel, device, case);
    }
    let bi = match backward_inputs(kernel.name(), device, case) {
        Ok(b) => b,
        Err(why) => return why.into(),
    };
    let inp = &bi.inputs;
    fn l(a: &Array4<f32>, layout: Layout) -> ndarray::ArrayView4<'_, f32> {
        to_layout(a.view(), layout)
    }
    let draw = case.draw();
    let grads = match flashcore::backward_host_with_tables(
        kernel,
        device,
        p,
        l(&inp.q, p.layout),
        l(&inp.k, p.layout),
        l(&inp.v, p.layout),
        bi.forward.o.view(),
        l(&bi.d_o, p.layout),
        bi.forward.lse.view(),
        &draw.host_tables(),
    ) {
        Ok(g) => g,
        Err(Error::Unsupported(u)) => return BwdOutcome::Skipped(u.reason),
        Err(e) => return BwdOutcome::Fail(format!("error: {e}"), None),
    };
    let verdict = flashcore_oracle::check_backward(
        &case.oracle_problem(),
        precision(p.dtype),
        inp.q.view(),
        inp.k.view(),
        inp.v.view(),
        bi.d_o.view(),
        to_layout(grads.dq.view(), p.layout),
        to_layout(grads.dk.view(), p.layout),
        to_layout(grads.dv.view(), p.layout),
    );
    if verdict.pass {
        BwdOutcome::Pass(verdict)
    } else {
        BwdOutcome::Fail(verdict.message.clone(), Some(verdict))
    }
}

/// What a varlen backward call of a case reads: its problem, drawn tables and packed inputs, the
/// forward's packed O and LSE, and dO (`mode_case::grad_output_storage`).
pub struct VarlenBackwardInputs {
    pub problem: AttentionProblem,
    pub draw: Draw,
    pub inputs: ModeInputs,
    pub forward: flashcore::HostOutputs,
    pub d_o: ndarray::ArrayD<f32>,
}

impl VarlenBackwardInputs {
    /// The case's inputs and the forward of the generation `forward_for_backward` picks for the
    /// backward kernel `backward_name`.
    pub fn new(
        backward_name: &str,
        device: &Device,
        case: &Case,
    ) -> std::result::Result<Self, NoInputs> {
        let (problem, draw, inputs) = case.with_mode_inputs();
        let Some(fwd) = forward_for_backward(backward_name, &problem, device.info()) else {
            return Err(NoInputs::Failed(
                "no forward kernel to produce O and LSE".into(),
            ));
        };
        let forward = flashcore::forward_host_modes(
            fwd.as_ref(),
            device,
            &problem,
            inputs.host_inputs(&draw),
        )
        .map_err(|e| match e {
            Error::Unsupported(u) => NoInputs::Unsupported(format!("forward: {}", u.reason)),
            e => NoInputs::Failed(format!("forward error: {e}")),
        })?;
        let d_o = crate::mode_case::grad_output_storage(&problem, case.data_seed);
        Ok(VarlenBackwardInputs {
            problem,
            draw,
            inputs,
            forward,
            d_o,
        })
    }

    /// The host backward's inputs, borrowed.
    pub fn host(&self) -> flashcore::BackwardHostInputs<'_> {
        flashcore::BackwardHostInputs {
            q: self.inputs.q.view(),
            k: self.inputs.k.view(),
            v: self.inputs.v.view(),
            o: self.forward.o.view(),
            d_o: self.d_o.view(),
            lse: self.forward.lse.view(),
            tables: self.draw.host_tables(),
        }
    }
}

/// A varlen backward case: packed storage-order inputs, the forward's packed O and LSE, one host
/// backward call, each sequence's gradients judged alone (`mode_case::judge_backward`).
fn run_varlen_backward_case(
    kernel: &dyn AttentionBackward,
    device: &Device,
    case: &Case,
) -> BwdOutcome {
    let vi = match VarlenBackwardInputs::new(kernel.name(), device, case) {
        Ok(vi) => vi,
        Err(why) => return why.into(),
    };
    let grads = match flashcore::backward_host_modes(kernel, device, &vi.problem, vi.host()) {
        Ok(g) => g,
        Err(Error::Unsupported(u)) => return BwdOutcome::Skipped(u.reason),
        Err(e) => return BwdOutcome::Fail(format!("error: {e}"), None),
    };
    match crate::mode_case::judge_backward(&vi.problem, &vi.draw, &vi.inputs, &vi.d_o, &grads) {
        Ok(v) => BwdOutcome::Pass(v),
        Err(failure) => BwdOutcome::Fail(failure.0, failure.1),
    }
}

/// A case with inference modes: storage-order inputs and tables, one host call, each sequence
/// judged alone (`mode_case::judge`).
fn run_mode_case(kernel: &dyn Attention, device: &Device, case: &Case) -> Outcome {
    let (p, draw, inp) = case.with_mode_inputs();
    let out = match flashcore::forward_host_modes(kernel, device, &p, inp.host_inputs(&draw)) {
        Ok(o) => o,
        Err(Error::Unsupported(u)) => return Outcome::Skipped(u.reason),
        Err(e) => return Outcome::Fail(format!("error: {e}"), None),
    };
    match crate::mode_case::judge(&p, &draw, &inp, &out) {
        Ok(v) => Outcome::Pass(v),
        Err(msg) => Outcome::Fail(msg, None),
    }
}

/// The oracle's two references for one problem and one input set on a sample of rows, computed
/// once and then used to judge any number of kernel outputs: `bench-all` checks every
/// generation on the same inputs before timing it, and the references are the expensive part.
pub struct ShapeCheck {
    pub problem: AttentionProblem,
    op: OracleProblem,
    rows: Rows,
    reference: flashcore_oracle::Reference,
    low_precision: flashcore_oracle::Reference,
}

impl ShapeCheck {
    /// `q`, `k`, `v` in logical [batch, heads, seq, head_dim] order. Judges at most `max_rows`
    /// rows (`sample_rows`: first and last row of every head plus random ones).
    pub fn new(
        problem: &AttentionProblem,
        q: ndarray::ArrayView4<f32>,
        k: ndarray::ArrayView4<f32>,
        v: ndarray::ArrayView4<f32>,
        max_rows: usize,
        seed: u64,
    ) -> ShapeCheck {
        let op = Case {
            problem: problem.clone(),
            data_seed: seed,
        }
        .oracle_problem();
        let rows = flashcore_oracle::sample_rows(&op, max_rows, seed);
        let reference = flashcore_oracle::reference_f64(&op, q.view(), k.view(), v.view(), &rows);
        let low_precision = flashcore_oracle::reference_low_precision(
            &op,
            precision(problem.dtype),
            q,
            k,
            v,
            &rows,
        );
        ShapeCheck {
            problem: problem.clone(),
            op,
            rows,
            reference,
            low_precision,
        }
    }

    /// Rows judged.
    pub fn rows_checked(&self) -> usize {
        self.rows.len(&self.op)
    }

    /// Judges a kernel output as it came back from the device: O as dtype bits in the
    /// problem's (dense) layout order, LSE as [batch, heads_q, seq_q]. Every element must also
    /// have been written (no NaN anywhere: the caller poisons the outputs with NaN before the
    /// launch and the inputs are finite). `Err` holds the oracle's one-line reason.
    pub fn judge_bits(&self, o_bits: &[u16], lse: &[f32]) -> std::result::Result<Verdict, String> {
        let p = &self.problem;
        let shape = p.layout.shape(p.batch, p.heads_q, p.seq_q, p.head_dim);
        if o_bits.len() != shape.iter().product::<usize>() || lse.len() != p.lse_len() {
            return Err(format!(
                "output lengths {} / {} do not match the problem's {} / {}",
                o_bits.len(),
                lse.len(),
                shape.iter().product::<usize>(),
                p.lse_len()
            ));
        }
        let o: Vec<f32> = o_bits.iter().map(|&b| p.dtype.from_bits(b)).collect();
        let o = Array4::from_shape_vec(shape, o).expect("length checked");
        let lse = ndarray::Array3::from_shape_vec((p.batch, p.heads_q, p.seq_q), lse.to_vec())
            .expect("length checked");
        let o_logical = to_layout(o.view(), p.layout);
        let verdict = flashcore_oracle::judge(
            &self.op,
            precision(p.dtype),
            o_logical,
            lse.view(),
            &self.rows,
            &self.reference,
            &self.low_precision,
        );
        let unwritten =
            o.iter().filter(|x| x.is_nan()).count() + lse.iter().filter(|x| x.is_nan()).count();
        if !verdict.pass {
            return Err(verdict.message.clone());
        }
        if unwritten > 0 {
            return Err(format!(
                "{unwritten} output elements are NaN (unwritten?) outside the judged rows"
            ));
        }
        Ok(verdict)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashcore::DType;

    #[test]
    fn a_case_round_trips_through_its_argument() {
        let c = Case {
            problem: AttentionProblem::new(2, 4, 65, 64)
                .with_kv(2, 130)
                .with_causal(true)
                .with_dtype(DType::Bf16)
                .with_layout(Layout::Bhsd),
            data_seed: 42,
        };
        assert_eq!(Case::parse(&c.to_arg()).unwrap(), c);
    }

    #[test]
    fn inputs_are_fresh_random_not_zeros() {
        let c = Case::parse("b=1,hq=2,sq=3,sk=5,d=8,seed=1").unwrap();
        let a = inputs(&c);
        let b = inputs(&Case {
            data_seed: 2,
            ..c.clone()
        });
        assert!(a.q.iter().all(|x| x.is_finite()));
        assert!(a.q.iter().filter(|x| **x == 0.0).count() < 2);
        assert_ne!(a.q, b.q);
        assert_ne!(a.k, a.v);
    }

    #[test]
    fn shape_check_passes_the_reference_and_fails_garbage_and_holes() {
        use flashcore_oracle::reference_f64;
        let p = AttentionProblem::new(1, 2, 40, 16)
            .with_causal(true)
            .with_layout(Layout::Bshd);
        let case = Case {
            problem: p.clone(),
            data_seed: 3,
        };
        let inp = inputs(&case);
        let chk = ShapeCheck::new(&p, inp.q.view(), inp.k.view(), inp.v.view(), 16, 3);
        assert_eq!(chk.rows_checked(), 16);
        // The exact answer, rounded to f16 and laid out as BSHD bits.
        let op = case.oracle_problem();
        let r = reference_f64(&op, inp.q.view(), inp.k.view(), inp.v.view(), &Rows::All);
        let (o, lse) = r.to_dense(&op);
        let o32 = o.mapv(|x| x as f32);
        let bits: Vec<u16> = to_layout(o32.view(), p.layout)
            .iter()
            .map(|&x| p.dtype.to_bits(x))
            .collect();
        let lse32: Vec<f32> = lse.iter().map(|&x| x as f32).collect();
        assert!(chk.judge_bits(&bits, &lse32).is_ok());
        let mut wrong = bits.clone();
        for b in wrong.iter_mut() {
            *b = p.dtype.to_bits(p.dtype.from_bits(*b) + 0.5);
        }
        assert!(chk.judge_bits(&wrong, &lse32).is_err());
        let mut hole = lse32.clone();
        // A row the sample does not include (rows 1..=38 of head 0 are mostly unsampled).
        let judged = flashcore_oracle::sample_rows(&op, 16, 3).expand(&op);
        let r = (0..40).find(|r| !judged.contains(&(0, 0, *r))).unwrap();
        hole[r] = f32::NAN;
        let err = chk.judge_bits(&bits, &hole).unwrap_err();
        assert!(err.contains("NaN"), "{err}");
        assert!(chk.judge_bits(&bits[1..], &lse32).is_err());
    }

    #[test]
    fn bad_case_arguments_are_errors() {
        assert!(Case::parse("b=x").is_err());
        assert!(Case::parse("nope=1").is_err());
        assert!(Case::parse("dtype=f32").is_err());
    }
}
