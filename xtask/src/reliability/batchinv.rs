//! The `batchinv` check of `cargo xtask reliability`: the batch-invariant mode
//! (`docs/MODES.md`, *Batch invariance*). With `batch_invariant` on, every sequence's O and LSE
//! must be bit-identical
//! - alone (a batch of one, its pages shuffled anew in another pool, another block size or
//!   cache capacity),
//! - inside one random batch, and inside a second one with other companions in another order.
//!
//! Scenarios, for each head dim the kernel has of 128 and 64:
//! - `varlen`: packed Q and K, 1-64 sequences of mixed lengths, a third decode-shaped (their
//!   queries fit one decode tile, so a routed plan sends them to the decode kernel), causal;
//! - `paged`: a paged cache (block sizes 16, 64 and 256 between the runs), packed Q: chunked
//!   prefill beside decode steps;
//! - `cache+modes`: a contiguous cache, packed Q, a sliding window, softcap and ALiBi;
//! - `decode`: one query per sequence on a paged cache, batches of 1, 7, 64 and 256;
//! - `decode, small chunks`: the same with 2-tile key chunks (`FLASHCORE_DECODE_CHUNK_TILES`),
//!   so sequences take up to 80 splits and the combine's long path;
//! - `dense`: equal-length batches (1, 4 and 64 sequences), causal and not, where the default
//!   plans change warpgroups, epilogue and key split with the batch size.
//!
//! Storage no sequence reads (spare pages, cache rows past a sequence's keys) holds NaN, and a
//! NaN in the O of a sequence that sees keys is a failure too.

use std::collections::HashMap;
use std::time::Instant;

use flashcore::{AlibiSlopes, Attention, AttentionProblem, DType, Device, KvStorage, Modes};
use ndarray::{s, Array3, ArrayD, IxDyn};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

use super::watchdog::step;
use super::{dims_for, Args, Report, Res};
use crate::mode_case::{self, Draw, ModeInputs};

/// What all sequences of a scenario share.
#[derive(Clone, Debug)]
struct Shape {
    heads_q: usize,
    heads_kv: usize,
    head_dim: usize,
    dtype: DType,
    causal: bool,
    window_left: Option<usize>,
    softcap: Option<f32>,
    alibi: bool,
}

/// Where a batch's keys live; the queries are packed unless every sequence has the same count.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Storage {
    /// Plain `[b, s, h, d]` tensors: equal lengths, no modes.
    Dense,
    /// `cu_seqlens_k`.
    Packed,
    /// A contiguous cache with `extra` rows of capacity past the longest sequence.
    Contiguous {
        extra: usize,
    },
    Paged {
        block_size: usize,
    },
}

/// One sequence: its rows, in the order the oracle reads them.
struct Seq {
    q: Array3<f32>, // [len_q, heads_q, d]
    k: Array3<f32>, // [len_k, heads_kv, d]
    v: Array3<f32>,
}

impl Seq {
    fn len_q(&self) -> usize {
        self.q.shape()[0]
    }
    fn len_k(&self) -> usize {
        self.k.shape()[0]
    }
}

fn random3(rng: &mut StdRng, dtype: DType, rows: usize, heads: usize, d: usize) -> Array3<f32> {
    Array3::from_shape_simple_fn((rows, heads, d), || {
        dtype.round(StandardNormal.sample(&mut *rng))
    })
}

