//! Host-side parts of the `backward` check that need no GPU: where a tensor's elements sit in
//! its buffer (dense, or padded and reached through custom strides), the comparison of a padded
//! run against the clean one (bit-identical elements, padding left as it was), the batches the
//! grid sub-check judges, and the device memory one backward call holds.

use std::ops::Range;

use flashcore::{AttentionProblem, Layout, TensorStrides};

/// Room around a tensor's elements in a padded buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Padding {
    /// Elements past head_dim in every row.
    pub cols: usize,
    /// Rows past seq in every head.
    pub rows: usize,
    /// Heads past the last one in every batch.
    pub heads: usize,
    /// Elements before the first element (the base pointer's offset into the buffer).
    pub front: usize,
    /// Elements after the last batch.
    pub back: usize,
    /// Heads outside rows (`Bhsd`) or rows outside heads (`Bshd`).
    pub order: Layout,
}

/// Where the elements of a `[batch, heads, seq, head_dim]` tensor sit in a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Placement {
    pub dims: [usize; 4],
    pub strides: TensorStrides,
    /// Buffer index of element (0, 0, 0, 0).
    pub front: usize,
    /// Buffer length.
    pub len: usize,
}

impl Placement {
    /// A dense tensor in `layout`, filling its buffer exactly.
    pub fn dense(layout: Layout, dims: [usize; 4]) -> Placement {
        let [_, h, s, d] = dims;
        Placement {
            dims,
            strides: layout.strides(h, s, d),
            front: 0,
            len: dims.iter().product(),
        }
    }

    /// A tensor inside a larger buffer: every row `pad.cols` longer, every head `pad.rows`
    /// rows longer, every batch `pad.heads` heads larger, `pad.front` elements before it and
    /// `pad.back` after.
    pub fn padded(dims: [usize; 4], pad: Padding) -> Placement {
        let [b, h, s, d] = dims;
        let row = d + pad.cols;
        let strides = match pad.order {
            Layout::Bhsd => {
                let head = (s + pad.rows) * row;
                TensorStrides {
                    batch: (h + pad.heads) * head,
                    head,
                    row,
                }
            }
            Layout::Bshd => {
                let row_stride = (h + pad.heads) * row;
                TensorStrides {
                    batch: (s + pad.rows) * row_stride,
                    head: row,
                    row: row_stride,
                }
            }
        };
        Placement {
            dims,
            strides,
            front: pad.front,
            len: pad.front + b * strides.batch + pad.back,
        }
    }

    /// Buffer index of element (b, h, s, 0).
    pub fn at(&self, b: usize, h: usize, s: usize) -> usize {
        self.front + b * self.strides.batch + h * self.strides.head + s * self.strides.row
    }

    pub fn elements(&self) -> usize {
        self.dims.iter().product()
    }

    /// Buffer index of every element of heads `heads` of batch `b`, in logical order.
    fn head_indices(&self, b: usize, heads: Range<usize>) -> impl Iterator<Item = usize> + '_ {
        let [_, _, s, d] = self.dims;
        heads.flat_map(move |h| (0..s).flat_map(move |r| (0..d).map(move |c| self.at(b, h, r) + c)))
    }

    /// Buffer index of every element, in logical [b, h, s, d] order.
    pub fn indices(&self) -> impl Iterator<Item = usize> + '_ {
        let [b, h, _, _] = self.dims;
        (0..b).flat_map(move |bi| self.head_indices(bi, 0..h))
    }

    /// A buffer of `fill` holding `logical` (logical order) at the elements.
    pub fn embed<T: Copy>(&self, logical: &[T], fill: T) -> Vec<T> {
        assert_eq!(logical.len(), self.elements(), "logical length");
        let mut buf = vec![fill; self.len];
        for (i, &x) in self.indices().zip(logical) {
            buf[i] = x;
        }
        buf
    }

    /// The elements of `buf`, in logical order.
    pub fn gather<T: Copy>(&self, buf: &[T]) -> Vec<T> {
        self.indices().map(|i| buf[i]).collect()
    }

    /// The elements of heads `heads` of batch `b`, in logical order (`[1, heads.len(), s, d]`).
    pub fn gather_heads<T: Copy>(&self, buf: &[T], b: usize, heads: Range<usize>) -> Vec<T> {
        self.head_indices(b, heads).map(|i| buf[i]).collect()
    }

    /// Logical [b, h, s, d] of the element numbered `n` in logical order.
    pub fn logical(&self, n: usize) -> [usize; 4] {
        let [_, h, s, d] = self.dims;
        [n / (h * s * d), (n / (s * d)) % h, (n / d) % s, n % d]
    }
}

