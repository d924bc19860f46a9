//! The peers: running `bench/peers/torch_sdpa.py` and, as a second python process,
//! `bench/peers/fa3_jax.py` (FlashAttention-3 through the flash-attn3-jax wheel: JAX and torch do
//! not share a runtime), merging their JSON, and reading the anchor files (peer timings from an
//! earlier run on the same kind of device, `--anchors DIR`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, Context, Result};
use serde_json::Value;

use super::anchors::{backend_name, file_dtype, measurement_lines, read_anchor_files};
use super::report::{Outcome, PeerSkip, PeerStatus, Row, Source, Timing};
use super::suite::Shape;

/// Where the peer script is: `--peer-script`, else `bench/peers/torch_sdpa.py` under the
/// current directory (the repository root on a device machine), else beside the xtask sources
/// this binary was built from.
pub fn find_script(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    let rel = Path::new("bench/peers/torch_sdpa.py");
    if rel.is_file() {
        return Some(rel.to_path_buf());
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel);
    built.is_file().then_some(built)
}

/// Runs the torch peer script on the shape objects `list` with files `shapes{suffix}.json` and
/// `peers{suffix}.json` under `dir`, with more arguments for the script (the decode suite's
/// `--decode --backends ...`). `Ok(Err(reason))` when peers cannot run here (no torch, no CUDA
/// for torch, no script): the table says why. `Err` for a script that ran and failed otherwise.
pub fn run_script_with(
    python: &str,
    script: Option<&Path>,
    list: &[Value],
    dir: &Path,
    suffix: &str,
    quick: bool,
    extra: &[&str],
) -> Result<std::result::Result<Value, String>> {
    let Some(script) = script else {
        return Ok(Err(
            "bench/peers/torch_sdpa.py not found (run from the repository root or pass --peer-script)"
                .into(),
        ));
    };
    let probe = Command::new(python).args(["-c", "import torch"]).output();
    match probe {
        Err(e) => return Ok(Err(format!("{python} could not be started: {e}"))),
        Ok(o) if !o.status.success() => {
            let err = String::from_utf8_lossy(&o.stderr);
            let last = err.lines().last().unwrap_or("").trim().to_string();
            return Ok(Err(format!("{python} -c 'import torch' failed: {last}")));
        }
        Ok(_) => {}
    }
    let (mut cmd, out_path) = script_command(python, script, list, dir, suffix, quick)?;
    cmd.env("PYTHONUNBUFFERED", "1").args(extra);
    let out = run_status(cmd, python, script)?;
    match out.code() {
        Some(0) => {}
        Some(3) => {
            return Ok(Err(format!(
                "{} exited 3: torch or CUDA missing for torch (its message is above)",
                script.display()
            )))
        }
        other => {
            return Err(anyhow!(
                "{} failed with exit status {other:?} (its messages are above)",
                script.display()
            ))
        }
    }
    let text = std::fs::read_to_string(&out_path)
        .with_context(|| format!("reading {}", out_path.display()))?;
    Ok(Ok(serde_json::from_str(&text).with_context(|| {
        format!("parsing {}", out_path.display())
    })?))
}

/// Writes the shape objects `list` to `dir/shapes{tag}.json` and gives the command that runs
/// `script` under `python` on them, writing `dir/peers{tag}.json` (removed first; its path comes
/// back too), with `--quick` where asked.
fn script_command(
    python: &str,
    script: &Path,
    list: &[Value],
    dir: &Path,
    tag: &str,
    quick: bool,
) -> Result<(Command, PathBuf)> {
    std::fs::create_dir_all(dir)?;
    let shapes_path = dir.join(format!("shapes{tag}.json"));
    let out_path = dir.join(format!("peers{tag}.json"));
    std::fs::write(&shapes_path, serde_json::to_string_pretty(list)?)?;
    let _ = std::fs::remove_file(&out_path);
    let mut cmd = Command::new(python);
    cmd.arg(script)
        .arg("--shapes")
        .arg(&shapes_path)
        .arg("--out")
        .arg(&out_path);
    if quick {
        cmd.arg("--quick");
    }
    Ok((cmd, out_path))
}

/// Runs a peer script's command to its end: stderr (the script's progress lines) goes straight
/// to ours; stdout is not used.
fn run_status(mut cmd: Command, python: &str, script: &Path) -> Result<std::process::ExitStatus> {
    cmd.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .status()
        .with_context(|| format!("starting {python} {}", script.display()))
}