/// A batch of `seqs` in `storage`, as a problem with its tables and storage-order inputs. Q is
/// packed (`cu_seqlens_q`) when `packed_q`; otherwise every sequence has the same query count.
fn build(
    shape: &Shape,
    storage: Storage,
    packed_q: bool,
    seqs: &[&Seq],
    alibi: &[f32],
    rng: &mut StdRng,
) -> (AttentionProblem, Draw, ModeInputs) {
    let b = seqs.len();
    let (hq, hkv, d) = (shape.heads_q, shape.heads_kv, shape.head_dim);
    let len_q: Vec<usize> = seqs.iter().map(|s| s.len_q()).collect();
    let len_k: Vec<usize> = seqs.iter().map(|s| s.len_k()).collect();
    let max_q = len_q.iter().copied().max().unwrap_or(0);
    let max_k = len_k.iter().copied().max().unwrap_or(0);
    let mut modes = Modes {
        window_left: shape.window_left,
        softcap: shape.softcap,
        alibi: shape.alibi.then_some(AlibiSlopes::PerHead),
        ..Modes::default()
    };
    let cu_q = mode_case::prefix_sums(&len_q);
    let mut draw = Draw {
        alibi_slopes: shape.alibi.then(|| alibi.to_vec()),
        ..Draw::lengths(len_q.clone(), len_k.clone())
    };
    assert!(
        packed_q || len_q.iter().all(|&l| l == max_q),
        "unpacked Q needs equal query counts"
    );
    let q = if packed_q {
        modes.packed_q = Some(*cu_q.last().unwrap() as usize);
        draw.cu_seqlens_q = Some(cu_q.clone());
        let mut q = ArrayD::<f32>::zeros(IxDyn(&[cu_q[b] as usize, hq, d]));
        for (i, s) in seqs.iter().enumerate() {
            q.slice_mut(s![cu_q[i] as usize..cu_q[i + 1] as usize, .., ..])
                .assign(&s.q);
        }
        q
    } else {
        let mut q = ArrayD::<f32>::zeros(IxDyn(&[b, max_q, hq, d]));
        for (i, s) in seqs.iter().enumerate() {
            q.slice_mut(s![i, .., .., ..]).assign(&s.q);
        }
        q
    };
    let (k, v, seq_k) = match storage {
        Storage::Dense => {
            let mut k = ArrayD::<f32>::zeros(IxDyn(&[b, max_k, hkv, d]));
            let mut v = k.clone();
            for (i, s) in seqs.iter().enumerate() {
                k.slice_mut(s![i, .., .., ..]).assign(&s.k);
                v.slice_mut(s![i, .., .., ..]).assign(&s.v);
            }
            (k, v, max_k)
        }
        Storage::Packed => {
            let cu_k = mode_case::prefix_sums(&len_k);
            modes.kv = KvStorage::Packed {
                total_k: cu_k[b] as usize,
            };
            let mut k = ArrayD::<f32>::zeros(IxDyn(&[cu_k[b] as usize, hkv, d]));
            let mut v = k.clone();
            for (i, s) in seqs.iter().enumerate() {
                let rows = s![cu_k[i] as usize..cu_k[i + 1] as usize, .., ..];
                k.slice_mut(rows).assign(&s.k);
                v.slice_mut(rows).assign(&s.v);
            }
            draw.cu_seqlens_k = Some(cu_k);
            (k, v, max_k)
        }
        Storage::Contiguous { extra } => {
            let cap = (max_k + extra).max(1);
            let mut k = ArrayD::<f32>::from_elem(IxDyn(&[b, cap, hkv, d]), f32::NAN);
            let mut v = k.clone();
            for (i, s) in seqs.iter().enumerate() {
                k.slice_mut(s![i, ..s.len_k(), .., ..]).assign(&s.k);
                v.slice_mut(s![i, ..s.len_k(), .., ..]).assign(&s.v);
            }
            modes.seqused_k = true;
            draw.used = len_k.clone();
            draw.seqused_k = Some(len_k.iter().map(|&l| l as i32).collect());
            (k, v, cap)
        }
        Storage::Paged { block_size } => {
            // A table row per sequence, the pages of the whole batch shuffled over a pool with
            // spare blocks, so a sequence's pages sit elsewhere in every run.
            let max_blocks = max_k.div_ceil(block_size).max(1) + rng.gen_range(0..2);
            let num_blocks = b * max_blocks + rng.gen_range(1..8);
            let mut ids: Vec<i32> = (0..num_blocks as i32).collect();
            ids.shuffle(rng);
            let table: Vec<i32> = ids[..b * max_blocks].to_vec();
            let mut k =
                ArrayD::<f32>::from_elem(IxDyn(&[num_blocks, block_size, hkv, d]), f32::NAN);
            let mut v = k.clone();
            for (i, s) in seqs.iter().enumerate() {
                for j in 0..s.len_k() {
                    let blk = table[i * max_blocks + j / block_size] as usize;
                    let at = s![blk, j % block_size, .., ..];
                    k.slice_mut(at).assign(&s.k.slice(s![j, .., ..]));
                    v.slice_mut(at).assign(&s.v.slice(s![j, .., ..]));
                }
            }
            modes.kv = KvStorage::Paged {
                num_blocks,
                block_size,
                max_blocks_per_seq: max_blocks,
            };
            modes.seqused_k = true;
            draw.used = len_k.clone();
            draw.seqused_k = Some(len_k.iter().map(|&l| l as i32).collect());
            draw.block_table = Some(table);
            draw.num_blocks = num_blocks;
            (k, v, max_blocks * block_size)
        }
    };
    let p = AttentionProblem::new(b, hq, max_q, d)
        .with_kv(hkv, seq_k)
        .with_dtype(shape.dtype)
        .with_causal(shape.causal)
        .with_modes(modes)
        .with_batch_invariant(true);
    let inp = ModeInputs {
        q,
        k,
        v,
        k_new: None,
        v_new: None,
    };
    (p, draw, inp)
}