/// A padded run's gradient against the clean run's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct BitDiff {
    /// Elements whose bits differ from the clean run's.
    pub differ: usize,
    /// The first of them: logical index, padded bits, clean bits.
    pub first_differ: Option<([usize; 4], u16, u16)>,
    /// Padding elements that no longer hold the sentinel: writes outside the tensor.
    pub padding_written: usize,
    /// Buffer index of the first of them.
    pub first_padding: Option<usize>,
}

impl BitDiff {
    pub fn is_clean(&self) -> bool {
        self.differ == 0 && self.padding_written == 0
    }

    /// One clause for a failure line, naming the tensor.
    pub fn describe(&self, name: &str) -> String {
        let mut parts = Vec::new();
        if let Some(([b, h, s, c], got, want)) = self.first_differ {
            parts.push(format!(
                "{} {name} elements differ from the clean run (first {name}[{b},{h},{s},{c}] {got:#06x} vs {want:#06x})",
                self.differ
            ));
        }
        if let Some(at) = self.first_padding {
            parts.push(format!(
                "{} {name} padding elements written (first at buffer index {at})",
                self.padding_written
            ));
        }
        parts.join(", ")
    }
}

/// Compares the gradient a padded run left in `buf` with the clean run's (`clean`, logical
/// order): every element bit for bit, and every padding element still `sentinel`.
pub(super) fn compare_padded(
    clean: &[u16],
    padded: &Placement,
    buf: &[u16],
    sentinel: u16,
) -> BitDiff {
    assert_eq!(buf.len(), padded.len, "padded buffer length");
    let mut diff = BitDiff::default();
    let mut is_element = vec![false; buf.len()];
    for (n, (i, &want)) in padded.indices().zip(clean).enumerate() {
        is_element[i] = true;
        if buf[i] != want {
            diff.differ += 1;
            diff.first_differ
                .get_or_insert((padded.logical(n), buf[i], want));
        }
    }
    for (i, (&x, element)) in buf.iter().zip(&is_element).enumerate() {
        if !element && x != sentinel {
            diff.padding_written += 1;
            diff.first_padding.get_or_insert(i);
        }
    }
    diff
}

/// Batches whose gradients the grid sub-check judges by the oracle: the first, the middle and
/// the last, the first whose Q or K batch offset passes 2^31 elements (where a 32-bit offset
/// would wrap), and one drawn from `seed`. Sorted, without repeats.
pub(super) fn spot_batches(p: &AttentionProblem, seed: u64) -> Vec<usize> {
    let b = p.batch;
    if b == 0 {
        return vec![];
    }
    let s = p.strides();
    let mut v = vec![0, b / 2, b - 1, (seed % b as u64) as usize];
    for stride in [s.q.batch, s.k.batch] {
        if stride > 0 {
            let first_past = (1usize << 31).div_ceil(stride);
            if first_past < b {
                v.push(first_past);
            }
        }
    }
    v.sort_unstable();
    v.dedup();
    v
}

