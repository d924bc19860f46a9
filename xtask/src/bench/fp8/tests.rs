//! `--suite fp8` without a GPU: its arguments, rows, descales and quantizer, the peer script's
//! JSON, and the report rendered from a saved run.

use std::path::Path;

use clap::Parser;
use flashcore::{DType, Layout};

use super::report::*;
use super::*;
use crate::bench::report::{assert_contains_all, assert_json_round_trip, fixture_run, Source};
use crate::bench::suite::{suite_bhsd, CausalSel, Suite};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: Args,
}

fn parse(argv: &[&str]) -> Args {
    Cli::try_parse_from(std::iter::once("bench-all").chain(argv.iter().copied()))
        .unwrap()
        .args
}

#[test]
fn the_suite_and_its_flags_parse() {
    let a = parse(&["--suite", "fp8"]);
    assert_eq!(a.suite, Suite::Fp8);
    assert!(a.cudnn_fe_path.is_none() && !a.no_peers);
    assert_eq!(selected_rows(&a).len(), 4);
    let a = parse(&[
        "--suite",
        "fp8",
        "--cudnn-fe-path",
        "/tmp/cudnn-fe",
        "--no-peers",
        "--causal",
        "on",
    ]);
    assert_eq!(a.cudnn_fe_path.as_deref(), Some(Path::new("/tmp/cudnn-fe")));
    assert_eq!(
        cudnn_fe_path(&a).as_deref(),
        Some(Path::new("/tmp/cudnn-fe"))
    );
    assert!(a.no_peers);
    let rows = selected_rows(&a);
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|s| s.causal));
    // --case narrows by key, --shape replaces the rows.
    let a = parse(&["--suite", "fp8", "--case", "s4096"]);
    let keys: Vec<String> = selected_rows(&a).iter().map(Shape::key).collect();
    assert_eq!(
        keys,
        ["b8-h32-s4096-d128-bf16-c0", "b8-h32-s4096-d128-bf16-c1"]
    );
    let a = parse(&[
        "--suite",
        "fp8",
        "--shape",
        "2,8,1024,128",
        "--causal",
        "off",
    ]);
    assert_eq!(selected_rows(&a)[0].key(), "b2-h8-s1024-d128-bf16-c0");
    assert_eq!(peer_extra_args(false, 8192), ["--gemm-n", "8192"]);
    assert_eq!(peer_extra_args(true, 8192), ["--no-gemm"]);
}

#[test]
fn the_rows_are_the_issues_shapes_non_causal_then_causal() {
    assert_eq!(suite_bhsd(Suite::Fp8), ROWS.to_vec());
    let rows = rows(&[], CausalSel::Both, &[]);
    let got: Vec<(usize, usize, usize, usize, bool)> = rows
        .iter()
        .map(|s| (s.batch, s.heads, s.seq, s.head_dim, s.causal))
        .collect();
    assert_eq!(
        got,
        [
            (1, 16, 16384, 128, false),
            (1, 16, 16384, 128, true),
            (8, 32, 4096, 128, false),
            (8, 32, 4096, 128, true)
        ]
    );
    assert!(rows.iter().all(|s| s.dtype == DType::Bf16));
    // The ladder's FLOP count: 4·B·H·S²·D, halved for causal.
    assert_eq!(rows[0].flops(), 4.0 * 16.0 * 16384f64.powi(2) * 128.0);
    assert_eq!(rows[1].flops(), rows[0].flops() / 2.0);
    assert_eq!(report::row_name(&rows[1]), "1,16,16384,128 causal");
}

#[test]
fn an_e4m3_row_is_a_valid_fp8_forward_with_alternating_power_of_two_descales() {
    let shape = rows(&[], CausalSel::On, &[])[1];
    let p = e4m3_problem(&shape, Layout::Bhsd);
    assert!(p.modes.q_fp8 && p.modes.kv_fp8 == Some(SCALES));
    p.validate().unwrap();
    let t = descale_table(&p);
    assert_eq!(t.len(), 8 * 32);
    assert_eq!(
        (t[0], t[1], t[32], t[33]),
        (1.0 / 32.0, 1.0 / 64.0, 1.0 / 64.0, 1.0 / 32.0)
    );
    assert!(t.iter().all(|f| f.log2().fract() == 0.0));
}

#[test]
fn the_quantizer_stores_exact_e4m3_values_over_each_heads_factor() {
    let x = crate::inputs::random_tensor(DType::Bf16, [2, 4, 8, 16], 3);
    // Two query heads per KV head: Q's heads 2 and 3 take KV head 1's factor.
    let q = quantize(x.clone(), 2);
    let kv = quantize(x.clone(), 1);
    for ((b, h, s, d), &v) in x.indexed_iter() {
        let (fq, fk) = (descale(b, h / 2), descale(b, h));
        for (stored, f) in [(q[[b, h, s, d]], fq), (kv[[b, h, s, d]], fk)] {
            assert_eq!(crate::mode_case::round_e4m3(stored), stored);
            // Round to nearest: within half an e4m3 step (3 mantissa bits) of x / f.
            let want = v / f;
            assert!(
                (stored - want).abs() <= want.abs() / 16.0 + 1e-3,
                "{stored} for {want}"
            );
            let bytes =
                flashcore::host::e4m3_bytes("q", &ndarray::arr1(&[stored]).into_dyn().view())
                    .unwrap();
            assert_eq!(bytes.len(), 1);
        }
    }
}

