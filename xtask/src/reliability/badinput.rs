//! The `badinput` check of `cargo xtask reliability` (the list in `super` says what it tries).

use std::time::Instant;

use flashcore::{Attention, AttentionProblem, DType, Device, Error, InvalidProblem, Layout};
use flashcore_oracle::Rows;
use ndarray::{Array3, Array4};

use super::device::{download, DevCase};
use super::host::Synth;
use super::watchdog::step;
use super::{case_oracle, dims_for, heads_for, Args, Report, Res};
use crate::case::{run_case, Case, Outcome};
use crate::inputs::precision;

fn judge_case_outcome(o: Outcome) -> std::result::Result<String, String> {
    match o {
        Outcome::Pass(v) => Ok(format!("ratio {:.3}", v.ratio)),
        Outcome::Skipped(r) => Ok(format!("skipped: {r}")),
        Outcome::Fail(m, _) => Err(m),
    }
}

pub(super) fn run(dev: &Device, kernels: &[Box<dyn Attention>], args: &Args, report: &mut Report) {
    for k in kernels {
        let t = Instant::now();
        let _s = step(format!("badinput {}", k.name()), args.step_timeout);
        let mut notes = Vec::new();
        let mut fails = Vec::new();
        let d = dims_for(k.as_ref(), args, &[64])[0];
        let (hq, hkv) = heads_for(k.as_ref());
        let p = AttentionProblem::new(1, hq, 100, d)
            .with_kv(hkv, 100)
            .with_causal(k.capabilities().causal)
            .with_layout(Layout::Bhsd);
        if let Err(u) = k.supports(&p, dev.info()) {
            report.add("badinput", k.name(), Res::Skip, u.reason, t);
            continue;
        }
        match badinput_tensors(dev, k.as_ref(), &p, args.seed) {
            Ok(n) => notes.extend(n),
            Err(e) => fails.push(e),
        }
        // Degenerate but valid problems through the host path, judged by the oracle.
        let case = |p: AttentionProblem, seed: u64| Case {
            problem: p,
            data_seed: seed,
        };
        let c = k.capabilities().causal;
        let checks: Vec<(&str, Case)> = vec![
            (
                "seq_k=0",
                case(
                    AttentionProblem::new(2, hq, 33, d)
                        .with_kv(hkv, 0)
                        .with_causal(c),
                    1,
                ),
            ),
            (
                "causal seq_q>seq_k",
                case(
                    AttentionProblem::new(2, hq, 200, d)
                        .with_kv(hkv, 70)
                        .with_causal(c),
                    2,
                ),
            ),
            (
                "scale 0",
                case(
                    AttentionProblem::new(1, hq, 77, d)
                        .with_kv(hkv, 90)
                        .with_scale(0.0),
                    3,
                ),
            ),
            (
                "scale -0.5",
                case(
                    AttentionProblem::new(1, hq, 77, d)
                        .with_kv(hkv, 90)
                        .with_scale(-0.5)
                        .with_causal(c),
                    4,
                ),
            ),
        ];
        for (what, cs) in checks {
            match judge_case_outcome(run_case(k.as_ref(), dev, &cs)) {
                Ok(m) if m.starts_with("skipped") => notes.push(format!("{what} {m}")),
                Ok(_) => notes.push(format!("{what} ok")),
                Err(m) => fails.push(format!("{what}: {m}")),
            }
        }
        for (what, p) in [
            (
                "batch=0",
                AttentionProblem::new(0, hq, 16, d).with_kv(hkv, 16),
            ),
            (
                "seq_q=0",
                AttentionProblem::new(2, hq, 0, d).with_kv(hkv, 16),
            ),
        ] {
            let l = p.layout;
            let q = Array4::<f32>::zeros(l.shape(p.batch, p.heads_q, p.seq_q, d));
            let kv = Array4::<f32>::zeros(l.shape(p.batch, p.heads_kv, p.seq_k, d));
            match flashcore::forward_host(k.as_ref(), dev, &p, q.view(), kv.view(), kv.view()) {
                Ok(out) if out.o.is_empty() && out.lse.is_empty() => {
                    notes.push(format!("{what} empty"))
                }
                Ok(out) => fails.push(format!("{what}: output of {} elements", out.o.len())),
                Err(Error::Unsupported(u)) => {
                    notes.push(format!("{what} unsupported ({})", u.reason))
                }
                Err(e) => fails.push(format!("{what}: {e}")),
            }
        }
        // A host array of the wrong shape.
        let q = Array4::<f32>::zeros(p.layout.shape(1, hq, 100, d));
        let kv = Array4::<f32>::zeros(p.layout.shape(1, hkv, 99, d));
        match flashcore::forward_host(k.as_ref(), dev, &p, q.view(), kv.view(), kv.view()) {
            Err(Error::Invalid(InvalidProblem::ShapeMismatch { tensor: "k", .. })) => {
                notes.push("host shape -> ShapeMismatch".into())
            }
            other => fails.push(format!("wrong host shape: {:?}", other.map(|_| ()))),
        }
        if let Err(e) = dev.synchronize() {
            fails.push(format!("device unusable afterwards: {e}"));
        }
        report.add_outcome("badinput", k.name(), &notes, &fails, t);
    }
}

