//! The inference-mode flags of `flashcore run`, in FlashAttention's names (`docs/MODES.md` is the
//! contract), and the pure step from parsed flags and loaded arrays to an [`AttentionProblem`]
//! whose tables have passed the core's checks. Nothing here touches a device: `main` runs all of
//! it before opening one, so a bad combination is exit 2 on any machine, GPU or not.

use std::path::PathBuf;
use std::str::FromStr;

use anyhow::{anyhow, bail, Result};
use flashcore::{
    AlibiSlopes, AttentionProblem, DType, HostTables, KvScales, KvStorage, Layout, Modes,
};
use ndarray::ArrayD;

/// `--layout`: a dense layout of the core, or `thd` (packed varlen Q/O `[total_q, heads, d]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunLayout {
    Dense(Layout),
    Thd,
}

impl FromStr for RunLayout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("thd") {
            return Ok(RunLayout::Thd);
        }
        Layout::from_str(s)
            .map(RunLayout::Dense)
            .map_err(|_| format!("unknown layout '{s}' (expected bshd, bhsd or thd)"))
    }
}

impl RunLayout {
    /// The core layout of dense tensors (Q/O when not packed, a contiguous K/V cache): a packed
    /// problem's dense K/V cache is `[batch, capacity, heads_kv, head_dim]`, as in FlashAttention.
    pub fn dense(self) -> Layout {
        match self {
            RunLayout::Dense(l) => l,
            RunLayout::Thd => Layout::Bshd,
        }
    }
}

/// A window bound: `-1` (FlashAttention's "unbounded") or a count of positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window(pub Option<usize>);

pub fn parse_window(s: &str) -> Result<Window, String> {
    match s.trim().parse::<i64>() {
        Ok(-1) => Ok(Window(None)),
        Ok(n) if n >= 0 => usize::try_from(n)
            .map(|n| Window(Some(n)))
            .map_err(|_| format!("'{s}' is too large")),
        _ => Err(format!(
            "'{s}' is not a window size (a count >= 0, or -1 for unbounded)"
        )),
    }
}

/// `--kv-dtype` / `--q-dtype`: what --k/--v (or --q) hold when not the problem's dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum KvDtype {
    // OCP FP8 E4M3 (e4m3fn) values with f32 descale factors (`Modes::kv_fp8`). A plain comment:
    // a documented value would switch `run --help` to its long layout.
    E4m3,
}

/// `--kv-scales`: the descale tables' shape, named as `cargo xtask verify`'s `fp8=` key.
pub fn parse_kv_scales(s: &str) -> Result<KvScales, String> {
    match s.trim() {
        "tensor" => Ok(KvScales::PerTensor),
        "head" => Ok(KvScales::PerKvHead),
        "batchhead" => Ok(KvScales::PerBatchKvHead),
        other => Err(format!(
            "unknown descale shape '{other}' (expected tensor, head or batchhead)"
        )),
    }
}

/// The mode flags of `flashcore run`, each FlashAttention's argument of the same name.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ModeFlags {
    /// int32 [batch+1]: offsets of each sequence's rows in the packed --q (cu_seqlens_q; needs --layout thd).
    #[arg(long, value_name = "NPY")]
    pub cu_seqlens_q: Option<PathBuf>,
    /// int32 [batch+1]: offsets of each sequence's rows in packed --k/--v [total_k, heads_kv, head_dim] (cu_seqlens_k).
    #[arg(long, value_name = "NPY")]
    pub cu_seqlens_k: Option<PathBuf>,
    /// int32 [batch]: valid rows of each sequence's KV cache, --k/--v [batch, capacity, heads_kv, head_dim] or paged (seqused_k, cache_seqlens).
    #[arg(long, value_name = "NPY")]
    pub seqused_k: Option<PathBuf>,
    /// int32 [batch, max_blocks_per_seq]: pages of each sequence; --k/--v are a paged cache [num_blocks, block_size, heads_kv, head_dim] (block_table; needs --seqused-k).
    #[arg(long, value_name = "NPY")]
    pub block_table: Option<PathBuf>,
    /// float32 [heads_q] or [batch, heads_q]: ALiBi slopes, bias -slope·|i + len_k - len_q - j| on the scaled score (alibi_slopes).
    #[arg(long, value_name = "NPY")]
    pub alibi_slopes: Option<PathBuf>,
    /// [batch, seqlen_new, heads_kv, head_dim]: keys written into the cache at seqused_k before attending (flash_attn_with_kvcache's k; needs --seqused-k).
    #[arg(long, value_name = "NPY")]
    pub k_new: Option<PathBuf>,
    /// [batch, seqlen_new, heads_kv, head_dim]: values appended with --k-new (flash_attn_with_kvcache's v).
    #[arg(long, value_name = "NPY")]
    pub v_new: Option<PathBuf>,
    /// Write the K cache after the append (float32, --k's shape; needs --k-new).
    #[arg(long, value_name = "NPY")]
    pub k_cache_out: Option<PathBuf>,
    /// Write the V cache after the append (float32, --v's shape; needs --v-new).
    #[arg(long, value_name = "NPY")]
    pub v_cache_out: Option<PathBuf>,
    /// Mask keys more than N positions left of the bottom-right aligned diagonal (window_size[0]; -1 = unbounded).
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = parse_window)]
    pub window_left: Option<Window>,
    /// Mask keys more than N positions right of the diagonal (window_size[1]; -1 = unbounded; causal is 0).
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = parse_window)]
    pub window_right: Option<Window>,
    /// Soft-cap the scaled scores to X·tanh(s/X) before the softmax (softcap; 0 = off).
    #[arg(long, value_name = "X", allow_hyphen_values = true)]
    pub softcap: Option<f32>,
    /// int32 [batch, n, 2]: [start, end) key ranges per sequence; a query inside a range also sees all of it, whatever --causal and the window say (candle-flash-attn's mm_prefix_ranges).
    #[arg(long, value_name = "NPY")]
    pub mm_prefix_ranges: Option<PathBuf>,
    /// e4m3: --k/--v are an fp8 KV cache of OCP FP8 E4M3 values, as uint8 .npy of their bytes (torch's float8_e4m3fn viewed as uint8) or float16/float32 .npy of the stored values (unscaled, each exactly an e4m3 value: nothing is quantized for you); true K/V = stored x --k-descale/--v-descale. Q (unless --q-dtype e4m3) and O keep --dtype; --k-new/--v-new are true values, quantized into the cache (--k-cache-out/--v-cache-out write its stored values).
    #[arg(long, value_enum, value_name = "DTYPE")]
    pub kv_dtype: Option<KvDtype>,
    /// Shape of --k-descale/--v-descale: tensor [1], head [heads_kv] or batchhead [batch, heads_kv] (default: the files' shape says; needs --kv-dtype e4m3).
    #[arg(long, value_name = "SHAPE", value_parser = parse_kv_scales)]
    pub kv_scales: Option<KvScales>,
    /// float32 [1], [heads_kv] or [batch, heads_kv]: factors of the stored --k values, each finite and > 0 (FlashAttention 3's k_descale; needs --kv-dtype e4m3).
    #[arg(long, value_name = "NPY")]
    pub k_descale: Option<PathBuf>,
    /// float32, shaped as --k-descale: factors of the stored --v values (v_descale).
    #[arg(long, value_name = "NPY")]
    pub v_descale: Option<PathBuf>,
    /// e4m3: --q too is OCP FP8 E4M3 (FlashAttention 3's fp8 forward), read as --k/--v are under --kv-dtype e4m3; true Q = stored x --q-descale; O is --dtype (f16/bf16), LSE float32 (needs --kv-dtype e4m3 and --q-descale).
    #[arg(long, value_enum, value_name = "DTYPE")]
    pub q_dtype: Option<KvDtype>,
    /// float32, shaped as --k-descale: factors of the stored --q values, each finite and > 0 (q_descale; needs --q-dtype e4m3).
    #[arg(long, value_name = "NPY")]
    pub q_descale: Option<PathBuf>,
}

