//! `bench-all`'s arguments and the reports it renders without a GPU.

use super::dense::{parse_input_sets, JSON, MARKDOWN, SVG};
use super::*;
use crate::bench::report::assert_contains_all;
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: Args,
}

#[test]
fn input_sets_override_parses_and_refuses_out_of_range() {
    assert_eq!(parse_input_sets(None).unwrap(), None);
    assert_eq!(parse_input_sets(Some("1")).unwrap(), Some(1));
    assert_eq!(parse_input_sets(Some(" 64 ")).unwrap(), Some(64));
    for bad in ["0", "65", "", "two"] {
        assert!(parse_input_sets(Some(bad)).is_err(), "{bad:?}");
    }
}

#[test]
fn fa3_flags_parse() {
    let a = Cli::try_parse_from(["bench-all"]).unwrap().args;
    assert!(!a.no_fa3 && a.fa3_path.is_none() && a.fa3_python.is_none());
    let a = Cli::try_parse_from([
        "bench-all",
        "--fa3-path",
        "/tmp/fa3pkg",
        "--fa3-python",
        "/usr/bin/python3.12",
    ])
    .unwrap()
    .args;
    let o = a.fa3_options();
    assert_eq!(o.path.as_deref(), Some(Path::new("/tmp/fa3pkg")));
    assert_eq!(o.python.as_deref(), Some("/usr/bin/python3.12"));
    assert!(!o.off);
    let a = Cli::try_parse_from(["bench-all", "--no-fa3"]).unwrap().args;
    assert!(a.fa3_options().off);
}

#[test]
fn defaults_and_flags_parse() {
    let a = Cli::try_parse_from(["bench-all"]).unwrap().args;
    assert_eq!(a.suite, Suite::Ladder);
    assert_eq!(a.causal, CausalSel::Both);
    assert_eq!(a.dtypes, ["f16"]);
    assert_eq!(a.layout, "bhsd");
    assert_eq!(a.repeats, 15);
    let a = Cli::try_parse_from([
        "bench-all",
        "--kernels",
        "scalar,vectorized",
        "--suite",
        "full",
        "--causal",
        "on",
        "--dtypes",
        "f16,bf16",
        "--shape",
        "1,8,512,64",
        "--shape",
        "2x16x8192x64",
        "--out-dir",
        "/tmp/x",
        "--max-seconds-per-kernel",
        "30",
    ])
    .unwrap()
    .args;
    assert_eq!(a.kernels.unwrap(), ["scalar", "vectorized"]);
    assert_eq!(a.shapes, [(1, 8, 512, 64), (2, 16, 8192, 64)]);
    assert_eq!(a.max_seconds_per_kernel, 30.0);
    assert!(Cli::try_parse_from(["bench-all", "--suite", "huge"]).is_err());
    assert!(Cli::try_parse_from(["bench-all", "--shape", "1,2,3"]).is_err());
}

#[test]
fn the_mode_suites_parse() {
    for (name, suite) in [
        ("varlen", Suite::Varlen),
        ("paged", Suite::Paged),
        ("window", Suite::Window),
        ("decode", Suite::Decode),
    ] {
        let a = Cli::try_parse_from([
            "bench-all",
            "--suite",
            name,
            "--kernels",
            "persistent-hopper",
        ])
        .unwrap()
        .args;
        assert_eq!(a.suite, suite);
        assert!(a.suite.is_modes());
        assert!(suite::suite_bhsd(a.suite).is_empty());
    }
    for dense in [Suite::Mission, Suite::Ladder, Suite::Full] {
        assert!(!dense.is_modes());
        assert!(!suite::suite_bhsd(dense).is_empty());
    }
}

#[test]
fn the_decode_suite_parses() {
    let a = Cli::try_parse_from(["bench-all", "--suite", "decode"])
        .unwrap()
        .args;
    assert_eq!(a.suite, Suite::Decode);
    assert!(a.suite.is_modes());
    assert_eq!(modes::suite_name(a.suite), "decode");
    let a = Cli::try_parse_from([
        "bench-all",
        "--suite",
        "decode",
        "--causal",
        "on",
        "--anchors",
        "../shared/anchors",
        "--kernels",
        "persistent-hopper,tile64",
    ])
    .unwrap()
    .args;
    assert_eq!(a.causal, CausalSel::On);
    assert_eq!(a.anchors.as_deref(), Some(Path::new("../shared/anchors")));
    // The plan the runner takes for it.
    let p = modes::plan(a.suite, a.seed);
    assert_eq!(p.suite, Suite::Decode);
    assert_eq!(p.cases.len(), 32);
    assert_eq!(a.kv_dtype, None);
}