/// Bits of one sequence's O and LSE.
type Bits = (Vec<u32>, Vec<u32>);

/// Runs one batch and returns each sequence's bits, or why the batch failed.
fn run_batch(
    dev: &Device,
    k: &dyn Attention,
    sc: &Scenario,
    storage: Storage,
    seqs: &[&Seq],
    alibi: &[f32],
    rng: &mut StdRng,
) -> Result<Vec<Bits>, String> {
    let (p, draw, inp) = build(&sc.shape, storage, sc.packed_q, seqs, alibi, rng);
    let out = flashcore::forward_host_modes(
        k,
        dev,
        &p,
        flashcore::HostInputs::new(inp.q.view(), inp.k.view(), inp.v.view())
            .with_tables(draw.host_tables()),
    )
    .map_err(|e| format!("{storage:?} batch of {}: {e}", seqs.len()))?;
    let mut bits = Vec::with_capacity(seqs.len());
    for (i, s) in seqs.iter().enumerate() {
        let o = mode_case::seq_rows(&p, &draw, &out.o, i);
        let lse = mode_case::seq_lse(&draw, &out.lse, i);
        if s.len_k() > 0 && o.iter().any(|x| x.is_nan()) {
            return Err(format!(
                "{storage:?} batch of {}: NaN in the O of sequence {i} (len_q {}, len_k {})",
                seqs.len(),
                s.len_q(),
                s.len_k()
            ));
        }
        bits.push((
            o.iter().map(|x| x.to_bits()).collect(),
            lse.iter().map(|x| x.to_bits()).collect(),
        ));
    }
    Ok(bits)
}

/// A scenario: a pool of sequences and the runs that must agree on each of them.
struct Scenario {
    name: String,
    shape: Shape,
    /// Packed queries (`cu_seqlens_q`), or `[b, s, h, d]` of equal counts.
    packed_q: bool,
    pool: Vec<Seq>,
    /// Batches (indices into the pool, in order) and their storage; a sequence's bits in each
    /// must equal its bits in the first run that had it.
    runs: Vec<(Vec<usize>, Storage)>,
    /// `FLASHCORE_DECODE_CHUNK_TILES` for its runs.
    chunk_tiles: Option<usize>,
}

impl Scenario {
    fn check(&self, dev: &Device, k: &dyn Attention, rng: &mut StdRng) -> Result<String, String> {
        let alibi: Vec<f32> = (0..self.shape.heads_q)
            .map(|_| 2f32.powf(-rng.gen_range(0.0..8.0)))
            .collect();
        let mut first: HashMap<usize, (Bits, String)> = HashMap::new();
        let mut compared = 0usize;
        for (run, (batch, storage)) in self.runs.iter().enumerate() {
            let seqs: Vec<&Seq> = batch.iter().map(|&i| &self.pool[i]).collect();
            let label = format!("run {run} ({storage:?}, {} sequences)", batch.len());
            let bits = run_batch(dev, k, self, *storage, &seqs, &alibi, rng)?;
            for (&i, b) in batch.iter().zip(bits) {
                match first.get(&i) {
                    None => {
                        first.insert(i, (b, label.clone()));
                    }
                    Some((seen, where_)) => {
                        compared += 1;
                        if *seen != b {
                            let diff = |x: &[u32], y: &[u32]| {
                                x.iter().zip(y).filter(|(a, b)| a != b).count()
                            };
                            let s = &self.pool[i];
                            return Err(format!(
                                "sequence {i} (len_q {}, len_k {}): {label} against {where_}: {} O and \
                                 {} LSE elements differ",
                                s.len_q(),
                                s.len_k(),
                                diff(&seen.0, &b.0),
                                diff(&seen.1, &b.1)
                            ));
                        }
                    }
                }
            }
        }
        Ok(format!(
            "{} runs, {compared} sequence outputs bit-identical to their first",
            self.runs.len()
        ))
    }
}

