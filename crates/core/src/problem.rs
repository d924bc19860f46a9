//! What an attention call computes: shapes, dtype, masking, scale and memory layout.

pub use crate::dtype::DType;
use crate::error::InvalidProblem;
use crate::modes::{KvStorage, Modes};

/// Memory order of the four logical axes (batch, seq, heads, head_dim). head_dim is innermost
/// in both, so a row of one head is contiguous.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// [batch, seq, heads, head_dim]: what most model code produces.
    Bshd,
    /// [batch, heads, seq, head_dim]
    Bhsd,
}

impl Layout {
    pub const ALL: [Layout; 2] = [Layout::Bshd, Layout::Bhsd];

    pub fn name(self) -> &'static str {
        match self {
            Layout::Bshd => "bshd",
            Layout::Bhsd => "bhsd",
        }
    }

    /// Dense strides, in elements, for a tensor of `heads` x `seq` rows of `head_dim`.
    /// Saturating, so that a problem too large to address reaches `validate`'s size check
    /// instead of overflowing here.
    pub fn strides(self, heads: usize, seq: usize, head_dim: usize) -> TensorStrides {
        let mul = usize::saturating_mul;
        match self {
            Layout::Bshd => TensorStrides {
                batch: mul(mul(seq, heads), head_dim),
                head: head_dim,
                row: mul(heads, head_dim),
            },
            Layout::Bhsd => TensorStrides {
                batch: mul(mul(heads, seq), head_dim),
                head: mul(seq, head_dim),
                row: head_dim,
            },
        }
    }

    /// The shape in this layout's axis order, as `[d0, d1, d2, d3]`.
    pub fn shape(self, batch: usize, heads: usize, seq: usize, head_dim: usize) -> [usize; 4] {
        match self {
            Layout::Bshd => [batch, seq, heads, head_dim],
            Layout::Bhsd => [batch, heads, seq, head_dim],
        }
    }
}

impl std::str::FromStr for Layout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "bshd" => Ok(Layout::Bshd),
            "bhsd" => Ok(Layout::Bhsd),
            other => Err(format!("unknown layout '{other}' (expected bshd or bhsd)")),
        }
    }
}

/// Strides of one tensor in elements; the head_dim stride is always 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TensorStrides {
    pub batch: usize,
    pub head: usize,
    pub row: usize,
}

impl TensorStrides {
    /// `OverlappingOutput` unless every (batch, head, row, col) of a tensor of these extents has
    /// an element of its own: sorted by stride, each axis must step past everything the smaller
    /// axes span (sufficient for distinct addresses).
    pub(crate) fn check_distinct(
        &self,
        batch: usize,
        heads: usize,
        rows: usize,
        head_dim: usize,
    ) -> Result<(), InvalidProblem> {
        let mut axes = [
            ("batch", self.batch, batch),
            ("head", self.head, heads),
            ("row", self.row, rows),
        ];
        axes.sort_by_key(|a| a.1);
        let mut span = head_dim as u128;
        for (axis, stride, n) in axes {
            if n <= 1 {
                continue;
            }
            if (stride as u128) < span {
                return Err(InvalidProblem::OverlappingOutput { axis, stride, span });
            }
            span += stride as u128 * (n as u128 - 1);
        }
        Ok(())
    }

    /// (batch, head, row) as the kernels' parameter blocks take them.
    pub fn as_i64(&self) -> [i64; 3] {
        [self.batch as i64, self.head as i64, self.row as i64]
    }

    /// Elements a buffer needs to hold every addressed element.
    pub fn required_len(&self, batch: usize, heads: usize, seq: usize, head_dim: usize) -> usize {
        if batch == 0 || heads == 0 || seq == 0 || head_dim == 0 {
            return 0;
        }
        // Saturating: a problem too large to address fails `validate`; asking it for lengths
        // (e.g. in `AttentionTensors::check` before validation) must not panic on overflow.
        ((batch - 1).saturating_mul(self.batch))
            .saturating_add((heads - 1).saturating_mul(self.head))
            .saturating_add((seq - 1).saturating_mul(self.row))
            .saturating_add(head_dim)
    }
}

