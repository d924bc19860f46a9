//! With the `aot` feature: compiles the kernel modules listed in `aot-modules.txt` with nvcc to
//! cubins (SASS for sm_80, sm_86, sm_89 and sm_90a) and embeds them (see `src/aot.rs`), so that
//! no NVRTC is needed at run time for them. Without nvcc it prints one `cargo:warning` and
//! embeds nothing: kernels are then compiled by NVRTC at run time as usual.
//!
//! A module is (source, architecture, dtype, defines): exactly what the core's NVRTC path
//! compiles for one plan. `tests/aot_manifest.rs` derives the list from the generations' plans
//! and fails when the file is stale. nvcc gets the options the core gives NVRTC
//! (`-std=c++17 --use_fast_math -lineinfo -DFC_DTYPE_* -D<plan defines>`), with `-I kernels/`
//! for the quoted includes the core inlines itself. A module nvcc fails on is left to NVRTC
//! (one warning each).
//!
//! Environment: `FLASHCORE_NVCC` (the nvcc to use), else `$CUDA_HOME/bin/nvcc`,
//! `$CUDA_PATH/bin/nvcc`, `/usr/local/cuda/bin/nvcc`, then `PATH`; `FLASHCORE_AOT_ARCHS`
//! (e.g. `sm_90a` or `sm_80,sm_90a`) to build fewer architectures.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The core's NVRTC architecture (`compile::arch_for`) and nvcc's real architecture.
const ARCHS: [(&str, &str); 4] = [
    ("compute_80", "sm_80"),
    ("compute_86", "sm_86"),
    ("compute_89", "sm_89"),
    ("compute_90a", "sm_90a"),
];

#[derive(Clone, Debug, Hash)]
struct Module {
    source: String,
    nvrtc_arch: String,
    sm: &'static str,
    dtype: String,
    defines: Vec<(String, String)>,
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_AOT").is_none() {
        return;
    }
    for v in [
        "FLASHCORE_NVCC",
        "FLASHCORE_AOT_ARCHS",
        "CUDA_HOME",
        "CUDA_PATH",
        "PATH",
    ] {
        println!("cargo:rerun-if-env-changed={v}");
    }
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let kernels = manifest_dir.join("../../kernels");
    let list = manifest_dir.join("aot-modules.txt");
    println!("cargo:rerun-if-changed={}", list.display());
    println!("cargo:rerun-if-changed={}", kernels.display());
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());

    let Some(nvcc) = find_nvcc() else {
        println!(
            "cargo:warning=flashcore aot: nvcc not found (FLASHCORE_NVCC, $CUDA_HOME/bin, $CUDA_PATH/bin, \
             /usr/local/cuda/bin, PATH): no kernels embedded, NVRTC compiles them at run time"
        );
        write_out(
            &out_dir,
            &[],
            "nvcc not found at build time: NVRTC at run time",
        );
        return;
    };
    let version = match Command::new(&nvcc).arg("--version").output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .last()
            .unwrap_or("")
            .trim()
            .to_string(),
        other => {
            println!(
                "cargo:warning=flashcore aot: `{} --version` failed ({:?}): no kernels embedded, NVRTC at run time",
                nvcc.display(),
                other.map(|o| o.status)
            );
            write_out(
                &out_dir,
                &[],
                "nvcc unusable at build time: NVRTC at run time",
            );
            return;
        }
    };
    let wanted: Vec<String> = std::env::var("FLASHCORE_AOT_ARCHS")
        .map(|s| s.split(',').map(|x| x.trim().to_string()).collect())
        .unwrap_or_default();
    let text = std::fs::read_to_string(&list).unwrap_or_else(|e| {
        println!(
            "cargo:warning=flashcore aot: reading {}: {e}",
            list.display()
        );
        String::new()
    });
    let modules: Vec<Module> = parse(&text)
        .into_iter()
        .filter(|m| wanted.is_empty() || wanted.iter().any(|w| w == m.sm))
        .collect();

    // Cubins are named by a hash of everything that goes into them, so an unchanged module is
    // not recompiled when the build script reruns.
    let bin_dir = out_dir.join("aot-cubin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let sources_hash = hash_dir(&kernels);
    let work: Vec<(Module, PathBuf)> = modules
        .into_iter()
        .map(|m| {
            let mut h = DefaultHasher::new();
            (&m, &version, sources_hash).hash(&mut h);
            let stem = m.source.trim_end_matches(".cu").replace('/', "_");
            let out = bin_dir.join(format!(
                "{stem}-{}-{}-{:016x}.cubin",
                m.sm,
                m.dtype,
                h.finish()
            ));
            (m, out)
        })
        .collect();
    let jobs: usize = std::env::var("NUM_JOBS")
        .ok()
        .and_then(|j| j.parse().ok())
        .unwrap_or(4)
        .max(1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.min(work.len()).max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((m, out)) = work.get(i) else { break };
                if out.is_file() || compile(&nvcc, &kernels, m, out) {
                    done.lock().unwrap().push(i);
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap();
    done.sort();
    let entries: Vec<(Module, PathBuf)> = done.into_iter().map(|i| work[i].clone()).collect();
    let sms: Vec<&str> = ARCHS
        .iter()
        .map(|(_, sm)| *sm)
        .filter(|sm| wanted.is_empty() || wanted.iter().any(|w| w == sm))
        .collect();
    let status = format!(
        "{} of {} modules compiled by nvcc ({version}) for {}",
        entries.len(),
        work.len(),
        sms.join(",")
    );
    write_out(&out_dir, &entries, &status);
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
            println!(
                "cargo:warning=flashcore aot: aot-modules.txt line {}: too few fields",
                n + 1
            );
            continue;
        };
        let Some(&(_, sm)) = ARCHS.iter().find(|(a, _)| *a == arch) else {
            println!(
                "cargo:warning=flashcore aot: aot-modules.txt line {}: unknown arch {arch}",
                n + 1
            );
            continue;
        };
        if dtype != "f16" && dtype != "bf16" {
            println!(
                "cargo:warning=flashcore aot: aot-modules.txt line {}: unknown dtype {dtype}",
                n + 1
            );
            continue;
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

fn find_nvcc() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FLASHCORE_NVCC") {
        return Some(PathBuf::from(p));
    }
    let mut candidates: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(std::env::var_os)
        .map(|r| PathBuf::from(r).join("bin/nvcc"))
        .collect();
    candidates.push("/usr/local/cuda/bin/nvcc".into());
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("nvcc")));
    }
    candidates.into_iter().find(|p| p.is_file())
}

