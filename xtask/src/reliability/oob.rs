//! The `oob` check of `cargo xtask reliability` (the list in `super` says what it tries).

use std::time::Instant;

use flashcore::{
    Attention, AttentionProblem, Device, Error, Layout, ProblemStrides, TensorStrides,
};

use super::device::{upload, DevCase};
use super::host::{is_nan_bits, offset, padding_sentinel, Synth};
use super::watchdog::{progress, step};
use super::{dims_for, heads_for, Args, PaddedTally, Report};

/// Tail lengths: 1 and tile sizes 16/32/64/128(/192) ± 1.
const TAILS: &[usize] = &[1, 15, 17, 31, 33, 63, 65, 127, 129, 191, 193];
const CROSS: &[(usize, usize)] = &[
    (65, 129),
    (129, 65),
    (1, 193),
    (193, 1),
    (17, 191),
    (191, 17),
];

pub(super) fn run(dev: &Device, kernels: &[Box<dyn Attention>], args: &Args, report: &mut Report) {
    for k in kernels {
        let t = Instant::now();
        let _s = step(format!("oob {}", k.name()), args.step_timeout);
        let caps = k.capabilities();
        let (hq, hkv) = heads_for(k.as_ref());
        let mut shapes: Vec<(usize, usize)> = TAILS.iter().map(|&n| (n, n)).collect();
        shapes.extend_from_slice(CROSS);
        let mut tally = PaddedTally::default();
        let mut i = 0u64;
        for d in dims_for(k.as_ref(), args, &[64, 128]) {
            for &(sq, sk) in &shapes {
                for causal in [false, true] {
                    if causal && !caps.causal {
                        continue;
                    }
                    for cols in [false, true] {
                        i += 1;
                        progress();
                        let dtype = caps.dtypes[i as usize % caps.dtypes.len()];
                        let p = AttentionProblem::new(2, hq, sq, d)
                            .with_kv(hkv, sk)
                            .with_causal(causal)
                            .with_dtype(dtype)
                            .with_layout(Layout::Bhsd);
                        let outcome = oob_one(dev, k.as_ref(), &p, cols, args.seed ^ i);
                        tally.count(outcome, || {
                            format!(
                                "sq={sq} sk={sk} d={d} {dtype}{}{}",
                                if causal { " causal" } else { "" },
                                if cols {
                                    " rows+cols padded"
                                } else {
                                    " rows padded"
                                }
                            )
                        });
                    }
                }
            }
        }
        tally.report(
            report,
            "oob",
            k.name(),
            |ran| format!("{ran} padded runs bit-identical to dense (tails 1..193 at tiles ±1, causal and not, NaN past seq/head_dim/base), no writes into padding"),
            t,
        );
    }
}

