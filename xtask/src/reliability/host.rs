//! Host helpers of `cargo xtask reliability`: parallel loops and synthetic inputs that need no
//! RNG state.

use std::collections::BTreeSet;

use flashcore::{DType, Layout, TensorStrides};
use ndarray::Array4;

use crate::parallel::{par_chunks, threads};

pub(super) fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A tensor whose element `i` (logical [b, h, s, d] order) is a function of `(seed, i)` alone:
/// roughly standard normal (Irwin–Hall of four uniforms, unit variance), rounded to the dtype.
/// Any element, row or layout can be produced in parallel without holding the whole tensor.
#[derive(Clone, Copy, Debug)]
pub(super) struct Synth {
    seed: u64,
    dtype: DType,
    dims: [usize; 4],
}

impl Synth {
    pub(super) fn new(seed: u64, dtype: DType, dims: [usize; 4]) -> Self {
        Synth { seed, dtype, dims }
    }

    fn len(&self) -> usize {
        self.dims.iter().product()
    }

    pub(super) fn at(&self, i: usize) -> f32 {
        let h = splitmix(self.seed ^ (i as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93));
        let sum: u32 = (0..4).map(|k| ((h >> (16 * k)) & 0xffff) as u32).sum();
        let x = (sum as f32 / 65535.0 - 2.0) * 3f32.sqrt();
        self.dtype.round(x)
    }

    pub(super) fn full(&self) -> Array4<f32> {
        let mut v = vec![0f32; self.len()];
        par_chunks(&mut v, 1 << 14, |start, c| {
            for (j, x) in c.iter_mut().enumerate() {
                *x = self.at(start + j);
            }
        });
        Array4::from_shape_vec(self.dims, v).expect("length matches")
    }

    /// Zeros (lazily committed by the OS) except the given (b, h, s) rows.
    pub(super) fn rows(&self, rows: &[(usize, usize, usize)]) -> Array4<f32> {
        let [_, nh, ns, d] = self.dims;
        let mut a = Array4::<f32>::zeros(self.dims);
        let flat = a.as_slice_mut().expect("standard layout");
        for &(b, h, s) in rows {
            let base = ((b * nh + h) * ns + s) * d;
            for c in 0..d {
                flat[base + c] = self.at(base + c);
            }
        }
        a
    }

    /// Zeros (lazily committed) except the given (b, h) heads, filled in parallel.
    pub(super) fn heads(&self, heads: &BTreeSet<(usize, usize)>) -> Array4<f32> {
        let [_, nh, ns, d] = self.dims;
        let mut a = Array4::<f32>::zeros(self.dims);
        let flat = a.as_slice_mut().expect("standard layout");
        let head_len = ns * d;
        if head_len == 0 {
            return a;
        }
        let mut chunks: Vec<(usize, &mut [f32])> = flat
            .chunks_mut(head_len)
            .enumerate()
            .filter(|(i, _)| heads.contains(&(i / nh, i % nh)))
            .collect();
        let per = chunks.len().div_ceil(threads()).max(1);
        std::thread::scope(|s| {
            while !chunks.is_empty() {
                let take = per.min(chunks.len());
                let mine: Vec<(usize, &mut [f32])> = chunks.drain(..take).collect();
                s.spawn(move || {
                    for (i, c) in mine {
                        for (j, x) in c.iter_mut().enumerate() {
                            *x = self.at(i * head_len + j);
                        }
                    }
                });
            }
        });
        a
    }

    /// Heads `heads` of batch `b` alone, as a `[1, heads.len(), seq, head_dim]` tensor (the
    /// inputs of one GQA group, for the oracle).
    pub(super) fn block(&self, b: usize, heads: std::ops::Range<usize>) -> Array4<f32> {
        let [_, nh, ns, d] = self.dims;
        let first = (b * nh + heads.start) * ns * d;
        let n = heads.len() * ns * d;
        let v: Vec<f32> = (first..first + n).map(|i| self.at(i)).collect();
        Array4::from_shape_vec([1, heads.len(), ns, d], v).expect("length matches")
    }

    /// The tensor as dtype bits in a dense layout's memory order.
    pub(super) fn dense_bits(&self, layout: Layout) -> Vec<u16> {
        let [_, nh, ns, d] = self.dims;
        let mut out = vec![0u16; self.len()];
        let dt = self.dtype;
        par_chunks(&mut out, 1 << 14, |start, c| {
            for (j, x) in c.iter_mut().enumerate() {
                let i = start + j;
                let logical = match layout {
                    Layout::Bhsd => i,
                    Layout::Bshd => {
                        let (row, col) = (i / d, i % d);
                        let (h, rest) = (row % nh, row / nh);
                        let (s, b) = (rest % ns, rest / ns);
                        ((b * nh + h) * ns + s) * d + col
                    }
                };
                *x = dt.to_bits(self.at(logical));
            }
        });
        out
    }
}

pub(super) fn is_nan_bits(dtype: DType, b: u16) -> bool {
    match dtype {
        DType::F16 => (b & 0x7c00) == 0x7c00 && (b & 0x03ff) != 0,
        DType::Bf16 => (b & 0x7f80) == 0x7f80 && (b & 0x007f) != 0,
    }
}

pub(super) fn count_nan_bits(dtype: DType, bits: &[u16]) -> usize {
    count_where(bits, |b| is_nan_bits(dtype, b))
}

