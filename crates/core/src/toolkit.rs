//! Finding the pieces of CUDA that flashcore loads at run time: the driver (libcuda, from the GPU
//! driver), NVRTC and the CUDA headers (a toolkit, or the pinned pip wheels that
//! `cargo xtask check-kernels` installs by itself).
//!
//! cudarc opens NVRTC by its bare name. dlopen resolves a bare name against libraries already
//! loaded (by soname) before it searches the system paths, so opening the real file by its full
//! path first makes cudarc's later lookup find it, wherever it lives.

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::error::Error;
use crate::toolkit_paths::roots;

pub use crate::toolkit_paths::{
    cache_root, find_lib, include_dir, lib_dirs, wheel_dir, CUDA_MAJOR,
};

/// The ptxas binary, for resource reports.
pub fn ptxas() -> Option<PathBuf> {
    roots()
        .into_iter()
        .map(|r| r.join("bin/ptxas"))
        .find(|p| p.is_file())
}

/// Loads NVRTC (and its builtins library, which NVRTC itself opens by bare name) once.
/// Returns where it came from.
pub fn ensure_nvrtc() -> Result<String, Error> {
    static LOADED: OnceLock<Result<String, String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            // Already reachable by name (LD_LIBRARY_PATH, ldconfig): let cudarc find it.
            for dir in lib_dirs() {
                if let Some(nvrtc) = find_lib(&dir, "libnvrtc.so") {
                    if let Some(builtins) = find_lib(&dir, "libnvrtc-builtins.so") {
                        // SAFETY: loading a shared library runs its initialisers; these are
                        // NVIDIA's own libraries, loaded once and never unloaded.
                        unsafe {
                            let b = libloading::os::unix::Library::open(
                                Some(&builtins),
                                libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
                            );
                            if let Ok(b) = b {
                                std::mem::forget(b);
                            }
                        }
                    }
                    let lib = unsafe {
                        libloading::os::unix::Library::open(
                            Some(&nvrtc),
                            libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
                        )
                    };
                    if let Ok(lib) = lib {
                        std::mem::forget(lib);
                        return Ok(nvrtc.display().to_string());
                    }
                }
            }
            if library_present(&[
                &format!("libnvrtc.so.{CUDA_MAJOR}"),
                "libnvrtc.so",
            ]) {
                return Ok("libnvrtc (system library path)".to_string());
            }
            Err(format!(
                "libnvrtc.so was not found in $CUDA_HOME, /usr/local/cuda or {}; install a CUDA {CUDA_MAJOR}.x \
                 toolkit, set CUDA_HOME, or run `cargo xtask check-kernels` once to install the pinned \
                 nvidia-cuda-nvrtc wheel",
                wheel_dir().display()
            ))
        })
        .clone()
        .map_err(Error::NoNvrtc)
}

/// Whether the CUDA driver library can be opened (false on machines without a GPU driver).
pub fn driver_present() -> bool {
    library_present(&["libcuda.so.1", "libcuda.so"])
}

/// Whether one of `names` can be opened by the dynamic loader. Probed with libloading rather
/// than cudarc's `is_culib_present`, which exists only when cudarc loads libraries at run time:
/// with candle's `cuda` feature in the build, cudarc links them instead (`dynamic-linking`), and
/// the core must compile under either mode (see crates/candle/README section in the README).
fn library_present(names: &[&str]) -> bool {
    names.iter().any(|name| {
        // SAFETY: opening NVIDIA's own libraries runs their initialisers only; the handle is
        // dropped (the library stays loaded if something else holds it).
        unsafe { libloading::Library::new(*name) }.is_ok()
    })
}

/// NVRTC's (major, minor) version.
pub fn nvrtc_version() -> Result<(i32, i32), Error> {
    ensure_nvrtc()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters.
    let rc = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if rc != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(Error::NoNvrtc(format!("nvrtcVersion failed: {rc:?}")));
    }
    Ok((major, minor))
}
