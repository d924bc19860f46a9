//! The peer scripts' JSON, its merge with FA3's, and the dense anchor files, without a GPU (the
//! FA3 script under a stand-in wheel where one is given).

use super::*;
use crate::bench::report::Method;
use crate::bench::suite::{expand, CausalSel, MISSION};
use flashcore::DType;

fn mission() -> Vec<Shape> {
    expand(&MISSION, CausalSel::Both, &[DType::F16])
}

#[test]
fn peer_json_merges_eager_and_graph_rows() {
    let wanted = mission();
    let v: Value = serde_json::from_str(
            r#"{"device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "cudnn": "91900",
                "cuda": "13.0", "l2_bytes": 52428800, "quick": false,
                "skipped": [{"backend": "fa3", "reason": "flash_attn_interface: ModuleNotFoundError"}],
                "rows": [
                  {"batch": 1, "heads": 8, "seq": 512, "head_dim": 64, "causal": false, "dtype": "f16",
                   "backend": "sdpa_cudnn", "method": "eager", "us": 21.2, "tflops": 25.3, "rel": 0.000274,
                   "calls": 944, "repeats": 15, "sets": 51},
                  {"batch": 1, "heads": 8, "seq": 512, "head_dim": 64, "causal": false, "dtype": "f16",
                   "backend": "sdpa_cudnn", "method": "graph", "us": 9.37, "tflops": 57.3, "rel": 0.000274,
                   "calls": 2150, "repeats": 15, "sets": 51},
                  {"batch": 1, "heads": 8, "seq": 512, "head_dim": 64, "causal": true, "dtype": "f16",
                   "backend": "sdpa_cudnn", "error": "RuntimeError: nope"},
                  {"batch": 1, "heads": 8, "seq": 512, "head_dim": 64, "causal": false, "dtype": "f16",
                   "backend": "sdpa_flash", "method": "eager", "us": 26.6, "tflops": 20.2, "rel": 0.000273,
                   "calls": 752, "repeats": 15, "sets": 51},
                  {"batch": 1, "heads": 8, "seq": 512, "head_dim": 64, "causal": false, "dtype": "f16",
                   "backend": "sdpa_flash", "method": "graph", "error": "RuntimeError: capture failed"},
                  {"batch": 9, "heads": 8, "seq": 512, "head_dim": 64, "causal": false, "dtype": "f16",
                   "backend": "sdpa_flash", "method": "eager", "us": 1.0, "tflops": 1.0}
                ]}"#,
        )
        .unwrap();
    let (status, rows) = parse_peers(&v, &wanted).unwrap();
    match status {
        PeerStatus::Ran { cudnn, skipped, .. } => {
            assert_eq!(cudnn.as_deref(), Some("91900"));
            assert_eq!(skipped[0].backend, "fa3");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(rows.len(), 3, "{rows:#?}");
    let cudnn = rows[0].timing().unwrap();
    assert_eq!(rows[0].implementation, "sdpa_cudnn");
    assert_eq!(
        (cudnn.method, cudnn.us, cudnn.eager_us),
        (Method::Graph, 9.37, Some(21.2))
    );
    assert_eq!(cudnn.check.as_deref(), Some("rel 2.7e-4"));
    let flash = rows[1].timing().unwrap();
    assert_eq!((flash.method, flash.us), (Method::Eager, 26.6));
    assert!(flash.note.as_deref().unwrap().contains("capture failed"));
    assert!(rows[2].shape.causal);
    assert!(matches!(&rows[2].outcome, Outcome::Error { message } if message.contains("nope")));
}

#[test]
fn mode_peer_rows_keep_gqa_and_seq_k_apart() {
    use crate::bench::modes::PeerShape;
    let gqa = PeerShape {
        batch: 1,
        heads: 32,
        heads_kv: 8,
        seq: 32768,
        seq_k: 4096,
        head_dim: 128,
        causal: false,
        dtype: DType::Bf16,
    };
    let v: Value = serde_json::from_str(
            r#"{"device": "H100", "torch": "2.11", "cudnn": null, "skipped": [],
                "rows": [
                  {"batch": 1, "heads": 32, "heads_kv": 8, "seq": 32768, "seq_k": 4096, "head_dim": 128,
                   "causal": false, "dtype": "bf16", "backend": "sdpa_flash", "method": "eager",
                   "us": 1000.0, "rel": 0.0003, "calls": 20, "repeats": 15, "sets": 2,
                   "note": "GQA: K/V repeated to 32 heads before timing"},
                  {"batch": 1, "heads": 32, "heads_kv": 32, "seq": 32768, "seq_k": 4096, "head_dim": 128,
                   "causal": false, "dtype": "bf16", "backend": "sdpa_flash", "method": "eager", "us": 5.0}
                ]}"#,
        )
        .unwrap();
    let rows = merge_peer_rows(&v, &[gqa], PeerShape::from_json, |_| 2e9).unwrap();
    assert_eq!(rows.len(), 1, "the MHA row is another shape");
    let (i, backend, Outcome::Timed(t)) = &rows[0] else {
        panic!("{rows:?}")
    };
    assert_eq!((*i, backend.as_str()), (0, "sdpa_flash"));
    assert_eq!(t.us, 1000.0);
    assert!((t.tflops - 2.0).abs() < 1e-12, "counted on the given FLOPs");
    assert!(t.note.as_deref().unwrap().contains("repeated"));
    // And the dense suites do not take rows of GQA or seq_k != seq shapes.
    let (_, dense) = parse_peers(&v, &mission()).unwrap();
    assert!(dense.is_empty());
}

