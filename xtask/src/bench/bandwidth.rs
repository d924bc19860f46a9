//! The decode suite's bandwidth references on the GPU: a device-to-device copy of a row's K/V
//! bytes (the ceiling) and read-only probe kernels on the same bytes (`kernels/bench_read_probe.cu`:
//! what a pure read reaches, through the load units and through TMA), timed alike: CUDA events
//! around back-to-back operations, median, with buffers rotated past twice the L2.

use std::ffi::c_void;

use anyhow::{anyhow, bail, Result};
use flashcore::cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, DevicePtrMut};
use flashcore::{DType, Device};

use super::gpu::{cu, sample_loop, sets_on, LoopOptions, Sampled, Timer};

/// A device-to-device copy of `bytes` (cuMemcpyDtoDAsync between two device buffers), timed like
/// the eager calls: CUDA events around back-to-back copies, median per copy. Source/destination
/// pairs are rotated so that the bytes one pass touches exceed twice the L2 (`sets_needed`, at
/// most `max_pairs`); the sources hold random bytes. Returns the timing and the pairs used.
pub fn time_copy(
    timer: &Timer,
    device: &Device,
    bytes: usize,
    max_pairs: usize,
    opts: &LoopOptions,
) -> Result<(Sampled, usize)> {
    let s = device.stream();
    let pairs = buffers_to_rotate(device, 2 * bytes, max_pairs)?;
    let srcs = random_buffers(device, bytes, pairs)?;
    let mut dsts = (0..pairs)
        .map(|_| cu(s.alloc_zeros::<u8>(bytes), "allocating a copy destination"))
        .collect::<Result<Vec<_>>>()?;
    cu(s.synchronize(), "filling the copy buffers")?;
    let sampled = time_rotated(timer, device, pairs, opts, |i| {
        cu(s.memcpy_dtod(&srcs[i], &mut dsts[i]), "cuMemcpyDtoDAsync")
    })?;
    cu(s.synchronize(), "finishing the copies")?;
    Ok((sampled, pairs))
}

/// The read probe's kernel (`kernels/bench_read_probe.cu`).
const READ_PROBE_SOURCE: &str = "bench_read_probe.cu";
const READ_PROBE_ENTRY: &str = "read_probe";
/// Threads per block (the kernel's `__launch_bounds__`).
pub const READ_PROBE_BLOCK: u32 = 512;
/// Blocks per SM: enough resident warps, with `READ_PROBE_UNROLL` loads in flight each, to cover
/// HBM latency.
pub const READ_PROBE_BLOCKS_PER_SM: u32 = 4;
/// Independent 16-byte loads each thread has in flight.
pub const READ_PROBE_UNROLL: u32 = 8;
/// Threads per block of `read_probe_bulk` (its `__launch_bounds__`: one warp, one thread issuing).
const READ_PROBE_BULK_BLOCK: u32 = 32;

/// A read-only kernel over `bytes` (`kind`: `read_probe`'s 16-byte loads XORed together, or
/// `read_probe_bulk`'s TMA copies into shared memory; nothing written), timed as `time_copy`
/// times the copy: CUDA events around back-to-back launches,
/// median per launch, sources of random bytes rotated so that one pass reads more than twice the
/// L2 (`sets_needed` on the N bytes a launch touches, at most `max_sources`). Returns the timing,
/// the sources used and the launch's (grid, block).
pub fn time_read_probe(
    timer: &Timer,
    device: &Device,
    bytes: usize,
    max_sources: usize,
    opts: &LoopOptions,
    kind: ReadProbeKind,
) -> Result<(Sampled, usize, (u32, u32))> {
    if !bytes.is_multiple_of(16) {
        bail!("the read probe reads 16-byte vectors; {bytes} bytes is not a multiple of 16");
    }
    let s = device.stream();
    let sources = buffers_to_rotate(device, bytes, max_sources)?;
    let srcs = random_buffers(device, bytes, sources)?;
    let probe = ReadProbe::load(device, kind)?;
    let mut out = cu(
        s.alloc_zeros::<u32>(probe.grid as usize),
        "allocating the probe output",
    )?;
    cu(s.synchronize(), "filling the probe sources")?;
    let src_ptrs: Vec<u64> = srcs.iter().map(|b| b.device_ptr(s).0).collect();
    let out_ptr = out.device_ptr_mut(s).0;
    let sampled = time_rotated(timer, device, sources, opts, |i| {
        probe.launch(device, src_ptrs[i], (bytes / 16) as u64, out_ptr)
    })?;
    // The sources and the output drop after this, once no launch can still read them.
    cu(s.synchronize(), "finishing the read probe")?;
    Ok((sampled, sources, (probe.grid, probe.block)))
}

