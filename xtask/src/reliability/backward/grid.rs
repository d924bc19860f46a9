//! `grid`: batch·heads past 65535, a sequence past 65535 rows, and Q-side and K-side tensors
//! past 2^31 elements: every gradient element written, and where the groups are small, GQA groups
//! of chosen batches judged by the oracle.

use std::time::Instant;

use flashcore::{Attention, AttentionProblem, Capabilities, Error};

use super::buffers::{BwdBuffers, Places};
use super::placement::{backward_device_bytes, spot_batches};
use super::KernelCheck;
use crate::case::forward_for_backward;
use crate::inputs::precision;
use crate::reliability::device::{alloc_f32, alloc_u16, download, upload, DevCase};
use crate::reliability::host::{count_nonfinite_bits, mib, Synth};
use crate::reliability::watchdog::progress;
use crate::reliability::{dims_in, Report, Res};

/// Device memory one grid problem may hold (the H100 has 80 GB; other work may share it).
const MEMORY_CAP: usize = 30 << 30;

/// One problem at a grid or offset limit.
#[derive(Clone, Debug)]
pub(super) struct GridCase {
    name: String,
    problem: AttentionProblem,
    /// Judge chosen GQA groups by the oracle (their heads are small enough); otherwise every
    /// element finite is the verdict.
    judge_groups: bool,
}

/// The smallest batch at which `per_batch` elements per batch pass 2^31 elements in all.
fn batch_past_2_pow_31(per_batch: usize) -> usize {
    (1usize << 31) / per_batch + 1
}

/// The grid sub-check's problems for a backward kernel: batch·heads past 65535 (query and kv
/// heads both, GQA 2:1 where taken), a causal sequence of 70001 rows and keys, and unless
/// `no_huge` two problems with tensors past 2^31 elements: Q, O, dO, dQ (K-side tensors an
/// eighth of that through GQA 8:1, or 8× fewer keys without GQA), and K, V, dK, dV (16 query
/// rows against 256 keys).
pub(super) fn grid_cases(caps: &Capabilities, no_huge: bool) -> Vec<GridCase> {
    let d64 = dims_in(&caps.head_dims, &[64])[0];
    let d128 = dims_in(&caps.head_dims, &[128])[0];
    let dt = |i: usize| caps.dtypes[i % caps.dtypes.len()];
    let (hq, hkv) = if caps.gqa { (32, 16) } else { (32, 32) };
    let wide = AttentionProblem::new(4200, hq, 33, d64)
        .with_kv(hkv, 33)
        .with_causal(caps.causal)
        .with_dtype(dt(0));
    let (hq, hkv) = if caps.gqa { (4, 1) } else { (4, 4) };
    let long = AttentionProblem::new(1, hq, 70_001, d64)
        .with_kv(hkv, 70_001)
        .with_causal(caps.causal)
        .with_dtype(dt(1));
    let mut v = vec![
        GridCase {
            name: format!("batch*heads={}", wide.batch * wide.heads_q),
            problem: wide,
            judge_groups: true,
        },
        GridCase {
            name: "seq=70001".into(),
            problem: long,
            judge_groups: false,
        },
    ];
    if !no_huge {
        let (hkv, sk) = if caps.gqa { (2, 128) } else { (16, 16) };
        let b = batch_past_2_pow_31(16 * 128 * d128);
        let q_side = AttentionProblem::new(b, 16, 128, d128)
            .with_kv(hkv, sk)
            .with_causal(caps.causal)
            .with_dtype(dt(0));
        let b = batch_past_2_pow_31(16 * 256 * d128);
        let k_side = AttentionProblem::new(b, 16, 16, d128)
            .with_kv(16, 256)
            .with_causal(caps.causal)
            .with_dtype(dt(1));
        v.push(GridCase {
            name: "q,o,do,dq >2^31 elements".into(),
            problem: q_side,
            judge_groups: true,
        });
        v.push(GridCase {
            name: "k,v,dk,dv >2^31 elements".into(),
            problem: k_side,
            judge_groups: true,
        });
    }
    v
}

fn gib(bytes: usize) -> f64 {
    mib(bytes) / 1024.0
}