/// The FA3 (JAX) peer process: whether it runs, with which python, and what goes first on its
/// PYTHONPATH.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fa3Options {
    /// `--no-fa3`: not run (the torch script's own "fa3" entry stays as it is).
    pub off: bool,
    /// `--fa3-python`: its python (default: the torch script's).
    pub python: Option<String>,
    /// `--fa3-path`, else `$FLASHCORE_FA3_PATH`: a directory put first on PYTHONPATH, e.g. where
    /// `pip install --no-deps --target DIR flash_attn3_jax-*.whl` put the wheel.
    pub path: Option<PathBuf>,
}

/// The variable `--fa3-path` falls back to.
pub const FA3_PATH_ENV: &str = "FLASHCORE_FA3_PATH";

impl Fa3Options {
    pub fn new(off: bool, python: Option<String>, path: Option<PathBuf>) -> Fa3Options {
        let path = path_or_env(path, FA3_PATH_ENV);
        Fa3Options { off, python, path }
    }

    /// The environment of the probe and the script: PYTHONPATH with `path` first, and JAX told
    /// not to take most of the GPU up front (flashcore's process holds a context on it too).
    pub fn env(&self) -> Vec<(&'static str, OsString)> {
        let mut env = vec![
            ("XLA_PYTHON_CLIENT_PREALLOCATE", OsString::from("false")),
            ("PYTHONUNBUFFERED", OsString::from("1")),
            // XLA's C++ logging at warning and above only.
            ("TF_CPP_MIN_LOG_LEVEL", OsString::from("1")),
        ];
        env.extend(python_path_first(self.path.as_deref()));
        env
    }
}

/// `explicit` (a command-line directory), else the directory the variable `var` names.
pub fn path_or_env(explicit: Option<PathBuf>, var: &str) -> Option<PathBuf> {
    explicit.or_else(|| {
        std::env::var_os(var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    })
}

/// PYTHONPATH with `dir` first (where `pip install --no-deps --target DIR` put a wheel), ahead
/// of the caller's PYTHONPATH; nothing without a `dir`.
pub fn python_path_first(dir: Option<&Path>) -> Option<(&'static str, OsString)> {
    let mut pp = dir?.as_os_str().to_os_string();
    if let Some(old) = std::env::var_os("PYTHONPATH").filter(|v| !v.is_empty()) {
        pp.push(":");
        pp.push(old);
    }
    Some(("PYTHONPATH", pp))
}

/// `fa3_jax.py` beside the torch script, else under the current directory, else beside the
/// xtask sources this binary was built from.
pub fn find_fa3_script(torch_script: Option<&Path>) -> Option<PathBuf> {
    find_peer_script("fa3_jax.py", torch_script)
}

/// The peer script `file` of bench/peers: beside the torch script, else under the current
/// directory, else beside the xtask sources this binary was built from.
pub fn find_peer_script(file: &str, torch_script: Option<&Path>) -> Option<PathBuf> {
    if let Some(dir) = torch_script.and_then(Path::parent) {
        let p = dir.join(file);
        if p.is_file() {
            return Some(p);
        }
    }
    let rel = Path::new("bench/peers").join(file);
    if rel.is_file() {
        return Some(rel);
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel);
    built.is_file().then_some(built)
}

/// Both peer processes of one run: the torch script, then the FA3 one, their JSON merged
/// ([`merge_fa3`]).
pub struct PeerRun<'a> {
    pub python: &'a str,
    /// The torch script (`fa3_jax.py` is looked for beside it).
    pub script: Option<&'a Path>,
    pub dir: &'a Path,
    /// Files are `shapes{suffix}.json`, `peers{suffix}.json` and `peers-fa3{suffix}.json`.
    pub suffix: &'a str,
    pub quick: bool,
    /// More arguments for the torch script; `--decode` and `--backward` among them are passed
    /// on to FA3's.
    pub extra: &'a [&'a str],
    pub fa3: &'a Fa3Options,
}

