//! Kernel modules compiled ahead of time (the `aot` feature; see `build.rs`).
//!
//! The build script compiles every line of `aot-modules.txt` for the architectures it builds
//! (all four, or those in `FLASHCORE_AOT_ARCHS`) to a cubin with NVRTC from a toolkit or the
//! pinned wheels, and embeds one cubin per (source, architecture, dtype, defines) that the
//! compiled-in generations plan for; [`find`] answers the core's question "is there a prebuilt
//! image for this compile request?", and [`install`] hands that lookup to the core so that
//! `Device::function` loads the image instead of running NVRTC. A request with no image (another
//! architecture, a define set the build did not foresee) still goes to NVRTC.

use crate::DType;

/// One embedded module.
#[derive(Clone, Copy, Debug)]
pub struct AotImage {
    /// File under `kernels/`.
    pub source: &'static str,
    /// The NVRTC architecture the core asks for on that device (`compile::arch_for`), e.g.
    /// "compute_90a"; the image itself is SASS for the matching sm_XX.
    pub arch: &'static str,
    pub dtype: DType,
    /// The plan's defines, in the plan's order (FC_DTYPE_* is implied by `dtype`).
    pub defines: &'static [(&'static str, &'static str)],
    pub cubin: &'static [u8],
}

include!(concat!(env!("OUT_DIR"), "/aot_images.rs"));

/// Every embedded module (empty when no compiler was found at build time).
pub fn images() -> &'static [AotImage] {
    AOT_IMAGES
}

/// The NVRTC architectures ("compute_90a", ...) the build compiled `aot-modules.txt` for; empty
/// when it found no compiler. Every manifest line of these architectures has an image unless the
/// build warned that a module failed (`tests/aot_manifest.rs` checks).
pub fn archs() -> &'static [&'static str] {
    AOT_ARCHS
}

/// One line on what the build did: how many modules it compiled, with what, for which
/// architectures, or why none were embedded.
pub fn status() -> &'static str {
    AOT_STATUS
}

/// The embedded image for a compile request, if the build made one: the same source, dtype,
/// architecture and defines (same order) as the core's `CompileRequest`.
pub fn find(
    source: &str,
    dtype: DType,
    defines: &[(String, String)],
    arch: &str,
) -> Option<&'static [u8]> {
    AOT_IMAGES
        .iter()
        .find(|m| {
            m.source == source
                && m.dtype == dtype
                && m.arch == arch
                && m.defines.len() == defines.len()
                && m.defines
                    .iter()
                    .zip(defines)
                    .all(|((k, v), (k2, v2))| k == k2 && v == v2)
        })
        .map(|m| m.cubin)
}

/// Registers [`find`] with the core, once; `kernels()`, `kernel()` and `best_for()` call it.
///
/// `Device::function` consults the registered lookup (`flashcore_core::compile::prebuilt`)
/// before NVRTC; modules without an embedded image still go through NVRTC.
pub fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        flashcore_core::compile::register_prebuilt(|req| {
            find(req.source, req.dtype, req.defines, req.arch)
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_embedded_image_is_found_by_its_request() {
        eprintln!("aot: {} ({} images)", status(), images().len());
        for m in images() {
            let defines: Vec<(String, String)> = m
                .defines
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let found = find(m.source, m.dtype, &defines, m.arch).expect("found");
            assert!(std::ptr::eq(found, m.cubin) || found == m.cubin);
            assert!(!m.cubin.is_empty(), "{} is empty", m.source);
            let other = if m.dtype == DType::F16 {
                DType::Bf16
            } else {
                DType::F16
            };
            let same_other_dtype = images().iter().any(|x| {
                x.source == m.source
                    && x.arch == m.arch
                    && x.dtype == other
                    && x.defines == m.defines
            });
            assert_eq!(
                find(m.source, other, &defines, m.arch).is_some(),
                same_other_dtype
            );
            assert!(find(m.source, m.dtype, &defines, "compute_75").is_none());
        }
    }

    #[test]
    fn the_generations_ask_for_modules_the_build_embedded() {
        if images().is_empty() {
            assert!(status().contains("NVRTC at run time"), "{}", status());
            return;
        }
        if !archs().contains(&"compute_90a") {
            eprintln!("aot: sm_90a not built ({}); nothing to check", status());
            return;
        }
        // On an H100: every launch of every generation that takes the mission shape, and of
        // those `examples/first_call.rs` times (Hopper prefill, tile64, a GQA decode step).
        let dev = crate::DeviceInfo::synthetic_h100();
        let problems = [
            crate::AttentionProblem::new(1, 8, 512, 64),
            crate::AttentionProblem::new(4, 16, 2048, 128),
            crate::AttentionProblem::new(8, 32, 1, 128)
                .with_kv(8, 8192)
                .with_dtype(DType::Bf16)
                .with_causal(true),
        ];
        for p in problems {
            for k in crate::kernels() {
                let Ok(plan) = k.plan(&p, &dev) else { continue };
                for l in plan.launches {
                    assert!(
                        find(l.source, p.dtype, &l.defines, "compute_90a").is_some(),
                        "{}: {} {:?} not embedded",
                        k.name(),
                        l.source,
                        l.defines
                    );
                }
            }
        }
    }
}
