//! The `grid` check of `cargo xtask reliability` (the list in `super` says what it tries).

use std::collections::BTreeSet;
use std::time::Instant;

use flashcore::{Attention, AttentionProblem, DType, Device, Error};
use ndarray::{Array3, Array4};

use super::device::{alloc_f32, alloc_u16, download, upload, DevCase};
use super::host::{count_nan_bits, offset, Synth};
use super::watchdog::step;
use super::{case_oracle, Args, Report, Res};
use crate::inputs::precision;

struct BigCase {
    name: &'static str,
    problem: AttentionProblem,
    max_rows: usize,
}

pub(super) fn run(dev: &Device, kernels: &[Box<dyn Attention>], args: &Args, report: &mut Report) {
    let mut cases = vec![BigCase {
        name: "batch*heads=67200 (>65535)",
        problem: AttentionProblem::new(4200, 16, 64, 64).with_causal(true),
        max_rows: 2048,
    }];
    if !args.no_huge {
        // Q and O: 32 · 524352 · 128 = 2 147 745 792 elements > 2^31; BSHD, so a row offset
        // alone (row · 32 · 128) passes 2^31.
        cases.push(BigCase {
            name: "q,o >2^31 elements",
            problem: AttentionProblem::new(1, 32, 524_352, 128).with_kv(32, 1024),
            max_rows: 2048,
        });
        // K and V past 2^31 elements; every sampled row reads ~half a million keys in the oracle.
        cases.push(BigCase {
            name: "k,v >2^31 elements",
            problem: AttentionProblem::new(1, 32, 256, 128)
                .with_kv(32, 524_352)
                .with_causal(true)
                .with_dtype(DType::Bf16),
            max_rows: 128,
        });
    }
    for case in cases {
        grid_case(dev, kernels, &case, args, report);
    }
}

fn grid_case(
    dev: &Device,
    kernels: &[Box<dyn Attention>],
    case: &BigCase,
    args: &Args,
    report: &mut Report,
) {
    let p = &case.problem;
    let label = |k: &dyn Attention| format!("{} [{}]", k.name(), case.name);
    let takers: Vec<&Box<dyn Attention>> = kernels
        .iter()
        .filter(|k| k.supports(p, dev.info()).is_ok())
        .collect();
    for k in kernels
        .iter()
        .filter(|k| k.supports(p, dev.info()).is_err())
    {
        let why = k.supports(p, dev.info()).unwrap_err().reason;
        report.add("grid", &label(k.as_ref()), Res::Skip, why, Instant::now());
    }
    if takers.is_empty() {
        return;
    }
    let t_setup = Instant::now();
    let _s = step(format!("grid setup {}", case.name), args.step_timeout);
    let dt = p.dtype;
    let sq = Synth::new(
        args.seed ^ 0x51,
        dt,
        [p.batch, p.heads_q, p.seq_q, p.head_dim],
    );
    let sk = Synth::new(
        args.seed ^ 0x52,
        dt,
        [p.batch, p.heads_kv, p.seq_k, p.head_dim],
    );
    let sv = Synth::new(
        args.seed ^ 0x53,
        dt,
        [p.batch, p.heads_kv, p.seq_k, p.head_dim],
    );
    let setup = (|| -> std::result::Result<_, String> {
        let e = |e: Error| e.to_string();
        let q = upload(dev, "q", &sq.dense_bits(p.layout)).map_err(e)?;
        let k = upload(dev, "k", &sk.dense_bits(p.layout)).map_err(e)?;
        let v = upload(dev, "v", &sv.dense_bits(p.layout)).map_err(e)?;
        let c = DevCase {
            p: p.clone(),
            q,
            k,
            v,
            o: alloc_u16(dev, "o", p.o_len()).map_err(e)?,
            lse: alloc_f32(dev, "lse", p.lse_len()).map_err(e)?,
            off: [0; 5],
            o_image: None,
            lse_image: None,
        };
        // The oracle's inputs: the sampled rows of Q, the kv heads they read.
        let op = case_oracle(p);
        let rows = flashcore_oracle::sample_rows(&op, case.max_rows, args.seed);
        let list = rows.expand(&op);
        let group = p.heads_q / p.heads_kv;
        let kv_heads: BTreeSet<(usize, usize)> =
            list.iter().map(|&(b, h, _)| (b, h / group)).collect();
        let qa = sq.rows(&list);
        let ka = sk.heads(&kv_heads);
        let va = sv.heads(&kv_heads);
        let prec = precision(dt);
        let reference =
            flashcore_oracle::reference_f64(&op, qa.view(), ka.view(), va.view(), &rows);
        let low = flashcore_oracle::reference_low_precision(
            &op,
            prec,
            qa.view(),
            ka.view(),
            va.view(),
            &rows,
        );
        Ok((c, op, rows, list, reference, low))
    })();
    drop(_s);
    let (mut c, op, rows, list, reference, low) = match setup {
        Ok(x) => x,
        Err(m) => {
            for k in &takers {
                report.add(
                    "grid",
                    &label(k.as_ref()),
                    Res::Fail,
                    format!("setup: {m}"),
                    t_setup,
                );
            }
            return;
        }
    };
    println!(
        "grid: {} set up in {:.1} s ({} rows judged, Q {} M elements, K {} M)",
        case.name,
        t_setup.elapsed().as_secs_f64(),
        list.len(),
        p.q_len() >> 20,
        p.k_len() >> 20
    );
    for k in takers {
        let t = Instant::now();
        let _s = step(format!("grid {}", label(k.as_ref())), args.step_timeout);
        let result = (|| -> std::result::Result<String, String> {
            let e = |e: Error| e.to_string();
            c.poison(dev).map_err(e)?;
            let t_kernel = Instant::now();
            c.forward(k.as_ref(), dev).map_err(e)?;
            dev.synchronize().map_err(e)?;
            let kernel_s = t_kernel.elapsed().as_secs_f64();
            let o = download(dev, &c.o).map_err(e)?;
            let lse = download(dev, &c.lse).map_err(e)?;
            let unwritten = count_nan_bits(dt, &o[..p.o_len()])
                + lse[..p.lse_len()].iter().filter(|x| x.is_nan()).count();
            // Kernel O of the judged rows, in logical order (zeros elsewhere, never read).
            let mut oa = Array4::<f32>::zeros([p.batch, p.heads_q, p.seq_q, p.head_dim]);
            let st = p.strides().o;
            for &(b, h, r) in &list {
                let at = offset(&st, b, h, r);
                for col in 0..p.head_dim {
                    oa[[b, h, r, col]] = dt.from_bits(o[at + col]);
                }
            }
            drop(o);
            let la =
                Array3::from_shape_vec((p.batch, p.heads_q, p.seq_q), lse[..p.lse_len()].to_vec())
                    .unwrap();
            let v = flashcore_oracle::judge(
                &op,
                precision(dt),
                oa.view(),
                la.view(),
                &rows,
                &reference,
                &low,
            );
            if !v.pass {
                return Err(v.message);
            }
            if unwritten > 0 {
                return Err(format!(
                    "{unwritten} output elements NaN (unwritten) outside the judged rows"
                ));
            }
            Ok(format!(
                "{p}: {} rows judged, ratio {:.3}, every element written, kernel {kernel_s:.2} s",
                v.rows_checked, v.ratio
            ))
        })();
        match result {
            Ok(m) => report.add("grid", &label(k.as_ref()), Res::Pass, m, t),
            Err(m) => report.add("grid", &label(k.as_ref()), Res::Fail, m, t),
        }
    }
}