pub(super) fn grid(cx: &KernelCheck, case: &GridCase, report: &mut Report) {
    let KernelCheck { dev, kernel: k, .. } = *cx;
    let line = cx.start(format_args!("grid {}", case.name));
    let p = &case.problem;
    let skip = |report: &mut Report, why: String| line.add(report, Res::Skip, why);
    if let Err(u) = k.supports_backward(p, dev.info()) {
        return skip(report, u.reason);
    }
    let Some(forward) =
        forward_for_backward(k.name(), p, dev.info()).filter(|f| f.supports(p, dev.info()).is_ok())
    else {
        return skip(report, "no forward takes the problem (O and LSE)".into());
    };
    let plan = match k.plan_backward(p, dev.info()) {
        Ok(plan) => plan,
        Err(u) => return skip(report, u.reason),
    };
    let need = backward_device_bytes(p, plan.workspace_f32 + plan.workspace_counters);
    if need > MEMORY_CAP {
        return skip(
            report,
            format!(
                "{p} needs {:.1} GiB of device memory, over the check's {:.0} GiB",
                gib(need),
                gib(MEMORY_CAP)
            ),
        );
    }
    let free = dev.memory().map(|(free, _)| free).unwrap_or(0);
    if free < need + (1 << 30) {
        return skip(
            report,
            format!(
                "{p} needs {:.1} GiB of device memory, {:.1} GiB free",
                gib(need),
                gib(free)
            ),
        );
    }
    match grid_one(cx, forward.as_ref(), case) {
        Ok(Ok(m)) => line.add(report, Res::Pass, m),
        Ok(Err(m)) => line.add(report, Res::Fail, m),
        Err(Error::Unsupported(u)) => skip(report, u.reason),
        Err(Error::OutOfMemory { what, bytes }) => skip(
            report,
            format!(
                "out of device memory allocating {:.1} GiB for {what} ({p} needs {:.1} GiB)",
                gib(bytes),
                gib(need)
            ),
        ),
        // Any other error is a failure: the problem is valid and the kernel said it takes it.
        Err(e) => line.add(report, Res::Fail, format!("{p}: {e}")),
    }
}

