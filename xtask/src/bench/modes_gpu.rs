//! The GPU side of the mode suites (`bench-all --suite varlen | paged | window | decode`): inputs
//! in storage order (packed, contiguous cache, pages), the oracle's references per sequence on
//! sampled rows, and the dense bench's timing (`bench::bench_one`: check, eager events, graph
//! replays for short calls, for every call in the decode suite). Paged cases hold the keys and
//! values of their contiguous case, scattered through the block table, and are judged against the
//! same references. The decode suite also times its device-to-device copies (the bandwidth
//! ceiling) and read probes (a read-only kernel on the same bytes) and reads its anchors here.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use flashcore::{Attention, AttentionProblem, Device, KvStorage};
use flashcore_oracle::{OracleProblem, Reference, Rows, Verdict};
use ndarray::{s, ArrayD, Axis, IxDyn};

use super::bandwidth;
use super::decode::{self, CopyTiming, DecodeInfo, ReadProbeTiming};
use super::gpu::{self, Buffers, KvHost, LoopOptions, TableData, Timer};
use super::modes::{self, Case, CaseInfo, ModeReport, ModeRow, PeerShape, DTYPE};
use super::peers;
use super::report::{DeviceSummary, GemmPeak, Outcome, PeerStatus, Source};
use super::suite::{CausalSel, Suite};
use super::Args;
use crate::inputs::{precision, random_tensor_parallel};
use crate::mode_case::{self, Draw, KvSide};
use crate::parallel::{par_chunks, par_map};

/// Q, K, V of a case in storage order (`flashcore::host::storage_shapes`), f32 values rounded to
/// the dtype.
pub struct StorageInputs {
    pub q: ArrayD<f32>,
    pub k: ArrayD<f32>,
    pub v: ArrayD<f32>,
}

fn random_storage(p: &AttentionProblem, shape: &[usize], seed: u64) -> ArrayD<f32> {
    let n: usize = shape.iter().product();
    random_tensor_parallel(p.dtype, [1, 1, 1, n], seed)
        .into_shape_with_order(IxDyn(shape))
        .expect("same length")
}

/// Q, K, V of a case: fresh random values ([`random_inputs`]), with e4m3 K/V (`Modes::kv_fp8`)
/// quantized ([`quantize_e4m3`]).
pub fn case_inputs(p: &AttentionProblem, draw: &Draw, seed: u64) -> StorageInputs {
    let mut inp = random_inputs(p, seed);
    if p.modes.kv_fp8.is_some() {
        inp.k = quantize_e4m3(p, draw, KvSide::K, &inp.k);
        inp.v = quantize_e4m3(p, draw, KvSide::V, &inp.v);
    }
    inp
}

/// A contiguous cache `[batch, capacity, heads_kv, head_dim]` of true values as e4m3 storage:
/// each value divided by its (sequence, KV head) factor of `side`'s descale table and rounded to
/// e4m3 (saturating at ±448), as a quantizing cache writer stores it. The oracle then sees the
/// stored values times the factors (`mode_case::seq_kv`), not the values before rounding.
pub fn quantize_e4m3(
    p: &AttentionProblem,
    draw: &Draw,
    side: KvSide,
    values: &ArrayD<f32>,
) -> ArrayD<f32> {
    assert!(
        p.modes.kv == KvStorage::Dense && p.layout == flashcore::Layout::Bshd,
        "e4m3 bench caches are drawn contiguous [batch, capacity, heads_kv, head_dim]"
    );
    let mut out = values.as_standard_layout().into_owned();
    let &[_, rows, heads, dim] = out.shape() else {
        panic!("a contiguous cache is 4-d");
    };
    // Flat runs on every core, not sequences: the one-sequence rows (2^26 values a tensor at
    // D = 256) would otherwise take one core.
    par_chunks(
        out.as_slice_mut().expect("standard layout"),
        1 << 16,
        |first, run| {
            for (i, x) in run.iter_mut().enumerate() {
                let at = first + i;
                let (b, h) = (at / (rows * heads * dim), at / dim % heads);
                *x = mode_case::round_e4m3(*x / draw.descale(p, side, b, h));
            }
        },
    );
    out
}

pub fn random_inputs(p: &AttentionProblem, seed: u64) -> StorageInputs {
    let (q_shape, kv_shape, _) = flashcore::host::storage_shapes(p);
    StorageInputs {
        q: random_storage(p, &q_shape, seed),
        k: random_storage(p, &kv_shape, seed ^ 1),
        v: random_storage(p, &kv_shape, seed ^ 2),
    }
}

/// The pages of a paged problem holding what the contiguous cache `[batch, capacity, h, d]`
/// holds for each sequence (row j of sequence b in block `table[b, j / bs]`, row `j % bs`);
/// blocks no sequence owns are zero.
pub fn scatter_to_pages(
    p: &AttentionProblem,
    draw: &Draw,
    contiguous: &ArrayD<f32>,
) -> ArrayD<f32> {
    let KvStorage::Paged {
        num_blocks,
        block_size,
        max_blocks_per_seq,
    } = p.modes.kv
    else {
        panic!("scatter_to_pages needs a paged problem");
    };
    let table = draw
        .block_table
        .as_ref()
        .expect("paged problems have a table");
    let capacity = contiguous.shape()[1];
    let mut out = ArrayD::<f32>::zeros(IxDyn(&[num_blocks, block_size, p.heads_kv, p.head_dim]));
    for b in 0..p.batch {
        for j in 0..capacity.min(max_blocks_per_seq * block_size) {
            let blk = table[b * max_blocks_per_seq + j / block_size] as usize;
            out.slice_mut(s![blk, j % block_size, .., ..])
                .assign(&contiguous.slice(s![b, j, .., ..]));
        }
    }
    out
}

