//! Kernel sources (embedded from `kernels/`), NVRTC compilation and the on-disk PTX cache.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Instant;

use sha2::{Digest, Sha256};

use crate::dtype::DType;
use crate::error::Error;
use crate::toolkit;

include!(concat!(env!("OUT_DIR"), "/kernel_sources.rs"));

/// The embedded text of `kernels/<name>`.
pub fn kernel_source(name: &str) -> Option<&'static str> {
    KERNEL_SOURCES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
}

/// Every top-level kernel file (not the shared headers).
pub fn kernel_files() -> Vec<&'static str> {
    KERNEL_SOURCES
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| n.ends_with(".cu"))
        .collect()
}

/// Replaces `#include "x"` with the embedded file (relative to the including file or to
/// kernels/), once per file, so NVRTC sees one self-contained translation unit. System includes
/// (`<cuda_fp16.h>`) are left for NVRTC's include path.
pub fn preprocess(name: &str) -> Result<String, Error> {
    fn go(name: &str, seen: &mut HashSet<String>, out: &mut String) -> Result<(), Error> {
        if !seen.insert(name.to_string()) {
            return Ok(());
        }
        let text = kernel_source(name).ok_or_else(|| Error::Io {
            path: format!("kernels/{name}"),
            message: "not among the embedded kernel sources".into(),
        })?;
        let dir = name.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
        for line in text.lines() {
            let t = line.trim_start();
            if t.starts_with("#pragma once") {
                continue;
            }
            if let Some(rest) = t.strip_prefix("#include") {
                let rest = rest.trim();
                if let Some(inc) = rest.strip_prefix('"').and_then(|r| r.split('"').next()) {
                    let relative = if dir.is_empty() {
                        inc.to_string()
                    } else {
                        format!("{dir}/{inc}")
                    };
                    let target = if kernel_source(&normalize(&relative)).is_some() {
                        normalize(&relative)
                    } else {
                        normalize(inc)
                    };
                    go(&target, seen, out)?;
                    continue;
                }
            }
            out.push_str(line);
            out.push('\n');
        }
        Ok(())
    }
    let mut out = String::new();
    go(name, &mut HashSet::new(), &mut out)?;
    Ok(out)
}

fn normalize(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "." | "" => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// NVRTC's virtual architecture for a compute capability: Hopper gets sm_90a so wgmma and
/// setmaxnreg are available.
pub fn arch_for(cc: (u32, u32)) -> String {
    match cc {
        (9, 0) => "compute_90a".into(),
        (major, minor) => format!("compute_{major}{minor}"),
    }
}

/// One compilation request.
#[derive(Clone, Debug)]
pub struct CompileRequest<'a> {
    pub source: &'a str,
    pub dtype: DType,
    pub defines: &'a [(String, String)],
    /// e.g. "compute_90a"
    pub arch: &'a str,
}

impl CompileRequest<'_> {
    pub fn options(&self) -> Vec<String> {
        let mut o = vec![
            format!("--gpu-architecture={}", self.arch),
            "-std=c++17".to_string(),
            // FlashAttention builds with fast math too: exp2 as one ex2.approx instruction.
            "--use_fast_math".to_string(),
            "-lineinfo".to_string(),
            match self.dtype {
                DType::F16 => "-DFC_DTYPE_F16".to_string(),
                DType::Bf16 => "-DFC_DTYPE_BF16".to_string(),
            },
        ];
        for (k, v) in self.defines {
            o.push(format!("-D{k}={v}"));
        }
        o
    }
}

