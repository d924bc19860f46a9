//! The `modes` check of `cargo xtask reliability`: what a serving engine relies on in the
//! inference modes (docs/MODES.md), for every generation that claims them.
//!
//! - NaN in every cache slot past `seqused_k` (contiguous cache) and in every page row no
//!   sequence reads (paged cache, spare blocks included) gives output bit-identical to the same
//!   call on clean (random) storage, with and without appended rows.
//! - The same keys in a paged cache (block sizes 16 and 64, shuffled tables) and in a contiguous
//!   one give bit-identical O and LSE on the same kernel.
//! - Prefix sharing: sequences whose block tables share their first pages each get what they get
//!   alone (bit-identical to a batch of one).
//! - A varlen batch equals each sequence run alone as a dense batch of one, bit for bit.
//! - Bad tables (host or device) are rejected with an error that names the field; the device
//!   check (`Device::check_tables`) gives the same error as the host one.

use std::time::Instant;

use flashcore::{
    Attention, AttentionProblem, Device, DeviceTables, Error, HostInputs, HostOutputs, HostTables,
    InvalidProblem, KvStorage, Modes,
};
use ndarray::{s, ArrayD, Axis, IxDyn};

use super::watchdog::step;
use super::{Args, Report};
use crate::case::Case;
use crate::mode_case::{self, Draw, ModeInputs};

pub(super) fn run(dev: &Device, kernels: &[Box<dyn Attention>], args: &Args, report: &mut Report) {
    for k in kernels {
        let t = Instant::now();
        let _s = step(format!("modes {}", k.name()), args.step_timeout);
        let d = super::dims_for(k.as_ref(), args, &[128, 64])[0];
        let probe = Case::parse(&format!(
            "b=1,hq=2,sq=1,sk=64,d={d},cache=paged,bs=16,varlen=1,seed=1"
        ))
        .expect("parses");
        if let Err(u) = k.supports(&probe.problem, dev.info()) {
            report.add("modes", k.name(), super::Res::Skip, u.reason, t);
            continue;
        }
        let mut notes = Vec::new();
        let mut fails = Vec::new();
        let mut record = |what: &str, r: Result<String, String>| match r {
            Ok(n) => notes.push(format!("{what}: {n}")),
            Err(e) => fails.push(format!("{what}: {e}")),
        };
        for line in [
            "b=3,hq=8,hkv=2,sq=1,sk=700,causal=1,cache=contig",
            "b=3,hq=8,hkv=2,sq=5,sk=700,causal=1,cache=contig,append=5",
            "b=3,hq=8,hkv=2,sq=1,sk=700,causal=1,cache=paged,bs=16",
            "b=3,hq=8,hkv=2,sq=9,sk=700,causal=1,cache=paged,bs=64,append=9",
            "b=2,hq=4,hkv=4,sq=130,sk=500,cache=paged,bs=48,wl=100,softcap=30,alibi=head",
        ] {
            let case = Case::parse(&format!("{line},d={d},dtype=bf16,seed={}", args.seed))
                .expect("parses");
            record(
                &format!("NaN padding [{line}]"),
                nan_padding(dev, k.as_ref(), &case),
            );
        }
        for bs in [16, 64] {
            let line = format!(
                "b=4,hq=8,hkv=2,sq=3,sk=1000,d={d},dtype=f16,causal=1,cache=paged,bs={bs},append=3,seed={}",
                args.seed + 1
            );
            let case = Case::parse(&line).expect("parses");
            record(
                &format!("paged = contiguous (bs {bs})"),
                paged_equals_contiguous(dev, k.as_ref(), &case),
            );
        }
        record(
            "prefix sharing",
            prefix_sharing(dev, k.as_ref(), d, args.seed),
        );
        // The default mode promises each sequence the tolerance; the batch-invariant one, its
        // bits alone (docs/MODES.md).
        for bi in [false, true] {
            let line = format!(
                "b=5,hq=4,hkv=2,sq=300,sk=300,d={d},dtype=bf16,causal=1,varlen=1,bi={},seed={}",
                bi as u8, args.seed
            );
            let case = Case::parse(&line).expect("parses");
            if bi {
                record(
                    "varlen = alone (batch-invariant)",
                    varlen_equals_alone(dev, k.as_ref(), &case),
                );
            } else {
                record(
                    "varlen within tolerance (default)",
                    varlen_within_tolerance(dev, k.as_ref(), &case),
                );
            }
        }
        record("bad tables", bad_tables(dev, k.as_ref(), d));
        report.add_outcome("modes", k.name(), &notes, &fails, t);
    }
}

