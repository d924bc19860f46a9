//! With the `aot` feature: compiles the kernel modules listed in `aot-modules.txt` to cubins
//! (SASS for sm_80, sm_86, sm_89 and sm_90a) and embeds them (see `src/aot.rs`), so that the
//! first call on those devices compiles nothing.
//!
//! The compiler is NVRTC, the same library (and version) the core compiles with at run time,
//! asked for a real architecture (`--gpu-architecture=sm_90a`) so that it emits a cubin
//! (`nvrtcGetCUBIN`) instead of PTX. It is found as the core finds it, so no system CUDA is
//! needed: `$CUDA_HOME`, `$CUDA_PATH`, `$CUDA_ROOT`, `/usr/local/cuda`, `/usr/local/cuda-13`,
//! then the pinned pip wheels that `cargo xtask install-cuda` (or `check-kernels`) installs into
//! `$FLASHCORE_CUDA_WHEELS`, default `~/.cache/flashcore/cuda-wheels`. `FLASHCORE_NVCC=<nvcc>`
//! compiles with that nvcc instead (the wheels' `nvidia/cu13/bin/nvcc` works once
//! `install-cuda` has put `nvidia-nvvm`'s cicc beside it).
//!
//! A module is (source, architecture, dtype, defines): exactly what the core compiles for one
//! plan. `tests/aot_manifest.rs` derives the list from the generations' plans and fails when the
//! file is stale. The compiler gets the options the core gives NVRTC
//! (`-std=c++17 --use_fast_math -DFC_DTYPE_* -D<plan defines>`), with `kernels/` on the include
//! path for the quoted includes the core inlines itself, but without `-lineinfo`: the SASS is
//! the same (checked on the Hopper and portable kernels), the cubins a third of the size
//! (`FLASHCORE_AOT_LINEINFO=1` keeps it, for profilers and compute-sanitizer's source lines).
//!
//! Without a compiler the build prints one `cargo:warning` and embeds nothing: kernels are then
//! compiled by NVRTC at run time as usual. A module that fails to compile is left to NVRTC (one
//! warning each). `FLASHCORE_AOT_REQUIRE=1` (CI) turns both into build errors.
//!
//! Each cubin is named by a hash of everything that goes into it (module, compiler version, the
//! source and every file it includes, line info) and kept twice: in `OUT_DIR`, and in the
//! machine's cache (`$FLASHCORE_CACHE_DIR`, else `$XDG_CACHE_HOME/flashcore`, else
//! `~/.cache/flashcore`, subfolder `aot-cubin/`), so that another build on the same machine (a
//! clean clone, another profile) compiles only the modules whose inputs changed.
//!
//! Environment: `FLASHCORE_AOT_ARCHS` (e.g. `sm_90a` or `sm_80,sm_90a`) to build fewer
//! architectures; `FLASHCORE_AOT_JOBS` for the number of compiler threads (default: cargo's
//! job count).

use std::ffi::{c_char, c_int, c_void, CString};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use sha2::{Digest, Sha256};

/// The core's NVRTC architecture (`compile::arch_for`) and the real architecture of the cubin.
const ARCHS: [(&str, &str); 4] = [
    ("compute_80", "sm_80"),
    ("compute_86", "sm_86"),
    ("compute_89", "sm_89"),
    ("compute_90a", "sm_90a"),
];

/// The core's toolkit search (`flashcore_core::toolkit`), shared by path: a build script cannot
/// use the crate it builds beside.
#[path = "../core/src/toolkit_paths.rs"]
#[allow(dead_code)] // the build needs only part of it
mod toolkit_paths;

use toolkit_paths::{find_lib, include_dir, lib_dirs, wheel_root};

#[derive(Clone, Debug)]
struct Module {
    source: String,
    nvrtc_arch: String,
    sm: &'static str,
    dtype: String,
    defines: Vec<(String, String)>,
}

