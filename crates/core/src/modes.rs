//! The inference modes of a problem, in FlashAttention's vocabulary (`docs/MODES.md` is the
//! contract): variable-length batches, a KV cache (per-sequence lengths, pages, appended tokens),
//! sliding windows and score modifiers. A dense problem has `Modes::default()`.

use crate::error::InvalidProblem;

/// Where the key/value rows of each sequence live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum KvStorage {
    /// `[batch, seq_k, heads_kv, head_dim]` (or the problem's layout / custom strides): a plain
    /// tensor, or a contiguous cache of capacity `seq_k` when `seqused_k` is given.
    #[default]
    Dense,
    /// Varlen keys: `[total_k, heads_kv, head_dim]` with `cu_seqlens_k`; `seq_k` is max_seqlen_k.
    Packed { total_k: usize },
    /// Paged cache: `[num_blocks, block_size, heads_kv, head_dim]` with `block_table`
    /// `[batch, max_blocks_per_seq]`; `seq_k` is the capacity `max_blocks_per_seq · block_size`.
    Paged {
        num_blocks: usize,
        block_size: usize,
        max_blocks_per_seq: usize,
    },
}

/// Shape of the `alibi_slopes` table (f32).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AlibiSlopes {
    /// `[heads_q]`: the same slopes for every sequence.
    PerHead,
    /// `[batch, heads_q]`.
    PerBatchHead,
}

/// Shape of the `k_descale` / `v_descale` tables (f32) of e4m3 K/V (`Modes::kv_fp8`): the true
/// value of a stored byte is its e4m3 value times the factor of its (batch, KV head), as in
/// FlashAttention 3's fp8 path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvScales {
    /// `[1]`: one factor for the whole tensor.
    PerTensor,
    /// `[heads_kv]`: one per KV head, the same for every sequence.
    PerKvHead,
    /// `[batch, heads_kv]`.
    PerBatchKvHead,
}

impl KvScales {
    /// Entries of each descale table.
    pub fn table_len(self, batch: usize, heads_kv: usize) -> usize {
        match self {
            KvScales::PerTensor => 1,
            KvScales::PerKvHead => heads_kv,
            KvScales::PerBatchKvHead => batch * heads_kv,
        }
    }

    /// (batch stride, head stride) of the tables: the kernels read (b, h_kv)'s factor at
    /// `b * batch_stride + h_kv * head_stride`, so one indexing rule serves all three shapes.
    pub fn strides(self, heads_kv: usize) -> (usize, usize) {
        match self {
            KvScales::PerTensor => (0, 0),
            KvScales::PerKvHead => (0, 1),
            KvScales::PerBatchKvHead => (heads_kv, 1),
        }
    }
}

/// Everything beyond dense attention. Each field is off by default.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Modes {
    /// Varlen queries: Q and O are `[total_q, heads_q, head_dim]` with `cu_seqlens_q`, and the
    /// problem's `seq_q` is max_seqlen_q.
    pub packed_q: Option<usize>,
    pub kv: KvStorage,
    /// `seqused_k` is given: sequence b reads keys `0..seqused_k[b]` (+ `append` rows).
    pub seqused_k: bool,
    /// `k_new`/`v_new` of this many rows per sequence are written into the cache at
    /// `seqused_k[b]` before attending (FlashAttention's `flash_attn_with_kvcache`).
    pub append: Option<usize>,
    /// Keys further than this many positions left of the (bottom-right aligned) diagonal are
    /// masked. `None`: unbounded.
    pub window_left: Option<usize>,
    /// Keys further than this many positions right of the diagonal are masked (causal is 0).
    pub window_right: Option<usize>,
    /// Logits become `softcap · tanh(s / softcap)`.
    pub softcap: Option<f32>,
    pub alibi: Option<AlibiSlopes>,
    /// `mm_prefix_ranges` (candle-flash-attn's): this many `[start, end)` pairs of key positions
    /// per sequence, a table `[batch, n, 2]` (i32). A query whose position (`i + len_k - len_q`)
    /// lies in a range also sees every key of the range, whatever the causal mask and the window
    /// say: bidirectional attention inside an image's tokens of a causal sequence. Pairs with
    /// `start >= end` are unused slots.
    pub mm_prefix: Option<usize>,
    /// K and V (the cache, or the plain K/V tensors) are OCP FP8 E4M3 bytes (e4m3fn) with f32
    /// `k_descale` / `v_descale` tables of this shape; Q and O keep the problem's dtype. Halves
    /// the bytes a decode step reads. Strides stay in elements, which are bytes here. `None`: K
    /// and V are in the problem's dtype.
    pub kv_fp8: Option<KvScales>,
    /// Q too is OCP FP8 E4M3 bytes (FlashAttention 3's fp8 forward), with an f32 `q_descale`
    /// table of `kv_fp8`'s shape (indexed by sequence and KV head, as K's), which must be set.
    /// O stays in the problem's dtype and LSE in f32; Q's strides are in elements, which are
    /// bytes here. Forward only.
    pub q_fp8: bool,
}

