//! The mode suites' plans, FLOP counts and report, without a GPU; `fixture` is a report the
//! decode suite's tests build on.

use flashcore::{DType, KvStorage};

use super::*;
use crate::bench::report::{
    assert_json_round_trip, fixture_run, Method, Outcome, PeerStatus, Source, Timing,
};
use crate::bench::suite::Suite;

#[test]
fn pairs_follow_the_masks() {
    // Brute force over the definition in docs/MODES.md.
    let brute = |lq: usize, lk: usize, causal: bool, wl: Option<usize>, wr: Option<usize>| {
        let off = lk as i64 - lq as i64;
        let mut n = 0u64;
        for i in 0..lq as i64 {
            for j in 0..lk as i64 {
                let ok = wl.is_none_or(|w| j >= i + off - w as i64)
                    && wr.is_none_or(|w| j <= i + off + w as i64)
                    && (!causal || j <= i + off);
                n += ok as u64;
            }
        }
        n
    };
    for (lq, lk) in [
        (1, 1),
        (5, 5),
        (7, 3),
        (3, 9),
        (1, 100),
        (128, 300),
        (64, 0),
    ] {
        for causal in [false, true] {
            for wl in [None, Some(0), Some(2), Some(50)] {
                for wr in [None, Some(0), Some(3)] {
                    assert_eq!(
                        visible_pairs(lq, lk, causal, wl, wr),
                        brute(lq, lk, causal, wl, wr),
                        "{lq} {lk} {causal} {wl:?} {wr:?}"
                    );
                }
            }
        }
    }
    assert_eq!(visible_pairs(4096, 4096, true, None, None), 4096 * 4097 / 2);
    assert_eq!(visible_pairs(32768, 4096, false, None, None), 32768 * 4096);
}

#[test]
fn varlen_lengths_are_seeded_and_in_range() {
    let a = varlen_lengths(0x5eed);
    assert_eq!(a, varlen_lengths(0x5eed));
    assert_ne!(a, varlen_lengths(1));
    assert_eq!(a.len(), 16);
    assert!(a.iter().all(|&l| (128..=4096).contains(&l)), "{a:?}");
}

#[test]
fn s_eq_matches_the_sum_of_squares() {
    assert_eq!(s_eq(&[1024; 16]), 1024);
    // Σ len² = 4·4096² + 12·0... : 16·S² = 4·4096² → S = 2048.
    let mut v = vec![4096; 4];
    v.extend([1; 12]);
    assert_eq!(s_eq(&v), 2048);
    assert_eq!(s_eq(&[100, 100]), 128);
    let lens = varlen_lengths(0x5eed);
    let s = s_eq(&lens);
    assert_eq!(s % 128, 0);
    let sum_sq: f64 = lens.iter().map(|&l| (l * l) as f64).sum();
    let exact = (sum_sq / 16.0).sqrt();
    assert!((s as f64 - exact).abs() <= 64.0, "{s} vs {exact}");
}

#[test]
fn real_flops_count_causal_pairs_per_sequence() {
    let lens = [128, 300, 4096];
    let c = varlen_case("v", &lens, true);
    let pairs: u64 = lens.iter().map(|&l| (l * (l + 1) / 2) as u64).sum();
    assert_eq!(c.flops, 4.0 * 128.0 * 32.0 * pairs as f64);
    let d = dense_case("d", 16, 2048, 2048, true, None);
    assert_eq!(d.flops, 4.0 * 128.0 * 32.0 * 16.0 * (2048.0 * 2049.0 / 2.0));
    // Within 0.05% of the usual S²/2 count at this size.
    assert!((d.flops / d.problem.flops() - 1.0).abs() < 5e-4);
    let n = dense_case("n", 1, 32768, 4096, false, None);
    assert_eq!(n.flops, n.problem.flops());
}

#[test]
fn every_suite_builds_valid_deterministic_problems() {
    for suite in [Suite::Varlen, Suite::Paged, Suite::Window] {
        let a = plan(suite, 0x5eed);
        let b = plan(suite, 0x5eed);
        assert_eq!(a.cases.len(), b.cases.len());
        for (x, y) in a.cases.iter().zip(&b.cases) {
            assert_eq!((&x.key, &x.problem, &x.draw), (&y.key, &y.problem, &y.draw));
            assert_valid(x);
            assert!(x.flops > 0.0, "{}", x.key);
            if let Some(base) = &x.data_from {
                let base = a.cases.iter().find(|c| &c.key == base).unwrap();
                assert_eq!(base.draw.len_k, x.draw.len_k);
                assert_eq!(base.flops, x.flops);
            }
        }
        let keys: Vec<&String> = a.cases.iter().map(|c| &c.key).collect();
        for c in &a.comparisons {
            for (k, side) in [&c.num, &c.den] {
                let known = match side {
                    Side::This => keys.contains(&k),
                    Side::BestPeer => a.peers.iter().any(|p| &p.key == k),
                };
                assert!(known, "{suite:?}: comparison '{}' names {k}", c.name);
            }
        }
        for p in &a.peers {
            // Causal peers are square (SDPA's is_causal is top-left aligned).
            assert!(!p.shape.causal || p.shape.seq == p.shape.seq_k, "{}", p.key);
            assert_eq!(PeerShape::from_json(&p.shape.to_json()), Some(p.shape));
        }
    }
}