/// What bench/peers/cudnn_fp8.py writes for the suite's rows: cuDNN timed at three of them and
/// refusing one, and its GEMM lines (one failed).
fn peer_fixture() -> Value {
    serde_json::from_str(
        r#"{"device": "NVIDIA H200", "torch": "2.11.0+cu130", "cudnn": "91900", "cuda": "13.0",
            "l2_bytes": 52428800, "quick": false, "skipped": [],
            "cudnn_frontend": "1.32.0", "cudnn_backend": "91900",
            "gemm": [
              {"name": "scaled_mm_e4m3", "n": 8192, "us": 866.0, "tflops": 1269.6, "calls": 24, "repeats": 15},
              {"name": "matmul_bf16", "n": 8192, "error": "RuntimeError: out of memory"}
            ],
            "rows": [
              {"batch": 1, "heads": 16, "seq": 16384, "head_dim": 128, "causal": false, "dtype": "bf16",
               "heads_kv": 16, "seq_k": 16384, "backend": "cudnn_fp8", "method": "eager", "us": 2500.0,
               "tflops": 879.6, "rel": 0.021, "calls": 8, "repeats": 15, "sets": 2},
              {"batch": 1, "heads": 16, "seq": 16384, "head_dim": 128, "causal": true, "dtype": "bf16",
               "heads_kv": 16, "seq_k": 16384, "backend": "cudnn_fp8", "method": "eager", "us": 1400.0,
               "tflops": 785.4, "rel": 0.021, "calls": 15, "repeats": 15, "sets": 2,
               "note": "O in e4m3 (cuDNN refused O in bf16: ...)"},
              {"batch": 8, "heads": 32, "seq": 4096, "head_dim": 128, "causal": false, "dtype": "bf16",
               "heads_kv": 32, "seq_k": 4096, "backend": "cudnn_fp8", "method": "eager", "us": 2600.0,
               "tflops": 845.8, "rel": 0.021, "calls": 8, "repeats": 15, "sets": 2},
              {"batch": 8, "heads": 32, "seq": 4096, "head_dim": 128, "causal": true, "dtype": "bf16",
               "heads_kv": 32, "seq_k": 4096, "backend": "cudnn_fp8",
               "error": "cuDNN refused it: cudnnGraphNotSupportedError: no engine"}
            ]}"#,
    )
    .unwrap()
}

fn timed(shape: &Shape, kernel: &str, us: f64) -> Row {
    let mut t = Timing::from_flops(shape.flops(), Some(us), None).unwrap();
    (t.calls, t.repeats, t.sets) = (10, 15, 2);
    t.check = Some("ok 0.31 (512 rows)".into());
    Row::flashcore(shape, kernel, Outcome::Timed(t))
}

/// A saved run: flashcore's e4m3 at about 1 PFLOP/s, bf16 at about 600, the peers as above; the
/// last row's e4m3 measurement failed the check.
fn fixture() -> Fp8Report {
    let shapes = rows(&[], CausalSel::Both, &[]);
    let (peers, cudnn, gemm) = parse_peers(&peer_fixture(), &shapes).unwrap();
    let (device, settings) = fixture_run("bhsd", "xtask bench-all --suite fp8");
    let e4m3_us = [2150.0, 1250.0, 2300.0, f64::NAN];
    let bf16_us = [3600.0, 2000.0, 3500.0, 1900.0];
    let fp8 = shapes
        .iter()
        .zip(cudnn)
        .enumerate()
        .map(|(i, (s, c))| Fp8Row {
            shape: *s,
            e4m3: if i == 3 {
                Row::flashcore(
                    s,
                    "persistent-hopper",
                    Outcome::Wrong {
                        message: "O row 7 head 3: error 0.2 over 0.05".into(),
                    },
                )
            } else {
                timed(s, "persistent-hopper", e4m3_us[i])
            },
            bf16: timed(s, "persistent-hopper", bf16_us[i]),
            cudnn: c,
        })
        .collect();
    let mut r = Fp8Report {
        device,
        settings,
        descales: DESCALES.into(),
        peers,
        gemm,
        fp8,
    };
    // Rates to a thousandth, as a saved run's JSON reads back exactly.
    for row in &mut r.fp8 {
        for m in [&mut row.e4m3, &mut row.bf16]
            .into_iter()
            .chain(row.cudnn.as_mut())
        {
            if let Outcome::Timed(t) = &mut m.outcome {
                t.tflops = (t.tflops * 1e3).round() / 1e3;
            }
        }
    }
    r
}