/// Which modes a kernel implements (a column of `flashcore kernels`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModeSupport {
    /// `cu_seqlens_q` / `cu_seqlens_k` (packed Q/O and K/V).
    pub varlen: bool,
    /// `seqused_k` on a contiguous cache (and so appended tokens, which the core writes).
    pub seqused_k: bool,
    pub paged: bool,
    pub window: bool,
    pub softcap: bool,
    pub alibi: bool,
    pub mm_prefix: bool,
    /// e4m3 K/V with descale tables (`Modes::kv_fp8`).
    pub kv_fp8: bool,
    /// e4m3 Q with its descale table (`Modes::q_fp8`, on top of `kv_fp8`).
    pub q_fp8: bool,
}

impl ModeSupport {
    pub const NONE: ModeSupport = ModeSupport {
        varlen: false,
        seqused_k: false,
        paged: false,
        window: false,
        softcap: false,
        alibi: false,
        mm_prefix: false,
        kv_fp8: false,
        q_fp8: false,
    };
    /// Every mode the general kernels implement (not `kv_fp8` nor `q_fp8`: only a kernel that
    /// reads e4m3 inputs claims them, on top of these).
    pub const ALL: ModeSupport = ModeSupport {
        varlen: true,
        seqused_k: true,
        paged: true,
        window: true,
        softcap: true,
        alibi: true,
        mm_prefix: true,
        kv_fp8: false,
        q_fp8: false,
    };

    /// The first mode `modes` asks for that this kernel lacks, as the reason for `Unsupported`.
    pub fn missing(&self, modes: &Modes) -> Option<&'static str> {
        let wants = [
            (
                modes.packed_q.is_some(),
                self.varlen,
                "varlen queries (cu_seqlens_q)",
            ),
            (
                matches!(modes.kv, KvStorage::Packed { .. }),
                self.varlen,
                "varlen keys (cu_seqlens_k)",
            ),
            (modes.seqused_k, self.seqused_k, "a KV cache (seqused_k)"),
            (
                matches!(modes.kv, KvStorage::Paged { .. }),
                self.paged,
                "a paged KV cache",
            ),
            (
                modes.window_left.is_some() || modes.window_right.is_some(),
                self.window,
                "a sliding window",
            ),
            (modes.softcap.is_some(), self.softcap, "softcap"),
            (modes.alibi.is_some(), self.alibi, "ALiBi"),
            (
                modes.mm_prefix.is_some(),
                self.mm_prefix,
                "mm_prefix_ranges",
            ),
            (
                modes.kv_fp8.is_some(),
                self.kv_fp8,
                "an e4m3 (fp8) KV cache (kv_fp8)",
            ),
            (modes.q_fp8, self.q_fp8, "an e4m3 (fp8) Q (q_fp8)"),
        ];
        wants
            .into_iter()
            .find(|(wanted, has, _)| *wanted && !*has)
            .map(|(_, _, what)| what)
    }

    /// A short list for tables: "varlen,cache,paged,window,softcap,alibi,mm_prefix,kv_fp8,q_fp8"
    /// or "-".
    pub fn summary(&self) -> String {
        let names = [
            (self.varlen, "varlen"),
            (self.seqused_k, "cache"),
            (self.paged, "paged"),
            (self.window, "window"),
            (self.softcap, "softcap"),
            (self.alibi, "alibi"),
            (self.mm_prefix, "mm_prefix"),
            (self.kv_fp8, "kv_fp8"),
            (self.q_fp8, "q_fp8"),
        ];
        let on: Vec<&str> = names.iter().filter(|(b, _)| *b).map(|(_, n)| *n).collect();
        if on.is_empty() {
            "-".into()
        } else {
            on.join(",")
        }
    }
}