impl PeerRun<'_> {
    /// `Err(reason)` when neither process gave rows; a failure of the FA3 process alone becomes
    /// its "skipped" entry beside the torch rows.
    pub fn run(&self, list: &[Value]) -> std::result::Result<Value, String> {
        let torch = match run_script_with(
            self.python,
            self.script,
            list,
            self.dir,
            self.suffix,
            self.quick,
            self.extra,
        ) {
            Ok(r) => r,
            Err(e) => Err(format!("{e:#}")),
        };
        if self.fa3.off {
            return torch;
        }
        eprintln!("peers: running the FA3 (JAX) peer script (progress below)");
        let l2 = torch
            .as_ref()
            .ok()
            .and_then(|v| v.get("l2_bytes"))
            .and_then(Value::as_u64);
        let modes: Vec<&str> = FA3_MODES
            .iter()
            .copied()
            .filter(|m| self.extra.contains(m))
            .collect();
        let script = find_fa3_script(self.script);
        let fa3 = match run_fa3(self, script.as_deref(), list, &modes, l2) {
            Ok(r) => r,
            Err(e) => Err(format!("{e:#}")),
        };
        if let Err(reason) = &fa3 {
            eprintln!("peers: FA3 (JAX) not timed: {reason}");
        }
        merge_fa3(torch, fa3)
    }
}

/// The peers' status and rows from the JSON of a run (`parse` reads it), or `Missing` with no
/// rows: why the run gave none, or that its JSON was unreadable.
pub fn peer_outcome<R>(
    ran: std::result::Result<Value, String>,
    parse: impl FnOnce(&Value) -> Result<(PeerStatus, Vec<R>)>,
) -> (PeerStatus, Vec<R>) {
    let missing = |reason| (PeerStatus::Missing { reason }, Vec::new());
    match ran {
        Ok(v) => parse(&v).unwrap_or_else(|e| missing(format!("peer JSON unreadable: {e:#}"))),
        Err(reason) => missing(reason),
    }
}

/// The last non-empty line of a process's stderr (its error, for a python traceback).
fn last_line(stderr: &[u8]) -> String {
    String::from_utf8_lossy(stderr)
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .to_string()
}

/// The torch script's arguments that `fa3_jax.py` takes too (the same method, its own process).
pub const FA3_MODES: [&str; 2] = ["--decode", "--backward"];

/// Runs `fa3_jax.py` when `import jax, flash_attn3_jax` works with the run's environment, with
/// `modes` (of [`FA3_MODES`]). `Ok(Err(reason))` for every way it can fail to give rows (it must
/// not take the torch rows down with it).
fn run_fa3(
    run: &PeerRun,
    script: Option<&Path>,
    list: &[Value],
    modes: &[&str],
    l2_bytes: Option<u64>,
) -> Result<std::result::Result<Value, String>> {
    let Some(script) = script else {
        return Ok(Err("bench/peers/fa3_jax.py not found".into()));
    };
    let on_path = match &run.fa3.path {
        Some(p) => format!(" (PYTHONPATH starts with {})", p.display()),
        None => format!(" (no --fa3-path / ${FA3_PATH_ENV})"),
    };
    let mut extra: Vec<String> = modes.iter().map(|m| m.to_string()).collect();
    if let Some(l2) = l2_bytes {
        extra.extend(["--l2-bytes".to_string(), l2.to_string()]);
    }
    let side = SideScript {
        python: run.fa3.python.as_deref().unwrap_or(run.python),
        script,
        env: run.fa3.env(),
        probe: "import jax, flash_attn3_jax",
        on_path,
        missing: "jax, flash_attn3_jax or a GPU for JAX missing",
        backend: "fa3",
    };
    side.run(
        list,
        run.dir,
        &format!("-fa3{}", run.suffix),
        run.quick,
        &extra,
    )
}

/// A peer script in a python process of its own, beside the torch one (FA3's JAX script, the
/// fp8 suite's cuDNN script): it reads the shapes file and writes its JSON as torch_sdpa.py
/// does, exit status 3 when its frameworks are missing.
pub struct SideScript<'a> {
    pub python: &'a str,
    pub script: &'a Path,
    /// The environment of the probe and the script (PYTHONPATH with the wheels' directory first).
    pub env: Vec<(&'static str, OsString)>,
    /// `python -c` code that must run before the script is started (its imports).
    pub probe: &'a str,
    /// Added to a failed probe's reason: where PYTHONPATH points.
    pub on_path: String,
    /// What exit status 3 means.
    pub missing: &'a str,
    /// The backend its rows are named by (for the note on a run that died part way).
    pub backend: &'a str,
}