/// Misaligned base pointers, dtype tags and short buffers on real device views.
fn badinput_tensors(
    dev: &Device,
    k: &dyn Attention,
    p: &AttentionProblem,
    seed: u64,
) -> std::result::Result<Vec<String>, String> {
    let e = |e: Error| e.to_string();
    let mut notes = Vec::new();
    let sq = Synth::new(seed, p.dtype, [p.batch, p.heads_q, p.seq_q, p.head_dim]);
    let sk = Synth::new(
        seed + 1,
        p.dtype,
        [p.batch, p.heads_kv, p.seq_k, p.head_dim],
    );
    let sv = Synth::new(
        seed + 2,
        p.dtype,
        [p.batch, p.heads_kv, p.seq_k, p.head_dim],
    );
    // Q one element past a 16-byte boundary: buffer [pad, q...].
    let mut qbits = vec![0u16; 1];
    qbits.extend(sq.dense_bits(p.layout));
    let kbits = sk.dense_bits(p.layout);
    let vbits = sv.dense_bits(p.layout);
    let mut c = DevCase::dense(dev, p, &qbits, &kbits, &vbits).map_err(e)?;
    c.off[0] = 1;
    let align = k.capabilities().alignment_elems;
    let o_len = p.o_len();
    let nan = flashcore::host::nan_bits(p.dtype);
    let untouched = |c: &DevCase| -> std::result::Result<bool, String> {
        Ok(download(dev, &c.o).map_err(e)?[..o_len]
            .iter()
            .all(|&b| b == nan))
    };
    let judge = |o: &[u16], lse: &[f32]| -> std::result::Result<f64, String> {
        let op = case_oracle(p);
        let q = sq.full();
        let kk = sk.full();
        let v = sv.full();
        let o = Array4::from_shape_vec(
            [p.batch, p.heads_q, p.seq_q, p.head_dim],
            o[..o_len].iter().map(|&b| p.dtype.from_bits(b)).collect(),
        )
        .unwrap();
        let lse =
            Array3::from_shape_vec((p.batch, p.heads_q, p.seq_q), lse[..p.lse_len()].to_vec())
                .unwrap();
        let v = flashcore_oracle::check(
            &op,
            precision(p.dtype),
            q.view(),
            kk.view(),
            v.view(),
            o.view(),
            lse.view(),
            &Rows::All,
        );
        if v.pass {
            Ok(v.ratio)
        } else {
            Err(v.message)
        }
    };
    c.poison(dev).map_err(e)?;
    match c.forward(k, dev) {
        Err(Error::Unsupported(u)) if align > 1 && u.reason.contains("aligned") => {
            if !untouched(&c)? {
                return Err("misaligned q: Unsupported but O was written".into());
            }
            notes.push("misaligned q -> Unsupported".into());
        }
        Ok(()) if align <= 1 => {
            dev.synchronize().map_err(e)?;
            let o = download(dev, &c.o).map_err(e)?;
            let lse = download(dev, &c.lse).map_err(e)?;
            judge(&o, &lse).map_err(|m| format!("misaligned q: {m}"))?;
            notes.push("misaligned q ok".into());
        }
        other => {
            return Err(format!(
                "misaligned q with {align}-element alignment: {:?}",
                other.map_err(|e| e.to_string())
            ))
        }
    }
    // The facade falls back to a generation that takes the misaligned pointer.
    c.poison(dev).map_err(e)?;
    let ran = {
        let pp = c.p.clone();
        c.with_tensors(c.p.dtype, 0, |t| flashcore::forward_auto(dev, &pp, t))
    };
    match ran {
        Ok(name) => {
            dev.synchronize().map_err(e)?;
            let o = download(dev, &c.o).map_err(e)?;
            let lse = download(dev, &c.lse).map_err(e)?;
            judge(&o, &lse).map_err(|m| format!("forward_auto on misaligned q ({name}): {m}"))?;
            notes.push(format!("forward_auto -> {name}"));
        }
        Err(err) => return Err(format!("forward_auto on misaligned q: {err}")),
    }
    // K tagged with the other dtype.
    c.poison(dev).map_err(e)?;
    let other = if p.dtype == DType::F16 {
        DType::Bf16
    } else {
        DType::F16
    };
    let r = {
        let pp = c.p.clone();
        c.with_tensors(other, 0, |t| k.forward(dev, &pp, t))
    };
    match r {
        Err(Error::Invalid(InvalidProblem::DTypeMismatch { tensor: "k", .. }))
            if untouched(&c)? =>
        {
            notes.push("k dtype -> DTypeMismatch".into())
        }
        r => {
            return Err(format!(
                "k tagged {other}: {:?}",
                r.map_err(|e| e.to_string())
            ))
        }
    }
    // V one element short.
    let r = {
        let pp = c.p.clone();
        c.with_tensors(c.p.dtype, 1, |t| k.forward(dev, &pp, t))
    };
    match r {
        Err(Error::Invalid(InvalidProblem::LengthMismatch { tensor: "v", .. }))
            if untouched(&c)? =>
        {
            notes.push("short v -> LengthMismatch".into())
        }
        other => return Err(format!("short v: {:?}", other.map_err(|e| e.to_string()))),
    }
    Ok(notes)
}
