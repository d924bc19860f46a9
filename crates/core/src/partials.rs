//! Combining partial attention results (`kernels/core_partials.cu`), for context parallelism
//! (ring attention): the local query rows attend to several K/V blocks one after another, each
//! giving a partial O and its LSE; [`merge_partial`] folds them into an f32 accumulator by LSE,
//! as split-KV merges its splits, and [`cast_partial`] writes the result back in the model's
//! dtype. The backward sums per-block gradients with [`add_partial`].
//!
//! Every length and dtype is checked before anything launches; empty inputs launch nothing. The
//! calls queue work on `stream` (of the device's context) and do not wait.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut};

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, InvalidProblem};
use crate::execute::{launch_with, Guards};
use crate::launch_plan::{linear_grid, tiles, KernelLaunch};
use crate::params::AttentionParams;
use crate::problem::MAX_ELEMENTS;
use crate::tensors::{check_dtypes, check_lens, TensorMut, TensorRef};

const SOURCE: &str = "core_partials.cu";

/// Rows of `merge_partial` per block: one warp each.
const MERGE_ROWS_PER_BLOCK: u32 = 8;

/// Threads per block of the element-wise kernels.
const ELEMENTWISE_THREADS: u32 = 256;

/// Shapes of one partial block: dense BSHD O [batch, rows, heads, width], LSE [batch, heads, rows].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartialShape {
    pub batch: usize,
    pub rows: usize,
    pub heads: usize,
    /// O's head dim (V's).
    pub width: usize,
    pub dtype: DType,
}

impl PartialShape {
    /// Elements of one O tensor (the block's or the accumulator's).
    pub fn o_len(&self) -> usize {
        self.batch * self.rows * self.heads * self.width
    }

    /// Elements of one LSE tensor.
    pub fn lse_len(&self) -> usize {
        self.batch * self.heads * self.rows
    }

    /// Every count the kernel takes as i32 fits, and O's elements are addressable (checked
    /// before [`o_len`](Self::o_len) is trusted not to overflow).
    fn check_size(&self) -> Result<(), InvalidProblem> {
        for (what, v) in [
            ("batch", self.batch),
            ("rows", self.rows),
            ("heads", self.heads),
            ("width", self.width),
        ] {
            if v > i32::MAX as usize {
                return Err(InvalidProblem::TooLarge {
                    what,
                    value: v as u128,
                    limit: i32::MAX as u128,
                });
            }
        }
        let o = self.batch as u128 * self.rows as u128 * self.heads as u128;
        let o = o * self.width.max(1) as u128;
        if o > MAX_ELEMENTS as u128 {
            return Err(InvalidProblem::TooLarge {
                what: "batch*rows*heads*width",
                value: o,
                limit: MAX_ELEMENTS as u128,
            });
        }
        Ok(())
    }
}

/// The buffers of a [`merge_partial`] call against its shape: sizes within the kernel's
/// indexing, each length exactly the shape's, and the block's dtype the shape's.
fn check_merge(
    shape: &PartialShape,
    acc_o: usize,
    acc_lse: usize,
    o: usize,
    o_dtype: DType,
    lse: usize,
) -> Result<(), InvalidProblem> {
    shape.check_size()?;
    let (o_len, lse_len) = (shape.o_len(), shape.lse_len());
    check_lens(
        ["acc_o", "acc_lse", "o", "lse"],
        [acc_o, acc_lse, o, lse],
        [o_len, lse_len, o_len, lse_len],
        true,
    )?;
    check_dtypes(["o"], [o_dtype], shape.dtype)
}

/// An element-wise call's accumulator (`acc_name`) against its 16-bit tensor (`x_name`, whose
/// length is the call's): the same length.
fn check_elementwise(
    acc_name: &'static str,
    acc: usize,
    x_name: &'static str,
    x: usize,
) -> Result<(), InvalidProblem> {
    if x > MAX_ELEMENTS {
        return Err(InvalidProblem::TooLarge {
            what: x_name,
            value: x as u128,
            limit: MAX_ELEMENTS as u128,
        });
    }
    check_lens([acc_name], [acc], [x], true)
}

