//! `cargo xtask sanitize`: runs this very binary under NVIDIA compute-sanitizer (memcheck,
//! racecheck, synccheck, initcheck) on a small sweep of every generation's forward and every
//! backward kernel, and prints a tool × kernel table of the errors each reports. Exits non-zero
//! if any tool reports an error, a sweep case fails the oracle, or a run does not finish.
//!
//! Each (tool, pass, kernel) is one child process: `compute-sanitizer --tool T --error-exitcode
//! 86 <this binary> sanitize --inner --pass P --kernels K --tool T`; `--pass fwd,bwd` (the
//! default) picks the forward sweep, the backward sweep or both. A backward case runs a forward
//! first for O and LSE (`case::backward_inputs`), so its child also sees that forward. An error is detected both ways: the
//! "ERROR SUMMARY: N errors" line (and racecheck's "RACECHECK SUMMARY ... (N errors") and the
//! exit code 86. The inner run is a handful of small cases (fewer for racecheck, which is slow),
//! each judged by the oracle. Full logs go to `--logs` (default target/sanitize).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use flashcore::{Attention, AttentionProblem, Capabilities, DType, Device, Layout};

use crate::case::{run_backward_case, run_case, BwdOutcome, Case, Outcome};
use crate::verify::Pass;

pub const TOOLS: &[&str] = &["memcheck", "racecheck", "synccheck", "initcheck"];

/// The exit code compute-sanitizer is told to use when it finds an error.
const ERROR_EXITCODE: i32 = 86;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Comma-separated sanitizer tools.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "memcheck,racecheck,synccheck,initcheck"
    )]
    pub tools: Vec<String>,
    /// Comma-separated generation names (default: all compiled in; a name without a backward
    /// kernel only takes part in the forward pass, and the other way round).
    #[arg(long, value_delimiter = ',')]
    pub kernels: Option<Vec<String>>,
    /// Comma-separated passes: fwd (each generation's forward), bwd (each backward kernel).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "fwd,bwd")]
    pub pass: Vec<Pass>,
    /// The compute-sanitizer executable (default: PATH, $CUDA_HOME/bin, /usr/local/cuda/bin).
    #[arg(long)]
    pub sanitizer: Option<PathBuf>,
    /// Seconds one (tool, kernel) run may take.
    #[arg(long, default_value_t = 900)]
    pub timeout: u64,
    /// Where each run's full output is written.
    #[arg(long, default_value = "target/sanitize")]
    pub logs: PathBuf,
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Head dims the sweeps run at, in place of 64 and 128, where the kernel takes them
    /// (racecheck takes the first).
    #[arg(long, value_delimiter = ',')]
    pub head_dims: Option<Vec<usize>>,
    /// Internal: run the small sweep in this process (what each sanitizer run executes).
    #[arg(long, hide = true)]
    pub inner: bool,
    /// Internal: the tool the inner sweep runs under (racecheck gets fewer cases).
    #[arg(long, hide = true)]
    pub tool: Option<String>,
}

pub fn main(args: Args) -> Result<()> {
    if args.inner {
        return inner(&args);
    }
    for t in &args.tools {
        if !TOOLS.contains(&t.as_str()) {
            bail!("unknown sanitizer tool '{t}' (tools: {})", TOOLS.join(", "));
        }
    }
    check_names(&args.kernels)?;
    // (pass, kernel) pairs, each a child per tool.
    let mut runs: Vec<(Pass, String)> = Vec::new();
    for &pass in &args.pass {
        if !runs.iter().any(|r| r.0 == pass) {
            for k in selected(&args.kernels, pass) {
                runs.push((pass, k));
            }
        }
    }
    let rows: Vec<String> = runs.iter().map(|(p, k)| row_label(*p, k)).collect();
    let sanitizer = match &args.sanitizer {
        Some(p) if p.is_file() => p.clone(),
        Some(p) => bail!("--sanitizer {}: no such file", p.display()),
        None => find_sanitizer().context(
            "compute-sanitizer not found in PATH, $CUDA_HOME/bin, /usr/local/cuda/bin or \
             /usr/local/cuda-*/bin: it ships with the CUDA toolkit (not with the driver or the \
             NVRTC wheels); install the toolkit or pass --sanitizer PATH",
        )?,
    };
    let exe = std::env::current_exe().context("finding this binary")?;
    std::fs::create_dir_all(&args.logs)
        .with_context(|| format!("creating {}", args.logs.display()))?;
    println!(
        "sanitize: {} with {}, tools {}, kernels {}, logs in {}",
        exe.display(),
        sanitizer.display(),
        args.tools.join(","),
        rows.join(","),
        args.logs.display()
    );
    let mut cells: Vec<(String, String, Cell)> = Vec::new();
    for tool in &args.tools {
        for ((pass, k), row) in runs.iter().zip(&rows) {
            let t = Instant::now();
            let cell = run_one(&sanitizer, &exe, tool, *pass, k, &args);
            println!(
                "{tool:<10} {row:<26} {}  ({:.0} s)",
                cell.describe(),
                t.elapsed().as_secs_f64()
            );
            cells.push((tool.clone(), row.clone(), cell));
        }
    }
    println!();
    print!("| kernel |");
    for t in &args.tools {
        print!(" {t} |");
    }
    println!();
    print!("|---|");
    for _ in &args.tools {
        print!("---|");
    }
    println!();
    for k in &rows {
        print!("| {k} |");
        for t in &args.tools {
            let c = cells.iter().find(|c| &c.0 == t && &c.1 == k).unwrap();
            print!(" {} |", c.2.short());
        }
        println!();
    }
    let bad: Vec<String> = cells
        .iter()
        .filter(|c| !c.2.ok())
        .map(|c| format!("{} {}: {}", c.0, c.1, c.2.describe()))
        .collect();
    println!();
    if bad.is_empty() {
        println!("sanitize: no errors ({} runs)", cells.len());
        Ok(())
    } else {
        for b in &bad {
            eprintln!("{b}");
        }
        bail!(
            "{} of {} sanitizer runs report problems",
            bad.len(),
            cells.len()
        )
    }
}