/// The generation features; with all of them on (the defaults) the build sets `all_generations`,
/// the cfg of the tests whose expected files list every generation.
const GENERATIONS: [&str; 5] = ["SCALAR", "VECTORIZED", "FUSED32", "TILE64", "PERSISTENT"];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-check-cfg=cfg(all_generations)");
    if GENERATIONS
        .iter()
        .all(|g| std::env::var_os(format!("CARGO_FEATURE_{g}")).is_some())
    {
        println!("cargo:rustc-cfg=all_generations");
    }
    if std::env::var_os("CARGO_FEATURE_AOT").is_none() {
        return;
    }
    for v in [
        "FLASHCORE_NVCC",
        "FLASHCORE_AOT_ARCHS",
        "FLASHCORE_AOT_JOBS",
        "FLASHCORE_AOT_REQUIRE",
        "FLASHCORE_AOT_LINEINFO",
        "FLASHCORE_CUDA_WHEELS",
        "FLASHCORE_CACHE_DIR",
        "XDG_CACHE_HOME",
        "CUDA_HOME",
        "CUDA_PATH",
        "CUDA_ROOT",
    ] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    let require = std::env::var("FLASHCORE_AOT_REQUIRE").is_ok_and(|v| !v.is_empty() && v != "0");
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let kernels = manifest_dir.join("../../kernels");
    let kernels = kernels.canonicalize().unwrap_or(kernels);
    let list = manifest_dir.join("aot-modules.txt");
    println!("cargo:rerun-if-changed={}", list.display());
    println!("cargo:rerun-if-changed={}", kernels.display());
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());

    let compiler = match find_compiler() {
        Ok(c) => c,
        Err(why) => {
            if require {
                panic!("flashcore aot: {why} (FLASHCORE_AOT_REQUIRE is set)");
            }
            println!(
                "cargo:warning=flashcore aot: {why}: no kernels embedded, NVRTC compiles them at run time \
                 (`cargo xtask install-cuda` installs the pinned NVRTC wheels)"
            );
            write_out(&out_dir, &[], &[], &format!("{why}: NVRTC at run time"));
            return;
        }
    };

    let wanted: Vec<String> = std::env::var("FLASHCORE_AOT_ARCHS")
        .map(|s| {
            s.split(',')
                .map(|x| x.trim().to_string())
                .filter(|x| !x.is_empty())
                .collect()
        })
        .unwrap_or_default();
    for w in &wanted {
        if !ARCHS.iter().any(|(_, sm)| sm == w) {
            let known: Vec<&str> = ARCHS.iter().map(|(_, sm)| *sm).collect();
            panic!(
                "flashcore aot: FLASHCORE_AOT_ARCHS names {w}; known: {}",
                known.join(",")
            );
        }
    }
    let archs: Vec<(&str, &str)> = ARCHS
        .iter()
        .copied()
        .filter(|(_, sm)| wanted.is_empty() || wanted.iter().any(|w| w == sm))
        .collect();
    let text = std::fs::read_to_string(&list)
        .unwrap_or_else(|e| panic!("flashcore aot: reading {}: {e}", list.display()));
    let modules: Vec<Module> = parse(&text)
        .into_iter()
        .filter(|m| archs.iter().any(|(_, sm)| *sm == m.sm))
        .collect();

    // Cubins are named by a hash of everything that goes into them, so an unchanged module is
    // not recompiled when the build script reruns, nor in another build on the same machine
    // (a clean clone, another profile): each compiled cubin is also kept in the machine's cache.
    let bin_dir = out_dir.join("aot-cubin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let machine_cache = toolkit_paths::cache_root().join("aot-cubin");
    let mut source_hashes = std::collections::HashMap::new();
    let work: Vec<(Module, PathBuf)> = modules
        .into_iter()
        .map(|m| {
            let sources = source_hashes
                .entry(m.source.clone())
                .or_insert_with(|| hash_source(&kernels, &m.source))
                .clone();
            let key = module_key(&m, compiler.version(), &sources);
            let stem = m.source.trim_end_matches(".cu").replace('/', "_");
            let out = bin_dir.join(format!("{stem}-{}-{}-{key}.cubin", m.sm, m.dtype));
            (m, out)
        })
        .collect();
    let jobs: usize = ["FLASHCORE_AOT_JOBS", "NUM_JOBS"]
        .iter()
        .find_map(|v| std::env::var(v).ok().and_then(|j| j.parse().ok()))
        .unwrap_or(2usize)
        .max(1);
    let start = Instant::now();
    let cpu_start = cpu_seconds();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::Mutex::new(Vec::new());
    let failed = std::sync::Mutex::new(Vec::new());
    let fresh = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..jobs.min(work.len()).max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((m, out)) = work.get(i) else { break };
                let kept = machine_cache.join(out.file_name().unwrap());
                if out.is_file() || std::fs::copy(&kept, out).is_ok() {
                    done.lock().unwrap().push(i);
                    continue;
                }
                match compiler.compile(&kernels, m, out) {
                    Ok(()) => {
                        keep_in_machine_cache(out, &kept);
                        fresh.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        done.lock().unwrap().push(i);
                    }
                    Err(e) => {
                        let _ = std::fs::remove_file(out);
                        failed.lock().unwrap().push(format!(
                            "{} {} {} {:?}: {e}",
                            m.source, m.sm, m.dtype, m.defines
                        ));
                    }
                }
            });
        }
    });
    let failed = failed.into_inner().unwrap();
    if require && !failed.is_empty() {
        panic!(
            "flashcore aot: {} of {} modules failed (FLASHCORE_AOT_REQUIRE is set):\n{}",
            failed.len(),
            work.len(),
            failed.join("\n")
        );
    }
    for f in &failed {
        println!("cargo:warning=flashcore aot: left to NVRTC at run time: {f}");
    }
    let mut done = done.into_inner().unwrap();
    done.sort();
    let entries: Vec<(Module, PathBuf)> = done.into_iter().map(|i| work[i].clone()).collect();
    let sms: Vec<&str> = archs.iter().map(|(_, sm)| *sm).collect();
    let status = format!(
        "{} of {} modules compiled by {} for {} ({} compiled in {:.0} s, {:.0} s of CPU, on {jobs} threads; the rest reused)",
        entries.len(),
        work.len(),
        compiler.version(),
        sms.join(","),
        fresh.into_inner(),
        start.elapsed().as_secs_f64(),
        cpu_seconds() - cpu_start,
    );
    let built: Vec<&str> = archs.iter().map(|(a, _)| *a).collect();
    write_out(&out_dir, &entries, &built, &status);
}

