//! What the mode suites are made of: the suites' constants, the FLOPs a row is credited with,
//! flashcore cases, peer problems, comparisons and the builders the suites (decode's too) use.

use flashcore::{AttentionProblem, DType, KvStorage, Layout, Modes};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::bench::suite::{dtype_name, Suite};
use crate::mode_case::Draw;

pub const HEADS_Q: usize = 32;
pub const HEADS_KV: usize = 8;
pub const HEAD_DIM: usize = 128;
pub const DTYPE: DType = DType::Bf16;

pub const VARLEN_SEQS: usize = 16;
pub const VARLEN_MIN: usize = 128;
pub const VARLEN_MAX: usize = 4096;

pub const CACHE_BATCH: usize = 8;
pub const CACHE_CAPACITY: usize = 8192;
/// seqused_k = capacity - r, r drawn in 0..CACHE_SLACK per sequence.
pub const CACHE_SLACK: usize = 256;
pub const PREFILL_BATCH: usize = 4;
pub const PREFILL_SEQ: usize = 4096;
pub const BLOCK_SIZES: [usize; 3] = [16, 64, 256];
/// Blocks in the pool beyond the ones the sequences own (pages may be anywhere).
pub const SPARE_BLOCKS: usize = 7;

/// A `--graph-threshold-us` at or above this (the decode suite's) times every call as graph
/// replays too.
pub const GRAPH_ALWAYS_US: f64 = 1e9;

pub const WINDOW_SEQ: usize = 32768;
pub const WINDOW_LEFT: usize = 4096;

/// (query, key) pairs row by row under the masks of `docs/MODES.md` (bottom-right aligned).
pub fn visible_pairs(
    len_q: usize,
    len_k: usize,
    causal: bool,
    window_left: Option<usize>,
    window_right: Option<usize>,
) -> u64 {
    let off = len_k as i64 - len_q as i64;
    // Causal is window_right = 0, whatever window_right says.
    let right = if causal { Some(0) } else { window_right };
    (0..len_q as i64)
        .map(|i| {
            let diag = i + off;
            let lo = window_left.map_or(0, |w| (diag - w as i64).max(0));
            let hi = right.map_or(len_k as i64 - 1, |w| {
                (diag + w as i64).min(len_k as i64 - 1)
            });
            (hi - lo + 1).max(0) as u64
        })
        .sum()
}

/// The FLOPs a call really does: 4·head_dim per visible (query, key) pair and query head, summed
/// over the sequences (what `AttentionProblem::flops` approximates for dense problems).
pub fn real_flops(p: &AttentionProblem, draw: &Draw) -> f64 {
    let pairs: u64 = (0..p.batch)
        .map(|b| {
            visible_pairs(
                draw.len_q[b],
                draw.len_k[b],
                p.causal,
                p.modes.window_left,
                p.modes.window_right,
            )
        })
        .sum();
    4.0 * p.head_dim as f64 * p.heads_q as f64 * pairs as f64
}

fn rng(seed: u64, salt: u64) -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(seed ^ salt)
}

/// The varlen suite's 16 sequence lengths, uniform in 128..=4096, from the seed.
pub fn varlen_lengths(seed: u64) -> Vec<usize> {
    let mut r = rng(seed, 0x7661_726c_656e);
    (0..VARLEN_SEQS)
        .map(|_| r.gen_range(VARLEN_MIN..=VARLEN_MAX))
        .collect()
}

/// The dense sequence length of the same real FLOPs: `n · S_eq² ≈ Σ len²`, rounded to a multiple
/// of 128 (at least 128).
pub fn s_eq(lens: &[usize]) -> usize {
    let sum_sq: f64 = lens.iter().map(|&l| (l as f64) * (l as f64)).sum();
    let s = (sum_sq / lens.len().max(1) as f64).sqrt();
    ((s / 128.0).round() as usize).max(1) * 128
}

/// Cache rows in use per sequence: `capacity - r`, r drawn in 0..CACHE_SLACK.
pub fn cache_used(batch: usize, capacity: usize, seed: u64) -> Vec<usize> {
    let mut r = rng(seed, 0x7573_6564 ^ capacity as u64);
    (0..batch)
        .map(|_| capacity - r.gen_range(0..CACHE_SLACK.min(capacity)))
        .collect()
}