/// The elements of `bits` that `pred` holds for, counted in chunks on every core.
fn count_where(bits: &[u16], pred: impl Fn(u16) -> bool + Copy + Send) -> usize {
    let per = bits.len().div_ceil(threads()).max(1 << 16);
    std::thread::scope(|s| {
        let hs: Vec<_> = bits
            .chunks(per)
            .map(|c| s.spawn(move || c.iter().filter(|&&b| pred(b)).count()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    })
}

/// A NaN with a payload no kernel produces: fills padding a kernel must never write, so a
/// write of any value (a canonical NaN included) shows.
pub(super) fn padding_sentinel(dtype: DType) -> u16 {
    match dtype {
        DType::F16 => 0x7e5a,
        DType::Bf16 => 0x7fda,
    }
}

/// Inf or NaN (either sign, any payload).
pub(super) fn is_nonfinite_bits(dtype: DType, b: u16) -> bool {
    match dtype {
        DType::F16 => (b & 0x7c00) == 0x7c00,
        DType::Bf16 => (b & 0x7f80) == 0x7f80,
    }
}

pub(super) fn count_nonfinite_bits(dtype: DType, bits: &[u16]) -> usize {
    count_where(bits, |b| is_nonfinite_bits(dtype, b))
}

/// The element offset of logical (b, h, s, 0) under `st`.
pub(super) fn offset(st: &TensorStrides, b: usize, h: usize, s: usize) -> usize {
    b * st.batch + h * st.head + s * st.row
}

pub(super) fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_inputs_are_deterministic_normalish_and_rounded() {
        let s = Synth::new(7, DType::F16, [2, 3, 50, 64]);
        let a = s.full();
        assert_eq!(a, Synth::new(7, DType::F16, [2, 3, 50, 64]).full());
        assert_ne!(a, Synth::new(8, DType::F16, [2, 3, 50, 64]).full());
        let n = a.len() as f64;
        let mean = a.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = a.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        assert!(
            mean.abs() < 0.05 && (var - 1.0).abs() < 0.05,
            "{mean} {var}"
        );
        assert!(a.iter().all(|&x| DType::F16.round(x) == x && x.is_finite()));
    }

    #[test]
    fn dense_bits_follow_the_layout() {
        let s = Synth::new(3, DType::Bf16, [2, 3, 5, 8]);
        let a = s.full();
        for layout in Layout::ALL {
            let bits = s.dense_bits(layout);
            let st = layout.strides(3, 5, 8);
            for b in 0..2 {
                for h in 0..3 {
                    for r in 0..5 {
                        for c in 0..8 {
                            assert_eq!(
                                bits[offset(&st, b, h, r) + c],
                                DType::Bf16.to_bits(a[[b, h, r, c]])
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn partial_tensors_hold_exactly_the_asked_rows_and_heads() {
        let s = Synth::new(5, DType::F16, [2, 4, 6, 8]);
        let full = s.full();
        let rows = s.rows(&[(1, 2, 3), (0, 0, 0)]);
        let heads = s.heads(&[(1, 3), (0, 1)].into_iter().collect());
        for b in 0..2 {
            for h in 0..4 {
                for r in 0..6 {
                    let want_row = [(1, 2, 3), (0, 0, 0)].contains(&(b, h, r));
                    let want_head = [(1, 3), (0, 1)].contains(&(b, h));
                    for c in 0..8 {
                        let x = full[[b, h, r, c]];
                        assert_eq!(rows[[b, h, r, c]], if want_row { x } else { 0.0 });
                        assert_eq!(heads[[b, h, r, c]], if want_head { x } else { 0.0 });
                    }
                }
            }
        }
        let block = s.block(1, 1..3);
        assert_eq!(block.shape(), &[1, 2, 6, 8]);
        assert_eq!(block, full.slice(ndarray::s![1..2, 1..3, .., ..]));
    }

    #[test]
    fn nan_bits_are_recognised_in_both_dtypes() {
        for dt in DType::ALL {
            assert!(is_nan_bits(dt, flashcore::host::nan_bits(dt)));
            assert!(!is_nan_bits(dt, dt.to_bits(f32::INFINITY)));
            assert!(!is_nan_bits(dt, dt.to_bits(1.5)));
            assert!(is_nan_bits(dt, dt.to_bits(f32::NAN)));
        }
        for dt in DType::ALL {
            let s = padding_sentinel(dt);
            assert!(is_nan_bits(dt, s) && s != flashcore::host::nan_bits(dt));
            assert_ne!(s, dt.to_bits(f32::NAN));
        }
        let v = vec![0u16, 0x7e00, 0x3c00, 0xfe00];
        assert_eq!(count_nan_bits(DType::F16, &v), 2);
        for dt in DType::ALL {
            for x in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
                assert!(is_nonfinite_bits(dt, dt.to_bits(x)));
            }
            for x in [0.0, -0.0, 1.5, -65504.0, 1e-7] {
                assert!(!is_nonfinite_bits(dt, dt.to_bits(x)), "{dt} {x}");
            }
        }
        let v = vec![0u16, 0x7c00, 0x3c00, 0xfc00, 0x7e5a];
        assert_eq!(count_nonfinite_bits(DType::F16, &v), 3);
    }
}