/// `<source> <NVRTC arch> <dtype> [KEY=VALUE ...]` per line; `#` comments.
fn parse(text: &str) -> Vec<Module> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut f = line.split_whitespace();
        let (Some(source), Some(arch), Some(dtype)) = (f.next(), f.next(), f.next()) else {
            panic!(
                "flashcore aot: aot-modules.txt line {}: too few fields",
                n + 1
            );
        };
        let Some(&(_, sm)) = ARCHS.iter().find(|(a, _)| *a == arch) else {
            panic!(
                "flashcore aot: aot-modules.txt line {}: unknown arch {arch}",
                n + 1
            );
        };
        if dtype != "f16" && dtype != "bf16" {
            panic!(
                "flashcore aot: aot-modules.txt line {}: unknown dtype {dtype}",
                n + 1
            );
        }
        let defines = f
            .map(|kv| match kv.split_once('=') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (kv.to_string(), String::new()),
            })
            .collect();
        out.push(Module {
            source: source.to_string(),
            nvrtc_arch: arch.to_string(),
            sm,
            dtype: dtype.to_string(),
            defines,
        });
    }
    out
}

/// Whether cubins keep line tables (`FLASHCORE_AOT_LINEINFO=1`; they triple a cubin's size).
fn lineinfo() -> bool {
    std::env::var("FLASHCORE_AOT_LINEINFO").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The options the core gives NVRTC (`CompileRequest::options`), less the architecture and,
/// unless asked for, `-lineinfo`.
fn common_options(m: &Module) -> Vec<String> {
    let mut o = vec!["-std=c++17".to_string(), "--use_fast_math".into()];
    if lineinfo() {
        o.push("-lineinfo".into());
    }
    o.push(if m.dtype == "f16" {
        "-DFC_DTYPE_F16".into()
    } else {
        "-DFC_DTYPE_BF16".into()
    });
    for (k, v) in &m.defines {
        o.push(format!("-D{k}={v}"));
    }
    o
}

enum Compiler {
    Nvrtc(Nvrtc),
    Nvcc { path: PathBuf, version: String },
}

impl Compiler {
    fn version(&self) -> &str {
        match self {
            Compiler::Nvrtc(n) => &n.version,
            Compiler::Nvcc { version, .. } => version,
        }
    }

    fn compile(&self, kernels: &Path, m: &Module, out: &Path) -> Result<(), String> {
        match self {
            Compiler::Nvrtc(n) => n.compile(kernels, m, out),
            Compiler::Nvcc { path, .. } => nvcc_compile(path, kernels, m, out),
        }
    }
}

/// `FLASHCORE_NVCC` if set, else NVRTC where the core would find it.
fn find_compiler() -> Result<Compiler, String> {
    if let Some(p) = std::env::var_os("FLASHCORE_NVCC") {
        let path = PathBuf::from(p);
        return match Command::new(&path).arg("--version").output() {
            Ok(o) if o.status.success() => {
                let last = String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .last()
                    .unwrap_or("")
                    .trim()
                    .to_string();
                Ok(Compiler::Nvcc {
                    path,
                    version: format!("nvcc ({last})"),
                })
            }
            other => Err(format!(
                "FLASHCORE_NVCC={}: `--version` failed ({:?})",
                path.display(),
                other.map(|o| o.status)
            )),
        };
    }
    Nvrtc::find().map(Compiler::Nvrtc)
}

type NvrtcResult = c_int;
type Program = *mut c_void;

/// The few NVRTC entry points the build needs, from a library opened by path.
struct Nvrtc {
    version: String,
    include: PathBuf,
    create: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> NvrtcResult,
    compile: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> NvrtcResult,
    log_size: unsafe extern "C" fn(Program, *mut usize) -> NvrtcResult,
    log: unsafe extern "C" fn(Program, *mut c_char) -> NvrtcResult,
    cubin_size: unsafe extern "C" fn(Program, *mut usize) -> NvrtcResult,
    cubin: unsafe extern "C" fn(Program, *mut c_char) -> NvrtcResult,
    destroy: unsafe extern "C" fn(*mut Program) -> NvrtcResult,
}

impl Nvrtc {
    fn find() -> Result<Nvrtc, String> {
        let wheel_lib = wheel_root().join("lib");
        let not_found = |what: &str| {
            // Rerun once the wheels appear (a path that does not exist reruns every build).
            println!(
                "cargo:rerun-if-changed={}",
                wheel_lib.join("libnvrtc.so.13").display()
            );
            format!(
                "{what} not found in $CUDA_HOME, /usr/local/cuda or {}",
                wheel_lib.parent().unwrap().display()
            )
        };
        let include = include_dir().ok_or_else(|| not_found("the CUDA headers (cuda_fp16.h)"))?;
        for dir in lib_dirs() {
            let Some(lib) = find_lib(&dir, "libnvrtc.so") else {
                continue;
            };
            println!("cargo:rerun-if-changed={}", lib.display());
            return Self::open(&lib, find_lib(&dir, "libnvrtc-builtins.so"), include);
        }
        Err(not_found("NVRTC (libnvrtc.so)"))
    }

    fn open(lib: &Path, builtins: Option<PathBuf>, include: PathBuf) -> Result<Nvrtc, String> {
        use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
        // NVRTC opens its builtins library by bare name: load it by path first (as the core does).
        if let Some(b) = builtins {
            // SAFETY: NVIDIA's library; loaded once for the build script's life.
            if let Ok(b) = unsafe { Library::open(Some(&b), RTLD_NOW | RTLD_GLOBAL) } {
                std::mem::forget(b);
            }
        }
        // SAFETY: as above.
        let l = unsafe { Library::open(Some(lib), RTLD_NOW | RTLD_GLOBAL) }
            .map_err(|e| format!("opening {}: {e}", lib.display()))?;
        let l: &'static Library = Box::leak(Box::new(l));
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the signature is NVRTC's (nvrtc.h); the library is never unloaded.
                *unsafe { l.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| format!("{}: {} missing: {e}", lib.display(), $name))?
            };
        }
        let version_fn: unsafe extern "C" fn(*mut c_int, *mut c_int) -> NvrtcResult =
            sym!("nvrtcVersion");
        let (mut major, mut minor) = (0, 0);
        // SAFETY: plain out-parameters.
        if unsafe { version_fn(&mut major, &mut minor) } != 0 {
            return Err(format!("{}: nvrtcVersion failed", lib.display()));
        }
        Ok(Nvrtc {
            version: format!("NVRTC {major}.{minor} ({})", lib.display()),
            include,
            create: sym!("nvrtcCreateProgram"),
            compile: sym!("nvrtcCompileProgram"),
            log_size: sym!("nvrtcGetProgramLogSize"),
            log: sym!("nvrtcGetProgramLog"),
            cubin_size: sym!("nvrtcGetCUBINSize"),
            cubin: sym!("nvrtcGetCUBIN"),
            destroy: sym!("nvrtcDestroyProgram"),
        })
    }

    /// One module to a cubin: a real architecture makes NVRTC run ptxas itself.
    fn compile(&self, kernels: &Path, m: &Module, out: &Path) -> Result<(), String> {
        let path = kernels.join(&m.source);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        let mut options = vec![format!("--gpu-architecture={}", m.sm)];
        options.extend(common_options(m));
        options.push(format!("--include-path={}", kernels.display()));
        options.push(format!("--include-path={}", self.include.display()));
        let c = |s: &str| CString::new(s).map_err(|e| e.to_string());
        let src = c(&text)?;
        let name = c(&m.source)?;
        let options: Vec<CString> = options.iter().map(|o| c(o)).collect::<Result<_, _>>()?;
        let ptrs: Vec<*const c_char> = options.iter().map(|o| o.as_ptr()).collect();
        let mut prog: Program = std::ptr::null_mut();
        // SAFETY: NVRTC's documented calls on a program this function creates and destroys;
        // buffers are sized by the matching *Size call.
        unsafe {
            let rc = (self.create)(
                &mut prog,
                src.as_ptr(),
                name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            );
            if rc != 0 {
                return Err(format!("nvrtcCreateProgram: error {rc}"));
            }
            let rc = (self.compile)(prog, ptrs.len() as c_int, ptrs.as_ptr());
            let result = if rc != 0 {
                let mut n = 0usize;
                (self.log_size)(prog, &mut n);
                let mut log = vec![0u8; n.max(1)];
                (self.log)(prog, log.as_mut_ptr().cast());
                let log = String::from_utf8_lossy(&log);
                let first: Vec<&str> = log
                    .lines()
                    .filter(|l| l.contains("error"))
                    .take(3)
                    .collect();
                Err(format!("NVRTC error {rc}: {}", first.join(" / ")))
            } else {
                let mut n = 0usize;
                (self.cubin_size)(prog, &mut n);
                let mut bin = vec![0u8; n];
                if n == 0 || (self.cubin)(prog, bin.as_mut_ptr().cast()) != 0 {
                    Err("nvrtcGetCUBIN gave nothing".to_string())
                } else {
                    write_atomically(out, &bin)
                }
            };
            (self.destroy)(&mut prog);
            result
        }
    }
}

