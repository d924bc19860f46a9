//! The `determinism` check of `cargo xtask reliability` (the list in `super` says what it tries).

use std::time::Instant;

use flashcore::{Attention, AttentionProblem, Device, Error};

use super::device::DevCase;
use super::host::{count_nan_bits, Synth};
use super::watchdog::{progress, step};
use super::{dims_for, Args, Report, Res};

pub(super) fn run(dev: &Device, kernels: &[Box<dyn Attention>], args: &Args, report: &mut Report) {
    for k in kernels {
        let d = dims_for(k.as_ref(), args, &[128, 64])[0];
        let p = AttentionProblem::new(8, 16, 1024, d).with_causal(k.capabilities().causal);
        let mut trials = vec![(p, args.determinism_runs, k.name().to_string())];
        if k.name().contains("persistent") && args.persistent_runs > 0 {
            let d = dims_for(k.as_ref(), args, &[128])[0];
            let large = AttentionProblem::new(4, 16, 8192, d).with_causal(true);
            trials.push((large, args.persistent_runs, format!("{} (large)", k.name())));
            // Decode: the split-KV plan (splits combined in order, no atomics) must be as
            // repeatable as the rest; one query, GQA 32:8, a 8192-key cache.
            let decode = AttentionProblem::new(8, 32, 1, d)
                .with_kv(8, 8192)
                .with_dtype(flashcore::DType::Bf16);
            trials.push((
                decode,
                args.persistent_runs,
                format!("{} (decode)", k.name()),
            ));
        }
        for (p, runs, label) in trials {
            let p = p.with_batch_invariant(args.batch_invariant);
            repeat(dev, k.as_ref(), &p, runs, label, args, report);
        }
        if k.capabilities().modes.q_fp8 {
            repeat_e4m3(dev, k.as_ref(), args, report);
        }
    }
}

/// The e4m3 forward (Q, K and V in e4m3, descales per sequence and KV head, O in bf16): GQA under
/// causal masking at D = 128, through the host path, `args.determinism_runs` times, every O and
/// LSE bit the same as run 0's.
fn repeat_e4m3(dev: &Device, k: &dyn Attention, args: &Args, report: &mut Report) {
    let t = Instant::now();
    let label = format!("{} (e4m3 Q/K/V)", k.name());
    let _s = step(format!("determinism {label}"), args.step_timeout);
    let p = AttentionProblem::new(4, 16, 2048, 128)
        .with_kv(4, 2048)
        .with_causal(true)
        .with_dtype(flashcore::DType::Bf16)
        .with_layout(flashcore::Layout::Bhsd) // (Synth::full's order)
        .with_modes(flashcore::Modes {
            kv_fp8: Some(flashcore::KvScales::PerBatchKvHead),
            q_fp8: true,
            ..flashcore::Modes::default()
        })
        .with_batch_invariant(args.batch_invariant);
    if let Err(u) = k.supports(&p, dev.info()) {
        report.add("determinism", &label, Res::Skip, u.reason, t);
        return;
    }
    // Stored values: normal draws rounded to e4m3; descales powers of two, differing per
    // (sequence, KV head) so that a table read at the wrong index would show as a difference.
    let stored = |seed: u64, heads: usize, n: usize| {
        let s = Synth::new(
            args.seed.wrapping_add(seed),
            flashcore::DType::Bf16,
            [p.batch, heads, n, p.head_dim],
        );
        s.full().mapv(|x| flashcore_oracle::round_e4m3(4.0 * x))
    };
    let (q, kk, v) = (
        stored(20, p.heads_q, p.seq_q),
        stored(21, p.heads_kv, p.seq_k),
        stored(22, p.heads_kv, p.seq_k),
    );
    let table: Vec<f32> = (0..p.batch * p.heads_kv)
        .map(|i| 2f32.powi(-2 - (i % 3) as i32))
        .collect();
    let once = || -> std::result::Result<(Vec<u32>, Vec<u32>), String> {
        let mut inputs = flashcore::HostInputs::new(
            q.view().into_dyn(),
            kk.view().into_dyn(),
            v.view().into_dyn(),
        );
        inputs.tables.q_descale = Some(&table);
        inputs.tables.k_descale = Some(&table);
        inputs.tables.v_descale = Some(&table);
        let out = flashcore::forward_host_modes(k, dev, &p, inputs).map_err(|e| e.to_string())?;
        Ok((
            out.o.iter().map(|x| x.to_bits()).collect(),
            out.lse.iter().map(|x| x.to_bits()).collect(),
        ))
    };
    let result = once().and_then(|first| {
        let unwritten = first
            .0
            .iter()
            .chain(&first.1)
            .filter(|b| f32::from_bits(**b).is_nan())
            .count();
        if unwritten > 0 {
            return Err(format!("first run has {unwritten} NaN outputs"));
        }
        same_every_run(&p, args.determinism_runs, &first, once, |a, b| {
            a.0.iter().zip(&b.0).filter(|(x, y)| x != y).count()
                + a.1.iter().zip(&b.1).filter(|(x, y)| x != y).count()
        })
        .map(|()| format!("{} runs bit-identical", args.determinism_runs))
    });
    match result {
        Ok(msg) => report.add("determinism", &label, Res::Pass, msg, t),
        Err(msg) => report.add("determinism", &label, Res::Fail, msg, t),
    }
}