impl SideScript<'_> {
    /// Runs the script on the shape objects `list` (files `shapes{tag}.json`, `peers{tag}.json`
    /// under `dir`) with `extra` arguments, once the probe passes. `Ok(Err(reason))` for every
    /// way it can fail to give rows; a script that died part way keeps the rows it wrote, with a
    /// "skipped" entry that says so.
    pub fn run(
        &self,
        list: &[Value],
        dir: &Path,
        tag: &str,
        quick: bool,
        extra: &[String],
    ) -> Result<std::result::Result<Value, String>> {
        let (python, script, env) = (self.python, self.script, &self.env);
        let probe = Command::new(python)
            .args(["-c", self.probe])
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output();
        match probe {
            Err(e) => return Ok(Err(format!("{python} could not be started: {e}"))),
            Ok(o) if !o.status.success() => {
                return Ok(Err(format!(
                    "{python} -c '{}' failed{}: {}",
                    self.probe,
                    self.on_path,
                    last_line(&o.stderr)
                )));
            }
            Ok(_) => {}
        }
        let (mut cmd, out_path) = script_command(python, script, list, dir, tag, quick)?;
        cmd.envs(env.iter().map(|(k, v)| (k, v))).args(extra);
        let status = run_status(cmd, python, script)?;
        Ok(read_side_output(
            status.code(),
            &out_path,
            script,
            self.missing,
            self.backend,
        ))
    }
}

