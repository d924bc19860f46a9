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

/// Packed sequences cut along their rows: `[outer, Σ local rows, inner]` in the local layout (each
/// sequence's `parts` chunks one after the other), `[parts][outer, Σ chunk rows, inner]` split.
/// Q, K, V and O have `outer` 1; the LSE `[heads, Σ rows]` has `outer` = heads, `inner` 1.
#[derive(Clone, Debug)]
pub(crate) struct PackedParts<'a> {
    pub chunks: &'a [usize],
    pub parts: usize,
    pub outer: usize,
    pub inner: usize,
    pub elem: usize,
}

impl PackedParts<'_> {
    /// The runs that move every part of every sequence between `local` and `split`.
    pub(crate) fn runs(&self, local: u64, split: u64, to_split: bool) -> Vec<Runs> {
        let row = self.inner * self.elem;
        let total_c: usize = self.chunks.iter().sum();
        let (local_pitch, split_pitch) = (self.parts * total_c * row, total_c * row);
        let mut out = Vec::new();
        let (mut off, mut cs) = (0usize, 0usize);
        for &c in self.chunks {
            for part in 0..self.parts {
                let l = local + ((off + part * c) * row) as u64;
                let sp = split + ((part * self.outer * total_c + cs) * row) as u64;
                let (dst, dst_pitch, src, src_pitch) = if to_split {
                    (sp, split_pitch, l, local_pitch)
                } else {
                    (l, local_pitch, sp, split_pitch)
                };
                out.push(Runs {
                    dst,
                    dst_pitch,
                    src,
                    src_pitch,
                    width: c * row,
                    height: self.outer,
                });
            }
            off += self.parts * c;
            cs += c;
        }
        out
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

    #[test]
    fn packed_parts_round_trip_and_group_each_part() {
        let chunks = [3usize, 1, 5];
        let (parts, outer, inner, elem) = (2, 3, 2, 4);
        let total_c: usize = chunks.iter().sum();
        let n = outer * parts * total_c * inner * elem;
        let mut mem = vec![0u8; 3 * n];
        for (i, b) in mem[..n].iter_mut().enumerate() {
            *b = (i % 253) as u8;
        }
        let g = PackedParts {
            chunks: &chunks,
            parts,
            outer,
            inner,
            elem,
        };
        for r in g.runs(0, n as u64, true) {
            apply(&mut mem, r);
        }
        // Part p, outer o, sequence i's row j: local row off_i + p·c_i + j of outer o.
        let row = inner * elem;
        let (mut off, mut cs) = (0, 0);
        for &c in &chunks {
            for p in 0..parts {
                for o in 0..outer {
                    for j in 0..c {
                        let got = &mem[n + ((p * outer + o) * total_c + cs + j) * row..][..row];
                        let want = &mem[(o * parts * total_c + off + p * c + j) * row..][..row];
                        assert_eq!(got, want);
                    }
                }
            }
            off += parts * c;
            cs += c;
        }
        for r in g.runs(2 * n as u64, n as u64, false) {
            apply(&mut mem, r);
        }
        assert_eq!(mem[..n], mem[2 * n..]);
    }
}
