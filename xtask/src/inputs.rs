//! Random inputs in logical [batch, heads, seq, head_dim] order, rounded to the dtype, and the
//! view between logical and layout order: what every case, check and bench draws.

use flashcore::{DType, Layout};
use flashcore_oracle::Precision;
use ndarray::Array4;
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};

pub fn precision(d: DType) -> Precision {
    match d {
        DType::F16 => Precision::F16,
        DType::Bf16 => Precision::Bf16,
    }
}

/// Standard normal values rounded to the dtype, in logical [batch, heads, seq, head_dim] order.
pub fn random_tensor(dtype: DType, shape: [usize; 4], seed: u64) -> Array4<f32> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let n: usize = shape.iter().product();
    let data: Vec<f32> = (0..n)
        .map(|_| dtype.round(StandardNormal.sample(&mut rng)))
        .collect();
    Array4::from_shape_vec(shape, data).expect("length matches")
}

/// Logical [b, h, s, d] view to the layout's axis order (and back: the swap is its own inverse).
pub fn to_layout(a: ndarray::ArrayView4<'_, f32>, layout: Layout) -> ndarray::ArrayView4<'_, f32> {
    match layout {
        Layout::Bhsd => a,
        Layout::Bshd => a.permuted_axes([0, 2, 1, 3]),
    }
}

/// Like [`random_tensor`] (standard normal values rounded to the dtype, logical order) but
/// generated on every core in fixed chunks of 2^20 elements, each with its own seed, so the
/// values depend on `seed` alone and not on the thread count. For bench-sized inputs (up to
/// ~10^8 elements) where the sequential generator would take seconds. Not the same stream as
/// [`random_tensor`].
pub fn random_tensor_parallel(dtype: DType, shape: [usize; 4], seed: u64) -> Array4<f32> {
    const CHUNK: usize = 1 << 20;
    let n: usize = shape.iter().product();
    let mut data = vec![0f32; n];
    let threads = std::thread::available_parallelism()
        .map(|t| t.get())
        .unwrap_or(1);
    let chunks: Vec<(usize, &mut [f32])> = data.chunks_mut(CHUNK).enumerate().collect();
    let per_thread = chunks.len().div_ceil(threads).max(1);
    let mut groups: Vec<Vec<(usize, &mut [f32])>> = Vec::new();
    let mut it = chunks.into_iter().peekable();
    while it.peek().is_some() {
        groups.push(it.by_ref().take(per_thread).collect());
    }
    std::thread::scope(|s| {
        for group in groups {
            s.spawn(move || {
                for (i, chunk) in group {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(
                        seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                    );
                    for x in chunk.iter_mut() {
                        *x = dtype.round(StandardNormal.sample(&mut rng));
                    }
                }
            });
        }
    });
    Array4::from_shape_vec(shape, data).expect("length matches")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_inputs_depend_on_the_seed_only() {
        let a = random_tensor_parallel(DType::F16, [1, 2, 700, 1024], 5);
        let b = random_tensor_parallel(DType::F16, [1, 2, 700, 1024], 5);
        let c = random_tensor_parallel(DType::F16, [1, 2, 700, 1024], 6);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mean = a.iter().map(|&x| x as f64).sum::<f64>() / a.len() as f64;
        let var = a.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / a.len() as f64;
        assert!(
            mean.abs() < 0.01 && (var - 1.0).abs() < 0.01,
            "{mean} {var}"
        );
        assert!(a.iter().all(|&x| DType::F16.round(x) == x));
    }
}