/// Block sizes a paged cache may use: multiples of 16 from 16 to 256 (every kernel loads K/V in
/// 16-row groups, so a group never straddles two pages).
pub const PAGE_ROWS_MULTIPLE: usize = 16;
pub const MAX_BLOCK_SIZE: usize = 256;

impl Modes {
    /// Preprocessor defines every kernel launched for these modes is compiled with, beside the
    /// plan's own: `FC_MM_PREFIX=1` when there are `mm_prefix_ranges`, so that only those builds
    /// read the ranges (kernels/common/seqlen.cuh) and every other build stays as it was.
    pub fn build_defines(&self) -> Vec<(String, String)> {
        match self.mm_prefix {
            Some(_) => vec![("FC_MM_PREFIX".into(), "1".into())],
            None => vec![],
        }
    }

    /// The left window as a bound on the keys a row sees, for plans that size work by it: none
    /// with `mm_prefix_ranges`, whose ranges reach left of the window.
    pub fn key_window_left(&self) -> Option<usize> {
        self.window_left.filter(|_| self.mm_prefix.is_none())
    }

    pub fn is_dense(&self) -> bool {
        *self == Modes::default()
    }

    /// Whether key lengths differ per sequence (a kernel reads them from a table).
    pub fn per_sequence_k(&self) -> bool {
        self.seqused_k || matches!(self.kv, KvStorage::Packed { .. })
    }

