//! The decode suite of `bench-all` (`--suite decode`, issue 12): what it runs, the bandwidth
//! arithmetic (K/V bytes read, GB/s, percent of the copy ceiling, speed against the best peer),
//! the anchor file it cross-checks with, and its table. Nothing here touches a GPU; `modes_gpu`
//! times the cases, the copies and the peers.
//!
//! - Eight rows (B, Hq, Hkv, Sq, Sk, D), bf16, non-causal unless `--causal on`: decode (Sq = 1)
//!   from one long sequence to many short ones, GQA 4:1 and 8:1 and MHA, a chunked prefill
//!   (Sq = 128) and speculative decoding (Sq = 4).
//! - Each row on every flashcore generation three times: a contiguous cache (`seqused_k` = Sk for
//!   every sequence, capacity Sk), a paged cache (block 64, shuffled table: the `paged` suite's
//!   `cache_case`) holding the same keys and values, and the plain dense problem (no modes, the
//!   same memory as the full contiguous cache; no target, it shows what the modes cost).
//! - The peers (`torch_sdpa.py --decode`) run each row on contiguous K/V `[B, Hkv, Sk, D]`; the
//!   paged rows compare with the same peer numbers.
//! - A device-to-device copy of each row's K+V byte count is the measured ceiling: its HBM
//!   traffic, 2N / t (it reads N bytes and writes N; a read-only kernel can use all of it).
//! - A read probe (`kernels/bench_read_probe.cu`, a kernel that only reads) of the same bytes,
//!   timed as the copy is: N / t of a pure read stream, against which the peer target's GB/s is
//!   set (is ≥ 1.05× the best peer reachable at all where the peer already reads near the limit).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use flashcore::{DType, Layout};
use serde::{Deserialize, Serialize};

use super::bandwidth::{READ_PROBE_BLOCK, READ_PROBE_BLOCKS_PER_SM, READ_PROBE_UNROLL};
use super::modes::{
    cache_case_heads, dense_case_heads, Comparison, Heads, KvKind, Measure, ModeReport, PeerCase,
    PeerShape, Side, SuitePlan, Target, DTYPE,
};
use super::report::{cell_within, fmt_us, GemmPeak, Outcome, Source};
use super::suite::Suite;

/// One row of the suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeShape {
    pub batch: usize,
    pub heads_q: usize,
    pub heads_kv: usize,
    pub seq_q: usize,
    pub seq_k: usize,
    pub head_dim: usize,
    /// What the row stands for.
    pub what: &'static str,
}

const fn row(
    batch: usize,
    heads_q: usize,
    heads_kv: usize,
    seq_q: usize,
    seq_k: usize,
    what: &'static str,
) -> DecodeShape {
    DecodeShape {
        batch,
        heads_q,
        heads_kv,
        seq_q,
        seq_k,
        head_dim: 128,
        what,
    }
}

/// The issue's rows, in its order.
pub const ROWS: [DecodeShape; 8] = [
    row(1, 32, 8, 1, 32768, "decode, one long sequence"),
    row(8, 32, 8, 1, 8192, "decode"),
    row(32, 32, 8, 1, 4096, "decode"),
    row(64, 32, 8, 1, 2048, "decode, many short sequences"),
    row(16, 64, 8, 1, 8192, "decode, GQA 8:1"),
    row(8, 32, 32, 1, 8192, "decode, MHA"),
    row(4, 32, 8, 128, 8192, "chunked prefill"),
    row(8, 32, 8, 4, 8192, "speculative decoding"),
];

/// Page size of the paged cache.
pub const BLOCK_SIZE: usize = 64;
/// Rows with at least this much K/V (128 MiB) must reach [`CEILING_TARGET`] of the copy.
pub const BIG_KV_BYTES: u64 = 128 << 20;
/// Fraction of the copy ceiling the big rows must reach.
pub const CEILING_TARGET: f64 = 0.90;
/// Best peer time / flashcore time every row must reach, contiguous and paged.
pub const PEER_TARGET: f64 = 1.05;

/// How a flashcore case of a row stores K and V.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Storage {
    Contiguous,
    Paged,
    Dense,
    /// Dense K/V in the peers' layout, `[B, Hkv, Sk, D]`: a head's keys are contiguous, where
    /// the caches (and `Dense`) hold `[B, Sk, Hkv, D]` rows of all heads (a diagnostic: what the
    /// layout costs a bandwidth-bound row).
    DenseBhsd,
}

impl Storage {
    pub const ALL: [Storage; 4] = [
        Storage::Contiguous,
        Storage::Paged,
        Storage::Dense,
        Storage::DenseBhsd,
    ];

    /// The case key's suffix.
    pub fn suffix(self) -> String {
        match self {
            Storage::Contiguous => "contig".into(),
            Storage::Paged => format!("paged-{BLOCK_SIZE}"),
            Storage::Dense => "dense".into(),
            Storage::DenseBhsd => "dense-bhsd".into(),
        }
    }

    pub fn text(self) -> String {
        match self {
            Storage::Contiguous => "contiguous".into(),
            Storage::Paged => format!("paged {BLOCK_SIZE}"),
            Storage::Dense => "dense".into(),
            Storage::DenseBhsd => "dense bhsd".into(),
        }
    }

    /// Whether the issue's targets apply (contiguous and paged; the dense cases are diagnostics).
    pub fn has_targets(self) -> bool {
        !matches!(self, Storage::Dense | Storage::DenseBhsd)
    }
}

impl DecodeShape {
    /// "b8-hq32-hkv8-sq1-sk8192-d128": the peers' case key, and the flashcore cases' prefix.
    pub fn key(&self) -> String {
        format!(
            "b{}-hq{}-hkv{}-sq{}-sk{}-d{}",
            self.batch, self.heads_q, self.heads_kv, self.seq_q, self.seq_k, self.head_dim
        )
    }

    pub fn case_key(&self, storage: Storage) -> String {
        format!("{}/{}", self.key(), storage.suffix())
    }

    /// Bytes of K and V a call must read: 2 · B · Hkv · Sk · D · 2 (bf16).
    pub fn kv_bytes(&self) -> u64 {
        kv_bytes(self.batch, self.heads_kv, self.seq_k, self.head_dim)
    }

    pub fn heads(&self) -> Heads {
        Heads {
            q: self.heads_q,
            kv: self.heads_kv,
            dim: self.head_dim,
        }
    }

    /// The problem as the peers run it: contiguous K/V, never causal (SDPA's is_causal is
    /// top-left aligned, flashcore's bottom-right; they agree only when Sq = Sk).
    pub fn peer_shape(&self) -> PeerShape {
        PeerShape {
            batch: self.batch,
            heads: self.heads_q,
            heads_kv: self.heads_kv,
            seq: self.seq_q,
            seq_k: self.seq_k,
            head_dim: self.head_dim,
            causal: false,
            dtype: DTYPE,
        }
    }
}

/// Bytes of K and V (2 bytes an element) for B sequences of Sk keys, Hkv heads of D.
pub fn kv_bytes(batch: usize, heads_kv: usize, seq_k: usize, head_dim: usize) -> u64 {
    2 * (batch * heads_kv * seq_k * head_dim) as u64 * 2
}

/// GB/s (10^9 bytes a second) of `bytes` moved in `us` microseconds.
pub fn gbps(bytes: u64, us: f64) -> f64 {
    bytes as f64 / us / 1e3
}

/// The ceiling a kernel reading `bytes` is held to: the HBM traffic of a device-to-device copy of
/// the same bytes, 2N / t (it reads N and writes N). N / t alone would be half of what the
/// memory delivers, and a read-only kernel can use all of it: the peers read at 2.3-3.0 TB/s.
pub fn ceiling_gbps(bytes: u64, copy_us: f64) -> f64 {
    2.0 * gbps(bytes, copy_us)
}

/// `rate` as a percentage of `ceiling`.
pub fn percent_of(rate: f64, ceiling: f64) -> f64 {
    100.0 * rate / ceiling
}

/// Best peer time / our time: above 1 means faster than every peer.
pub fn vs_peer(peer_us: f64, our_us: f64) -> f64 {
    peer_us / our_us
}