#[test]
fn the_suites_have_the_issues_shapes() {
    let v = plan(Suite::Varlen, 0x5eed);
    let lens = varlen_lengths(0x5eed);
    let p = &v.cases[0].problem;
    assert_eq!(
        (p.batch, p.heads_q, p.heads_kv, p.head_dim),
        (16, 32, 8, 128)
    );
    assert!(p.causal && p.dtype == DType::Bf16);
    assert_eq!(p.modes.packed_q, Some(lens.iter().sum()));
    assert_eq!(v.cases[0].draw.cu_seqlens_q, v.cases[0].draw.cu_seqlens_k);
    let d = &v
        .cases
        .iter()
        .find(|c| c.key == "dense-eq")
        .unwrap()
        .problem;
    assert_eq!((d.batch, d.seq_q, d.seq_k), (16, s_eq(&lens), s_eq(&lens)));
    assert!(d.modes.is_dense());
    let padded = &v.peers[0];
    assert_eq!(padded.key, "padded");
    let max = *lens.iter().max().unwrap();
    assert_eq!((padded.shape.batch, padded.shape.seq), (16, max));
    assert!(v.notes[0].contains(&format!("{lens:?}")));

    let pg = plan(Suite::Paged, 0x5eed);
    let keys: Vec<&str> = pg.cases.iter().map(|c| c.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "decode/contig",
            "decode/paged-16",
            "decode/paged-64",
            "decode/paged-256",
            "chunk/contig",
            "chunk/paged-16",
            "chunk/paged-64",
            "chunk/paged-256",
            "prefill/contig",
            "prefill/paged-16",
            "prefill/paged-64",
            "prefill/paged-256",
        ]
    );
    let chunk = &pg.cases[5];
    assert_eq!((chunk.problem.batch, chunk.problem.seq_q), (8, 128));
    assert!(chunk.draw.used.iter().all(|&u| u <= 8192 && u > 8192 - 256));
    let KvStorage::Paged {
        num_blocks,
        max_blocks_per_seq,
        block_size,
    } = chunk.problem.modes.kv
    else {
        panic!("paged")
    };
    assert_eq!((block_size, max_blocks_per_seq), (16, 512));
    let table = chunk.draw.block_table.as_ref().unwrap();
    assert_blocks_owned_once(table, num_blocks);
    assert_ne!(table[..8], [0, 1, 2, 3, 4, 5, 6, 7], "shuffled");
    let targets: Vec<Option<Target>> = pg
        .comparisons
        .iter()
        .filter(|c| c.name.starts_with("chunk: paged"))
        .map(|c| c.target)
        .collect();
    assert_eq!(
        targets,
        [
            Some(Target::AtMost(1.15)),
            Some(Target::AtMost(1.05)),
            Some(Target::AtMost(1.05))
        ]
    );

    let w = plan(Suite::Window, 0);
    let win = &w.cases[0].problem;
    assert_eq!(
        (win.seq_q, win.seq_k, win.modes.window_left),
        (32768, 32768, Some(4096))
    );
    assert!(win.causal);
    let band = &w.cases[2].problem;
    assert_eq!((band.seq_q, band.seq_k, band.causal), (32768, 4096, false));
    // The window sees nearly the band's keys: within 7% of its FLOPs.
    assert!((w.cases[0].flops / w.cases[2].flops - 1.0).abs() < 0.07);
}

/// The peer script's status in the fixtures: ran on an H100, nothing skipped.
pub(crate) fn h100_peers() -> PeerStatus {
    PeerStatus::Ran {
        device: "NVIDIA H100 80GB HBM3".into(),
        torch: "2.11.0+cu130".into(),
        cudnn: Some("91900".into()),
        skipped: vec![],
    }
}

/// A case's problem and its drawn tables pass the core's checks.
#[track_caller]
pub(crate) fn assert_valid(x: &Case) {
    x.problem
        .validate()
        .unwrap_or_else(|e| panic!("{}: {e}", x.key));
    x.draw
        .host_tables()
        .validate(&x.problem)
        .unwrap_or_else(|e| panic!("{}: {e}", x.key));
}

/// A paged case's block table gives each block to one place at most, all below `num_blocks`.
#[track_caller]
pub(crate) fn assert_blocks_owned_once(table: &[i32], num_blocks: usize) {
    let mut seen = table.to_vec();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), table.len(), "no block owned twice");
    assert!(table.iter().all(|&b| (b as usize) < num_blocks));
}