/// Device bytes one backward call of `p` holds in the checks: Q, K, V, O, dO, dQ, dK and dV in
/// the problem's 2-byte dtype, LSE in f32, and the plan's workspace (f32 words and counters).
pub(super) fn backward_device_bytes(p: &AttentionProblem, workspace_words: usize) -> usize {
    2 * (2 * p.q_len() + 2 * p.k_len() + 2 * p.v_len() + 2 * p.o_len())
        + 4 * p.lse_len()
        + 4 * workspace_words
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pad(order: Layout) -> Padding {
        Padding {
            cols: 8,
            rows: 5,
            heads: 1,
            front: 64,
            back: 16,
            order,
        }
    }

    #[test]
    fn padded_placements_hold_every_element_once_inside_the_buffer() {
        let dims = [2, 3, 7, 16];
        for order in Layout::ALL {
            let pl = Placement::padded(dims, pad(order));
            let idx: Vec<usize> = pl.indices().collect();
            assert_eq!(idx.len(), pl.elements());
            let mut sorted = idx.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(
                sorted.len(),
                idx.len(),
                "{order:?}: two elements share an index"
            );
            assert!(sorted[0] >= 64 && *sorted.last().unwrap() < pl.len - 16);
            // Padding exists on every axis: past head_dim, past seq, past the heads.
            let padding = pl.len - pl.elements();
            assert_eq!(
                padding,
                64 + 16 + 2 * ((3 + 1) * (7 + 5) * (16 + 8) - 3 * 7 * 16)
            );
            // The strides are ones a problem may name: valid, and outputs that do not alias.
            let s = pl.strides;
            let mut p = AttentionProblem::new(2, 3, 7, 16).with_layout(Layout::Bhsd);
            p.custom_strides = Some(flashcore::ProblemStrides {
                q: s,
                k: s,
                v: s,
                o: s,
            });
            flashcore::backward::validate_backward(&p).unwrap();
            assert!(p.q_len() <= pl.len - pl.front);
        }
        // Head-major padding keeps a head's rows together; row-major interleaves heads.
        let bhsd = Placement::padded(dims, pad(Layout::Bhsd));
        let bshd = Placement::padded(dims, pad(Layout::Bshd));
        assert_eq!(bhsd.strides.row, 24);
        assert_eq!(bhsd.strides.head, 12 * 24);
        assert_eq!(bshd.strides.head, 24);
        assert_eq!(bshd.strides.row, 4 * 24);
        assert_eq!(bshd.strides.batch, 12 * 4 * 24);
    }

    #[test]
    fn dense_placements_are_the_layouts() {
        for layout in Layout::ALL {
            let pl = Placement::dense(layout, [2, 3, 5, 4]);
            let mut idx: Vec<usize> = pl.indices().collect();
            idx.sort_unstable();
            assert_eq!(idx, (0..120).collect::<Vec<_>>());
            assert_eq!(pl.strides, layout.strides(3, 5, 4));
        }
    }

    #[test]
    fn embed_and_gather_round_trip_and_logical_indices_match() {
        let dims = [2, 3, 4, 8];
        let logical: Vec<u16> = (0..192).collect();
        for order in Layout::ALL {
            let pl = Placement::padded(dims, pad(order));
            let buf = pl.embed(&logical, 0xffff);
            assert_eq!(buf.len(), pl.len);
            assert_eq!(pl.gather(&buf), logical);
            assert_eq!(buf.iter().filter(|&&x| x == 0xffff).count(), pl.len - 192);
            for (n, &x) in logical.iter().enumerate() {
                let [b, h, s, c] = pl.logical(n);
                assert_eq!(buf[pl.at(b, h, s) + c], x);
            }
            // One GQA group's heads, as the oracle takes them.
            let g = pl.gather_heads(&buf, 1, 1..3);
            assert_eq!(g, logical[(3 + 1) * 32..(3 + 3) * 32].to_vec());
        }
    }

    #[test]
    fn padded_comparison_finds_changed_elements_and_writes_into_padding() {
        let dims = [1, 2, 3, 4];
        let clean: Vec<u16> = (100..124).collect();
        let sentinel = 0x7e5a;
        for order in Layout::ALL {
            let pl = Placement::padded(dims, pad(order));
            let mut buf = pl.embed(&clean, sentinel);
            assert!(compare_padded(&clean, &pl, &buf, sentinel).is_clean());
            // One element off, and two padding elements overwritten (one before the base).
            let at = pl.at(0, 1, 2) + 3;
            buf[at] ^= 1;
            buf[3] = 0x7e00;
            let past_row = pl.at(0, 0, 0) + 4;
            buf[past_row] = 0;
            let d = compare_padded(&clean, &pl, &buf, sentinel);
            assert_eq!(d.differ, 1);
            assert_eq!(d.first_differ, Some(([0, 1, 2, 3], 123 ^ 1, 123)));
            assert_eq!(d.padding_written, 2);
            assert_eq!(d.first_padding, Some(3));
            assert!(!d.is_clean());
            let text = d.describe("dK");
            assert!(text.contains("1 dK elements differ") && text.contains("dK[0,1,2,3]"));
            assert!(text.contains("2 dK padding elements written"));
            // A canonical NaN written into padding is still a write: only the sentinel counts.
            let mut buf = pl.embed(&clean, sentinel);
            buf[pl.len - 1] = 0x7e00;
            assert_eq!(
                compare_padded(&clean, &pl, &buf, sentinel).padding_written,
                1
            );
        }
    }

    #[test]
    fn spot_batches_reach_past_2_pow_31_and_both_ends() {
        let p = AttentionProblem::new(8200, 16, 128, 128).with_kv(2, 128);
        let v = spot_batches(&p, 7);
        assert_eq!(v[0], 0);
        assert_eq!(*v.last().unwrap(), 8199);
        let stride = p.strides().q.batch;
        let past: Vec<usize> = v
            .iter()
            .copied()
            .filter(|&b| b * stride >= 1 << 31)
            .collect();
        assert!(!past.is_empty());
        assert!(past.iter().any(|&b| (b - 1) * stride < 1 << 31), "{v:?}");
        assert!(v.windows(2).all(|w| w[0] < w[1]));
        let small = AttentionProblem::new(3, 2, 5, 8);
        assert_eq!(spot_batches(&small, 4), vec![0, 1, 2]);
        assert!(spot_batches(&AttentionProblem::new(0, 2, 5, 8), 1).is_empty());
    }

    #[test]
    fn device_bytes_count_every_tensor_lse_and_workspace() {
        let p = AttentionProblem::new(2, 4, 10, 8).with_kv(2, 6);
        let (q, k) = (2 * 4 * 10 * 8, 2 * 2 * 6 * 8);
        assert_eq!(
            backward_device_bytes(&p, 80),
            2 * (4 * q + 4 * k) + 4 * 80 + 4 * 80
        );
    }
}