/// One forward attention call: O = softmax(scale · Q·Kᵀ + mask) · V per (batch, head).
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionProblem {
    pub batch: usize,
    pub heads_q: usize,
    /// heads_q % heads_kv == 0; query head h reads kv head h / (heads_q / heads_kv) (GQA/MQA).
    pub heads_kv: usize,
    pub seq_q: usize,
    pub seq_k: usize,
    /// Q's and K's head dim (the dot products' length).
    pub head_dim: usize,
    /// V's and O's head dim where it differs from `head_dim` (FlashAttention 3's `headdim_v`,
    /// e.g. DeepSeek-V2/V3 prefill's 192 for Q·K and 128 for V); `None` means `head_dim`. Read it
    /// through [`head_dim_v`](Self::head_dim_v). Kernels that take one head dim for all three
    /// tensors answer `Unsupported` ([`Capabilities`](crate::plan::Capabilities)).
    pub head_dim_v: Option<usize>,
    pub dtype: DType,
    /// Bottom-right aligned: query i sees key j iff j <= i + seq_k - seq_q.
    pub causal: bool,
    /// None means 1/sqrt(head_dim).
    pub softmax_scale: Option<f32>,
    pub layout: Layout,
    /// Overrides the dense strides of `layout` (e.g. views into a packed QKV buffer).
    pub custom_strides: Option<ProblemStrides>,
    /// Varlen, KV cache, windows and score modifiers (`docs/MODES.md`); dense by default.
    pub modes: Modes,
    /// Batch-invariant plans (`docs/MODES.md`, *Batch invariance*): each sequence's O and LSE are
    /// bit-identical whatever else is in its batch. The plans then choose tile shapes, key splits
    /// and kernels from a sequence's own lengths, never from the batch or the SM count.
    pub batch_invariant: bool,
}

/// Strides of all four tensors (O has heads_q heads, K and V have heads_kv).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProblemStrides {
    pub q: TensorStrides,
    pub k: TensorStrides,
    pub v: TensorStrides,
    pub o: TensorStrides,
}

/// Largest element offset the kernels address: they index in i64, but the host keeps every
/// offset below this so that a stride table can never wrap.
pub const MAX_ELEMENTS: usize = 1 << 62;

impl AttentionProblem {
    /// A dense problem with the defaults: f16, not causal, default scale, BSHD.
    pub fn new(batch: usize, heads: usize, seq: usize, head_dim: usize) -> Self {
        AttentionProblem {
            batch,
            heads_q: heads,
            heads_kv: heads,
            seq_q: seq,
            seq_k: seq,
            head_dim,
            head_dim_v: None,
            dtype: DType::F16,
            causal: false,
            softmax_scale: None,
            layout: Layout::Bshd,
            custom_strides: None,
            modes: Modes::default(),
            batch_invariant: false,
        }
    }

    pub fn with_modes(mut self, modes: Modes) -> Self {
        self.modes = modes;
        self
    }