fn timed(case: &str, imp: &str, source: Source, flops: f64, us: f64) -> ModeRow {
    let mut t = Timing::from_flops(flops, Some(us), None).unwrap();
    t.check = (source == Source::Flashcore).then(|| "ok 0.40 (512 rows)".to_string());
    t.repeats = 15;
    ModeRow::new(case, imp, source, Outcome::Timed(t))
}

/// A varlen report with every kind of row.
pub fn fixture() -> ModeReport {
    let p = plan(Suite::Varlen, 0x5eed);
    let case_flops = |key: &str| p.cases.iter().find(|c| c.key == key).unwrap().flops;
    let (fv, fd) = (case_flops("varlen"), case_flops("dense-eq"));
    let rows = vec![
        timed("varlen", "persistent-hopper", Source::Flashcore, fv, 1100.0),
        ModeRow::new(
            "varlen",
            "scalar",
            Source::Flashcore,
            Outcome::Unsupported {
                reason: "modes: varlen is not implemented".into(),
            },
        ),
        timed(
            "dense-eq",
            "persistent-hopper",
            Source::Flashcore,
            fd,
            980.0,
        ),
        ModeRow::new(
            "dense-eq",
            "scalar",
            Source::Flashcore,
            Outcome::Skipped {
                reason: "--max-seconds-per-kernel (240 s) used up".into(),
            },
        ),
        timed("padded", "sdpa_flash", Source::Peer, fv, 1500.0),
        timed("padded", "sdpa_cudnn", Source::Peer, fv, 1400.0),
        timed("dense-eq", "sdpa_cudnn", Source::Peer, fd, 1100.0),
    ];
    let mut cases: Vec<CaseInfo> = p.cases.iter().map(CaseInfo::from).collect();
    cases.push(CaseInfo::from(&p.peers[0]));
    let (device, settings) = fixture_run("bshd", "xtask bench-all --suite varlen");
    ModeReport {
        suite: Suite::Varlen,
        device,
        settings,
        peers: h100_peers(),
        notes: p.notes.clone(),
        cases,
        rows,
        comparisons: p.comparisons.clone(),
        decode: None,
    }
}

#[test]
fn comparisons_are_evaluated_per_generation() {
    let r = fixture();
    let e = r.evaluate();
    let hopper: Vec<&Evaluated> = e
        .iter()
        .filter(|x| x.implementation == "persistent-hopper")
        .collect();
    assert_eq!(hopper.len(), 4);
    let rate = hopper[0].value.unwrap();
    let fv = r.cases[0].flops / 1100.0;
    let dense = r.cases.iter().find(|c| c.key == "dense-eq").unwrap();
    let fd = dense.flops / 980.0;
    assert!((rate - fv / fd).abs() < 1e-12);
    assert!(
        (hopper[2].value.unwrap() - 1400.0 / 1100.0).abs() < 1e-12,
        "best peer / ours"
    );
    assert_eq!(hopper[2].peer.as_deref(), Some("sdpa_cudnn"));
    assert_eq!(hopper[0].peer, None);
    assert!(
        hopper[1].value.is_none(),
        "no varlen-uniform row in the fixture"
    );
    assert!((hopper[3].value.unwrap() - 1100.0 / 980.0).abs() < 1e-12);
    let scalar: Vec<&Evaluated> = e.iter().filter(|x| x.implementation == "scalar").collect();
    assert!(scalar.iter().all(|x| x.value.is_none()));
    assert!(scalar[0]
        .missing
        .as_deref()
        .unwrap()
        .contains("unsupported"));
    assert_eq!(r.rows[0].timing().unwrap().method, Method::Eager);
}

#[test]
fn targets() {
    assert!(Target::AtMost(1.05).met(1.05) && !Target::AtMost(1.05).met(1.06));
    assert!(Target::AtLeast(0.95).met(0.96) && !Target::AtLeast(0.95).met(0.9));
    assert_eq!(Target::AtLeast(0.95).text(), "≥ 0.95");
}

#[test]
fn mode_report_round_trips_through_json() {
    assert_json_round_trip(&fixture());
}

#[test]
fn mode_table_layout() {
    let md = render_markdown(&fixture());
    assert!(
        md.contains("| varlen TFLOP/s / dense TFLOP/s at equal real FLOPs | persistent-hopper |")
    );
    insta::assert_snapshot!("bench_varlen_table", md);
}

#[test]
fn missing_peers_leave_one_line_and_no_peer_ratio() {
    let mut r = fixture();
    r.rows.retain(|x| x.source == Source::Flashcore);
    r.peers = PeerStatus::Missing {
        reason: "python3 -c 'import torch' failed".into(),
    };
    let t = render_rows(&r);
    assert_eq!(t.matches("no peer rows").count(), 1, "{t}");
    let c = render_comparisons(&r);
    assert!(c.contains("padded: no peer time"), "{c}");
}