/// `--kv-dtype e4m3` parses for the decode suite, and any other suite, pass or explicit shape
/// refuses it before a device is opened.
#[test]
fn kv_dtype_e4m3_is_a_decode_suite_option() {
    let parse = |extra: &[&str]| {
        let mut argv = vec![
            "bench-all",
            "--kv-dtype",
            "e4m3",
            "--out-dir",
            "/nonexistent/x",
        ];
        argv.extend(extra);
        Cli::try_parse_from(argv).unwrap().args
    };
    let a = parse(&["--suite", "decode"]);
    assert_eq!(a.kv_dtype, Some(crate::mode_case::KvDtype::E4m3));
    for extra in [
        &["--suite", "ladder"][..],
        &["--suite", "paged"],
        &["--suite", "decode", "--pass", "bwd"],
        &["--suite", "decode", "--shape", "1,8,512,64"],
    ] {
        let e = super::run(parse(extra)).unwrap_err().to_string();
        assert!(
            e.contains("--kv-dtype is a --suite decode option"),
            "{extra:?}: {e}"
        );
    }
    assert!(Cli::try_parse_from(["bench-all", "--kv-dtype", "e5m2"]).is_err());
}

/// Writes `report` as a saved JSON report (`in.json`) into a fresh temporary folder; returns
/// the folder and the JSON file.
fn save_report(tag: &str, report: &impl serde::Serialize) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("in.json");
    std::fs::write(&json, serde_json::to_string(report).unwrap()).unwrap();
    (dir, json)
}

/// Writes an anchor file `name` into `dir/anchors`; returns that folder.
fn write_anchors(dir: &Path, name: &str, text: &str) -> PathBuf {
    let anchors = dir.join("anchors");
    std::fs::create_dir_all(&anchors).unwrap();
    std::fs::write(anchors.join(name), text).unwrap();
    anchors
}

/// Renders the saved report `json` with `bench-all --from-json` (no GPU) into `out`, with
/// `--anchors` where given.
fn render_json(json: &Path, out: &Path, anchors: Option<&Path>) {
    let mut argv = vec![
        "bench-all",
        "--from-json",
        json.to_str().unwrap(),
        "--out-dir",
        out.to_str().unwrap(),
    ];
    if let Some(anchors) = anchors {
        argv.extend(["--anchors", anchors.to_str().unwrap()]);
    }
    run(Cli::try_parse_from(argv).unwrap().args).unwrap();
}

/// Reads a report that `bench-all` wrote back.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> T {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Writes `report` as a saved JSON report into a fresh temporary folder and renders it with
/// `bench-all --from-json` (no GPU); returns the folder and the output folder inside it.
fn render_saved_report(tag: &str, report: &impl serde::Serialize) -> (PathBuf, PathBuf) {
    let (dir, json) = save_report(tag, report);
    let out = dir.join("out");
    render_json(&json, &out, None);
    (dir, out)
}

/// [`render_saved_report`] of a mode suite's report: the JSON written beside the markdown
/// `<stem>.md` reads back as `report`; returns the folders and the markdown.
fn render_saved_mode_report(
    tag: &str,
    report: &modes::ModeReport,
    stem: &str,
) -> (PathBuf, PathBuf, String) {
    let (dir, out) = render_saved_report(tag, report);
    let back: modes::ModeReport = read_json(&out.join(format!("{stem}.json")));
    assert_eq!(&back, report);
    let md = std::fs::read_to_string(out.join(format!("{stem}.md"))).unwrap();
    (dir, out, md)
}