#[test]
fn graph_only_rows_keep_their_check_and_counts() {
    // What `torch_sdpa.py --decode` writes: one graph row, no eager row.
    use crate::bench::modes::PeerShape;
    let shape = crate::bench::decode::ROWS[1].peer_shape();
    let v: Value = serde_json::from_str(
        r#"{"device": "H100", "torch": "2.11", "cudnn": "91900", "decode": true, "skipped": [],
                "rows": [
                  {"batch": 8, "heads": 32, "heads_kv": 8, "seq": 1, "seq_k": 8192, "head_dim": 128,
                   "causal": false, "dtype": "bf16", "backend": "sdpa_cudnn", "method": "graph",
                   "us": 94.2, "tflops": 0.09, "gbps": 2850.0, "rel": 0.0004, "calls": 30,
                   "repeats": 11, "sets": 3}
                ]}"#,
    )
    .unwrap();
    let rows = merge_peer_rows(&v, &[shape], PeerShape::from_json, |_| 1e9).unwrap();
    let (_, backend, Outcome::Timed(t)) = &rows[0] else {
        panic!("{rows:?}")
    };
    assert_eq!(backend, "sdpa_cudnn");
    assert_eq!((t.method, t.us, t.eager_us), (Method::Graph, 94.2, None));
    assert_eq!((t.calls, t.repeats, t.sets), (30, 11, 3));
    assert_eq!(t.check.as_deref(), Some("rel 4.0e-4"));
}

#[test]
fn anchor_files_parse() {
    let sdpa = "# device NVIDIA H100 80GB HBM3 sms=132 torch=2.11.0+cu130 cudnn=91900\n\
                    B=1 H=8 S=512 D=64 causal=0 cudnn           21.2 us     25.3 TFLOP/s rel=2.74e-04\n\
                    B=1 H=8 S=512 D=64 causal=1 flash           25.6 us     10.5 TFLOP/s rel=2.51e-04\n";
    let graph = "# device NVIDIA H100 80GB HBM3 torch=2.11.0+cu130 dtype=torch.float16\n\
                     B=1 H=8 S=512 D=64 causal=0 cudnn     graph     9.37 us    57.3 TFLOP/s\n";
    let jax = "# jax 0.11.2 devices [CudaDevice(id=0)]\n\
                   B=1 H=8 S=512 D=64 causal=0 fa3            12.0 us    22.0 TFLOP/s rel=2.75e-04\n";
    let mut e = parse_anchor_file("h100-torch-sdpa-fp16.txt", sdpa);
    e.extend(parse_anchor_file("h100-torch-sdpa-graph-small.txt", graph));
    e.extend(parse_anchor_file("h100-fa3-jax-fp16.txt", jax));
    assert_eq!(e.len(), 4);
    assert!(e.iter().all(|x| x.0.dtype == DType::F16));
    let bf = parse_anchor_file("h100-torch-sdpa-bf16-small.txt", sdpa);
    assert!(bf.iter().all(|x| x.0.dtype == DType::Bf16));
    let rows = anchor_rows(&e, &mission());
    let names: Vec<&str> = rows.iter().map(|r| r.implementation.as_str()).collect();
    assert_eq!(
        names,
        [
            "sdpa_cudnn (anchor)",
            "fa3-jax (anchor)",
            "sdpa_flash (anchor)"
        ]
    );
    let t = rows[0].timing().unwrap();
    assert_eq!(
        (t.method, t.us, t.eager_us),
        (Method::Graph, 9.37, Some(21.2))
    );
}