/// Folds one block's partial result into the accumulator, row by row: with `first`, the
/// accumulator becomes the block (its contents unread); otherwise the two are merged by LSE:
/// m = max(lse_acc, lse_blk), w = exp(lse - m) for each side, LSE = m + log(w_acc + w_blk),
/// O = (w_acc O_acc + w_blk O_blk) / (w_acc + w_blk), in f32. A row whose LSE is +inf has no keys
/// (O = 0) and weighs nothing; a NaN LSE or O element makes the merged row's NaN.
///
/// `acc_o` and `o` are dense [batch, rows, heads, width] (`o` in `shape.dtype`); `acc_lse` and
/// `lse` dense [batch, heads, rows], natural log, as flashcore's forward writes them.
#[allow(clippy::too_many_arguments)]
pub fn merge_partial(
    device: &Device,
    stream: &Arc<CudaStream>,
    shape: &PartialShape,
    acc_o: &mut CudaViewMut<'_, f32>,
    acc_lse: &mut CudaViewMut<'_, f32>,
    o: &TensorRef<'_>,
    lse: &CudaView<'_, f32>,
    first: bool,
) -> Result<(), Error> {
    check_merge(
        shape,
        acc_o.len(),
        acc_lse.len(),
        o.data.len(),
        o.dtype,
        lse.len(),
    )?;
    device.check_stream(stream)?;
    let rows = shape.lse_len();
    if rows == 0 {
        return Ok(());
    }
    let params = AttentionParams {
        batch: shape.batch as i32,
        heads_q: shape.heads as i32,
        heads_kv: shape.heads as i32,
        seq_q: shape.rows as i32,
        seq_k: shape.rows as i32,
        head_dim: shape.width as i32,
        ..Default::default()
    };
    // Held (recording each buffer's use on `stream`) until the launch is queued.
    let mut uses = Guards::default();
    let ptrs = [
        uses.keep(acc_o.device_ptr_mut(stream)),
        uses.keep(acc_lse.device_ptr_mut(stream)),
        uses.keep(o.data.device_ptr(stream)),
        uses.keep(lse.device_ptr(stream)),
    ];
    let first = first as i32;
    let mut extra: Vec<*mut c_void> = ptrs
        .iter()
        .map(|p| p as *const u64 as *mut c_void)
        .collect();
    extra.push(&first as *const i32 as *mut c_void);
    let launch = KernelLaunch {
        grid: (
            linear_grid(tiles(rows, MERGE_ROWS_PER_BLOCK as usize)),
            1,
            1,
        ),
        // One warp per row: the kernel relies on blockDim.x = 32.
        block: (32, MERGE_ROWS_PER_BLOCK, 1),
        ..KernelLaunch::per_item(SOURCE, "merge_partial", 1, 32)
    };
    launch_with(device, stream, shape.dtype, &launch, &params, &extra)
}

/// Sums a partial gradient into an f32 accumulator: `acc[i] += x[i]` (with `first`,
/// `acc[i] = x[i]`, its contents unread) for every element of `x`; `acc` has as many.
pub fn add_partial(
    device: &Device,
    stream: &Arc<CudaStream>,
    acc: &mut CudaViewMut<'_, f32>,
    x: &TensorRef<'_>,
    first: bool,
) -> Result<(), Error> {
    let n = x.data.len();
    check_elementwise("acc", acc.len(), "x", n)?;
    device.check_stream(stream)?;
    if n == 0 {
        return Ok(());
    }
    let mut uses = Guards::default();
    let ptrs = [
        uses.keep(acc.device_ptr_mut(stream)),
        uses.keep(x.data.device_ptr(stream)),
    ];
    let (n_arg, first) = (n as i64, first as i32);
    let extra = [
        &ptrs[0] as *const u64 as *mut c_void,
        &ptrs[1] as *const u64 as *mut c_void,
        &n_arg as *const i64 as *mut c_void,
        &first as *const i32 as *mut c_void,
    ];
    let launch = KernelLaunch::per_thread(SOURCE, "add_partial", n, ELEMENTWISE_THREADS);
    launch_with(
        device,
        stream,
        x.dtype,
        &launch,
        &AttentionParams::default(),
        &extra,
    )
}