/// What `--suite decode` runs. `causal` makes the flashcore cases causal (bottom-right: each of
/// the Sq queries sees the keys up to its own position at the end of the cache); the peers stay
/// non-causal, since SDPA cannot take that mask.
pub fn plan(seed: u64, causal: bool) -> SuitePlan {
    let mut cases = Vec::new();
    let mut peers = Vec::new();
    let mut comparisons = Vec::new();
    for r in &ROWS {
        let used = vec![r.seq_k; r.batch];
        let contig_key = r.case_key(Storage::Contiguous);
        for storage in Storage::ALL {
            let key = r.case_key(storage);
            let mut c = match storage {
                Storage::Contiguous => cache_case_heads(
                    &key,
                    r.heads(),
                    r.seq_q,
                    r.seq_k,
                    &used,
                    causal,
                    KvKind::Contiguous,
                    seed,
                ),
                Storage::Paged => cache_case_heads(
                    &key,
                    r.heads(),
                    r.seq_q,
                    r.seq_k,
                    &used,
                    causal,
                    KvKind::Paged {
                        block_size: BLOCK_SIZE,
                    },
                    seed,
                ),
                Storage::Dense => {
                    dense_case_heads(&key, r.heads(), r.batch, r.seq_q, r.seq_k, causal)
                }
                Storage::DenseBhsd => {
                    let mut c =
                        dense_case_heads(&key, r.heads(), r.batch, r.seq_q, r.seq_k, causal);
                    c.problem = c.problem.with_layout(Layout::Bhsd);
                    c.label = format!("{}, [B, Hkv, Sk, D]", c.label);
                    c
                }
            };
            if matches!(storage, Storage::Paged | Storage::Dense) {
                // Same keys and values (and oracle references) as the contiguous cache. The
                // bhsd case draws its own: its tensors are laid out differently.
                c.data_from = Some(contig_key.clone());
            }
            comparisons.push(Comparison {
                name: format!("{}: best peer time / {} time", r.key(), storage.text()),
                num: (r.key(), Side::BestPeer),
                den: (key, Side::This),
                measure: Measure::Time,
                target: storage
                    .has_targets()
                    .then_some(Target::AtLeast(PEER_TARGET)),
            });
            cases.push(c);
        }
        let shape = r.peer_shape();
        peers.push(PeerCase {
            key: r.key(),
            label: format!(
                "{} ({}); contiguous K/V [B, Hkv, Sk, D], enable_gqa",
                shape.label(),
                r.what
            ),
            shape,
            flops: shape.dense_flops(),
        });
    }
    let mut notes = vec![
        format!(
            "flashcore: each row on a contiguous cache (seqused_k = Sk, capacity Sk), a paged one (block {BLOCK_SIZE}, shuffled table, the same keys and values) and as the plain dense problem (no modes; no target, it shows what the modes cost)"
        ),
        "peers: PyTorch SDPA flash and cuDNN (and FA3 where it imports) on contiguous K/V [B, Hkv, Sk, D] with enable_gqa; the paged rows compare with the same peer numbers (no peer takes a paged cache)".into(),
    ];
    if causal {
        notes.push("--causal on: the flashcore cases are causal (bottom-right aligned); the peers stay non-causal (SDPA's is_causal is top-left aligned), so rows with Sq > 1 compare different masks".into());
    }
    SuitePlan {
        suite: Suite::Decode,
        cases,
        peers,
        comparisons,
        notes,
    }
}

/// One row as the report keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecodeRowInfo {
    /// The peers' case key; the flashcore cases are `<key>/<storage suffix>`.
    pub key: String,
    pub shape: PeerShape,
    pub what: String,
    pub kv_bytes: u64,
    /// (storage, flashcore case key).
    pub cases: Vec<(Storage, String)>,
}

/// A device-to-device copy timed in the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CopyTiming {
    /// Bytes copied (read once and written once).
    pub bytes: u64,
    /// Median microseconds per copy.
    pub us: f64,
    /// Copies per sample.
    pub calls: u64,
    pub repeats: usize,
    /// Source/destination pairs rotated copy to copy.
    pub pairs: usize,
}

/// A read-only kernel over N bytes, timed in the run as the copy is: events around back-to-back
/// launches, median. Two designs (`kind`): `ldg` (`read_probe`, 16-byte loads XORed together,
/// nothing written) and `bulk:<chunk>:<stages>:<blocks per SM>` (`read_probe_bulk`, TMA bulk
/// copies into a shared-memory ring).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReadProbeTiming {
    /// Which probe (reports from before the TMA probe had only `ldg`).
    #[serde(default = "ldg_kind")]
    pub kind: String,
    /// Bytes read per launch (once each; nothing written).
    pub bytes: u64,
    /// Median microseconds per launch.
    pub us: f64,
    /// Launches per sample.
    pub calls: u64,
    pub repeats: usize,
    /// Source buffers rotated launch to launch.
    pub sources: usize,
    /// Blocks, and threads per block.
    pub grid: u32,
    pub block: u32,
}

fn ldg_kind() -> String {
    "ldg".into()
}

/// A peer number from the anchor file (`B=8 Hq=32 Hkv=8 Sq=1 Sk=8192 D=128 bf16 sdpa_flash
/// 95.5 us 2811 GB/s`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecodeAnchor {
    pub shape: PeerShape,
    pub backend: String,
    pub us: f64,
    /// As the file gives it.
    pub gbps: Option<f64>,
    pub file: String,
}

/// The decode suite's part of the report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecodeInfo {
    pub causal: bool,
    pub rows: Vec<DecodeRowInfo>,
    pub copies: Vec<CopyTiming>,
    /// Why a copy time is missing, if one is.
    pub copy_note: Option<String>,
    /// The read probes, each design at each copy size (empty in reports from before the probe).
    #[serde(default)]
    pub read_probes: Vec<ReadProbeTiming>,
    /// Why a read probe time is missing, if one is.
    #[serde(default)]
    pub read_probe_note: Option<String>,
    /// The compute reference: a cuBLAS GEMM in the suite's dtype, timed in the run (none in
    /// reports from before it, or with --no-gemm).
    #[serde(default)]
    pub gemm: Option<GemmPeak>,
    /// Why there is no GEMM time, if there is none.
    #[serde(default)]
    pub gemm_note: Option<String>,
    pub anchors: Vec<DecodeAnchor>,
    /// Where the anchors came from, or why there are none.
    pub anchors_note: Option<String>,
    /// How the peers were timed (from the method the script was asked for).
    pub peer_method: String,
}

/// The peer script's method for this suite (the anchor file's).
pub const PEER_ARGS: [&str; 3] = ["--decode", "--backends", "sdpa_flash,sdpa_cudnn,fa3"];
pub const PEER_METHOD: &str = "torch_sdpa.py --decode: 3 input sets rotated, 30 calls captured in one CUDA graph, 11 replays each timed by events, median per call (the anchor file's method)";

/// The report's decode part before anything is timed.
pub fn info(causal: bool) -> DecodeInfo {
    DecodeInfo {
        causal,
        rows: ROWS
            .iter()
            .map(|r| DecodeRowInfo {
                key: r.key(),
                shape: r.peer_shape(),
                what: r.what.into(),
                kv_bytes: r.kv_bytes(),
                cases: Storage::ALL.iter().map(|&s| (s, r.case_key(s))).collect(),
            })
            .collect(),
        copies: vec![],
        copy_note: None,
        read_probes: vec![],
        read_probe_note: None,
        gemm: None,
        gemm_note: None,
        anchors: vec![],
        anchors_note: None,
        peer_method: PEER_METHOD.into(),
    }
}

/// The distinct byte counts the copies are timed at, in first-row order.
pub fn copy_sizes(info: &DecodeInfo) -> Vec<u64> {
    let mut v: Vec<u64> = Vec::new();
    for r in &info.rows {
        if !v.contains(&r.kv_bytes) {
            v.push(r.kv_bytes);
        }
    }
    v
}

impl DecodeInfo {
    pub fn copy(&self, bytes: u64) -> Option<&CopyTiming> {
        self.copies.iter().find(|c| c.bytes == bytes)
    }

    /// The ceiling for a row of `bytes`, GB/s.
    pub fn ceiling(&self, bytes: u64) -> Option<f64> {
        self.copy(bytes).map(|c| ceiling_gbps(bytes, c.us))
    }

    /// The fastest read probe at `bytes` (the read rate the peer targets are set against).
    pub fn read_probe(&self, bytes: u64) -> Option<&ReadProbeTiming> {
        self.read_probes
            .iter()
            .filter(|p| p.bytes == bytes)
            .min_by(|a, b| a.us.total_cmp(&b.us))
    }

