//! The decode suite of `bench-all` (`--suite decode`, issue 12): what it runs and the bandwidth
//! arithmetic (K/V bytes read, GB/s, percent of the copy ceiling, speed against the best peer);
//! the anchor file it cross-checks with (`anchors.rs`) and its tables (`report.rs`). Nothing here
//! touches a GPU; `modes_gpu` times the cases, the references and the peers.
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
//! - A cuBLAS GEMM in the suite's dtype, timed the same way: the compute reference the peer
//!   target's TFLOP/s is set against (chunked prefill is held by the tensor cores, not by HBM).
//! - `--kv-dtype e4m3` adds each row on an e4m3 cache, contiguous and paged (block 64), with
//!   descale factors per KV head: the same true values quantized, a byte an element. Their
//!   GB/s count the bytes such a call reads (K and V at one byte, Q and O at two,
//!   [`DecodeShape::e4m3_bytes`]), against the copy and the read probes of that many bytes in
//!   the same run, and against the same bf16 peers (the bandwidth reference) and flashcore's
//!   bf16 cache of the same storage.

use flashcore::{KvScales, Layout};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::modes::cases::{
    cache_case, dense_case_heads, Comparison, Heads, KvKind, Measure, PeerCase, PeerShape, Side,
    SuitePlan, Target, DTYPE,
};
use super::report::GemmPeak;
use super::suite::Suite;
use crate::mode_case::KvDtype;

mod anchors;
mod report;

pub use anchors::{anchor_dir, load_anchors, DecodeAnchor};
pub use report::render;

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
        head_dim: HEAD_DIM,
        what,
    }
}

/// The rows' head dim unless `--decode-head-dim` says otherwise.
pub const HEAD_DIM: usize = 128;

/// [`ROWS`] at `head_dim`.
pub fn rows(head_dim: usize) -> Vec<DecodeShape> {
    ROWS.iter()
        .map(|r| DecodeShape { head_dim, ..*r })
        .collect()
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
    /// `--kv-dtype e4m3`: the contiguous cache as e4m3 bytes, descale factors per KV head.
    #[serde(rename = "e4m3-contiguous")]
    E4m3Contiguous,
    /// The same keys and values in e4m3 pages (block 64, shuffled table).
    #[serde(rename = "e4m3-paged")]
    E4m3Paged,
}

impl Storage {
    /// Every row's bf16 cases.
    pub const ALL: [Storage; 4] = [
        Storage::Contiguous,
        Storage::Paged,
        Storage::Dense,
        Storage::DenseBhsd,
    ];
    /// The cases `--kv-dtype e4m3` adds to every row.
    pub const E4M3: [Storage; 2] = [Storage::E4m3Contiguous, Storage::E4m3Paged];

    /// A row's storages: [`Storage::ALL`], and [`Storage::E4M3`] with `--kv-dtype e4m3`.
    pub fn of_run(kv: Option<KvDtype>) -> Vec<Storage> {
        let mut v = Storage::ALL.to_vec();
        if kv == Some(KvDtype::E4m3) {
            v.extend(Storage::E4M3);
        }
        v
    }

    /// Whether K and V are e4m3 bytes.
    pub fn is_e4m3(self) -> bool {
        matches!(self, Storage::E4m3Contiguous | Storage::E4m3Paged)
    }

    /// The bf16 storage the e4m3 one quantizes (itself for the others).
    pub fn bf16_twin(self) -> Storage {
        match self {
            Storage::E4m3Contiguous => Storage::Contiguous,
            Storage::E4m3Paged => Storage::Paged,
            other => other,
        }
    }

    /// The case key's suffix.
    pub fn suffix(self) -> String {
        match self {
            Storage::Contiguous => "contig".into(),
            Storage::Paged => format!("paged-{BLOCK_SIZE}"),
            Storage::Dense => "dense".into(),
            Storage::DenseBhsd => "dense-bhsd".into(),
            Storage::E4m3Contiguous => "e4m3-contig".into(),
            Storage::E4m3Paged => format!("e4m3-paged-{BLOCK_SIZE}"),
        }
    }