/// A side script's JSON after it exited with `code`: 0, its rows; 3, `missing`; otherwise the
/// rows it wrote before it failed, if any.
fn read_side_output(
    code: Option<i32>,
    out_path: &Path,
    script: &Path,
    missing: &str,
    backend: &str,
) -> std::result::Result<Value, String> {
    let read = || -> std::result::Result<Value, String> {
        let text = std::fs::read_to_string(out_path)
            .map_err(|e| format!("reading {}: {e}", out_path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("parsing {}: {e}", out_path.display()))
    };
    match code {
        Some(0) => read(),
        Some(3) => Err(format!(
            "{} exited 3: {missing} (its message is above)",
            script.display()
        )),
        other => {
            let why = format!(
                "{} failed with exit status {other:?} (its messages are above)",
                script.display()
            );
            // It writes its JSON after every shape: the rows before the failure are kept.
            match read() {
                Ok(v) => Ok(with_partial_note(v, backend, &why)),
                Err(_) => Err(why),
            }
        }
    }
}

/// The JSON of a side script's run that died part way: its rows so far, and a "skipped" entry
/// for `backend` that says so (the shapes after the last row have no row of it).
fn with_partial_note(mut v: Value, backend: &str, why: &str) -> Value {
    let n = v.get("rows").and_then(Value::as_array).map_or(0, Vec::len);
    let note = serde_json::json!({
        "backend": backend,
        "reason": format!("{why}; the {n} rows before it are kept, later shapes have none"),
    });
    match v.get_mut("skipped").and_then(Value::as_array_mut) {
        Some(a) => a.push(note),
        None => v["skipped"] = Value::Array(vec![note]),
    }
    v
}

/// The torch script's JSON with the FA3 script's merged in: FA3's rows appended (renamed
/// "fa3-jax" if the torch script timed an "fa3" of its own, flash_attn_interface), the torch
/// script's "fa3" skip entry (which only says that flash_attn3_jax imports) replaced, and the
/// versions put where the header shows them. Either side may have failed (`Err(reason)`): the
/// reason becomes a "skipped" entry of the other; `Err` only when both did. FA3 rows of the
/// other pass (forward rows in a `--backward` run, or the reverse) count as its failure.
pub fn merge_fa3(
    torch: std::result::Result<Value, String>,
    fa3: std::result::Result<Value, String>,
) -> std::result::Result<Value, String> {
    let backward = |v: &Value| v.get("backward").and_then(Value::as_bool) == Some(true);
    let fa3 = match (&torch, fa3) {
        (Ok(t), Ok(f)) if backward(t) != backward(&f) => Err(format!(
            "its JSON has {} rows, this run wants {} ones (an fa3_jax.py without --backward?)",
            if backward(&f) { "backward" } else { "forward" },
            if backward(t) { "backward" } else { "forward" },
        )),
        (_, fa3) => fa3,
    };
    let fa3_label = |f: &Value| {
        let s = |k: &str| f.get(k).and_then(Value::as_str).unwrap_or("?").to_string();
        format!(
            "JAX {}, flash_attn3_jax {} (fa3)",
            s("jax"),
            s("flash_attn3_jax")
        )
    };
    let skip =
        |backend: &str, reason: &str| serde_json::json!({"backend": backend, "reason": reason});
    match (torch, fa3) {
        (Ok(mut t), Ok(f)) => {
            let torch_rows = t
                .get("rows")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let torch_has_fa3 = torch_rows
                .iter()
                .any(|r| r.get("backend").and_then(Value::as_str) == Some("fa3"));
            let mut rows = torch_rows;
            for r in f
                .get("rows")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let mut r = r.clone();
                if torch_has_fa3 {
                    r["backend"] = Value::from("fa3-jax");
                }
                rows.push(r);
            }
            let mut skipped: Vec<Value> = t
                .get("skipped")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            skipped.retain(|s| s.get("backend").and_then(Value::as_str) != Some("fa3"));
            skipped.extend(
                f.get("skipped")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
            );
            let torch_version = t.get("torch").and_then(Value::as_str).unwrap_or("?");
            t["torch"] = Value::from(format!("{torch_version}; {}", fa3_label(&f)));
            t["rows"] = Value::Array(rows);
            t["skipped"] = Value::Array(skipped);
            t["fa3"] = header_of(&f);
            Ok(t)
        }
        (Ok(mut t), Err(reason)) => {
            let mut skipped: Vec<Value> = t
                .get("skipped")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let reason = format!("fa3_jax.py: {reason}");
            match skipped
                .iter_mut()
                .find(|s| s.get("backend").and_then(Value::as_str) == Some("fa3"))
            {
                Some(s) => {
                    let old = s.get("reason").and_then(Value::as_str).unwrap_or("");
                    s["reason"] = Value::from(if old.is_empty() {
                        reason
                    } else {
                        format!("{old}; {reason}")
                    });
                }
                None => skipped.push(skip("fa3", &reason)),
            }
            t["skipped"] = Value::Array(skipped);
            Ok(t)
        }
        (Err(reason), Ok(f)) => {
            let mut skipped = vec![skip("torch", &reason)];
            skipped.extend(
                f.get("skipped")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
            );
            Ok(serde_json::json!({
                "device": f.get("device").cloned().unwrap_or(Value::from("?")),
                "torch": format!("none; {}", fa3_label(&f)),
                "cudnn": null,
                "l2_bytes": f.get("l2_bytes").cloned().unwrap_or(Value::Null),
                "quick": f.get("quick").cloned().unwrap_or(Value::Null),
                "decode": f.get("decode").cloned().unwrap_or(Value::Null),
                "backward": f.get("backward").cloned().unwrap_or(Value::Bool(false)),
                "skipped": skipped,
                "rows": f.get("rows").cloned().unwrap_or(Value::Array(vec![])),
                "fa3": header_of(&f),
            }))
        }
        (Err(torch), Err(fa3)) => Err(format!("{torch}; FA3 (JAX): {fa3}")),
    }
}

/// A peer JSON without its rows (what the FA3 script says about itself, kept in the merge).
fn header_of(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| k.as_str() != "rows")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

pub(crate) fn shape_of(v: &Value) -> Option<Shape> {
    let n = |k: &str| v.get(k)?.as_u64().map(|x| x as usize);
    // A row of the mode suites (GQA or seq_k != seq) is not one of these square MHA shapes.
    let (heads, seq) = (n("heads")?, n("seq")?);
    if n("heads_kv").is_some_and(|h| h != heads) || n("seq_k").is_some_and(|s| s != seq) {
        return None;
    }
    Some(Shape {
        batch: n("batch")?,
        heads: n("heads")?,
        seq: n("seq")?,
        head_dim: n("head_dim")?,
        causal: v.get("causal")?.as_bool()?,
        dtype: v.get("dtype")?.as_str()?.parse().ok()?,
    })
}

/// One timed row of the script (eager or graph).
struct TimedRow {
    us: f64,
    rel: Option<f64>,
    calls: Option<u64>,
    repeats: Option<usize>,
    sets: Option<usize>,
}