/// A pool of `n` sequences; `decode` of them (a third by default) have queries that fit one
/// decode tile and longer key ranges.
fn pool(rng: &mut StdRng, shape: &Shape, n: usize, lens: &Lens) -> Vec<Seq> {
    let g = shape.heads_q / shape.heads_kv;
    (0..n)
        .map(|_| {
            let decode = rng.gen_bool(lens.decode_share);
            let len_q = if decode {
                // Queries that fit one decode tile (and the scenario's cap).
                let most = (16 / g).max(1).min(lens.max_q);
                rng.gen_range(lens.min_q.min(most)..=most)
            } else {
                rng.gen_range(lens.min_q..=lens.max_q)
            };
            let len_k = if decode {
                rng.gen_range(0..=lens.max_k_decode)
            } else {
                rng.gen_range(0..=lens.max_k)
            };
            let len_k = if shape.causal && !decode {
                len_k.max(len_q)
            } else {
                len_k
            };
            Seq {
                q: random3(rng, shape.dtype, len_q, shape.heads_q, shape.head_dim),
                k: random3(rng, shape.dtype, len_k, shape.heads_kv, shape.head_dim),
                v: random3(rng, shape.dtype, len_k, shape.heads_kv, shape.head_dim),
            }
        })
        .collect()
}

#[derive(Clone, Copy)]
struct Lens {
    decode_share: f64,
    min_q: usize,
    max_q: usize,
    max_k: usize,
    max_k_decode: usize,
}

/// Two random batches over the pool (sizes in 1..=pool), each sequence alone after them.
fn mixed_runs(rng: &mut StdRng, n: usize, storages: &[Storage]) -> Vec<(Vec<usize>, Storage)> {
    let mut runs = Vec::new();
    for _ in 0..2 {
        let mut ids: Vec<usize> = (0..n).collect();
        ids.shuffle(rng);
        ids.truncate(rng.gen_range(1..=n));
        runs.push((ids, *storages.choose(rng).unwrap()));
    }
    let mut seen: Vec<usize> = runs.iter().flat_map(|(b, _)| b.clone()).collect();
    seen.sort_unstable();
    seen.dedup();
    for i in seen {
        runs.push((vec![i], *storages.choose(rng).unwrap()));
    }
    runs
}

/// A pool of `n` sequences in two random batches and alone ([`mixed_runs`]).
fn mixed(
    rng: &mut StdRng,
    name: &str,
    shape: Shape,
    packed_q: bool,
    (n, lens): (usize, &Lens),
    storages: &[Storage],
    chunk_tiles: Option<usize>,
) -> Scenario {
    let pool = pool(rng, &shape, n, lens);
    Scenario {
        name: name.into(),
        shape,
        packed_q,
        runs: mixed_runs(rng, n, storages),
        pool,
        chunk_tiles,
    }
}