fn run_inputs(
    dev: &Device,
    k: &dyn Attention,
    p: &AttentionProblem,
    draw: &Draw,
    inp: &ModeInputs,
) -> Result<HostOutputs, String> {
    flashcore::forward_host_modes(k, dev, p, inp.host_inputs(draw)).map_err(|e| e.to_string())
}

fn bits(a: &ArrayD<f32>) -> Vec<u32> {
    a.iter().map(|x| x.to_bits()).collect()
}

fn same_bits(what: &str, a: &HostOutputs, b: &HostOutputs) -> Result<(), String> {
    let (oa, ob) = (bits(&a.o), bits(&b.o));
    let (la, lb) = (bits(&a.lse), bits(&b.lse));
    if oa != ob || la != lb {
        let o_diff = oa.iter().zip(&ob).filter(|(x, y)| x != y).count();
        let l_diff = la.iter().zip(&lb).filter(|(x, y)| x != y).count();
        return Err(format!(
            "{what}: {o_diff} O and {l_diff} LSE elements differ"
        ));
    }
    Ok(())
}

/// Every K/V storage row no sequence reads, as (storage index along the row axes): dense caches
/// `[b, row]`, paged `[block, row]`.
fn unread_rows(p: &AttentionProblem, draw: &Draw) -> Vec<(usize, usize)> {
    let append = p.modes.append.unwrap_or(0);
    match p.modes.kv {
        KvStorage::Paged {
            num_blocks,
            block_size,
            max_blocks_per_seq,
        } => {
            let table = draw.block_table.as_ref().expect("paged");
            let mut read = vec![false; num_blocks * block_size];
            for b in 0..p.batch {
                // Rows before seqused_k are read; the appended ones are written first.
                for j in 0..draw.used[b] + append {
                    let blk = table[b * max_blocks_per_seq + j / block_size] as usize;
                    read[blk * block_size + j % block_size] = true;
                }
            }
            (0..num_blocks * block_size)
                .filter(|&i| !read[i])
                .map(|i| (i / block_size, i % block_size))
                .collect()
        }
        _ => (0..p.batch)
            .flat_map(|b| (draw.used[b] + append..p.seq_k).map(move |j| (b, j)))
            .collect(),
    }
}

fn nan_padding(dev: &Device, k: &dyn Attention, case: &Case) -> Result<String, String> {
    let (p, draw, clean) = case.with_mode_inputs();
    let rows = unread_rows(&p, &draw);
    let mut dirty = ModeInputs {
        q: clean.q.clone(),
        k: clean.k.clone(),
        v: clean.v.clone(),
        k_new: clean.k_new.clone(),
        v_new: clean.v_new.clone(),
    };
    for t in [&mut dirty.k, &mut dirty.v] {
        for &(a, j) in &rows {
            // Dense caches follow the problem's layout; the verify cases here are BSHD.
            t.slice_mut(s![a, j, .., ..]).fill(f32::NAN);
        }
    }
    let a = run_inputs(dev, k, &p, &draw, &clean)?;
    let b = run_inputs(dev, k, &p, &draw, &dirty)?;
    if a.o.iter().any(|x| x.is_nan()) {
        return Err("NaN in the clean run's O".into());
    }
    same_bits("NaN-padded vs clean", &a, &b)?;
    Ok(format!("{} unread rows NaN, bit-identical", rows.len()))
}

/// The contiguous cache `[b, capacity, h, d]` holding what a paged one holds for each sequence.
fn to_contiguous(p: &AttentionProblem, draw: &Draw, paged: &ArrayD<f32>) -> ArrayD<f32> {
    let KvStorage::Paged {
        block_size,
        max_blocks_per_seq,
        ..
    } = p.modes.kv
    else {
        unreachable!("paged")
    };
    let table = draw.block_table.as_ref().expect("paged");
    // The pages' own row width: K's head dim, or V's where it has one of its own.
    let width = paged.shape()[3];
    let mut out = ArrayD::<f32>::zeros(IxDyn(&[p.batch, p.seq_k, p.heads_kv, width]));
    for b in 0..p.batch {
        for j in 0..p.seq_k {
            let blk = table[b * max_blocks_per_seq + j / block_size] as usize;
            out.slice_mut(s![b, j, .., ..])
                .assign(&paged.slice(s![blk, j % block_size, .., ..]));
        }
    }
    out
}

fn contiguous_problem(p: &AttentionProblem) -> AttentionProblem {
    let mut c = p.clone();
    c.modes = Modes {
        kv: KvStorage::Dense,
        ..p.modes.clone()
    };
    c.layout = flashcore::Layout::Bshd;
    c
}