/// Which optional inputs are present: from the flags before anything is read, or from the
/// loaded arrays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Given {
    pub cu_seqlens_q: bool,
    pub cu_seqlens_k: bool,
    pub seqused_k: bool,
    pub block_table: bool,
    pub k_new: bool,
    pub v_new: bool,
    pub k_cache_out: bool,
    pub v_cache_out: bool,
    pub k_descale: bool,
    pub v_descale: bool,
    pub q_descale: bool,
}

impl ModeFlags {
    pub fn given(&self) -> Given {
        Given {
            cu_seqlens_q: self.cu_seqlens_q.is_some(),
            cu_seqlens_k: self.cu_seqlens_k.is_some(),
            seqused_k: self.seqused_k.is_some(),
            block_table: self.block_table.is_some(),
            k_new: self.k_new.is_some(),
            v_new: self.v_new.is_some(),
            k_cache_out: self.k_cache_out.is_some(),
            v_cache_out: self.v_cache_out.is_some(),
            k_descale: self.k_descale.is_some(),
            v_descale: self.v_descale.is_some(),
            q_descale: self.q_descale.is_some(),
        }
    }
}

/// The scalar settings of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub layout: RunLayout,
    pub dtype: DType,
    pub causal: bool,
    pub scale: Option<f32>,
    pub window_left: Option<usize>,
    pub window_right: Option<usize>,
    /// As given: 0 turns it off, as in FlashAttention.
    pub softcap: Option<f32>,
    /// `--kv-dtype`: None for K/V in `dtype`.
    pub kv_dtype: Option<KvDtype>,
    /// `--kv-scales`, if given.
    pub kv_scales: Option<KvScales>,
    /// `--q-dtype`: None for Q in `dtype`.
    pub q_dtype: Option<KvDtype>,
}

impl Settings {
    pub fn new(layout: RunLayout, dtype: DType, causal: bool, scale: Option<f32>) -> Self {
        Settings {
            layout,
            dtype,
            causal,
            scale,
            window_left: None,
            window_right: None,
            softcap: None,
            kv_dtype: None,
            kv_scales: None,
            q_dtype: None,
        }
    }

    pub fn with_flags(mut self, f: &ModeFlags) -> Self {
        self.window_left = f.window_left.and_then(|w| w.0);
        self.window_right = f.window_right.and_then(|w| w.0);
        self.softcap = f.softcap;
        self.kv_dtype = f.kv_dtype;
        self.kv_scales = f.kv_scales;
        self.q_dtype = f.q_dtype;
        self
    }
}

/// Combinations that are wrong whatever the files hold: checked before any file is read, and
/// again by [`build`].
pub fn check_combination(s: &Settings, g: &Given) -> Result<()> {
    let thd = s.layout == RunLayout::Thd;
    if thd && !g.cu_seqlens_q {
        bail!("--layout thd needs --cu-seqlens-q (where each sequence's rows start in the packed --q)");
    }
    if !thd && g.cu_seqlens_q {
        bail!("--cu-seqlens-q needs --layout thd (--q packed as [total_q, heads_q, head_dim])");
    }
    if g.block_table && !g.seqused_k {
        bail!("--block-table needs --seqused-k (how many rows of each sequence's pages are valid)");
    }
    if g.block_table && g.cu_seqlens_k {
        bail!(
            "--cu-seqlens-k and --block-table exclude each other: K/V are either packed or paged"
        );
    }
    if g.k_new != g.v_new {
        bail!(if g.k_new {
            "--k-new needs --v-new (keys and values are appended together)"
        } else {
            "--v-new needs --k-new (keys and values are appended together)"
        });
    }
    if g.k_new && !g.seqused_k {
        bail!("--k-new needs --seqused-k (new rows are written at seqused_k[b])");
    }
    if g.k_new && g.cu_seqlens_k {
        bail!("--k-new needs a KV cache (contiguous, or paged with --block-table), not packed keys (--cu-seqlens-k)");
    }
    if g.k_cache_out && !g.k_new {
        bail!("--k-cache-out needs --k-new (without an append the cache is unchanged)");
    }
    if g.v_cache_out && !g.v_new {
        bail!("--v-cache-out needs --v-new (without an append the cache is unchanged)");
    }
    if let Some(x) = s.softcap {
        if !(x.is_finite() && x >= 0.0) {
            bail!("--softcap {x} must be finite and >= 0 (0 turns it off)");
        }
    }
    if s.causal && s.window_right.is_some_and(|r| r > 0) {
        bail!(
            "--window-right {} with --causal: causal already bounds the window at 0 on the right; give one or the other",
            s.window_right.unwrap_or(0)
        );
    }
    if let Some(sc) = s.scale {
        if !sc.is_finite() {
            bail!("--scale {sc} is not finite");
        }
    }
    let e4m3 = s.kv_dtype == Some(KvDtype::E4m3);
    if e4m3 && !(g.k_descale && g.v_descale) {
        bail!("--kv-dtype e4m3 needs --k-descale and --v-descale (the factors the stored values are scaled by)");
    }
    if !e4m3 {
        for (given, flag) in [
            (g.k_descale, "--k-descale"),
            (g.v_descale, "--v-descale"),
            (s.kv_scales.is_some(), "--kv-scales"),
        ] {
            if given {
                bail!("{flag} needs --kv-dtype e4m3 (descale factors are for an fp8 KV cache)");
            }
        }
    }
    let q_e4m3 = s.q_dtype == Some(KvDtype::E4m3);
    if q_e4m3 && !e4m3 {
        // The core's rule too: Q's descale table takes K's shape, so K/V must be e4m3.
        bail!("--q-dtype e4m3 needs --kv-dtype e4m3 (the fp8 forward takes Q, K and V in e4m3)");
    }
    if q_e4m3 && !g.q_descale {
        bail!("--q-dtype e4m3 needs --q-descale (the factors the stored Q values are scaled by)");
    }
    if !q_e4m3 && g.q_descale {
        bail!("--q-descale needs --q-dtype e4m3 (descale factors are for an fp8 Q)");
    }
    Ok(())
}

/// An array as its shape and standard-order values.
#[derive(Clone, Debug, PartialEq)]
pub struct Arr<T> {
    pub shape: Vec<usize>,
    pub data: Vec<T>,
}

impl<T: Copy> From<ArrayD<T>> for Arr<T> {
    fn from(a: ArrayD<T>) -> Self {
        Arr {
            shape: a.shape().to_vec(),
            data: a.iter().copied().collect(),
        }
    }
}

/// Every input file, read.
#[derive(Clone, Debug)]
pub struct Loaded {
    pub q: ArrayD<f32>,
    pub k: ArrayD<f32>,
    pub v: ArrayD<f32>,
    pub k_new: Option<ArrayD<f32>>,
    pub v_new: Option<ArrayD<f32>>,
    pub cu_seqlens_q: Option<Arr<i32>>,
    pub cu_seqlens_k: Option<Arr<i32>>,
    pub seqused_k: Option<Arr<i32>>,
    pub block_table: Option<Arr<i32>>,
    pub alibi_slopes: Option<Arr<f32>>,
    /// Row-major `[batch, n, 2]`.
    pub mm_prefix_ranges: Option<Arr<i32>>,
    /// Whether the updated caches are to be written (only presence matters here).
    pub k_cache_out: bool,
    pub v_cache_out: bool,
    /// e4m3 K's and V's descale factors (`--kv-dtype e4m3`).
    pub k_descale: Option<Arr<f32>>,
    pub v_descale: Option<Arr<f32>>,
    /// e4m3 Q's descale factors (`--q-dtype e4m3`).
    pub q_descale: Option<Arr<f32>>,
}

impl Loaded {
    pub fn new(q: ArrayD<f32>, k: ArrayD<f32>, v: ArrayD<f32>) -> Self {
        Loaded {
            q,
            k,
            v,
            k_new: None,
            v_new: None,
            cu_seqlens_q: None,
            cu_seqlens_k: None,
            seqused_k: None,
            block_table: None,
            alibi_slopes: None,
            mm_prefix_ranges: None,
            k_cache_out: false,
            v_cache_out: false,
            k_descale: None,
            v_descale: None,
            q_descale: None,
        }
    }