    /// What the fastest read probe read at `bytes`, N / t in GB/s.
    pub fn read_probe_gbps(&self, bytes: u64) -> Option<f64> {
        self.read_probe(bytes).map(|p| gbps(bytes, p.us))
    }

    fn anchors_for<'a>(&'a self, shape: &'a PeerShape) -> impl Iterator<Item = &'a DecodeAnchor> {
        self.anchors.iter().filter(move |a| a.shape == *shape)
    }
}

/// Parses one anchor file. Lines need B=, Hq=, Hkv=, Sq=, Sk=, D= and "<µs> us"; the dtype is the
/// `bf16`/`f16` word (else bf16 when the file name or a `#` line says so, else f16), the backend
/// the first other word, causal only with a `causal=1` word. Other lines (the dense anchors'
/// `H=` lines among them) are skipped.
pub fn parse_anchors(file: &str, text: &str) -> Vec<DecodeAnchor> {
    let header_bf16 = text
        .lines()
        .filter(|l| l.trim_start().starts_with('#'))
        .any(|l| l.contains("bf16") || l.contains("bfloat16"));
    let default_dtype = if file.contains("bf16") || header_bf16 {
        DType::Bf16
    } else {
        DType::F16
    };
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
        let toks: Vec<&str> = line.split_whitespace().collect();
        let kv = |k: &str| {
            toks.iter()
                .find_map(|t| t.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
                .and_then(|v| v.parse::<usize>().ok())
        };
        let (Some(b), Some(hq), Some(hkv), Some(sq), Some(sk), Some(d)) =
            (kv("B"), kv("Hq"), kv("Hkv"), kv("Sq"), kv("Sk"), kv("D"))
        else {
            continue;
        };
        let number_before = |unit: &str| {
            toks.iter()
                .position(|t| *t == unit)
                .and_then(|i| i.checked_sub(1))
                .and_then(|i| toks[i].parse::<f64>().ok())
        };
        let Some(us) = number_before("us") else {
            continue;
        };
        let dtype = toks
            .iter()
            .find_map(|t| t.parse::<DType>().ok())
            .unwrap_or(default_dtype);
        let causal = kv("causal").is_some_and(|c| c != 0);
        let Some(backend) = toks.iter().find(|t| {
            !t.contains('=')
                && t.parse::<DType>().is_err()
                && t.parse::<f64>().is_err()
                && t.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        }) else {
            continue;
        };
        out.push(DecodeAnchor {
            shape: PeerShape {
                batch: b,
                heads: hq,
                heads_kv: hkv,
                seq: sq,
                seq_k: sk,
                head_dim: d,
                causal,
                dtype,
            },
            backend: backend.to_string(),
            us,
            gbps: number_before("GB/s"),
            file: file.into(),
        });
    }
    out
}

/// Where to look for anchors: `--anchors DIR`, else `../shared/anchors` or `shared/anchors`
/// under the current directory where one exists.
pub fn anchor_dir(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(d) = explicit {
        return Some(d.to_path_buf());
    }
    ["../shared/anchors", "shared/anchors"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_dir())
}

/// The decode anchors of every `*.txt` under `dir`, and a note naming the files they came from.
pub fn load_anchors(dir: &Path) -> Result<(Vec<DecodeAnchor>, String)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading the anchors directory {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    files.sort();
    let mut all = Vec::new();
    let mut used = Vec::new();
    for f in &files {
        let name = f
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        let found = parse_anchors(&name, &text);
        if !found.is_empty() {
            let n = found.len();
            let s = if n == 1 { "" } else { "s" };
            used.push(format!("{} ({n} number{s})", f.display()));
            all.extend(found);
        }
    }
    let note = if used.is_empty() {
        format!("no decode anchors in {}", dir.display())
    } else {
        format!("anchors: {}", used.join(", "))
    };
    Ok((all, note))
}