/// A block table `[batch, max_blocks]` over a pool of `batch·max_blocks + SPARE_BLOCKS` blocks,
/// every block owned by at most one sequence, shuffled (pages anywhere, in any order). Returns
/// (table, num_blocks).
pub fn shuffled_table(batch: usize, max_blocks: usize, seed: u64) -> (Vec<i32>, usize) {
    let num_blocks = batch * max_blocks + SPARE_BLOCKS;
    let mut ids: Vec<i32> = (0..num_blocks as i32).collect();
    let mut r = rng(seed, 0x7061_6765 ^ max_blocks as u64);
    for i in (1..ids.len()).rev() {
        ids.swap(i, r.gen_range(0..=i));
    }
    ids.truncate(batch * max_blocks);
    (ids, num_blocks)
}

fn prefix_sums(lens: &[usize]) -> Vec<i32> {
    let mut cu = vec![0i32];
    for &l in lens {
        cu.push(cu.last().unwrap() + l as i32);
    }
    cu
}

/// How a cache case stores K and V.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvKind {
    Contiguous,
    Paged { block_size: usize },
}

/// One flashcore problem of a suite.
#[derive(Clone, Debug)]
pub struct Case {
    /// Short name, unique in the suite ("varlen", "chunk/paged-16", ...).
    pub key: String,
    /// The problem in words.
    pub label: String,
    pub problem: AttentionProblem,
    pub draw: Draw,
    /// Real FLOPs ([`real_flops`]).
    pub flops: f64,
    /// The case whose keys and values this one holds too (a paged copy of a contiguous cache):
    /// the runner reuses its inputs and oracle references, so the times compare on the same data.
    pub data_from: Option<String>,
}

/// A dense problem the peer script takes natively, B,H,S,D with GQA and seq_k.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerShape {
    pub batch: usize,
    pub heads: usize,
    pub heads_kv: usize,
    pub seq: usize,
    pub seq_k: usize,
    pub head_dim: usize,
    pub causal: bool,
    #[serde(with = "dtype_name")]
    pub dtype: DType,
}

impl PeerShape {
    pub fn to_json(self) -> serde_json::Value {
        serde_json::json!({
            "batch": self.batch,
            "heads": self.heads,
            "heads_kv": self.heads_kv,
            "seq": self.seq,
            "seq_k": self.seq_k,
            "head_dim": self.head_dim,
            "causal": self.causal,
            "dtype": self.dtype.name(),
        })
    }

    /// A row of the peer script's JSON, if it has every field.
    pub fn from_json(v: &serde_json::Value) -> Option<PeerShape> {
        let n = |k: &str| v.get(k)?.as_u64().map(|x| x as usize);
        let heads = n("heads")?;
        let seq = n("seq")?;
        Some(PeerShape {
            batch: n("batch")?,
            heads,
            heads_kv: n("heads_kv").unwrap_or(heads),
            seq,
            seq_k: n("seq_k").unwrap_or(seq),
            head_dim: n("head_dim")?,
            causal: v.get("causal")?.as_bool()?,
            dtype: v.get("dtype")?.as_str()?.parse().ok()?,
        })
    }

    /// 4·B·H·S·S_k·D, halved for causal (the peers' own count).
    pub fn dense_flops(&self) -> f64 {
        let f = 4.0
            * (self.batch * self.heads * self.head_dim) as f64
            * self.seq as f64
            * self.seq_k as f64;
        if self.causal {
            f / 2.0
        } else {
            f
        }
    }

    pub fn label(&self) -> String {
        format!(
            "B={} Hq={} Hkv={} Sq={} Sk={} D={} {}{}",
            self.batch,
            self.heads,
            self.heads_kv,
            self.seq,
            self.seq_k,
            self.head_dim,
            self.dtype,
            if self.causal { " causal" } else { "" }
        )
    }
}

/// A problem the peers run: under `key` (a flashcore case's key when they solve the same
/// problem, or a case of their own such as "padded").
#[derive(Clone, Debug, PartialEq)]
pub struct PeerCase {
    pub key: String,
    pub label: String,
    pub shape: PeerShape,
    /// FLOPs its TFLOP/s are counted on (the real FLOPs of the work it stands for).
    pub flops: f64,
}

/// Which row of a case a comparison takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// The flashcore generation the comparison row is about.
    This,
    /// The fastest peer.
    BestPeer,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// time(num) / time(den).
    Time,
    /// TFLOP/s(num) / TFLOP/s(den), each on its own real FLOPs.
    Rate,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    AtMost(f64),
    AtLeast(f64),
}