/// CPU time of this process and its children so far (Linux `/proc`; 0 elsewhere): NVRTC runs
/// in-process, nvcc in children. For the status line, since the wall time depends on what else
/// the machine runs.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the parenthesised command name: state is field 3, utime 14 ... cstime 17.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .filter_map(|x| x.parse().ok())
        .collect();
    f.iter().sum::<f64>() / 100.0 // USER_HZ
}

/// Writes `out` through a temporary file so an interrupted build leaves no half cubin behind.
fn write_atomically(out: &Path, bytes: &[u8]) -> Result<(), String> {
    let tmp = out.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, out).map_err(|e| format!("renaming to {}: {e}", out.display()))
}

/// nvcc with the same options, real architecture.
fn nvcc_compile(nvcc: &Path, kernels: &Path, m: &Module, out: &Path) -> Result<(), String> {
    let tmp = out.with_extension("tmp");
    let mut args = vec!["-cubin".to_string(), format!("-arch={}", m.sm)];
    args.extend(common_options(m));
    args.push(format!("-I{}", kernels.display()));
    args.push("-o".into());
    args.push(tmp.display().to_string());
    args.push(kernels.join(&m.source).display().to_string());
    match Command::new(nvcc).args(&args).output() {
        Ok(o) if o.status.success() && tmp.is_file() => {
            std::fs::rename(&tmp, out).map_err(|e| format!("renaming to {}: {e}", out.display()))
        }
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let first: Vec<&str> = err
                .lines()
                .filter(|l| !l.trim().is_empty())
                .take(3)
                .collect();
            Err(format!("nvcc: {}", first.join(" / ")))
        }
        Err(e) => Err(format!("running {}: {e}", nvcc.display())),
    }
}