/// The backward file's `fwd` column was measured with the backward's method (10 calls,
/// jax wall clock): it must not stand in for the forward anchors of the same shapes.
#[test]
fn backward_anchor_lines_are_not_forward_anchors() {
    let bwd = "# Backward on an H100 80GB HBM3, fp16
                   B=1 H=8 S=512 D=64 causal=0 fa3-jax   fwd     14.5 us bwd     60.4 us  bwd  11.1 TFLOP/s
                   B=1 H=8 S=512 D=64 causal=0 cudnn     fwd     20.5 us bwd     53.1 us  bwd  12.6 TFLOP/s
";
    assert!(parse_anchor_file("h100-backward-peers.txt", bwd).is_empty());
}

#[test]
fn the_shared_anchor_files_parse_if_present() {
    let dir = Path::new("/work/shared/anchors");
    if !dir.is_dir() {
        return;
    }
    let all = expand(
        &crate::bench::suite::suite_bhsd(crate::bench::suite::Suite::Full),
        CausalSel::Both,
        &[DType::F16, DType::Bf16],
    );
    let rows = load_anchors(dir, &all).unwrap();
    assert!(rows.len() >= 20, "{}", rows.len());
}

/// What `fa3_jax.py` writes: an eager and a loop ("graph") row per shape, or an error row.
const FA3_JSON: &str = r#"{"device": "NVIDIA H100 80GB HBM3", "jax": "0.11.2", "jaxlib": "0.11.2",
        "flash_attn3_jax": "0.2.3", "runtime": "jax", "l2_bytes": 52428800, "quick": false,
        "decode": false, "method": "...", "skipped": [],
        "rows": [
          {"batch": 1, "heads": 8, "heads_kv": 8, "seq": 512, "seq_k": 512, "head_dim": 64,
           "causal": false, "dtype": "f16", "backend": "fa3", "method": "eager", "us": 25.0,
           "tflops": 21.5, "rel": 0.000275, "calls": 800, "repeats": 15, "sets": 51,
           "num_splits": 4, "note": "num_splits=4 (fastest of 1,2,4); graph = 2040 calls in one jitted lax.fori_loop (XLA, not a CUDA graph)"},
          {"batch": 1, "heads": 8, "heads_kv": 8, "seq": 512, "seq_k": 512, "head_dim": 64,
           "causal": false, "dtype": "f16", "backend": "fa3", "method": "graph", "us": 8.0,
           "tflops": 67.1, "rel": 0.000275, "calls": 2040, "repeats": 15, "sets": 51,
           "num_splits": 4, "loop_copies": 0,
           "note": "num_splits=4 (fastest of 1,2,4); graph = 2040 calls in one jitted lax.fori_loop (XLA, not a CUDA graph)"},
          {"batch": 1, "heads": 8, "heads_kv": 8, "seq": 512, "seq_k": 512, "head_dim": 64,
           "causal": true, "dtype": "f16", "backend": "fa3", "error": "XlaRuntimeError: boom"}
        ]}"#;

fn torch_json() -> Value {
    serde_json::from_str(
            r#"{"device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "cudnn": "91900",
                "l2_bytes": 52428800, "quick": false,
                "skipped": [{"backend": "fa3", "reason": "flash_attn_interface: ModuleNotFoundError; flash_attn3_jax imports, but ..."},
                            {"backend": "sdpa_efficient", "reason": "not wanted"}],
                "rows": [
                  {"batch": 1, "heads": 8, "seq": 512, "head_dim": 64, "causal": false, "dtype": "f16",
                   "backend": "sdpa_cudnn", "method": "graph", "us": 9.37, "rel": 0.000274,
                   "calls": 2150, "repeats": 15, "sets": 51}
                ]}"#,
        )
        .unwrap()
}