fn paged_equals_contiguous(dev: &Device, k: &dyn Attention, case: &Case) -> Result<String, String> {
    let (p, draw, inp) = case.with_mode_inputs();
    let a = run_inputs(dev, k, &p, &draw, &inp)?;
    let cp = contiguous_problem(&p);
    let cdraw = Draw {
        block_table: None,
        ..draw.clone()
    };
    let cinp = ModeInputs {
        q: inp.q.clone(),
        k: to_contiguous(&p, &draw, &inp.k),
        v: to_contiguous(&p, &draw, &inp.v),
        k_new: inp.k_new.clone(),
        v_new: inp.v_new.clone(),
    };
    let b = run_inputs(dev, k, &cp, &cdraw, &cinp)?;
    same_bits("paged vs contiguous", &a, &b)?;
    Ok("bit-identical".into())
}

fn prefix_sharing(dev: &Device, k: &dyn Attention, d: usize, seed: u64) -> Result<String, String> {
    // Three sequences of a 16-row-page cache; all three tables start with the same 4 pages
    // (a shared 64-token prompt), then go their own ways.
    let line = format!(
        "b=3,hq=4,hkv=2,sq=1,sk=256,d={d},dtype=bf16,causal=1,cache=paged,bs=16,seed={seed}"
    );
    let case = Case::parse(&line).expect("parses");
    let (p, mut draw, inp) = case.with_mode_inputs();
    let KvStorage::Paged {
        max_blocks_per_seq, ..
    } = p.modes.kv
    else {
        unreachable!()
    };
    let table = draw.block_table.as_mut().expect("paged");
    for b in 1..p.batch {
        for j in 0..4 {
            table[b * max_blocks_per_seq + j] = table[j];
        }
    }
    draw.used = vec![200, 64, 130];
    draw.len_k = draw.used.clone();
    draw.seqused_k = Some(draw.used.iter().map(|&u| u as i32).collect());
    let all = run_inputs(dev, k, &p, &draw, &inp)?;
    for b in 0..p.batch {
        // Sequence b alone: a batch of one with its own table row and length.
        let mut one = p.clone();
        one.batch = 1;
        let row = &draw.block_table.as_ref().unwrap()
            [b * max_blocks_per_seq..(b + 1) * max_blocks_per_seq];
        let alone_draw = Draw {
            len_q: vec![draw.len_q[b]],
            len_k: vec![draw.len_k[b]],
            used: vec![draw.used[b]],
            seqused_k: Some(vec![draw.used[b] as i32]),
            block_table: Some(row.to_vec()),
            ..draw.clone()
        };
        let alone_inp = ModeInputs {
            q: inp.q.slice(s![b..b + 1, .., .., ..]).to_owned().into_dyn(),
            k: inp.k.clone(),
            v: inp.v.clone(),
            k_new: None,
            v_new: None,
        };
        let alone = run_inputs(dev, k, &one, &alone_draw, &alone_inp)?;
        let o_all = all.o.index_axis(Axis(0), b).to_owned().insert_axis(Axis(0));
        let l_all = all
            .lse
            .index_axis(Axis(0), b)
            .to_owned()
            .insert_axis(Axis(0));
        if bits(&o_all.into_dyn()) != bits(&alone.o) || bits(&l_all.into_dyn()) != bits(&alone.lse)
        {
            return Err(format!("sequence {b} differs from its run alone"));
        }
    }
    Ok("3 sequences sharing 4 pages, each bit-identical to its run alone".into())
}

/// Each sequence of a varlen batch against the oracle, by its rule.
fn varlen_within_tolerance(dev: &Device, k: &dyn Attention, case: &Case) -> Result<String, String> {
    let (p, draw, inp) = case.with_mode_inputs();
    let all = run_inputs(dev, k, &p, &draw, &inp)?;
    let v = mode_case::judge(&p, &draw, &inp, &all)?;
    Ok(format!(
        "{} sequences within the oracle's tolerance (worst ratio {:.2})",
        p.batch, v.ratio
    ))
}