#[derive(Default)]
struct Merged {
    eager: Option<TimedRow>,
    graph: Option<TimedRow>,
    errors: Vec<String>,
    /// The script's remarks on how it ran the shape (e.g. K/V repeated for GQA).
    notes: Vec<String>,
}

/// The peer JSON's `rows` list.
pub fn rows_of(v: &Value) -> Result<&Vec<Value>> {
    v.get("rows")
        .and_then(Value::as_array)
        .ok_or_else(|| anyhow!("peer JSON has no \"rows\" list"))
}

/// A peer row's (or "skipped" entry's) `backend`, "?" where it has none.
pub fn backend_of(r: &Value) -> String {
    r.get("backend")
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_string()
}

/// What the peer script says about itself (device, versions, backends it could not time).
pub fn peer_status(v: &Value) -> PeerStatus {
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("?").to_string();
    let skipped = v
        .get("skipped")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|x| PeerSkip {
                    backend: backend_of(x),
                    reason: x.get("reason").and_then(Value::as_str).unwrap_or("").into(),
                })
                .collect()
        })
        .unwrap_or_default();
    PeerStatus::Ran {
        device: s("device"),
        torch: s("torch"),
        cudnn: v.get("cudnn").and_then(Value::as_str).map(String::from),
        skipped,
    }
}

/// The peer script's JSON as rows (one per shape and backend: its eager and graph rows merged,
/// the graph time reported when there is one) plus what it says about itself. Rows for shapes
/// not in `wanted` are dropped.
pub fn parse_peers(v: &Value, wanted: &[Shape]) -> Result<(PeerStatus, Vec<Row>)> {
    let merged = merge_peer_rows(v, wanted, shape_of, Shape::flops)?;
    let rows = merged
        .into_iter()
        .map(|(si, backend, outcome)| Row {
            shape: wanted[si],
            implementation: backend,
            source: Source::Peer,
            outcome,
        })
        .collect();
    Ok((peer_status(v), rows))
}

/// The merging behind [`parse_peers`] for any kind of shape key: `key_of` reads a row's shape
/// (None: not a row of ours), `flops_of` gives the FLOPs its TFLOP/s are counted on. Returns
/// (index in `wanted`, backend, outcome), shape-major, backends in first-seen order.
pub fn merge_peer_rows<K: PartialEq>(
    v: &Value,
    wanted: &[K],
    key_of: impl Fn(&Value) -> Option<K>,
    flops_of: impl Fn(&K) -> f64,
) -> Result<Vec<(usize, String, Outcome)>> {
    let rows_json = rows_of(v)?;
    // (shape index, backend) -> merged rows, in first-seen order per shape.
    let mut merged: BTreeMap<(usize, usize), (String, Merged)> = BTreeMap::new();
    let mut backend_order: Vec<String> = Vec::new();
    for r in rows_json {
        let Some(shape) = key_of(r) else { continue };
        let Some(si) = wanted.iter().position(|w| *w == shape) else {
            continue;
        };
        let backend = backend_of(r);
        let bi = match backend_order.iter().position(|b| *b == backend) {
            Some(i) => i,
            None => {
                backend_order.push(backend.clone());
                backend_order.len() - 1
            }
        };
        let entry = merged
            .entry((si, bi))
            .or_insert_with(|| (backend.clone(), Merged::default()));
        let method = r.get("method").and_then(Value::as_str).unwrap_or("eager");
        if let Some(e) = r.get("error").and_then(Value::as_str) {
            entry.1.errors.push(if method == "graph" {
                format!("graph: {e}")
            } else {
                e.to_string()
            });
            continue;
        }
        let Some(us) = r.get("us").and_then(Value::as_f64) else {
            entry.1.errors.push(format!("{method}: no time"));
            continue;
        };
        let calls = r.get("calls").and_then(Value::as_u64);
        if let Some(n) = r.get("note").and_then(Value::as_str) {
            if !entry.1.notes.iter().any(|x| x == n) {
                entry.1.notes.push(n.to_string());
            }
        }
        let timed = TimedRow {
            us,
            rel: r.get("rel").and_then(Value::as_f64),
            calls,
            repeats: r.get("repeats").and_then(Value::as_u64).map(|x| x as usize),
            sets: r.get("sets").and_then(Value::as_u64).map(|x| x as usize),
        };
        if method == "graph" {
            entry.1.graph = Some(timed);
        } else {
            entry.1.eager = Some(timed);
        }
    }
    let mut rows = Vec::new();
    for ((si, _), (backend, m)) in merged {
        let timing = Timing::from_flops(
            flops_of(&wanted[si]),
            m.eager.as_ref().map(|e| e.us),
            m.graph.as_ref().map(|g| g.us),
        );
        let outcome = match timing {
            Some(mut t) => {
                // The eager row's check and counts; a graph-only row (the decode method) has its
                // own.
                if let Some(e) = m.eager.as_ref().or(m.graph.as_ref()) {
                    t.check = e.rel.map(|r| format!("rel {r:.1e}"));
                    t.repeats = e.repeats.unwrap_or(0);
                    t.sets = e.sets.unwrap_or(0);
                    t.calls = e.calls.unwrap_or(0);
                }
                if let Some(g) = &m.graph {
                    t.calls = g.calls.unwrap_or(t.calls);
                }
                let notes: Vec<String> = m.notes.iter().chain(&m.errors).cloned().collect();
                if !notes.is_empty() {
                    t.note = Some(notes.join("; "));
                }
                Outcome::Timed(t)
            }
            None => Outcome::Error {
                message: if m.errors.is_empty() {
                    "no time reported".into()
                } else {
                    m.errors.join("; ")
                },
            },
        };
        rows.push((si, backend, outcome));
    }
    Ok(rows)
}