/// Which read kernel a probe launches (`FLASHCORE_BENCH_READ_PROBE`, a diagnostic: `ldg`, the
/// default, or `bulk[:chunk bytes:stages:blocks per SM]`, the TMA stream of `read_probe_bulk`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadProbeKind {
    Ldg,
    Bulk {
        chunk: u32,
        stages: u32,
        blocks_per_sm: u32,
    },
}

/// The TMA stream the decode suite times, and what `bulk` means where the spec leaves its
/// numbers out: the ring shape that read fastest on the H100 on 2026-11-27 (commit cc26e55: 32 KiB
/// copies, 4 stages, one block an SM).
const BULK_CHUNK: u32 = 32768;
const BULK_STAGES: u32 = 4;
const BULK_BLOCKS_PER_SM: u32 = 1;
pub const BULK_DEFAULT: ReadProbeKind = ReadProbeKind::Bulk {
    chunk: BULK_CHUNK,
    stages: BULK_STAGES,
    blocks_per_sm: BULK_BLOCKS_PER_SM,
};

impl ReadProbeKind {
    pub fn parse(s: &str) -> Result<ReadProbeKind> {
        let mut parts = s.trim().split(':');
        match parts.next() {
            Some("ldg") | Some("") | None => Ok(ReadProbeKind::Ldg),
            Some("bulk") => {
                let mut next = |default: u32| -> Result<u32> {
                    match parts.next() {
                        None => Ok(default),
                        Some(v) => v.parse().map_err(|_| {
                            anyhow!("FLASHCORE_BENCH_READ_PROBE: {v:?} is not a count")
                        }),
                    }
                };
                let (chunk, stages, blocks_per_sm) = (
                    next(BULK_CHUNK)?,
                    next(BULK_STAGES)?,
                    next(BULK_BLOCKS_PER_SM)?,
                );
                if chunk == 0 || !chunk.is_multiple_of(16) || stages == 0 || blocks_per_sm == 0 {
                    bail!("FLASHCORE_BENCH_READ_PROBE: chunks are a multiple of 16 bytes, stages and blocks at least 1");
                }
                Ok(ReadProbeKind::Bulk {
                    chunk,
                    stages,
                    blocks_per_sm,
                })
            }
            Some(other) => bail!(
                "FLASHCORE_BENCH_READ_PROBE={other}: expected ldg or bulk[:chunk:stages:blocks]"
            ),
        }
    }

    /// The probes the decode suite times: the LSU stream and [`BULK_DEFAULT`], or those
    /// `FLASHCORE_BENCH_READ_PROBE` names (comma-separated; a diagnostic).
    pub fn from_env() -> Result<Vec<ReadProbeKind>> {
        match std::env::var("FLASHCORE_BENCH_READ_PROBE") {
            Ok(v) => v.split(',').map(ReadProbeKind::parse).collect(),
            Err(_) => Ok(vec![ReadProbeKind::Ldg, BULK_DEFAULT]),
        }
    }

    /// Whether the probe runs on a device of compute capability `major`.x (`read_probe_bulk`'s
    /// cp.async.bulk is sm_90 and later; elsewhere its entry traps).
    pub fn runs_on(&self, major: u32) -> bool {
        matches!(self, ReadProbeKind::Ldg) || major >= 9
    }

    pub fn label(&self) -> String {
        match self {
            ReadProbeKind::Ldg => "ldg".into(),
            ReadProbeKind::Bulk {
                chunk,
                stages,
                blocks_per_sm,
            } => format!("bulk:{chunk}:{stages}:{blocks_per_sm}"),
        }
    }
}

/// The loaded read probe and its launch shape.
struct ReadProbe {
    function: CudaFunction,
    grid: u32,
    block: u32,
    smem: u32,
}

impl ReadProbe {
    fn load(device: &Device, kind: ReadProbeKind) -> Result<ReadProbe> {
        let (entry, defines, block, blocks_per_sm, smem) = match kind {
            ReadProbeKind::Ldg => (
                READ_PROBE_ENTRY,
                vec![(
                    "READ_PROBE_UNROLL".to_string(),
                    READ_PROBE_UNROLL.to_string(),
                )],
                READ_PROBE_BLOCK,
                READ_PROBE_BLOCKS_PER_SM,
                0,
            ),
            ReadProbeKind::Bulk {
                chunk,
                stages,
                blocks_per_sm,
            } => (
                "read_probe_bulk",
                vec![
                    ("READ_PROBE_CHUNK".to_string(), chunk.to_string()),
                    ("READ_PROBE_STAGES".to_string(), stages.to_string()),
                ],
                READ_PROBE_BULK_BLOCK,
                blocks_per_sm,
                chunk * stages,
            ),
        };
        // The dtype only picks a define that the probe does not read.
        let function = device
            .function(READ_PROBE_SOURCE, entry, DType::Bf16, &defines, smem)
            .map_err(|e| anyhow!("{e}"))?;
        cu(device.context().bind_to_thread(), "binding the context")?;
        Ok(ReadProbe {
            function,
            grid: device.info().sm_count * blocks_per_sm,
            block,
            smem,
        })
    }