fn varlen_equals_alone(dev: &Device, k: &dyn Attention, case: &Case) -> Result<String, String> {
    let (p, draw, inp) = case.with_mode_inputs();
    let all = run_inputs(dev, k, &p, &draw, &inp)?;
    let cu_q = draw.cu_seqlens_q.as_ref().expect("varlen");
    let cu_k = draw.cu_seqlens_k.as_ref().expect("varlen");
    let mut checked = 0;
    for b in 0..p.batch {
        let (lq, lk) = (draw.len_q[b], draw.len_k[b]);
        if lq == 0 {
            continue;
        }
        let one = AttentionProblem::new(1, p.heads_q, lq, p.head_dim)
            .with_kv(p.heads_kv, lk)
            .with_dtype(p.dtype)
            .with_causal(p.causal)
            .with_batch_invariant(p.batch_invariant);
        let take = |a: &ArrayD<f32>, lo: i32, hi: i32| {
            a.slice(s![lo as usize..hi as usize, .., ..])
                .to_owned()
                .insert_axis(Axis(0))
        };
        let q = take(&inp.q, cu_q[b], cu_q[b + 1]);
        let kk = take(&inp.k, cu_k[b], cu_k[b + 1]);
        let vv = take(&inp.v, cu_k[b], cu_k[b + 1]);
        let alone = flashcore::forward_host(k, dev, &one, q.view(), kk.view(), vv.view())
            .map_err(|e| e.to_string())?;
        let o_all = all
            .o
            .slice(s![cu_q[b] as usize..cu_q[b + 1] as usize, .., ..])
            .to_owned();
        let l_all = all
            .lse
            .slice(s![.., cu_q[b] as usize..cu_q[b + 1] as usize])
            .to_owned();
        let o_alone = alone.o.index_axis(Axis(0), 0).to_owned();
        let l_alone = alone.lse.index_axis(Axis(0), 0).to_owned();
        if bits(&o_all.into_dyn()) != bits(&o_alone.into_dyn())
            || bits(&l_all.into_dyn()) != bits(&l_alone.into_dyn())
        {
            return Err(format!(
                "sequence {b} (len_q {lq}, len_k {lk}) differs from its run alone"
            ));
        }
        checked += 1;
    }
    Ok(format!(
        "{checked} sequences bit-identical to their runs alone"
    ))
}

fn bad_tables(dev: &Device, k: &dyn Attention, d: usize) -> Result<String, String> {
    let case = Case::parse(&format!(
        "b=2,hq=4,hkv=2,sq=1,sk=64,d={d},dtype=bf16,cache=paged,bs=16,seed=3"
    ))
    .expect("parses");
    let (p, draw, inp) = case.with_mode_inputs();
    let mut bad_table = draw.block_table.clone().unwrap();
    bad_table[0] = 1 << 20; // block ids outside num_blocks
    let used = vec![64i32, 64];
    let host = HostTables {
        seqused_k: Some(&used),
        block_table: Some(&bad_table),
        ..Default::default()
    };
    let host_err = match flashcore::forward_host_modes(
        k,
        dev,
        &p,
        HostInputs::new(inp.q.view(), inp.k.view(), inp.v.view()).with_tables(host),
    ) {
        Err(Error::Invalid(
            e @ InvalidProblem::Table {
                field: "block_table",
                ..
            },
        )) => e.to_string(),
        other => {
            return Err(format!(
                "host path: expected a block_table error, got {other:?}"
            ))
        }
    };
    let stream = dev.stream();
    let d_used = stream.clone_htod(&used).map_err(|e| format!("{e:?}"))?;
    let d_table = stream
        .clone_htod(&bad_table)
        .map_err(|e| format!("{e:?}"))?;
    let tables = DeviceTables {
        seqused_k: Some(d_used.as_view()),
        block_table: Some(d_table.as_view()),
        ..Default::default()
    };
    let dev_err = match dev.check_tables(&p, &tables) {
        Err(Error::Invalid(e)) => e.to_string(),
        other => {
            return Err(format!(
                "device check: expected a block_table error, got {other:?}"
            ))
        }
    };
    if dev_err != host_err {
        return Err(format!(
            "device check says '{dev_err}', host says '{host_err}'"
        ));
    }
    // And a bad cu_seqlens on the device.
    let vp = Case::parse(&format!("b=2,hq=2,sq=10,sk=10,d={d},varlen=1,seed=4")).expect("parses");
    let (vprob, _, _) = vp.with_mode_inputs();
    let cu = stream
        .clone_htod(&[0i32, 12, 3])
        .map_err(|e| format!("{e:?}"))?;
    let total_k = match vprob.modes.kv {
        KvStorage::Packed { total_k } => total_k as i32,
        _ => 0,
    };
    let cuk = stream
        .clone_htod(&[0i32, 0, total_k])
        .map_err(|e| format!("{e:?}"))?;
    let t2 = DeviceTables {
        cu_seqlens_q: Some(cu.as_view()),
        cu_seqlens_k: Some(cuk.as_view()),
        ..Default::default()
    };
    match dev.check_tables(&vprob, &t2) {
        Err(Error::Invalid(InvalidProblem::Table {
            field: "cu_seqlens_q",
            ..
        })) => {}
        other => return Err(format!("device check of cu_seqlens_q: got {other:?}")),
    }
    Ok(format!("named: {host_err}"))
}