    pub fn given(&self) -> Given {
        Given {
            cu_seqlens_q: self.cu_seqlens_q.is_some(),
            cu_seqlens_k: self.cu_seqlens_k.is_some(),
            seqused_k: self.seqused_k.is_some(),
            block_table: self.block_table.is_some(),
            k_new: self.k_new.is_some(),
            v_new: self.v_new.is_some(),
            k_cache_out: self.k_cache_out,
            v_cache_out: self.v_cache_out,
            k_descale: self.k_descale.is_some(),
            v_descale: self.v_descale.is_some(),
            q_descale: self.q_descale.is_some(),
        }
    }

    /// The tables as the core takes them.
    pub fn host_tables(&self) -> HostTables<'_> {
        HostTables {
            cu_seqlens_q: self.cu_seqlens_q.as_ref().map(|a| a.data.as_slice()),
            cu_seqlens_k: self.cu_seqlens_k.as_ref().map(|a| a.data.as_slice()),
            seqused_k: self.seqused_k.as_ref().map(|a| a.data.as_slice()),
            block_table: self.block_table.as_ref().map(|a| a.data.as_slice()),
            alibi_slopes: self.alibi_slopes.as_ref().map(|a| a.data.as_slice()),
            mm_prefix_ranges: self.mm_prefix_ranges.as_ref().map(|a| a.data.as_slice()),
            k_descale: self.k_descale.as_ref().map(|a| a.data.as_slice()),
            v_descale: self.v_descale.as_ref().map(|a| a.data.as_slice()),
            q_descale: self.q_descale.as_ref().map(|a| a.data.as_slice()),
        }
    }
}

fn axes(layout: Layout) -> &'static str {
    match layout {
        Layout::Bshd => "batch, seq, heads, head_dim",
        Layout::Bhsd => "batch, heads, seq, head_dim",
    }
}

/// A 1-D table's values, or why its shape is wrong.
fn one_d<'a>(flag: &str, a: &'a Arr<i32>, what: &str) -> Result<&'a [i32]> {
    if a.shape.len() != 1 {
        bail!(
            "{flag}: expected a 1-D int32 array {what}, got shape {:?}",
            a.shape
        );
    }
    Ok(&a.data)
}

/// Checks packed offsets with the core's own rules (start at 0, non-decreasing, last entry the
/// packed row count) before anything is sized from them; returns the longest sequence.
fn check_offsets(cu: &[i32], total: usize, queries: bool) -> Result<usize> {
    let batch = cu.len().saturating_sub(1);
    let mut p = AttentionProblem::new(batch, 1, total, 1);
    let tables = if queries {
        p.modes.packed_q = Some(total);
        HostTables {
            cu_seqlens_q: Some(cu),
            ..HostTables::default()
        }
    } else {
        p.modes.kv = KvStorage::Packed { total_k: total };
        HostTables {
            cu_seqlens_k: Some(cu),
            ..HostTables::default()
        }
    };
    tables.validate(&p).map_err(|e| anyhow!(e))?;
    Ok(cu
        .windows(2)
        .map(|w| (i64::from(w[1]) - i64::from(w[0])).max(0) as usize)
        .max()
        .unwrap_or(0))
}

/// The problem the loaded arrays describe, with every shape, combination and table checked
/// (the core's `validate` and `HostTables::validate` included): what `forward_host_modes` takes
/// with `loaded.host_tables()`. Errors are one line naming the flag or the table field.
pub fn build(s: &Settings, x: &Loaded) -> Result<AttentionProblem> {
    check_combination(s, &x.given())?;
    let (q, k, v) = (x.q.shape(), x.k.shape(), x.v.shape());
    let kv_layout = s.layout.dense();

    // Q: batch, heads, (max) rows, head_dim, and what the batch size comes from.
    let (batch, batch_from, hq, seq_q, dq, packed_q) = match s.layout {
        RunLayout::Dense(layout) => {
            if q.len() != 4 {
                bail!(
                    "--q: expected a 4-D array ({}) with --layout {}, got shape {q:?}{}",
                    axes(layout),
                    layout.name(),
                    if q.len() == 3 {
                        " (packed queries [total_q, heads_q, head_dim] need --layout thd)"
                    } else {
                        ""
                    }
                );
            }
            let (b, h, sq, d) = split(q, layout);
            (b, format!("--q has batch {b}"), h, sq, d, None)
        }
        RunLayout::Thd => {
            if q.len() != 3 {
                bail!("--q: --layout thd takes a 3-D array [total_q, heads_q, head_dim], got shape {q:?}");
            }
            let cu = x
                .cu_seqlens_q
                .as_ref()
                .ok_or_else(|| anyhow!("--layout thd needs --cu-seqlens-q"))?;
            let cu = one_d("--cu-seqlens-q", cu, "[batch+1]")?;
            if cu.is_empty() {
                bail!("--cu-seqlens-q is empty: it needs batch+1 entries, starting at 0");
            }
            let max_q = check_offsets(cu, q[0], true)?;
            let b = cu.len() - 1;
            (
                b,
                format!("--cu-seqlens-q describes {b} sequences"),
                q[1],
                max_q,
                q[2],
                Some(q[0]),
            )
        }
    };
    let need_rows = |flag: &str, got: usize| -> Result<()> {
        if got != batch {
            bail!("{flag} has {got} rows but {batch_from}");
        }
        Ok(())
    };

    // K/V storage: packed, paged or dense (a plain tensor or a contiguous cache).
    for (flag, a) in [("--k", k), ("--v", v)] {
        if !matches!(a.len(), 3 | 4) {
            bail!(
                "{flag}: expected a 4-D array ({}), or 3-D packed [total_k, heads_kv, head_dim] with --cu-seqlens-k, got shape {a:?}",
                axes(kv_layout)
            );
        }
    }
    if k != v {
        bail!("k has shape {k:?} but v has {v:?}: they must match");
    }
    let (kv, hkv, seq_k, dk) = match (k.len(), &x.block_table, &x.cu_seqlens_k) {
        (3, Some(_), _) => bail!(
            "--block-table needs a paged --k/--v [num_blocks, block_size, heads_kv, head_dim], but --k has shape {k:?}"
        ),
        (3, None, None) => bail!(
            "--k has shape {k:?}: 3-D K/V are packed [total_k, heads_kv, head_dim] and need --cu-seqlens-k (dense K/V are 4-D)"
        ),
        (3, None, Some(cu)) => {
            let cu = one_d("--cu-seqlens-k", cu, "[batch+1]")?;
            if cu.len() != batch + 1 {
                bail!(
                    "--cu-seqlens-k has {} entries but {batch_from} (so {} entries)",
                    cu.len(),
                    batch + 1
                );
            }
            let max_k = check_offsets(cu, k[0], false)?;
            (KvStorage::Packed { total_k: k[0] }, k[1], max_k, k[2])
        }
        (4, Some(t), _) => {
            if t.shape.len() != 2 {
                bail!(
                    "--block-table: expected a 2-D int32 array [batch, max_blocks_per_seq], got shape {:?}",
                    t.shape
                );
            }
            need_rows("--block-table", t.shape[0])?;
            let (num_blocks, block_size, max_blocks) = (k[0], k[1], t.shape[1]);
            let capacity = max_blocks.checked_mul(block_size).ok_or_else(|| {
                anyhow!("--block-table: {max_blocks} blocks of {block_size} rows overflow")
            })?;
            (
                KvStorage::Paged {
                    num_blocks,
                    block_size,
                    max_blocks_per_seq: max_blocks,
                },
                k[2],
                capacity,
                k[3],
            )
        }
        (4, None, Some(_)) => bail!(
            "--cu-seqlens-k needs packed --k/--v [total_k, heads_kv, head_dim], but --k has shape {k:?}"
        ),
        (4, None, None) => {
            let (bk, h, sk, d) = split(k, kv_layout);
            if bk != batch {
                match s.layout {
                    RunLayout::Dense(_) => bail!("q has batch {batch} but k has {bk}"),
                    RunLayout::Thd => bail!("{batch_from} but --k has batch {bk}"),
                }
            }
            (KvStorage::Dense, h, sk, d)
        }
        (r, _, _) => bail!("--k: a {r}-D array is neither dense, packed nor paged K/V"),
    };
    if dq != dk {
        bail!("q has head_dim {dq} but k has {dk}");
    }
    if hkv == 0 || hq % hkv != 0 {
        bail!("q has {hq} heads, not a multiple of k's {hkv}");
    }

    let mut modes = Modes {
        packed_q,
        kv,
        window_left: s.window_left,
        window_right: s.window_right,
        softcap: s.softcap.filter(|&c| c != 0.0),
        ..Modes::default()
    };
    if let Some(used) = &x.seqused_k {
        let used = one_d("--seqused-k", used, "[batch]")?;
        if used.len() != batch {
            bail!("--seqused-k has {} entries but {batch_from}", used.len());
        }
        modes.seqused_k = true;
    }
    if let (Some(kn), Some(vn)) = (&x.k_new, &x.v_new) {
        let (kn, vn) = (kn.shape(), vn.shape());
        if kn != vn {
            bail!("--k-new has shape {kn:?} but --v-new has {vn:?}: they must match");
        }
        if kn.len() != 4 || kn[0] != batch || kn[2] != hkv || kn[3] != dk {
            bail!(
                "--k-new: expected [batch, seqlen_new, heads_kv, head_dim] = [{batch}, *, {hkv}, {dk}], got shape {kn:?}"
            );
        }
        modes.append = Some(kn[1]);
    }
    if let Some(a) = &x.alibi_slopes {
        modes.alibi = Some(match a.shape.as_slice() {
            [h] if *h == hq => AlibiSlopes::PerHead,
            [b, h] if *b == batch && *h == hq => AlibiSlopes::PerBatchHead,
            other => bail!(
                "--alibi-slopes: expected float32 [heads_q] = [{hq}] or [batch, heads_q] = [{batch}, {hq}], got shape {other:?}"
            ),
        });
    }
    if let Some(r) = &x.mm_prefix_ranges {
        modes.mm_prefix = Some(match r.shape.as_slice() {
            [b, n, 2] if *b == batch && *n >= 1 => *n,
            // An empty table would be a mode with nothing in it: the core refuses it, so say
            // here which flag to drop.
            [b, 0, 2] if *b == batch => bail!(
                "--mm-prefix-ranges holds no ranges (shape {:?}): leave the flag out instead",
                r.shape
            ),
            other => bail!(
                "--mm-prefix-ranges: expected int32 [batch, n, 2] = [{batch}, n, 2] with n >= 1, got shape {other:?}"
            ),
        });
    }

    if s.kv_dtype == Some(KvDtype::E4m3) {
        modes.kv_fp8 = Some(kv_scales(s, x, batch, hkv)?);
    }
    if s.q_dtype == Some(KvDtype::E4m3) {
        if let (Some(qd), Some(kd)) = (&x.q_descale, &x.k_descale) {
            if qd.shape != kd.shape {
                bail!(
                    "--q-descale has shape {:?} but --k-descale has {:?}: they must match",
                    qd.shape,
                    kd.shape
                );
            }
        }
        modes.q_fp8 = true;
    }

    let mut p = AttentionProblem::new(batch, hq, seq_q, dq)
        .with_kv(hkv, seq_k)
        .with_dtype(s.dtype)
        .with_causal(s.causal)
        .with_layout(kv_layout)
        .with_modes(modes);
    p.softmax_scale = s.scale;
    p.validate()?;
    // Built from the shapes, so these agree; checked so a disagreement is exit 2, not a
    // failure after the device is opened.
    let (q_shape, kv_shape, _) = flashcore::host::storage_shapes(&p);
    if q != q_shape.as_slice() || k != kv_shape.as_slice() {
        bail!(
            "--q {q:?} / --k {k:?} do not match the problem's storage {q_shape:?} / {kv_shape:?}"
        );
    }
    if p.modes.kv_fp8.is_some() {
        // Before the device: the host path would refuse them there too (NotE4m3).
        flashcore::host::e4m3_bytes("--k", &x.k.view())?;
        flashcore::host::e4m3_bytes("--v", &x.v.view())?;
    }
    if p.modes.q_fp8 {
        flashcore::host::e4m3_bytes("--q", &x.q.view())?;
    }
    x.host_tables().validate(&p)?;
    Ok(p)
}