struct SeqRef {
    b: usize,
    op: OracleProblem,
    rows: Rows,
    reference: Reference,
    low: Reference,
}

/// The oracle's references for one case and one input set, each sequence as its own batch-1
/// problem (`mode_case::seq_oracle_problem`) on sampled rows, computed once and used to judge
/// every generation (and every paged copy of the same data).
pub struct ModeCheck {
    problem: AttentionProblem,
    draw: Draw,
    seqs: Vec<SeqRef>,
}

impl ModeCheck {
    /// At most about `max_rows` rows in all, spread over the sequences (each still gets the
    /// first and last row of every head: `sample_rows`).
    pub fn new(
        p: &AttentionProblem,
        draw: &Draw,
        inp: &StorageInputs,
        max_rows: usize,
        seed: u64,
    ) -> ModeCheck {
        let live: Vec<usize> = (0..p.batch).filter(|&b| draw.len_q[b] > 0).collect();
        let per = (max_rows / live.len().max(1)).max(1);
        // Sequences on every core: a suite's long caches take seconds a sequence on one.
        let seqs = par_map(&live, |&b| {
            let op = mode_case::seq_oracle_problem(p, draw, b);
            // With e4m3 Q, its true values (stored × descale), as K's and V's below.
            let q = mode_case::seq_q_values(p, draw, &inp.q, b).insert_axis(Axis(0));
            let k = mode_case::seq_kv(p, draw, KvSide::K, &inp.k, None, b).insert_axis(Axis(0));
            let v = mode_case::seq_kv(p, draw, KvSide::V, &inp.v, None, b).insert_axis(Axis(0));
            let rows = flashcore_oracle::sample_rows(&op, per, seed ^ (b as u64 + 1));
            let reference =
                flashcore_oracle::reference_f64(&op, q.view(), k.view(), v.view(), &rows);
            let low = flashcore_oracle::reference_low_precision(
                &op,
                precision(p.dtype),
                q.view(),
                k.view(),
                v.view(),
                &rows,
            );
            SeqRef {
                b,
                op,
                rows,
                reference,
                low,
            }
        });
        ModeCheck {
            problem: p.clone(),
            draw: draw.clone(),
            seqs,
        }
    }

    pub fn rows_checked(&self) -> usize {
        self.seqs.iter().map(|s| s.rows.len(&s.op)).sum()
    }

    /// Judges O (dtype bits, storage order of Q) and LSE as they came back from the device.
    /// The worst sequence's verdict, or the first failure; no NaN may be left anywhere (the
    /// outputs were poisoned before the call; every row belongs to a sequence).
    pub fn judge_bits(&self, o_bits: &[u16], lse: &[f32]) -> std::result::Result<Verdict, String> {
        let p = &self.problem;
        let (q_shape, _, lse_shape) = flashcore::host::storage_shapes(p);
        let (n_o, n_l) = (
            q_shape.iter().product::<usize>(),
            lse_shape.iter().product::<usize>(),
        );
        if o_bits.len() != n_o || lse.len() != n_l {
            return Err(format!(
                "output lengths {} / {} do not match the problem's {n_o} / {n_l}",
                o_bits.len(),
                lse.len()
            ));
        }
        let o: Vec<f32> = o_bits.iter().map(|&b| p.dtype.from_bits(b)).collect();
        let unwritten =
            o.iter().filter(|x| x.is_nan()).count() + lse.iter().filter(|x| x.is_nan()).count();
        let o = ArrayD::from_shape_vec(IxDyn(&q_shape), o).expect("length checked");
        let lse = ArrayD::from_shape_vec(IxDyn(&lse_shape), lse.to_vec()).expect("length checked");
        let mut worst: Option<Verdict> = None;
        for s in &self.seqs {
            let ob = mode_case::seq_rows(p, &self.draw, &o, s.b).insert_axis(Axis(0));
            let lb = mode_case::seq_lse(&self.draw, &lse, s.b).insert_axis(Axis(0));
            let v = flashcore_oracle::judge(
                &s.op,
                precision(p.dtype),
                ob.view(),
                lb.view(),
                &s.rows,
                &s.reference,
                &s.low,
            );
            if !v.pass {
                return Err(format!("sequence {}: {}", s.b, v.message));
            }
            if worst.as_ref().is_none_or(|w| v.ratio > w.ratio) {
                worst = Some(v);
            }
        }
        if unwritten > 0 {
            return Err(format!(
                "{unwritten} output elements are NaN (unwritten?) outside the judged rows"
            ));
        }
        worst.ok_or_else(|| "no sequence to judge".into())
    }
}

/// Inputs and references of the last case prepared, kept for the paged copies of its data.
struct Prepared {
    key: String,
    inp: StorageInputs,
    check: ModeCheck,
}