/// The fastest live peer on a row: (backend, µs).
pub fn best_peer<'a>(r: &'a ModeReport, key: &str) -> Option<(&'a str, f64)> {
    r.rows
        .iter()
        .filter(|x| x.case == key && x.source == Source::Peer)
        .filter_map(|x| x.timing().map(|t| (x.implementation.as_str(), t.us)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

/// One (row, generation, storage) of the decode table, evaluated.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeLine {
    pub row: String,
    pub implementation: String,
    pub storage: Storage,
    pub kv_bytes: u64,
    /// Why there is no time (wrong, unsupported, ...), when there is none.
    pub missing: Option<String>,
    pub us: Option<f64>,
    pub gbps: Option<f64>,
    pub ceiling_percent: Option<f64>,
    /// None: no target at this row (small K/V, dense) or no number.
    pub ceiling_met: Option<bool>,
    pub peer: Option<(String, f64)>,
    pub vs_peer: Option<f64>,
    pub peer_met: Option<bool>,
}

/// The table's lines: per row, per storage, the flashcore generations in report order.
pub fn lines(r: &ModeReport, d: &DecodeInfo) -> Vec<DecodeLine> {
    let mut impls: Vec<&str> = Vec::new();
    for x in r.rows.iter().filter(|x| x.source == Source::Flashcore) {
        if !impls.contains(&x.implementation.as_str()) {
            impls.push(&x.implementation);
        }
    }
    let mut out = Vec::new();
    for row in &d.rows {
        let ceiling = d.ceiling(row.kv_bytes);
        let peer = best_peer(r, &row.key);
        for (storage, case) in &row.cases {
            for imp in &impls {
                let Some(x) = r.rows.iter().find(|x| {
                    x.case == *case && x.source == Source::Flashcore && x.implementation == *imp
                }) else {
                    continue;
                };
                let us = x.timing().map(|t| t.us);
                let gb = us.map(|us| gbps(row.kv_bytes, us));
                let pct = gb.zip(ceiling).map(|(g, c)| percent_of(g, c));
                let ratio = us.zip(peer).map(|(us, (_, p))| vs_peer(p, us));
                let ceiling_applies = storage.has_targets() && row.kv_bytes >= BIG_KV_BYTES;
                out.push(DecodeLine {
                    row: row.key.clone(),
                    implementation: imp.to_string(),
                    storage: *storage,
                    kv_bytes: row.kv_bytes,
                    missing: match &x.outcome {
                        Outcome::Timed(_) => None,
                        Outcome::Wrong { message } => Some(format!("WRONG: {message}")),
                        Outcome::Unsupported { reason } => Some(format!("unsupported: {reason}")),
                        Outcome::Error { message } => Some(format!("error: {message}")),
                        Outcome::Skipped { reason } => Some(format!("skipped: {reason}")),
                    },
                    us,
                    gbps: gb,
                    ceiling_percent: pct,
                    ceiling_met: pct
                        .filter(|_| ceiling_applies)
                        .map(|p| p >= 100.0 * CEILING_TARGET),
                    peer: peer.map(|(n, us)| (n.to_string(), us)),
                    vs_peer: ratio,
                    peer_met: ratio
                        .filter(|_| storage.has_targets())
                        .map(|v| v >= PEER_TARGET),
                });
            }
        }
    }
    out
}

/// What ≥ [`PEER_TARGET`] × the best peer asks of one row, beside the read probe of its bytes
/// and the GEMM rate: a bandwidth-bound row is held by the first, a compute-bound one (chunked
/// prefill) by the second. The same for contiguous and paged: both compare with the same peer
/// numbers.
#[derive(Clone, Debug, PartialEq)]
pub struct PeerNeed {
    pub row: String,
    pub kv_bytes: u64,
    /// The fastest live peer: (backend, µs).
    pub peer: Option<(String, f64)>,
    pub peer_gbps: Option<f64>,
    /// Best peer GB/s × PEER_TARGET: a call at that rate takes the peer's time / PEER_TARGET.
    pub needed_gbps: Option<f64>,
    pub probe_gbps: Option<f64>,
    /// Above 1: the target asks for more than a kernel that only reads got in this run.
    pub needed_over_probe: Option<f64>,
    /// The row's matrix-product FLOPs as the peers count them (4·B·Hq·Sq·Sk·D, non-causal).
    pub flops: f64,
    /// Best peer TFLOP/s × PEER_TARGET.
    pub needed_tflops: Option<f64>,
    pub gemm_tflops: Option<f64>,
    /// Above 1: the target asks for more matrix throughput than cuBLAS's GEMM got in this run,
    /// before any of attention's softmax work.
    pub needed_over_gemm: Option<f64>,
}

impl PeerNeed {
    /// Whether the target's GB/s is at most the read probe's.
    pub fn within_probe(&self) -> Option<bool> {
        self.needed_over_probe.map(|x| x <= 1.0)
    }

    /// Whether the target's TFLOP/s is at most the GEMM's.
    pub fn within_gemm(&self) -> Option<bool> {
        self.needed_over_gemm.map(|x| x <= 1.0)
    }
}

/// Per row, the GB/s that ≥ PEER_TARGET × the best peer needs, against the read probe.
pub fn peer_needs(r: &ModeReport, d: &DecodeInfo) -> Vec<PeerNeed> {
    d.rows
        .iter()
        .map(|row| {
            let peer = best_peer(r, &row.key);
            let peer_gbps = peer.map(|(_, us)| gbps(row.kv_bytes, us));
            let needed_gbps = peer_gbps.map(|g| g * PEER_TARGET);
            let probe_gbps = d.read_probe_gbps(row.kv_bytes);
            let flops = row.shape.dense_flops();
            let needed_tflops = peer.map(|(_, us)| flops / us / 1e6 * PEER_TARGET);
            let gemm_tflops = d.gemm.as_ref().map(|g| g.tflops);
            PeerNeed {
                row: row.key.clone(),
                kv_bytes: row.kv_bytes,
                peer: peer.map(|(n, us)| (n.to_string(), us)),
                peer_gbps,
                needed_gbps,
                probe_gbps,
                needed_over_probe: needed_gbps.zip(probe_gbps).map(|(n, p)| n / p),
                flops,
                needed_tflops,
                gemm_tflops,
                needed_over_gemm: needed_tflops.zip(gemm_tflops).map(|(n, g)| n / g),
            }
        })
        .collect()
}

fn cell(s: &str) -> String {
    cell_within(s, 200)
}

fn mib(bytes: u64) -> String {
    format!("{:.0}", bytes as f64 / (1u64 << 20) as f64)
}

fn met(m: Option<bool>, has_target: bool) -> &'static str {
    match (m, has_target) {
        (Some(true), _) => "yes",
        (Some(false), _) => "NO",
        (None, true) => "— (no number)",
        (None, false) => "—",
    }
}

fn opt(x: Option<f64>, f: impl Fn(f64) -> String) -> String {
    x.map(f).unwrap_or_else(|| "—".into())
}

fn row_label(row: &DecodeRowInfo) -> String {
    let s = &row.shape;
    format!(
        "B={} Hq={} Hkv={} Sq={} Sk={} D={} ({})",
        s.batch, s.heads, s.heads_kv, s.seq, s.seq_k, s.head_dim, row.what
    )
}

/// The decode section: method, the table per (row, generation, storage) with both targets, the
/// per-generation tally, the peers with the anchors beside them, and the copies.
pub fn render(r: &ModeReport, d: &DecodeInfo) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "GB/s = K and V bytes a call must read (2·B·Hkv·Sk·D·2) / its time. Copy ceiling: a device-to-device copy (cuMemcpyDtoDAsync) of the same N bytes between two buffers in the same run, CUDA events around back-to-back copies, median; the ceiling is its HBM traffic 2N / t (it reads N bytes and writes N; a kernel that only reads can use all of it), with N / t beside it in the copy table. \
         Read probes: kernels that only read the same N bytes (kernels/bench_read_probe.cu), `ldg` (16-byte loads, {} in flight per thread, {} blocks per SM of {} threads) and `bulk` (TMA bulk copies, `bulk:<bytes a copy>:<ring stages>:<blocks per SM>`, one thread issuing), timed as the copy is in the same run (events around back-to-back launches, median); their N / t are measured read rates, not proven bounds, and the table after the tally sets the peer target's GB/s against the faster at each size. \
         flashcore: CUDA-graph replays (see the method above), every case checked by the oracle first. Peers: {}. \
         Targets (issue 12): ≥ {:.0} % of the copy ceiling at rows with ≥ {} MiB of K/V; ≥ {:.2}× the best peer (best peer time / ours) at every row, contiguous and paged. The dense rows have no target.{}\n\n",
        READ_PROBE_UNROLL,
        READ_PROBE_BLOCKS_PER_SM,
        READ_PROBE_BLOCK,
        d.peer_method,
        100.0 * CEILING_TARGET,
        BIG_KV_BYTES >> 20,
        PEER_TARGET,
        if d.causal { " Causal (--causal on) flashcore cases." } else { "" }
    ));
    out.push_str(&format!(
        "| row | K/V MiB | implementation | storage | µs | GB/s | % of copy | ≥ {:.0} % | best peer | × best peer | ≥ {:.2}× |\n",
        100.0 * CEILING_TARGET,
        PEER_TARGET
    ));
    out.push_str("|---|---:|---|---|---:|---:|---:|---|---|---:|---|\n");
    let all = lines(r, d);
    for l in &all {
        let row = d
            .rows
            .iter()
            .find(|x| x.key == l.row)
            .expect("a row of the info");
        let ceiling_applies = l.storage.has_targets() && l.kv_bytes >= BIG_KV_BYTES;
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            cell(&row_label(row)),
            mib(l.kv_bytes),
            cell(&l.implementation),
            l.storage.text(),
            match (&l.us, &l.missing) {
                (Some(us), _) => fmt_us(*us),
                (None, Some(m)) => cell(m),
                (None, None) => "—".into(),
            },
            opt(l.gbps, |g| format!("{g:.0}")),
            opt(l.ceiling_percent, |p| format!("{p:.0} %")),
            met(l.ceiling_met, ceiling_applies),
            l.peer
                .as_ref()
                .map(|(n, us)| format!("{n} {}", fmt_us(*us)))
                .unwrap_or_else(|| "—".into()),
            opt(l.vs_peer, |v| format!("{v:.2}×")),
            met(l.peer_met, l.storage.has_targets()),
        ));
    }
    out.push('\n');
    // Per generation: how many (row, storage) pairs with a target meet it.
    let mut impls: Vec<&str> = Vec::new();
    for l in &all {
        if !impls.contains(&l.implementation.as_str()) {
            impls.push(&l.implementation);
        }
    }
    for imp in impls {
        let mine: Vec<&DecodeLine> = all
            .iter()
            .filter(|l| l.implementation == imp && l.storage.has_targets())
            .collect();
        let tally = |f: fn(&DecodeLine) -> Option<bool>, applies: fn(&DecodeLine) -> bool| {
            let with: Vec<&&DecodeLine> = mine.iter().filter(|l| applies(l)).collect();
            let yes = with.iter().filter(|l| f(l) == Some(true)).count();
            let none = with.iter().filter(|l| f(l).is_none()).count();
            let mut s = format!("{yes} of {} (row, storage) pairs", with.len());
            if none > 0 {
                s.push_str(&format!(" ({none} without a number)"));
            }
            s
        };
        out.push_str(&format!(
            "- {imp}: ≥ {:.0} % of the copy at {}; ≥ {:.2}× the best peer at {}\n",
            100.0 * CEILING_TARGET,
            tally(|l| l.ceiling_met, |l| l.kv_bytes >= BIG_KV_BYTES),
            PEER_TARGET,
            tally(|l| l.peer_met, |_| true),
        ));
    }
    out.push_str(&render_peer_needs(r, d));
    out.push_str(&render_peers(r, d));
    out.push_str(&render_copies(d));
    out
}