/// The descale tables' shape: `--kv-scales` if given (the files must have its shape), else what
/// the files' shape says (`[1]` is one factor for the tensor, also where `heads_kv` is 1).
fn kv_scales(s: &Settings, x: &Loaded, batch: usize, hkv: usize) -> Result<KvScales> {
    let (Some(kd), Some(vd)) = (&x.k_descale, &x.v_descale) else {
        bail!("--kv-dtype e4m3 needs --k-descale and --v-descale");
    };
    if kd.shape != vd.shape {
        bail!(
            "--k-descale has shape {:?} but --v-descale has {:?}: they must match",
            kd.shape,
            vd.shape
        );
    }
    let shape_of = |k: KvScales| match k {
        KvScales::PerTensor => vec![1],
        KvScales::PerKvHead => vec![hkv],
        KvScales::PerBatchKvHead => vec![batch, hkv],
    };
    let expected = "[1], [heads_kv] or [batch, heads_kv]";
    match s.kv_scales {
        Some(k) if kd.shape == shape_of(k) => Ok(k),
        Some(k) => bail!(
            "--k-descale: --kv-scales {} needs float32 {:?}, got shape {:?}",
            match k {
                KvScales::PerTensor => "tensor",
                KvScales::PerKvHead => "head",
                KvScales::PerBatchKvHead => "batchhead",
            },
            shape_of(k),
            kd.shape
        ),
        None => [
            KvScales::PerTensor,
            KvScales::PerKvHead,
            KvScales::PerBatchKvHead,
        ]
        .into_iter()
        .find(|&k| kd.shape == shape_of(k))
        .ok_or_else(|| {
            anyhow!(
                "--k-descale: expected float32 {expected} = [1], [{hkv}] or [{batch}, {hkv}], got shape {:?}",
                kd.shape
            )
        }),
    }
}

/// The modes of a problem in a few words for the summary line ("" when dense), e.g.
/// " [thd total_q=51, paged 15x16, seqused_k, append 3, window (16, -1), softcap 30, alibi,
/// mm_prefix 2]".
pub fn summary(m: &Modes) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(t) = m.packed_q {
        parts.push(format!("thd total_q={t}"));
    }
    match m.kv {
        KvStorage::Dense => {}
        KvStorage::Packed { total_k } => parts.push(format!("packed total_k={total_k}")),
        KvStorage::Paged {
            num_blocks,
            block_size,
            ..
        } => parts.push(format!("paged {num_blocks}x{block_size}")),
    }
    if m.seqused_k {
        parts.push("seqused_k".into());
    }
    if let Some(n) = m.append {
        parts.push(format!("append {n}"));
    }
    if m.window_left.is_some() || m.window_right.is_some() {
        let w = |x: Option<usize>| x.map_or("-1".to_string(), |x| x.to_string());
        parts.push(format!(
            "window ({}, {})",
            w(m.window_left),
            w(m.window_right)
        ));
    }
    if let Some(c) = m.softcap {
        parts.push(format!("softcap {c}"));
    }
    if m.alibi.is_some() {
        parts.push("alibi".into());
    }
    if let Some(n) = m.mm_prefix {
        parts.push(format!("mm_prefix {n}"));
    }
    if let Some(k) = m.kv_fp8 {
        parts.push(format!(
            "e4m3 {}, descale {}",
            if m.q_fp8 { "Q/K/V" } else { "K/V" },
            match k {
                KvScales::PerTensor => "per tensor",
                KvScales::PerKvHead => "per KV head",
                KvScales::PerBatchKvHead => "per (batch, KV head)",
            }
        ));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" [{}]", parts.join(", "))
    }
}