/// The compiled-in kernels of a pass: generations (forward) or backward kernels.
fn compiled_in(pass: Pass) -> Vec<String> {
    match pass {
        Pass::Fwd => flashcore::kernels()
            .iter()
            .map(|k| k.name().to_string())
            .collect(),
        Pass::Bwd => flashcore::backward_kernels()
            .iter()
            .map(|k| k.name().to_string())
            .collect(),
    }
}

/// Every `--kernels` name is a forward or a backward kernel.
fn check_names(names: &Option<Vec<String>>) -> Result<()> {
    let mut all = compiled_in(Pass::Fwd);
    for k in compiled_in(Pass::Bwd) {
        if !all.contains(&k) {
            all.push(k);
        }
    }
    for n in names.iter().flatten() {
        if !all.contains(n) {
            bail!("unknown kernel '{n}' (compiled in: {})", all.join(", "));
        }
    }
    Ok(())
}

/// The kernels of `pass` that `--kernels` names (all of them without it), in its order.
fn selected(names: &Option<Vec<String>>, pass: Pass) -> Vec<String> {
    let all = compiled_in(pass);
    match names {
        None => all,
        Some(v) => v.iter().filter(|n| all.contains(n)).cloned().collect(),
    }
}

fn pass_name(pass: Pass) -> &'static str {
    match pass {
        Pass::Fwd => "fwd",
        Pass::Bwd => "bwd",
    }
}

/// The table row (and log name part) of a kernel in a pass: "scalar", "scalar (bwd)".
fn row_label(pass: Pass, kernel: &str) -> String {
    match pass {
        Pass::Fwd => kernel.to_string(),
        Pass::Bwd => format!("{kernel} (bwd)"),
    }
}