/// Per row: the GB/s the peer target needs against the read probe's, and the TFLOP/s against
/// the GEMM's.
fn render_peer_needs(r: &ModeReport, d: &DecodeInfo) -> String {
    let mut out = format!(
        "\n### Is {t:.2}× the best peer within the read probe and the GEMM rate?\n\n\
         A call {t:.2}× faster than the best peer reads its K/V at the peer's GB/s × {t:.2} and does its matrix products at the peer's TFLOP/s × {t:.2} (contiguous and paged alike: both compare with the same peer). Needed / probe above 1 asks for more than the faster read-only kernel got at the same bytes in this run; needed / GEMM above 1 asks for more than cuBLAS's GEMM got in this run, before any of attention's softmax work.\n\n\
         | row | K/V MiB | GFLOP | best peer | peer GB/s | {t:.2}× peer needs GB/s | read probe GB/s | needed / probe | ≤ read probe? | {t:.2}× peer needs TFLOP/s | GEMM TFLOP/s | needed / GEMM | ≤ GEMM? |\n|---|---:|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---|\n",
        t = PEER_TARGET
    );
    let yes_no = |m: Option<bool>| match m {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "—",
    };
    // (peer_needs keeps d.rows' order, one entry a row.)
    for (n, row) in peer_needs(r, d).iter().zip(&d.rows) {
        out.push_str(&format!(
            "| {} | {} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            cell(&row_label(row)),
            mib(n.kv_bytes),
            n.flops / 1e9,
            n.peer
                .as_ref()
                .map(|(b, us)| format!("{b} {}", fmt_us(*us)))
                .unwrap_or_else(|| "—".into()),
            opt(n.peer_gbps, |g| format!("{g:.0}")),
            opt(n.needed_gbps, |g| format!("{g:.0}")),
            opt(n.probe_gbps, |g| format!("{g:.0}")),
            opt(n.needed_over_probe, |x| format!("{x:.2}")),
            yes_no(n.within_probe()),
            opt(n.needed_tflops, |t| format!("{t:.1}")),
            opt(n.gemm_tflops, |t| format!("{t:.1}")),
            opt(n.needed_over_gemm, |x| format!("{x:.3}")),
            yes_no(n.within_gemm()),
        ));
    }
    match (&d.gemm, &d.gemm_note) {
        (Some(g), _) => out.push_str(&format!(
            "\nGEMM: cuBLAS {} {n}×{n}×{n} (cublasGemmEx, f32 accumulate), {} µs a call, {:.1} TFLOP/s, timed in this run as the kernels are.\n",
            g.dtype,
            fmt_us(g.us),
            g.tflops,
            n = g.n
        )),
        (None, Some(note)) => out.push_str(&format!("\nGEMM: not timed ({}).\n", cell(note))),
        (None, None) => out.push_str("\nGEMM: not timed.\n"),
    }
    out
}

/// The peers per row beside the anchor numbers.
fn render_peers(r: &ModeReport, d: &DecodeInfo) -> String {
    let mut out = String::from(
        "\n### Peers and anchors\n\n| row | peer | µs | GB/s | % of copy | anchor µs | anchor GB/s | this run / anchor |\n|---|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for row in &d.rows {
        let ceiling = d.ceiling(row.kv_bytes);
        let mut backends: Vec<&str> = Vec::new();
        for x in r
            .rows
            .iter()
            .filter(|x| x.case == row.key && x.source != Source::Flashcore)
        {
            if !backends.contains(&x.implementation.as_str()) {
                backends.push(&x.implementation);
            }
        }
        for a in d.anchors_for(&row.shape) {
            if !backends.contains(&a.backend.as_str()) {
                backends.push(&a.backend);
            }
        }
        for b in backends {
            let live = r.rows.iter().find(|x| {
                x.case == row.key && x.source != Source::Flashcore && x.implementation == b
            });
            let anchor = d.anchors_for(&row.shape).find(|a| a.backend == b);
            let us = live.and_then(|x| x.timing()).map(|t| t.us);
            let live_cell = match (us, live) {
                (Some(us), _) => fmt_us(us),
                (None, Some(x)) => cell(&match &x.outcome {
                    Outcome::Error { message } => format!("error: {message}"),
                    other => format!("{other:?}"),
                }),
                (None, None) => "not run".into(),
            };
            let g = us.map(|us| gbps(row.kv_bytes, us));
            out.push_str(&format!(
                "| {} | {b} | {live_cell} | {} | {} | {} | {} | {} |\n",
                cell(&row_label(row)),
                opt(g, |g| format!("{g:.0}")),
                opt(g.zip(ceiling).map(|(g, c)| percent_of(g, c)), |p| format!(
                    "{p:.0} %"
                )),
                opt(anchor.map(|a| a.us), fmt_us),
                opt(anchor.and_then(|a| a.gbps), |g| format!("{g:.0}")),
                opt(us.zip(anchor).map(|(u, a)| u / a.us), |x| format!("{x:.2}")),
            ));
        }
    }
    if let Some(n) = &d.anchors_note {
        out.push_str(&format!("\n{n}\n"));
    }
    out
}