/// (batch, heads, seq, head_dim) of a 4-D shape in `layout`.
fn split(s: &[usize], layout: Layout) -> (usize, usize, usize, usize) {
    match layout {
        Layout::Bshd => (s[0], s[2], s[1], s[3]),
        Layout::Bhsd => (s[0], s[1], s[2], s[3]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::IxDyn;

    fn zeros(shape: &[usize]) -> ArrayD<f32> {
        ArrayD::zeros(IxDyn(shape))
    }
    fn ints(shape: &[usize], data: &[i32]) -> Option<Arr<i32>> {
        assert_eq!(shape.iter().product::<usize>(), data.len());
        Some(Arr {
            shape: shape.to_vec(),
            data: data.to_vec(),
        })
    }
    fn floats(shape: &[usize], data: &[f32]) -> Option<Arr<f32>> {
        Some(Arr {
            shape: shape.to_vec(),
            data: data.to_vec(),
        })
    }
    fn bshd() -> Settings {
        Settings::new(RunLayout::Dense(Layout::Bshd), DType::F16, false, None)
    }
    fn thd() -> Settings {
        Settings::new(RunLayout::Thd, DType::F16, false, None)
    }
    fn dense(q: &[usize], k: &[usize]) -> Loaded {
        Loaded::new(zeros(q), zeros(k), zeros(k))
    }

    /// Varlen: 3 sequences of 3, 0 and 7 queries over 5, 7 and 8 keys; GQA 4/2, d 64.
    fn varlen() -> Loaded {
        Loaded {
            cu_seqlens_q: ints(&[4], &[0, 3, 3, 10]),
            cu_seqlens_k: ints(&[4], &[0, 5, 12, 20]),
            ..dense(&[10, 4, 64], &[20, 2, 64])
        }
    }

    /// Paged: batch 2 of 1 query, 5 blocks of 16 rows, 2 per sequence, 20 and 5 rows used, one
    /// appended row each.
    fn paged() -> Loaded {
        Loaded {
            seqused_k: ints(&[2], &[20, 5]),
            block_table: ints(&[2, 2], &[3, 1, 0, 4]),
            k_new: Some(zeros(&[2, 1, 2, 64])),
            v_new: Some(zeros(&[2, 1, 2, 64])),
            ..dense(&[2, 1, 4, 64], &[5, 16, 2, 64])
        }
    }

    fn err(s: &Settings, x: &Loaded) -> String {
        let e = build(s, x).expect_err("should be rejected");
        let line = format!("{e:#}");
        assert!(!line.contains('\n'), "not one line: {line}");
        line
    }

    #[test]
    fn dense_shapes_give_the_problem_in_either_layout() {
        let p = build(
            &Settings::new(RunLayout::Dense(Layout::Bshd), DType::F16, true, None),
            &dense(&[2, 10, 8, 64], &[2, 12, 2, 64]),
        )
        .unwrap();
        assert_eq!(
            (p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_k, p.head_dim),
            (2, 8, 2, 10, 12, 64)
        );
        assert!(p.causal && p.modes.is_dense());
        let bhsd = Settings::new(RunLayout::Dense(Layout::Bhsd), DType::F16, false, None);
        let p = build(&bhsd, &dense(&[2, 8, 10, 64], &[2, 2, 12, 64])).unwrap();
        assert_eq!((p.heads_q, p.seq_q, p.layout), (8, 10, Layout::Bhsd));
    }

    #[test]
    fn mismatched_dense_shapes_say_which() {
        let bhsd = Settings::new(RunLayout::Dense(Layout::Bhsd), DType::F16, false, None);
        let e = |q: &[usize], k: &[usize], v: &[usize]| {
            err(&bhsd, &Loaded::new(zeros(q), zeros(k), zeros(v)))
        };
        assert!(e(&[1, 2, 3, 8], &[1, 2, 3, 8], &[1, 2, 4, 8]).contains("must match"));
        assert!(e(&[1, 2, 3, 8], &[2, 2, 3, 8], &[2, 2, 3, 8]).contains("batch"));
        assert!(e(&[1, 2, 3, 8], &[1, 2, 3, 16], &[1, 2, 3, 16]).contains("head_dim"));
        assert!(e(&[1, 3, 3, 8], &[1, 2, 3, 8], &[1, 2, 3, 8]).contains("multiple"));
        assert!(e(&[1, 2, 3, 0], &[1, 2, 3, 0], &[1, 2, 3, 0]).contains("head_dim is 0"));
        assert!(e(&[2, 3, 8], &[1, 2, 3, 8], &[1, 2, 3, 8]).contains("--layout thd"));
        assert!(e(&[1, 2, 3, 8], &[1, 1, 2, 3, 8], &[1, 2, 3, 8]).contains("4-D"));
        let nan_scale = Settings::new(
            RunLayout::Dense(Layout::Bhsd),
            DType::F16,
            false,
            Some(f32::NAN),
        );
        assert!(err(&nan_scale, &dense(&[1, 2, 3, 8], &[1, 2, 3, 8])).contains("not finite"));
    }

    #[test]
    fn varlen_sizes_come_from_the_offsets() {
        let x = varlen();
        let p = build(&thd(), &x).unwrap();
        assert_eq!(
            (p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_k, p.head_dim),
            (3, 4, 2, 7, 8, 64)
        );
        assert_eq!(p.modes.packed_q, Some(10));
        assert_eq!(p.modes.kv, KvStorage::Packed { total_k: 20 });
        let (q, kv, lse) = flashcore::host::storage_shapes(&p);
        assert_eq!(
            (q, kv, lse),
            (vec![10, 4, 64], vec![20, 2, 64], vec![4, 10])
        );
        // Dense Q over packed K is in the contract too.
        let x = Loaded {
            cu_seqlens_k: ints(&[3], &[0, 4, 20]),
            ..dense(&[2, 5, 4, 64], &[20, 2, 64])
        };
        let p = build(&bshd(), &x).unwrap();
        assert_eq!(
            (p.batch, p.seq_q, p.seq_k, p.modes.packed_q),
            (2, 5, 16, None)
        );
    }

    #[test]
    fn packed_queries_over_a_contiguous_cache() {
        let x = Loaded {
            cu_seqlens_q: ints(&[3], &[0, 2, 5]),
            seqused_k: ints(&[2], &[10, 64]),
            ..dense(&[5, 4, 64], &[2, 64, 2, 64])
        };
        let p = build(&thd(), &x).unwrap();
        assert_eq!((p.batch, p.seq_q, p.seq_k), (2, 3, 64));
        assert_eq!(p.modes.kv, KvStorage::Dense);
        assert!(p.modes.seqused_k && p.modes.packed_q == Some(5));
    }

    #[test]
    fn paged_sizes_come_from_the_pages_and_the_table() {
        let x = paged();
        let p = build(&bshd(), &x).unwrap();
        assert_eq!(
            p.modes.kv,
            KvStorage::Paged {
                num_blocks: 5,
                block_size: 16,
                max_blocks_per_seq: 2
            }
        );
        assert_eq!((p.batch, p.seq_q, p.seq_k), (2, 1, 32));
        assert_eq!(p.modes.append, Some(1));
        assert!(p.modes.seqused_k);
        assert_eq!(summary(&p.modes), " [paged 5x16, seqused_k, append 1]");
        assert_eq!(summary(&Modes::default()), "");
    }

    #[test]
    fn window_softcap_and_alibi_reach_the_modes() {
        let mut s = bshd().with_flags(&ModeFlags {
            window_left: Some(parse_window("3").unwrap()),
            window_right: Some(parse_window("-1").unwrap()),
            softcap: Some(30.0),
            ..ModeFlags::default()
        });
        let mut x = Loaded {
            alibi_slopes: floats(&[4], &[0.5, 0.25, 0.125, 0.0625]),
            ..dense(&[2, 5, 4, 64], &[2, 9, 2, 64])
        };
        let p = build(&s, &x).unwrap();
        assert_eq!(
            (p.modes.window_left, p.modes.window_right, p.modes.softcap),
            (Some(3), None, Some(30.0))
        );
        assert_eq!(p.modes.alibi, Some(AlibiSlopes::PerHead));
        x.alibi_slopes = floats(&[2, 4], &[0.5; 8]);
        assert_eq!(
            build(&s, &x).unwrap().modes.alibi,
            Some(AlibiSlopes::PerBatchHead)
        );
        // softcap 0 is off, as in FlashAttention.
        s.softcap = Some(0.0);
        assert_eq!(build(&s, &x).unwrap().modes.softcap, None);
        assert!(parse_window("-2").is_err() && parse_window("x").is_err());
        assert_eq!(parse_window("0"), Ok(Window(Some(0))));
    }

    #[test]
    fn mm_prefix_ranges_reach_the_modes_and_the_tables() {
        // Two ranges per sequence; unused slots (start >= end) may hold anything.
        let x = Loaded {
            mm_prefix_ranges: ints(&[2, 2, 2], &[0, 4, 9, 9, 2, 6, -5, -7]),
            ..dense(&[2, 5, 4, 64], &[2, 9, 2, 64])
        };
        let causal = Settings::new(RunLayout::Dense(Layout::Bshd), DType::F16, true, None);
        let p = build(&causal, &x).unwrap();
        assert_eq!(p.modes.mm_prefix, Some(2));
        assert!(p.causal);
        assert_eq!(
            x.host_tables().mm_prefix_ranges,
            Some(&[0, 4, 9, 9, 2, 6, -5, -7][..])
        );
        assert_eq!(summary(&p.modes), " [mm_prefix 2]");
        // With packed queries and a paged cache the batch comes from the offsets and the table.
        let x = Loaded {
            mm_prefix_ranges: ints(&[3, 1, 2], &[0, 2, 1, 8, 0, 0]),
            ..varlen()
        };
        assert_eq!(build(&thd(), &x).unwrap().modes.mm_prefix, Some(1));
        let x = Loaded {
            mm_prefix_ranges: ints(&[2, 1, 2], &[0, 20, 0, 5]),
            ..paged()
        };
        let p = build(&bshd(), &x).unwrap();
        assert_eq!(
            summary(&p.modes),
            " [paged 5x16, seqused_k, append 1, mm_prefix 1]"
        );
    }

    /// Every bad combination, shape and table: one line that says what is wrong.
    #[test]
    fn every_bad_input_names_what_is_wrong() {
        type Case = (&'static str, Settings, Loaded, &'static str);
        let with = |f: &dyn Fn(&mut Loaded), base: Loaded| {
            let mut x = base;
            f(&mut x);
            x
        };
        let causal_wr = Settings {
            causal: true,
            window_right: Some(3),
            ..bshd()
        };
        let cases: Vec<Case> = vec![
            ("thd without offsets", thd(), dense(&[10, 4, 64], &[20, 2, 64]), "--layout thd needs --cu-seqlens-q"),
            ("offsets without thd", bshd(), Loaded { cu_seqlens_q: ints(&[3], &[0, 1, 2]), ..dense(&[2, 1, 4, 64], &[2, 3, 2, 64]) }, "--cu-seqlens-q needs --layout thd"),
            ("table without seqused", bshd(), with(&|x| x.seqused_k = None, with(&|x| { x.k_new = None; x.v_new = None; }, paged())), "--block-table needs --seqused-k"),
            ("table and cu_k", bshd(), with(&|x| x.cu_seqlens_k = ints(&[3], &[0, 1, 2]), paged()), "exclude each other"),
            ("k_new alone", bshd(), with(&|x| x.v_new = None, paged()), "--k-new needs --v-new"),
            ("v_new alone", bshd(), with(&|x| x.k_new = None, paged()), "--v-new needs --k-new"),
            ("append without seqused", bshd(), Loaded { k_new: Some(zeros(&[2, 1, 2, 64])), v_new: Some(zeros(&[2, 1, 2, 64])), ..dense(&[2, 1, 4, 64], &[2, 8, 2, 64]) }, "--k-new needs --seqused-k"),
            ("append to packed", thd(), with(&|x| { x.seqused_k = ints(&[3], &[0, 0, 0]); x.k_new = Some(zeros(&[3, 1, 2, 64])); x.v_new = x.k_new.clone(); }, varlen()), "--k-new needs a KV cache"),
            ("cache out without append", bshd(), with(&|x| x.k_cache_out = true, dense(&[2, 1, 4, 64], &[2, 8, 2, 64])), "--k-cache-out needs --k-new"),
            ("v cache out without append", bshd(), with(&|x| x.v_cache_out = true, dense(&[2, 1, 4, 64], &[2, 8, 2, 64])), "--v-cache-out needs --v-new"),
            ("negative softcap", Settings { softcap: Some(-1.0), ..bshd() }, dense(&[2, 1, 4, 64], &[2, 8, 2, 64]), "--softcap -1 must be finite"),
            ("nan softcap", Settings { softcap: Some(f32::NAN), ..bshd() }, dense(&[2, 1, 4, 64], &[2, 8, 2, 64]), "--softcap NaN"),
            ("causal and right window", causal_wr, dense(&[2, 1, 4, 64], &[2, 8, 2, 64]), "--window-right 3 with --causal"),
            // Packed queries and their offsets.
            ("thd q 4-D", thd(), with(&|x| x.q = zeros(&[1, 10, 4, 64]), varlen()), "--layout thd takes a 3-D array"),
            ("cu_q 2-D", thd(), with(&|x| x.cu_seqlens_q = ints(&[2, 2], &[0, 3, 3, 10]), varlen()), "--cu-seqlens-q: expected a 1-D"),
            ("cu_q empty", thd(), with(&|x| x.cu_seqlens_q = ints(&[0], &[]), varlen()), "--cu-seqlens-q is empty"),
            ("cu_q short", thd(), with(&|x| x.cu_seqlens_q = ints(&[4], &[0, 3, 3, 9]), varlen()), "cu_seqlens_q: ends at 9, but the packed tensor has 10 rows"),
            ("cu_q decreasing", thd(), with(&|x| x.cu_seqlens_q = ints(&[4], &[0, 3, 2, 10]), varlen()), "cu_seqlens_q: decreases at entry 2"),
            ("cu_q not at 0", thd(), with(&|x| x.cu_seqlens_q = ints(&[4], &[1, 3, 3, 10]), varlen()), "cu_seqlens_q: must start at 0"),
            ("cu_k count", thd(), with(&|x| x.cu_seqlens_k = ints(&[3], &[0, 5, 20]), varlen()), "--cu-seqlens-k has 3 entries but --cu-seqlens-q describes 3 sequences (so 4 entries)"),
            ("cu_k past the end", thd(), with(&|x| x.cu_seqlens_k = ints(&[4], &[0, 5, 12, 21]), varlen()), "cu_seqlens_k: ends at 21"),
            ("cu_k huge", thd(), with(&|x| x.cu_seqlens_k = ints(&[4], &[0, i32::MAX, i32::MAX, i32::MAX]), varlen()), "cu_seqlens_k: sequence 0 has 2147483647 rows"),
            ("packed k without offsets", thd(), with(&|x| x.cu_seqlens_k = None, varlen()), "need --cu-seqlens-k"),
            ("offsets for 4-D k", bshd(), Loaded { cu_seqlens_k: ints(&[3], &[0, 1, 2]), ..dense(&[2, 1, 4, 64], &[2, 8, 2, 64]) }, "--cu-seqlens-k needs packed --k/--v"),
            ("thd over a dense k of another batch", thd(), Loaded { cu_seqlens_q: ints(&[4], &[0, 3, 3, 10]), ..dense(&[10, 4, 64], &[2, 8, 2, 64]) }, "--cu-seqlens-q describes 3 sequences but --k has batch 2"),
            ("packed k heads", thd(), with(&|x| { x.k = zeros(&[20, 3, 64]); x.v = zeros(&[20, 3, 64]); }, varlen()), "not a multiple of k's 3"),
            // Caches and pages.
            ("seqused count", bshd(), with(&|x| x.seqused_k = ints(&[3], &[1, 2, 3]), paged()), "--seqused-k has 3 entries but --q has batch 2"),
            ("seqused 2-D", bshd(), with(&|x| x.seqused_k = ints(&[2, 1], &[1, 2]), paged()), "--seqused-k: expected a 1-D"),
            ("seqused over capacity", bshd(), Loaded { seqused_k: ints(&[2], &[3, 9]), ..dense(&[2, 1, 4, 64], &[2, 8, 2, 64]) }, "seqused_k: sequence 1: 9 used rows exceed its capacity 8"),
            ("seqused negative", bshd(), Loaded { seqused_k: ints(&[2], &[-1, 2]), ..dense(&[2, 1, 4, 64], &[2, 8, 2, 64]) }, "seqused_k: entry 0 is negative"),
            ("seqused with the append over capacity", bshd(), with(&|x| x.seqused_k = ints(&[2], &[32, 0]), paged()), "seqused_k: sequence 0: 32 used + 1 appended rows exceed its capacity 32"),
            ("table rows", bshd(), with(&|x| x.block_table = ints(&[3, 2], &[0; 6]), paged()), "--block-table has 3 rows but --q has batch 2"),
            ("table 1-D", bshd(), with(&|x| x.block_table = ints(&[4], &[0; 4]), paged()), "--block-table: expected a 2-D"),
            ("block outside the cache", bshd(), with(&|x| x.block_table = ints(&[2, 2], &[3, 9, 0, 4]), paged()), "block_table: sequence 0, entry 1: block 9 is outside 0..5"),
            ("negative block", bshd(), with(&|x| x.block_table = ints(&[2, 2], &[3, 1, -1, 4]), paged()), "block_table: sequence 1, entry 0: block -1"),
            ("block size", bshd(), with(&|x| { x.k = zeros(&[5, 24, 2, 64]); x.v = zeros(&[5, 24, 2, 64]); }, paged()), "block_size: 24 must be a multiple of 16"),
            ("zero block size", bshd(), with(&|x| { x.k = zeros(&[5, 0, 2, 64]); x.v = zeros(&[5, 0, 2, 64]); }, paged()), "block_size: 0"),
            ("3-D pages", bshd(), with(&|x| { x.k = zeros(&[5, 2, 64]); x.v = zeros(&[5, 2, 64]); }, paged()), "--block-table needs a paged --k/--v"),
            ("k_new shape", bshd(), with(&|x| { x.k_new = Some(zeros(&[2, 1, 4, 64])); x.v_new = x.k_new.clone(); }, paged()), "--k-new: expected [batch, seqlen_new, heads_kv, head_dim] = [2, *, 2, 64]"),
            ("k_new vs v_new", bshd(), with(&|x| x.v_new = Some(zeros(&[2, 2, 2, 64])), paged()), "--k-new has shape [2, 1, 2, 64] but --v-new has [2, 2, 2, 64]"),
            ("append past capacity", bshd(), with(&|x| { x.seqused_k = ints(&[2], &[0, 0]); x.k_new = Some(zeros(&[2, 40, 2, 64])); x.v_new = x.k_new.clone(); }, paged()), "k_new: 40 new rows do not fit a cache of capacity 32"),
            // Score modifiers.
            ("alibi shape", bshd(), Loaded { alibi_slopes: floats(&[3], &[0.5; 3]), ..dense(&[2, 1, 4, 64], &[2, 8, 2, 64]) }, "--alibi-slopes: expected float32 [heads_q] = [4] or [batch, heads_q] = [2, 4], got shape [3]"),
            ("alibi batch", bshd(), Loaded { alibi_slopes: floats(&[3, 4], &[0.5; 12]), ..dense(&[2, 1, 4, 64], &[2, 8, 2, 64]) }, "--alibi-slopes: expected"),
            ("alibi NaN", bshd(), Loaded { alibi_slopes: floats(&[4], &[0.5, 0.5, f32::NAN, 0.5]), ..dense(&[2, 1, 4, 64], &[2, 8, 2, 64]) }, "alibi_slopes: entry 2 is not finite"),
            // Bidirectional ranges.
            ("mm_prefix 2-D", bshd(), Loaded { mm_prefix_ranges: ints(&[2, 2], &[0, 4, 0, 4]), ..dense(&[2, 1, 4, 64], &[2, 8, 2, 64]) }, "--mm-prefix-ranges: expected int32 [batch, n, 2] = [2, n, 2] with n >= 1, got shape [2, 2]"),
            ("mm_prefix batch", bshd(), Loaded { mm_prefix_ranges: ints(&[3, 1, 2], &[0, 4, 0, 4, 0, 4]), ..dense(&[2, 1, 4, 64], &[2, 8, 2, 64]) }, "--mm-prefix-ranges: expected int32 [batch, n, 2] = [2, n, 2]"),
            ("mm_prefix not pairs", bshd(), Loaded { mm_prefix_ranges: ints(&[2, 2, 1], &[0, 4, 0, 4]), ..dense(&[2, 1, 4, 64], &[2, 8, 2, 64]) }, "--mm-prefix-ranges: expected int32 [batch, n, 2]"),
            ("mm_prefix batch of thd", thd(), with(&|x| x.mm_prefix_ranges = ints(&[2, 1, 2], &[0, 4, 0, 4]), varlen()), "--mm-prefix-ranges: expected int32 [batch, n, 2] = [3, n, 2]"),
            ("mm_prefix empty", bshd(), Loaded { mm_prefix_ranges: ints(&[2, 0, 2], &[]), ..dense(&[2, 1, 4, 64], &[2, 8, 2, 64]) }, "--mm-prefix-ranges holds no ranges (shape [2, 0, 2])"),
            ("mm_prefix before key 0", bshd(), Loaded { mm_prefix_ranges: ints(&[2, 1, 2], &[0, 4, -1, 3]), ..dense(&[2, 1, 4, 64], &[2, 8, 2, 64]) }, "mm_prefix_ranges: sequence 1, range 0: [-1, 3) starts before key 0"),
        ];
        for (what, s, x, needle) in cases {
            let line = err(&s, &x);
            assert!(
                line.contains(needle),
                "{what}: {line:?} should contain {needle:?}"
            );
        }
    }

    #[test]
    fn combinations_are_checked_from_the_flags_alone() {
        let g = Given {
            block_table: true,
            ..Given::default()
        };
        let e = check_combination(&bshd(), &g).unwrap_err().to_string();
        assert!(e.contains("--block-table needs --seqused-k"), "{e}");
        assert!(check_combination(&thd(), &Given::default()).is_err());
        let ok = Given {
            cu_seqlens_q: true,
            seqused_k: true,
            block_table: true,
            k_new: true,
            v_new: true,
            k_cache_out: true,
            v_cache_out: true,
            ..Given::default()
        };
        check_combination(&thd(), &ok).unwrap();
    }

    fn e4m3(s: Settings) -> Settings {
        Settings {
            kv_dtype: Some(KvDtype::E4m3),
            ..s
        }
    }

    /// An fp8 cache: the descale files' shape picks the table shape (or must be
    /// `--kv-scales`'), the tables reach the core, and the summary says so.
    #[test]
    fn an_e4m3_cache_takes_its_descale_shape_from_the_files() {
        // Paged, batch 2, 2 KV heads; stored values 1.0, -448 and a subnormal.
        let mut x = paged();
        x.k.fill(1.0);
        x.v.fill(-448.0);
        x.v[[0, 0, 0, 0]] = -(2f32.powi(-9));
        for (shape, data, want) in [
            (vec![1], vec![0.5], KvScales::PerTensor),
            (vec![2], vec![0.5, 0.25], KvScales::PerKvHead),
            (
                vec![2, 2],
                vec![0.5, 0.25, 1.0, 2.0],
                KvScales::PerBatchKvHead,
            ),
        ] {
            let x = Loaded {
                k_descale: floats(&shape, &data),
                v_descale: floats(&shape, &data),
                ..x.clone()
            };
            let p = build(&e4m3(bshd()), &x).unwrap();
            assert_eq!(p.modes.kv_fp8, Some(want));
            assert!(p.modes.append.is_some());
            assert_eq!(x.host_tables().k_descale, Some(data.as_slice()));
            assert!(summary(&p.modes).contains("e4m3 K/V, descale"));
            // The flag agrees with the files, or says what it needs.
            let named = |k| Settings {
                kv_scales: Some(k),
                ..e4m3(bshd())
            };
            assert_eq!(build(&named(want), &x).unwrap().modes.kv_fp8, Some(want));
            let other = if want == KvScales::PerKvHead {
                KvScales::PerBatchKvHead
            } else {
                KvScales::PerKvHead
            };
            assert!(err(&named(other), &x).contains("--kv-scales"));
        }
    }

    #[test]
    fn e4m3_inputs_that_do_not_fit_are_named() {
        let mut x = Loaded {
            k_descale: floats(&[2], &[0.5, 0.25]),
            v_descale: floats(&[2], &[0.5, 0.25]),
            ..paged()
        };
        let s = e4m3(bshd());
        build(&s, &x).unwrap();
        // Not an e4m3 value: nothing is quantized for the user.
        x.k[[1, 3, 0, 5]] = 0.1;
        assert!(err(&s, &x).contains("--k: element"), "{}", err(&s, &x));
        x.k[[1, 3, 0, 5]] = f32::NAN;
        assert!(err(&s, &x).contains("not an e4m3 value"));
        x.k[[1, 3, 0, 5]] = 0.0;
        let with = |k: &[usize], kd: &[f32], v: &[usize], vd: &[f32]| Loaded {
            k_descale: floats(k, kd),
            v_descale: floats(v, vd),
            ..x.clone()
        };
        assert!(err(&s, &with(&[2], &[0.5, 0.25], &[1], &[1.0])).contains("must match"));
        assert!(err(&s, &with(&[3], &[1.0; 3], &[3], &[1.0; 3])).contains("[1], [2] or [2, 2]"));
        // Factors must be finite and > 0 (the core's rule).
        let e = err(&s, &with(&[2], &[0.5, 0.0], &[2], &[0.5, 0.25]));
        assert!(e.contains("k_descale") && e.contains("> 0"), "{e}");
        let e = err(&s, &with(&[2], &[0.5, 1.0], &[2], &[f32::INFINITY, 0.25]));
        assert!(e.contains("v_descale"), "{e}");
    }

    #[test]
    fn e4m3_flags_go_together() {
        let both = Given {
            k_descale: true,
            v_descale: true,
            ..Given::default()
        };
        check_combination(&e4m3(bshd()), &both).unwrap();
        let e = check_combination(&e4m3(bshd()), &Given::default()).unwrap_err();
        assert!(e.to_string().contains("needs --k-descale and --v-descale"));
        let only_k = Given {
            v_descale: false,
            ..both
        };
        assert!(check_combination(&e4m3(bshd()), &only_k).is_err());
        let e = check_combination(&bshd(), &both).unwrap_err().to_string();
        assert!(e.contains("--k-descale needs --kv-dtype e4m3"), "{e}");
        let scales_alone = Settings {
            kv_scales: Some(KvScales::PerKvHead),
            ..bshd()
        };
        let e = check_combination(&scales_alone, &Given::default()).unwrap_err();
        assert!(e.to_string().contains("--kv-scales needs --kv-dtype e4m3"));
        assert_eq!(parse_kv_scales("batchhead"), Ok(KvScales::PerBatchKvHead));
        assert!(parse_kv_scales("batch")
            .unwrap_err()
            .contains("tensor, head or batchhead"));
    }

    /// Dense fp8 forward inputs: Q [2, 16, 4, 128], K/V [2, 16, 2, 128], every stored value an
    /// e4m3 one, descales per KV head for all three.
    fn fp8_forward() -> (Settings, Loaded) {
        let mut x = dense(&[2, 16, 4, 128], &[2, 16, 2, 128]);
        x.q.fill(1.0);
        x.q[[1, 2, 3, 4]] = -448.0;
        x.k.fill(0.5);
        x.v.fill(-2f32.powi(-9));
        let d = floats(&[2], &[0.5, 0.25]);
        let x = Loaded {
            k_descale: d.clone(),
            v_descale: d,
            q_descale: floats(&[2], &[2.0, 0.125]),
            ..x
        };
        let s = Settings {
            q_dtype: Some(KvDtype::E4m3),
            dtype: DType::Bf16,
            ..e4m3(bshd())
        };
        (s, x)
    }

    /// `--q-dtype e4m3`: the problem is the fp8 forward (q_fp8 beside kv_fp8 of the files'
    /// shape) and Q's table reaches the core.
    #[test]
    fn an_e4m3_q_makes_the_fp8_forward() {
        let (s, x) = fp8_forward();
        let p = build(&s, &x).unwrap();
        assert!(p.modes.q_fp8);
        assert_eq!(p.modes.kv_fp8, Some(KvScales::PerKvHead));
        assert_eq!(p.dtype, DType::Bf16);
        assert_eq!(x.host_tables().q_descale, Some([2.0, 0.125].as_slice()));
        assert_eq!(summary(&p.modes), " [e4m3 Q/K/V, descale per KV head]");
        // One factor for the tensor: all three tables [1].
        let one = floats(&[1], &[0.5]);
        let x1 = Loaded {
            k_descale: one.clone(),
            v_descale: one.clone(),
            q_descale: one,
            ..x.clone()
        };
        let p = build(&s, &x1).unwrap();
        assert_eq!(p.modes.kv_fp8, Some(KvScales::PerTensor));
        assert!(p.modes.q_fp8);
        // Without --q-dtype, Q keeps the problem's dtype.
        let p = build(
            &e4m3(bshd()),
            &Loaded {
                q_descale: None,
                ..x
            },
        )
        .unwrap();
        assert!(!p.modes.q_fp8);
        assert_eq!(summary(&p.modes), " [e4m3 K/V, descale per KV head]");
    }

    #[test]
    fn e4m3_q_mistakes_are_named() {
        let (s, x) = fp8_forward();
        // Flags that go together.
        let e = err(
            &Settings {
                kv_dtype: None,
                ..s.clone()
            },
            &Loaded {
                k_descale: None,
                v_descale: None,
                ..x.clone()
            },
        );
        assert!(e.contains("--q-dtype e4m3 needs --kv-dtype e4m3"), "{e}");
        let e = err(
            &s,
            &Loaded {
                q_descale: None,
                ..x.clone()
            },
        );
        assert!(e.contains("--q-dtype e4m3 needs --q-descale"), "{e}");
        let e = err(&e4m3(bshd()), &x);
        assert!(e.contains("--q-descale needs --q-dtype e4m3"), "{e}");
        // Q's table takes K's shape.
        let e = err(
            &s,
            &Loaded {
                q_descale: floats(&[1], &[1.0]),
                ..x.clone()
            },
        );
        assert!(
            e.contains("--q-descale has shape [1] but --k-descale has [2]"),
            "{e}"
        );
        // Factors finite and > 0: the core's rule and message.
        for bad in [0.0, -1.0, f32::NAN, f32::INFINITY] {
            let e = err(
                &s,
                &Loaded {
                    q_descale: floats(&[2], &[1.0, bad]),
                    ..x.clone()
                },
            );
            assert!(e.contains("q_descale"), "{bad}: {e}");
        }
        // Not an e4m3 value: nothing is quantized for the user.
        let mut y = x.clone();
        y.q[[0, 1, 0, 2]] = 0.1;
        let e = err(&s, &y);
        assert!(
            e.contains("--q: element") && e.contains("not an e4m3 value"),
            "{e}"
        );
        y.q[[0, 1, 0, 2]] = f32::NAN;
        assert!(err(&s, &y).contains("--q: element"));
    }

    #[test]
    fn e4m3_q_flags_are_checked_from_the_flags_alone() {
        let all = Given {
            k_descale: true,
            v_descale: true,
            q_descale: true,
            ..Given::default()
        };
        let q8 = |s: Settings| Settings {
            q_dtype: Some(KvDtype::E4m3),
            ..s
        };
        check_combination(&q8(e4m3(bshd())), &all).unwrap();
        let e = check_combination(
            &q8(bshd()),
            &Given {
                k_descale: false,
                v_descale: false,
                ..all
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("--q-dtype e4m3 needs --kv-dtype e4m3"), "{e}");
        let e = check_combination(
            &q8(e4m3(bshd())),
            &Given {
                q_descale: false,
                ..all
            },
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("needs --q-descale"), "{e}");
        let e = check_combination(&e4m3(bshd()), &all)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--q-descale needs --q-dtype e4m3"), "{e}");
    }

    #[test]
    fn the_layout_flag_takes_thd() {
        assert_eq!("thd".parse::<RunLayout>(), Ok(RunLayout::Thd));
        assert_eq!(
            "BHSD".parse::<RunLayout>(),
            Ok(RunLayout::Dense(Layout::Bhsd))
        );
        assert!("sbhd"
            .parse::<RunLayout>()
            .unwrap_err()
            .contains("bshd, bhsd or thd"));
    }
}