/// A hash of `source` and every file it includes with quotes (resolved as the core's
/// `compile::preprocess` does: beside the including file, else under `kernels/`), so a cubin
/// follows edits to what it is built from and only to that.
fn hash_source(kernels: &Path, source: &str) -> String {
    fn walk(kernels: &Path, name: &str, seen: &mut Vec<String>, h: &mut Sha256) {
        if seen.iter().any(|s| s == name) {
            return;
        }
        seen.push(name.to_string());
        let text = std::fs::read_to_string(kernels.join(name)).unwrap_or_default();
        for part in [name, &text] {
            h.update(part.len().to_le_bytes());
            h.update(part.as_bytes());
        }
        let dir = name.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
        for line in text.lines() {
            let Some(rest) = line.trim_start().strip_prefix("#include") else {
                continue;
            };
            let Some(inc) = rest
                .trim()
                .strip_prefix('"')
                .and_then(|r| r.split('"').next())
            else {
                continue;
            };
            let relative = if dir.is_empty() {
                inc.to_string()
            } else {
                format!("{dir}/{inc}")
            };
            let target = if kernels.join(&relative).is_file() {
                relative
            } else {
                inc.to_string()
            };
            walk(kernels, &target, seen, h);
        }
    }
    let mut h = Sha256::new();
    walk(kernels, source, &mut Vec::new(), &mut h);
    hex(&h.finalize()[..16])
}