fn scenarios(rng: &mut StdRng, d: usize, dtype: DType) -> Vec<Scenario> {
    let gqa = Shape {
        heads_q: 8,
        heads_kv: 2,
        head_dim: d,
        dtype,
        causal: true,
        window_left: None,
        softcap: None,
        alibi: false,
    };
    let mut out = Vec::new();

    let lens = Lens {
        decode_share: 0.35,
        min_q: 0,
        max_q: 300,
        max_k: 600,
        max_k_decode: 5000,
    };
    // Past 512 query rows (8 heads) a sequence leaves the Hopper path's key-split build: varlen
    // and paged batches mix both kinds, which the plan runs in a launch each.
    let long = Lens {
        max_q: 1100,
        max_k: 1400,
        ..lens
    };
    let varlen = [Storage::Packed];
    out.push(mixed(
        rng,
        "varlen",
        gqa.clone(),
        true,
        (64, &long),
        &varlen,
        None,
    ));
    let paged = [16, 64, 256].map(|block_size| Storage::Paged { block_size });
    out.push(mixed(
        rng,
        "paged",
        gqa.clone(),
        true,
        (48, &long),
        &paged,
        None,
    ));

    let modes = Shape {
        causal: false,
        window_left: Some(256),
        softcap: Some(30.0),
        alibi: true,
        ..gqa.clone()
    };
    let contiguous = [0, 17, 300].map(|extra| Storage::Contiguous { extra });
    out.push(mixed(
        rng,
        "cache+modes",
        modes,
        true,
        (32, &lens),
        &contiguous,
        None,
    ));

    // Decode: one query each, batches of 1, 7, 64 and 256 (the first n of the pool).
    let decode = Shape {
        causal: false,
        ..gqa.clone()
    };
    let one_query = Lens {
        decode_share: 1.0,
        min_q: 1,
        max_q: 1,
        max_k: 0,
        max_k_decode: 5000,
    };
    let mut runs = Vec::new();
    for n in [256, 64, 7, 1] {
        let mut ids: Vec<usize> = (0..n).collect();
        ids.shuffle(rng);
        runs.push((ids, *paged.choose(rng).unwrap()));
    }
    for i in 0..8 {
        runs.push((vec![i], *paged.choose(rng).unwrap()));
    }
    out.push(Scenario {
        name: "decode".into(),
        shape: decode.clone(),
        packed_q: false,
        pool: pool(rng, &decode, 256, &one_query),
        runs,
        chunk_tiles: None,
    });

    out.push(mixed(
        rng,
        "decode, small chunks",
        decode,
        false,
        (24, &one_query),
        &paged,
        Some(2),
    ));

    // Dense: equal lengths, batches of several sizes (the default plans change warpgroups,
    // epilogue and key split with the item count).
    for (heads, seq, sizes) in [(8, 512, [64, 4, 1]), (16, 2048, [4, 2, 1])] {
        for causal in [false, true] {
            let shape = Shape {
                heads_q: heads,
                heads_kv: heads,
                causal,
                ..gqa.clone()
            };
            let fixed = Lens {
                decode_share: 0.0,
                min_q: seq,
                max_q: seq,
                max_k: 0,
                max_k_decode: 0,
            };
            let n = sizes[0];
            let mut p = pool(rng, &shape, n, &fixed);
            for s in p.iter_mut() {
                s.k = random3(rng, dtype, seq, heads, d);
                s.v = random3(rng, dtype, seq, heads, d);
            }
            let mut runs = Vec::new();
            for size in sizes {
                let mut ids: Vec<usize> = (0..n).collect();
                ids.shuffle(rng);
                ids.truncate(size);
                runs.push((ids, Storage::Dense));
            }
            out.push(Scenario {
                name: format!("dense ({heads} heads, {seq} rows, causal {causal})"),
                shape,
                packed_q: false,
                pool: p,
                runs,
                chunk_tiles: None,
            });
        }
    }
    out
}

pub(super) fn run(dev: &Device, kernels: &[Box<dyn Attention>], args: &Args, report: &mut Report) {
    for k in kernels {
        let t = Instant::now();
        let _s = step(format!("batchinv {}", k.name()), args.step_timeout);
        let dims = dims_for(k.as_ref(), args, &[128, 64]);
        let probe = AttentionProblem::new(1, 2, 1, dims[0])
            .with_kv(2, 64)
            .with_modes(Modes {
                packed_q: Some(1),
                kv: KvStorage::Paged {
                    num_blocks: 4,
                    block_size: 16,
                    max_blocks_per_seq: 4,
                },
                seqused_k: true,
                ..Modes::default()
            })
            .with_batch_invariant(true);
        if let Err(u) = k.supports(&probe, dev.info()) {
            report.add("batchinv", k.name(), Res::Skip, u.reason, t);
            continue;
        }
        let mut notes = Vec::new();
        let mut fails = Vec::new();
        let mut rng = StdRng::seed_from_u64(args.seed ^ 0xba7c_41b7);
        for (i, &d) in dims.iter().enumerate() {
            let dtype = if i % 2 == 0 { DType::Bf16 } else { DType::F16 };
            for sc in scenarios(&mut rng, d, dtype) {
                let _chunks = sc.chunk_tiles.map(ChunkTiles::set);
                let what = format!("{} D={d} {dtype}", sc.name);
                match sc.check(dev, k.as_ref(), &mut rng) {
                    Ok(n) => notes.push(format!("{what}: {n}")),
                    Err(e) => fails.push(format!("{what}: {e}")),
                }
            }
        }
        report.add_outcome("batchinv", k.name(), &notes, &fails, t);
    }
}