    /// Shape-level checks (the tables' contents are checked by [`crate::HostTables::validate`]).
    pub(crate) fn validate(
        &self,
        batch: usize,
        seq_k: usize,
        causal: bool,
    ) -> Result<(), InvalidProblem> {
        let bad = |field: &'static str, reason: String| InvalidProblem::Mode { field, reason };
        if let Some(c) = self.softcap {
            if !(c.is_finite() && c > 0.0) {
                return Err(bad("softcap", format!("{c} must be finite and > 0")));
            }
        }
        if self.mm_prefix == Some(0) {
            return Err(bad(
                "mm_prefix_ranges",
                "a table of 0 ranges per sequence: leave it out instead".into(),
            ));
        }
        if causal && self.window_right.is_some_and(|r| r > 0) {
            return Err(bad(
                "window_right",
                "causal masking already bounds the window at 0 on the right; give one or the other"
                    .into(),
            ));
        }
        match self.kv {
            KvStorage::Dense => {}
            KvStorage::Packed { total_k } => {
                if self.append.is_some() {
                    return Err(bad(
                        "k_new",
                        "appending needs a cache (contiguous or paged), not packed varlen keys"
                            .into(),
                    ));
                }
                if total_k > i32::MAX as usize {
                    return Err(bad(
                        "cu_seqlens_k",
                        format!("total_k {total_k} exceeds i32"),
                    ));
                }
            }
            KvStorage::Paged {
                num_blocks,
                block_size,
                max_blocks_per_seq,
            } => {
                if block_size == 0
                    || block_size > MAX_BLOCK_SIZE
                    || !block_size.is_multiple_of(PAGE_ROWS_MULTIPLE)
                {
                    return Err(bad(
                        "block_size",
                        format!("{block_size} must be a multiple of 16 in 16..=256"),
                    ));
                }
                if num_blocks == 0 && batch > 0 {
                    return Err(bad(
                        "num_blocks",
                        "a paged cache needs at least one block".into(),
                    ));
                }
                if !self.seqused_k {
                    return Err(bad(
                        "seqused_k",
                        "a paged cache needs seqused_k (how many entries of each sequence are valid)"
                            .into(),
                    ));
                }
                if max_blocks_per_seq.saturating_mul(block_size) != seq_k {
                    return Err(bad(
                        "block_table",
                        format!(
                            "seq_k must be the capacity max_blocks_per_seq ({max_blocks_per_seq}) x \
                             block_size ({block_size}), not {seq_k}"
                        ),
                    ));
                }
                if num_blocks > i32::MAX as usize || max_blocks_per_seq > i32::MAX as usize {
                    return Err(bad("block_table", "more blocks than i32 indexes".into()));
                }
            }
        }
        if let Some(n) = self.append {
            if !self.seqused_k {
                return Err(bad(
                    "k_new",
                    "appending writes at seqused_k, which must be given".into(),
                ));
            }
            if n > seq_k {
                return Err(bad(
                    "k_new",
                    format!("{n} new rows do not fit a cache of capacity {seq_k}"),
                ));
            }
        }
        if let Some(total_q) = self.packed_q {
            if total_q > i32::MAX as usize {
                return Err(bad(
                    "cu_seqlens_q",
                    format!("total_q {total_q} exceeds i32"),
                ));
            }
        }
        Ok(())
    }
}

/// Bytes every kernel that reads e4m3 K/V copies at a time: K's and V's strides and base
/// addresses must be multiples of it.
pub const KV_FP8_ALIGN_BYTES: usize = 16;

/// What e4m3 K/V (`Modes::kv_fp8`) and Q (`Modes::q_fp8`) ask of a problem whatever kernel
/// runs it: one head dim (the descale tables and the byte loads are sized by it), their strides
/// in whole 16-byte copies, and e4m3 Q only beside e4m3 K/V (its descale table takes their
/// shape).
pub(crate) fn validate_kv_fp8(p: &crate::AttentionProblem) -> Result<(), InvalidProblem> {
    if p.modes.q_fp8 && p.modes.kv_fp8.is_none() {
        return Err(InvalidProblem::Mode {
            field: "q_fp8",
            reason: "an e4m3 Q needs e4m3 K and V (set kv_fp8 to the descale tables' shape, \
                     which q_descale shares)"
                .into(),
        });
    }
    if p.modes.kv_fp8.is_none() {
        return Ok(());
    }
    let bad = |reason: String| InvalidProblem::Mode {
        field: "kv_fp8",
        reason,
    };
    if p.has_distinct_head_dim_v() {
        return Err(bad(format!(
            "head_dim_v {} differs from head_dim {}: e4m3 K/V take one head dim",
            p.head_dim_v(),
            p.head_dim
        )));
    }
    let s = p.strides();
    let q = p.modes.q_fp8.then_some(("q", s.q));
    for (name, st) in [("k", s.k), ("v", s.v)].into_iter().chain(q) {
        for (axis, v) in [("batch", st.batch), ("head", st.head), ("row", st.row)] {
            if !v.is_multiple_of(KV_FP8_ALIGN_BYTES) {
                let err = format!(
                    "{name} {axis} stride {v} bytes is not a multiple of {KV_FP8_ALIGN_BYTES} \
                     (e4m3 rows are copied {KV_FP8_ALIGN_BYTES} bytes at a time)"
                );
                return Err(match name {
                    "q" => InvalidProblem::Mode {
                        field: "q_fp8",
                        reason: err,
                    },
                    _ => bad(err),
                });
            }
        }
    }
    Ok(())
}