/// The copies (bytes, time, the ceiling and the total traffic), then the read probes.
fn render_copies(d: &DecodeInfo) -> String {
    let mut out = String::from(
        "\n### Copy ceiling\n\n| K/V MiB | copy µs | read GB/s (N / t) | ceiling: traffic GB/s (2N / t) | copies per sample | samples | pairs rotated |\n|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for bytes in copy_sizes(d) {
        let copy = match d.copy(bytes) {
            Some(c) => format!(
                "{} | {:.0} | {:.0} | {} | {} | {}",
                fmt_us(c.us),
                gbps(bytes, c.us),
                ceiling_gbps(bytes, c.us),
                c.calls,
                c.repeats,
                c.pairs
            ),
            None => "— | — | — | — | — | —".into(),
        };
        out.push_str(&format!("| {} | {copy} |\n", mib(bytes)));
    }
    if let Some(n) = &d.copy_note {
        out.push_str(&format!("\ncopy: {}\n", cell(n)));
    }
    out.push_str(
        "\n### Read probes\n\n| K/V MiB | probe | µs | read GB/s (N / t) | launches per sample | samples | sources rotated | grid × block | the faster |\n|---:|---|---:|---:|---:|---:|---:|---|---|\n",
    );
    for bytes in copy_sizes(d) {
        let fastest = d.read_probe(bytes);
        let mut any = false;
        for p in d.read_probes.iter().filter(|p| p.bytes == bytes) {
            any = true;
            out.push_str(&format!(
                "| {} | {} | {} | {:.0} | {} | {} | {} | {} × {} | {} |\n",
                mib(bytes),
                p.kind,
                fmt_us(p.us),
                gbps(bytes, p.us),
                p.calls,
                p.repeats,
                p.sources,
                p.grid,
                p.block,
                if fastest == Some(p) { "yes" } else { "" }
            ));
        }
        if !any {
            out.push_str(&format!(
                "| {} | — | — | — | — | — | — | — | — |\n",
                mib(bytes)
            ));
        }
    }
    if let Some(n) = &d.read_probe_note {
        out.push_str(&format!("\nread probe: {}\n", cell(n)));
    }
    out
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::bench::modes::{CaseInfo, ModeRow};
    use crate::bench::report::{DeviceSummary, PeerStatus, Settings, Timing};
    use flashcore::KvStorage;

    #[test]
    fn the_rows_are_the_issues() {
        let got: Vec<(usize, usize, usize, usize, usize, usize)> = ROWS
            .iter()
            .map(|r| (r.batch, r.heads_q, r.heads_kv, r.seq_q, r.seq_k, r.head_dim))
            .collect();
        assert_eq!(
            got,
            [
                (1, 32, 8, 1, 32768, 128),
                (8, 32, 8, 1, 8192, 128),
                (32, 32, 8, 1, 4096, 128),
                (64, 32, 8, 1, 2048, 128),
                (16, 64, 8, 1, 8192, 128),
                (8, 32, 32, 1, 8192, 128),
                (4, 32, 8, 128, 8192, 128),
                (8, 32, 8, 4, 8192, 128),
            ]
        );
        let keys: Vec<String> = ROWS.iter().map(|r| r.key()).collect();
        let mut dedup = keys.clone();
        dedup.sort();
        dedup.dedup();
        assert_eq!(dedup.len(), keys.len(), "keys are unique");
        assert_eq!(ROWS[1].key(), "b8-hq32-hkv8-sq1-sk8192-d128");
    }

    #[test]
    fn bytes_and_rates() {
        // 2 · 8 · 8 · 8192 · 128 · 2 = 256 MiB.
        assert_eq!(ROWS[1].kv_bytes(), 268_435_456);
        assert_eq!(ROWS[0].kv_bytes(), 128 << 20);
        assert_eq!(ROWS[5].kv_bytes(), 1 << 30);
        // The anchor file's numbers: 95.5 µs at B=8 Sk=8192 is 2811 GB/s.
        assert_eq!(gbps(ROWS[1].kv_bytes(), 95.5).round(), 2811.0);
        assert_eq!(gbps(ROWS[2].kv_bytes(), 177.7).round(), 3021.0);
        assert_eq!(ceiling_gbps(1_000_000, 1000.0), 2.0);
        assert_eq!(percent_of(1.5, 2.0), 75.0);
        assert_eq!(vs_peer(105.0, 100.0), 1.05);
        // Every row has at least 128 MiB, so every row has the ceiling target.
        assert!(ROWS.iter().all(|r| r.kv_bytes() >= BIG_KV_BYTES));
        let i = info(false);
        assert_eq!(
            copy_sizes(&i),
            [128 << 20, 256 << 20, 512 << 20, 1 << 30],
            "one copy per distinct size"
        );
    }

    #[test]
    fn the_plan_has_contiguous_paged_and_dense_cases_on_the_same_data() {
        let p = plan(0x5eed, false);
        assert_eq!(p.cases.len(), 4 * ROWS.len());
        assert_eq!(p.peers.len(), ROWS.len());
        for (r, four) in ROWS.iter().zip(p.cases.chunks(4)) {
            let [c, pg, dn, bhsd] = four else { panic!() };
            assert_eq!(bhsd.key, format!("{}/dense-bhsd", r.key()));
            assert_eq!(bhsd.problem.layout, Layout::Bhsd);
            assert_eq!(dn.problem.layout, Layout::Bshd);
            assert!(bhsd.problem.modes.is_dense());
            assert_eq!(bhsd.data_from, None);
            let three = &four[..3];
            assert_eq!(c.key, r.case_key(Storage::Contiguous));
            assert_eq!(pg.key, format!("{}/paged-64", r.key()));
            assert_eq!(dn.key, format!("{}/dense", r.key()));
            for x in three {
                let q = &x.problem;
                assert_eq!(
                    (q.batch, q.heads_q, q.heads_kv, q.seq_q, q.head_dim),
                    (r.batch, r.heads_q, r.heads_kv, r.seq_q, r.head_dim)
                );
                assert!(!q.causal && q.dtype == DType::Bf16);
                assert_eq!(x.draw.len_k, vec![r.seq_k; r.batch]);
                assert_eq!(x.flops, r.peer_shape().dense_flops(), "{}", x.key);
            }
            assert_eq!(c.problem.seq_k, r.seq_k);
            assert_eq!(c.problem.modes.kv, KvStorage::Dense);
            assert!(c.problem.modes.seqused_k);
            assert_eq!(c.draw.seqused_k, Some(vec![r.seq_k as i32; r.batch]));
            let KvStorage::Paged {
                block_size,
                max_blocks_per_seq,
                num_blocks,
            } = pg.problem.modes.kv
            else {
                panic!("{} is paged", pg.key)
            };
            assert_eq!((block_size, max_blocks_per_seq), (64, r.seq_k / 64));
            let table = pg.draw.block_table.as_ref().unwrap();
            let mut seen = table.clone();
            seen.sort();
            seen.dedup();
            assert_eq!(seen.len(), table.len(), "no block owned twice");
            assert!(table.iter().all(|&b| (b as usize) < num_blocks));
            assert!(dn.problem.modes.is_dense());
            assert!(dn.draw.seqused_k.is_none());
            assert_eq!(pg.data_from.as_deref(), Some(c.key.as_str()));
            assert_eq!(dn.data_from.as_deref(), Some(c.key.as_str()));
            assert_eq!(c.data_from, None);
        }
        for x in &p.cases {
            x.problem
                .validate()
                .unwrap_or_else(|e| panic!("{}: {e}", x.key));
            x.draw
                .host_tables()
                .validate(&x.problem)
                .unwrap_or_else(|e| panic!("{}: {e}", x.key));
        }
        // Targets on contiguous and paged only.
        let with: Vec<&str> = p
            .comparisons
            .iter()
            .filter(|c| c.target == Some(Target::AtLeast(1.05)))
            .map(|c| c.den.0.as_str())
            .collect();
        assert_eq!(with.len(), 2 * ROWS.len());
        assert!(with.iter().all(|k| !k.ends_with("/dense")));
        assert!(p.peers.iter().all(|x| !x.shape.causal));
        // --causal on: flashcore causal, peers not.
        let c = plan(0x5eed, true);
        assert!(c.cases.iter().all(|x| x.problem.causal));
        assert!(c.peers.iter().all(|x| !x.shape.causal));
        assert!(c.notes.iter().any(|n| n.contains("--causal on")));
    }

    const ANCHORS: &str = "# Decode / KV-cache shapes on an H100 80GB HBM3, PyTorch 2.11+cu130, cuDNN 9.19, bf16.\n\
# Q [B,Hq,Sq,D], K/V [B,Hkv,Sk,D] contiguous, F.scaled_dot_product_attention(enable_gqa=True, is_causal=False),\n\
#   190 us (8,1,8192), 338 us (1,1,32768), 378 us (32,1,4096), 105 us (4,128,8192).\n\
B=8 Hq=32 Hkv=8 Sq=1 Sk=8192 D=128 bf16 sdpa_flash      95.5 us     2811 GB/s\n\
B=8 Hq=32 Hkv=8 Sq=1 Sk=8192 D=128 bf16 sdpa_cudnn      94.2 us     2850 GB/s\n\
B=4 Hq=32 Hkv=8 Sq=128 Sk=8192 D=128 bf16 sdpa_cudnn     108.6 us     1236 GB/s\n\
B=4 H=16 S=2048 D=64 causal=0 cudnn  162.4 us  423.1 TFLOP/s rel=2.71e-04\n\
garbage line\n";

    #[test]
    fn anchor_lines_parse() {
        let a = parse_anchors("h100-decode-peers.txt", ANCHORS);
        assert_eq!(a.len(), 3, "{a:#?}");
        assert_eq!(a[0].shape, ROWS[1].peer_shape());
        assert_eq!(
            (a[0].backend.as_str(), a[0].us, a[0].gbps),
            ("sdpa_flash", 95.5, Some(2811.0))
        );
        assert_eq!(a[1].backend, "sdpa_cudnn");
        assert_eq!(a[2].shape, ROWS[6].peer_shape());
        assert_eq!(a[2].file, "h100-decode-peers.txt");
        // The dense anchor files have no decode lines.
        let dense = "B=1 H=8 S=512 D=64 causal=0 cudnn  21.2 us  25.3 TFLOP/s rel=2.74e-04\n";
        assert!(parse_anchors("h100-torch-sdpa-fp16.txt", dense).is_empty());
        // A causal word and another dtype.
        let c = parse_anchors(
            "x.txt",
            "B=1 Hq=8 Hkv=8 Sq=4 Sk=4 D=64 f16 causal=1 sdpa_flash 3.0 us\n",
        );
        assert_eq!(c.len(), 1);
        assert!(c[0].shape.causal);
        assert_eq!(c[0].shape.dtype, DType::F16);
        assert_eq!(c[0].gbps, None);
    }

    #[test]
    fn anchor_files_load_from_a_directory() {
        let dir = std::env::temp_dir().join(format!("decode-anchors-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("h100-decode-peers.txt"), ANCHORS).unwrap();
        std::fs::write(
            dir.join("h100-torch-sdpa-fp16.txt"),
            "B=1 H=8 S=512 D=64 causal=0 cudnn 21.2 us\n",
        )
        .unwrap();
        std::fs::write(dir.join("notes.md"), ANCHORS).unwrap();
        let (a, note) = load_anchors(&dir).unwrap();
        assert_eq!(a.len(), 3);
        assert!(note.contains("h100-decode-peers.txt (3 numbers)"), "{note}");
        assert!(!note.contains("fp16"), "{note}");
        assert_eq!(anchor_dir(Some(&dir)), Some(dir.clone()));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(load_anchors(&dir).is_err());
    }

    #[test]
    fn the_shared_decode_anchors_parse_if_present() {
        for dir in ["/work/shared/anchors", "../../shared/anchors"] {
            let dir = Path::new(dir);
            if !dir.join("h100-decode-peers.txt").is_file() {
                continue;
            }
            let (a, _) = load_anchors(dir).unwrap();
            assert!(a.len() >= 8, "{}", a.len());
            for x in &a {
                if let Some(g) = x.gbps {
                    // The file's GB/s is our formula on its µs.
                    let kv = kv_bytes(x.shape.batch, x.shape.heads_kv, x.shape.seq_k, 128);
                    assert!((gbps(kv, x.us) / g - 1.0).abs() < 0.01, "{x:?}");
                }
                assert!(ROWS.iter().any(|r| r.peer_shape() == x.shape), "{x:?}");
            }
            return;
        }
    }

    fn timed(case: &str, imp: &str, source: Source, us: f64) -> ModeRow {
        let mut t = Timing::from_flops(1e9, None, Some(us)).unwrap();
        t.check = (source == Source::Flashcore).then(|| "ok 0.30 (512 rows)".to_string());
        ModeRow {
            case: case.into(),
            implementation: imp.into(),
            source,
            outcome: Outcome::Timed(t),
        }
    }

    /// A decode report: two rows timed (one fast, one slow), one wrong, the rest missing.
    pub fn fixture() -> ModeReport {
        let p = plan(0x5eed, false);
        let mut d = info(false);
        d.copies = vec![
            CopyTiming {
                bytes: 128 << 20,
                us: 200.0,
                calls: 200,
                repeats: 15,
                pairs: 2,
            },
            CopyTiming {
                bytes: 256 << 20,
                us: 380.0,
                calls: 100,
                repeats: 15,
                pairs: 2,
            },
        ];
        d.copy_note = Some("512 MiB and 1024 MiB not timed in this fixture".into());
        // 128 MiB read at 2581 GB/s, 256 MiB at 2826 GB/s: just under what 1.05× row 1's best
        // peer (cuDNN, 94.2 µs, 2850 GB/s) needs.
        let probe = |bytes: u64, us: f64| ReadProbeTiming {
            kind: "ldg".into(),
            bytes,
            us,
            calls: 400,
            repeats: 15,
            sources: 2,
            grid: 528,
            block: 512,
        };
        // The TMA probe: slower at 128 MiB, faster at 256 (the faster one counts).
        let bulk = |bytes: u64, us: f64| ReadProbeTiming {
            kind: "bulk:32768:4:1".into(),
            grid: 132,
            block: 32,
            ..probe(bytes, us)
        };
        d.read_probes = vec![
            probe(128 << 20, 52.0),
            bulk(128 << 20, 53.0),
            probe(256 << 20, 96.0),
            bulk(256 << 20, 95.0),
        ];
        d.read_probe_note = Some("512 MiB and 1024 MiB not probed in this fixture".into());
        d.gemm = Some(GemmPeak {
            dtype: DType::Bf16,
            n: 8192,
            us: 1570.0,
            tflops: 700.0,
        });
        d.anchors = parse_anchors("h100-decode-peers.txt", ANCHORS);
        d.anchors_note = Some("anchors: h100-decode-peers.txt (3 numbers)".into());
        let (r0, r1) = (ROWS[0], ROWS[1]);
        let rows = vec![
            // 128 MiB at 60 µs against a 100 µs copy: 167 % of the ceiling.
            timed(
                &r0.case_key(Storage::Contiguous),
                "persistent-hopper",
                Source::Flashcore,
                60.0,
            ),
            timed(
                &r0.case_key(Storage::Paged),
                "persistent-hopper",
                Source::Flashcore,
                64.0,
            ),
            ModeRow {
                case: r0.case_key(Storage::Dense),
                implementation: "persistent-hopper".into(),
                source: Source::Flashcore,
                outcome: Outcome::Wrong {
                    message: "sequence 0: error ratio 3.1".into(),
                },
            },
            // 256 MiB at 200 µs against a 190 µs copy: 95 %; peers at 94.2 µs: 0.47x.
            timed(
                &r1.case_key(Storage::Contiguous),
                "persistent-hopper",
                Source::Flashcore,
                200.0,
            ),
            ModeRow {
                case: r1.case_key(Storage::Paged),
                implementation: "persistent-hopper".into(),
                source: Source::Flashcore,
                outcome: Outcome::Unsupported {
                    reason: "paged: no".into(),
                },
            },
            timed(&r0.key(), "sdpa_flash", Source::Peer, 66.0),
            timed(&r0.key(), "sdpa_cudnn", Source::Peer, 70.0),
            timed(&r1.key(), "sdpa_flash", Source::Peer, 96.0),
            timed(&r1.key(), "sdpa_cudnn", Source::Peer, 94.2),
            ModeRow {
                case: r1.key(),
                implementation: "fa3".into(),
                source: Source::Peer,
                outcome: Outcome::Error {
                    message: "RuntimeError: nope".into(),
                },
            },
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
        cases.extend(p.peers.iter().map(|c| CaseInfo {
            key: c.key.clone(),
            label: c.label.clone(),
            flops: c.flops,
        }));
        ModeReport {
            suite: Suite::Decode,
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
                graph_threshold_us: crate::bench::modes::GRAPH_ALWAYS_US,
                graph_calls: 50,
                check_rows: 512,
                max_seconds_per_shape: 2.0,
                quick: false,
                command: "xtask bench-all --suite decode".into(),
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
            decode: Some(d),
        }
    }

    #[test]
    fn lines_carry_the_ceiling_and_the_peer_ratio() {
        let r = fixture();
        let d = r.decode.as_ref().unwrap();
        let l = lines(&r, d);
        assert_eq!(l.len(), 5, "{l:#?}");
        let c0 = &l[0];
        assert_eq!((c0.storage, c0.us), (Storage::Contiguous, Some(60.0)));
        assert!((c0.ceiling_percent.unwrap() - 100.0 * 100.0 / 60.0).abs() < 1e-9);
        assert_eq!(c0.ceiling_met, Some(true));
        assert_eq!(c0.peer, Some(("sdpa_flash".to_string(), 66.0)));
        assert!((c0.vs_peer.unwrap() - 1.1).abs() < 1e-12);
        assert_eq!(c0.peer_met, Some(true));
        let p0 = &l[1];
        assert!((p0.vs_peer.unwrap() - 66.0 / 64.0).abs() < 1e-12);
        assert_eq!(p0.peer_met, Some(false), "1.03 < 1.05");
        let dense = &l[2];
        assert_eq!(dense.storage, Storage::Dense);
        assert!(dense.missing.as_deref().unwrap().starts_with("WRONG"));
        assert_eq!((dense.ceiling_met, dense.peer_met), (None, None));
        let c1 = &l[3];
        assert!((c1.ceiling_percent.unwrap() - 95.0).abs() < 1e-9);
        assert_eq!(c1.ceiling_met, Some(true));
        assert_eq!(c1.peer.as_ref().unwrap().0, "sdpa_cudnn");
        assert_eq!(c1.peer_met, Some(false));
        assert!(l[4].missing.as_deref().unwrap().contains("unsupported"));
        assert_eq!(best_peer(&r, &ROWS[2].key()), None);
    }

    #[test]
    fn the_peer_target_is_set_against_the_read_probe() {
        let r = fixture();
        let d = r.decode.as_ref().unwrap();
        assert_eq!(d.read_probe_gbps(128 << 20), Some(gbps(128 << 20, 52.0)));
        assert_eq!(d.read_probe_gbps(512 << 20), None);
        let n = peer_needs(&r, d);
        assert_eq!(n.len(), ROWS.len());
        // Row 0: sdpa_flash at 66 µs reads 2034 GB/s; 1.05× that is 2135, 0.83 of the probe.
        let n0 = &n[0];
        assert_eq!(n0.peer, Some(("sdpa_flash".to_string(), 66.0)));
        let needed = gbps(128 << 20, 66.0) * 1.05;
        assert!((n0.needed_gbps.unwrap() - needed).abs() < 1e-9);
        assert!((n0.needed_gbps.unwrap() - 2135.3).abs() < 0.1);
        let ratio = needed / gbps(128 << 20, 52.0);
        assert!((n0.needed_over_probe.unwrap() - ratio).abs() < 1e-12);
        assert_eq!(n0.within_probe(), Some(true));
        // Row 1: cuDNN at 94.2 µs reads 2850 GB/s; 1.05× is 2992, above the probe's 2826.
        let n1 = &n[1];
        assert!((n1.needed_gbps.unwrap() - 2992.1).abs() < 0.1);
        assert!((n1.needed_over_probe.unwrap() - 1.0589).abs() < 1e-4);
        assert_eq!(n1.within_probe(), Some(false));
        // Row 2: no peer and no probe.
        assert_eq!((n[2].needed_gbps, n[2].probe_gbps), (None, None));
        assert_eq!(n[2].within_probe(), None);
        assert_eq!((n[2].needed_tflops, n[2].within_gemm()), (None, None));
        // Against the GEMM a decode row asks for next to nothing: 0.54 GFLOP in 66 / 1.05 µs.
        assert!((n0.flops - 4.0 * 32.0 * 32768.0 * 128.0).abs() < 1.0);
        assert!((n0.needed_tflops.unwrap() - n0.flops / 66.0 / 1e6 * 1.05).abs() < 1e-12);
        assert_eq!(n0.gemm_tflops, Some(700.0));
        assert_eq!(n0.within_gemm(), Some(true));
    }

    #[test]
    fn the_peer_target_is_set_against_the_gemm_on_compute_bound_rows() {
        // Chunked prefill (68.7 GFLOP) with a peer at 95 µs: 723 TFLOP/s, 1.05× that is 760,
        // above the fixture's 700 TFLOP/s GEMM; at 110 µs 1.05× asks for 656, within it.
        let chunk = ROWS[6];
        assert_eq!(chunk.what, "chunked prefill");
        for (peer_us, within) in [(95.0, false), (110.0, true)] {
            let mut r = fixture();
            r.rows
                .push(timed(&chunk.key(), "sdpa_cudnn", Source::Peer, peer_us));
            let d = r.decode.as_ref().unwrap();
            let n = &peer_needs(&r, d)[6];
            assert!((n.flops / 1e9 - 68.72).abs() < 0.01, "{}", n.flops);
            let needed = n.flops / peer_us / 1e6 * 1.05;
            assert!((n.needed_tflops.unwrap() - needed).abs() < 1e-9);
            assert!((n.needed_over_gemm.unwrap() - needed / 700.0).abs() < 1e-12);
            assert_eq!(n.within_gemm(), Some(within));
            // Its bytes are far within the read probe's reach: no probe at 128 MiB needed more.
            assert_eq!(n.within_probe(), Some(true));
        }
        // Without a GEMM time there is no verdict, and the report says why.
        let mut r = fixture();
        r.rows
            .push(timed(&chunk.key(), "sdpa_cudnn", Source::Peer, 95.0));
        let d = r.decode.as_mut().unwrap();
        (d.gemm, d.gemm_note) = (None, Some("--no-gemm".into()));
        let d = r.decode.as_ref().unwrap();
        assert_eq!(peer_needs(&r, d)[6].within_gemm(), None);
        assert!(render(&r, d).contains("GEMM: not timed (--no-gemm)."));
    }

    #[test]
    fn decode_markdown_layout() {
        let r = fixture();
        let md = crate::bench::modes::render_markdown(&r);
        assert!(md.contains("## Decode"), "{md}");
        assert!(!md.contains("## Comparisons"), "{md}");
        assert!(md.contains("every call also as CUDA-graph replays"), "{md}");
        assert!(md.contains(
            "| B=1 Hq=32 Hkv=8 Sq=1 Sk=32768 D=128 (decode, one long sequence) | 128 | persistent-hopper | contiguous | 60.00 | 2237 | 167 % | yes | sdpa_flash 66.00 | 1.10× | yes |"
        ), "{md}");
        assert!(md.contains("| paged 64 | 64.00 |"), "{md}");
        assert!(md.contains("| 1.03× | NO |"), "{md}");
        assert!(
            md.contains("- persistent-hopper: ≥ 90 % of the copy at 3 of 4 (row, storage) pairs (1 without a number); ≥ 1.05× the best peer at 1 of 4 (row, storage) pairs (1 without a number)"),
            "{md}"
        );
        // Peers beside the anchors: live 94.2 against the anchor's 94.2.
        assert!(
            md.contains("| sdpa_cudnn | 94.20 | 2850 | 202 % | 94.20 | 2850 | 1.00 |"),
            "{md}"
        );
        assert!(md.contains("| fa3 | error: RuntimeError: nope |"), "{md}");
        // An anchor without a live row still shows.
        assert!(
            md.contains("(chunked prefill) | sdpa_cudnn | not run | — | — | 108.6 | 1236 | — |"),
            "{md}"
        );
        // Copies: ceiling and traffic.
        assert!(
            md.contains("| 128 | 200.0 | 671 | 1342 | 200 | 15 | 2 |"),
            "{md}"
        );
        assert!(md.contains("| 512 | — |"), "{md}");
        // The read probes after the copies: 52 µs over 128 MiB is 2581 GB/s, the faster there.
        assert!(md.contains("### Read probes"), "{md}");
        assert!(
            md.contains("| 128 | ldg | 52.00 | 2581 | 400 | 15 | 2 | 528 × 512 | yes |"),
            "{md}"
        );
        assert!(
            md.contains("| 128 | bulk:32768:4:1 | 53.00 | 2532 | 400 | 15 | 2 | 132 × 32 |  |"),
            "{md}"
        );
        assert!(
            md.contains("| 256 | bulk:32768:4:1 | 95.00 | 2826 | 400 | 15 | 2 | 132 × 32 | yes |"),
            "{md}"
        );
        assert!(
            md.contains("| 512 | — | — | — | — | — | — | — | — |"),
            "{md}"
        );
        assert!(
            md.contains("read probe: 512 MiB and 1024 MiB not probed"),
            "{md}"
        );
        assert!(
            md.contains("Read probes: kernels that only read the same N bytes"),
            "{md}"
        );
        // What 1.05× the best peer needs, against the probe.
        assert!(
            md.contains("### Is 1.05× the best peer within the read probe and the GEMM rate?"),
            "{md}"
        );
        assert!(
            md.contains("(decode, one long sequence) | 128 | 0.5 | sdpa_flash 66.00 | 2034 | 2135 | 2581 | 0.83 | yes | 8.5 | 700.0 | 0.012 | yes |"),
            "{md}"
        );
        assert!(
            md.contains("(decode) | 256 | 1.1 | sdpa_cudnn 94.20 | 2850 | 2992 | 2826 | 1.06 | NO | 12.0 | 700.0 | 0.017 | yes |"),
            "{md}"
        );
        assert!(
            md.contains(
                "Sk=4096 D=128 (decode) | 512 | 2.1 | — | — | — | — | — | — | — | 700.0 | — | — |"
            ),
            "{md}"
        );
        assert!(
            md.contains("GEMM: cuBLAS bf16 8192×8192×8192 (cublasGemmEx, f32 accumulate), 1570.0 µs a call, 700.0 TFLOP/s"),
            "{md}"
        );
        insta::assert_snapshot!("bench_decode_table", md);
    }

    #[test]
    fn decode_report_round_trips_through_json() {
        let r = fixture();
        let j = serde_json::to_string_pretty(&r).unwrap();
        assert_eq!(serde_json::from_str::<ModeReport>(&j).unwrap(), r);
        // A decode report from before the read probe reads back without it.
        let mut old: serde_json::Value = serde_json::from_str(&j).unwrap();
        let decode = old["decode"].as_object_mut().unwrap();
        assert!(decode.remove("read_probes").is_some());
        assert!(decode.remove("read_probe_note").is_some());
        let back = serde_json::from_value::<ModeReport>(old).unwrap();
        let mut want = r.clone();
        let d = want.decode.as_mut().unwrap();
        (d.read_probes, d.read_probe_note) = (vec![], None);
        assert_eq!(back, want);
        // One from before the TMA probe: its probes had no kind, and were all `ldg`.
        let mut old: serde_json::Value = serde_json::from_str(&j).unwrap();
        for p in old["decode"]["read_probes"].as_array_mut().unwrap() {
            assert!(p.as_object_mut().unwrap().remove("kind").is_some());
        }
        let back = serde_json::from_value::<ModeReport>(old).unwrap();
        let kinds: Vec<&str> = back
            .decode
            .as_ref()
            .unwrap()
            .read_probes
            .iter()
            .map(|p| p.kind.as_str())
            .collect();
        assert_eq!(kinds, ["ldg"; 4]);
        // A report of another suite has no decode part, and one without the field reads back.
        let v = crate::bench::modes::tests::fixture();
        let j = serde_json::to_string(&v).unwrap();
        assert!(!j.contains("\"decode\""));
        assert_eq!(serde_json::from_str::<ModeReport>(&j).unwrap(), v);
    }
}
