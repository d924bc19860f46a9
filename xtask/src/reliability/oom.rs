//! The `oom` check of `cargo xtask reliability` (the list in `super` says what it tries).

use std::time::Instant;

use flashcore::cudarc::driver::CudaSlice;
use flashcore::{Attention, AttentionProblem, Device, Error};
use ndarray::Array4;

use super::host::mib;
use super::watchdog::step;
use super::{dims_for, Args, Report, Res};
use crate::case::{run_case, Case, Outcome};

pub(super) fn run(dev: &Device, kernels: &[Box<dyn Attention>], args: &Args, report: &mut Report) {
    for k in kernels {
        let t = Instant::now();
        let _s = step(format!("oom {}", k.name()), args.step_timeout);
        let d = dims_for(k.as_ref(), args, &[128, 64])[0];
        let small = Case {
            problem: AttentionProblem::new(1, 4, 129, d).with_causal(k.capabilities().causal),
            data_seed: 77,
        };
        match oom_one(dev, k.as_ref(), &small, d) {
            Ok(Some(m)) => report.add("oom", k.name(), Res::Pass, m, t),
            Ok(None) => report.add(
                "oom",
                k.name(),
                Res::Skip,
                "does not take the small case".into(),
                t,
            ),
            Err(m) => report.add("oom", k.name(), Res::Fail, m, t),
        }
    }
}

fn oom_one(
    dev: &Device,
    k: &dyn Attention,
    small: &Case,
    d: usize,
) -> std::result::Result<Option<String>, String> {
    // Warm up first, so that compiling and loading the module is not what runs out.
    match run_case(k, dev, small) {
        Outcome::Pass(_) => {}
        Outcome::Skipped(_) => return Ok(None),
        Outcome::Fail(m, _) => return Err(format!("the small case fails before any OOM: {m}")),
    }
    dev.synchronize().map_err(|e| e.to_string())?;
    let (free0, total) = dev.memory().map_err(|e| e.to_string())?;
    // 1. One allocation larger than the device.
    let too_big = total + (1 << 30);
    // SAFETY: never read; expected to fail.
    let r = unsafe { dev.stream().alloc::<u8>(too_big) };
    let direct = match r {
        Err(e) if format!("{e:?}").contains("OUT_OF_MEMORY") => {
            "alloc > total -> CUDA_ERROR_OUT_OF_MEMORY".to_string()
        }
        Err(e) => format!("alloc > total -> {e:?}"),
        Ok(_) => {
            return Err(format!(
                "allocating {} MiB (more than the device's {} MiB) succeeded",
                too_big >> 20,
                total >> 20
            ))
        }
    };
    // 2. Fill the device to within 256 MiB, then ask forward_host for ~1 GiB of tensors. Another
    // process on the GPU may free memory meanwhile (a verify run beside reliability did, on the
    // H200, 2026-11-29): a success with more memory free afterwards than before is retried.
    let mut attempt = 0;
    let host = loop {
        attempt += 1;
        let _ballast = fill_to_near(dev, free0)?;
        let (free_low, _) = dev.memory().map_err(|e| e.to_string())?;
        let seq = ((free_low + (512 << 20)) / (4 * 16 * d * 2)).max(1024);
        let p = AttentionProblem::new(1, 16, seq, d);
        let zero = Array4::<f32>::zeros((1, 1, 1, 1));
        let big = zero.broadcast(p.layout.shape(1, 16, seq, d)).unwrap();
        let r = flashcore::forward_host(k, dev, &p, big, big, big);
        let tensors = (4 * p.q_len() * 2) >> 20;
        // (The ballast goes when the loop body ends, before the checks below.)
        match r {
            Err(Error::OutOfMemory { what, bytes }) => break format!(
                "forward_host ({tensors} MiB of tensors, {} MiB free) -> OutOfMemory ({what}, {bytes} bytes)",
                free_low >> 20
            ),
            Err(Error::Cuda { context, message }) if message.contains("OUT_OF_MEMORY") => {
                break format!("forward_host -> CUDA error in {context}: {message}")
            }
            Err(e) => {
                return Err(format!(
                    "forward_host with {} MiB free: unexpected error {e}",
                    free_low >> 20
                ))
            }
            Ok(_) => {
                let (free_after, _) = dev.memory().map_err(|e| e.to_string())?;
                let grew = free_after.saturating_sub(free_low);
                if grew > (256 << 20) && attempt < 3 {
                    eprintln!(
                        "oom: {} MiB more free after the call than before it (another process?): again",
                        grew >> 20
                    );
                    continue;
                }
                return Err(format!(
                    "forward_host with {tensors} MiB of tensors and {} MiB free succeeded ({} MiB \
                     free after it)",
                    free_low >> 20,
                    free_after >> 20
                ));
            }
        }
    };
    dev.synchronize()
        .map_err(|e| format!("device unusable after the OOM: {e}"))?;
    let (free1, _) = dev.memory().map_err(|e| e.to_string())?;
    let lost = free0.saturating_sub(free1);
    if lost > 64 << 20 {
        return Err(format!(
            "{host}; but {:.0} MiB less free afterwards (leak?)",
            mib(lost)
        ));
    }
    match run_case(k, dev, small) {
        Outcome::Pass(v) => Ok(Some(format!(
            "{direct}; {host}; then {} passes (ratio {:.3}), free memory back within {:.0} MiB",
            small.to_arg(),
            v.ratio,
            mib(lost)
        ))),
        Outcome::Fail(m, _) => Err(format!("{host}; then the small case FAILS: {m}")),
        Outcome::Skipped(r) => Err(format!("small case skipped after OOM: {r}")),
    }
}

/// A ballast leaving 256 MiB (else 512 MiB, else 1 GiB) of the `free0` bytes free.
fn fill_to_near(dev: &Device, free0: usize) -> std::result::Result<CudaSlice<u8>, String> {
    for keep in [256usize << 20, 512 << 20, 1 << 30] {
        if free0 <= keep {
            break;
        }
        // SAFETY: never read.
        if let Ok(b) = unsafe { dev.stream().alloc::<u8>(free0 - keep) } {
            return Ok(b);
        }
    }
    Err(format!(
        "could not allocate a ballast near the {} MiB free",
        free0 >> 20
    ))
}
