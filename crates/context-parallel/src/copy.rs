//! Stream-ordered device copies between a rank's local layout and its parts: rows of a dense
//! tensor cut along the sequence (`[outer, parts·c, inner]` ↔ `[parts][outer, c, inner]`).

use cudarc::driver::{sys, CudaStream};

use crate::error::CpError;

/// A strided copy: `height` runs of `width` bytes, the i-th from `src + i·src_pitch` to
/// `dst + i·dst_pitch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Runs {
    pub dst: u64,
    pub dst_pitch: usize,
    pub src: u64,
    pub src_pitch: usize,
    pub width: usize,
    pub height: usize,
}

/// cuMemcpy2D takes pitches below this; longer runs (a million-token part of one sequence is
/// gigabytes) go one run per copy.
const MAX_PITCH: usize = 1 << 30;

pub(crate) fn copy_runs(stream: &CudaStream, rank: usize, r: Runs) -> Result<(), CpError> {
    if r.width == 0 || r.height == 0 {
        return Ok(());
    }
    let fail = |e: sys::CUresult| CpError::Cuda {
        rank,
        what: "device copy",
        message: format!("{e:?}"),
    };
    if r.height == 1 || r.src_pitch.max(r.dst_pitch) >= MAX_PITCH {
        for i in 0..r.height {
            // SAFETY: the caller sized both buffers for `height` runs at these pitches.
            let e = unsafe {
                sys::cuMemcpyDtoDAsync_v2(
                    r.dst + (i * r.dst_pitch) as u64,
                    r.src + (i * r.src_pitch) as u64,
                    r.width,
                    stream.cu_stream(),
                )
            };
            if e != sys::CUresult::CUDA_SUCCESS {
                return Err(fail(e));
            }
        }
        return Ok(());
    }
    let m = sys::CUDA_MEMCPY2D {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        srcHost: std::ptr::null(),
        srcDevice: r.src,
        srcArray: std::ptr::null_mut(),
        srcPitch: r.src_pitch,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        dstHost: std::ptr::null_mut(),
        dstDevice: r.dst,
        dstArray: std::ptr::null_mut(),
        dstPitch: r.dst_pitch,
        WidthInBytes: r.width,
        Height: r.height,
    };
    // SAFETY: as above.
    let e = unsafe { sys::cuMemcpy2DAsync_v2(&m, stream.cu_stream()) };
    if e != sys::CUresult::CUDA_SUCCESS {
        return Err(fail(e));
    }
    Ok(())
}

/// A dense tensor cut along its sequence: `[outer, parts·c, inner]` elements of `elem` bytes in
/// the local layout, `[parts][outer, c, inner]` split.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Parts {
    pub outer: usize,
    pub parts: usize,
    pub c: usize,
    pub inner: usize,
    pub elem: usize,
}

impl Parts {
    /// The runs that move part `part` from the local layout at `rows` to its place in the split
    /// layout at `split` (or back).
    pub(crate) fn runs(&self, rows: u64, split: u64, part: usize, to_split: bool) -> Runs {
        let width = self.c * self.inner * self.elem;
        let rows_at = rows + (part * width) as u64;
        let split_at = split + (part * self.outer * width) as u64;
        let (rows_pitch, split_pitch) = (self.parts * width, width);
        let height = self.outer;
        if to_split {
            Runs {
                dst: split_at,
                dst_pitch: split_pitch,
                src: rows_at,
                src_pitch: rows_pitch,
                width,
                height,
            }
        } else {
            Runs {
                dst: rows_at,
                dst_pitch: rows_pitch,
                src: split_at,
                src_pitch: split_pitch,
                width,
                height,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Applies runs to host memory, as the device copy would.
    fn apply(mem: &mut [u8], r: Runs) {
        for i in 0..r.height {
            for b in 0..r.width {
                mem[r.dst as usize + i * r.dst_pitch + b] =
                    mem[r.src as usize + i * r.src_pitch + b];
            }
        }
    }

    #[test]
    fn parts_round_trip_a_zigzag_layout() {
        let (outer, parts, c, inner, elem) = (3, 2, 4, 5, 2);
        let n = outer * parts * c * inner * elem;
        let mut mem = vec![0u8; 3 * n];
        for (i, b) in mem[..n].iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        let (rows, split, back) = (0u64, n as u64, 2 * n as u64);
        let g = Parts {
            outer,
            parts,
            c,
            inner,
            elem,
        };
        for p in 0..parts {
            apply(&mut mem, g.runs(rows, split, p, true));
        }
        // Part p of outer index o holds rows p·c.. of o, contiguous.
        let width = c * inner * elem;
        for o in 0..outer {
            for p in 0..parts {
                let got = &mem[n + (p * outer + o) * width..][..width];
                let want = &mem[(o * parts + p) * width..][..width];
                assert_eq!(got, want);
            }
        }
        for p in 0..parts {
            apply(&mut mem, g.runs(back, split, p, false));
        }
        assert_eq!(mem[..n], mem[2 * n..]);
    }
}
