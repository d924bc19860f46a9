//! The inference-mode suites of `bench-all` (`--suite varlen | paged | window`, issue 11): what
//! each suite builds (problems, per-sequence lengths and tables, all drawn from `--seed`), the
//! FLOPs each row is credited with (only the (query, key) pairs the masks let through), the
//! comparisons with their targets, and the report and its tables. Nothing here touches a GPU;
//! `modes_gpu` times the problems.
//!
//! - varlen: 16 packed sequences (lengths in 128..=4096), causal, against a dense causal batch of
//!   the same real FLOPs (B = 16, S_eq with 16·S_eq² ≈ Σ len²) timed on the same generation, and
//!   against the peers on the padded batch (B = 16, S = max len): what a user without varlen runs.
//! - paged: a KV cache of capacity 8192 (B = 8, decode Sq = 1 and chunked prefill Sq = 128) and a
//!   compute-bound prefill (B = 4, Sq = Sk = 4096), contiguous against paged at block sizes 16,
//!   64 and 256 with shuffled block tables, on the same keys and values.
//! - window: a sliding window of 4096 at 32k tokens against the full causal run and against a
//!   dense non-causal run with Sk = 4096 (the same number of visible keys per query).
//!
//! `--suite decode` builds its plan in `bench::decode` from the pieces here (`cache_case_heads`,
//! `dense_case_heads`) and adds its own part to the report ([`ModeReport::decode`]).

use flashcore::{AttentionProblem, DType, KvStorage, Layout, Modes};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::decode::DecodeInfo;
use super::report::{
    cell_within, fmt_us, peers_line, DeviceSummary, Outcome, PeerStatus, Settings, Source, Timing,
};
use super::suite::{dtype_name, Suite};
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