/// `FLASHCORE_DECODE_CHUNK_TILES` for as long as it lives (the plans read it at each call; the
/// checks run on one thread).
struct ChunkTiles;

impl ChunkTiles {
    fn set(n: usize) -> ChunkTiles {
        std::env::set_var("FLASHCORE_DECODE_CHUNK_TILES", n.to_string());
        ChunkTiles
    }
}

impl Drop for ChunkTiles {
    fn drop(&mut self) {
        std::env::remove_var("FLASHCORE_DECODE_CHUNK_TILES");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape {
            heads_q: 4,
            heads_kv: 2,
            head_dim: 8,
            dtype: DType::Bf16,
            causal: false,
            window_left: None,
            softcap: None,
            alibi: false,
        }
    }

    fn seqs(rng: &mut StdRng) -> Vec<Seq> {
        [(3, 40), (1, 0), (5, 17)]
            .iter()
            .map(|&(lq, lk)| Seq {
                q: random3(rng, DType::Bf16, lq, 4, 8),
                k: random3(rng, DType::Bf16, lk, 2, 8),
                v: random3(rng, DType::Bf16, lk, 2, 8),
            })
            .collect()
    }

    /// Every storage puts each sequence's rows where the oracle's gathering finds them, and
    /// its tables pass the core's validation.
    #[test]
    fn batches_hold_each_sequence_where_the_tables_say() {
        let mut rng = StdRng::seed_from_u64(1);
        let pool = seqs(&mut rng);
        let refs: Vec<&Seq> = pool.iter().collect();
        for storage in [
            Storage::Packed,
            Storage::Contiguous { extra: 5 },
            Storage::Paged { block_size: 16 },
        ] {
            let (p, draw, inp) = build(&shape(), storage, true, &refs, &[], &mut rng);
            assert!(p.batch_invariant);
            p.validate().expect("valid problem");
            draw.host_tables()
                .validate(&p)
                .unwrap_or_else(|e| panic!("{storage:?}: {e}"));
            for (i, s) in pool.iter().enumerate() {
                let k = mode_case::seq_kv(&p, &draw, mode_case::KvSide::K, &inp.k, None, i);
                assert_eq!(
                    k,
                    s.k.clone().permuted_axes([1, 0, 2]),
                    "{storage:?} seq {i}"
                );
                let q = mode_case::seq_rows(&p, &draw, &inp.q, i);
                assert_eq!(
                    q,
                    s.q.clone().permuted_axes([1, 0, 2]),
                    "{storage:?} seq {i}"
                );
            }
        }
    }

    /// Every batch of every scenario builds into a problem and tables the core accepts (at a
    /// tiny head dim: the pools are the GPU run's).
    #[test]
    fn every_scenario_builds_valid_batches() {
        let mut rng = StdRng::seed_from_u64(3);
        for sc in scenarios(&mut rng, 8, DType::Bf16) {
            for (batch, storage) in &sc.runs {
                let seqs: Vec<&Seq> = batch.iter().map(|&i| &sc.pool[i]).collect();
                let alibi = vec![0.5; sc.shape.heads_q];
                let (p, draw, _) = build(&sc.shape, *storage, sc.packed_q, &seqs, &alibi, &mut rng);
                p.validate().unwrap_or_else(|e| panic!("{}: {e}", sc.name));
                draw.host_tables()
                    .validate(&p)
                    .unwrap_or_else(|e| panic!("{} {storage:?}: {e}", sc.name));
            }
        }
    }

    #[test]
    fn mixed_runs_end_with_each_sequence_alone() {
        let mut rng = StdRng::seed_from_u64(2);
        let runs = mixed_runs(&mut rng, 10, &[Storage::Packed]);
        let batched: std::collections::BTreeSet<usize> =
            runs[..2].iter().flat_map(|(b, _)| b.clone()).collect();
        let alone: Vec<usize> = runs[2..].iter().map(|(b, _)| b[0]).collect();
        assert!(runs[2..].iter().all(|(b, _)| b.len() == 1));
        assert_eq!(batched.into_iter().collect::<Vec<_>>(), alone);
    }
}