/// One anchor file, lines like
/// `B=4 H=16 S=2048 D=64 causal=0 cudnn  162.4 us  423.1 TFLOP/s rel=2.71e-04` or, for graph
/// replays, `... causal=0 cudnn graph 9.37 us 57.3 TFLOP/s`. The dtype is bf16 when the file
/// name or a `#` header says so, else f16. Returns (shape, backend, method is graph, µs, rel).
pub fn parse_anchor_file(file: &str, text: &str) -> Vec<(Shape, String, bool, f64, Option<f64>)> {
    let dtype = file_dtype(file, text);
    let mut out = Vec::new();
    for w in measurement_lines(text) {
        // A backward anchor line (`... fwd N us bwd M us`): its fwd is not a forward anchor.
        if w.has("bwd") {
            continue;
        }
        let Some(shape) = w.dense_shape(dtype) else {
            continue;
        };
        let Some(us) = w.number_before("us") else {
            continue;
        };
        let Some(name) = w.after_causal(1) else {
            continue;
        };
        out.push((
            shape,
            backend_name(name, file),
            w.after_causal(2) == Some("graph"),
            us,
            w.number_after("rel="),
        ));
    }
    out
}

/// Rows from every `*.txt` under `dir` for the shapes in `wanted`, eager and graph merged as
/// for live peers, named "<backend> (anchor)".
pub fn load_anchors(dir: &Path, wanted: &[Shape]) -> Result<Vec<Row>> {
    let mut entries = Vec::new();
    for f in read_anchor_files(dir, "--anchors")? {
        entries.extend(parse_anchor_file(&f.name, &f.text));
    }
    Ok(anchor_rows(&entries, wanted))
}

pub fn anchor_rows(
    entries: &[(Shape, String, bool, f64, Option<f64>)],
    wanted: &[Shape],
) -> Vec<Row> {
    let mut rows = Vec::new();
    for shape in wanted {
        let mut backends: Vec<&str> = Vec::new();
        for (s, b, ..) in entries {
            if s == shape && !backends.contains(&b.as_str()) {
                backends.push(b);
            }
        }
        for b in backends {
            let find = |graph: bool| {
                entries
                    .iter()
                    .find(|(s, name, g, ..)| s == shape && name == b && *g == graph)
            };
            let eager = find(false);
            let graph = find(true);
            if let Some(mut t) = Timing::new(shape, eager.map(|e| e.3), graph.map(|g| g.3)) {
                t.check = eager.and_then(|e| e.4).map(|r| format!("rel {r:.1e}"));
                rows.push(Row {
                    shape: *shape,
                    implementation: format!("{b} (anchor)"),
                    source: Source::Anchor,
                    outcome: Outcome::Timed(t),
                });
            }
        }
    }
    rows
}

#[cfg(test)]
mod tests;