fn cmp(
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

fn base_problem(batch: usize, seq_q: usize, seq_k: usize, causal: bool) -> AttentionProblem {
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

fn dense_draw(p: &AttentionProblem) -> Draw {
    Draw::lengths(vec![p.seq_q; p.batch], vec![p.seq_k; p.batch])
}

fn case(key: &str, label: String, problem: AttentionProblem, draw: Draw) -> Case {
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

fn heads_text() -> String {
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

/// A KV-cache case: Q dense `[B, Sq, Hq, D]`, the cache of `capacity` rows per sequence with
/// `used` rows valid, contiguous or paged through a shuffled table drawn from `seed`.
pub fn cache_case(
    key: &str,
    seq_q: usize,
    capacity: usize,
    used: &[usize],
    causal: bool,
    kv: KvKind,
    seed: u64,
) -> Case {
    cache_case_heads(key, Heads::SUITES, seq_q, capacity, used, causal, kv, seed)
}

/// [`cache_case`] with other heads than the suites' 32/8/128.
#[allow(clippy::too_many_arguments)]
pub fn cache_case_heads(
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

fn peer(key: &str, label: &str, shape: PeerShape, flops: f64) -> PeerCase {
    PeerCase {
        key: key.into(),
        label: label.into(),
        shape,
        flops,
    }
}

fn peer_shape(batch: usize, seq: usize, seq_k: usize, causal: bool) -> PeerShape {
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
fn same_problem_peer(c: &Case) -> PeerCase {
    let p = &c.problem;
    let shape = peer_shape(p.batch, p.seq_q, p.seq_k, p.causal);
    peer(&c.key, &c.label, shape, c.flops)
}

/// What `--suite` runs, deterministic in `seed`.
pub fn plan(suite: Suite, seed: u64) -> SuitePlan {
    match suite {
        Suite::Varlen => varlen_plan(seed),
        Suite::Paged => paged_plan(seed),
        Suite::Window => window_plan(),
        Suite::Decode => super::decode::plan(seed, false),
        Suite::Mission | Suite::Ladder | Suite::Full => SuitePlan {
            suite,
            cases: vec![],
            peers: vec![],
            comparisons: vec![],
            notes: vec![],
        },
    }
}

fn varlen_plan(seed: u64) -> SuitePlan {
    let lens = varlen_lengths(seed);
    let max = lens.iter().copied().max().unwrap_or(0);
    let seq_eq = s_eq(&lens);
    let varlen = varlen_case("varlen", &lens, true);
    let dense = dense_case("dense-eq", VARLEN_SEQS, seq_eq, seq_eq, true, None);
    // Diagnostic: the varlen path with every sequence S_eq long. Against dense-eq it isolates the
    // cost of the varlen machinery (tables, packed rows, modes build) from that of the length mix
    // (imbalance, the tail of the last wave).
    let uniform = varlen_case("varlen-uniform", &[seq_eq; VARLEN_SEQS], true);
    let padded = peer(
        "padded",
        &format!(
            "{}; padded to max len (TFLOP/s on the varlen batch's real FLOPs)",
            peer_shape(VARLEN_SEQS, max, max, true).label()
        ),
        peer_shape(VARLEN_SEQS, max, max, true),
        varlen.flops,
    );
    let sum_sq: usize = lens.iter().map(|l| l * l).sum();
    let notes = vec![
        format!("lengths (seed {seed:#x}): {lens:?}"),
        format!(
            "Σ len = {}, Σ len² = {sum_sq}, max = {max}; S_eq = {seq_eq} (16·S_eq² = {}, rounded to 128)",
            lens.iter().sum::<usize>(),
            VARLEN_SEQS * seq_eq * seq_eq
        ),
        "FLOPs: 4·D·Hq per visible (query, key) pair, summed over the sequences (causal: len·(len+1)/2 pairs each)".into(),
        "padded: the peers on B=16, S=max len, causal: what a user without varlen runs; the ratio is their time over flashcore's varlen time".into(),
        "peers with GQA: SDPA enable_gqa=True, or K/V repeated outside the timed calls where a backend refuses it (its rows say so)".into(),
    ];
    let comparisons = vec![
        cmp(
            "varlen TFLOP/s / dense TFLOP/s at equal real FLOPs",
            ("varlen", Side::This),
            ("dense-eq", Side::This),
            Measure::Rate,
            Some(Target::AtLeast(0.95)),
        ),
        cmp(
            "varlen with every length S_eq / dense (the machinery's cost, without the length mix)",
            ("varlen-uniform", Side::This),
            ("dense-eq", Side::This),
            Measure::Rate,
            None,
        ),
        cmp(
            "best peer on the padded batch: its time / varlen time",
            ("padded", Side::BestPeer),
            ("varlen", Side::This),
            Measure::Time,
            None,
        ),
        cmp(
            "best peer on the dense batch of equal FLOPs: its time / flashcore's",
            ("dense-eq", Side::BestPeer),
            ("dense-eq", Side::This),
            Measure::Time,
            None,
        ),
    ];
    SuitePlan {
        suite: Suite::Varlen,
        peers: vec![padded, same_problem_peer(&dense)],
        cases: vec![varlen, uniform, dense],
        comparisons,
        notes,
    }
}

fn paged_plan(seed: u64) -> SuitePlan {
    let mut cases = Vec::new();
    let mut peers = Vec::new();
    let mut comparisons = Vec::new();
    let groups: [(&str, usize, usize, usize, Vec<usize>); 3] = [
        (
            "decode",
            CACHE_BATCH,
            1,
            CACHE_CAPACITY,
            cache_used(CACHE_BATCH, CACHE_CAPACITY, seed),
        ),
        (
            "chunk",
            CACHE_BATCH,
            128,
            CACHE_CAPACITY,
            cache_used(CACHE_BATCH, CACHE_CAPACITY, seed ^ 1),
        ),
        (
            "prefill",
            PREFILL_BATCH,
            PREFILL_SEQ,
            PREFILL_SEQ,
            vec![PREFILL_SEQ; PREFILL_BATCH],
        ),
    ];
    for (name, batch, sq, cap, used) in groups {
        let base = format!("{name}/contig");
        cases.push(cache_case(
            &base,
            sq,
            cap,
            &used,
            true,
            KvKind::Contiguous,
            seed,
        ));
        for bs in BLOCK_SIZES {
            let key = format!("{name}/paged-{bs}");
            let mut c = cache_case(
                &key,
                sq,
                cap,
                &used,
                true,
                KvKind::Paged { block_size: bs },
                seed,
            );
            c.data_from = Some(base.clone());
            cases.push(c);
            comparisons.push(cmp(
                &format!("{name}: paged block {bs} time / contiguous time"),
                (&key, Side::This),
                (&base, Side::This),
                Measure::Time,
                Some(Target::AtMost(if bs >= 64 { 1.05 } else { 1.15 })),
            ));
        }
        // The peers on a dense cache: the same problem for the prefill (every row used, square,
        // causal); for decode and chunks SDPA cannot take seqused_k nor a bottom-right causal
        // mask, so it runs the full capacity without a mask: a reference, not the same problem.
        let reference = if sq == cap {
            peer(
                &format!("{name}/sdpa"),
                &format!(
                    "{}; the same problem on a dense cache",
                    peer_shape(batch, sq, cap, true).label()
                ),
                peer_shape(batch, sq, cap, true),
                cases.last().map(|c: &Case| c.flops).unwrap_or(0.0),
            )
        } else {
            let shape = peer_shape(batch, sq, cap, false);
            peer(
                &format!("{name}/sdpa"),
                &format!(
                    "{}; reference only: dense cache at full capacity, no mask (TFLOP/s on its own FLOPs)",
                    shape.label()
                ),
                shape,
                shape.dense_flops(),
            )
        };
        comparisons.push(cmp(
            &format!("{name}: best peer ({name}/sdpa) time / flashcore contiguous time"),
            (&reference.key.clone(), Side::BestPeer),
            (&base, Side::This),
            Measure::Time,
            None,
        ));
        peers.push(reference);
    }
    let notes = vec![
        format!(
            "seqused_k per sequence = capacity - r, r drawn in 0..{CACHE_SLACK} (seed {seed:#x}); block tables are shuffled permutations of a pool with {SPARE_BLOCKS} spare blocks; paged and contiguous hold the same keys and values"
        ),
        "decode (Sq=1) rows show the paged overhead only: decode speed itself is a later issue (no split-K tuning here)".into(),
        "no torch kernel takes a paged cache: the paged comparison is flashcore paged against flashcore contiguous; the SDPA rows time a dense cache (see each row)".into(),
    ];
    SuitePlan {
        suite: Suite::Paged,
        cases,
        peers,
        comparisons,
        notes,
    }
}

fn window_plan() -> SuitePlan {
    let window = dense_case("window", 1, WINDOW_SEQ, WINDOW_SEQ, true, Some(WINDOW_LEFT));
    let full = dense_case("causal-32k", 1, WINDOW_SEQ, WINDOW_SEQ, true, None);
    let band = dense_case("dense-sk4096", 1, WINDOW_SEQ, WINDOW_LEFT, false, None);
    let comparisons = vec![
        cmp(
            "window time / dense Sq=32768 Sk=4096 time (same keys per query)",
            ("window", Side::This),
            ("dense-sk4096", Side::This),
            Measure::Time,
            Some(Target::AtMost(1.2)),
        ),
        cmp(
            "window time / full causal 32k time (the tile-level skip)",
            ("window", Side::This),
            ("causal-32k", Side::This),
            Measure::Time,
            None,
        ),
        cmp(
            "best peer on full causal 32k: its time / flashcore's",
            ("causal-32k", Side::BestPeer),
            ("causal-32k", Side::This),
            Measure::Time,
            None,
        ),
        cmp(
            "best peer on dense Sk=4096: its time / flashcore's",
            ("dense-sk4096", Side::BestPeer),
            ("dense-sk4096", Side::This),
            Measure::Time,
            None,
        ),
    ];
    let notes = vec![
        "no peer runs the window natively: torch SDPA has sliding windows only through an explicit mask (not a fair peer), and FA3's window is not available here; the peers run the two dense comparison problems".into(),
        format!(
            "real FLOPs: the window row counts the {} visible pairs per head (row i sees min(i, {WINDOW_LEFT}) + 1 keys)",
            visible_pairs(WINDOW_SEQ, WINDOW_SEQ, true, Some(WINDOW_LEFT), None)
        ),
    ];
    SuitePlan {
        suite: Suite::Window,
        peers: vec![same_problem_peer(&full), same_problem_peer(&band)],
        cases: vec![window, full, band],
        comparisons,
        notes,
    }
}

/// A case as the report keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaseInfo {
    pub key: String,
    pub label: String,
    pub flops: f64,
}

/// One timed (or not) implementation on one case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModeRow {
    pub case: String,
    pub implementation: String,
    pub source: Source,
    pub outcome: Outcome,
}

impl ModeRow {
    pub fn timing(&self) -> Option<&Timing> {
        match &self.outcome {
            Outcome::Timed(t) => Some(t),
            _ => None,
        }
    }
}

/// What a mode suite measured (`bench-<suite>.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModeReport {
    pub suite: Suite,
    pub device: DeviceSummary,
    pub settings: Settings,
    pub peers: PeerStatus,
    pub notes: Vec<String>,
    pub cases: Vec<CaseInfo>,
    pub rows: Vec<ModeRow>,
    pub comparisons: Vec<Comparison>,
    /// The decode suite's rows, copy ceilings and anchors (`bench::decode`); absent elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode: Option<DecodeInfo>,
}

/// One evaluated comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluated {
    pub name: String,
    pub implementation: String,
    /// The peer a best-peer comparison took.
    pub peer: Option<String>,
    pub value: Option<f64>,
    pub target: Option<Target>,
    /// Why there is no value.
    pub missing: Option<String>,
}

impl ModeReport {
    /// Cases in report order, with the peer-only ones after the flashcore ones.
    pub fn case_keys(&self) -> Vec<String> {
        let mut v: Vec<String> = self.cases.iter().map(|c| c.key.clone()).collect();
        for r in &self.rows {
            if !v.contains(&r.case) {
                v.push(r.case.clone());
            }
        }
        v
    }

    fn side(&self, case: &str, side: Side, implementation: &str) -> Result<&ModeRow, String> {
        let rows = self.rows.iter().filter(|r| r.case == case);
        match side {
            Side::This => {
                let r = rows
                    .into_iter()
                    .find(|r| r.source == Source::Flashcore && r.implementation == implementation)
                    .ok_or_else(|| format!("{case}: no {implementation} row"))?;
                if r.timing().is_some() {
                    Ok(r)
                } else {
                    Err(format!("{case}: {}", outcome_text(&r.outcome)))
                }
            }
            Side::BestPeer => rows
                .filter(|r| r.source != Source::Flashcore)
                .filter_map(|r| r.timing().map(|t| (r, t.us)))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(r, _)| r)
                .ok_or_else(|| format!("{case}: no peer time")),
        }
    }

    /// Every comparison for every flashcore generation that has a row in one of its cases.
    pub fn evaluate(&self) -> Vec<Evaluated> {
        let mut impls: Vec<String> = Vec::new();
        for r in self.rows.iter().filter(|r| r.source == Source::Flashcore) {
            if !impls.contains(&r.implementation) {
                impls.push(r.implementation.clone());
            }
        }
        let mut out = Vec::new();
        for c in &self.comparisons {
            for imp in &impls {
                let this_cases = [&c.num, &c.den]
                    .into_iter()
                    .filter(|(_, s)| *s == Side::This)
                    .map(|(k, _)| k);
                let has_row = this_cases.clone().any(|k| {
                    self.rows.iter().any(|r| {
                        r.case == *k && r.source == Source::Flashcore && r.implementation == *imp
                    })
                });
                if !has_row {
                    continue;
                }
                let sides = self
                    .side(&c.num.0, c.num.1, imp)
                    .and_then(|n| Ok((n, self.side(&c.den.0, c.den.1, imp)?)));
                let peer = sides.as_ref().ok().and_then(|(n, d)| {
                    [n, d]
                        .into_iter()
                        .find(|r| r.source != Source::Flashcore)
                        .map(|r| r.implementation.clone())
                });
                let value = sides.map(|(n, d)| {
                    let (n, d) = (n.timing().unwrap(), d.timing().unwrap());
                    match c.measure {
                        Measure::Time => n.us / d.us,
                        Measure::Rate => n.tflops / d.tflops,
                    }
                });
                out.push(Evaluated {
                    name: c.name.clone(),
                    implementation: imp.clone(),
                    peer,
                    value: value.as_ref().ok().copied(),
                    target: c.target,
                    missing: value.err(),
                });
            }
        }
        out
    }
}

fn outcome_text(o: &Outcome) -> String {
    match o {
        Outcome::Timed(_) => "timed".into(),
        Outcome::Wrong { message } => format!("WRONG: {message}"),
        Outcome::Unsupported { reason } => format!("unsupported: {reason}"),
        Outcome::Error { message } => format!("error: {message}"),
        Outcome::Skipped { reason } => format!("skipped: {reason}"),
    }
}

fn cell(s: &str) -> String {
    cell_within(s, 200)
}

/// The comparisons: one line per (comparison, generation), value against target.
pub fn render_comparisons(r: &ModeReport) -> String {
    let mut out = String::from("| comparison | implementation | value | target | met |\n");
    out.push_str("|---|---|---:|---|---|\n");
    for e in r.evaluate() {
        let (value, met) = match e.value {
            Some(v) => (
                format!("{v:.3}"),
                match e.target {
                    Some(t) if t.met(v) => "yes".to_string(),
                    Some(_) => "NO".to_string(),
                    None => "—".to_string(),
                },
            ),
            None => (
                "—".into(),
                format!("— ({})", e.missing.as_deref().unwrap_or("")),
            ),
        };
        out.push_str(&format!(
            "| {} | {} | {value} | {} | {} |\n",
            cell(&e.name),
            cell(&match &e.peer {
                Some(p) => format!("{} (peer: {p})", e.implementation),
                None => e.implementation.clone(),
            }),
            e.target.map_or("—".into(), |t| t.text()),
            cell(&met)
        ));
    }
    out
}

/// Every row: per case, the flashcore generations then the peers.
pub fn render_rows(r: &ModeReport) -> String {
    let mut out = String::from(
        "| case | implementation | method | µs | TFLOP/s (real FLOPs) | eager µs | check / note |\n",
    );
    out.push_str("|---|---|---|---:|---:|---:|---|\n");
    match &r.peers {
        PeerStatus::Missing { reason } => out.push_str(&format!(
            "| — | peers | — | — | — | — | no peer rows: {} |\n",
            cell(reason)
        )),
        PeerStatus::Off => {
            out.push_str("| — | peers | — | — | — | — | no peer rows: --no-peers |\n")
        }
        PeerStatus::Ran { .. } => {}
    }
    for key in r.case_keys() {
        let ours = r
            .rows
            .iter()
            .filter(|x| x.case == key && x.source == Source::Flashcore);
        let theirs = r
            .rows
            .iter()
            .filter(|x| x.case == key && x.source != Source::Flashcore);
        for row in ours.chain(theirs) {
            let lead = format!("| {} | {} |", cell(&key), cell(&row.implementation));
            match &row.outcome {
                Outcome::Timed(t) => {
                    let note: Vec<&str> =
                        t.check.iter().chain(&t.note).map(String::as_str).collect();
                    out.push_str(&format!(
                        "{lead} {} | {} | {:.1} | {} | {} |\n",
                        t.method.name(),
                        fmt_us(t.us),
                        t.tflops,
                        t.eager_us.map(fmt_us).unwrap_or_else(|| "—".into()),
                        cell(&note.join("; "))
                    ));
                }
                other => out.push_str(&format!(
                    "{lead} — | — | — | — | {} |\n",
                    cell(&outcome_text(other))
                )),
            }
        }
    }
    out
}

/// The cases: key, problem, real FLOPs.
pub fn render_cases(r: &ModeReport) -> String {
    let mut out = String::from("| case | problem | real GFLOP |\n|---|---|---:|\n");
    for c in &r.cases {
        out.push_str(&format!(
            "| {} | {} | {:.1} |\n",
            cell(&c.key),
            cell(&c.label),
            c.flops / 1e9
        ));
    }
    out
}

pub fn render_header(r: &ModeReport) -> String {
    let d = &r.device;
    let s = &r.settings;
    let mut out = format!(
        "device: {} (cc {}, {} SMs, L2 {:.1} MiB)\n\n",
        d.name,
        d.compute_capability,
        d.sm_count,
        d.l2_bytes as f64 / (1 << 20) as f64
    );
    out.push_str(&peers_line(&r.peers));
    out.push_str(&format!(
        "method: the dense bench's: CUDA events around back-to-back calls, >= {} ms per sample, median of {} samples, \
         inputs rotated over sets whose bytes exceed 2x L2; {} as CUDA-graph replays of >= {} calls. \
         Each flashcore row is checked against the oracle first (each sequence judged alone, on sampled rows; \
         check column: error ratio, 1.0 is the limit); a wrong one gets no number. TFLOP/s count only the pairs the masks let through.{}\n\n",
        s.sample_ms,
        s.repeats,
        if s.graph_threshold_us >= GRAPH_ALWAYS_US {
            "every call also".to_string()
        } else {
            format!("calls under {} µs also", s.graph_threshold_us)
        },
        s.graph_calls,
        if s.quick { " QUICK MODE: smoke numbers only." } else { "" }
    ));
    for n in &r.notes {
        out.push_str(&format!("- {n}\n"));
    }
    out.push_str(&format!("\ncommand: `{}`\n", s.command));
    out
}

pub fn suite_name(s: Suite) -> &'static str {
    match s {
        Suite::Mission => "mission",
        Suite::Ladder => "ladder",
        Suite::Full => "full",
        Suite::Varlen => "varlen",
        Suite::Paged => "paged",
        Suite::Window => "window",
        Suite::Decode => "decode",
    }
}

