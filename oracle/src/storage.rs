//! Where a sequence's keys come from in inference storage (`docs/MODES.md`): pages of a paged
//! cache through a block table, and rows appended after the cache's used ones. The oracle judges
//! a varlen batch or a cache one sequence at a time, over the logical K/V these give.

use ndarray::{concatenate, s, Array3, ArrayView3, ArrayView4, Axis};

/// The first `len` key (or value) rows of one sequence of a paged cache, `[heads_kv, len, d]`:
/// row j lives in block `block_table_row[j / block_size]`, row `j % block_size`, of
/// `cache` = `[num_blocks, block_size, heads_kv, d]`. Panics (naming `block_table`) if an entry
/// the rows need is outside `0..num_blocks`, or the row is too short for `len`.
pub fn gather_paged(cache: ArrayView4<f32>, block_table_row: &[i32], len: usize) -> Array3<f32> {
    let (num_blocks, block_size, heads, d) = cache.dim();
    assert!(block_size > 0, "gather_paged: block_size is 0");
    let blocks = len.div_ceil(block_size);
    assert!(
        blocks <= block_table_row.len(),
        "gather_paged: {len} rows need {blocks} block_table entries, the row has {}",
        block_table_row.len()
    );
    let mut out = Array3::<f32>::zeros((heads, len, d));
    for j in 0..len {
        let id = block_table_row[j / block_size];
        assert!(
            id >= 0 && (id as usize) < num_blocks,
            "gather_paged: block_table entry {} is {id}, outside 0..{num_blocks}",
            j / block_size
        );
        out.slice_mut(s![.., j, ..])
            .assign(&cache.slice(s![id as usize, j % block_size, .., ..]));
    }
    out
}

/// A sequence's cached rows `[heads_kv, used, d]` followed by its appended ones
/// `[heads_kv, new, d]`: what the queries attend to after `flash_attn_with_kvcache`'s append.
pub fn append_rows<'a>(cached: ArrayView3<'a, f32>, new: ArrayView3<'a, f32>) -> Array3<f32> {
    assert_eq!(
        (cached.dim().0, cached.dim().2),
        (new.dim().0, new.dim().2),
        "append_rows: heads and head_dim must match"
    );
    concatenate(Axis(1), &[cached, new]).expect("shapes checked")
}