/// The key of one cubin: the module, the compiler's version, its source tree's hash and whether
/// it keeps line info, each part length-prefixed.
fn module_key(m: &Module, compiler_version: &str, sources: &str) -> String {
    let mut h = Sha256::new();
    let defines: Vec<String> = m.defines.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let lineinfo = if lineinfo() { "lineinfo" } else { "" };
    for part in [&m.source, &m.nvrtc_arch, m.sm, &m.dtype, &defines.join(" ")]
        .into_iter()
        .chain([compiler_version, sources, lineinfo])
    {
        h.update(part.len().to_le_bytes());
        h.update(part.as_bytes());
    }
    hex(&h.finalize()[..8])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Best effort, whole or not at all: a read-only or missing cache only costs a compile next time.
fn keep_in_machine_cache(cubin: &Path, kept: &Path) {
    let Some(dir) = kept.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let tmp = kept.with_extension(format!("{}.tmp", std::process::id()));
    if std::fs::copy(cubin, &tmp).is_ok() {
        let _ = std::fs::rename(&tmp, kept);
    }
}

fn write_out(out_dir: &Path, entries: &[(Module, PathBuf)], built: &[&str], status: &str) {
    let mut f = std::fs::File::create(out_dir.join("aot_images.rs")).unwrap();
    writeln!(f, "/// What the build script did.").unwrap();
    writeln!(f, "pub static AOT_STATUS: &str = {status:?};").unwrap();
    writeln!(
        f,
        "/// The NVRTC architectures the build compiled the manifest for (empty: no compiler)."
    )
    .unwrap();
    writeln!(f, "pub static AOT_ARCHS: &[&str] = &{built:?};").unwrap();
    writeln!(f, "/// Modules compiled at build time.").unwrap();
    writeln!(f, "pub static AOT_IMAGES: &[AotImage] = &[").unwrap();
    for (m, path) in entries {
        let defines: Vec<String> = m
            .defines
            .iter()
            .map(|(k, v)| format!("({k:?}, {v:?})"))
            .collect();
        let dtype = if m.dtype == "f16" {
            "DType::F16"
        } else {
            "DType::Bf16"
        };
        writeln!(
            f,
            "    AotImage {{ source: {:?}, arch: {:?}, dtype: {dtype}, defines: &[{}], cubin: include_bytes!({:?}) }},",
            m.source,
            m.nvrtc_arch,
            defines.join(", "),
            path.display().to_string()
        )
        .unwrap();
    }
    writeln!(f, "];").unwrap();
}
