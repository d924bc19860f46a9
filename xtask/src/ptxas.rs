//! ptxas's resource report for one compiled module: run once per PTX and architecture, and kept
//! on disk beside the PTX cache (`<cache>/ptxas/`), so that a second `check-kernels` over
//! unchanged kernels (as `verify` runs without a GPU) reads reports instead of assembling
//! thousands of modules again. The key is a hash of the PTX itself, the architecture and ptxas's
//! `--version` text: builds whose defines leave the code unchanged share one report (2,923
//! reports for check-kernels' 4,250 builds, 2026-12-02), and a new ptxas re-assembles everything.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

/// A ptxas binary and its identity.
pub struct Ptxas {
    path: PathBuf,
    version: String,
    cache: PathBuf,
}

/// What ptxas said of one module.
pub struct Report {
    pub success: bool,
    /// ptxas's stdout and stderr (`-v`: one resource block per entry point).
    pub text: String,
}

impl Ptxas {
    /// The toolkit's ptxas, if there is one.
    pub fn find() -> Result<Option<Self>> {
        let Some(path) = flashcore::toolkit::ptxas() else {
            return Ok(None);
        };
        let out = Command::new(&path)
            .arg("--version")
            .output()
            .with_context(|| format!("running {} --version", path.display()))?;
        let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let cache = flashcore::toolkit::cache_root().join("ptxas");
        Ok(Some(Self {
            path,
            version,
            cache,
        }))
    }

    /// ptxas's report for `ptx` on `arch` (e.g. "sm_90a"): from the cache, or by running ptxas.
    /// Reports of failed runs are not kept.
    pub fn report(&self, ptx: &str, arch: &str) -> Result<Report> {
        let ptx_key = hex_sha256(ptx.as_bytes(), 32);
        let cached = self
            .cache
            .join(cache_file_name(&ptx_key, arch, &self.version));
        if let Ok(text) = std::fs::read_to_string(&cached) {
            return Ok(Report {
                success: true,
                text,
            });
        }
        let report = self.run(ptx, &ptx_key, arch)?;
        if report.success {
            store(&cached, &report.text);
        }
        Ok(report)
    }

    fn run(&self, ptx: &str, ptx_key: &str, arch: &str) -> Result<Report> {
        // One folder a process, one file pair a run: builds are assembled on several threads, and
        // two builds of the same PTX may be assembled at once.
        static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("flashcore-ptxas-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let ptx_path = dir.join(format!("{ptx_key}-{arch}-{run}.ptx"));
        let cubin_path = dir.join(format!("{ptx_key}-{arch}-{run}.cubin"));
        std::fs::write(&ptx_path, ptx)
            .with_context(|| format!("writing {}", ptx_path.display()))?;
        let out = Command::new(&self.path)
            .arg(format!("-arch={arch}"))
            .arg("-v")
            .arg(&ptx_path)
            .arg("-o")
            .arg(&cubin_path)
            .output()
            .context("running ptxas")?;
        let _ = std::fs::remove_file(&ptx_path);
        let _ = std::fs::remove_file(&cubin_path);
        Ok(Report {
            success: out.status.success(),
            text: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        })
    }
}

/// The cache file of one report: the PTX's hash and the architecture by name, ptxas's version by
/// hash.
fn cache_file_name(ptx_key: &str, arch: &str, version: &str) -> String {
    format!("{ptx_key}-{arch}-{}.txt", hex_sha256(version.as_bytes(), 8))
}

/// The first `bytes` bytes of `data`'s SHA-256, in hex.
fn hex_sha256(data: &[u8], bytes: usize) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data)[..bytes]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Best effort, written whole or not at all: a read-only cache only costs a re-run next time.
fn store(path: &Path, text: &str) {
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_kept_per_module_arch_and_ptxas() {
        let a = cache_file_name(
            "abc",
            "sm_90a",
            "Cuda compilation tools, release 13.0, V13.0.88",
        );
        assert_eq!(
            a,
            cache_file_name(
                "abc",
                "sm_90a",
                "Cuda compilation tools, release 13.0, V13.0.88"
            )
        );
        assert_ne!(
            a,
            cache_file_name(
                "abd",
                "sm_90a",
                "Cuda compilation tools, release 13.0, V13.0.88"
            )
        );
        assert_ne!(
            a,
            cache_file_name(
                "abc",
                "sm_80",
                "Cuda compilation tools, release 13.0, V13.0.88"
            )
        );
        assert_ne!(
            a,
            cache_file_name(
                "abc",
                "sm_90a",
                "Cuda compilation tools, release 13.1, V13.1.10"
            )
        );
    }

    #[test]
    fn a_stored_report_reads_back_whole() {
        let dir = std::env::temp_dir().join(format!("flashcore-ptxas-test-{}", std::process::id()));
        let path = dir.join("k-sm_80-0.txt");
        store(&path, "ptxas info    : Used 56 registers\n");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "ptxas info    : Used 56 registers\n"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