    pub fn with_dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }
    pub fn with_causal(mut self, causal: bool) -> Self {
        self.causal = causal;
        self
    }
    pub fn with_layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }
    pub fn with_kv(mut self, heads_kv: usize, seq_k: usize) -> Self {
        self.heads_kv = heads_kv;
        self.seq_k = seq_k;
        self
    }
    pub fn with_scale(mut self, scale: f32) -> Self {
        self.softmax_scale = Some(scale);
        self
    }
    pub fn with_batch_invariant(mut self, on: bool) -> Self {
        self.batch_invariant = on;
        self
    }
    /// Its keys in a paged KV cache of `block_size`-row pages: each sequence its own pages, as
    /// many as hold `seq_k` (rounded up to whole pages), and `seqused_k` keeping its length.
    /// Other modes are kept.
    pub fn with_paged_cache(mut self, block_size: usize) -> Self {
        let blocks = self.seq_k.div_ceil(block_size.max(1));
        self.seq_k = blocks * block_size;
        self.modes.kv = KvStorage::Paged {
            num_blocks: self.batch * blocks,
            block_size,
            max_blocks_per_seq: blocks,
        };
        self.modes.seqused_k = true;
        self
    }
    /// V's and O's head dim (`None` when it equals `head_dim`, so that equal dims compare equal
    /// whichever way they were given).
    pub fn with_head_dim_v(mut self, head_dim_v: usize) -> Self {
        self.head_dim_v = (head_dim_v != self.head_dim).then_some(head_dim_v);
        self
    }

    /// V's and O's head dim: `head_dim_v`, or `head_dim` when it is not given.
    pub fn head_dim_v(&self) -> usize {
        self.head_dim_v.unwrap_or(self.head_dim)
    }

    /// Whether V and O have a head dim of their own (different from Q's and K's).
    pub fn has_distinct_head_dim_v(&self) -> bool {
        self.head_dim_v() != self.head_dim
    }

    pub fn scale(&self) -> f32 {
        self.softmax_scale
            .unwrap_or_else(|| 1.0 / (self.head_dim.max(1) as f32).sqrt())
    }

    pub fn strides(&self) -> ProblemStrides {
        if let Some(s) = self.custom_strides {
            return s;
        }
        let (hq, hkv, d, dv) = (
            self.heads_q,
            self.heads_kv,
            self.head_dim,
            self.head_dim_v(),
        );
        // Packed (varlen) tensors are [total, heads, d]: no batch axis, rows found through
        // cu_seqlens. A paged cache's "batch" axis is the block: [num_blocks, block_size, h, d].
        // V and O rows are dv wide.
        let packed = |heads: usize, d: usize| TensorStrides {
            batch: 0,
            head: d,
            row: heads.saturating_mul(d),
        };
        let (q, o) = match self.modes.packed_q {
            Some(_) => (packed(hq, d), packed(hq, dv)),
            None => (
                self.layout.strides(hq, self.seq_q, d),
                self.layout.strides(hq, self.seq_q, dv),
            ),
        };
        let kv = |d: usize| match self.modes.kv {
            KvStorage::Dense => self.layout.strides(hkv, self.seq_k, d),
            KvStorage::Packed { .. } => packed(hkv, d),
            KvStorage::Paged { block_size, .. } => Layout::Bshd.strides(hkv, block_size, d),
        };
        ProblemStrides {
            q,
            k: kv(d),
            v: kv(dv),
            o,
        }
    }

    /// (batch entries, rows per entry) of Q/O and of K/V storage: what the tensors hold, which
    /// differs from (batch, seq) for packed and paged storage.
    pub fn q_storage(&self) -> (usize, usize) {
        match self.modes.packed_q {
            Some(total) => (1, total),
            None => (self.batch, self.seq_q),
        }
    }
    pub fn kv_storage(&self) -> (usize, usize) {
        match self.modes.kv {
            KvStorage::Dense => (self.batch, self.seq_k),
            KvStorage::Packed { total_k } => (1, total_k),
            KvStorage::Paged {
                num_blocks,
                block_size,
                ..
            } => (num_blocks, block_size),
        }
    }

    /// Elements a tensor of `heads` heads of `dim`-wide rows with `strides` addresses over
    /// `storage` (see [`q_storage`](Self::q_storage)).
    fn tensor_len(
        &self,
        strides: TensorStrides,
        heads: usize,
        storage: (usize, usize),
        dim: usize,
    ) -> usize {
        let (b, s) = storage;
        strides.required_len(b, heads, s, dim)
    }
    pub fn q_len(&self) -> usize {
        self.tensor_len(
            self.strides().q,
            self.heads_q,
            self.q_storage(),
            self.head_dim,
        )
    }
    pub fn k_len(&self) -> usize {
        self.tensor_len(
            self.strides().k,
            self.heads_kv,
            self.kv_storage(),
            self.head_dim,
        )
    }
    /// V's rows are [`head_dim_v`](Self::head_dim_v) wide.
    pub fn v_len(&self) -> usize {
        self.tensor_len(
            self.strides().v,
            self.heads_kv,
            self.kv_storage(),
            self.head_dim_v(),
        )
    }
    /// O's rows are [`head_dim_v`](Self::head_dim_v) wide.
    pub fn o_len(&self) -> usize {
        self.tensor_len(
            self.strides().o,
            self.heads_q,
            self.q_storage(),
            self.head_dim_v(),
        )
    }
    /// LSE is `[batch, heads_q, seq_q]`, or `[heads_q, total_q]` for packed Q (FlashAttention
    /// 2's varlen layout).
    pub fn lse_len(&self) -> usize {
        match self.modes.packed_q {
            Some(total) => self.heads_q.saturating_mul(total),
            None => self
                .batch
                .saturating_mul(self.heads_q)
                .saturating_mul(self.seq_q),
        }
    }

    pub fn q_heads_per_kv(&self) -> usize {
        self.heads_q / self.heads_kv.max(1)
    }

    /// Nothing to compute or write: batch, heads or seq_q is zero.
    pub fn is_empty_output(&self) -> bool {
        self.batch == 0 || self.heads_q == 0 || self.seq_q == 0
    }

    /// Multiply-adds counted the usual way: 2·B·H·Sq·Sk·(D + Dv) (4·B·H·Sq·Sk·D with one head
    /// dim), halved for causal square problems.
    pub fn flops(&self) -> f64 {
        let full = 2.0
            * self.batch as f64
            * self.heads_q as f64
            * self.seq_q as f64
            * self.seq_k as f64
            * (self.head_dim as f64 + self.head_dim_v() as f64);
        if self.causal {
            full / 2.0
        } else {
            full
        }
    }

    /// Checks that do not depend on any kernel: every generation runs them before a launch.
    pub fn validate(&self) -> Result<(), InvalidProblem> {
        if self.head_dim == 0 {
            return Err(InvalidProblem::ZeroHeadDim);
        }
        if self.head_dim_v() == 0 {
            return Err(InvalidProblem::ZeroHeadDimV);
        }
        if self.heads_q == 0 || self.heads_kv == 0 {
            return Err(InvalidProblem::ZeroHeads {
                heads_q: self.heads_q,
                heads_kv: self.heads_kv,
            });
        }
        if !self.heads_q.is_multiple_of(self.heads_kv) {
            return Err(InvalidProblem::HeadsNotDivisible {
                heads_q: self.heads_q,
                heads_kv: self.heads_kv,
            });
        }
        if let Some(s) = self.softmax_scale {
            if !s.is_finite() {
                return Err(InvalidProblem::NonFiniteScale(s));
            }
        }
        // Every count the kernels take as i32 must fit, and every offset in i64.
        for (what, v) in [
            ("batch", self.batch),
            ("heads_q", self.heads_q),
            ("heads_kv", self.heads_kv),
            ("seq_q", self.seq_q),
            ("seq_k", self.seq_k),
            ("head_dim", self.head_dim),
            ("head_dim_v", self.head_dim_v()),
        ] {
            if v > i32::MAX as usize {
                return Err(InvalidProblem::TooLarge {
                    what,
                    value: v as u128,
                    limit: i32::MAX as u128,
                });
            }
        }
        let rows = (self.batch as u128) * (self.heads_q as u128) * (self.seq_q as u128);
        if rows > i32::MAX as u128 * 64 {
            return Err(InvalidProblem::TooLarge {
                what: "batch*heads_q*seq_q",
                value: rows,
                limit: i32::MAX as u128 * 64,
            });
        }
        self.modes.validate(self.batch, self.seq_k, self.causal)?;
        crate::modes::validate_kv_fp8(self)?;
        let s = self.strides();
        let (q_batch, q_rows) = self.q_storage();
        let (kv_batch, kv_rows) = self.kv_storage();
        let (d, dv) = (self.head_dim, self.head_dim_v());
        for (name, st, heads, batch, seq, dim) in [
            ("q", s.q, self.heads_q, q_batch, q_rows, d),
            ("k", s.k, self.heads_kv, kv_batch, kv_rows, d),
            ("v", s.v, self.heads_kv, kv_batch, kv_rows, dv),
            ("o", s.o, self.heads_q, q_batch, q_rows, dv),
        ] {
            let extent = (batch as u128) * st.batch as u128
                + (heads as u128) * st.head as u128
                + (seq as u128) * st.row as u128
                + dim as u128;
            if extent > MAX_ELEMENTS as u128 {
                return Err(InvalidProblem::TooLarge {
                    what: name,
                    value: extent,
                    limit: MAX_ELEMENTS as u128,
                });
            }
            if dim > 1 && (st.row < dim && seq > 1) {
                return Err(InvalidProblem::OverlappingRows {
                    tensor: name,
                    row_stride: st.row,
                    head_dim: dim,
                });
            }
        }
        // O is written: two (batch, head, row, col) that share an element would be written by
        // different blocks, a race with no defined result.
        if self.is_empty_output() {
            return Ok(());
        }
        s.o.check_distinct(q_batch, self.heads_q, q_rows, dv)
    }
}

impl std::fmt::Display for AttentionProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "B={} Hq={} Hkv={} Sq={} Sk={} D={}{} {} {}{}{} scale={}",
            self.batch,
            self.heads_q,
            self.heads_kv,
            self.seq_q,
            self.seq_k,
            self.head_dim,
            match self.head_dim_v {
                Some(dv) if dv != self.head_dim => format!(" Dv={dv}"),
                _ => String::new(),
            },
            self.dtype,
            self.layout.name(),
            if self.causal { " causal" } else { "" },
            if self.batch_invariant {
                " batch-invariant"
            } else {
                ""
            },
            self.scale()
        )
    }
}