    /// Queues one launch reading `n16` 16-byte vectors at `src` on the device's stream; `out`
    /// holds a word per block of the grid.
    fn launch(&self, device: &Device, src: u64, n16: u64, out: u64) -> Result<()> {
        let mut args = [
            &src as *const u64 as *mut c_void,
            &n16 as *const u64 as *mut c_void,
            &out as *const u64 as *mut c_void,
        ];
        // SAFETY: the arguments match both probes' (a source pointer, unsigned long long,
        // unsigned*), and the caller keeps the buffers behind `src` and `out` alive until the
        // stream has run the launch.
        unsafe {
            flashcore::cudarc::driver::result::launch_kernel(
                self.function.cu_function(),
                (self.grid, 1, 1),
                (self.block, 1, 1),
                self.smem,
                device.stream().cu_stream(),
                &mut args,
            )
        }
        .map_err(|e| anyhow!("CUDA error in launching the read probe: {e:?}"))
    }
}

/// How many buffer sets to rotate when one operation touches `bytes_per_op`: the input sets'
/// rule (`sets_needed`), within a quarter of the free memory and at most `max`.
fn buffers_to_rotate(device: &Device, bytes_per_op: usize, max: usize) -> Result<usize> {
    sets_on(device, bytes_per_op, bytes_per_op, max)
}

/// `count` device buffers of `bytes`, each holding 16 MiB of random bytes repeated (a zero
/// buffer would do as well on memory without compression; this does not depend on that).
fn random_buffers(device: &Device, bytes: usize, count: usize) -> Result<Vec<CudaSlice<u8>>> {
    let s = device.stream();
    let chunk_len = bytes.clamp(1, 16 << 20);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let chunk: Vec<u8> = (0..chunk_len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    let mut buffers = Vec::with_capacity(count);
    for _ in 0..count {
        let mut buf = cu(s.alloc_zeros::<u8>(bytes), "allocating a bandwidth buffer")?;
        let mut at = 0;
        while at < bytes {
            let n = chunk_len.min(bytes - at);
            let mut view = buf.slice_mut(at..at + n);
            cu(
                s.memcpy_htod(&chunk[..n], &mut view),
                "filling a bandwidth buffer",
            )?;
            at += n;
        }
        buffers.push(buf);
    }
    Ok(buffers)
}

/// Times `op(i)`, one operation on buffer set i, with i rotating over `count` sets: three
/// operations to warm up, three to estimate one, then `sample_loop` (CUDA events around
/// back-to-back operations, median per operation). The copy and the read probe share it, so the
/// two are timed the same way.
fn time_rotated(
    timer: &Timer,
    device: &Device,
    count: usize,
    opts: &LoopOptions,
    mut op: impl FnMut(usize) -> Result<()>,
) -> Result<Sampled> {
    let mut next = 0usize;
    let mut ops = |n: u64| -> Result<()> {
        for _ in 0..n {
            op(next % count)?;
            next += 1;
        }
        Ok(())
    };
    ops(3)?;
    let per_op_us = timer.time_ms(device, || ops(3))? * 1e3 / 3.0;
    sample_loop(timer, device, per_op_us, opts, 1, &mut ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_kinds_parse_strictly() {
        assert_eq!(ReadProbeKind::parse("ldg").unwrap(), ReadProbeKind::Ldg);
        // The suite's ring fills what is left out.
        assert_eq!(ReadProbeKind::parse("bulk").unwrap(), BULK_DEFAULT);
        assert_eq!(
            ReadProbeKind::parse("bulk:8192").unwrap(),
            ReadProbeKind::Bulk {
                chunk: 8192,
                stages: 4,
                blocks_per_sm: 1
            }
        );
        let k = ReadProbeKind::parse("bulk:32768:4:1").unwrap();
        assert_eq!(
            k,
            ReadProbeKind::Bulk {
                chunk: 32768,
                stages: 4,
                blocks_per_sm: 1
            }
        );
        // The label is what the report records and what parses back.
        assert_eq!(k.label(), "bulk:32768:4:1");
        assert_eq!(ReadProbeKind::parse(&k.label()).unwrap(), k);
        // The TMA probe needs sm_90; the LSU one runs anywhere.
        assert!(ReadProbeKind::Ldg.runs_on(8) && k.runs_on(9) && !k.runs_on(8));
        for bad in [
            "tma",
            "bulk:100",
            "bulk:0",
            "bulk:32768:0",
            "bulk:32768:4:0",
            "bulk:x",
        ] {
            assert!(ReadProbeKind::parse(bad).is_err(), "{bad}");
        }
    }
}