fn case_seed(seed: u64, key: &str) -> u64 {
    key.bytes().fold(seed ^ 0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn prepare_fresh(case: &Case, args: &Args) -> Prepared {
    let seed = case_seed(args.seed, &case.key);
    let inp = case_inputs(&case.problem, &case.draw, seed);
    let check = ModeCheck::new(&case.problem, &case.draw, &inp, args.check_rows, seed);
    Prepared {
        key: case.key.clone(),
        inp,
        check,
    }
}

pub(super) fn to_bits(p: &AttentionProblem, a: &ArrayD<f32>) -> Vec<u16> {
    a.iter().map(|&x| p.dtype.to_bits(x)).collect()
}

fn device_buffers(
    device: &Device,
    case: &Case,
    q: &ArrayD<f32>,
    k: &ArrayD<f32>,
    v: &ArrayD<f32>,
    args: &Args,
) -> Result<Buffers> {
    let p = &case.problem;
    let qb = to_bits(p, q);
    // e4m3 K/V are a byte an element.
    let fp8 = p.modes.kv_fp8.is_some();
    let kv_bytes = if fp8 { 1 } else { 2 };
    let set_bytes = (p.q_len() + p.o_len()) * 2 + (p.k_len() + p.v_len()) * kv_bytes;
    let alloc_bytes = set_bytes + p.lse_len() * 4;
    let sets = gpu::sets_on(device, set_bytes, alloc_bytes, gpu::max_sets(args.quick))?;
    let d = &case.draw;
    let tables = TableData {
        cu_seqlens_q: d.cu_seqlens_q.clone(),
        cu_seqlens_k: d.cu_seqlens_k.clone(),
        seqused_k: d.seqused_k.clone(),
        block_table: d.block_table.clone(),
        k_descale: d.k_descale.clone(),
        v_descale: d.v_descale.clone(),
        alibi_slopes: d.alibi_slopes.clone(),
    };
    let bufs = if fp8 {
        let bytes = |name, a: &ArrayD<f32>| e4m3_bytes_par(name, a);
        let (kb, vb) = (bytes("k", k)?, bytes("v", v)?);
        Buffers::with_kv(device, p, &qb, KvHost::E4m3(&kb), KvHost::E4m3(&vb), sets)?
    } else {
        let (kb, vb) = (to_bits(p, k), to_bits(p, v));
        Buffers::new(device, p, &qb, &kb, &vb, sets)?
    };
    bufs.with_tables(device, &tables)
}

/// [`flashcore::host::e4m3_bytes`] of `a` in standard order, runs of it on every core (a suite's
/// caches hold up to 2^29 values a tensor: MHA at D = 256).
fn e4m3_bytes_par(tensor: &'static str, a: &ArrayD<f32>) -> Result<Vec<u8>> {
    const RUN: usize = 1 << 20;
    let flat = a.as_standard_layout();
    let values = flat.as_slice().expect("standard layout");
    let runs: Vec<(usize, &[f32])> = values.chunks(RUN).enumerate().collect();
    par_map(&runs, |&(i, run)| {
        let view = ndarray::ArrayViewD::from_shape(IxDyn(&[run.len()]), run).expect("1-d");
        flashcore::host::e4m3_bytes(tensor, &view).map_err(|e| match e {
            // The index in the whole tensor, not in the run.
            flashcore::InvalidProblem::NotE4m3 {
                tensor,
                index,
                value,
            } => flashcore::InvalidProblem::NotE4m3 {
                tensor,
                index: i * RUN + index,
                value,
            },
            other => other,
        })
    })
    .into_iter()
    .try_fold(Vec::with_capacity(values.len()), |mut all, run| {
        all.extend(run.map_err(|e| anyhow::anyhow!(e))?);
        Ok(all)
    })
}

fn row(case: &Case, kernel: &str, outcome: Outcome) -> ModeRow {
    ModeRow::new(&case.key, kernel, Source::Flashcore, outcome)
}

/// Checks and times every generation on one case. `base` holds the data of the case this one
/// copies (or is replaced by this case's fresh data).
#[allow(clippy::too_many_arguments)]
fn bench_case(
    device: &Device,
    timer: &Timer,
    kernels: &[Box<dyn Attention>],
    data_sources: &[Case],
    case: &Case,
    base: &mut Option<Prepared>,
    args: &Args,
    loop_opts: &LoopOptions,
    spent: &mut [f64],
) -> Vec<ModeRow> {
    let mut rows: Vec<Option<ModeRow>> = vec![None; kernels.len()];
    let mut todo = Vec::new();
    for (i, k) in kernels.iter().enumerate() {
        if let Err(u) = k.supports(&case.problem, device.info()) {
            rows[i] = Some(row(
                case,
                k.name(),
                Outcome::Unsupported { reason: u.reason },
            ));
        } else if spent[i] >= args.max_seconds_per_kernel {
            rows[i] = Some(row(
                case,
                k.name(),
                Outcome::Skipped {
                    reason: format!(
                        "--max-seconds-per-kernel ({} s) used up",
                        args.max_seconds_per_kernel
                    ),
                },
            ));
        } else {
            todo.push(i);
        }
    }
    if todo.is_empty() {
        return rows.into_iter().flatten().collect();
    }
    let t0 = Instant::now();
    let source_key = case.data_from.clone().unwrap_or_else(|| case.key.clone());
    if base.as_ref().is_none_or(|b| b.key != source_key) {
        // The plan's every case, not only the ones `--case` kept: a paged case takes its keys
        // and values from its contiguous twin, which a filter may have dropped.
        let src = data_sources
            .iter()
            .find(|c| c.key == source_key)
            .expect("data_from names a case of the plan");
        *base = None; // free the previous inputs first
        *base = Some(prepare_fresh(src, args));
    }
    let prepared = base.as_ref().expect("prepared above");
    let bufs = match (&case.data_from, case.problem.modes.kv) {
        (Some(_), KvStorage::Paged { .. }) => {
            let k = scatter_to_pages(&case.problem, &case.draw, &prepared.inp.k);
            let v = scatter_to_pages(&case.problem, &case.draw, &prepared.inp.v);
            device_buffers(device, case, &prepared.inp.q, &k, &v, args)
        }
        _ => device_buffers(
            device,
            case,
            &prepared.inp.q,
            &prepared.inp.k,
            &prepared.inp.v,
            args,
        ),
    };
    eprintln!(
        "  {}: inputs and {} oracle rows in {:.1} s",
        case.key,
        prepared.check.rows_checked(),
        t0.elapsed().as_secs_f64()
    );
    let mut bufs = match bufs {
        Ok(b) => b,
        Err(e) => {
            for i in todo {
                rows[i] = Some(row(
                    case,
                    kernels[i].name(),
                    Outcome::Error {
                        message: format!("{e:#}"),
                    },
                ));
            }
            return rows.into_iter().flatten().collect();
        }
    };
    let check = &prepared.check;
    let judge = |o: &[u16], l: &[f32]| {
        check
            .judge_bits(o, l)
            .map(|v| (v.ratio, check.rows_checked()))
    };
    for i in todo {
        let k = kernels[i].as_ref();
        let start = Instant::now();
        let outcome = gpu::no_panic(k.name(), || {
            super::dense::bench_one(
                device, timer, k, &judge, case.flops, &mut bufs, args, loop_opts,
            )
        })
        .unwrap_or_else(|e| Outcome::Error {
            message: format!("{e:#}"),
        });
        spent[i] += start.elapsed().as_secs_f64();
        match &outcome {
            Outcome::Timed(t) => eprintln!(
                "  {} {}: {:.1} us, {:.1} TFLOP/s ({})",
                case.key,
                k.name(),
                t.us,
                t.tflops,
                t.method.name()
            ),
            Outcome::Wrong { message } => {
                eprintln!("  WRONG {} at {}: {message}", k.name(), case.key)
            }
            other => eprintln!("  {} {}: {other:?}", case.key, k.name()),
        }
        rows[i] = Some(row(case, k.name(), outcome));
    }
    rows.into_iter().flatten().collect()
}

/// `--case`: keeps the plan's cases and peers whose key contains one of `filters` (all of them
/// when there are none) and returns every case the plan had, the data sources a kept case may
/// name in `data_from` (a paged case takes its keys and values from its contiguous twin, which
/// the filter may have dropped).
fn keep_cases(plan: &mut modes::SuitePlan, filters: &[String]) -> Vec<Case> {
    let all = plan.cases.clone();
    if !filters.is_empty() {
        let wanted = |key: &str| filters.iter().any(|f| key.contains(f.as_str()));
        plan.cases.retain(|c| wanted(&c.key));
        plan.peers.retain(|c| wanted(&c.key));
    }
    all
}

/// The peers of a plan: their JSON (from the script run now, or `--peers-json`) as rows.
fn peer_rows(plan: &modes::SuitePlan, args: &Args, out_dir: &Path) -> (PeerStatus, Vec<ModeRow>) {
    if plan.peers.is_empty() {
        return (PeerStatus::Off, vec![]);
    }
    let v = if let Some(path) = &args.peers_json {
        std::fs::read_to_string(path)
            .with_context(|| format!("reading {}", path.display()))
            .and_then(|t| Ok(serde_json::from_str::<serde_json::Value>(&t)?))
            .map_err(|e| format!("{e:#}"))
    } else if args.no_peers {
        return (PeerStatus::Off, vec![]);
    } else {
        eprintln!("peers: running the peer script (progress below)");
        let script = peers::find_script(args.peer_script.as_deref());
        let list: Vec<serde_json::Value> = plan.peers.iter().map(|p| p.shape.to_json()).collect();
        let extra: &[&str] = if plan.suite == Suite::Decode {
            &decode::PEER_ARGS
        } else {
            &[]
        };
        let fa3 = args.fa3_options();
        let suffix = format!("-{}", modes::suite_name(plan.suite));
        peers::PeerRun {
            python: &args.python,
            script: script.as_deref(),
            dir: out_dir,
            suffix: &suffix,
            quick: args.quick,
            extra,
            fa3: &fa3,
        }
        .run(&list)
    };
    let wanted: Vec<PeerShape> = plan.peers.iter().map(|p| p.shape).collect();
    let flops = |s: &PeerShape| {
        plan.peers
            .iter()
            .find(|p| p.shape == *s)
            .map_or(s.dense_flops(), |p| p.flops)
    };
    peers::peer_outcome(v, |v| {
        let rows = peers::merge_peer_rows(v, &wanted, PeerShape::from_json, flops)?;
        Ok((
            peers::peer_status(v),
            rows.into_iter()
                .map(|(i, backend, outcome)| {
                    ModeRow::new(&plan.peers[i].key, backend, Source::Peer, outcome)
                })
                .collect(),
        ))
    })
}

pub fn json_name(r: &ModeReport) -> String {
    format!("bench-{}.json", modes::suite_name(r.suite))
}

/// Writes `bench-<suite>.json` and `.md` under `dir` and prints the header, the comparisons and
/// the rows.
pub fn write_and_print(report: &ModeReport, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let json = json_name(report);
    let md = json.replace(".json", ".md");
    std::fs::write(dir.join(&json), serde_json::to_string_pretty(report)?)?;
    std::fs::write(dir.join(&md), modes::render_markdown(report))?;
    eprintln!("bench-all: wrote {json} and {md} in {}", dir.display());
    println!("{}", modes::render_header(report));
    println!("{}", modes::render_cases(report));
    match &report.decode {
        Some(d) => println!("{}", decode::render(report, d)),
        None => println!("{}", modes::render_comparisons(report)),
    }
    print!("{}", modes::render_rows(report));
    Ok(())
}

/// The decode suite's bandwidth references, one of each per distinct K+V byte count: the copy
/// (the ceiling), then each read probe on the same bytes. A timing that fails leaves a note.
fn copy_ceilings(
    device: &Device,
    timer: &Timer,
    info: &mut DecodeInfo,
    args: &Args,
    loop_opts: &LoopOptions,
) {
    let max_buffers = if args.quick { 2 } else { 8 };
    let mut copy_notes = Vec::new();
    let mut probe_notes = Vec::new();
    let probes: Vec<bandwidth::ReadProbeKind> = match bandwidth::ReadProbeKind::from_env() {
        Ok(kinds) => kinds
            .into_iter()
            .filter(|k| {
                let keep = k.runs_on(device.info().compute_capability.0);
                if !keep {
                    probe_notes.push(format!("{} needs sm_90", k.label()));
                }
                keep
            })
            .collect(),
        Err(e) => {
            probe_notes.push(format!("{e:#}"));
            vec![]
        }
    };
    for bytes in decode::copy_sizes(info) {
        let copy = time_reference("copy", bytes, &mut copy_notes, || {
            copy_timing(device, timer, bytes, max_buffers, loop_opts)
        });
        info.copies.extend(copy);
        for &kind in &probes {
            let what = format!("read probe {}", kind.label());
            let probe = time_reference(&what, bytes, &mut probe_notes, || {
                read_probe_timing(device, timer, bytes, max_buffers, loop_opts, kind)
            });
            info.read_probes.extend(probe);
        }
    }
    if !copy_notes.is_empty() {
        info.copy_note = Some(copy_notes.join("; "));
    }
    if !probe_notes.is_empty() {
        info.read_probe_note = Some(probe_notes.join("; "));
    }
}

/// The decode suite's compute reference: a cuBLAS GEMM in the suite's dtype (--gemm-n), against
/// which the peer target's TFLOP/s is set on the compute-bound rows. A failure leaves a note.
fn gemm_reference(device: &Device, info: &mut DecodeInfo, args: &Args, loop_opts: &LoopOptions) {
    if args.no_gemm {
        info.gemm_note = Some("--no-gemm".into());
        return;
    }
    let n = args.gemm_n;
    match gpu::no_panic("cuBLAS GEMM", || {
        gpu::gemm_peak(device, DTYPE, n, loop_opts)
    }) {
        Ok((us, tflops)) => {
            eprintln!("  cuBLAS {DTYPE} GEMM {n}^3: {us:.1} us, {tflops:.1} TFLOP/s");
            info.gemm = Some(GemmPeak {
                dtype: DTYPE,
                n,
                us,
                tflops,
            });
        }
        Err(e) => {
            eprintln!("  cuBLAS GEMM reference not measured: {e:#}");
            info.gemm_note = Some(format!("{e:#}"));
        }
    }
}

/// One bandwidth reference (`what`) on `bytes`: its timing, or a note of why there is none.
fn time_reference<T>(
    what: &str,
    bytes: u64,
    notes: &mut Vec<String>,
    time: impl FnOnce() -> Result<T>,
) -> Option<T> {
    match gpu::no_panic(what, time) {
        Ok(t) => Some(t),
        Err(e) => {
            eprintln!("  {what} {} MiB failed: {e:#}", bytes >> 20);
            notes.push(format!("{what}, {} MiB: {e:#}", bytes >> 20));
            None
        }
    }
}

fn copy_timing(
    device: &Device,
    timer: &Timer,
    bytes: u64,
    max_pairs: usize,
    loop_opts: &LoopOptions,
) -> Result<CopyTiming> {
    let (s, pairs) = bandwidth::time_copy(timer, device, bytes as usize, max_pairs, loop_opts)?;
    eprintln!(
        "  copy {} MiB: {:.1} us, read {:.0} GB/s (N / t), ceiling {:.0} GB/s (2N / t)",
        bytes >> 20,
        s.us,
        decode::gbps(bytes, s.us),
        decode::ceiling_gbps(bytes, s.us)
    );
    Ok(CopyTiming {
        bytes,
        us: s.us,
        calls: s.calls,
        repeats: s.repeats,
        pairs,
    })
}

/// One read probe design on `bytes`.
fn read_probe_timing(
    device: &Device,
    timer: &Timer,
    bytes: u64,
    max_sources: usize,
    loop_opts: &LoopOptions,
    kind: bandwidth::ReadProbeKind,
) -> Result<ReadProbeTiming> {
    let (s, sources, (grid, block)) =
        bandwidth::time_read_probe(timer, device, bytes as usize, max_sources, loop_opts, kind)?;
    eprintln!(
        "  read probe {} {} MiB: {:.1} us, read {:.0} GB/s (N / t)",
        kind.label(),
        bytes >> 20,
        s.us,
        decode::gbps(bytes, s.us)
    );
    Ok(ReadProbeTiming {
        kind: kind.label(),
        bytes,
        us: s.us,
        calls: s.calls,
        repeats: s.repeats,
        sources,
        grid,
        block,
    })
}

/// The decode anchors (`--anchors DIR`, else `../shared/anchors` or `shared/anchors`).
pub(crate) fn decode_anchors(info: &mut DecodeInfo, args: &Args) {
    let Some(dir) = decode::anchor_dir(args.anchors.as_deref()) else {
        info.anchors_note =
            Some("no anchors: pass --anchors DIR (the directory of h100-decode-peers.txt)".into());
        return;
    };
    match decode::load_anchors(&dir) {
        Ok((a, note)) => {
            info.anchors = a;
            info.anchors_note = Some(note);
        }
        Err(e) => info.anchors_note = Some(format!("anchors not loaded: {e:#}")),
    }
}

/// `bench-all --suite varlen | paged | window | decode`.
pub fn run(args: &Args, out_dir: &Path) -> Result<()> {
    let is_decode = args.suite == Suite::Decode;
    // Decode: non-causal unless `--causal on`; every call timed as graph replays too.
    let decode_causal = args.causal == CausalSel::On;
    let decode_args;
    let args = if is_decode {
        let mut a = args.clone();
        a.graph_threshold_us = modes::GRAPH_ALWAYS_US;
        decode_args = a;
        &decode_args
    } else {
        args
    };
    let mut plan = if is_decode {
        decode::plan(
            args.seed,
            decode_causal,
            args.decode_head_dim,
            args.kv_dtype,
        )
    } else {
        modes::plan(args.suite, args.seed)
    };
    let data_sources = keep_cases(&mut plan, &args.case_filter);
    if args.batch_invariant {
        for c in &mut plan.cases {
            c.problem.batch_invariant = true;
        }
        plan.notes
            .push("flashcore in the batch-invariant mode (--batch-invariant)".into());
    }
    let name = modes::suite_name(args.suite);
    let kernels = super::select_kernels(args.kernels.as_deref())?;
    eprintln!("bench-all --suite {name}:");
    for n in &plan.notes {
        eprintln!("  {n}");
    }
    for c in &plan.cases {
        eprintln!(
            "  case {}: {} ({:.1} GFLOP real)",
            c.key,
            c.label,
            c.flops / 1e9
        );
    }
    let (device, info) = super::open_bench_device(args.device, out_dir)?;
    eprintln!(
        "bench-all: {}); {} cases x {} generations ({}); output in {}",
        super::device_banner(&info),
        plan.cases.len(),
        kernels.len(),
        super::kernel_names(&kernels, |k| k.name()),
        out_dir.display()
    );
    let loop_opts = args.loop_options();
    let mut cases: Vec<CaseInfo> = plan.cases.iter().map(CaseInfo::from).collect();
    for p in &plan.peers {
        if !cases.iter().any(|c| c.key == p.key) {
            cases.push(CaseInfo::from(p));
        }
    }
    let mut report = ModeReport {
        suite: args.suite,
        device: DeviceSummary::of(&info),
        settings: args.settings("bshd"),
        peers: PeerStatus::Off,
        notes: plan.notes.clone(),
        cases,
        rows: vec![],
        comparisons: plan.comparisons.clone(),
        decode: is_decode.then(|| decode::info(decode_causal, args.decode_head_dim, args.kv_dtype)),
    };
    let timer = Timer::new(&device)?;
    if let Some(info) = report.decode.as_mut() {
        eprintln!("copies (the bandwidth ceiling) and read probes:");
        copy_ceilings(&device, &timer, info, args, &loop_opts);
        gemm_reference(&device, info, args, &loop_opts);
        decode_anchors(info, args);
    }
    let mut spent = vec![0.0; kernels.len()];
    let mut base: Option<Prepared> = None;
    let started = Instant::now();
    for case in &plan.cases {
        eprintln!(
            "[{:.0} s] {}: {}",
            started.elapsed().as_secs_f64(),
            case.key,
            case.label
        );
        let rows = bench_case(
            &device,
            &timer,
            &kernels,
            &data_sources,
            case,
            &mut base,
            args,
            &loop_opts,
            &mut spent,
        );
        report.rows.extend(rows);
        // Partial results survive a crash later in the run.
        let _ = std::fs::write(
            out_dir.join(json_name(&report)),
            serde_json::to_string_pretty(&report)?,
        );
    }
    drop(base);
    eprintln!("[{:.0} s] flashcore done", started.elapsed().as_secs_f64());
    let (status, rows) = peer_rows(&plan, args, out_dir);
    report.peers = status;
    report.rows.extend(rows);
    eprintln!("[{:.0} s] peers done", started.elapsed().as_secs_f64());
    write_and_print(&report, out_dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::modes::{cache_case, Heads, KvKind};

    #[test]
    fn e4m3_bytes_in_runs_match_the_library_and_name_the_whole_tensors_index() {
        let n = (1 << 20) * 2 + 77;
        let values: Vec<f32> = (0..n)
            .map(|i| mode_case::round_e4m3(((i % 1001) as f32 - 500.0) * 0.37))
            .collect();
        let a = ArrayD::from_shape_vec(IxDyn(&[1, n]), values).unwrap();
        let expected = flashcore::host::e4m3_bytes("k", &a.view()).unwrap();
        assert_eq!(e4m3_bytes_par("k", &a).unwrap(), expected);
        // A value that is not e4m3, in the third run: its index in the whole tensor.
        let mut bad = a.clone();
        bad[[0, n - 3]] = 0.1;
        let e = e4m3_bytes_par("v", &bad).unwrap_err().to_string();
        let library = flashcore::host::e4m3_bytes("v", &bad.view())
            .unwrap_err()
            .to_string();
        assert_eq!(e, library);
        assert!(e.contains(&(n - 3).to_string()), "{e}");
    }

    #[test]
    fn a_paged_case_kept_alone_still_finds_its_data_source() {
        let mut plan = modes::plan(Suite::Paged, 0x5eed);
        let sources = keep_cases(&mut plan, &["chunk/paged-256".to_string()]);
        let keys: Vec<&str> = plan.cases.iter().map(|c| c.key.as_str()).collect();
        assert_eq!(keys, ["chunk/paged-256"]);
        let from = plan.cases[0]
            .data_from
            .clone()
            .expect("a paged case names its twin");
        assert!(
            !plan.cases.iter().any(|c| c.key == from),
            "the filter dropped the twin"
        );
        assert!(
            sources.iter().any(|c| c.key == from),
            "{from} is still a data source"
        );
        // No filter: everything stays.
        let mut all = modes::plan(Suite::Paged, 0x5eed);
        let n = all.cases.len();
        assert_eq!(keep_cases(&mut all, &[]).len(), n);
        assert_eq!(all.cases.len(), n);
    }

    #[test]
    fn pages_hold_the_contiguous_rows() {
        let used = [40, 17];
        let c = cache_case(
            "c",
            Heads::SUITES,
            3,
            48,
            &used,
            true,
            KvKind::Contiguous,
            9,
        );
        let pg = cache_case(
            "p",
            Heads::SUITES,
            3,
            48,
            &used,
            true,
            KvKind::Paged { block_size: 16 },
            9,
        );
        let mut p = c.problem.clone();
        p.head_dim = 4;
        let inp = random_inputs(&p, 5);
        let mut pp = pg.problem.clone();
        pp.head_dim = 4;
        let pages = scatter_to_pages(&pp, &pg.draw, &inp.k);
        for (b, &u) in used.iter().enumerate() {
            let a = mode_case::seq_kv(&p, &c.draw, KvSide::K, &inp.k, None, b);
            let g = mode_case::seq_kv(&pp, &pg.draw, KvSide::K, &pages, None, b);
            assert_eq!(a, g, "sequence {b}");
            assert_eq!(a.dim().1, u);
        }
    }

    /// The O and LSE the oracle's f64 reference gives a cache case's sequences, as the device
    /// would return them (O as dtype bits in Q's storage order), on `k`/`v` taken as they are.
    fn reference_outputs(
        p: &AttentionProblem,
        draw: &Draw,
        k: &ArrayD<f32>,
        v: &ArrayD<f32>,
        q: &ArrayD<f32>,
    ) -> (Vec<u16>, Vec<f32>) {
        let (q_shape, _, lse_shape) = flashcore::host::storage_shapes(p);
        let mut o = ArrayD::<f32>::zeros(IxDyn(&q_shape));
        let mut lse = ArrayD::<f32>::zeros(IxDyn(&lse_shape));
        for b in 0..p.batch {
            let op = mode_case::seq_oracle_problem(p, draw, b);
            let q = mode_case::seq_rows(p, draw, q, b).insert_axis(Axis(0));
            let k = mode_case::seq_kv(p, draw, KvSide::K, k, None, b).insert_axis(Axis(0));
            let v = mode_case::seq_kv(p, draw, KvSide::V, v, None, b).insert_axis(Axis(0));
            let r = flashcore_oracle::reference_f64(&op, q.view(), k.view(), v.view(), &Rows::All);
            let (ro, rl) = r.to_dense(&op);
            for h in 0..p.heads_q {
                for i in 0..p.seq_q {
                    for d in 0..p.head_dim {
                        o[[b, i, h, d]] = ro[[0, h, i, d]] as f32;
                    }
                    lse[[b, h, i]] = rl[[0, h, i]] as f32;
                }
            }
        }
        (
            o.iter().map(|&x| p.dtype.to_bits(x)).collect(),
            lse.iter().copied().collect(),
        )
    }

    /// An e4m3 bench cache holds each value over its KV head's factor, rounded to e4m3 (within
    /// e4m3's rounding of the value, saturated at 448); its paged copy holds the same bytes; the
    /// check passes the exact answer on the true values (stored × descale) and fails one
    /// computed on the stored values alone.
    #[test]
    fn an_e4m3_cache_is_quantized_per_kv_head_and_judged_on_its_true_values() {
        let heads = Heads {
            q: 4,
            kv: 2,
            dim: 16,
        };
        let used = [40, 17];
        let e4m3 = |kv| {
            let mut c = cache_case("c", heads, 2, 48, &used, false, kv, 9);
            let (k, v) = decode::e4m3_descales(9, "row", heads.kv);
            c.problem.modes.kv_fp8 = Some(flashcore::KvScales::PerKvHead);
            (c.draw.k_descale, c.draw.v_descale) = (Some(k), Some(v));
            c
        };
        let c = e4m3(KvKind::Contiguous);
        let pg = e4m3(KvKind::Paged { block_size: 16 });
        let (p, draw) = (&c.problem, &c.draw);
        p.validate().unwrap();
        draw.host_tables().validate(p).unwrap();
        let plain = random_inputs(p, 5);
        let inp = case_inputs(p, draw, 5);
        assert_eq!(inp.q, plain.q);
        for (side, stored, values) in [(KvSide::K, &inp.k, &plain.k), (KvSide::V, &inp.v, &plain.v)]
        {
            for ((b, j, h, d), &x) in values
                .view()
                .into_dimensionality::<ndarray::Ix4>()
                .unwrap()
                .indexed_iter()
            {
                let f = draw.descale(p, side, b, h);
                let s = stored[[b, j, h, d]];
                assert_eq!(s, mode_case::round_e4m3(x / f), "[{b}, {j}, {h}, {d}]");
                if (x / f).abs() <= 448.0 {
                    assert!(
                        (s * f - x).abs() <= x.abs() / 16.0 + f * 2f32.powi(-10),
                        "{x} {s} {f}"
                    );
                } else {
                    assert_eq!(s.abs(), 448.0);
                }
            }
        }
        let pages = scatter_to_pages(&pg.problem, &pg.draw, &inp.k);
        for b in 0..p.batch {
            assert_eq!(
                mode_case::seq_kv(p, draw, KvSide::K, &inp.k, None, b),
                mode_case::seq_kv(&pg.problem, &pg.draw, KvSide::K, &pages, None, b)
            );
        }
        let check = ModeCheck::new(p, draw, &inp, 64, 1);
        let (o, lse) = reference_outputs(p, draw, &inp.k, &inp.v, &inp.q);
        check.judge_bits(&o, &lse).unwrap();
        // The stored values without their factors are a different problem.
        let unscaled = AttentionProblem {
            modes: flashcore::Modes {
                kv_fp8: None,
                ..p.modes.clone()
            },
            ..p.clone()
        };
        let (o, lse) = reference_outputs(&unscaled, draw, &inp.k, &inp.v, &inp.q);
        assert!(check.judge_bits(&o, &lse).is_err());
    }

    #[test]
    fn a_mode_check_passes_the_reference_and_catches_a_wrong_row() {
        // A small varlen case judged on the oracle's own f64 answer, rounded to bf16.
        let c = modes::varlen_case("v", &[5, 0, 9], true);
        let mut p = c.problem.clone();
        p.head_dim = 16;
        let inp = random_inputs(&p, 3);
        let check = ModeCheck::new(&p, &c.draw, &inp, 64, 1);
        assert!(check.rows_checked() > 0);
        let (q_shape, _, lse_shape) = flashcore::host::storage_shapes(&p);
        let mut o = ArrayD::<f32>::zeros(IxDyn(&q_shape));
        let mut lse = ArrayD::<f32>::zeros(IxDyn(&lse_shape));
        let cu = c.draw.cu_seqlens_q.as_ref().unwrap();
        for (b, &start) in cu[..3].iter().enumerate() {
            if c.draw.len_q[b] == 0 {
                continue;
            }
            let op = mode_case::seq_oracle_problem(&p, &c.draw, b);
            let q = mode_case::seq_rows(&p, &c.draw, &inp.q, b).insert_axis(Axis(0));
            let k = mode_case::seq_kv(&p, &c.draw, KvSide::K, &inp.k, None, b).insert_axis(Axis(0));
            let v = mode_case::seq_kv(&p, &c.draw, KvSide::V, &inp.v, None, b).insert_axis(Axis(0));
            let r = flashcore_oracle::reference_f64(&op, q.view(), k.view(), v.view(), &Rows::All);
            let (ro, rl) = r.to_dense(&op);
            for h in 0..p.heads_q {
                for i in 0..c.draw.len_q[b] {
                    let t = start as usize + i;
                    for d in 0..p.head_dim {
                        o[[t, h, d]] = ro[[0, h, i, d]] as f32;
                    }
                    lse[[h, t]] = rl[[0, h, i]] as f32;
                }
            }
        }
        let bits: Vec<u16> = o.iter().map(|&x| p.dtype.to_bits(x)).collect();
        let l: Vec<f32> = lse.iter().copied().collect();
        check.judge_bits(&bits, &l).unwrap();
        let mut bad = bits.clone();
        let last = bad.len() - 1; // the last row of the last sequence, always judged
        bad[last] = p.dtype.to_bits(7.0);
        assert!(check.judge_bits(&bad, &l).is_err());
        let mut nan = l.clone();
        nan[0] = f32::NAN;
        assert!(check.judge_bits(&bits, &nan).is_err());
    }
}
