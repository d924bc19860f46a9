//! The decode suite's tables: per (row, generation, storage) the time, GB/s, share of the copy
//! ceiling and speed against the best peer; with `--kv-dtype e4m3` the e4m3 caches' own table
//! (GB/s of the bytes they move against the read probe of as many bytes, the bf16 peers and
//! flashcore's bf16 cache); what 1.05x the peer would ask against the read probes and the GEMM;
//! the peers beside the anchors; the copies and probes.

use super::{
    ceiling_gbps, copy_sizes, gbps, percent_of, vs_peer, DecodeInfo, DecodeRowInfo, Storage,
    BIG_KV_BYTES, CEILING_TARGET, PEER_TARGET,
};
use crate::bench::bandwidth::{READ_PROBE_BLOCK, READ_PROBE_BLOCKS_PER_SM, READ_PROBE_UNROLL};
use crate::bench::modes::report::ModeReport;
use crate::bench::report::{cell_within, fmt_us, Outcome, Source};

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

/// The main table's lines: per row, per bf16 storage, the flashcore generations in report order.
pub fn lines(r: &ModeReport, d: &DecodeInfo) -> Vec<DecodeLine> {
    all_lines(r, d)
        .into_iter()
        .filter(|l| !l.storage.is_e4m3())
        .collect()
}