/// compute-sanitizer in PATH, $CUDA_HOME/$CUDA_PATH, /usr/local/cuda, /usr/local/cuda-*.
pub fn find_sanitizer() -> Option<PathBuf> {
    let name = "compute-sanitizer";
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Some(p) = std::env::var_os(var) {
            dirs.push(PathBuf::from(&p).join("bin"));
            dirs.push(PathBuf::from(&p).join("compute-sanitizer"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/bin"));
    dirs.push(PathBuf::from("/usr/local/cuda/compute-sanitizer"));
    if let Ok(rd) = std::fs::read_dir("/usr/local") {
        let mut extra: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("cuda-"))
            })
            .collect();
        extra.sort();
        extra.reverse();
        for p in extra {
            dirs.push(p.join("bin"));
            dirs.push(p.join("compute-sanitizer"));
        }
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// What one (tool, kernel) run found.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    /// The sanitizer ran to its summary: `errors` (from the summary and/or the exit code) and
    /// the inner sweep's own tally.
    Ran {
        errors: u64,
        exit_code: Option<i32>,
        sweep: Option<Sweep>,
    },
    TimedOut(u64),
    NoSummary {
        exit_code: Option<i32>,
        tail: String,
    },
    Failed(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sweep {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

impl Cell {
    fn ok(&self) -> bool {
        matches!(self, Cell::Ran { errors: 0, sweep: Some(s), exit_code: Some(0) } if s.failed == 0)
    }

    fn short(&self) -> String {
        match self {
            Cell::Ran {
                errors,
                sweep,
                exit_code,
            } => {
                let mut s = if *errors == 0 && *exit_code != Some(ERROR_EXITCODE) {
                    "0 errors".to_string()
                } else {
                    format!("**{errors} errors**")
                };
                match sweep {
                    Some(sw) if sw.failed > 0 => {
                        s.push_str(&format!(", **{} cases fail**", sw.failed))
                    }
                    Some(sw) if sw.passed == 0 => s.push_str(" (all skipped)"),
                    Some(sw) => s.push_str(&format!(" ({} cases)", sw.passed)),
                    None => s.push_str(", **no sweep tally**"),
                }
                s
            }
            Cell::TimedOut(s) => format!("**timeout {s} s**"),
            Cell::NoSummary { .. } => "**no summary**".into(),
            Cell::Failed(_) => "**could not run**".into(),
        }
    }

    fn describe(&self) -> String {
        match self {
            Cell::Ran { exit_code, .. } if !self.ok() => {
                format!("{} (exit {exit_code:?})", self.short().replace("**", ""))
            }
            Cell::Ran { .. } => self.short(),
            Cell::TimedOut(s) => format!("TIMEOUT after {s} s"),
            Cell::NoSummary { exit_code, tail } => {
                format!("no ERROR SUMMARY in the output (exit {exit_code:?}): {tail}")
            }
            Cell::Failed(m) => format!("could not run: {m}"),
        }
    }
}

/// compute-sanitizer's arguments for one (tool, pass, kernel) child, this binary's path first.
fn child_args(
    exe: &Path,
    tool: &str,
    pass: Pass,
    kernel: &str,
    device: usize,
    head_dims: Option<&[usize]>,
) -> Vec<String> {
    let mut v: Vec<String> = ["--tool", tool, "--error-exitcode"]
        .into_iter()
        .map(String::from)
        .collect();
    v.push(ERROR_EXITCODE.to_string());
    v.extend(["--print-limit", "50"].map(String::from));
    if tool == "memcheck" {
        v.extend(["--leak-check", "full"].map(String::from));
    }
    v.push(exe.display().to_string());
    v.extend(
        [
            "sanitize",
            "--inner",
            "--pass",
            pass_name(pass),
            "--kernels",
            kernel,
            "--tool",
            tool,
        ]
        .map(String::from),
    );
    v.extend(["--device".to_string(), device.to_string()]);
    if let Some(dims) = head_dims {
        let dims: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
        v.extend(["--head-dims".to_string(), dims.join(",")]);
    }
    v
}

fn run_one(
    sanitizer: &Path,
    exe: &Path,
    tool: &str,
    pass: Pass,
    kernel: &str,
    args: &Args,
) -> Cell {
    let mut cmd = Command::new(sanitizer);
    cmd.args(child_args(
        exe,
        tool,
        pass,
        kernel,
        args.device,
        args.head_dims.as_deref(),
    ))
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return Cell::Failed(format!("spawning {}: {e}", sanitizer.display())),
    };
    // Drain both pipes on their own threads so a chatty child cannot block on a full pipe.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if start.elapsed() > Duration::from_secs(args.timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => return Cell::Failed(format!("waiting for the sanitizer: {e}")),
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&t_out.join().unwrap_or_default()),
        String::from_utf8_lossy(&t_err.join().unwrap_or_default())
    );
    let log = match pass {
        Pass::Fwd => args.logs.join(format!("{tool}-{kernel}.log")),
        Pass::Bwd => args.logs.join(format!("{tool}-{kernel}-bwd.log")),
    };
    let _ = std::fs::write(&log, &text);
    let Some(status) = status else {
        return Cell::TimedOut(args.timeout);
    };
    classify(&text, status.code())
}

/// Reads a run's output and exit code into a cell (separate from the process, for tests).
pub fn classify(text: &str, exit_code: Option<i32>) -> Cell {
    let summary = parse_error_summary(text);
    let sweep = parse_sweep(text);
    match summary {
        Some(n) => {
            // The exit code is the second witness: 86 means the sanitizer counted errors even
            // if the summary line was not parsed as such.
            let errors = if exit_code == Some(ERROR_EXITCODE) {
                n.max(1)
            } else {
                n
            };
            Cell::Ran {
                errors,
                exit_code,
                sweep,
            }
        }
        None if exit_code == Some(ERROR_EXITCODE) => Cell::Ran {
            errors: 1,
            exit_code,
            sweep,
        },
        None => {
            let tail: Vec<&str> = text.lines().rev().take(3).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            Cell::NoSummary {
                exit_code,
                tail: tail.join(" | "),
            }
        }
    }
}

/// Errors reported: the largest N of "ERROR SUMMARY: N error(s)" and racecheck's
/// "RACECHECK SUMMARY: H hazards displayed (N errors, W warnings)". None if neither appears.
pub fn parse_error_summary(text: &str) -> Option<u64> {
    let mut found: Option<u64> = None;
    for line in text.lines() {
        let mut n = None;
        if let Some(i) = line.find("ERROR SUMMARY:") {
            n = leading_number(&line[i + "ERROR SUMMARY:".len()..]);
        }
        if line.contains("RACECHECK SUMMARY:") {
            if let Some(i) = line.find('(') {
                n = n.max(leading_number(&line[i + 1..]));
            }
        }
        if let Some(n) = n {
            found = Some(found.map_or(n, |f| f.max(n)));
        }
    }
    found
}

fn leading_number(s: &str) -> Option<u64> {
    let s = s.trim_start();
    let digits: String = s.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// The inner sweep's last "sanitize-sweep: P passed, F failed, S skipped" line.
pub fn parse_sweep(text: &str) -> Option<Sweep> {
    let line = text.lines().rev().find(|l| l.contains("sanitize-sweep:"))?;
    let rest = &line[line.find("sanitize-sweep:")? + "sanitize-sweep:".len()..];
    let num = |word: &str| -> Option<usize> {
        let i = rest.find(word)?;
        let before = rest[..i].trim_end();
        let start = before
            .rfind(|c: char| !c.is_ascii_digit())
            .map_or(0, |j| j + 1);
        before[start..].parse().ok()
    };
    Some(Sweep {
        passed: num("passed")?,
        failed: num("failed")?,
        skipped: num("skipped")?,
    })
}

/// A sweep's shape: (batch, hq, hkv, sq, sk, causal, dtype index, layout).
type SweepShape = (usize, usize, usize, usize, usize, bool, usize, Layout);

/// The case of a sweep's `shape` at head dim `d`, in the dtype and layout the sweep picked for
/// it, with data from `data_seed`.
fn sweep_case(shape: &SweepShape, d: usize, dtype: DType, layout: Layout, data_seed: u64) -> Case {
    let &(b, hq, hkv, sq, sk, causal, _, _) = shape;
    Case {
        problem: AttentionProblem::new(b, hq, sq, d)
            .with_kv(hkv, sk)
            .with_causal(causal)
            .with_dtype(dtype)
            .with_layout(layout),
        data_seed,
    }
}

/// The small sweep: a few shapes that reach every code path (single row and key, tails at
/// tile sizes ± 1, causal with seq_q above and below seq_k, GQA, no keys, both dtypes and
/// layouts), at one or two head dims. Racecheck gets the first six shapes at one head dim.
pub fn sweep_cases(k: &dyn Attention, tool: &str, head_dims: Option<&[usize]>) -> Vec<Case> {
    let caps = k.capabilities();
    let race = tool == "racecheck";
    let dims = sweep_dims(&caps, race, head_dims);
    let gqa = caps.gqa;
    let c = caps.causal;
    let mut shapes: Vec<SweepShape> = vec![
        (1, 2, if gqa { 1 } else { 2 }, 65, 130, c, 0, Layout::Bshd),
        (1, 2, 2, 130, 65, c, 1, Layout::Bhsd),
        (1, 2, 2, 1, 1, false, 0, Layout::Bshd),
        (1, 2, 2, 33, 0, false, 1, Layout::Bhsd),
        (2, 4, if gqa { 2 } else { 4 }, 129, 129, c, 0, Layout::Bhsd),
        (1, 2, 2, 17, 200, false, 1, Layout::Bshd),
        (1, 2, 2, 200, 17, false, 0, Layout::Bhsd),
        (2, 4, if gqa { 1 } else { 4 }, 257, 257, c, 1, Layout::Bshd),
        (1, 2, 2, 300, 1000, c, 0, Layout::Bhsd),
    ];
    if race {
        shapes.truncate(6);
    }
    let mut out = Vec::new();
    for &d in &dims {
        for (i, shape) in shapes.iter().enumerate() {
            let (dt, layout) = (shape.6, shape.7);
            let dtype = if caps.dtypes.contains(&DType::ALL[dt % 2]) {
                DType::ALL[dt % 2]
            } else {
                caps.dtypes[0]
            };
            out.push(sweep_case(shape, d, dtype, layout, 500 + i as u64));
        }
        // Inference modes (docs/MODES.md) for kernels that take them: varlen with empty and
        // one-row sequences, paged and contiguous caches with appended rows, windows, softcap
        // and ALiBi; the same lines as verify's fixed mode cases. Then the batch-invariant
        // plans: decode in fixed key chunks (two here, so the combine runs), a varlen batch
        // whose short sequences are routed to the decode kernel beside the persistent one (on
        // the Hopper path, its key-split build), one whose sequences straddle the key split's
        // 128 rows at 32 heads (a launch of each build), and a paged cache whose few query rows
        // take the key split. Last, mm_prefix_ranges: prefill over a paged cache, a decode step.
        if caps.modes != flashcore::ModeSupport::NONE {
            let lines: &[&str] = &[
                "b=3,hq=4,hkv=2,sq=1,sk=300,causal=1,cache=paged,bs=16,append=1",
                "b=2,hq=2,hkv=1,sq=7,sk=200,causal=1,cache=contig,append=3",
                "b=4,hq=2,hkv=2,sq=130,sk=130,causal=1,varlen=1",
                "b=3,hq=8,hkv=2,sq=1,sk=4500,cache=paged,bs=64,bi=1",
                "b=6,hq=8,hkv=2,sq=40,sk=300,causal=1,varlen=1,bi=1",
                "b=3,hq=32,hkv=8,sq=200,sk=50,causal=1,varlen=1,bi=1",
                "b=3,hq=8,hkv=2,sq=100,sk=400,causal=1,cache=paged,bs=16,bi=1",
                "b=3,hq=2,hkv=1,sq=65,sk=200,varlen=1,cache=paged,bs=48",
                "b=2,hq=2,sq=129,sk=257,wl=64,wr=0,softcap=30,alibi=batch",
                "b=3,hq=4,hkv=2,sq=65,sk=200,causal=1,wl=16,varlen=1,cache=paged,bs=16,mm=2",
                "b=3,hq=8,hkv=2,sq=1,sk=300,causal=1,wl=32,cache=paged,bs=16,append=1,mm=2",
            ];
            out.extend(line_cases(lines, if race { 5 } else { lines.len() }, |i| {
                format!(
                    "d={d},dtype={},seed={}",
                    caps.dtypes[i % caps.dtypes.len()],
                    700 + i
                )
            }));
        }
        // e4m3 KV caches (the decode kernel's FC_KV_E4M3 builds) where the kernel reads them:
        // a paged decode step with an append quantized into the cache, speculative decoding on a
        // contiguous cache with a softcap and split keys, and chunked prefill on packed K/V
        // under a window, one descale shape each.
        if caps.modes.kv_fp8 {
            let lines: &[&str] = &[
                "b=3,hq=8,hkv=2,sq=1,sk=300,causal=1,cache=paged,bs=16,append=1,fp8=head",
                "b=2,hq=4,hkv=1,sq=4,sk=2000,causal=1,cache=contig,softcap=30,fp8=batchhead",
                "b=3,hq=2,hkv=1,sq=65,sk=200,causal=1,wl=32,varlen=1,fp8=tensor",
            ];
            out.extend(line_cases(lines, if race { 1 } else { lines.len() }, |i| {
                format!(
                    "d={d},dtype={},seed={}",
                    caps.dtypes[i % caps.dtypes.len()],
                    720 + i
                )
            }));
        }
        // e4m3 Q, K and V (the Hopper e4m3 build and V's transpose): GQA under causal masking
        // with ragged tails, and MQA with keys past one 128-key tile of the transposed copy.
        if caps.modes.q_fp8 {
            let lines: &[&str] = &[
                "b=2,hq=4,hkv=2,sq=200,sk=333,causal=1,fp8=batchhead,qfp8=1",
                "b=1,hq=3,hkv=1,sq=129,sk=700,fp8=tensor,qfp8=1",
            ];
            out.extend(line_cases(lines, if race { 1 } else { lines.len() }, |i| {
                format!("d={d},dtype=bf16,seed={}", 740 + i)
            }));
        }
    }
    // V's own head dim (192 / 128, DeepSeek's) where the kernel takes it: dense prefill with
    // GQA and ragged tails, a paged decode step (the padded decode kernel), and packed
    // sequences under a window with softcap (the modes build at V's width).
    let wants_192 = head_dims.is_none_or(|only| only.contains(&192));
    if caps.distinct_head_dim_v && caps.head_dims.contains(192) && wants_192 {
        let lines: &[&str] = &[
            "b=2,hq=4,hkv=2,sq=130,sk=257,causal=1",
            "b=3,hq=8,hkv=2,sq=1,sk=300,causal=1,cache=paged,bs=16",
            "b=3,hq=2,hkv=1,sq=65,sk=200,wl=32,softcap=30,varlen=1",
        ];
        let cases = line_cases(lines, if race { 1 } else { lines.len() }, |i| {
            format!(
                "d=192,dv=128,dtype={},seed={}",
                caps.dtypes[i % caps.dtypes.len()],
                760 + i
            )
        });
        out.extend(cases.filter(|c| caps.modes.missing(&c.problem.modes).is_none()));
    }
    out
}

/// The first `take` of a sweep's fixed case lines, each completed by `rest(i)` (head dim,
/// dtype, seed).
fn line_cases<'a>(
    lines: &'a [&str],
    take: usize,
    rest: impl Fn(usize) -> String + 'a,
) -> impl Iterator<Item = Case> + 'a {
    lines.iter().take(take).enumerate().map(move |(i, line)| {
        Case::parse(&format!("{line},{}", rest(i)))
            .unwrap_or_else(|e| panic!("sanitize line {line}: {e}"))
    })
}