#[test]
fn the_peer_json_fills_the_cudnn_column_and_the_gemm_lines() {
    let r = fixture();
    let PeerStatus::Ran { torch, .. } = &r.peers else {
        panic!("{:?}", r.peers)
    };
    assert!(
        torch.contains("nvidia-cudnn-frontend 1.32.0 (cuDNN backend 91900)"),
        "{torch}"
    );
    let c: Vec<Option<&Row>> = r.fp8.iter().map(|x| x.cudnn.as_ref()).collect();
    assert!(c
        .iter()
        .all(|x| x.is_some_and(|r| r.source == Source::Peer)));
    assert_eq!(c[0].unwrap().timing().unwrap().us, 2500.0);
    assert!(c[1]
        .unwrap()
        .timing()
        .unwrap()
        .note
        .as_deref()
        .unwrap()
        .contains("O in e4m3"));
    assert!(
        matches!(&c[3].unwrap().outcome, Outcome::Error { message } if message.contains("no engine"))
    );
    assert_eq!(r.gemm.len(), 2);
    assert_eq!(r.e4m3_gemm_tflops(), Some(1269.6));
    assert!(r.gemm[1]
        .error
        .as_deref()
        .unwrap()
        .contains("out of memory"));
}

#[test]
fn ratios_and_bars() {
    let r = fixture();
    let row = &r.fp8[0];
    assert!((row.vs_bf16().unwrap() - 3600.0 / 2150.0).abs() < 1e-12);
    assert!((row.vs_cudnn().unwrap() - 2500.0 / 2150.0).abs() < 1e-12);
    // 1.02 PFLOP/s, 1.16x cuDNN, 1.67x bf16: every bar met.
    assert_eq!((row.must(), row.goal()), (Some(true), Some(true)));
    // 1.13x cuDNN but 1.52x bf16: the bf16 must fails; 880 TFLOP/s misses the goal.
    let row = &r.fp8[2];
    assert_eq!((row.must(), row.goal()), (Some(false), Some(false)));
    // No e4m3 time: no verdict.
    assert_eq!((r.fp8[3].must(), r.fp8[3].goal()), (None, None));
}

#[test]
fn the_report_renders_from_its_saved_json() {
    let json = assert_json_round_trip(&fixture());
    let r: Fp8Report = serde_json::from_str(&json).unwrap();
    let md = render_markdown(&r);
    assert_contains_all(
        &md,
        &[
            "GEMM reference (torch, same run): scaled_mm_e4m3 8192³ 1269.6 TFLOP/s (866.0 µs); \
             matmul_bf16 8192³: RuntimeError: out of memory",
            "| 1,16,16384,128 | no | 2150.0 | 1022.8 | 80.6 % | 3600.0 | 610.8 | 1.67x | 2500.0 | 879.6 | 1.16x | yes | yes |",
            "cuDNN fp8: cudnn_fp8 error: cuDNN refused it",
            "e4m3: persistent-hopper WRONG: O row 7",
            "| 1,16,16384,128 full | 1022.8 | 1.67x | 1.16x | yes | yes |",
            "| 8,32,4096,128 causal | - | - | - | - | - |",
        ],
    );
    // The short table comes last.
    assert!(
        md.trim_end()
            .ends_with("| 8,32,4096,128 causal | - | - | - | - | - |"),
        "{md}"
    );
    insta::assert_snapshot!("bench_fp8_table", md);
}

#[test]
fn without_peers_the_cudnn_columns_are_empty_and_the_header_says_why() {
    let mut r = fixture();
    r.peers = PeerStatus::Off;
    r.gemm.clear();
    for row in &mut r.fp8 {
        row.cudnn = None;
    }
    let md = render_markdown(&r);
    assert_contains_all(
        &md,
        &[
            "peers: not run (--no-peers)",
            "GEMM reference: not measured",
            "| 1,16,16384,128 full | 1022.8 | 1.67x | - | - | - |",
        ],
    );
}

/// `--from-json` of a saved fp8 run re-renders it (no GPU), and tells it from the other suites'.
#[test]
fn from_json_re_renders_a_saved_run() {
    let dir = std::env::temp_dir().join(format!("fp8-from-json-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let saved = dir.join("saved.json");
    std::fs::write(&saved, serde_json::to_string_pretty(&fixture()).unwrap()).unwrap();
    let out = dir.join("out");
    let a = parse(&[
        "--from-json",
        saved.to_str().unwrap(),
        "--out-dir",
        out.to_str().unwrap(),
    ]);
    crate::bench::run(a).unwrap();
    let md = std::fs::read_to_string(out.join(report::MARKDOWN)).unwrap();
    assert!(md.starts_with("# flashcore bench-all --suite fp8"), "{md}");
    let back: Fp8Report =
        serde_json::from_str(&std::fs::read_to_string(out.join(report::JSON)).unwrap()).unwrap();
    assert_eq!(back, fixture());
    let _ = std::fs::remove_dir_all(&dir);
}