#[test]
fn fa3_rows_join_the_torch_rows_as_a_peer() {
    let fa3: Value = serde_json::from_str(FA3_JSON).unwrap();
    let v = merge_fa3(Ok(torch_json()), Ok(fa3)).unwrap();
    let (status, rows) = parse_peers(&v, &mission()).unwrap();
    let PeerStatus::Ran { torch, skipped, .. } = status else {
        panic!("{status:?}")
    };
    assert_eq!(
        torch,
        "2.11.0+cu130; JAX 0.11.2, flash_attn3_jax 0.2.3 (fa3)"
    );
    // The torch script's "imports, but not timed" entry is gone; its others stay.
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].backend, "sdpa_efficient");
    let names: Vec<(&str, bool)> = rows
        .iter()
        .map(|r| (r.implementation.as_str(), r.shape.causal))
        .collect();
    assert_eq!(
        names,
        [("sdpa_cudnn", false), ("fa3", false), ("fa3", true)]
    );
    let t = rows[1].timing().unwrap();
    assert_eq!(
        (t.method, t.us, t.eager_us),
        (Method::Graph, 8.0, Some(25.0))
    );
    assert_eq!((t.calls, t.sets), (2040, 51));
    assert_eq!(t.check.as_deref(), Some("rel 2.8e-4"));
    assert!(t.note.as_deref().unwrap().contains("fori_loop"));
    assert!(matches!(&rows[2].outcome, Outcome::Error { message } if message.contains("boom")));
    assert_eq!(v["fa3"]["jax"], "0.11.2");
    assert!(v["fa3"].get("rows").is_none());
}

#[test]
fn fa3_is_the_best_peer_where_it_is_fastest() {
    let fa3: Value = serde_json::from_str(FA3_JSON).unwrap();
    let v = merge_fa3(Ok(torch_json()), Ok(fa3)).unwrap();
    let (status, rows) = parse_peers(&v, &mission()).unwrap();
    let mut report = crate::bench::report::tests::fixture();
    report.peers = status;
    report.rows.retain(|r| r.source == Source::Flashcore);
    report.rows.extend(rows);
    let (best, us) = report.best_peer(&mission()[0]).unwrap();
    assert_eq!((best.implementation.as_str(), us), ("fa3", 8.0));
    let md = crate::bench::report::render_markdown(&report);
    assert!(
        md.contains("JAX 0.11.2, flash_attn3_jax 0.2.3 (fa3)"),
        "{md}"
    );
}

#[test]
fn a_torch_fa3_keeps_its_name_and_the_jax_one_is_renamed() {
    let mut t = torch_json();
    t["rows"].as_array_mut().unwrap().push(serde_json::json!({
            "batch": 1, "heads": 8, "seq": 512, "head_dim": 64, "causal": false, "dtype": "f16",
            "backend": "fa3", "method": "eager", "us": 30.0}));
    let fa3: Value = serde_json::from_str(FA3_JSON).unwrap();
    let v = merge_fa3(Ok(t), Ok(fa3)).unwrap();
    let (_, rows) = parse_peers(&v, &mission()).unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r.implementation.as_str()).collect();
    assert_eq!(names, ["sdpa_cudnn", "fa3", "fa3-jax", "fa3-jax"]);
    assert_eq!(rows[1].timing().unwrap().us, 30.0);
    assert_eq!(rows[2].timing().unwrap().us, 8.0);
}

#[test]
fn a_failed_fa3_process_is_a_skip_reason_beside_the_torch_rows() {
    let v = merge_fa3(Ok(torch_json()), Err("import jax failed: No module".into())).unwrap();
    let (status, rows) = parse_peers(&v, &mission()).unwrap();
    assert_eq!(rows.len(), 1);
    let PeerStatus::Ran { skipped, .. } = status else {
        panic!("{status:?}")
    };
    let fa3 = skipped.iter().find(|s| s.backend == "fa3").unwrap();
    assert!(
        fa3.reason.starts_with("flash_attn_interface"),
        "{}",
        fa3.reason
    );
    assert!(fa3
        .reason
        .ends_with("fa3_jax.py: import jax failed: No module"));
    // Without a torch "fa3" entry (--backends without fa3) one is added.
    let mut t = torch_json();
    t["skipped"] = serde_json::json!([]);
    let v = merge_fa3(Ok(t), Err("nope".into())).unwrap();
    assert_eq!(
        v["skipped"],
        serde_json::json!([{"backend": "fa3", "reason": "fa3_jax.py: nope"}])
    );
}

