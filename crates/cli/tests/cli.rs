//! The built `flashcore` binary on bad input: missing, truncated, garbage or wrong-dtype `.npy`
//! files, shapes that do not fit together, and bad flags each give exactly one line on stderr
//! and exit code 2 — before any device is needed, so these run on a machine without a GPU (and
//! give the same answer on one with a GPU). A run on good files gets past input checking: exit 0
//! with a GPU, exit 1 with a one-line "no CUDA driver/device" without one.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "support/npy_file.rs"]
mod npy_file;
use npy_file::{npy_bytes, npy_file};

const BIN: &str = env!("CARGO_BIN_EXE_flashcore");

struct Outcome {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs the binary with a deadline: a hang is a failure, not a stuck test.
fn flashcore(args: &[&str]) -> Outcome {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the flashcore binary runs");
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("flashcore {args:?} hung for 60 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    Outcome {
        code: out.status.code().expect("exited, not killed by a signal"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Exit 2, one line on stderr that contains `needle`, nothing on stdout.
#[track_caller]
fn assert_input_error(o: &Outcome, needle: &str) {
    assert_eq!(o.code, 2, "stderr: {}", o.stderr);
    assert_eq!(o.stderr.lines().count(), 1, "not one line: {:?}", o.stderr);
    assert!(o.stderr.starts_with("flashcore: "), "{}", o.stderr);
    assert!(
        o.stderr.contains(needle),
        "{:?} should mention {needle:?}",
        o.stderr
    );
    assert!(o.stdout.is_empty(), "stdout: {}", o.stdout);
}

/// A float32 (or float16) file of small values with this shape.
fn write_npy(path: &Path, shape: &[usize], descr: &str) {
    let n: usize = shape.iter().product();
    let data: Vec<u8> = match descr {
        "<f4" => (0..n)
            .flat_map(|i| ((i % 7) as f32 * 0.1).to_le_bytes())
            .collect(),
        "<f2" => (0..n)
            .flat_map(|i| half::f16::from_f32((i % 7) as f32 * 0.1).to_le_bytes())
            .collect(),
        "<f8" => (0..n)
            .flat_map(|i| ((i % 7) as f64 * 0.1).to_le_bytes())
            .collect(),
        "<i4" => (0..n).flat_map(|i| (i as i32).to_le_bytes()).collect(),
        other => panic!("no writer for {other}"),
    };
    std::fs::write(path, npy_file(descr, shape, &data)).unwrap();
}

struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    /// Good q, k, v files: BSHD [2, 16, 4, 8] for q and [2, 16, 2, 8] for k and v (GQA).
    fn new() -> Files {
        let f = Files {
            dir: tempfile::tempdir().unwrap(),
        };
        write_npy(&f.path("q.npy"), &[2, 16, 4, 8], "<f4");
        write_npy(&f.path("k.npy"), &[2, 16, 2, 8], "<f4");
        write_npy(&f.path("v.npy"), &[2, 16, 2, 8], "<f2");
        f
    }
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn s(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
    /// `run` on q.npy k.npy v.npy -> o.npy, with `extra` flags, and any file replaced.
    fn run(&self, replace: &[(&str, &str)], extra: &[&str]) -> Outcome {
        let pick = |flag: &str, default: &str| {
            replace
                .iter()
                .find(|(f, _)| *f == flag)
                .map(|(_, name)| self.s(name))
                .unwrap_or_else(|| self.s(default))
        };
        let (q, k, v, o) = (
            pick("q", "q.npy"),
            pick("k", "k.npy"),
            pick("v", "v.npy"),
            pick("out", "o.npy"),
        );
        let mut args = vec!["run", "--q", &q, "--k", &k, "--v", &v, "--out", &o];
        args.extend_from_slice(extra);
        flashcore(&args)
    }
}

// ---------------------------------------------------------------------------------------------
// Good input gets past input checking

#[test]
fn good_files_reach_the_device() {
    let f = Files::new();
    let o = f.run(&[], &["--causal"]);
    assert_reaches_the_device(&o, &[f.path("o.npy")]);
}

#[test]
fn kernels_lists_every_generation_without_a_device() {
    let o = flashcore(&["kernels"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.contains("| scalar |"), "{}", o.stdout);
}

#[test]
fn devices_says_what_is_missing_in_one_line() {
    let o = flashcore(&["devices"]);
    match o.code {
        0 => {}
        1 => assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr),
        c => panic!("devices exit {c}: {}", o.stderr),
    }
}

#[test]
fn help_and_version_are_not_errors() {
    for args in [&["--help"][..], &["run", "--help"], &["--version"]] {
        let o = flashcore(args);
        assert_eq!(o.code, 0, "{args:?}: {}", o.stderr);
        assert!(!o.stdout.is_empty());
    }
}

// ---------------------------------------------------------------------------------------------
// Bad flags

#[test]
fn no_command_is_one_line_exit_2() {
    assert_input_error(&flashcore(&[]), "command");
}

#[test]
fn unknown_command_or_flag_is_one_line_exit_2() {
    assert_input_error(&flashcore(&["frobnicate"]), "frobnicate");
    let f = Files::new();
    assert_input_error(&f.run(&[], &["--bogus"]), "--bogus");
}

#[test]
fn missing_required_files_are_named() {
    let o = flashcore(&["run", "--q", "q.npy"]);
    assert_input_error(&o, "--k");
    assert!(o.stderr.contains("--out"), "{}", o.stderr);
}

#[test]
fn bad_layout_dtype_scale_and_device_values_are_one_line_exit_2() {
    let f = Files::new();
    assert_input_error(&f.run(&[], &["--layout", "sbhd"]), "layout");
    assert_input_error(&f.run(&[], &["--dtype", "f32"]), "dtype");
    assert_input_error(&f.run(&[], &["--scale", "abc"]), "--scale");
    assert_input_error(&f.run(&[], &["--device=-1"]), "--device");
}

#[test]
fn non_finite_scale_is_exit_2() {
    let f = Files::new();
    for s in ["nan", "inf", "-inf"] {
        assert_input_error(&f.run(&[], &["--scale", s]), "not finite");
    }
}

#[test]
fn zero_and_negative_scales_are_accepted() {
    let f = Files::new();
    for s in ["0", "-0.5", "-3"] {
        let o = f.run(&[], &["--scale", s]);
        assert_ne!(o.code, 2, "--scale {s}: {}", o.stderr);
    }
}

#[test]
fn unknown_kernel_is_reported_before_the_device() {
    let f = Files::new();
    let o = f.run(&[], &["--kernel", "warp-speed"]);
    assert_input_error(&o, "unknown kernel 'warp-speed'");
    assert!(
        o.stderr.contains("scalar"),
        "lists the compiled-in ones: {}",
        o.stderr
    );
}

#[test]
fn output_into_a_missing_directory_is_reported_before_the_device() {
    let f = Files::new();
    assert_input_error(
        &f.run(&[("out", "no/such/dir/o.npy")], &[]),
        "does not exist",
    );
    let lse = f.s("nowhere/lse.npy");
    assert_input_error(&f.run(&[], &["--lse", &lse]), "does not exist");
}

// ---------------------------------------------------------------------------------------------
// Bad files

#[test]
fn missing_file_is_exit_2() {
    let f = Files::new();
    assert_input_error(&f.run(&[("k", "absent.npy")], &[]), "cannot read");
}

#[test]
fn truncated_file_is_exit_2() {
    let f = Files::new();
    let bytes = std::fs::read(f.path("q.npy")).unwrap();
    for cut in [1, 7, bytes.len() / 2, bytes.len() - 130] {
        std::fs::write(f.path("t.npy"), &bytes[..bytes.len() - cut]).unwrap();
        let o = f.run(&[("q", "t.npy")], &[]);
        assert_input_error(&o, "t.npy");
    }
    std::fs::write(f.path("t.npy"), &bytes[..bytes.len() - 1]).unwrap();
    assert_input_error(&f.run(&[("q", "t.npy")], &[]), "truncated");
}

#[test]
fn garbage_and_empty_files_are_exit_2() {
    let f = Files::new();
    std::fs::write(f.path("g.npy"), b"this is not numpy").unwrap();
    assert_input_error(&f.run(&[("v", "g.npy")], &[]), "not a valid .npy");
    std::fs::write(f.path("e.npy"), b"").unwrap();
    assert_input_error(&f.run(&[("v", "e.npy")], &[]), "not a valid .npy");
    // A directory where a file should be.
    std::fs::create_dir(f.path("d.npy")).unwrap();
    assert_input_error(&f.run(&[("q", "d.npy")], &[]), "d.npy");
}

#[test]
fn wrong_dtype_files_are_exit_2() {
    let f = Files::new();
    write_npy(&f.path("f64.npy"), &[2, 16, 4, 8], "<f8");
    assert_input_error(&f.run(&[("q", "f64.npy")], &[]), "<f8");
    write_npy(&f.path("i32.npy"), &[2, 16, 2, 8], "<i4");
    assert_input_error(&f.run(&[("k", "i32.npy")], &[]), "<i4");
}

#[test]
fn header_promising_more_than_the_file_holds_is_exit_2() {
    let f = Files::new();
    let header =
        "{'descr': '<f4', 'fortran_order': False, 'shape': (100000000, 100000000, 1000, 1000), }";
    std::fs::write(f.path("big.npy"), npy_bytes(header, &[0; 64])).unwrap();
    assert_input_error(&f.run(&[("q", "big.npy")], &[]), "too many elements");
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (64, 1024, 1024, 1024), }";
    std::fs::write(f.path("big.npy"), npy_bytes(header, &[0; 64])).unwrap();
    assert_input_error(&f.run(&[("q", "big.npy")], &[]), "truncated");
}

#[test]
fn fortran_order_is_exit_2() {
    let f = Files::new();
    let header = "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 16, 4, 8), }";
    std::fs::write(
        f.path("fo.npy"),
        npy_bytes(header, &[0; 2 * 16 * 4 * 8 * 4]),
    )
    .unwrap();
    assert_input_error(&f.run(&[("q", "fo.npy")], &[]), "Fortran");
}

// ---------------------------------------------------------------------------------------------
// Shapes that do not fit together

/// One of the good q, k, v files swapped for one of a shape that is not 4-D or does not fit
/// the other two: exit 2, saying what is wrong.
#[test]
fn arrays_that_are_not_4_d_or_do_not_fit_are_exit_2() {
    for (file, shape, needle) in [
        ("q", &[16, 4, 8][..], "4-D"),
        ("k", &[1, 2, 16, 4, 8], "4-D"),
        ("v", &[2, 15, 2, 8], "must match"),
        ("q", &[3, 16, 4, 8], "batch"),
        ("q", &[2, 16, 4, 16], "head_dim"),
        // Heads 3 are not a multiple of k's 2.
        ("q", &[2, 16, 3, 8], "multiple"),
    ] {
        let f = Files::new();
        write_npy(&f.path("bad.npy"), shape, "<f4");
        assert_input_error(&f.run(&[(file, "bad.npy")], &[]), needle);
    }
}

#[test]
fn head_dim_zero_is_exit_2() {
    let f = Files::new();
    write_npy(&f.path("q0.npy"), &[2, 16, 4, 0], "<f4");
    write_npy(&f.path("k0.npy"), &[2, 16, 2, 0], "<f4");
    assert_input_error(
        &f.run(&[("q", "q0.npy"), ("k", "k0.npy"), ("v", "k0.npy")], &[]),
        "head_dim is 0",
    );
}

#[test]
fn head_dim_no_generation_takes_is_exit_2_before_the_device() {
    let f = Files::new();
    write_npy(&f.path("q600.npy"), &[1, 4, 2, 600], "<f4");
    write_npy(&f.path("k600.npy"), &[1, 4, 2, 600], "<f4");
    let o = f.run(
        &[("q", "q600.npy"), ("k", "k600.npy"), ("v", "k600.npy")],
        &[],
    );
    assert_input_error(&o, "head_dim 600");
    // A named generation that lacks the head dim (every fast one lacks 63) says so too.
    write_npy(&f.path("q63.npy"), &[1, 4, 2, 63], "<f4");
    write_npy(&f.path("k63.npy"), &[1, 4, 2, 63], "<f4");
    let o = f.run(
        &[("q", "q63.npy"), ("k", "k63.npy"), ("v", "k63.npy")],
        &["--kernel", "vectorized"],
    );
    assert_input_error(&o, "vectorized does not take");
}

#[test]
fn layout_changes_which_axis_is_heads() {
    // The good BSHD files read as BHSD have q heads 16 and k heads 16 but seq 4 vs 2 and the
    // same batch: valid (no error of exit 2).
    let f = Files::new();
    let o = f.run(&[], &["--layout", "bhsd"]);
    assert_ne!(o.code, 2, "{}", o.stderr);
    // And BHSD with heads 4 vs 2 swapped into place is fine too; seq 16 heads 3 is not.
    write_npy(&f.path("q.npy"), &[2, 3, 16, 8], "<f4");
    assert_input_error(&f.run(&[], &["--layout", "bhsd"]), "multiple");
}

// ---------------------------------------------------------------------------------------------
// Inference modes (docs/MODES.md): varlen, KV cache, pages, append, windows, softcap, ALiBi

/// An int32 (`<i4`) or int64 (`<i8`) table file with these values.
fn write_ints(path: &Path, shape: &[usize], values: &[i64], descr: &str) {
    assert_eq!(shape.iter().product::<usize>(), values.len());
    let data: Vec<u8> = match descr {
        "<i4" => values
            .iter()
            .flat_map(|&x| (x as i32).to_le_bytes())
            .collect(),
        "<i8" => values.iter().flat_map(|&x| x.to_le_bytes()).collect(),
        other => panic!("no int writer for {other}"),
    };
    std::fs::write(path, npy_file(descr, shape, &data)).unwrap();
}

/// Good mode files: varlen (3 sequences, packed Q [10, 4, 8], packed K/V [20, 2, 8]) and a
/// paged cache (batch 2, 5 pages of 16 rows, 2 per sequence, one appended row), ALiBi slopes.
fn mode_files() -> Files {
    let f = Files::new();
    write_npy(&f.path("qp.npy"), &[10, 4, 8], "<f4");
    write_npy(&f.path("kp.npy"), &[20, 2, 8], "<f4");
    write_ints(&f.path("cuq.npy"), &[4], &[0, 3, 3, 10], "<i4");
    write_ints(&f.path("cuk.npy"), &[4], &[0, 5, 12, 20], "<i4");
    write_npy(&f.path("q1.npy"), &[2, 1, 4, 8], "<f4");
    write_npy(&f.path("pages.npy"), &[5, 16, 2, 8], "<f4");
    write_ints(&f.path("table.npy"), &[2, 2], &[3, 1, 0, 4], "<i4");
    write_ints(&f.path("used.npy"), &[2], &[20, 5], "<i4");
    write_npy(&f.path("new.npy"), &[2, 1, 2, 8], "<f4");
    write_npy(&f.path("slopes.npy"), &[4], "<f4");
    f
}

impl Files {
    /// `run --layout thd` on the packed files, with `extra` flags.
    fn run_varlen(&self, extra: &[&str]) -> Outcome {
        let (cuq, cuk) = (self.s("cuq.npy"), self.s("cuk.npy"));
        let mut args = vec![
            "--layout",
            "thd",
            "--cu-seqlens-q",
            &cuq,
            "--cu-seqlens-k",
            &cuk,
        ];
        args.extend_from_slice(extra);
        self.run(&[("q", "qp.npy"), ("k", "kp.npy"), ("v", "kp.npy")], &args)
    }
    /// `run` on the paged cache with its table and seqused_k, with `extra` flags.
    fn run_paged(&self, extra: &[&str]) -> Outcome {
        let (table, used) = (self.s("table.npy"), self.s("used.npy"));
        let mut args = vec!["--block-table", &table, "--seqused-k", &used];
        args.extend_from_slice(extra);
        self.run(
            &[("q", "q1.npy"), ("k", "pages.npy"), ("v", "pages.npy")],
            &args,
        )
    }
}

/// Past input checking: exit 0 with the outputs, or exit 1 in one line for lack of a GPU.
#[track_caller]
fn assert_reaches_the_device(o: &Outcome, outputs: &[PathBuf]) {
    match o.code {
        0 => {
            for p in outputs {
                assert!(p.is_file(), "exit 0 but no {}: {}", p.display(), o.stderr)
            }
        }
        1 => {
            assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
            assert!(
                o.stderr.contains("CUDA") || o.stderr.contains("NVRTC"),
                "{}",
                o.stderr
            );
        }
        c => panic!("good files exit {c}: {}", o.stderr),
    }
}

#[test]
fn varlen_files_reach_the_device() {
    let f = mode_files();
    let lse = f.s("lse.npy");
    let o = f.run_varlen(&["--lse", &lse, "--causal"]);
    assert_reaches_the_device(&o, &[f.path("o.npy"), f.path("lse.npy")]);
}

#[test]
fn paged_append_with_window_softcap_and_alibi_reaches_the_device() {
    let f = mode_files();
    let (new, slopes) = (f.s("new.npy"), f.s("slopes.npy"));
    let (kc, vc) = (f.s("kc.npy"), f.s("vc.npy"));
    let o = f.run_paged(&[
        "--k-new",
        &new,
        "--v-new",
        &new,
        "--k-cache-out",
        &kc,
        "--v-cache-out",
        &vc,
        "--causal",
        "--window-left",
        "8",
        "--window-right",
        "-1",
        "--softcap",
        "30",
        "--alibi-slopes",
        &slopes,
    ]);
    assert_reaches_the_device(&o, &[f.path("o.npy"), f.path("kc.npy"), f.path("vc.npy")]);
}

/// Good ranges pass every input check. Where no compiled-in generation takes them yet, the
/// refusal is one line naming them (exit 2, still before the device); once one does, they reach
/// the device.
#[test]
fn mm_prefix_ranges_pass_the_input_checks() {
    let f = mode_files();
    write_ints(&f.path("ranges.npy"), &[2, 1, 2], &[0, 8, 3, 3], "<i4");
    let ranges = f.s("ranges.npy");
    let o = f.run(&[], &["--causal", "--mm-prefix-ranges", &ranges]);
    if o.code == 2 {
        assert_input_error(&o, "lacks mm_prefix_ranges");
    } else {
        assert_reaches_the_device(&o, &[f.path("o.npy")]);
    }
    write_ints(&f.path("ranges.npy"), &[2, 2], &[0, 8, 3, 3], "<i4");
    assert_input_error(
        &f.run(&[], &["--mm-prefix-ranges", &ranges]),
        "--mm-prefix-ranges: expected int32 [batch, n, 2] = [2, n, 2] with n >= 1, got shape [2, 2]",
    );
    write_ints(&f.path("ranges.npy"), &[2, 1, 2], &[-2, 8, 3, 3], "<i4");
    assert_input_error(
        &f.run(&[], &["--mm-prefix-ranges", &ranges]),
        "mm_prefix_ranges: sequence 0, range 0: [-2, 8) starts before key 0",
    );
    write_npy(&f.path("ranges.npy"), &[2, 1, 2], "<f4");
    assert_input_error(&f.run(&[], &["--mm-prefix-ranges", &ranges]), "<f4");
}

#[test]
fn int64_tables_within_range_are_taken() {
    let f = mode_files();
    write_ints(&f.path("cuq.npy"), &[4], &[0, 3, 3, 10], "<i8");
    assert_reaches_the_device(&f.run_varlen(&[]), &[f.path("o.npy")]);
    write_ints(&f.path("cuq.npy"), &[4], &[0, 3, 3, 1 << 32], "<i8");
    assert_input_error(&f.run_varlen(&[]), "does not fit in int32");
}

/// Table contents are checked on the host before any device is opened: exit 2 here, where
/// there is no GPU, not the exit 1 of a failed device init.
#[test]
fn a_bad_table_is_exit_2_before_the_device() {
    let f = mode_files();
    write_ints(&f.path("table.npy"), &[2, 2], &[3, 9, 0, 4], "<i4");
    assert_input_error(
        &f.run_paged(&[]),
        "block_table: sequence 0, entry 1: block 9 is outside 0..5",
    );
    let f = mode_files();
    write_ints(&f.path("used.npy"), &[2], &[33, 5], "<i4");
    assert_input_error(
        &f.run_paged(&[]),
        "seqused_k: sequence 0: 33 used rows exceed its capacity 32",
    );
    let f = mode_files();
    write_ints(&f.path("cuq.npy"), &[4], &[0, 3, 2, 10], "<i4");
    assert_input_error(&f.run_varlen(&[]), "cu_seqlens_q: decreases at entry 2");
    write_ints(&f.path("cuq.npy"), &[4], &[0, 3, 3, 9], "<i4");
    assert_input_error(
        &f.run_varlen(&[]),
        "cu_seqlens_q: ends at 9, but the packed tensor has 10 rows",
    );
    let f = mode_files();
    write_ints(&f.path("cuk.npy"), &[5], &[0, 5, 12, 20, 20], "<i4");
    assert_input_error(
        &f.run_varlen(&[]),
        "--cu-seqlens-k has 5 entries but --cu-seqlens-q describes 3 sequences (so 4 entries)",
    );
    let f = mode_files();
    let slopes = f.s("slopes.npy");
    std::fs::write(
        f.path("slopes.npy"),
        npy_file(
            "<f4",
            &[4],
            &[0.5f32, f32::NAN, 0.5, 0.5]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<u8>>(),
        ),
    )
    .unwrap();
    assert_input_error(
        &f.run(&[], &["--alibi-slopes", &slopes]),
        "alibi_slopes: entry 1 is not finite",
    );
}

#[test]
fn bad_mode_combinations_are_one_line_exit_2() {
    let f = mode_files();
    let (table, used, new, cuq, kc) = (
        f.s("table.npy"),
        f.s("used.npy"),
        f.s("new.npy"),
        f.s("cuq.npy"),
        f.s("kc.npy"),
    );
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--layout", "thd"], "--layout thd needs --cu-seqlens-q"),
        (
            vec!["--cu-seqlens-q", &cuq],
            "--cu-seqlens-q needs --layout thd",
        ),
        (
            vec!["--block-table", &table],
            "--block-table needs --seqused-k",
        ),
        (vec!["--k-new", &new], "--k-new needs --v-new"),
        (vec!["--v-new", &new], "--v-new needs --k-new"),
        (
            vec!["--k-new", &new, "--v-new", &new],
            "--k-new needs --seqused-k",
        ),
        (vec!["--k-cache-out", &kc], "--k-cache-out needs --k-new"),
        (
            vec!["--softcap", "-1"],
            "--softcap -1 must be finite and >= 0",
        ),
        (vec!["--softcap", "inf"], "--softcap inf"),
        (
            vec!["--causal", "--window-right", "2"],
            "--window-right 2 with --causal",
        ),
        (vec!["--window-left", "-2"], "--window-left"),
        (vec!["--window-right", "x"], "--window-right"),
        // The dense BSHD k/v as a contiguous cache of capacity 16.
        (
            vec!["--seqused-k", &used],
            "seqused_k: sequence 0: 20 used rows exceed its capacity 16",
        ),
    ];
    for (extra, needle) in cases {
        let o = f.run(&[], &extra);
        assert_input_error(&o, needle);
    }
    // The flag combination is checked before any file is read.
    let o = f.run(&[("q", "absent.npy")], &["--block-table", &table]);
    assert_input_error(&o, "--block-table needs --seqused-k");
    // Three-row seqused_k for a batch of 2.
    write_ints(&f.path("used3.npy"), &[3], &[1, 2, 3], "<i4");
    let used3 = f.s("used3.npy");
    assert_input_error(
        &f.run(&[], &["--seqused-k", &used3]),
        "--seqused-k has 3 entries but --q has batch 2",
    );
    // Packed K without offsets, offsets for dense K.
    let cuk = f.s("cuk.npy");
    assert_input_error(
        &f.run(&[("k", "kp.npy"), ("v", "kp.npy")], &[]),
        "need --cu-seqlens-k",
    );
    assert_input_error(
        &f.run(&[], &["--cu-seqlens-k", &cuk]),
        "--cu-seqlens-k needs packed --k/--v",
    );
    // A block size the pages cannot have, and appended rows that do not fit.
    write_npy(&f.path("pages24.npy"), &[5, 24, 2, 8], "<f4");
    let o = f.run(
        &[("q", "q1.npy"), ("k", "pages24.npy"), ("v", "pages24.npy")],
        &["--block-table", &table, "--seqused-k", &used],
    );
    assert_input_error(&o, "block_size: 24 must be a multiple of 16");
    write_npy(&f.path("new40.npy"), &[2, 40, 2, 8], "<f4");
    let new40 = f.s("new40.npy");
    assert_input_error(
        &f.run_paged(&["--k-new", &new40, "--v-new", &new40]),
        "k_new: 40 new rows do not fit a cache of capacity 32",
    );
    assert_input_error(
        &f.run_paged(&["--k-new", &new, "--v-new", &new40]),
        "must match",
    );
}

#[test]
fn table_files_of_the_wrong_kind_are_exit_2() {
    let f = mode_files();
    write_npy(&f.path("cuq.npy"), &[4], "<f4");
    assert_input_error(&f.run_varlen(&[]), "<f4");
    let f = mode_files();
    write_ints(&f.path("cuq.npy"), &[2, 2], &[0, 3, 3, 10], "<i4");
    assert_input_error(
        &f.run_varlen(&[]),
        "--cu-seqlens-q: expected a 1-D int32 array",
    );
    let bytes = std::fs::read(f.path("table.npy")).unwrap();
    std::fs::write(f.path("table.npy"), &bytes[..bytes.len() - 2]).unwrap();
    let o = f.run_paged(&[]);
    assert_input_error(&o, "table.npy");
    assert!(o.stderr.contains("truncated"), "{}", o.stderr);
    std::fs::write(f.path("table.npy"), b"garbage").unwrap();
    assert_input_error(&f.run_paged(&[]), "not a valid .npy");
    let f = mode_files();
    write_ints(&f.path("table.npy"), &[4], &[3, 1, 0, 4], "<i4");
    assert_input_error(
        &f.run_paged(&[]),
        "--block-table: expected a 2-D int32 array",
    );
    let f = mode_files();
    write_npy(&f.path("slopes.npy"), &[3], "<f4");
    let slopes = f.s("slopes.npy");
    assert_input_error(
        &f.run(&[], &["--alibi-slopes", &slopes]),
        "--alibi-slopes: expected float32 [heads_q] = [4]",
    );
}

#[test]
fn run_help_documents_every_mode_flag_in_one_line() {
    let o = flashcore(&["run", "--help"]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    for (flag, term) in [
        ("--cu-seqlens-q", "cu_seqlens_q"),
        ("--cu-seqlens-k", "cu_seqlens_k"),
        ("--seqused-k", "seqused_k"),
        ("--block-table", "block_table"),
        ("--alibi-slopes", "alibi_slopes"),
        ("--mm-prefix-ranges", "mm_prefix_ranges"),
        ("--k-new", "flash_attn_with_kvcache"),
        ("--v-new", "flash_attn_with_kvcache"),
        ("--k-cache-out", "--k-new"),
        ("--v-cache-out", "--v-new"),
        ("--window-left", "window_size[0]"),
        ("--window-right", "window_size[1]"),
        ("--softcap", "softcap"),
        ("--layout", "thd"),
        ("--kv-dtype", "e4m3"),
        ("--kv-scales", "batchhead"),
        ("--k-descale", "k_descale"),
        ("--v-descale", "v_descale"),
        ("--q-dtype", "fp8 forward"),
        ("--q-descale", "q_descale"),
    ] {
        let line = o
            .stdout
            .lines()
            .find(|l| l.trim_start().starts_with(flag) && l.contains(&format!("{flag} ")))
            .unwrap_or_else(|| panic!("no help line for {flag}:\n{}", o.stdout));
        assert!(line.contains(term), "{flag}: {line:?} should say {term:?}");
    }
}

#[test]
fn a_named_generation_without_the_modes_is_exit_2_before_the_device() {
    let f = mode_files();
    write_npy(&f.path("qp.npy"), &[10, 4, 64], "<f4");
    write_npy(&f.path("kp.npy"), &[20, 2, 64], "<f4");
    let o = f.run_varlen(&["--kernel", "vectorized"]);
    assert_input_error(&o, "vectorized does not take");
    assert!(o.stderr.contains("varlen"), "{}", o.stderr);
}

// ---------------------------------------------------------------------------------------------
// fp8 (e4m3) KV caches

/// A float32 file of these values.
fn write_floats(path: &Path, shape: &[usize], values: &[f32]) {
    let data: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(path, npy_file("<f4", shape, &data)).unwrap();
}

/// The mode files plus an e4m3 paged cache of head dim 64 (the decode kernel's): `q64.npy`
/// [2, 1, 4, 64], `pages8.npy` as e4m3 bytes (uint8 [5, 16, 2, 64], values 0.5 .. 1.75, no NaN)
/// and `pagesf.npy` as their values (float32), descales per KV head (`descale.npy`, [2]).
fn e4m3_files() -> Files {
    let f = mode_files();
    write_npy(&f.path("q64.npy"), &[2, 1, 4, 64], "<f4");
    let shape = [5, 16, 2, 64];
    let n: usize = shape.iter().product();
    let bytes: Vec<u8> = (0..n).map(|i| 0x30 + (i % 15) as u8).collect();
    std::fs::write(f.path("pages8.npy"), npy_file("|u1", &shape, &bytes)).unwrap();
    let values: Vec<f32> = bytes
        .iter()
        .map(|&b| {
            // 0x30..=0x3e: exponent 6 or 7 (bias 7), mantissa b & 7.
            let e = ((b >> 3) & 0xf) as i32 - 7;
            (1.0 + (b & 7) as f32 / 8.0) * 2f32.powi(e)
        })
        .collect();
    write_floats(&f.path("pagesf.npy"), &shape, &values);
    write_floats(&f.path("descale.npy"), &[2], &[0.5, 0.25]);
    write_floats(&f.path("descale1.npy"), &[1], &[0.5]);
    write_floats(&f.path("badscale.npy"), &[2], &[0.5, -1.0]);
    f
}

impl Files {
    /// `run` on an e4m3 paged cache (`pages`, as bytes or values) with `extra` flags.
    fn run_e4m3(&self, pages: &str, extra: &[&str]) -> Outcome {
        let (table, used) = (self.s("table.npy"), self.s("used.npy"));
        let mut args = vec!["--block-table", &table, "--seqused-k", &used];
        args.extend_from_slice(extra);
        self.run(&[("q", "q64.npy"), ("k", pages), ("v", pages)], &args)
    }
}

#[test]
fn an_e4m3_paged_cache_reaches_the_device_as_bytes_or_values() {
    let f = e4m3_files();
    let d = f.s("descale.npy");
    for (pages, scales) in [("pages8.npy", "head"), ("pagesf.npy", "head")] {
        let o = f.run_e4m3(
            pages,
            &[
                "--dtype",
                "bf16",
                "--kv-dtype",
                "e4m3",
                "--kv-scales",
                scales,
                "--k-descale",
                &d,
                "--v-descale",
                &d,
            ],
        );
        assert_reaches_the_device(&o, &[f.path("o.npy")]);
    }
    // The table shape from the file, with an append quantized into the cache.
    let d1 = f.s("descale1.npy");
    write_npy(&f.path("new64.npy"), &[2, 1, 2, 64], "<f4");
    let new64 = f.s("new64.npy");
    let o = f.run_e4m3(
        "pages8.npy",
        &[
            "--kv-dtype",
            "e4m3",
            "--k-descale",
            &d1,
            "--v-descale",
            &d1,
            "--k-new",
            &new64,
            "--v-new",
            &new64,
        ],
    );
    assert_reaches_the_device(&o, &[f.path("o.npy")]);
}

#[test]
fn e4m3_cache_mistakes_are_exit_2_before_the_device() {
    let f = e4m3_files();
    let (d, d1, bad) = (f.s("descale.npy"), f.s("descale1.npy"), f.s("badscale.npy"));
    let e4m3 = |pages: &str, extra: &[&str]| {
        let mut args = vec!["--kv-dtype", "e4m3"];
        args.extend_from_slice(extra);
        f.run_e4m3(pages, &args)
    };
    assert_input_error(
        &e4m3("pages8.npy", &["--k-descale", &d]),
        "needs --k-descale and --v-descale",
    );
    assert_input_error(
        &f.run_e4m3("pages8.npy", &["--k-descale", &d, "--v-descale", &d]),
        "--k-descale needs --kv-dtype e4m3",
    );
    assert_input_error(
        &f.run_e4m3("pages8.npy", &["--kv-scales", "head"]),
        "--kv-scales needs --kv-dtype e4m3",
    );
    assert_input_error(
        &e4m3("pages8.npy", &["--kv-scales", "heads"]),
        "tensor, head or batchhead",
    );
    // Values that are not e4m3 (0.1, 0.2, ...): nothing is quantized for the user.
    write_npy(&f.path("notfp8.npy"), &[5, 16, 2, 64], "<f4");
    assert_input_error(
        &e4m3("notfp8.npy", &["--k-descale", &d, "--v-descale", &d]),
        "not an e4m3 value",
    );
    // A NaN byte.
    let mut bytes = vec![0x38u8; 5 * 16 * 2 * 64];
    bytes[77] = 0x7f;
    std::fs::write(f.path("nan8.npy"), npy_file("|u1", &[5, 16, 2, 64], &bytes)).unwrap();
    assert_input_error(
        &e4m3("nan8.npy", &["--k-descale", &d, "--v-descale", &d]),
        "--k: element 77",
    );
    assert_input_error(
        &e4m3("pages8.npy", &["--k-descale", &bad, "--v-descale", &d]),
        "k_descale",
    );
    assert_input_error(
        &e4m3("pages8.npy", &["--k-descale", &d1, "--v-descale", &d]),
        "must match",
    );
    assert_input_error(
        &e4m3(
            "pages8.npy",
            &[
                "--kv-scales",
                "tensor",
                "--k-descale",
                &d,
                "--v-descale",
                &d,
            ],
        ),
        "--kv-scales tensor",
    );
    // Head dim 8: e4m3 rows are copied 16 bytes at a time.
    let o = f.run(
        &[("q", "q1.npy"), ("k", "pages.npy"), ("v", "pages.npy")],
        &[
            "--block-table",
            &f.s("table.npy"),
            "--seqused-k",
            &f.s("used.npy"),
            "--kv-dtype",
            "e4m3",
            "--k-descale",
            &d,
            "--v-descale",
            &d,
        ],
    );
    assert_eq!(o.code, 2, "{}", o.stderr);
    assert!(o.stderr.contains("16"), "{}", o.stderr);
}

// ---------------------------------------------------------------------------------------------
// The fp8 forward (e4m3 Q, K and V)

/// Dense fp8 forward files at head dim 128 (the Hopper kernel's): `q8.npy` uint8 e4m3 bytes
/// [1, 16, 4, 128], `kv8.npy` [1, 16, 2, 128] (values 0.5 .. 1.75), `qf.npy` Q's values as
/// float32, `qbad.npy` float32 that are not e4m3 values, descales per KV head (`descale.npy`).
fn fp8_forward_files() -> Files {
    let f = e4m3_files();
    let bytes = |n: usize| -> Vec<u8> { (0..n).map(|i| 0x30 + (i % 15) as u8).collect() };
    let (qs, kvs) = ([1, 16, 4, 128], [1, 16, 2, 128]);
    let qn: usize = qs.iter().product();
    let kvn: usize = kvs.iter().product();
    std::fs::write(f.path("q8.npy"), npy_file("|u1", &qs, &bytes(qn))).unwrap();
    std::fs::write(f.path("kv8.npy"), npy_file("|u1", &kvs, &bytes(kvn))).unwrap();
    // 0x30 + m for m < 8 is 2^-1 (1 + m/8); 0x38 + m is 2^0 (1 + m/8).
    let values: Vec<f32> = bytes(qn)
        .iter()
        .map(|&b| (1.0 + (b & 7) as f32 / 8.0) * if b >= 0x38 { 1.0 } else { 0.5 })
        .collect();
    write_floats(&f.path("qf.npy"), &qs, &values);
    write_npy(&f.path("qbad.npy"), &qs, "<f4");
    f
}

impl Files {
    /// `run` of the fp8 forward on `q` over kv8.npy, K/V descales per KV head, with `extra`.
    fn run_fp8(&self, q: &str, extra: &[&str]) -> Outcome {
        let d = self.s("descale.npy");
        let mut args = vec![
            "--dtype",
            "bf16",
            "--kv-dtype",
            "e4m3",
            "--k-descale",
            &d,
            "--v-descale",
            &d,
        ];
        args.extend_from_slice(extra);
        self.run(&[("q", q), ("k", "kv8.npy"), ("v", "kv8.npy")], &args)
    }
}

#[test]
fn an_fp8_forward_reaches_the_device_with_q_as_bytes_or_values() {
    let f = fp8_forward_files();
    let (d, d1) = (f.s("descale.npy"), f.s("descale1.npy"));
    let lse = f.s("lse.npy");
    for q in ["q8.npy", "qf.npy"] {
        let o = f.run_fp8(
            q,
            &[
                "--q-dtype",
                "e4m3",
                "--q-descale",
                &d,
                "--lse",
                &lse,
                "--causal",
            ],
        );
        assert_reaches_the_device(&o, &[f.path("o.npy"), f.path("lse.npy")]);
    }
    // One factor for the tensor, all three tables.
    let o = f.run(
        &[("q", "q8.npy"), ("k", "kv8.npy"), ("v", "kv8.npy")],
        &[
            "--kv-dtype",
            "e4m3",
            "--q-dtype",
            "e4m3",
            "--k-descale",
            &d1,
            "--v-descale",
            &d1,
            "--q-descale",
            &d1,
        ],
    );
    assert_reaches_the_device(&o, &[f.path("o.npy")]);
}

#[test]
fn fp8_forward_mistakes_are_exit_2_before_the_device() {
    let f = fp8_forward_files();
    let (d, d1, bad) = (f.s("descale.npy"), f.s("descale1.npy"), f.s("badscale.npy"));
    let q8 = |q: &str, descale: &str| f.run_fp8(q, &["--q-dtype", "e4m3", "--q-descale", descale]);
    // Q in e4m3 needs K/V in e4m3.
    assert_input_error(
        &f.run(
            &[("q", "q8.npy")],
            &["--q-dtype", "e4m3", "--q-descale", &d],
        ),
        "--q-dtype e4m3 needs --kv-dtype e4m3",
    );
    assert_input_error(
        &f.run_fp8("q8.npy", &["--q-dtype", "e4m3"]),
        "--q-dtype e4m3 needs --q-descale",
    );
    assert_input_error(
        &f.run_fp8("q64.npy", &["--q-descale", &d]),
        "--q-descale needs --q-dtype e4m3",
    );
    assert_input_error(&f.run_fp8("q8.npy", &["--q-dtype", "e5m2"]), "e5m2");
    // Q's table takes K's shape, and its factors are finite and > 0.
    assert_input_error(
        &q8("q8.npy", &d1),
        "--q-descale has shape [1] but --k-descale has [2]",
    );
    assert_input_error(&q8("q8.npy", &bad), "q_descale");
    write_npy(&f.path("intscale.npy"), &[2], "<i4");
    assert_input_error(&q8("q8.npy", &f.s("intscale.npy")), "intscale.npy");
    // Not e4m3 values (0.1, 0.2, ...): nothing is quantized for the user; a NaN byte neither.
    assert_input_error(&q8("qbad.npy", &d), "--q: element 1");
    let mut bytes = vec![0x38u8; 16 * 4 * 128];
    bytes[5] = 0xff;
    std::fs::write(
        f.path("qnan.npy"),
        npy_file("|u1", &[1, 16, 4, 128], &bytes),
    )
    .unwrap();
    assert_input_error(&q8("qnan.npy", &d), "--q: element 5");
}