/// Finds an ahead-of-time compiled image (cubin or fatbin) for a request; the facade's `aot`
/// feature registers one so no NVRTC is needed at run time.
pub type PrebuiltLookup = fn(&CompileRequest<'_>) -> Option<&'static [u8]>;

static PREBUILT: std::sync::OnceLock<PrebuiltLookup> = std::sync::OnceLock::new();

/// Installs the prebuilt-image lookup (first call wins). Returns false if one was already set.
pub fn register_prebuilt(lookup: PrebuiltLookup) -> bool {
    PREBUILT.set(lookup).is_ok()
}

/// The prebuilt image for `req`, if a lookup is registered and has one.
pub fn prebuilt(req: &CompileRequest<'_>) -> Option<&'static [u8]> {
    PREBUILT.get().and_then(|f| f(req))
}

/// Outcome of a compilation, with where the PTX came from.
pub struct Compiled {
    pub ptx: String,
    pub from_disk_cache: bool,
    pub millis: f64,
    pub cache_key: String,
}

fn cache_dir() -> PathBuf {
    toolkit::cache_root().join("ptx")
}

/// Compiles (or fetches from the disk cache) one kernel module to PTX.
pub fn compile(req: &CompileRequest<'_>) -> Result<Compiled, Error> {
    let start = Instant::now();
    let source = preprocess(req.source)?;
    let include = toolkit::include_dir();
    let mut options = req.options();
    if let Some(inc) = &include {
        options.push(format!("--include-path={}", inc.display()));
    }
    toolkit::ensure_nvrtc()?;
    let version = toolkit::nvrtc_version()?;
    let mut h = Sha256::new();
    h.update(source.as_bytes());
    for o in &options {
        h.update(o.as_bytes());
        h.update([0]);
    }
    h.update(format!("nvrtc {}.{}", version.0, version.1).as_bytes());
    let key: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let path = cache_dir().join(format!("{key}.ptx"));
    if let Ok(ptx) = std::fs::read_to_string(&path) {
        return Ok(Compiled {
            ptx,
            from_disk_cache: true,
            millis: start.elapsed().as_secs_f64() * 1e3,
            cache_key: key,
        });
    }
    if include.is_none() {
        return Err(Error::NoNvrtc(format!(
            "the CUDA headers (cuda_fp16.h) were not found in $CUDA_HOME/include, /usr/local/cuda/include \
             or {}; install a toolkit or run `cargo xtask check-kernels` once",
            toolkit::wheel_dir().display()
        )));
    }
    let opts = cudarc::nvrtc::CompileOptions {
        options: options.clone(),
        name: Some(req.source.to_string()),
        ..Default::default()
    };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(&source, opts).map_err(|e| match e {
        cudarc::nvrtc::CompileError::CompileError { log, .. } => Error::Compile {
            source_name: req.source.to_string(),
            arch: req.arch.to_string(),
            options: options.clone(),
            log: log.to_string_lossy().into_owned(),
        },
        other => Error::Compile {
            source_name: req.source.to_string(),
            arch: req.arch.to_string(),
            options: options.clone(),
            log: format!("{other:?}"),
        },
    })?;
    let text = ptx.to_src();
    // Best effort: a read-only cache directory only costs a recompile next time.
    if std::fs::create_dir_all(cache_dir()).is_ok() {
        let tmp = cache_dir().join(format!("{key}.{}.tmp", std::process::id()));
        if std::fs::write(&tmp, &text).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }
    Ok(Compiled {
        ptx: text,
        from_disk_cache: false,
        millis: start.elapsed().as_secs_f64() * 1e3,
        cache_key: key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_preprocesses_into_one_unit() {
        assert!(!kernel_files().is_empty());
        for f in kernel_files() {
            let text = preprocess(f).unwrap();
            assert!(
                !text.contains("#include \""),
                "{f} still has a quoted include"
            );
            assert!(
                text.contains("struct AttentionParams"),
                "{f} lacks the params block"
            );
        }
    }

    #[test]
    fn normalize_resolves_dots() {
        assert_eq!(normalize("common/../common/./x.cuh"), "common/x.cuh");
    }

    #[test]
    fn hopper_gets_the_arch_specific_target() {
        assert_eq!(arch_for((9, 0)), "compute_90a");
        assert_eq!(arch_for((8, 6)), "compute_86");
    }
}
