//! Where a CUDA toolkit's pieces may be: the roots the core searches at run time and
//! `crates/flashcore/build.rs` searches when it compiles the AOT cubins. Standard library only,
//! so that the build script can include this file by path (`#[path]`).

use std::path::{Path, PathBuf};

/// The CUDA major version flashcore's pinned NVRTC and headers come from.
pub const CUDA_MAJOR: u32 = 13;

/// Where `cargo xtask check-kernels` installs the pinned wheels when no toolkit is found.
pub fn wheel_dir() -> PathBuf {
    if let Ok(d) = std::env::var("FLASHCORE_CUDA_WHEELS") {
        return PathBuf::from(d);
    }
    cache_root().join("cuda-wheels")
}

/// The wheels' toolkit root (pip's layout: site-packages/nvidia/cu13/{lib,include,bin}).
pub fn wheel_root() -> PathBuf {
    wheel_dir().join(format!("nvidia/cu{CUDA_MAJOR}"))
}

/// `$FLASHCORE_CACHE_DIR`, else `$XDG_CACHE_HOME/flashcore`, else `~/.cache/flashcore`.
pub fn cache_root() -> PathBuf {
    if let Ok(d) = std::env::var("FLASHCORE_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Ok(d) = std::env::var("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("flashcore");
    }
    if let Ok(h) = std::env::var("HOME") {
        return PathBuf::from(h).join(".cache/flashcore");
    }
    std::env::temp_dir().join("flashcore-cache")
}

/// Toolkit roots to look in, most specific first.
pub fn roots() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Ok(p) = std::env::var(var) {
            v.push(PathBuf::from(p));
        }
    }
    v.push(PathBuf::from("/usr/local/cuda"));
    v.push(PathBuf::from(format!("/usr/local/cuda-{CUDA_MAJOR}")));
    v.push(wheel_root());
    v
}

/// The include directory holding cuda_fp16.h, if any.
pub fn include_dir() -> Option<PathBuf> {
    roots()
        .into_iter()
        .map(|r| r.join("include"))
        .find(|p| p.join("cuda_fp16.h").is_file())
}

/// The library directories of every root, in the roots' order.
pub fn lib_dirs() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for r in roots() {
        v.push(r.join("lib64"));
        v.push(r.join("lib"));
        v.push(r.join("targets/x86_64-linux/lib"));
    }
    v
}

/// The first file (by name) in `dir` whose name starts with `prefix`, NVIDIA's `.alt.` variants
/// left out.
pub fn find_lib(dir: &Path, prefix: &str) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && !n.contains(".alt."))
        })
        .collect();
    found.sort();
    found.into_iter().next()
}