/// Head dims of a sweep: those asked for (`--head-dims`), else 64 and 128, where taken; else the
/// first representative; racecheck (slow) one.
fn sweep_dims(caps: &Capabilities, race: bool, head_dims: Option<&[usize]>) -> Vec<usize> {
    let mut dims: Vec<usize> = head_dims
        .unwrap_or(&[64, 128])
        .iter()
        .copied()
        .filter(|d| caps.head_dims.contains(*d))
        .collect();
    if dims.is_empty() {
        dims = crate::check_kernels::representative_head_dims(&caps.head_dims);
        dims.truncate(1);
    }
    if race {
        dims.truncate(1);
    }
    dims
}

/// The small backward sweep: GQA and causal with tails past tile sizes, causal with seq_q above
/// seq_k (rows with no key) and below it, a single row and key, no keys, both dtypes and
/// layouts. Racecheck gets the first five shapes at one head dim. A kernel that takes the modes
/// of the scores also gets them: a causal left window with softcap and ALiBi per (batch, head)
/// over rows with no key, and (not for racecheck) a window on both sides with ALiBi per head;
/// one that takes varlen, a varlen batch with a causal window and softcap, and (not for
/// racecheck) a plain one.
pub fn backward_sweep_cases(
    caps: &Capabilities,
    tool: &str,
    head_dims: Option<&[usize]>,
) -> Vec<Case> {
    let race = tool == "racecheck";
    let (gqa, c) = (caps.gqa, caps.causal);
    let kv = |hq: usize, group: usize| if gqa { hq / group } else { hq };
    let mut shapes: Vec<SweepShape> = vec![
        (1, 4, kv(4, 2), 65, 130, c, 0, Layout::Bshd),
        (1, 4, kv(4, 4), 130, 65, c, 1, Layout::Bhsd),
        (1, 2, 2, 1, 1, false, 0, Layout::Bshd),
        (1, 2, kv(2, 2), 33, 0, c, 1, Layout::Bhsd),
        (2, 4, kv(4, 2), 129, 129, c, 0, Layout::Bhsd),
        (1, 2, 2, 17, 200, false, 1, Layout::Bshd),
        (2, 4, kv(4, 2), 257, 193, c, 1, Layout::Bshd),
    ];
    // Varlen lines too where the kernel takes it (racecheck: the first): lengths drawn from the
    // seed up to the shape's, empty sequences among them.
    let modes = [
        (shapes[1], "wl=20,softcap=30,alibi=batch"),
        (shapes[6], "varlen=1,wl=70,softcap=5"),
        (shapes[5], "wl=40,wr=8,alibi=head"),
        (shapes[4], "varlen=1"),
    ];
    if race {
        shapes.truncate(5);
    }
    let mut out = Vec::new();
    for d in sweep_dims(caps, race, head_dims) {
        for (i, shape) in shapes.iter().enumerate() {
            let (dt, layout) = (shape.6, shape.7);
            let dtype = caps.dtypes[dt % caps.dtypes.len()];
            let layout = if caps.layouts.contains(&layout) {
                layout
            } else {
                caps.layouts[0]
            };
            out.push(sweep_case(shape, d, dtype, layout, 800 + i as u64));
        }
        for (i, (shape, keys)) in modes.iter().take(if race { 2 } else { 4 }).enumerate() {
            let case = sweep_case(
                shape,
                d,
                caps.dtypes[i % caps.dtypes.len()],
                caps.layouts[0],
                820 + i as u64,
            );
            let case =
                Case::parse(&format!("{},{keys}", case.to_arg())).expect("a mode line parses");
            if caps.modes.missing(&case.problem.modes).is_none() {
                out.push(case);
            }
        }
    }
    out
}