/// A hash of every kernel source (names and contents), so cubins follow source edits.
fn hash_dir(dir: &Path) -> u64 {
    fn walk(dir: &Path, h: &mut DefaultHasher) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, h);
            } else {
                p.file_name().hash(h);
                std::fs::read(&p).unwrap_or_default().hash(h);
            }
        }
    }
    let mut h = DefaultHasher::new();
    walk(dir, &mut h);
    h.finish()
}

/// nvcc with the options the core gives NVRTC (`CompileRequest::options`), real architecture.
fn compile(nvcc: &Path, kernels: &Path, m: &Module, out: &Path) -> bool {
    let mut args = vec![
        "-cubin".to_string(),
        format!("-arch={}", m.sm),
        "-std=c++17".into(),
        "--use_fast_math".into(),
        "-lineinfo".into(),
        if m.dtype == "f16" {
            "-DFC_DTYPE_F16".into()
        } else {
            "-DFC_DTYPE_BF16".into()
        },
    ];
    for (k, v) in &m.defines {
        args.push(format!("-D{k}={v}"));
    }
    args.push(format!("-I{}", kernels.display()));
    args.push("-o".into());
    args.push(out.display().to_string());
    args.push(kernels.join(&m.source).display().to_string());
    match Command::new(nvcc).args(&args).output() {
        Ok(o) if o.status.success() && out.is_file() => true,
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let first: Vec<&str> = err
                .lines()
                .filter(|l| !l.trim().is_empty())
                .take(3)
                .collect();
            println!(
                "cargo:warning=flashcore aot: nvcc failed on {} {} {} {:?}, left to NVRTC: {}",
                m.source,
                m.sm,
                m.dtype,
                m.defines,
                first.join(" / ")
            );
            let _ = std::fs::remove_file(out);
            false
        }
        Err(e) => {
            println!(
                "cargo:warning=flashcore aot: running {}: {e}",
                nvcc.display()
            );
            false
        }
    }
}

fn write_out(out_dir: &Path, entries: &[(Module, PathBuf)], status: &str) {
    let mut f = std::fs::File::create(out_dir.join("aot_images.rs")).unwrap();
    writeln!(f, "/// What the build script did.").unwrap();
    writeln!(f, "pub static AOT_STATUS: &str = {status:?};").unwrap();
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