impl Target {
    pub fn met(self, x: f64) -> bool {
        match self {
            Target::AtMost(t) => x <= t,
            Target::AtLeast(t) => x >= t,
        }
    }
    pub fn text(self) -> String {
        match self {
            Target::AtMost(t) => format!("≤ {t:.2}"),
            Target::AtLeast(t) => format!("≥ {t:.2}"),
        }
    }
}

/// One comparison, evaluated per flashcore generation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub name: String,
    pub num: (String, Side),
    pub den: (String, Side),
    pub measure: Measure,
    pub target: Option<Target>,
}

pub(super) fn cmp(
    name: &str,
    num: (&str, Side),
    den: (&str, Side),
    measure: Measure,
    target: Option<Target>,
) -> Comparison {
    Comparison {
        name: name.into(),
        num: (num.0.into(), num.1),
        den: (den.0.into(), den.1),
        measure,
        target,
    }
}

/// Everything a mode suite runs.
#[derive(Clone, Debug)]
pub struct SuitePlan {
    pub suite: Suite,
    pub cases: Vec<Case>,
    pub peers: Vec<PeerCase>,
    pub comparisons: Vec<Comparison>,
    /// Printed before the run and kept in the report (lengths drawn, what is not compared).
    pub notes: Vec<String>,
}

pub(super) fn base_problem(
    batch: usize,
    seq_q: usize,
    seq_k: usize,
    causal: bool,
) -> AttentionProblem {
    heads_problem(Heads::SUITES, batch, seq_q, seq_k, causal)
}

/// Query heads, KV heads and head dimension of a problem (the mode suites all use
/// [`Heads::SUITES`]; the decode suite varies them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heads {
    pub q: usize,
    pub kv: usize,
    pub dim: usize,
}

impl Heads {
    /// Hq = 32, Hkv = 8, D = 128.
    pub const SUITES: Heads = Heads {
        q: HEADS_Q,
        kv: HEADS_KV,
        dim: HEAD_DIM,
    };

    fn text(self) -> String {
        format!("Hq={} Hkv={} D={} {DTYPE}", self.q, self.kv, self.dim)
    }
}

/// A bf16 problem in BSHD order with these heads.
pub fn heads_problem(
    heads: Heads,
    batch: usize,
    seq_q: usize,
    seq_k: usize,
    causal: bool,
) -> AttentionProblem {
    AttentionProblem::new(batch, heads.q, seq_q, heads.dim)
        .with_kv(heads.kv, seq_k)
        .with_dtype(DTYPE)
        .with_causal(causal)
        .with_layout(Layout::Bshd)
}

pub(super) fn dense_draw(p: &AttentionProblem) -> Draw {
    Draw::lengths(vec![p.seq_q; p.batch], vec![p.seq_k; p.batch])
}

pub(super) fn case(key: &str, label: String, problem: AttentionProblem, draw: Draw) -> Case {
    let flops = real_flops(&problem, &draw);
    Case {
        key: key.into(),
        label,
        problem,
        draw,
        flops,
        data_from: None,
    }
}

pub(super) fn heads_text() -> String {
    Heads::SUITES.text()
}

/// A dense (no tables) case: B, Sq, Sk, causal, optional left window.
pub fn dense_case(
    key: &str,
    batch: usize,
    seq_q: usize,
    seq_k: usize,
    causal: bool,
    window_left: Option<usize>,
) -> Case {
    let mut p = base_problem(batch, seq_q, seq_k, causal);
    p.modes.window_left = window_left;
    let d = dense_draw(&p);
    let label = format!(
        "B={batch} {} Sq={seq_q} Sk={seq_k}{}{}",
        heads_text(),
        if causal { " causal" } else { "" },
        window_left.map_or(String::new(), |w| format!(" window_left={w}"))
    );
    case(key, label, p, d)
}

/// A dense (no modes) non-windowed case with these heads: K and V `[B, Sk, Hkv, D]`, the same
/// memory as a contiguous cache of capacity Sk that is full.
pub fn dense_case_heads(
    key: &str,
    heads: Heads,
    batch: usize,
    seq_q: usize,
    seq_k: usize,
    causal: bool,
) -> Case {
    let p = heads_problem(heads, batch, seq_q, seq_k, causal);
    let d = dense_draw(&p);
    let label = format!(
        "B={batch} {} Sq={seq_q} Sk={seq_k}{}, dense K/V (no modes)",
        heads.text(),
        if causal { " causal" } else { "" }
    );
    case(key, label, p, d)
}