/// One case's line and tally in the inner sweep.
#[derive(Default)]
struct Tally {
    passed: usize,
    failed: usize,
    skipped: usize,
}

impl Tally {
    fn pass(&mut self, label: &str, case: &Case, ratio: f64, t: Instant) {
        self.passed += 1;
        println!(
            "sanitize-case {label} {}: pass ratio {ratio:.3} ({:.1} s)",
            case.to_arg(),
            t.elapsed().as_secs_f64()
        );
    }

    fn skip(&mut self, label: &str, case: &Case, why: &str) {
        self.skipped += 1;
        println!("sanitize-case {label} {}: skipped ({why})", case.to_arg());
    }

    fn fail(&mut self, label: &str, case: &Case, why: &str) {
        self.failed += 1;
        println!("sanitize-case {label} {}: FAIL {why}", case.to_arg());
    }
}

fn inner(args: &Args) -> Result<()> {
    check_names(&args.kernels)?;
    let tool = args.tool.clone().unwrap_or_default();
    let dev = Device::open(args.device).context("opening the device")?;
    let mut tally = Tally::default();
    if args.pass.contains(&Pass::Fwd) {
        inner_forward(args, &tool, &dev, &mut tally);
    }
    if args.pass.contains(&Pass::Bwd) {
        let names = selected(&args.kernels, Pass::Bwd);
        for k in flashcore::backward_kernels()
            .into_iter()
            .filter(|k| names.iter().any(|n| n == k.name()))
        {
            let label = row_label(Pass::Bwd, k.name());
            for case in backward_sweep_cases(&k.capabilities(), &tool, args.head_dims.as_deref()) {
                let t = Instant::now();
                match run_backward_case(k.as_ref(), &dev, &case) {
                    BwdOutcome::Pass(v) => tally.pass(&label, &case, v.ratio, t),
                    BwdOutcome::Skipped(r) => tally.skip(&label, &case, &r),
                    BwdOutcome::Fail(m, _) => tally.fail(&label, &case, &m),
                }
            }
        }
    }
    let Tally {
        passed,
        failed,
        skipped,
    } = tally;
    println!("sanitize-sweep: {passed} passed, {failed} failed, {skipped} skipped");
    if failed > 0 {
        bail!("{failed} sweep case(s) failed");
    }
    Ok(())
}