/// Every (row, generation, storage) line, the e4m3 caches' too: each on the bytes of its own
/// storage (`DecodeRowInfo::bytes`), against the copy of as many bytes.
fn all_lines(r: &ModeReport, d: &DecodeInfo) -> Vec<DecodeLine> {
    let mut impls: Vec<&str> = Vec::new();
    for x in r.rows.iter().filter(|x| x.source == Source::Flashcore) {
        if !impls.contains(&x.implementation.as_str()) {
            impls.push(&x.implementation);
        }
    }
    let mut out = Vec::new();
    for row in &d.rows {
        let peer = best_peer(r, &row.key);
        for (storage, case) in &row.cases {
            let bytes = row.bytes(*storage);
            let ceiling = d.ceiling(bytes);
            for imp in &impls {
                let Some(x) = r.rows.iter().find(|x| {
                    x.case == *case && x.source == Source::Flashcore && x.implementation == *imp
                }) else {
                    continue;
                };
                let us = x.timing().map(|t| t.us);
                let gb = us.map(|us| gbps(bytes, us));
                let pct = gb.zip(ceiling).map(|(g, c)| percent_of(g, c));
                let ratio = us.zip(peer).map(|(us, (_, p))| vs_peer(p, us));
                let ceiling_applies = storage.has_targets() && bytes >= BIG_KV_BYTES;
                out.push(DecodeLine {
                    row: row.key.clone(),
                    implementation: imp.to_string(),
                    storage: *storage,
                    kv_bytes: bytes,
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

/// One (row, generation, e4m3 storage) of the e4m3 table: its line (GB/s on the bytes it
/// moves, share of the copy of as many bytes, × the best bf16 peer) with the read probe of
/// those bytes and the same generation on the bf16 cache of the same kind.
#[derive(Clone, Debug, PartialEq)]
pub struct E4m3Line {
    pub line: DecodeLine,
    /// The faster read probe over the line's bytes in this run, GB/s.
    pub probe_gbps: Option<f64>,
    pub probe_percent: Option<f64>,
    /// The same generation on the bf16 cache of the same storage, µs.
    pub bf16_us: Option<f64>,
    /// bf16 µs / e4m3 µs: above 1, the e4m3 cache is faster.
    pub vs_bf16: Option<f64>,
}

/// The e4m3 caches' lines (`--kv-dtype e4m3`; none without it).
pub fn e4m3_lines(r: &ModeReport, d: &DecodeInfo) -> Vec<E4m3Line> {
    let all = all_lines(r, d);
    all.iter()
        .filter(|l| l.storage.is_e4m3())
        .map(|l| {
            let probe_gbps = d.read_probe_gbps(l.kv_bytes);
            let bf16_us = all
                .iter()
                .find(|b| {
                    b.row == l.row
                        && b.implementation == l.implementation
                        && b.storage == l.storage.bf16_twin()
                })
                .and_then(|b| b.us);
            E4m3Line {
                probe_percent: l.gbps.zip(probe_gbps).map(|(g, p)| percent_of(g, p)),
                probe_gbps,
                vs_bf16: bf16_us.zip(l.us).map(|(b, e)| b / e),
                bf16_us,
                line: l.clone(),
            }
        })
        .collect()
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

/// The cells both decode tables (bf16 and e4m3) start a line with, "| row | MiB |
/// implementation | storage | µs | GB/s |", so that the two tables cannot drift apart.
fn leading_cells(d: &DecodeInfo, l: &DecodeLine) -> String {
    let row = d
        .rows
        .iter()
        .find(|x| x.key == l.row)
        .expect("a row of the info");
    format!(
        "| {} | {} | {} | {} | {} | {} |",
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
    )
}

/// The best peer's cell: its name and time, or "—" without one.
fn peer_cell(l: &DecodeLine) -> String {
    l.peer
        .as_ref()
        .map(|(n, us)| format!("{n} {}", fmt_us(*us)))
        .unwrap_or_else(|| "—".into())
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
        let ceiling_applies = l.storage.has_targets() && l.kv_bytes >= BIG_KV_BYTES;
        out.push_str(&format!(
            "{} {} | {} | {} | {} | {} |\n",
            leading_cells(d, l),
            opt(l.ceiling_percent, |p| format!("{p:.0} %")),
            met(l.ceiling_met, ceiling_applies),
            peer_cell(l),
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
    out.push_str(&render_e4m3(r, d));
    out.push_str(&render_peer_needs(r, d));
    out.push_str(&render_peers(r, d));
    out.push_str(&render_copies(d));
    out
}

/// The e4m3 caches' table (empty without them).
fn render_e4m3(r: &ModeReport, d: &DecodeInfo) -> String {
    let lines = e4m3_lines(r, d);
    if lines.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\n### e4m3 KV cache (--kv-dtype e4m3)\n\n\
         K and V as OCP FP8 E4M3 bytes with f32 descale factors per KV head; Q and O bf16. MiB = the bytes a call moves: K and V at one byte an element (2·B·Hkv·Sk·D) plus Q read and O written at two (2·B·Sq·Hq·D·2); GB/s = those bytes / time. Read probe and copy: the same run's, over as many bytes (the copy table below lists them). × best bf16 peer = the peer's time on the bf16 row / ours: the peers read twice the K/V bytes, so this is the gain from the format and the kernel together. bf16 / e4m3 = the same generation on the bf16 cache of the same storage, its time / this one's.\n\n\
         | row | MiB | implementation | storage | µs | GB/s | read probe GB/s | % of read probe | % of copy | best bf16 peer | × best bf16 peer | bf16 µs | bf16 / e4m3 |\n\
         |---|---:|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|\n",
    );
    // Generations that refuse e4m3 caches (every one but the decode kernel's paths) are
    // summed up after the table rather than listed line by line.
    let mut refused: Vec<(&str, usize, &str)> = Vec::new();
    for e in &lines {
        let l = &e.line;
        if let Some(reason) = l
            .missing
            .as_deref()
            .and_then(|m| m.strip_prefix("unsupported: "))
        {
            match refused
                .iter_mut()
                .find(|(imp, ..)| *imp == l.implementation)
            {
                Some(r) => r.1 += 1,
                None => refused.push((&l.implementation, 1, reason)),
            }
            continue;
        }
        out.push_str(&format!(
            "{} {} | {} | {} | {} | {} | {} | {} |\n",
            leading_cells(d, l),
            opt(e.probe_gbps, |g| format!("{g:.0}")),
            opt(e.probe_percent, |p| format!("{p:.0} %")),
            opt(l.ceiling_percent, |p| format!("{p:.0} %")),
            peer_cell(l),
            opt(l.vs_peer, |v| format!("{v:.2}×")),
            opt(e.bf16_us, fmt_us),
            opt(e.vs_bf16, |v| format!("{v:.2}×")),
        ));
    }
    if !refused.is_empty() {
        out.push('\n');
    }
    for (imp, n, reason) in refused {
        out.push_str(&format!(
            "- {} refused {n} (row, storage) pairs, e.g. {}\n",
            cell(imp),
            cell(reason)
        ));
    }
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
mod tests {
    use super::super::tests::{fixture, timed};
    use super::super::ROWS;
    use super::*;
    use crate::bench::report::assert_contains_all;

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

    /// The fixture with `--kv-dtype e4m3`'s rows: row 0 timed on both e4m3 caches, row 1's
    /// e4m3 contiguous cache refused; a copy and a probe over row 0's e4m3 bytes.
    fn e4m3_fixture() -> ModeReport {
        use super::super::{info, CopyTiming, HEAD_DIM};
        let mut r = fixture();
        let d = r.decode.as_mut().unwrap();
        d.rows = info(false, HEAD_DIM, Some(crate::mode_case::KvDtype::E4m3)).rows;
        let bytes = ROWS[0].e4m3_bytes();
        d.copies.push(CopyTiming {
            bytes,
            us: 52.0,
            calls: 200,
            repeats: 15,
            pairs: 2,
        });
        let mut probe = d.read_probes[0].clone();
        (probe.bytes, probe.us) = (bytes, 30.0);
        d.read_probes.push(probe);
        let (r0, r1) = (ROWS[0], ROWS[1]);
        let hopper = "persistent-hopper";
        r.rows.extend([
            timed(
                &r0.case_key(Storage::E4m3Contiguous),
                hopper,
                Source::Flashcore,
                35.0,
            ),
            timed(
                &r0.case_key(Storage::E4m3Paged),
                hopper,
                Source::Flashcore,
                38.0,
            ),
            crate::bench::modes::ModeRow::new(
                r1.case_key(Storage::E4m3Contiguous),
                hopper,
                Source::Flashcore,
                Outcome::Unsupported {
                    reason: "no e4m3 here".into(),
                },
            ),
        ]);
        r
    }

    /// The e4m3 lines count the bytes an e4m3 call moves, against the probe and copy of as
    /// many bytes, the bf16 peers of the row and flashcore's bf16 cache of the same storage; the
    /// main table and its tallies stay the bf16 caches'.
    #[test]
    fn e4m3_lines_set_the_bytes_they_move_against_the_probe_and_the_bf16_peers() {
        let r = e4m3_fixture();
        let d = r.decode.as_ref().unwrap();
        assert_eq!(
            lines(&r, d),
            lines(&fixture(), fixture().decode.as_ref().unwrap())
        );
        let e = e4m3_lines(&r, d);
        assert_eq!(e.len(), 3, "{e:#?}");
        let bytes = ROWS[0].e4m3_bytes();
        let c = &e[0];
        assert_eq!(
            (c.line.storage, c.line.kv_bytes),
            (Storage::E4m3Contiguous, bytes)
        );
        assert!((c.line.gbps.unwrap() - gbps(bytes, 35.0)).abs() < 1e-9);
        assert!((c.probe_gbps.unwrap() - gbps(bytes, 30.0)).abs() < 1e-9);
        assert!((c.probe_percent.unwrap() - 100.0 * 30.0 / 35.0).abs() < 1e-9);
        // The copy of as many bytes: 2N / 52 µs against N / 35 µs.
        assert!((c.line.ceiling_percent.unwrap() - 100.0 * 52.0 / (2.0 * 35.0)).abs() < 1e-9);
        assert_eq!(c.line.peer, Some(("sdpa_flash".to_string(), 66.0)));
        assert!((c.line.vs_peer.unwrap() - 66.0 / 35.0).abs() < 1e-12);
        assert_eq!((c.line.ceiling_met, c.line.peer_met), (None, None));
        assert_eq!(c.bf16_us, Some(60.0));
        assert!((c.vs_bf16.unwrap() - 60.0 / 35.0).abs() < 1e-12);
        let p = &e[1];
        assert_eq!(
            (p.line.storage, p.bf16_us),
            (Storage::E4m3Paged, Some(64.0))
        );
        assert!((p.vs_bf16.unwrap() - 64.0 / 38.0).abs() < 1e-12);
        let u = &e[2];
        assert!(u.line.missing.as_deref().unwrap().contains("no e4m3 here"));
        assert_eq!(
            (u.line.us, u.probe_gbps, u.bf16_us),
            (None, None, Some(200.0))
        );
        let md = crate::bench::modes::render_markdown(&r);
        assert_contains_all(
            &md,
            &[
                "### e4m3 KV cache (--kv-dtype e4m3)",
                "K and V at one byte an element (2·B·Hkv·Sk·D) plus Q read and O written at two",
                "| B=1 Hq=32 Hkv=8 Sq=1 Sk=32768 D=128 (decode, one long sequence) | 64 | persistent-hopper | e4m3 contiguous | 35.00 | 1918 | 2238 | 86 % | 74 % | sdpa_flash 66.00 | 1.89× | 60.00 | 1.71× |",
                "| e4m3 paged 64 | 38.00 |",
                // Refusals after the table, not in it.
                "- persistent-hopper refused 1 (row, storage) pairs, e.g. no e4m3 here",
                // The copies and probes over the e4m3 bytes are listed with the others.
                "| 64 | 52.00 |",
                "| 64 | ldg | 30.00 | 2238 |",
            ],
        );
        // The e4m3 storages survive the JSON.
        let j = crate::bench::report::assert_json_round_trip(&r);
        assert!(j.contains("\"e4m3-paged\"") && j.contains("\"e4m3_bytes\""));
        let section = md.split("### e4m3 KV cache").nth(1).unwrap();
        let section = section.split("###").next().unwrap();
        assert!(!section.contains("unsupported: no e4m3 here"), "{section}");
        // Without e4m3 rows there is no section (the snapshot below holds the rest).
        assert!(!crate::bench::modes::render_markdown(&fixture()).contains("e4m3"));
    }

    #[test]
    fn decode_markdown_layout() {
        let r = fixture();
        let md = crate::bench::modes::render_markdown(&r);
        assert!(!md.contains("## Comparisons"), "{md}");
        assert_contains_all(
            &md,
            &[
                "## Decode",
                "every call also as CUDA-graph replays",
                "| B=1 Hq=32 Hkv=8 Sq=1 Sk=32768 D=128 (decode, one long sequence) | 128 | persistent-hopper | contiguous | 60.00 | 2237 | 167 % | yes | sdpa_flash 66.00 | 1.10× | yes |",
                "| paged 64 | 64.00 |",
                "| 1.03× | NO |",
                "- persistent-hopper: ≥ 90 % of the copy at 3 of 4 (row, storage) pairs (1 without a number); ≥ 1.05× the best peer at 1 of 4 (row, storage) pairs (1 without a number)",
                // Peers beside the anchors: live 94.2 against the anchor's 94.2.
                "| sdpa_cudnn | 94.20 | 2850 | 202 % | 94.20 | 2850 | 1.00 |",
                "| fa3 | error: RuntimeError: nope |",
                // An anchor without a live row still shows.
                "(chunked prefill) | sdpa_cudnn | not run | — | — | 108.6 | 1236 | — |",
                // Copies: ceiling and traffic.
                "| 128 | 200.0 | 671 | 1342 | 200 | 15 | 2 |",
                "| 512 | — |",
                // The read probes after the copies: 52 µs over 128 MiB is 2581 GB/s, the faster there.
                "### Read probes",
                "| 128 | ldg | 52.00 | 2581 | 400 | 15 | 2 | 528 × 512 | yes |",
                "| 128 | bulk:32768:4:1 | 53.00 | 2532 | 400 | 15 | 2 | 132 × 32 |  |",
                "| 256 | bulk:32768:4:1 | 95.00 | 2826 | 400 | 15 | 2 | 132 × 32 | yes |",
                "| 512 | — | — | — | — | — | — | — | — |",
                "read probe: 512 MiB and 1024 MiB not probed",
                "Read probes: kernels that only read the same N bytes",
                // What 1.05× the best peer needs, against the probe.
                "### Is 1.05× the best peer within the read probe and the GEMM rate?",
                "(decode, one long sequence) | 128 | 0.5 | sdpa_flash 66.00 | 2034 | 2135 | 2581 | 0.83 | yes | 8.5 | 700.0 | 0.012 | yes |",
                "(decode) | 256 | 1.1 | sdpa_cudnn 94.20 | 2850 | 2992 | 2826 | 1.06 | NO | 12.0 | 700.0 | 0.017 | yes |",
                "Sk=4096 D=128 (decode) | 512 | 2.1 | — | — | — | — | — | — | — | 700.0 | — | — |",
                "GEMM: cuBLAS bf16 8192×8192×8192 (cublasGemmEx, f32 accumulate), 1570.0 µs a call, 700.0 TFLOP/s",
            ],
        );
        insta::assert_snapshot!("bench_decode_table", md);
    }
}
