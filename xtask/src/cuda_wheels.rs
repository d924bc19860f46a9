//! The pinned CUDA pip wheels that let this machine and CI compile and ptxas-check every kernel,
//! build the facade's `aot` cubins, and run nvcc, without a CUDA toolkit. Pinned to 13.0.x to
//! match the GPUs' driver (580, CUDA 13.0).
//!
//! What needs which (all land under `toolkit::wheel_dir()/nvidia/cu13/`):
//! - `nvidia-cuda-nvrtc` (`lib/libnvrtc.so.13`): every run-time compile, `check-kernels`,
//!   `verify`, and the `aot` build (NVRTC emits the cubins).
//! - `nvidia-cuda-runtime`, `nvidia-cuda-crt`, `nvidia-cuda-cccl` (`include/`): the headers the
//!   kernels include (`cuda_fp16.h`, `cuda_bf16.h`, the crt headers they pull in).
//! - `nvidia-cuda-nvcc` (`bin/ptxas`, `bin/nvcc`): ptxas resource reports in `check-kernels`;
//!   nvcc for whatever wants one (`FLASHCORE_NVCC` in the `aot` build, nvcc-built crates).
//! - `nvidia-nvvm` (`nvvm/bin/cicc`, `nvvm/libdevice`): nvcc's device front end. The wheel puts
//!   it where the nvcc wheel's `bin/nvcc.profile` looks (`$(TOP)/nvvm/bin`), so the two make a
//!   working `nvcc -cubin -arch=sm_90a` with no further layout (a host g++ is still needed, as for
//!   any nvcc).

use std::path::{Path, PathBuf};
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
    "nvidia-nvvm==13.0.88",
];

fn marker() -> PathBuf {
    toolkit::wheel_dir().join(".flashcore-pinned")
}

/// Installs the wheels into `toolkit::wheel_dir()` unless the same pins were installed there
/// before or a toolkit elsewhere (`CUDA_HOME`, `/usr/local/cuda`) has NVRTC and the headers.
pub fn ensure() -> Result<()> {
    let pins = PINNED.join("\n");
    if std::fs::read_to_string(marker()).is_ok_and(|m| m == pins) {
        return Ok(());
    }
    // Wheels of older pins count as no toolkit: they are brought up to the pins.
    let outside_wheels =
        toolkit::include_dir().is_some_and(|d| !d.starts_with(toolkit::wheel_dir()));
    if outside_wheels
        && toolkit::ensure_nvrtc().is_ok_and(|l| !Path::new(&l).starts_with(toolkit::wheel_dir()))
    {
        return Ok(());
    }
    let dir = toolkit::wheel_dir();
    eprintln!(
        "no CUDA toolkit found: installing the pinned CUDA wheels into {} (once)",
        dir.display()
    );
    // One pip call for every pin: with --target, pip replaces a top-level directory the target
    // already has (`nvidia/`), so installing one wheel alone would delete the others' files.
    pip_install(
        &dir,
        PINNED,
        "the pinned CUDA wheels (no CUDA toolkit found)",
    )?;
    let root = dir.join(format!("nvidia/cu{}", toolkit::CUDA_MAJOR));
    for f in [
        "lib/libnvrtc.so.13",
        "include/cuda_fp16.h",
        "bin/ptxas",
        "bin/nvcc",
        "nvvm/bin/cicc",
    ] {
        if !root.join(f).is_file() {
            bail!(
                "the pinned wheels installed, but {} is missing",
                root.join(f).display()
            );
        }
    }
    std::fs::write(marker(), pins)?;
    Ok(())
}

/// `pip install --no-deps --target dir pins`, with whichever of python3 / python runs; `what` names
/// the wheels in the errors.
pub fn pip_install(dir: &Path, pins: &[&str], what: &str) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let python = ["python3", "python"]
        .into_iter()
        .find(|p| {
            Command::new(p)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .with_context(|| format!("python3 with pip is needed to install {what}"))?;
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
        .arg(dir)
        .args(pins)
        .status()
        .context("running pip")?;
    if !status.success() {
        bail!("pip could not install {pins:?} into {}", dir.display());
    }
    Ok(())
}

/// `cargo xtask install-cuda`: [`ensure`], then where each piece is.
pub fn install() -> Result<()> {
    ensure()?;
    let root = toolkit::wheel_dir().join(format!("nvidia/cu{}", toolkit::CUDA_MAJOR));
    let show = |what: &str, p: Option<PathBuf>| match p {
        Some(p) => eprintln!("{what:<22} {}", p.display()),
        None => eprintln!("{what:<22} (not found)"),
    };
    show("NVRTC", toolkit::ensure_nvrtc().ok().map(PathBuf::from));
    show("headers", toolkit::include_dir());
    show("ptxas", toolkit::ptxas());
    let nvcc = root.join("bin/nvcc");
    show("nvcc (wheels)", nvcc.is_file().then_some(nvcc));
    let cicc = root.join("nvvm/bin/cicc");
    show("cicc (wheels)", cicc.is_file().then_some(cicc));
    Ok(())
}