/// Runs 1 to `runs - 1` of a determinism check (`run`) against run 0 (`first`): `differing`
/// counts the elements of two runs' outputs that are not bit-identical. An error says how many
/// runs differed, the first, and the most elements one differed in.
pub(super) fn same_every_run<T>(
    p: &AttentionProblem,
    runs: usize,
    first: &T,
    mut run: impl FnMut() -> std::result::Result<T, String>,
    differing: impl Fn(&T, &T) -> usize,
) -> std::result::Result<(), String> {
    let (mut differing_runs, mut worst, mut first_run) = (0usize, 0usize, None);
    for i in 1..runs {
        progress();
        let n = differing(&run()?, first);
        if n > 0 {
            differing_runs += 1;
            worst = worst.max(n);
            first_run.get_or_insert(i);
        }
    }
    if differing_runs > 0 {
        return Err(format!(
            "{differing_runs} of {} runs differ from run 0 (first: run {}, up to {worst} elements) on {p}",
            runs - 1,
            first_run.unwrap()
        ));
    }
    Ok(())
}

fn repeat(
    dev: &Device,
    k: &dyn Attention,
    p: &AttentionProblem,
    runs: usize,
    label: String,
    args: &Args,
    report: &mut Report,
) {
    let t = Instant::now();
    let _s = step(format!("determinism {label}"), args.step_timeout);
    if let Err(u) = k.supports(p, dev.info()) {
        report.add("determinism", &label, Res::Skip, u.reason, t);
        return;
    }
    let result = (|| -> std::result::Result<String, String> {
        let e = |e: Error| e.to_string();
        let s = |i: u64, h: usize, n: usize| {
            Synth::new(
                args.seed.wrapping_add(i),
                p.dtype,
                [p.batch, h, n, p.head_dim],
            )
        };
        let mut c = DevCase::dense(
            dev,
            p,
            &s(10, p.heads_q, p.seq_q).dense_bits(p.layout),
            &s(11, p.heads_kv, p.seq_k).dense_bits(p.layout),
            &s(12, p.heads_kv, p.seq_k).dense_bits(p.layout),
        )
        .map_err(e)?;
        let (o0, l0) = c.run(k, dev).map_err(e)?;
        let unwritten = count_nan_bits(p.dtype, &o0) + l0.iter().filter(|x| x.is_nan()).count();
        if unwritten > 0 {
            return Err(format!(
                "first run left {unwritten} output elements NaN (unwritten)"
            ));
        }
        let first = (o0, l0);
        same_every_run(
            p,
            runs,
            &first,
            || c.run(k, dev).map_err(e),
            |(o, l), (o0, l0)| {
                o.iter().zip(o0).filter(|(a, b)| a != b).count()
                    + l.iter()
                        .zip(l0)
                        .filter(|(a, b)| a.to_bits() != b.to_bits())
                        .count()
            },
        )?;
        let (o0, l0) = first;
        Ok(format!(
            "{runs} runs bit-identical (O {} + LSE {} elements) on {p}",
            o0.len(),
            l0.len()
        ))
    })();
    match result {
        Ok(m) => report.add("determinism", &label, Res::Pass, m, t),
        Err(m) => report.add("determinism", &label, Res::Fail, m, t),
    }
}