    pub fn text(self) -> String {
        match self {
            Storage::Contiguous => "contiguous".into(),
            Storage::Paged => format!("paged {BLOCK_SIZE}"),
            Storage::Dense => "dense".into(),
            Storage::DenseBhsd => "dense bhsd".into(),
            Storage::E4m3Contiguous => "e4m3 contiguous".into(),
            Storage::E4m3Paged => format!("e4m3 paged {BLOCK_SIZE}"),
        }
    }

    /// Whether the issue's targets apply (the bf16 contiguous and paged caches; the dense cases
    /// are diagnostics, and the e4m3 caches have a table of their own).
    pub fn has_targets(self) -> bool {
        matches!(self, Storage::Contiguous | Storage::Paged)
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

    /// Bytes a call on the e4m3 cache reads and writes ([`e4m3_bytes`]).
    pub fn e4m3_bytes(&self) -> u64 {
        e4m3_bytes(&self.peer_shape())
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

/// Bytes a call on an e4m3 cache of this row moves: K and V at one byte an element
/// (2 · B · Hkv · Sk · D) and Q read and O written at two (2 · B · Sq · Hq · D · 2). Q and O
/// count here because they are no longer small beside the halved K/V at the chunked-prefill row
/// (a ninth of it); they are under 0.5 % at the other rows.
pub fn e4m3_bytes(s: &PeerShape) -> u64 {
    let kv = 2 * (s.batch * s.heads_kv * s.seq_k * s.head_dim) as u64;
    let q_o = 2 * (s.batch * s.seq * s.heads * s.head_dim) as u64 * 2;
    kv + q_o
}

/// The descale tables of a row's e4m3 cases (`[heads_kv]`, K's then V's), the same for its
/// contiguous and paged case (the paged one holds the contiguous one's bytes): powers of two
/// around what a quantizer gives unit-scale bf16 values (amax / 448 ≈ 2^-6), 2^-7 ..= 2^-5, so
/// that stored × descale is exact for the oracle (`mode_case::draw_fp8_side`).
pub fn e4m3_descales(seed: u64, row_key: &str, heads_kv: usize) -> (Vec<f32>, Vec<f32>) {
    let h = row_key.bytes().fold(seed ^ 0x6534_6d33, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    });
    let mut rng = rand::rngs::StdRng::seed_from_u64(h);
    let mut table = || -> Vec<f32> {
        (0..heads_kv)
            .map(|_| 2f32.powi(rng.gen_range(-7..=-5)))
            .collect()
    };
    let k = table();
    (k, table())
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
/// non-causal, since SDPA cannot take that mask. `kv` e4m3 adds the e4m3 caches
/// ([`Storage::E4M3`]).
pub fn plan(seed: u64, causal: bool, head_dim: usize, kv: Option<KvDtype>) -> SuitePlan {
    let mut cases = Vec::new();
    let mut peers = Vec::new();
    let mut comparisons = Vec::new();
    for r in &rows(head_dim) {
        let used = vec![r.seq_k; r.batch];
        let contig_key = r.case_key(Storage::Contiguous);
        for storage in Storage::of_run(kv) {
            let key = r.case_key(storage);
            let mut c = match storage {
                Storage::Contiguous
                | Storage::Paged
                | Storage::E4m3Contiguous
                | Storage::E4m3Paged => {
                    let kv = if storage.bf16_twin() == Storage::Paged {
                        KvKind::Paged {
                            block_size: BLOCK_SIZE,
                        }
                    } else {
                        KvKind::Contiguous
                    };
                    let mut c =
                        cache_case(&key, r.heads(), r.seq_q, r.seq_k, &used, causal, kv, seed);
                    if storage.is_e4m3() {
                        let (k, v) = e4m3_descales(seed, &r.key(), r.heads_kv);
                        c.problem.modes.kv_fp8 = Some(KvScales::PerKvHead);
                        c.draw.k_descale = Some(k);
                        c.draw.v_descale = Some(v);
                        c.label = format!("{}, e4m3 K/V, descale per KV head", c.label);
                    }
                    c
                }
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
            if storage == Storage::E4m3Paged {
                // The e4m3 contiguous cache's bytes, in pages. (That one draws its own values:
                // the bf16 cache's would need a second set of references after quantizing.)
                c.data_from = Some(r.case_key(Storage::E4m3Contiguous));
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
    if kv == Some(KvDtype::E4m3) {
        notes.push(format!(
            "--kv-dtype e4m3: each row also on an e4m3 cache (OCP FP8 E4M3 bytes, f32 descale per KV head, powers of two in 2^-7..=2^-5), contiguous and paged (block {BLOCK_SIZE}, the same bytes), from bf16 N(0, 1) values quantized; Q and O stay bf16; the peers stay bf16 (the bandwidth reference)"
        ));
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
    /// Bytes a call on the row's e4m3 cache moves ([`e4m3_bytes`]), when the run has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e4m3_bytes: Option<u64>,
}

impl DecodeRowInfo {
    /// The bytes a storage's GB/s count: the bf16 K/V, or what the e4m3 call moves.
    pub fn bytes(&self, storage: Storage) -> u64 {
        match (storage.is_e4m3(), self.e4m3_bytes) {
            (true, Some(b)) => b,
            (true, None) => e4m3_bytes(&self.shape),
            (false, _) => self.kv_bytes,
        }
    }
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
pub fn info(causal: bool, head_dim: usize, kv: Option<KvDtype>) -> DecodeInfo {
    let e4m3 = kv == Some(KvDtype::E4m3);
    DecodeInfo {
        causal,
        rows: rows(head_dim)
            .iter()
            .map(|r| DecodeRowInfo {
                key: r.key(),
                shape: r.peer_shape(),
                what: r.what.into(),
                kv_bytes: r.kv_bytes(),
                cases: Storage::of_run(kv)
                    .into_iter()
                    .map(|s| (s, r.case_key(s)))
                    .collect(),
                e4m3_bytes: e4m3.then(|| r.e4m3_bytes()),
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

/// The distinct byte counts the copies and read probes are timed at, in first-row order: the
/// bf16 K/V, then what the e4m3 calls move (when the run has them).
pub fn copy_sizes(info: &DecodeInfo) -> Vec<u64> {
    let mut v: Vec<u64> = Vec::new();
    let sizes = info.rows.iter().map(|r| r.kv_bytes);
    for b in sizes.chain(info.rows.iter().filter_map(|r| r.e4m3_bytes)) {
        if !v.contains(&b) {
            v.push(b);
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
}

#[cfg(test)]
pub mod tests {
    use super::anchors::parse_anchors;
    use super::*;
    use crate::bench::modes::tests::{assert_blocks_owned_once, assert_valid, h100_peers};
    use crate::bench::modes::ModeReport;
    use crate::bench::modes::{CaseInfo, ModeRow};
    use crate::bench::report::{assert_json_round_trip, fixture_run, Settings, Timing};
    use crate::bench::report::{Outcome, Source};
    use flashcore::DType;
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
        let i = info(false, HEAD_DIM, None);
        assert_eq!(
            copy_sizes(&i),
            [128 << 20, 256 << 20, 512 << 20, 1 << 30],
            "one copy per distinct size"
        );
    }

    #[test]
    fn the_plan_has_contiguous_paged_and_dense_cases_on_the_same_data() {
        let p = plan(0x5eed, false, HEAD_DIM, None);
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
            assert_blocks_owned_once(pg.draw.block_table.as_ref().unwrap(), num_blocks);
            assert!(dn.problem.modes.is_dense());
            assert!(dn.draw.seqused_k.is_none());
            assert_eq!(pg.data_from.as_deref(), Some(c.key.as_str()));
            assert_eq!(dn.data_from.as_deref(), Some(c.key.as_str()));
            assert_eq!(c.data_from, None);
        }
        for x in &p.cases {
            assert_valid(x);
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
        let c = plan(0x5eed, true, HEAD_DIM, None);
        assert!(c.cases.iter().all(|x| x.problem.causal));
        assert!(c.peers.iter().all(|x| !x.shape.causal));
        assert!(c.notes.iter().any(|n| n.contains("--causal on")));
    }

    /// `--kv-dtype e4m3`: each row's bf16 cases as before, then an e4m3 contiguous cache (its
    /// own data) and an e4m3 paged one holding its bytes, both with the same descale factors
    /// per KV head (powers of two), valid problems and tables; no other case changes.
    #[test]
    fn the_e4m3_plan_adds_contiguous_and_paged_e4m3_caches() {
        let plain = plan(0x5eed, false, HEAD_DIM, None);
        let p = plan(0x5eed, false, HEAD_DIM, Some(KvDtype::E4m3));
        assert_eq!(p.cases.len(), 6 * ROWS.len());
        assert_eq!(p.peers, plain.peers);
        for (r, six) in ROWS.iter().zip(p.cases.chunks(6)) {
            let [.., ec, ep] = six else { panic!() };
            for (x, y) in six[..4]
                .iter()
                .zip(plain.cases.iter().filter(|c| c.key.starts_with(&r.key())))
            {
                assert_eq!((&x.key, &x.problem, &x.draw), (&y.key, &y.problem, &y.draw));
            }
            assert_eq!(ec.key, format!("{}/e4m3-contig", r.key()));
            assert_eq!(ep.key, format!("{}/e4m3-paged-64", r.key()));
            assert_eq!(ec.data_from, None);
            assert_eq!(ep.data_from.as_deref(), Some(ec.key.as_str()));
            for x in [ec, ep] {
                assert_eq!(x.problem.modes.kv_fp8, Some(KvScales::PerKvHead));
                assert_eq!(x.problem.dtype, flashcore::DType::Bf16);
                assert!(x.label.contains("e4m3"));
                for t in [&x.draw.k_descale, &x.draw.v_descale] {
                    let t = t.as_ref().unwrap();
                    assert_eq!(t.len(), r.heads_kv);
                    assert!(t
                        .iter()
                        .all(|f| (-7.0..=-5.0).contains(&f.log2()) && f.log2().fract() == 0.0));
                }
                assert_valid(x);
            }
            assert_eq!(ec.draw.k_descale, ep.draw.k_descale);
            assert_eq!(ec.draw.v_descale, ep.draw.v_descale);
            assert_ne!(ec.draw.k_descale, ec.draw.v_descale, "{}", r.key());
            assert_eq!(ec.problem.modes.kv, KvStorage::Dense);
            assert!(matches!(
                ep.problem.modes.kv,
                KvStorage::Paged { block_size: 64, .. }
            ));
            assert_eq!(ec.flops, six[0].flops);
        }
        // No target on the e4m3 caches: their table has none.
        assert!(p
            .comparisons
            .iter()
            .filter(|c| c.den.0.contains("e4m3"))
            .all(|c| c.target.is_none()));
        assert!(p.notes.iter().any(|n| n.contains("--kv-dtype e4m3")));
    }

    #[test]
    fn e4m3_bytes_count_one_byte_of_k_and_v_and_two_of_q_and_o() {
        // (8, 32, 8, 1, 8192, 128): K+V 2·8·8·8192·128 = 128 MiB, Q+O 2·8·1·32·128·2 = 128 KiB.
        assert_eq!(ROWS[1].e4m3_bytes(), (128 << 20) + (128 << 10));
        // Chunked prefill (4, 32, 8, 128, 8192): 64 MiB of K/V, 4 MiB each of Q and O.
        assert_eq!(ROWS[6].e4m3_bytes(), (64 << 20) + (8 << 20));
        for r in rows(64).iter().chain(&ROWS) {
            assert!(
                r.e4m3_bytes().is_multiple_of(16),
                "the read probe's 16-byte loads"
            );
            assert!(r.e4m3_bytes() < r.kv_bytes());
        }
        let i = info(false, HEAD_DIM, Some(KvDtype::E4m3));
        let row = &i.rows[1];
        assert_eq!(row.e4m3_bytes, Some(ROWS[1].e4m3_bytes()));
        assert_eq!(row.bytes(Storage::E4m3Paged), ROWS[1].e4m3_bytes());
        assert_eq!(row.bytes(Storage::Paged), ROWS[1].kv_bytes());
        assert_eq!(row.cases.len(), 6);
        // The copies and probes are timed at the e4m3 byte counts too, after the bf16 ones.
        let sizes = copy_sizes(&i);
        assert_eq!(&sizes[..4], [128 << 20, 256 << 20, 512 << 20, 1 << 30]);
        assert!(sizes.contains(&ROWS[6].e4m3_bytes()));
        // Q and O make each row's count its own (the rows' K/V come in four sizes), except that
        // rows 2 and 4 move the same bytes.
        assert_eq!(ROWS[2].e4m3_bytes(), ROWS[4].e4m3_bytes());
        assert_eq!(sizes.len(), 4 + ROWS.len() - 1, "{sizes:?}");
        assert_eq!(sizes[4], ROWS[0].e4m3_bytes());
        // Without the option nothing changes.
        assert!(info(false, HEAD_DIM, None)
            .rows
            .iter()
            .all(|r| r.e4m3_bytes.is_none() && r.cases.len() == 4));
    }

    pub(crate) const ANCHORS: &str = "# Decode / KV-cache shapes on an H100 80GB HBM3, PyTorch 2.11+cu130, cuDNN 9.19, bf16.\n\
# Q [B,Hq,Sq,D], K/V [B,Hkv,Sk,D] contiguous, F.scaled_dot_product_attention(enable_gqa=True, is_causal=False),\n\
#   190 us (8,1,8192), 338 us (1,1,32768), 378 us (32,1,4096), 105 us (4,128,8192).\n\
B=8 Hq=32 Hkv=8 Sq=1 Sk=8192 D=128 bf16 sdpa_flash      95.5 us     2811 GB/s\n\
B=8 Hq=32 Hkv=8 Sq=1 Sk=8192 D=128 bf16 sdpa_cudnn      94.2 us     2850 GB/s\n\
B=4 Hq=32 Hkv=8 Sq=128 Sk=8192 D=128 bf16 sdpa_cudnn     108.6 us     1236 GB/s\n\
B=4 H=16 S=2048 D=64 causal=0 cudnn  162.4 us  423.1 TFLOP/s rel=2.71e-04\n\
garbage line\n";

    pub(crate) fn timed(case: &str, imp: &str, source: Source, us: f64) -> ModeRow {
        let mut t = Timing::from_flops(1e9, None, Some(us)).unwrap();
        t.check = (source == Source::Flashcore).then(|| "ok 0.30 (512 rows)".to_string());
        ModeRow::new(case, imp, source, Outcome::Timed(t))
    }

    /// A decode report: two rows timed (one fast, one slow), one wrong, the rest missing.
    pub fn fixture() -> ModeReport {
        let p = plan(0x5eed, false, HEAD_DIM, None);
        let mut d = info(false, HEAD_DIM, None);
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
        let hopper =
            |case, outcome| ModeRow::new(case, "persistent-hopper", Source::Flashcore, outcome);
        let hopper_us = |key: String, us| timed(&key, "persistent-hopper", Source::Flashcore, us);
        let rows = vec![
            // 128 MiB at 60 µs against a 100 µs copy: 167 % of the ceiling.
            hopper_us(r0.case_key(Storage::Contiguous), 60.0),
            hopper_us(r0.case_key(Storage::Paged), 64.0),
            hopper(
                r0.case_key(Storage::Dense),
                Outcome::Wrong {
                    message: "sequence 0: error ratio 3.1".into(),
                },
            ),
            // 256 MiB at 200 µs against a 190 µs copy: 95 %; peers at 94.2 µs: 0.47x.
            hopper_us(r1.case_key(Storage::Contiguous), 200.0),
            hopper(
                r1.case_key(Storage::Paged),
                Outcome::Unsupported {
                    reason: "paged: no".into(),
                },
            ),
            timed(&r0.key(), "sdpa_flash", Source::Peer, 66.0),
            timed(&r0.key(), "sdpa_cudnn", Source::Peer, 70.0),
            timed(&r1.key(), "sdpa_flash", Source::Peer, 96.0),
            timed(&r1.key(), "sdpa_cudnn", Source::Peer, 94.2),
            ModeRow::new(
                r1.key(),
                "fa3",
                Source::Peer,
                Outcome::Error {
                    message: "RuntimeError: nope".into(),
                },
            ),
        ];
        let mut cases: Vec<CaseInfo> = p.cases.iter().map(CaseInfo::from).collect();
        cases.extend(p.peers.iter().map(CaseInfo::from));
        let (device, settings) = fixture_run("bshd", "xtask bench-all --suite decode");
        ModeReport {
            suite: Suite::Decode,
            device,
            settings: Settings {
                graph_threshold_us: crate::bench::modes::GRAPH_ALWAYS_US,
                ..settings
            },
            peers: h100_peers(),
            notes: p.notes.clone(),
            cases,
            rows,
            comparisons: p.comparisons.clone(),
            decode: Some(d),
        }
    }

    #[test]
    fn decode_report_round_trips_through_json() {
        let r = fixture();
        let j = assert_json_round_trip(&r);
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