/// One padded-versus-dense comparison. Ok(false): the kernel does not take the problem.
fn oob_one(
    dev: &Device,
    k: &dyn Attention,
    p: &AttentionProblem,
    pad_cols: bool,
    seed: u64,
) -> std::result::Result<bool, String> {
    if k.supports(p, dev.info()).is_err() {
        return Ok(false);
    }
    let e = |e: Error| e.to_string();
    let (b, hq, hkv, sq, sk, d) = (p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_k, p.head_dim);
    let dt = p.dtype;
    let nan = flashcore::host::nan_bits(dt);
    // Padding sentinels the kernel must never write: NaNs with a payload no kernel produces.
    let o_sentinel = padding_sentinel(dt);
    let lse_sentinel: u32 = 0x7fc0_5a5a;
    let sq_ = Synth::new(seed, dt, [b, hq, sq, d]);
    let sk_ = Synth::new(seed + 1, dt, [b, hkv, sk, d]);
    let sv_ = Synth::new(seed + 2, dt, [b, hkv, sk, d]);

    // Dense run.
    let mut dense = DevCase::dense(
        dev,
        p,
        &sq_.dense_bits(Layout::Bhsd),
        &sk_.dense_bits(Layout::Bhsd),
        &sv_.dense_bits(Layout::Bhsd),
    )
    .map_err(e)?;
    let (o_ref, lse_ref) = dense
        .run(k, dev)
        .map_err(|err| format!("dense run: {err}"))?;
    let o_ref = &o_ref[..p.o_len()];
    let lse_ref = &lse_ref[..p.lse_len()];
    let unwritten = o_ref.iter().filter(|&&x| is_nan_bits(dt, x)).count()
        + lse_ref.iter().filter(|x| x.is_nan()).count();
    if unwritten > 0 {
        return Err(format!(
            "dense run left {unwritten} output elements NaN (unwritten)"
        ));
    }

    // Padded: NaN rows past seq, NaN columns past head_dim, NaN before the base pointer.
    const FRONT: usize = 64;
    const TAIL: usize = 64;
    let row = if pad_cols { d + 8 } else { d };
    let (cap_q, cap_k) = (sq + 29, sk + 29);
    let st = |heads: usize, cap: usize| TensorStrides {
        batch: heads * cap * row,
        head: cap * row,
        row,
    };
    let (stq, stk) = (st(hq, cap_q), st(hkv, cap_k));
    let mut pp = p.clone();
    pp.custom_strides = Some(ProblemStrides {
        q: stq,
        k: stk,
        v: stk,
        o: stq,
    });
    pp.validate().map_err(|err| err.to_string())?;
    if let Err(u) = k.supports(&pp, dev.info()) {
        return Err(format!(
            "takes the dense problem but not the padded one: {}",
            u.reason
        ));
    }
    let image = |s: &Synth, st: &TensorStrides, heads: usize, seq: usize, cap: usize| -> Vec<u16> {
        let mut buf = vec![nan; FRONT + b * heads * cap * row + TAIL];
        for bi in 0..b {
            for h in 0..heads {
                for r in 0..seq {
                    let at = FRONT + offset(st, bi, h, r);
                    let logical = ((bi * heads + h) * seq + r) * d;
                    for c in 0..d {
                        buf[at + c] = dt.to_bits(s.at(logical + c));
                    }
                }
            }
        }
        buf
    };
    let qimg = image(&sq_, &stq, hq, sq, cap_q);
    let kimg = image(&sk_, &stk, hkv, sk, cap_k);
    let vimg = image(&sv_, &stk, hkv, sk, cap_k);
    // O: sentinel everywhere, NaN where the kernel must write.
    let mut oimg = vec![o_sentinel; FRONT + b * hq * cap_q * row + TAIL];
    let mut o_valid = Vec::with_capacity(p.o_len());
    for bi in 0..b {
        for h in 0..hq {
            for r in 0..sq {
                let at = FRONT + offset(&stq, bi, h, r);
                for c in 0..d {
                    oimg[at + c] = nan;
                    o_valid.push(at + c);
                }
            }
        }
    }
    let lse_n = p.lse_len();
    let mut limg = vec![f32::from_bits(lse_sentinel); 16 + lse_n + 16];
    for x in &mut limg[16..16 + lse_n] {
        *x = f32::NAN;
    }
    let mut c = DevCase {
        p: pp,
        q: upload(dev, "q", &qimg).map_err(e)?,
        k: upload(dev, "k", &kimg).map_err(e)?,
        v: upload(dev, "v", &vimg).map_err(e)?,
        o: upload(dev, "o", &oimg).map_err(e)?,
        lse: dev
            .stream()
            .clone_htod(&limg)
            .map_err(|err| format!("{err:?}"))?,
        off: [FRONT, FRONT, FRONT, FRONT, 16],
        o_image: Some(upload(dev, "o image", &oimg).map_err(e)?),
        lse_image: Some(
            dev.stream()
                .clone_htod(&limg)
                .map_err(|err| format!("{err:?}"))?,
        ),
    };
    let (o, lse) = c.run(k, dev).map_err(|err| format!("padded run: {err}"))?;
    // Valid region against the dense run, in the same logical order.
    let mut differ = 0usize;
    let mut first = None;
    for (n, &at) in o_valid.iter().enumerate() {
        if o[at] != o_ref[n] {
            differ += 1;
            if first.is_none() {
                let (r, col) = (n / d, n % d);
                first = Some(format!(
                    "O[{},{},{},{col}] {:#06x} vs dense {:#06x}",
                    r / (hq * sq),
                    (r / sq) % hq,
                    r % sq,
                    o[at],
                    o_ref[n]
                ));
            }
        }
    }
    let lse_differ = (0..lse_n)
        .filter(|&i| lse[16 + i].to_bits() != lse_ref[i].to_bits())
        .count();
    // Padding must be untouched.
    let mut is_valid = vec![false; o.len()];
    for &at in &o_valid {
        is_valid[at] = true;
    }
    let o_pad_writes = (0..o.len())
        .filter(|&i| !is_valid[i] && o[i] != o_sentinel)
        .count();
    let lse_pad_writes = lse[..16]
        .iter()
        .chain(&lse[16 + lse_n..])
        .filter(|x| x.to_bits() != lse_sentinel)
        .count();
    if differ + lse_differ + o_pad_writes + lse_pad_writes > 0 {
        return Err(format!(
            "{differ} O and {lse_differ} LSE elements differ from the dense run{}, {o_pad_writes} O and {lse_pad_writes} LSE padding elements written",
            first.map(|f| format!(" (first {f})")).unwrap_or_default()
        ));
    }
    Ok(true)
}