#[test]
fn fa3_rows_stand_alone_when_torch_is_missing() {
    let fa3: Value = serde_json::from_str(FA3_JSON).unwrap();
    let v = merge_fa3(Err("python3 -c 'import torch' failed".into()), Ok(fa3)).unwrap();
    let (status, rows) = parse_peers(&v, &mission()).unwrap();
    assert_eq!(rows.len(), 2);
    let PeerStatus::Ran {
        device,
        torch,
        cudnn,
        skipped,
    } = status
    else {
        panic!("{status:?}")
    };
    assert_eq!(device, "NVIDIA H100 80GB HBM3");
    assert!(torch.starts_with("none; JAX 0.11.2"));
    assert_eq!(cudnn, None);
    assert_eq!(skipped[0].backend, "torch");
    let both = merge_fa3(Err("a".into()), Err("b".into())).unwrap_err();
    assert_eq!(both, "a; FA3 (JAX): b");
}

#[test]
fn fa3_decode_rows_merge_on_the_gqa_shapes() {
    use crate::bench::modes::PeerShape;
    let shape = crate::bench::decode::ROWS[1].peer_shape();
    let fa3 = serde_json::json!({
    "jax": "0.11.2", "flash_attn3_jax": "0.2.3", "skipped": [],
    "rows": [
      {"batch": shape.batch, "heads": shape.heads, "heads_kv": shape.heads_kv,
       "seq": shape.seq, "seq_k": shape.seq_k, "head_dim": shape.head_dim,
       "causal": false, "dtype": "bf16", "backend": "fa3", "method": "eager",
       "us": 120.0, "rel": 0.0004, "calls": 30, "repeats": 11, "sets": 3, "gbps": 2000.0},
      {"batch": shape.batch, "heads": shape.heads, "heads_kv": shape.heads_kv,
       "seq": shape.seq, "seq_k": shape.seq_k, "head_dim": shape.head_dim,
       "causal": false, "dtype": "bf16", "backend": "fa3", "method": "graph",
       "us": 90.0, "rel": 0.0004, "calls": 30, "repeats": 11, "sets": 3, "gbps": 2900.0,
       "num_splits": 8}
    ]});
    let v = merge_fa3(Ok(torch_json()), Ok(fa3)).unwrap();
    let rows = merge_peer_rows(&v, &[shape], PeerShape::from_json, |_| 1e9).unwrap();
    assert_eq!(rows.len(), 1, "the dense torch row is another shape");
    let (_, backend, Outcome::Timed(t)) = &rows[0] else {
        panic!("{rows:?}")
    };
    assert_eq!(backend, "fa3");
    assert_eq!(
        (t.method, t.us, t.eager_us),
        (Method::Graph, 90.0, Some(120.0))
    );
}

#[test]
fn a_crashed_fa3_run_keeps_its_rows_and_says_so() {
    let mut fa3: Value = serde_json::from_str(FA3_JSON).unwrap();
    fa3["complete"] = Value::Bool(false);
    let fa3 = with_partial_note(fa3, "fa3", "fa3_jax.py failed with exit status None");
    let v = merge_fa3(Ok(torch_json()), Ok(fa3)).unwrap();
    let (status, rows) = parse_peers(&v, &mission()).unwrap();
    assert_eq!(rows.iter().filter(|r| r.implementation == "fa3").count(), 2);
    let PeerStatus::Ran { skipped, .. } = status else {
        panic!("{status:?}")
    };
    let fa3 = skipped.iter().find(|s| s.backend == "fa3").unwrap();
    assert!(fa3.reason.contains("exit status None"), "{}", fa3.reason);
    assert!(
        fa3.reason.contains("the 3 rows before it are kept"),
        "{}",
        fa3.reason
    );
}