#[test]
fn a_saved_decode_report_renders_without_a_gpu() {
    let (dir, out, md) = render_saved_mode_report(
        "bench-decode-test",
        &decode::tests::fixture(),
        "bench-decode",
    );
    let json = dir.join("in.json");
    assert_contains_all(
        &md,
        &["# flashcore bench-all --suite decode", "### Copy ceiling"],
    );
    // A run saved without anchors gets them when re-rendered with --anchors.
    let mut bare = decode::tests::fixture();
    let d = bare.decode.as_mut().unwrap();
    d.anchors.clear();
    d.anchors_note = Some("no anchors".into());
    std::fs::write(&json, serde_json::to_string(&bare).unwrap()).unwrap();
    let anchors = write_anchors(
        &dir,
        "h100-decode-peers.txt",
        "B=8 Hq=32 Hkv=8 Sq=1 Sk=8192 D=128 bf16 sdpa_cudnn      94.2 us     2850 GB/s\n",
    );
    render_json(&json, &out, Some(&anchors));
    let md = std::fs::read_to_string(out.join("bench-decode.md")).unwrap();
    assert_contains_all(
        &md,
        &[
            "| sdpa_cudnn | 94.20 | 2850 | 202 % | 94.20 | 2850 | 1.00 |",
            "h100-decode-peers.txt (1 number)",
        ],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_backward_passes_parse() {
    let a = Cli::try_parse_from(["bench-all"]).unwrap().args;
    assert_eq!(a.pass, backward::Pass::Fwd);
    let a = Cli::try_parse_from([
        "bench-all",
        "--pass",
        "bwd",
        "--kernels",
        "scalar,persistent-portable",
        "--shape",
        "4,16,2048,64",
        "--case",
        "c1",
        "--fwd-kernel",
        "persistent-hopper",
    ])
    .unwrap()
    .args;
    assert_eq!(a.pass, backward::Pass::Bwd);
    assert_eq!(a.fwd_kernel.as_deref(), Some("persistent-hopper"));
    assert_eq!(a.case_filter, ["c1"]);
    let a = Cli::try_parse_from(["bench-all", "--pass", "fwdbwd"])
        .unwrap()
        .args;
    assert_eq!(a.pass, backward::Pass::Fwdbwd);
    assert!(Cli::try_parse_from(["bench-all", "--pass", "backward"]).is_err());
    let Err(e) = backward_gpu::select_backward_kernels(Some(&["nope".to_string()])) else {
        panic!("an unknown backward kernel was accepted");
    };
    assert!(
        e.to_string().contains("no backward kernel called 'nope'"),
        "{e}"
    );
}

#[test]
fn backward_pass_arguments_are_checked_before_the_gpu() {
    let err = |argv: &[&str]| {
        let a = Cli::try_parse_from(argv).unwrap().args;
        format!("{:#}", run(a).unwrap_err())
    };
    let e = err(&["bench-all", "--pass", "bwd", "--suite", "decode"]);
    assert!(e.contains("dense problems only"), "{e}");
    let e = err(&["bench-all", "--pass", "bwd", "--case", "s123456"]);
    assert!(e.contains("matches no shape"), "{e}");
    let e = err(&["bench-all", "--pass", "fwdbwd", "--kernels", "nope"]);
    assert!(e.contains("no backward kernel called 'nope'"), "{e}");
    let e = err(&["bench-all", "--pass", "bwd", "--fwd-kernel", "nope"]);
    assert!(e.contains("--fwd-kernel"), "{e}");
}

#[test]
fn a_saved_backward_report_renders_without_a_gpu() {
    // Saved where no anchor file was: re-rendered with --anchors, FA3's rows join.
    let mut saved = backward::tests::fixture();
    saved.rows.retain(|r| r.source != Source::Anchor);
    let (dir, json) = save_report("bench-bwd-test", &saved);
    let anchors = write_anchors(
        &dir,
        "h100-backward-peers.txt",
        "# fa3-jax: wall clock around 10 jitted calls
             B=4 H=16 S=2048 D=64 causal=1 fa3-jax   fwd     141.7 us bwd     389.9 us  bwd  220.3 TFLOP/s
",
    );
    let out = dir.join("out");
    render_json(&json, &out, Some(&anchors));
    let md = std::fs::read_to_string(out.join("bench-bwd.md")).unwrap();
    assert!(md.starts_with("# flashcore bench-all --pass bwd"), "{md}");
    assert_contains_all(
        &md,
        &[
            "| 4,16,2048,64 | f16 | yes | fa3-jax (anchor) | 389.9 | 220.3 |",
            "> h100-backward-peers.txt: fa3-jax: wall clock",
        ],
    );
    let back: backward::BackwardReport = read_json(&out.join("bench-bwd.json"));
    assert_eq!(back.pass, backward::Pass::Bwd);
    assert_eq!(
        back.rows
            .iter()
            .filter(|r| r.source == Source::Anchor)
            .count(),
        1
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_saved_mode_report_renders_without_a_gpu() {
    let (dir, _, md) =
        render_saved_mode_report("bench-modes-test", &modes::tests::fixture(), "bench-varlen");
    assert_contains_all(
        &md,
        &["## Comparisons", "| varlen | persistent-hopper | eager |"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unknown_kernels_are_named() {
    let Err(e) = select_kernels(Some(&["nope".to_string()])) else {
        panic!("an unknown name was accepted");
    };
    assert!(e.to_string().contains("compiled in"), "{e}");
    let all = flashcore::kernels();
    let last = all.last().unwrap().name().to_string();
    let first = all[0].name().to_string();
    let picked = select_kernels(Some(&[last.clone(), first.clone()])).unwrap();
    let names: Vec<&str> = picked.iter().map(|k| k.name()).collect();
    if first != last {
        assert_eq!(names, [first.as_str(), last.as_str()]);
    }
}

#[test]
fn a_saved_report_renders_without_a_gpu() {
    let (dir, out) = render_saved_report("bench-all-test", &report::tests::fixture());
    for f in [JSON, MARKDOWN, SVG] {
        assert!(out.join(f).is_file(), "{f}");
    }
    let md = std::fs::read_to_string(out.join(MARKDOWN)).unwrap();
    assert!(md.contains("| 1,8,512,64 | f16 | no | persistent-hopper | graph |"));
    std::fs::remove_dir_all(&dir).unwrap();
}