/// Host copies of the per-sequence tables, checked before anything launches.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostTables<'a> {
    pub cu_seqlens_q: Option<&'a [i32]>,
    pub cu_seqlens_k: Option<&'a [i32]>,
    pub seqused_k: Option<&'a [i32]>,
    /// Row-major `[batch, max_blocks_per_seq]`.
    pub block_table: Option<&'a [i32]>,
    pub alibi_slopes: Option<&'a [f32]>,
    /// Row-major `[batch, n, 2]` (`Modes::mm_prefix`).
    pub mm_prefix_ranges: Option<&'a [i32]>,
    /// e4m3 K's and V's factors (`Modes::kv_fp8`, shaped as its [`KvScales`] says); each must be
    /// finite and > 0.
    pub k_descale: Option<&'a [f32]>,
    pub v_descale: Option<&'a [f32]>,
    /// e4m3 Q's factors (`Modes::q_fp8`, shaped as K's); each must be finite and > 0.
    pub q_descale: Option<&'a [f32]>,
}

/// Tables a problem may have (cu_seqlens_q, cu_seqlens_k, seqused_k, block_table, alibi_slopes,
/// mm_prefix_ranges, k_descale, v_descale, q_descale).
pub(crate) const TABLES: usize = 9;

/// Lengths the problem expects of each table (None: the table must be absent).
pub(crate) fn expected_table_lens(
    p: &crate::AttentionProblem,
) -> [(&'static str, Option<usize>); TABLES] {
    let m = &p.modes;
    let b = p.batch;
    [
        ("cu_seqlens_q", m.packed_q.map(|_| b + 1)),
        (
            "cu_seqlens_k",
            matches!(m.kv, KvStorage::Packed { .. }).then_some(b + 1),
        ),
        ("seqused_k", m.seqused_k.then_some(b)),
        (
            "block_table",
            match m.kv {
                KvStorage::Paged {
                    max_blocks_per_seq, ..
                } => Some(b * max_blocks_per_seq),
                _ => None,
            },
        ),
        (
            "alibi_slopes",
            m.alibi.map(|a| match a {
                AlibiSlopes::PerHead => p.heads_q,
                AlibiSlopes::PerBatchHead => b * p.heads_q,
            }),
        ),
        ("mm_prefix_ranges", m.mm_prefix.map(|n| b * n * 2)),
        ("k_descale", m.kv_fp8.map(|s| s.table_len(b, p.heads_kv))),
        ("v_descale", m.kv_fp8.map(|s| s.table_len(b, p.heads_kv))),
        (
            "q_descale",
            m.kv_fp8
                .filter(|_| m.q_fp8)
                .map(|s| s.table_len(b, p.heads_kv)),
        ),
    ]
}

/// Presence and length of each table against the problem.
pub(crate) fn check_table_lens(
    p: &crate::AttentionProblem,
    got: [Option<usize>; TABLES],
) -> Result<(), InvalidProblem> {
    for ((field, expected), got) in expected_table_lens(p).into_iter().zip(got) {
        match (expected, got) {
            (None, None) => {}
            (Some(e), Some(g)) if e == g => {}
            (Some(e), None) => {
                return Err(InvalidProblem::Table {
                    field,
                    reason: format!("the problem needs it ({e} entries) but none was given"),
                })
            }
            (None, Some(_)) => {
                return Err(InvalidProblem::Table {
                    field,
                    reason: "given, but the problem does not use it (set the mode on the problem)"
                        .into(),
                })
            }
            (Some(e), Some(g)) => {
                return Err(InvalidProblem::Table {
                    field,
                    reason: format!("has {g} entries, the problem needs {e}"),
                })
            }
        }
    }
    Ok(())
}

impl HostTables<'_> {
    fn lens(&self) -> [Option<usize>; TABLES] {
        [
            self.cu_seqlens_q.map(<[i32]>::len),
            self.cu_seqlens_k.map(<[i32]>::len),
            self.seqused_k.map(<[i32]>::len),
            self.block_table.map(<[i32]>::len),
            self.alibi_slopes.map(<[f32]>::len),
            self.mm_prefix_ranges.map(<[i32]>::len),
            self.k_descale.map(<[f32]>::len),
            self.v_descale.map(<[f32]>::len),
            self.q_descale.map(<[f32]>::len),
        ]
    }

    /// Every condition `docs/MODES.md` puts on the tables; each failure names the field.
    pub fn validate(&self, p: &crate::AttentionProblem) -> Result<(), InvalidProblem> {
        check_table_lens(p, self.lens())?;
        let m = &p.modes;
        let err = |field: &'static str, reason: String| InvalidProblem::Table { field, reason };
        let check_cu = |field: &'static str, cu: &[i32], total: usize, max_len: usize| {
            if cu.first() != Some(&0) {
                return Err(err(
                    field,
                    format!("must start at 0, starts at {:?}", cu.first()),
                ));
            }
            for (i, w) in cu.windows(2).enumerate() {
                if w[1] < w[0] {
                    return Err(err(
                        field,
                        format!("decreases at entry {}: {} then {}", i + 1, w[0], w[1]),
                    ));
                }
                let len = (w[1] - w[0]) as usize;
                if len > max_len {
                    return Err(err(
                        field,
                        format!("sequence {i} has {len} rows, more than the max_seqlen {max_len}"),
                    ));
                }
            }
            let last = *cu.last().unwrap_or(&0);
            if last as usize != total {
                return Err(err(
                    field,
                    format!("ends at {last}, but the packed tensor has {total} rows"),
                ));
            }
            Ok(())
        };
        if let (Some(total_q), Some(cu)) = (m.packed_q, self.cu_seqlens_q) {
            check_cu("cu_seqlens_q", cu, total_q, p.seq_q)?;
        }
        let mut k_lens: Vec<usize> = vec![p.seq_k; p.batch];
        if let (KvStorage::Packed { total_k }, Some(cu)) = (m.kv, self.cu_seqlens_k) {
            check_cu("cu_seqlens_k", cu, total_k, p.seq_k)?;
            k_lens = cu.windows(2).map(|w| (w[1] - w[0]) as usize).collect();
        }
        if let Some(used) = self.seqused_k {
            let extra = m.append.unwrap_or(0);
            for (b, (&u, &room)) in used.iter().zip(&k_lens).enumerate() {
                if u < 0 {
                    return Err(err("seqused_k", format!("entry {b} is negative ({u})")));
                }
                if u as usize + extra > room {
                    return Err(err(
                        "seqused_k",
                        if extra > 0 {
                            format!(
                                "sequence {b}: {u} used + {extra} appended rows exceed its capacity {room}"
                            )
                        } else {
                            format!("sequence {b}: {u} used rows exceed its capacity {room}")
                        },
                    ));
                }
            }
        }
        if let (
            KvStorage::Paged {
                num_blocks,
                block_size,
                max_blocks_per_seq,
            },
            Some(table),
            Some(used),
        ) = (m.kv, self.block_table, self.seqused_k)
        {
            let extra = m.append.unwrap_or(0);
            for (b, &u) in used.iter().enumerate() {
                // Only the entries covering the rows that are read (or written) must be valid.
                let blocks = (u as usize + extra).div_ceil(block_size);
                let row = &table[b * max_blocks_per_seq..][..blocks];
                if let Some((j, &id)) = row
                    .iter()
                    .enumerate()
                    .find(|(_, &id)| id < 0 || id as usize >= num_blocks)
                {
                    return Err(err(
                        "block_table",
                        format!("sequence {b}, entry {j}: block {id} is outside 0..{num_blocks}"),
                    ));
                }
            }
        }
        if let Some(slopes) = self.alibi_slopes {
            if let Some((i, s)) = slopes.iter().enumerate().find(|(_, s)| !s.is_finite()) {
                return Err(err(
                    "alibi_slopes",
                    format!("entry {i} is not finite ({s})"),
                ));
            }
        }
        if let (Some(ranges), Some(n)) = (self.mm_prefix_ranges, m.mm_prefix) {
            // A used pair (start < end) starts at a key position; unused slots may hold anything.
            for (i, pair) in ranges.chunks_exact(2).enumerate() {
                if pair[0] < pair[1] && pair[0] < 0 {
                    return Err(err(
                        "mm_prefix_ranges",
                        format!(
                            "sequence {}, range {}: [{}, {}) starts before key 0",
                            i / n,
                            i % n,
                            pair[0],
                            pair[1]
                        ),
                    ));
                }
            }
        }
        for (table, descale) in [
            ("k_descale", self.k_descale),
            ("v_descale", self.v_descale),
            ("q_descale", self.q_descale),
        ] {
            // A zero or negative factor would flip or erase an input silently; NaN or inf
            // poisons it.
            if let Some((index, &value)) = descale
                .into_iter()
                .flatten()
                .enumerate()
                .find(|(_, d)| !(d.is_finite() && **d > 0.0))
            {
                return Err(InvalidProblem::BadDescale {
                    table,
                    index,
                    value,
                });
            }
        }
        Ok(())
    }
}

