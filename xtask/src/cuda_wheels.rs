//! The pinned CUDA pip wheels (NVRTC, headers, ptxas) that let this machine and CI compile and
//! ptxas-check every kernel without a CUDA toolkit. Pinned to 13.0.x to match the GPUs' driver.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};
use flashcore::toolkit;

/// name==version, as pip takes them.
pub const PINNED: &[&str] = &[
    "nvidia-cuda-nvrtc==13.0.88",
    "nvidia-cuda-runtime==13.0.88",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-cuda-cccl==13.0.85",
    "nvidia-cuda-nvcc==13.0.88",
];

fn marker() -> PathBuf {
    toolkit::wheel_dir().join(".flashcore-pinned")
}

/// Installs the wheels into `toolkit::wheel_dir()` unless a toolkit (NVRTC + headers) is already
/// found or the same pins were installed before.
pub fn ensure() -> Result<()> {
    let pins = PINNED.join("\n");
    if toolkit::include_dir().is_some() && toolkit::ensure_nvrtc().is_ok() {
        return Ok(());
    }
    if std::fs::read_to_string(marker()).is_ok_and(|m| m == pins) {
        return Ok(());
    }
    let dir = toolkit::wheel_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    eprintln!(
        "no CUDA toolkit found: installing the pinned CUDA wheels into {} (once)",
        dir.display()
    );
    let python = ["python3", "python"]
        .into_iter()
        .find(|p| {
            Command::new(p)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .context(
            "python3 with pip is needed to install the pinned CUDA wheels (no CUDA toolkit found)",
        )?;
    let status = Command::new(python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--upgrade",
            "--target",
        ])
        .arg(&dir)
        .args(PINNED)
        .status()
        .context("running pip")?;
    if !status.success() {
        bail!("pip could not install {PINNED:?} into {}", dir.display());
    }
    std::fs::write(marker(), pins)?;
    Ok(())
}