fn inner_forward(args: &Args, tool: &str, dev: &Device, tally: &mut Tally) {
    let names = selected(&args.kernels, Pass::Fwd);
    for k in flashcore::kernels()
        .into_iter()
        .filter(|k| names.iter().any(|n| n == k.name()))
    {
        for case in sweep_cases(k.as_ref(), tool, args.head_dims.as_deref()) {
            let t = Instant::now();
            match run_case(k.as_ref(), dev, &case) {
                Outcome::Pass(v) => tally.pass(k.name(), &case, v.ratio, t),
                Outcome::Skipped(r) => tally.skip(k.name(), &case, &r),
                Outcome::Fail(m, _) => tally.fail(k.name(), &case, &m),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLEAN: &str = "\
========= COMPUTE-SANITIZER
sanitize-case scalar b=1: pass ratio 0.100 (0.1 s)
sanitize-sweep: 14 passed, 0 failed, 0 skipped
========= ERROR SUMMARY: 0 errors
";

    const MEMCHECK_ERRORS: &str = "\
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 2 bytes
=========     at attention_tile64+0x1a30
sanitize-sweep: 14 passed, 0 failed, 0 skipped
========= ERROR SUMMARY: 3 errors
";

    const RACECHECK: &str = "\
========= COMPUTE-SANITIZER
sanitize-sweep: 4 passed, 0 failed, 0 skipped
========= RACECHECK SUMMARY: 5 hazards displayed (2 errors, 3 warnings)
";

    #[test]
    fn summaries_parse() {
        assert_eq!(parse_error_summary(CLEAN), Some(0));
        assert_eq!(parse_error_summary(MEMCHECK_ERRORS), Some(3));
        assert_eq!(parse_error_summary(RACECHECK), Some(2));
        assert_eq!(
            parse_error_summary("========= ERROR SUMMARY: 1 error"),
            Some(1)
        );
        assert_eq!(parse_error_summary("nothing here"), None);
        assert_eq!(
            parse_sweep(CLEAN),
            Some(Sweep {
                passed: 14,
                failed: 0,
                skipped: 0
            })
        );
        assert_eq!(parse_sweep("no tally"), None);
    }

    #[test]
    fn cells_need_a_summary_zero_errors_exit_0_and_a_clean_sweep() {
        assert!(classify(CLEAN, Some(0)).ok());
        let c = classify(MEMCHECK_ERRORS, Some(ERROR_EXITCODE));
        assert!(!c.ok());
        assert!(c.describe().contains("3 errors"), "{}", c.describe());
        // Errors by exit code alone still count.
        let c = classify(
            "sanitize-sweep: 1 passed, 0 failed, 0 skipped\n",
            Some(ERROR_EXITCODE),
        );
        assert!(!c.ok());
        // A summary of 0 but the error exit code: an error.
        assert!(!classify(CLEAN, Some(ERROR_EXITCODE)).ok());
        // No summary (sanitizer did not start, crashed): not ok, and says why.
        let c = classify("compute-sanitizer: error: no CUDA device", Some(1));
        assert!(matches!(c, Cell::NoSummary { .. }), "{c:?}");
        assert!(c.describe().contains("no CUDA device"));
        // Oracle failures inside the sweep: not ok even with 0 sanitizer errors.
        let c = classify(&CLEAN.replace("0 failed", "2 failed"), Some(1));
        assert!(!c.ok());
        assert!(c.short().contains("2 cases fail"));
        // Racecheck errors.
        assert!(!classify(RACECHECK, Some(ERROR_EXITCODE)).ok());
    }

    #[test]
    fn every_generation_has_a_small_sweep() {
        for k in flashcore::kernels() {
            let full = sweep_cases(k.as_ref(), "memcheck", None);
            let race = sweep_cases(k.as_ref(), "racecheck", None);
            assert!(
                !full.is_empty() && !race.is_empty() && race.len() < full.len(),
                "{}",
                k.name()
            );
            for c in full.iter().chain(&race) {
                c.problem.validate().unwrap();
                let p = &c.problem;
                assert!(p.batch * p.heads_q * p.seq_q * p.seq_k <= 1 << 20);
            }
            assert!(full.iter().any(|c| c.problem.seq_k == 0));
            // e4m3 caches exactly where the kernel reads them.
            let e4m3 = full
                .iter()
                .filter(|c| c.problem.modes.kv_fp8.is_some())
                .count();
            assert_eq!(e4m3 > 0, k.capabilities().modes.kv_fp8, "{}", k.name());
            let e4m3_q = full.iter().filter(|c| c.problem.modes.q_fp8).count();
            assert_eq!(e4m3_q > 0, k.capabilities().modes.q_fp8, "{}", k.name());
            // V's own head dim exactly where the kernel takes it, and planned there.
            let distinct_v: Vec<_> = full
                .iter()
                .filter(|c| c.problem.has_distinct_head_dim_v())
                .collect();
            assert_eq!(
                !distinct_v.is_empty(),
                k.capabilities().distinct_head_dim_v,
                "{}",
                k.name()
            );
            for c in &distinct_v {
                let h100 = flashcore::DeviceInfo::synthetic_h100();
                k.plan(&c.problem, &h100)
                    .unwrap_or_else(|e| panic!("{} {}: {e}", k.name(), c.to_arg()));
            }
            assert!(
                full.iter()
                    .any(|c| c.problem.seq_q > c.problem.seq_k && c.problem.causal)
                    || !k.capabilities().causal
            );
        }
    }

    #[test]
    fn every_backward_kernel_has_a_small_sweep_with_gqa_causal_and_tails() {
        let kernels = flashcore::backward_kernels();
        assert!(!kernels.is_empty());
        for k in kernels {
            let caps = k.capabilities();
            let full = backward_sweep_cases(&caps, "memcheck", None);
            let race = backward_sweep_cases(&caps, "racecheck", None);
            assert!(!race.is_empty() && race.len() < full.len(), "{}", k.name());
            for c in full.iter().chain(&race) {
                flashcore::backward::validate_backward(&c.problem).unwrap();
                let p = &c.problem;
                assert!(p.batch * p.heads_q * p.seq_q * p.seq_k <= 1 << 20);
            }
            let p = |c: &Case| c.problem.clone();
            // GQA and causal together, with lengths that are no multiple of a tile.
            assert!(full
                .iter()
                .map(p)
                .any(|p| (p.heads_q > p.heads_kv || !caps.gqa)
                    && (p.causal || !caps.causal)
                    && p.seq_q % 16 != 0
                    && p.seq_k % 16 != 0));
            assert!(full.iter().map(p).any(|p| p.seq_k == 0));
            assert!(full.iter().map(p).any(|p| p.seq_q > p.seq_k && p.causal) || !caps.causal);
            assert!(race.iter().map(p).any(|p| p.heads_q > p.heads_kv) || !caps.gqa);
            // The modes of the scores where the kernel claims them, causal with no-key rows too.
            let claims = caps.modes.missing(&flashcore::Modes {
                window_left: Some(1),
                softcap: Some(1.0),
                alibi: Some(flashcore::AlibiSlopes::PerHead),
                ..flashcore::Modes::default()
            });
            let modes = full.iter().filter(|c| !c.problem.modes.is_dense()).count();
            assert_eq!(modes > 0, claims.is_none(), "{}", k.name());
            if claims.is_none() {
                assert!(full.iter().map(p).any(|p| p.causal
                    && p.seq_q > p.seq_k
                    && p.modes.window_left.is_some()
                    && p.modes.softcap.is_some()));
                assert!(race.iter().any(|c| !c.problem.modes.is_dense()));
            }
            let varlen = |v: &Vec<Case>| {
                v.iter()
                    .filter(|c| flashcore::backward::is_varlen(&c.problem))
                    .count()
            };
            assert_eq!(varlen(&full) > 0, caps.modes.varlen, "{}", k.name());
            assert_eq!(varlen(&race) > 0, caps.modes.varlen, "{}", k.name());
        }
    }

    #[test]
    fn children_name_their_pass_and_kernels_are_selected_per_pass() {
        let exe = Path::new("/x/xtask");
        let a = child_args(exe, "memcheck", Pass::Bwd, "scalar", 1, None);
        let joined = a.join(" ");
        assert!(joined.starts_with("--tool memcheck --error-exitcode 86"));
        assert!(joined.contains("--leak-check full"));
        assert!(joined.ends_with(
            "/x/xtask sanitize --inner --pass bwd --kernels scalar --tool memcheck --device 1"
        ));
        let r = child_args(exe, "racecheck", Pass::Fwd, "tile64", 0, None).join(" ");
        assert!(r.contains("--pass fwd --kernels tile64 --tool racecheck") && !r.contains("leak"));
        assert_eq!(row_label(Pass::Bwd, "scalar"), "scalar (bwd)");
        assert_eq!(row_label(Pass::Fwd, "scalar"), "scalar");
        assert!(check_names(&Some(vec!["nope".into()])).is_err());
        check_names(&Some(vec!["scalar".into()])).unwrap();
        let only = Some(vec!["scalar".to_string()]);
        assert_eq!(selected(&only, Pass::Bwd), ["scalar"]);
        assert_eq!(selected(&only, Pass::Fwd), ["scalar"]);
        assert_eq!(
            selected(&None, Pass::Bwd).len(),
            flashcore::backward_kernels().len()
        );
        // A generation with no backward kernel takes part in the forward pass only.
        let fwd_only: Vec<String> = compiled_in(Pass::Fwd)
            .into_iter()
            .filter(|k| !compiled_in(Pass::Bwd).contains(k))
            .collect();
        if let Some(k) = fwd_only.first() {
            assert!(selected(&Some(vec![k.clone()]), Pass::Bwd).is_empty());
        }
    }

    #[test]
    fn both_passes_by_default_and_either_alone() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: Args,
        }
        use clap::Parser;
        let a = Cli::try_parse_from(["x"]).unwrap().args;
        assert_eq!(a.pass, [Pass::Fwd, Pass::Bwd]);
        let a = Cli::try_parse_from(["x", "--pass", "bwd"]).unwrap().args;
        assert_eq!(a.pass, [Pass::Bwd]);
        assert!(Cli::try_parse_from(["x", "--pass", "sideways"]).is_err());
    }
}