pub fn render_markdown(r: &ModeReport) -> String {
    // The decode suite's own table holds its comparisons (and its two targets).
    let (title, middle) = match &r.decode {
        Some(d) => ("Decode", super::decode::render(r, d)),
        None => ("Comparisons", render_comparisons(r)),
    };
    format!(
        "# flashcore bench-all --suite {}\n\n{}\n## Cases\n\n{}\n## {title}\n\n{middle}\n## All rows\n\n{}",
        suite_name(r.suite),
        render_header(r),
        render_cases(r),
        render_rows(r)
    )
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::bench::report::Method;

    #[test]
    fn pairs_follow_the_masks() {
        // Brute force over the definition in docs/MODES.md.
        let brute = |lq: usize, lk: usize, causal: bool, wl: Option<usize>, wr: Option<usize>| {
            let off = lk as i64 - lq as i64;
            let mut n = 0u64;
            for i in 0..lq as i64 {
                for j in 0..lk as i64 {
                    let ok = wl.is_none_or(|w| j >= i + off - w as i64)
                        && wr.is_none_or(|w| j <= i + off + w as i64)
                        && (!causal || j <= i + off);
                    n += ok as u64;
                }
            }
            n
        };
        for (lq, lk) in [
            (1, 1),
            (5, 5),
            (7, 3),
            (3, 9),
            (1, 100),
            (128, 300),
            (64, 0),
        ] {
            for causal in [false, true] {
                for wl in [None, Some(0), Some(2), Some(50)] {
                    for wr in [None, Some(0), Some(3)] {
                        assert_eq!(
                            visible_pairs(lq, lk, causal, wl, wr),
                            brute(lq, lk, causal, wl, wr),
                            "{lq} {lk} {causal} {wl:?} {wr:?}"
                        );
                    }
                }
            }
        }
        assert_eq!(visible_pairs(4096, 4096, true, None, None), 4096 * 4097 / 2);
        assert_eq!(visible_pairs(32768, 4096, false, None, None), 32768 * 4096);
    }

    #[test]
    fn varlen_lengths_are_seeded_and_in_range() {
        let a = varlen_lengths(0x5eed);
        assert_eq!(a, varlen_lengths(0x5eed));
        assert_ne!(a, varlen_lengths(1));
        assert_eq!(a.len(), 16);
        assert!(a.iter().all(|&l| (128..=4096).contains(&l)), "{a:?}");
    }

    #[test]
    fn s_eq_matches_the_sum_of_squares() {
        assert_eq!(s_eq(&[1024; 16]), 1024);
        // Σ len² = 4·4096² + 12·0... : 16·S² = 4·4096² → S = 2048.
        let mut v = vec![4096; 4];
        v.extend([1; 12]);
        assert_eq!(s_eq(&v), 2048);
        assert_eq!(s_eq(&[100, 100]), 128);
        let lens = varlen_lengths(0x5eed);
        let s = s_eq(&lens);
        assert_eq!(s % 128, 0);
        let sum_sq: f64 = lens.iter().map(|&l| (l * l) as f64).sum();
        let exact = (sum_sq / 16.0).sqrt();
        assert!((s as f64 - exact).abs() <= 64.0, "{s} vs {exact}");
    }

    #[test]
    fn real_flops_count_causal_pairs_per_sequence() {
        let lens = [128, 300, 4096];
        let c = varlen_case("v", &lens, true);
        let pairs: u64 = lens.iter().map(|&l| (l * (l + 1) / 2) as u64).sum();
        assert_eq!(c.flops, 4.0 * 128.0 * 32.0 * pairs as f64);
        let d = dense_case("d", 16, 2048, 2048, true, None);
        assert_eq!(d.flops, 4.0 * 128.0 * 32.0 * 16.0 * (2048.0 * 2049.0 / 2.0));
        // Within 0.05% of the usual S²/2 count at this size.
        assert!((d.flops / d.problem.flops() - 1.0).abs() < 5e-4);
        let n = dense_case("n", 1, 32768, 4096, false, None);
        assert_eq!(n.flops, n.problem.flops());
    }

    #[test]
    fn every_suite_builds_valid_deterministic_problems() {
        for suite in [Suite::Varlen, Suite::Paged, Suite::Window] {
            let a = plan(suite, 0x5eed);
            let b = plan(suite, 0x5eed);
            assert_eq!(a.cases.len(), b.cases.len());
            for (x, y) in a.cases.iter().zip(&b.cases) {
                assert_eq!((&x.key, &x.problem, &x.draw), (&y.key, &y.problem, &y.draw));
                x.problem
                    .validate()
                    .unwrap_or_else(|e| panic!("{}: {e}", x.key));
                x.draw
                    .host_tables()
                    .validate(&x.problem)
                    .unwrap_or_else(|e| panic!("{}: {e}", x.key));
                assert!(x.flops > 0.0, "{}", x.key);
                if let Some(base) = &x.data_from {
                    let base = a.cases.iter().find(|c| &c.key == base).unwrap();
                    assert_eq!(base.draw.len_k, x.draw.len_k);
                    assert_eq!(base.flops, x.flops);
                }
            }
            let keys: Vec<&String> = a.cases.iter().map(|c| &c.key).collect();
            for c in &a.comparisons {
                for (k, side) in [&c.num, &c.den] {
                    let known = match side {
                        Side::This => keys.contains(&k),
                        Side::BestPeer => a.peers.iter().any(|p| &p.key == k),
                    };
                    assert!(known, "{suite:?}: comparison '{}' names {k}", c.name);
                }
            }
            for p in &a.peers {
                // Causal peers are square (SDPA's is_causal is top-left aligned).
                assert!(!p.shape.causal || p.shape.seq == p.shape.seq_k, "{}", p.key);
                assert_eq!(PeerShape::from_json(&p.shape.to_json()), Some(p.shape));
            }
        }
    }

    #[test]
    fn the_suites_have_the_issues_shapes() {
        let v = plan(Suite::Varlen, 0x5eed);
        let lens = varlen_lengths(0x5eed);
        let p = &v.cases[0].problem;
        assert_eq!(
            (p.batch, p.heads_q, p.heads_kv, p.head_dim),
            (16, 32, 8, 128)
        );
        assert!(p.causal && p.dtype == DType::Bf16);
        assert_eq!(p.modes.packed_q, Some(lens.iter().sum()));
        assert_eq!(v.cases[0].draw.cu_seqlens_q, v.cases[0].draw.cu_seqlens_k);
        let d = &v
            .cases
            .iter()
            .find(|c| c.key == "dense-eq")
            .unwrap()
            .problem;
        assert_eq!((d.batch, d.seq_q, d.seq_k), (16, s_eq(&lens), s_eq(&lens)));
        assert!(d.modes.is_dense());
        let padded = &v.peers[0];
        assert_eq!(padded.key, "padded");
        let max = *lens.iter().max().unwrap();
        assert_eq!((padded.shape.batch, padded.shape.seq), (16, max));
        assert!(v.notes[0].contains(&format!("{lens:?}")));

        let pg = plan(Suite::Paged, 0x5eed);
        let keys: Vec<&str> = pg.cases.iter().map(|c| c.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "decode/contig",
                "decode/paged-16",
                "decode/paged-64",
                "decode/paged-256",
                "chunk/contig",
                "chunk/paged-16",
                "chunk/paged-64",
                "chunk/paged-256",
                "prefill/contig",
                "prefill/paged-16",
                "prefill/paged-64",
                "prefill/paged-256",
            ]
        );
        let chunk = &pg.cases[5];
        assert_eq!((chunk.problem.batch, chunk.problem.seq_q), (8, 128));
        assert!(chunk.draw.used.iter().all(|&u| u <= 8192 && u > 8192 - 256));
        let KvStorage::Paged {
            num_blocks,
            max_blocks_per_seq,
            block_size,
        } = chunk.problem.modes.kv
        else {
            panic!("paged")
        };
        assert_eq!((block_size, max_blocks_per_seq), (16, 512));
        let table = chunk.draw.block_table.as_ref().unwrap();
        let mut seen = table.clone();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), table.len(), "no block owned twice");
        assert!(table.iter().all(|&b| (b as usize) < num_blocks));
        assert_ne!(table[..8], [0, 1, 2, 3, 4, 5, 6, 7], "shuffled");
        let targets: Vec<Option<Target>> = pg
            .comparisons
            .iter()
            .filter(|c| c.name.starts_with("chunk: paged"))
            .map(|c| c.target)
            .collect();
        assert_eq!(
            targets,
            [
                Some(Target::AtMost(1.15)),
                Some(Target::AtMost(1.05)),
                Some(Target::AtMost(1.05))
            ]
        );

        let w = plan(Suite::Window, 0);
        let win = &w.cases[0].problem;
        assert_eq!(
            (win.seq_q, win.seq_k, win.modes.window_left),
            (32768, 32768, Some(4096))
        );
        assert!(win.causal);
        let band = &w.cases[2].problem;
        assert_eq!((band.seq_q, band.seq_k, band.causal), (32768, 4096, false));
        // The window sees nearly the band's keys: within 7% of its FLOPs.
        assert!((w.cases[0].flops / w.cases[2].flops - 1.0).abs() < 0.07);
    }

    fn timed(case: &str, imp: &str, source: Source, flops: f64, us: f64) -> ModeRow {
        let mut t = Timing::from_flops(flops, Some(us), None).unwrap();
        t.check = (source == Source::Flashcore).then(|| "ok 0.40 (512 rows)".to_string());
        t.repeats = 15;
        ModeRow {
            case: case.into(),
            implementation: imp.into(),
            source,
            outcome: Outcome::Timed(t),
        }
    }

    /// A varlen report with every kind of row.
    pub fn fixture() -> ModeReport {
        let p = plan(Suite::Varlen, 0x5eed);
        let case_flops = |key: &str| p.cases.iter().find(|c| c.key == key).unwrap().flops;
        let (fv, fd) = (case_flops("varlen"), case_flops("dense-eq"));
        let rows = vec![
            timed("varlen", "persistent-hopper", Source::Flashcore, fv, 1100.0),
            ModeRow {
                case: "varlen".into(),
                implementation: "scalar".into(),
                source: Source::Flashcore,
                outcome: Outcome::Unsupported {
                    reason: "modes: varlen is not implemented".into(),
                },
            },
            timed(
                "dense-eq",
                "persistent-hopper",
                Source::Flashcore,
                fd,
                980.0,
            ),
            ModeRow {
                case: "dense-eq".into(),
                implementation: "scalar".into(),
                source: Source::Flashcore,
                outcome: Outcome::Skipped {
                    reason: "--max-seconds-per-kernel (240 s) used up".into(),
                },
            },
            timed("padded", "sdpa_flash", Source::Peer, fv, 1500.0),
            timed("padded", "sdpa_cudnn", Source::Peer, fv, 1400.0),
            timed("dense-eq", "sdpa_cudnn", Source::Peer, fd, 1100.0),
        ];
        let mut cases: Vec<CaseInfo> = p
            .cases
            .iter()
            .map(|c| CaseInfo {
                key: c.key.clone(),
                label: c.label.clone(),
                flops: c.flops,
            })
            .collect();
        cases.push(CaseInfo {
            key: p.peers[0].key.clone(),
            label: p.peers[0].label.clone(),
            flops: p.peers[0].flops,
        });
        ModeReport {
            suite: Suite::Varlen,
            device: DeviceSummary {
                name: "NVIDIA H100 80GB HBM3".into(),
                compute_capability: "9.0".into(),
                sm_count: 132,
                l2_bytes: 50 << 20,
            },
            settings: Settings {
                layout: "bshd".into(),
                repeats: 15,
                sample_ms: 20.0,
                graph_threshold_us: 50.0,
                graph_calls: 50,
                check_rows: 512,
                max_seconds_per_shape: 2.0,
                quick: false,
                command: "xtask bench-all --suite varlen".into(),
            },
            peers: PeerStatus::Ran {
                device: "NVIDIA H100 80GB HBM3".into(),
                torch: "2.11.0+cu130".into(),
                cudnn: Some("91900".into()),
                skipped: vec![],
            },
            notes: p.notes.clone(),
            cases,
            rows,
            comparisons: p.comparisons.clone(),
            decode: None,
        }
    }

    #[test]
    fn comparisons_are_evaluated_per_generation() {
        let r = fixture();
        let e = r.evaluate();
        let hopper: Vec<&Evaluated> = e
            .iter()
            .filter(|x| x.implementation == "persistent-hopper")
            .collect();
        assert_eq!(hopper.len(), 4);
        let rate = hopper[0].value.unwrap();
        let fv = r.cases[0].flops / 1100.0;
        let dense = r.cases.iter().find(|c| c.key == "dense-eq").unwrap();
        let fd = dense.flops / 980.0;
        assert!((rate - fv / fd).abs() < 1e-12);
        assert!(
            (hopper[2].value.unwrap() - 1400.0 / 1100.0).abs() < 1e-12,
            "best peer / ours"
        );
        assert_eq!(hopper[2].peer.as_deref(), Some("sdpa_cudnn"));
        assert_eq!(hopper[0].peer, None);
        assert!(
            hopper[1].value.is_none(),
            "no varlen-uniform row in the fixture"
        );
        assert!((hopper[3].value.unwrap() - 1100.0 / 980.0).abs() < 1e-12);
        let scalar: Vec<&Evaluated> = e.iter().filter(|x| x.implementation == "scalar").collect();
        assert!(scalar.iter().all(|x| x.value.is_none()));
        assert!(scalar[0]
            .missing
            .as_deref()
            .unwrap()
            .contains("unsupported"));
        assert_eq!(r.rows[0].timing().unwrap().method, Method::Eager);
    }

    #[test]
    fn targets() {
        assert!(Target::AtMost(1.05).met(1.05) && !Target::AtMost(1.05).met(1.06));
        assert!(Target::AtLeast(0.95).met(0.96) && !Target::AtLeast(0.95).met(0.9));
        assert_eq!(Target::AtLeast(0.95).text(), "≥ 0.95");
    }

    #[test]
    fn mode_report_round_trips_through_json() {
        let r = fixture();
        let j = serde_json::to_string_pretty(&r).unwrap();
        assert_eq!(serde_json::from_str::<ModeReport>(&j).unwrap(), r);
    }

    #[test]
    fn mode_table_layout() {
        let md = render_markdown(&fixture());
        assert!(md.contains(
            "| varlen TFLOP/s / dense TFLOP/s at equal real FLOPs | persistent-hopper |"
        ));
        insta::assert_snapshot!("bench_varlen_table", md);
    }

    #[test]
    fn missing_peers_leave_one_line_and_no_peer_ratio() {
        let mut r = fixture();
        r.rows.retain(|x| x.source == Source::Flashcore);
        r.peers = PeerStatus::Missing {
            reason: "python3 -c 'import torch' failed".into(),
        };
        let t = render_rows(&r);
        assert_eq!(t.matches("no peer rows").count(), 1, "{t}");
        let c = render_comparisons(&r);
        assert!(c.contains("padded: no peer time"), "{c}");
    }
}