/// Writes an f32 accumulator out in `out`'s dtype, each element rounded to nearest (ties to
/// even); `acc` and `out` have the same length.
pub fn cast_partial(
    device: &Device,
    stream: &Arc<CudaStream>,
    acc: &CudaView<'_, f32>,
    out: &mut TensorMut<'_>,
) -> Result<(), Error> {
    let n = out.data.len();
    check_elementwise("acc", acc.len(), "out", n)?;
    device.check_stream(stream)?;
    if n == 0 {
        return Ok(());
    }
    let dtype = out.dtype;
    let mut uses = Guards::default();
    let ptrs = [
        uses.keep(acc.device_ptr(stream)),
        uses.keep(out.data.device_ptr_mut(stream)),
    ];
    let n_arg = n as i64;
    let extra = [
        &ptrs[0] as *const u64 as *mut c_void,
        &ptrs[1] as *const u64 as *mut c_void,
        &n_arg as *const i64 as *mut c_void,
    ];
    let launch = KernelLaunch::per_thread(SOURCE, "cast_partial", n, ELEMENTWISE_THREADS);
    launch_with(
        device,
        stream,
        dtype,
        &launch,
        &AttentionParams::default(),
        &extra,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> PartialShape {
        PartialShape {
            batch: 2,
            rows: 3,
            heads: 4,
            width: 5,
            dtype: DType::Bf16,
        }
    }

    #[test]
    fn lengths_of_a_shape() {
        let s = shape();
        assert_eq!((s.o_len(), s.lse_len()), (120, 24));
    }

    #[test]
    fn merge_takes_exact_lengths_and_the_shapes_dtype() {
        let s = shape();
        assert_eq!(check_merge(&s, 120, 24, 120, DType::Bf16, 24), Ok(()));
        let mismatch = |tensor, got, needed| {
            Err(InvalidProblem::LengthMismatch {
                tensor,
                got,
                needed,
            })
        };
        assert_eq!(
            check_merge(&s, 119, 24, 120, DType::Bf16, 24),
            mismatch("acc_o", 119, 120)
        );
        assert_eq!(
            check_merge(&s, 120, 25, 120, DType::Bf16, 24),
            mismatch("acc_lse", 25, 24)
        );
        assert_eq!(
            check_merge(&s, 120, 24, 121, DType::Bf16, 24),
            mismatch("o", 121, 120)
        );
        assert_eq!(
            check_merge(&s, 120, 24, 120, DType::Bf16, 0),
            mismatch("lse", 0, 24)
        );
        assert_eq!(
            check_merge(&s, 120, 24, 120, DType::F16, 24),
            Err(InvalidProblem::DTypeMismatch {
                tensor: "o",
                got: DType::F16,
                expected: DType::Bf16,
            })
        );
        let err = check_merge(&s, 120, 24, 121, DType::Bf16, 24).unwrap_err();
        assert_eq!(
            err.to_string(),
            "o: buffer holds 121 elements but the problem addresses 120"
        );
    }

    #[test]
    fn merge_of_nothing_checks_empty_buffers() {
        let s = PartialShape { rows: 0, ..shape() };
        assert_eq!(check_merge(&s, 0, 0, 0, DType::Bf16, 0), Ok(()));
        assert!(check_merge(&s, 1, 0, 0, DType::Bf16, 0).is_err());
        // No width: no O, but the LSE still merges.
        let s = PartialShape {
            width: 0,
            ..shape()
        };
        assert_eq!(check_merge(&s, 0, 24, 0, DType::Bf16, 24), Ok(()));
    }

    #[test]
    fn merge_refuses_sizes_past_the_kernels_indexing() {
        let s = PartialShape {
            rows: i32::MAX as usize + 1,
            ..shape()
        };
        assert!(matches!(
            check_merge(&s, 0, 0, 0, DType::Bf16, 0),
            Err(InvalidProblem::TooLarge { what: "rows", .. })
        ));
        // Each count fits i32, their product does not fit the addressable elements (nor usize
        // on the way: checked before any product is taken in usize).
        let big = i32::MAX as usize;
        let s = PartialShape {
            batch: big,
            rows: big,
            heads: big,
            width: big,
            dtype: DType::F16,
        };
        assert!(matches!(
            check_merge(&s, 0, 0, 0, DType::F16, 0),
            Err(InvalidProblem::TooLarge {
                what: "batch*rows*heads*width",
                ..
            })
        ));
    }

    #[test]
    fn elementwise_calls_take_equal_lengths() {
        assert_eq!(check_elementwise("acc", 7, "x", 7), Ok(()));
        assert_eq!(check_elementwise("acc", 0, "x", 0), Ok(()));
        assert_eq!(
            check_elementwise("acc", 6, "out", 7),
            Err(InvalidProblem::LengthMismatch {
                tensor: "acc",
                got: 6,
                needed: 7,
            })
        );
        assert_eq!(
            check_elementwise("acc", 8, "x", 7),
            Err(InvalidProblem::LengthMismatch {
                tensor: "acc",
                got: 8,
                needed: 7,
            })
        );
    }

    /// The module compiles with NVRTC for every architecture and dtype the build covers, with
    /// no spills where ptxas is found (no GPU needed; skipped without NVRTC).
    #[test]
    fn kernels_compile_for_every_arch() {
        use crate::compile::{compile, CompileRequest};
        if let Err(e) = crate::toolkit::ensure_nvrtc() {
            eprintln!("no NVRTC ({e}): not compiling {SOURCE}");
            return;
        }
        for arch in ["compute_80", "compute_86", "compute_89", "compute_90a"] {
            for dtype in DType::ALL {
                let req = CompileRequest {
                    source: SOURCE,
                    dtype,
                    defines: &[],
                    arch,
                };
                let ptx = compile(&req)
                    .unwrap_or_else(|e| panic!("{SOURCE} {arch} {dtype}: {e}"))
                    .ptx;
                for entry in ["merge_partial", "add_partial", "cast_partial"] {
                    assert!(
                        ptx.contains(&format!(".entry {entry}(")),
                        "{arch} {dtype}: no {entry}"
                    );
                }
                let Some(ptxas) = crate::toolkit::ptxas() else {
                    continue;
                };
                let dir = std::env::temp_dir().join(format!(
                    "flashcore-partials-{}-{arch}-{dtype}",
                    std::process::id()
                ));
                std::fs::create_dir_all(&dir).unwrap();
                let ptx_path = dir.join("p.ptx");
                std::fs::write(&ptx_path, &ptx).unwrap();
                let out = std::process::Command::new(ptxas)
                    .arg(format!("-arch={}", arch.replace("compute_", "sm_")))
                    .arg("-v")
                    .arg(&ptx_path)
                    .arg("-o")
                    .arg(dir.join("p.cubin"))
                    .output()
                    .unwrap();
                let _ = std::fs::remove_dir_all(&dir);
                let report = String::from_utf8_lossy(&out.stderr).into_owned()
                    + &String::from_utf8_lossy(&out.stdout);
                assert!(out.status.success(), "ptxas {arch} {dtype}:\n{report}");
                assert!(
                    report
                        .matches("0 bytes spill stores, 0 bytes spill loads")
                        .count()
                        == 3,
                    "{arch} {dtype}: spills or missing entries:\n{report}"
                );
            }
        }
    }
}