impl crate::Device {
    /// The opt-in check of device-resident tables (`docs/MODES.md`): kernels trust the tables'
    /// contents, so a bad entry would be a wild read. This copies the tables back (a stream
    /// synchronisation: keep it out of hot loops) and applies [`HostTables::validate`], so a bad
    /// table gives the same named error as a bad host table, before anything launches.
    pub fn check_tables(
        &self,
        problem: &crate::AttentionProblem,
        tables: &crate::DeviceTables<'_>,
    ) -> Result<(), crate::Error> {
        check_table_lens(problem, tables.lens())?;
        let stream = self.stream();
        let cu_q = copy_back(stream, &tables.cu_seqlens_q, "cu_seqlens_q")?;
        let cu_k = copy_back(stream, &tables.cu_seqlens_k, "cu_seqlens_k")?;
        let used = copy_back(stream, &tables.seqused_k, "seqused_k")?;
        let table = copy_back(stream, &tables.block_table, "block_table")?;
        let ranges = copy_back(stream, &tables.mm_prefix_ranges, "mm_prefix_ranges")?;
        let slopes = copy_back(stream, &tables.alibi_slopes, "alibi_slopes")?;
        let k_descale = copy_back(stream, &tables.k_descale, "k_descale")?;
        let v_descale = copy_back(stream, &tables.v_descale, "v_descale")?;
        let q_descale = copy_back(stream, &tables.q_descale, "q_descale")?;
        HostTables {
            cu_seqlens_q: cu_q.as_deref(),
            cu_seqlens_k: cu_k.as_deref(),
            seqused_k: used.as_deref(),
            block_table: table.as_deref(),
            alibi_slopes: slopes.as_deref(),
            mm_prefix_ranges: ranges.as_deref(),
            k_descale: k_descale.as_deref(),
            v_descale: v_descale.as_deref(),
            q_descale: q_descale.as_deref(),
        }
        .validate(problem)?;
        Ok(())
    }
}

/// A device table copied back to the host for [`crate::Device::check_tables`] (an absent one
/// stays absent); one generic copy serves the i32 and the f32 tables alike, and a failed copy
/// names its table.
fn copy_back<T: cudarc::driver::DeviceRepr>(
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    table: &Option<cudarc::driver::CudaView<'_, T>>,
    what: &str,
) -> Result<Option<Vec<T>>, crate::Error> {
    table
        .as_ref()
        .map(|v| {
            stream
                .clone_dtoh(v)
                .map_err(|e| crate::Error::cuda(format!("copying {what} back"), e))
        })
        .transpose()
}