#[test]
fn fa3_options_put_the_wheel_dir_first_and_keep_jax_from_preallocating() {
    let o = Fa3Options::new(false, None, Some(PathBuf::from("/tmp/fa3pkg")));
    let env = o.env();
    let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
    assert_eq!(
        get("XLA_PYTHON_CLIENT_PREALLOCATE").as_deref(),
        Some(std::ffi::OsStr::new("false"))
    );
    let pp = get("PYTHONPATH").unwrap();
    assert!(pp.to_string_lossy().starts_with("/tmp/fa3pkg"), "{pp:?}");
    let none = Fa3Options {
        off: false,
        python: None,
        path: None,
    };
    assert!(none.env().iter().all(|(k, _)| *k != "PYTHONPATH"));
}

#[test]
fn the_fa3_script_is_found_beside_the_torch_one() {
    let torch = find_script(None).expect("bench/peers/torch_sdpa.py in this checkout");
    let fa3 = find_fa3_script(Some(&torch)).unwrap();
    assert!(fa3.ends_with("bench/peers/fa3_jax.py"), "{}", fa3.display());
    assert!(find_fa3_script(None).is_some());
}

#[test]
fn an_fa3_python_without_jax_is_a_reason_not_an_error() {
    let list: Vec<Value> = mission().iter().map(|s| s.peer_json()).collect();
    let dir = std::env::temp_dir().join(format!("fa3-probe-{}", std::process::id()));
    let fa3 = Fa3Options {
        off: false,
        python: Some("/nonexistent/python3".into()),
        path: None,
    };
    let run = PeerRun {
        python: "/nonexistent/python3",
        script: None,
        dir: &dir,
        suffix: "",
        quick: true,
        extra: &[],
        fa3: &fa3,
    };
    let script = find_fa3_script(None);
    let r = run_fa3(&run, script.as_deref(), &list, &[], None).unwrap();
    assert!(r.unwrap_err().contains("could not be started"));
    // Both missing: one reason for the table.
    let both = run.run(&list).unwrap_err();
    assert!(
        both.contains("torch_sdpa.py not found") && both.contains("FA3 (JAX)"),
        "{both}"
    );
}