/// Runs one grid case: `Err` when a call or copy failed, else the verdict (`Err`: why it
/// fails).
fn grid_one(
    cx: &KernelCheck,
    forward: &dyn Attention,
    case: &GridCase,
) -> Result<std::result::Result<String, String>, Error> {
    let KernelCheck {
        dev,
        kernel: k,
        args,
    } = *cx;
    let p = &case.problem;
    let dt = p.dtype;
    let qd = [p.batch, p.heads_q, p.seq_q, p.head_dim];
    let kd = [p.batch, p.heads_kv, p.seq_k, p.head_dim];
    let synth = |salt: u64, dims| Synth::new(args.seed ^ salt, dt, dims);
    let (sq, sk, sv, sdo) = (
        synth(0x61, qd),
        synth(0x62, kd),
        synth(0x63, kd),
        synth(0x64, qd),
    );
    // Inputs (one host image at a time: each may be 4 GiB), then O and LSE from the forward.
    let q = upload(dev, "q", &sq.dense_bits(p.layout))?;
    progress();
    let kk = upload(dev, "k", &sk.dense_bits(p.layout))?;
    progress();
    let v = upload(dev, "v", &sv.dense_bits(p.layout))?;
    progress();
    let d_o = upload(dev, "d_o", &sdo.dense_bits(p.layout))?;
    progress();
    let mut fwd = DevCase {
        p: p.clone(),
        q,
        k: kk,
        v,
        o: alloc_u16(dev, "o", p.o_len())?,
        lse: alloc_f32(dev, "lse", p.lse_len())?,
        off: [0; 5],
        o_image: None,
        lse_image: None,
    };
    fwd.forward(forward, dev)?;
    dev.synchronize()?;
    progress();
    let DevCase {
        q,
        k: kk,
        v,
        o,
        lse,
        ..
    } = fwd;
    let mut c = BwdBuffers {
        p: p.clone(),
        inputs: [q, kk, v, o, d_o],
        lse,
        grads: [
            alloc_u16(dev, "dq", p.q_len())?,
            alloc_u16(dev, "dk", p.k_len())?,
            alloc_u16(dev, "dv", p.v_len())?,
        ],
        images: None,
        alibi_slopes: None, // (the grid's problems are dense)
        off: [0; 9],
    };
    let t_kernel = Instant::now();
    c.launch(k, dev)?;
    let kernel_s = t_kernel.elapsed().as_secs_f64();
    progress();

    // Every element written and finite; the chosen groups' gradients kept for the oracle.
    let places = Places::dense(p);
    let group = p.heads_q / p.heads_kv;
    let batches = if case.judge_groups {
        spot_batches(p, args.seed)
    } else {
        vec![]
    };
    let mut kv_heads = vec![0, p.heads_kv - 1];
    kv_heads.dedup();
    let groups: Vec<(usize, usize)> = batches
        .iter()
        .flat_map(|&b| kv_heads.iter().map(move |&g| (b, g)))
        .collect();
    let mut kept: Vec<[Vec<u16>; 3]> = vec![Default::default(); groups.len()];
    let mut nonfinite = [0usize; 3];
    for (i, pl) in places.grads().iter().enumerate() {
        let bits = download(dev, &c.grads[i])?;
        nonfinite[i] = count_nonfinite_bits(dt, &bits[..pl.elements()]);
        for (slot, &(b, g)) in kept.iter_mut().zip(&groups) {
            let heads = if i == 0 {
                g * group..(g + 1) * group
            } else {
                g..g + 1
            };
            slot[i] = pl.gather_heads(&bits, b, heads);
        }
        progress();
    }
    drop(c);
    if nonfinite.iter().any(|&n| n > 0) {
        return Ok(Err(format!(
            "{p}: non-finite (unwritten NaN or overflow) elements: dQ {}, dK {}, dV {}",
            nonfinite[0], nonfinite[1], nonfinite[2]
        )));
    }
    let mut worst = 0.0f64;
    for (&(b, g), got) in groups.iter().zip(&kept) {
        progress();
        let heads_q = g * group..(g + 1) * group;
        let op = flashcore_oracle::OracleProblem::dense(
            1,
            group,
            1,
            p.seq_q,
            p.seq_k,
            p.head_dim,
            p.causal,
            p.scale() as f64,
        );
        let arr = |bits: &[u16], heads: usize, seq: usize| {
            let vals: Vec<f32> = bits.iter().map(|&x| dt.from_bits(x)).collect();
            ndarray::Array4::from_shape_vec([1, heads, seq, p.head_dim], vals)
                .expect("group length")
        };
        let verdict = flashcore_oracle::check_backward(
            &op,
            precision(dt),
            sq.block(b, heads_q.clone()).view(),
            sk.block(b, g..g + 1).view(),
            sv.block(b, g..g + 1).view(),
            sdo.block(b, heads_q).view(),
            arr(&got[0], group, p.seq_q).view(),
            arr(&got[1], 1, p.seq_k).view(),
            arr(&got[2], 1, p.seq_k).view(),
        );
        if !verdict.pass {
            return Ok(Err(format!(
                "{p}: batch {b}, kv head {g}: {}",
                verdict.message
            )));
        }
        worst = worst.max(verdict.ratio);
    }
    let judged = if groups.is_empty() {
        "no oracle (heads too long for it)".to_string()
    } else {
        format!(
            "{} GQA groups judged by the oracle (batches {batches:?}, kv heads {kv_heads:?}), worst ratio {worst:.3}",
            groups.len()
        )
    };
    Ok(Ok(format!(
        "{p}: every dQ, dK, dV element finite; {judged}; backward {kernel_s:.2} s"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reliability::backward::backward_caps;

    #[test]
    fn grid_problems_pass_the_limits_and_fit_the_memory_cap() {
        for (name, caps) in backward_caps() {
            let small = grid_cases(&caps, true);
            assert_eq!(small.len(), 2);
            let all = grid_cases(&caps, false);
            assert_eq!(all.len(), 4);
            let p = &all[0].problem;
            assert!(p.batch * p.heads_q > 65535 && p.batch * p.heads_kv > 65535);
            assert!(all[1].problem.seq_q > 65535 && all[1].problem.seq_k > 65535);
            assert!(!all[1].judge_groups);
            assert!(all[2].problem.q_len() > 1 << 31, "{name}");
            assert!(all[3].problem.k_len() > 1 << 31, "{name}");
            for c in &all {
                flashcore::backward::validate_backward(&c.problem).unwrap();
                // With a workspace of one f32 per query row (the scalar plan's D).
                let bytes = backward_device_bytes(&c.problem, c.problem.lse_len());
                assert!(bytes <= MEMORY_CAP, "{name} {}: {bytes}", c.name);
                // The oracle's groups are small (a few million multiply-adds each).
                if c.judge_groups {
                    let q = &c.problem;
                    let group = q.heads_q / q.heads_kv;
                    assert!(group * q.seq_q * q.seq_k * q.head_dim <= 1 << 24);
                }
            }
        }
        for per_batch in [16 * 128 * 128, 16 * 256 * 128, 3 * 1000 * 7] {
            let b = batch_past_2_pow_31(per_batch);
            assert!(b * per_batch > 1 << 31 && (b - 1) * per_batch <= 1 << 31);
        }
    }
}