/// The packed varlen case: Q, K, V `[total, heads, d]`, cu_seqlens_q = cu_seqlens_k.
pub fn varlen_case(key: &str, lens: &[usize], causal: bool) -> Case {
    let max = lens.iter().copied().max().unwrap_or(0);
    let total: usize = lens.iter().sum();
    let mut p = base_problem(lens.len(), max, max, causal);
    p.modes = Modes {
        packed_q: Some(total),
        kv: KvStorage::Packed { total_k: total },
        ..Modes::default()
    };
    let cu = prefix_sums(lens);
    let d = Draw {
        len_q: lens.to_vec(),
        len_k: lens.to_vec(),
        cu_seqlens_q: Some(cu.clone()),
        cu_seqlens_k: Some(cu),
        ..dense_draw(&p)
    };
    let label = format!(
        "{} seqs {} packed, total {total} tokens, max {max}{}",
        lens.len(),
        heads_text(),
        if causal { ", causal" } else { "" }
    );
    case(key, label, p, d)
}

/// A KV-cache case of these heads (the suites': [`Heads::SUITES`]): Q dense `[B, Sq, Hq, D]`,
/// the cache of `capacity` rows per sequence with `used` rows valid, contiguous or paged
/// through a shuffled table drawn from `seed`.
#[allow(clippy::too_many_arguments)]
pub fn cache_case(
    key: &str,
    heads: Heads,
    seq_q: usize,
    capacity: usize,
    used: &[usize],
    causal: bool,
    kv: KvKind,
    seed: u64,
) -> Case {
    let batch = used.len();
    let mut p = heads_problem(heads, batch, seq_q, capacity, causal);
    let mut d = Draw {
        len_k: used.to_vec(),
        used: used.to_vec(),
        seqused_k: Some(used.iter().map(|&u| u as i32).collect()),
        ..dense_draw(&p)
    };
    p.modes.seqused_k = true;
    let storage = match kv {
        KvKind::Paged { block_size } => {
            let max_blocks = capacity.div_ceil(block_size);
            // FLASHCORE_BENCH_PAGE_ORDER=in-order (a diagnostic): sequence b's pages are blocks
            // b·max_blocks.., in order, so the paged case reads the contiguous case's addresses.
            let in_order = std::env::var("FLASHCORE_BENCH_PAGE_ORDER").as_deref() == Ok("in-order");
            let (table, num_blocks) = if in_order {
                (
                    (0..(batch * max_blocks) as i32).collect(),
                    batch * max_blocks + SPARE_BLOCKS,
                )
            } else {
                shuffled_table(batch, max_blocks, seed)
            };
            p.modes.kv = KvStorage::Paged {
                num_blocks,
                block_size,
                max_blocks_per_seq: max_blocks,
            };
            p.seq_k = max_blocks * block_size;
            d.block_table = Some(table);
            d.num_blocks = num_blocks;
            let order = if in_order { "in order" } else { "shuffled" };
            format!("paged, block {block_size}, {num_blocks} blocks {order}")
        }
        _ => "contiguous".into(),
    };
    let (lo, hi) = (
        used.iter().min().copied().unwrap_or(0),
        used.iter().max().copied().unwrap_or(0),
    );
    let label = format!(
        "B={batch} {} Sq={seq_q}{}, cache {capacity} {storage}, seqused_k {lo}..={hi}",
        heads.text(),
        if causal { " causal" } else { "" }
    );
    case(key, label, p, d)
}

pub(super) fn peer(key: &str, label: &str, shape: PeerShape, flops: f64) -> PeerCase {
    PeerCase {
        key: key.into(),
        label: label.into(),
        shape,
        flops,
    }
}

pub(super) fn peer_shape(batch: usize, seq: usize, seq_k: usize, causal: bool) -> PeerShape {
    PeerShape {
        batch,
        heads: HEADS_Q,
        heads_kv: HEADS_KV,
        seq,
        seq_k,
        head_dim: HEAD_DIM,
        causal,
        dtype: DTYPE,
    }
}

/// The peers' version of a dense flashcore case (the same problem, natively).
pub(super) fn same_problem_peer(c: &Case) -> PeerCase {
    let p = &c.problem;
    let shape = peer_shape(p.batch, p.seq_q, p.seq_k, p.causal);
    peer(&c.key, &c.label, shape, c.flops)
}