/// The whole FA3 path (probe, script, JSON, merge) on a machine without a GPU: with
/// `FLASHCORE_FA3_TEST_PATH` naming a PYTHONPATH that has CPU JAX and a stand-in
/// `flash_attn3_jax` (same functions, jnp math) and `FA3_JAX_PLATFORM=cpu`. Skipped otherwise.
#[test]
fn fa3_script_runs_under_a_stand_in_wheel_if_one_is_given() {
    let Some(pp) = std::env::var_os("FLASHCORE_FA3_TEST_PATH") else {
        return;
    };
    let shape = Shape {
        batch: 1,
        heads: 4,
        seq: 64,
        head_dim: 64,
        causal: true,
        dtype: DType::Bf16,
    };
    let list = vec![shape.peer_json()];
    let dir = std::env::temp_dir().join(format!("fa3-stand-in-{}", std::process::id()));
    let fa3 = Fa3Options {
        off: false,
        python: None,
        path: Some(PathBuf::from(pp)),
    };
    let torch = find_script(None);
    let run = PeerRun {
        python: "python3",
        script: torch.as_deref(),
        dir: &dir,
        suffix: "-t",
        quick: true,
        extra: &[],
        fa3: &fa3,
    };
    let v = run_fa3(&run, find_fa3_script(None).as_deref(), &list, &[], None)
        .unwrap()
        .unwrap();
    let v = merge_fa3(Err("no torch here".into()), Ok(v)).unwrap();
    let (_, rows) = parse_peers(&v, &[shape]).unwrap();
    assert_eq!(rows[0].implementation, "fa3");
    let t = rows[0].timing().unwrap();
    assert!(t.us > 0.0 && t.check.is_some(), "{t:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `fa3_jax.py --backward` under the stand-in wheel (as above): one backward row per shape that
/// the backward report reads, fwd+bwd minus fwd. Skipped without `FLASHCORE_FA3_TEST_PATH`.
#[test]
fn fa3_backward_runs_under_a_stand_in_wheel_if_one_is_given() {
    let Some(pp) = std::env::var_os("FLASHCORE_FA3_TEST_PATH") else {
        return;
    };
    use crate::bench::backward::{parse_backward_peers, Pass};
    let shapes: Vec<Shape> = [true, false]
        .into_iter()
        .map(|causal| Shape {
            batch: 1,
            heads: 2,
            seq: 128,
            head_dim: 64,
            causal,
            dtype: if causal { DType::Bf16 } else { DType::F16 },
        })
        .collect();
    let list: Vec<Value> = shapes.iter().map(|s| s.peer_json()).collect();
    let dir = std::env::temp_dir().join(format!("fa3-stand-in-bwd-{}", std::process::id()));
    let fa3 = Fa3Options {
        off: false,
        python: None,
        path: Some(PathBuf::from(pp)),
    };
    let run = PeerRun {
        python: "python3",
        script: None,
        dir: &dir,
        suffix: "-bwd",
        quick: true,
        extra: &["--backward"],
        fa3: &fa3,
    };
    // The whole run: no torch script here, FA3's process gets --backward from `extra`.
    let v = run.run(&list).unwrap();
    assert_eq!(v["backward"], Value::Bool(true));
    assert_eq!(v["skipped"][0]["backend"], "torch");
    let (_, rows) = parse_backward_peers(&v, &shapes, Pass::Bwd).unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    for r in &rows {
        assert_eq!(r.implementation, "fa3");
        let t = r.timing().unwrap_or_else(|| panic!("{r:?}"));
        assert!(t.us > 0.0, "{t:?}");
        let check = t.check.as_deref().unwrap();
        assert!(check.contains("grads rel"), "{check}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `fa3_jax.py`'s arguments are checked before jax is imported: `--backward` is listed, and
/// with `--decode` it is refused (exit status 2), on any machine.
#[test]
fn the_fa3_script_takes_backward_and_refuses_it_with_decode() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: no python3 here");
        return;
    }
    let fa3 = find_fa3_script(None).unwrap();
    let help = Command::new("python3")
        .arg(&fa3)
        .arg("--help")
        .output()
        .unwrap();
    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&help.stdout).contains("--backward"));
    let dir = std::env::temp_dir().join(format!("fa3-args-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let shapes = dir.join("shapes.json");
    std::fs::write(
        &shapes,
        serde_json::to_string(&[mission()[0].peer_json()]).unwrap(),
    )
    .unwrap();
    let out = Command::new("python3")
        .arg(&fa3)
        .arg("--shapes")
        .arg(&shapes)
        .arg("--out")
        .arg(dir.join("out.json"))
        .args(["--backward", "--decode"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("do not go together"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every peer script reads its shapes through bench/peers/peer_shapes.py, before importing
/// torch, jax or cudnn: a malformed file is exit status 2 with the field named, on any machine.
#[test]
fn both_peer_scripts_refuse_a_bad_shapes_file_before_their_frameworks() {
    if Command::new("python3").arg("--version").output().is_err() {
        eprintln!("skipped: no python3 here");
        return;
    }
    let torch = find_script(None).expect("bench/peers/torch_sdpa.py in this checkout");
    let fa3 = find_fa3_script(Some(&torch)).unwrap();
    let cudnn = find_peer_script("cudnn_fp8.py", Some(&torch)).unwrap();
    let dir = std::env::temp_dir().join(format!("peer-shapes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(
            &bad,
            r#"[{"batch": 1, "heads": 6, "heads_kv": 4, "seq": 64, "head_dim": 64, "causal": true, "dtype": "f16"}]"#,
        )
        .unwrap();
    for script in [&torch, &fa3, &cudnn] {
        let out = Command::new("python3")
            .arg(script)
            .arg("--shapes")
            .arg(&bad)
            .arg("--out")
            .arg(dir.join("out.json"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {stderr}", script.display());
        assert!(
            stderr.contains("heads_kv 4 does not divide heads 6"),
            "{}: {stderr}",
            script.display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_a_script_peers_are_missing_with_a_reason() {
    let list: Vec<Value> = mission().iter().map(|s| s.peer_json()).collect();
    let r = run_script_with("python3", None, &list, Path::new("/tmp"), "", true, &[]).unwrap();
    assert!(r.unwrap_err().contains("torch_sdpa.py not found"));
    let r = run_script_with(
        "/nonexistent/python3",
        Some(Path::new("x.py")),
        &list,
        Path::new("/tmp"),
        "",
        true,
        &[],
    )
    .unwrap();
    assert!(r.unwrap_err().contains("could not be started"));
}
