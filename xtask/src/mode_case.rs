//! Verification cases for the inference modes (`docs/MODES.md`): varlen batches, KV caches
//! (contiguous or paged, with appended rows), windows, softcap, ALiBi and `mm_prefix_ranges`. A
//! case is still one `--case` line: per-sequence lengths, block tables, slopes and ranges are
//! drawn from its seed, so the line alone reruns it. Each sequence is judged as its own batch-1
//! problem by the oracle, from the logical K/V the oracle gathers out of the cache (pages, used
//! rows, appended rows).
//!
//! An fp8 case (`fp8=tensor|head|batchhead`, `Modes::kv_fp8`) stores K and V as e4m3 values
//! (the host path takes them as numbers, `flashcore::host`) with f32 descale tables of that
//! shape; the oracle sees the true values, stored × descale ([`seq_kv`]). With `qfp8=1` beside
//! it (`Modes::q_fp8`, FlashAttention 3's fp8 forward) Q is stored so too, with a `q_descale`
//! table of K's shape ([`seq_q_values`]), and the oracle's low-precision reference is the fp8
//! program's (`OracleProblem::p_e4m3`).

use anyhow::{anyhow, bail, Result};
use flashcore::{
    AlibiSlopes, AttentionProblem, DType, HostInputs, HostTables, KvScales, KvStorage, Modes,
};
use flashcore_oracle::{BackwardVerdict, OracleProblem, Rows, Verdict};
use ndarray::{s, Array2, Array3, ArrayD, ArrayView3, Axis, IxDyn};
use rand::{Rng, SeedableRng};

use crate::inputs::{precision, random_tensor, to_layout};

/// How a case's storage is laid out, beyond what `AttentionProblem::modes` says: what its
/// `--case` keys were. Kept beside the problem so a case prints back to the same line.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ModeKeys {
    /// `varlen=1`: packed Q (and packed K/V unless a cache is given), lengths drawn per sequence.
    pub varlen: bool,
    /// `cache=contig` or `cache=paged` (with `bs=N`).
    pub cache: Option<CacheKind>,
    /// `append=N`.
    pub append: usize,
    /// `wl=N`, `wr=N`.
    pub window_left: Option<usize>,
    pub window_right: Option<usize>,
    /// `softcap=X` (as written, so the line round-trips).
    pub softcap: Option<String>,
    /// `alibi=head` or `alibi=batch`.
    pub alibi: Option<AlibiSlopes>,
    /// `mm=N`: N `mm_prefix_ranges` pairs per sequence (`mm=0` is none).
    pub mm: Option<usize>,
    /// `fp8=tensor|head|batchhead`: K and V stored as e4m3 with descale tables of that shape.
    pub kv_fp8: Option<KvScales>,
    /// `qfp8=1`: Q stored as e4m3 too, its descale table of `fp8=`'s shape (`Modes::q_fp8`).
    pub q_fp8: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheKind {
    Contiguous,
    Paged { block_size: usize },
}

impl ModeKeys {
    /// The keys that describe a problem's modes (lengths and tables are redrawn from the seed).
    pub fn from_modes(m: &Modes) -> ModeKeys {
        ModeKeys {
            varlen: m.packed_q.is_some(),
            cache: match m.kv {
                KvStorage::Paged { block_size, .. } => Some(CacheKind::Paged { block_size }),
                _ if m.seqused_k => Some(CacheKind::Contiguous),
                _ => None,
            },
            append: m.append.unwrap_or(0),
            window_left: m.window_left,
            window_right: m.window_right,
            softcap: m.softcap.map(|c| c.to_string()),
            alibi: m.alibi,
            mm: m.mm_prefix,
            kv_fp8: m.kv_fp8,
            q_fp8: m.q_fp8,
        }
    }

    /// Takes one `key=value` of a case line; false if the key is not a mode key.
    pub fn parse_key(&mut self, k: &str, v: &str) -> Result<bool> {
        let num = || {
            v.trim()
                .parse::<usize>()
                .map_err(|_| anyhow!("{k}: '{v}' is not a count"))
        };
        match k {
            "varlen" => self.varlen = matches!(v.trim(), "1" | "true" | "yes"),
            "cache" => {
                self.cache = match v.trim() {
                    "contig" => Some(CacheKind::Contiguous),
                    "paged" => Some(CacheKind::Paged {
                        block_size: match self.cache {
                            Some(CacheKind::Paged { block_size }) => block_size,
                            _ => 16,
                        },
                    }),
                    "none" => None,
                    other => bail!("cache: '{other}' (expected contig, paged or none)"),
                }
            }
            "bs" => self.cache = Some(CacheKind::Paged { block_size: num()? }),
            "append" => self.append = num()?,
            "wl" => self.window_left = Some(num()?),
            "wr" => self.window_right = Some(num()?),
            "softcap" => {
                v.trim()
                    .parse::<f32>()
                    .map_err(|_| anyhow!("softcap: '{v}' is not a number"))?;
                self.softcap = Some(v.trim().to_string());
            }
            "alibi" => {
                self.alibi = match v.trim() {
                    "head" => Some(AlibiSlopes::PerHead),
                    "batch" => Some(AlibiSlopes::PerBatchHead),
                    other => bail!("alibi: '{other}' (expected head or batch)"),
                }
            }
            // No table rather than an empty one, which the core refuses.
            "mm" => self.mm = Some(num()?).filter(|&n| n > 0),
            "fp8" => {
                self.kv_fp8 = match v.trim() {
                    "none" => None,
                    other => Some(parse_kv_scales(other).ok_or_else(|| {
                        anyhow!("fp8: '{other}' (expected tensor, head, batchhead or none)")
                    })?),
                }
            }
            "qfp8" => self.q_fp8 = matches!(v.trim(), "1" | "true" | "yes"),
            _ => return Ok(false),
        }
        Ok(true)
    }

    pub fn to_arg(&self) -> String {
        let mut s = String::new();
        if self.varlen {
            s.push_str(",varlen=1");
        }
        match self.cache {
            Some(CacheKind::Contiguous) => s.push_str(",cache=contig"),
            Some(CacheKind::Paged { block_size }) => {
                s.push_str(&format!(",cache=paged,bs={block_size}"))
            }
            None => {}
        }
        if self.append > 0 {
            s.push_str(&format!(",append={}", self.append));
        }
        if let Some(w) = self.window_left {
            s.push_str(&format!(",wl={w}"));
        }
        if let Some(w) = self.window_right {
            s.push_str(&format!(",wr={w}"));
        }
        if let Some(c) = &self.softcap {
            s.push_str(&format!(",softcap={c}"));
        }
        match self.alibi {
            Some(AlibiSlopes::PerHead) => s.push_str(",alibi=head"),
            Some(AlibiSlopes::PerBatchHead) => s.push_str(",alibi=batch"),
            None => {}
        }
        if let Some(n) = self.mm {
            s.push_str(&format!(",mm={n}"));
        }
        if let Some(scales) = self.kv_fp8 {
            s.push_str(&format!(",fp8={}", kv_scales_name(scales)));
        }
        if self.q_fp8 {
            s.push_str(",qfp8=1");
        }
        s
    }
}

/// `--dtype` of `verify`: what Q, K and V are all stored as (O stays f16 or bf16).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum InputDtype {
    /// OCP FP8 E4M3 (e4m3fn) Q, K and V with f32 descale tables (`Modes::q_fp8` and
    /// `Modes::kv_fp8`): FlashAttention 3's fp8 forward.
    E4m3,
}

/// `--kv-dtype` of `verify` and `bench-all`: what K and V are stored as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum KvDtype {
    /// OCP FP8 E4M3 (e4m3fn) with f32 descale tables (`Modes::kv_fp8`).
    E4m3,
}

/// The name of a descale table shape in case lines and on the command lines (`--kv-scales`).
pub fn kv_scales_name(s: KvScales) -> &'static str {
    match s {
        KvScales::PerTensor => "tensor",
        KvScales::PerKvHead => "head",
        KvScales::PerBatchKvHead => "batchhead",
    }
}

/// [`kv_scales_name`]'s inverse.
pub fn parse_kv_scales(s: &str) -> Option<KvScales> {
    [
        KvScales::PerTensor,
        KvScales::PerKvHead,
        KvScales::PerBatchKvHead,
    ]
    .into_iter()
    .find(|&k| kv_scales_name(k) == s.trim())
}

/// Everything drawn from a case's seed: lengths, tables, slopes.
#[derive(Clone, Debug, PartialEq)]
pub struct Draw {
    pub len_q: Vec<usize>,
    /// Keys each sequence attends to (packed lengths, or used cache rows + appended rows).
    pub len_k: Vec<usize>,
    /// Cache rows valid before the call (`seqused_k`), when there is a cache.
    pub used: Vec<usize>,
    pub cu_seqlens_q: Option<Vec<i32>>,
    pub cu_seqlens_k: Option<Vec<i32>>,
    pub seqused_k: Option<Vec<i32>>,
    pub block_table: Option<Vec<i32>>,
    pub num_blocks: usize,
    pub alibi_slopes: Option<Vec<f32>>,
    /// Row-major `[batch, n, 2]` (`Modes::mm_prefix`).
    pub mm_prefix_ranges: Option<Vec<i32>>,
    /// e4m3 K's and V's descale tables (`Modes::kv_fp8`, shaped as its `KvScales` says).
    pub k_descale: Option<Vec<f32>>,
    pub v_descale: Option<Vec<f32>>,
    /// e4m3 K and V: the standard deviation of the stored values before they are rounded to
    /// e4m3 (K's, V's), drawn per case ([`draw_fp8_side`]).
    pub kv_fp8_std: Option<[f32; 2]>,
    /// e4m3 Q's descale table (`Modes::q_fp8`, K's shape) and its stored values' spread.
    pub q_descale: Option<Vec<f32>>,
    pub q_fp8_std: Option<f32>,
}

/// A length in 0..=max, often one of the edges (0, 1, max) so they come up.
fn draw_len(rng: &mut impl Rng, max: usize) -> usize {
    match rng.gen_range(0..8) {
        0 => 0,
        1 => 1.min(max),
        2 => max,
        _ => rng.gen_range(0..=max),
    }
}

/// `cu_seqlens` of these lengths: 0, then the running totals.
pub fn prefix_sums(lens: &[usize]) -> Vec<i32> {
    let mut cu = vec![0i32];
    for &l in lens {
        cu.push(cu.last().unwrap() + l as i32);
    }
    cu
}

/// Fills in `problem.modes` from the mode keys and the seed (lengths and totals are part of the
/// problem: the kernel needs them). `problem.seq_q`/`seq_k` are the maxima / the capacity.
pub fn apply(problem: &mut AttentionProblem, keys: &ModeKeys, seed: u64) -> Draw {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x6d6f_6465_7321);
    let b = problem.batch;
    let mut m = Modes {
        window_left: keys.window_left,
        window_right: keys.window_right,
        softcap: keys.softcap.as_ref().and_then(|c| c.parse().ok()),
        alibi: keys.alibi,
        ..Modes::default()
    };
    let len_q: Vec<usize> = if keys.varlen {
        (0..b).map(|_| draw_len(&mut rng, problem.seq_q)).collect()
    } else {
        vec![problem.seq_q; b]
    };
    let mut cu_seqlens_q = None;
    if keys.varlen {
        let cu = prefix_sums(&len_q);
        m.packed_q = Some(*cu.last().unwrap() as usize);
        cu_seqlens_q = Some(cu);
    }
    let mut draw = Draw {
        cu_seqlens_q,
        ..Draw::lengths(len_q, vec![])
    };
    match keys.cache {
        None if keys.varlen => {
            let len_k: Vec<usize> = (0..b).map(|_| draw_len(&mut rng, problem.seq_k)).collect();
            let cu = prefix_sums(&len_k);
            m.kv = KvStorage::Packed {
                total_k: *cu.last().unwrap() as usize,
            };
            draw.cu_seqlens_k = Some(cu);
            draw.len_k = len_k;
        }
        None => draw.len_k = vec![problem.seq_k; b],
        Some(kind) => {
            // The cache holds at least the appended rows (a drawn capacity below them would be
            // a problem the core rightly rejects, not a kernel failure).
            problem.seq_k = problem.seq_k.max(keys.append);
            if let CacheKind::Paged { block_size } = kind {
                let max_blocks = problem.seq_k.div_ceil(block_size).max(1);
                problem.seq_k = max_blocks * block_size;
                // Spare blocks beyond what the sequences own: pages may be anywhere.
                let num_blocks = b * max_blocks + 3;
                let mut ids: Vec<i32> = (0..num_blocks as i32).collect();
                for i in (1..ids.len()).rev() {
                    ids.swap(i, rng.gen_range(0..=i));
                }
                draw.block_table = Some(ids[..b * max_blocks].to_vec());
                draw.num_blocks = num_blocks;
                m.kv = KvStorage::Paged {
                    num_blocks,
                    block_size,
                    max_blocks_per_seq: max_blocks,
                };
            }
            m.seqused_k = true;
            let room = problem.seq_k.saturating_sub(keys.append);
            draw.used = (0..b).map(|_| draw_len(&mut rng, room)).collect();
            draw.len_k = draw.used.iter().map(|u| u + keys.append).collect();
            draw.seqused_k = Some(draw.used.iter().map(|&u| u as i32).collect());
            if keys.append > 0 {
                m.append = Some(keys.append);
            }
        }
    }
    if let Some(a) = keys.alibi {
        let n = match a {
            AlibiSlopes::PerHead => problem.heads_q,
            AlibiSlopes::PerBatchHead => b * problem.heads_q,
        };
        // Positive slopes of the sizes models use (2^-8 .. 1), rounded to what f32 holds.
        draw.alibi_slopes = Some(
            (0..n)
                .map(|_| 2f32.powf(-rng.gen_range(0.0..8.0)))
                .collect(),
        );
    }
    // Drawn last, so that lines without `mm=` draw the same tables as before the key existed.
    if let Some(n) = keys.mm {
        draw.mm_prefix_ranges = Some(draw_mm_ranges(&mut rng, &draw.len_k, n));
        m.mm_prefix = Some(n);
    }
    // After the ranges, so that lines without `fp8=` draw what they drew before the key existed.
    if let Some(scales) = keys.kv_fp8 {
        let n = scales.table_len(b, problem.heads_kv);
        let (k_std, k_descale) = draw_fp8_side(&mut rng, n);
        let (v_std, v_descale) = draw_fp8_side(&mut rng, n);
        draw.k_descale = Some(k_descale);
        draw.v_descale = Some(v_descale);
        draw.kv_fp8_std = Some([k_std, v_std]);
        m.kv_fp8 = Some(scales);
        // After K's and V's, so that lines without `qfp8=` draw what they drew before it.
        if keys.q_fp8 {
            let (q_std, q_descale) = draw_fp8_side(&mut rng, n);
            draw.q_descale = Some(q_descale);
            draw.q_fp8_std = Some(q_std);
        }
    }
    // Without `fp8=` there is no table shape: the problem says so, and the core refuses it.
    m.q_fp8 = keys.q_fp8;
    problem.modes = m;
    draw
}

/// log2 of the spread (standard deviation) of one case's stored e4m3 K or V values, before
/// rounding: from 2^-4, where a fifth of them are subnormal (below 2^-6), to 2^7.5, where some
/// reach the largest finite value, 448 (and larger ones saturate to it, as a quantizer does).
pub const FP8_LOG2_STD: std::ops::Range<f32> = -4.0..7.5;
/// log2 of the descale factors drawn: powers of two, 2^-10 ..= 2^5 (each case's factors spread
/// over 2^4 around the inverse of its stored spread, [`draw_fp8_side`]).
pub const FP8_LOG2_DESCALE: std::ops::RangeInclusive<i32> = -10..=5;

/// One side's (Q's, K's or V's) stored spread and descale table of `n` entries. The stored values
/// span the e4m3 range across cases, and the factors are spread over the entries (2^-2 ..= 2^1
/// times a centre) around the inverse of that spread, so the true values (stored × descale)
/// stay near unit scale, where the tolerance rule's constant floor holds (`docs/ORACLE.md`):
/// their spread is within 2^-2.5 ..= 2^1.5. A real cache is the same: its factor is the amax
/// its bytes were scaled down from, over 448.
///
/// Why powers of two: the oracle takes f32 inputs, and stored × descale must be exact there
/// (and in f16 and bf16: the low-precision reference rounds its inputs to the dtype, which would
/// otherwise widen the tolerance). An e4m3 value has 4 significant bits and an arbitrary f32
/// factor 24, so their product may need 28 and round in f32; times a power of two it keeps its 4
/// bits, and within 2^-19 (the least subnormal, 2^-9, times 2^-10) ..= 14336 (448 · 2^5) every
/// such product is an f16 (subnormal below 2^-14, whose step is 2^-24), a bf16 and an f32, so
/// the kernel and both references see the same numbers.
fn draw_fp8_side(rng: &mut impl Rng, n: usize) -> (f32, Vec<f32>) {
    let log2_std: f32 = rng.gen_range(FP8_LOG2_STD);
    // Within the range whatever the spread: the clamp below only guards the constants.
    let centre = (-log2_std).round() as i32;
    let table = (0..n)
        .map(|_| {
            let e = (centre + rng.gen_range(-2..=1))
                .clamp(*FP8_LOG2_DESCALE.start(), *FP8_LOG2_DESCALE.end());
            2f32.powi(e)
        })
        .collect();
    (2f32.powf(log2_std), table)
}

/// `x` rounded to the nearest e4m3 value (ties to even; beyond ±448 saturated to ±448), as f32.
pub fn round_e4m3(x: f32) -> f32 {
    float8::F8E4M3::from_f32(x).to_f32()
}

/// Most keys past `len_k` a drawn range may end at: the kernel must clip ranges at the
/// sequence's keys.
const MM_END_SLACK: usize = 16;

/// `n` `mm_prefix_ranges` pairs per sequence, row-major `[batch, n, 2]`. Mostly used ranges
/// (short ones like an image's tokens, long ones, ends past `len_k`), plus the shapes a kernel
/// may get wrong: unused slots (`start >= end`, negative ones too), ranges from key 0, ranges
/// over the last row's diagonal (the only row of a decode step) and ranges that overlap the
/// previous one of the sequence.
fn draw_mm_ranges(rng: &mut impl Rng, len_k: &[usize], n: usize) -> Vec<i32> {
    let mut out = Vec::with_capacity(len_k.len() * n * 2);
    for &lk in len_k {
        // Slack in proportion to the keys, so that short sequences keep most ranges inside them.
        let slack = (1 + lk / 4).min(MM_END_SLACK);
        let mut prev: Option<(usize, usize)> = None;
        for _ in 0..n {
            // An end after `start` (`start <= lk`): past the keys (the clip), short (an image's
            // tokens) or anywhere up to the keys' end.
            let end_after = |rng: &mut dyn rand::RngCore, start: usize| -> usize {
                let inside = lk.max(start + 1);
                match rng.gen_range(0..4) {
                    0 => rng.gen_range(lk + 1..=lk + slack),
                    1 => (start + rng.gen_range(1..=32)).min(inside),
                    _ => rng.gen_range(start + 1..=inside),
                }
            };
            let (start, end): (i64, i64) = match rng.gen_range(0..10) {
                0 => match rng.gen_range(0..3) {
                    0 => (-1, -1),
                    1 => {
                        let x = rng.gen_range(0..=lk) as i64;
                        (x, x)
                    }
                    _ => {
                        let s = rng.gen_range(1..=lk + 1) as i64;
                        (s, rng.gen_range(0..s))
                    }
                },
                1 => (0, end_after(rng, 0) as i64),
                2 if lk > 0 => {
                    let start = rng.gen_range(0..lk);
                    (start as i64, rng.gen_range(lk..=lk + slack) as i64)
                }
                3 if prev.is_some() => {
                    let (ps, pe) = prev.unwrap();
                    let start = rng.gen_range(ps..pe).min(lk);
                    (start as i64, end_after(rng, start) as i64)
                }
                _ => {
                    let start = rng.gen_range(0..=lk);
                    (start as i64, end_after(rng, start) as i64)
                }
            };
            if start < end {
                prev = Some((start as usize, end as usize));
            }
            out.extend([start as i32, end as i32]);
        }
    }
    out
}

impl Draw {
    /// Lengths alone: no tables, no slopes (a dense problem's, or the start of a hand-built one).
    pub fn lengths(len_q: Vec<usize>, len_k: Vec<usize>) -> Draw {
        Draw {
            len_q,
            len_k,
            used: vec![],
            cu_seqlens_q: None,
            cu_seqlens_k: None,
            seqused_k: None,
            block_table: None,
            num_blocks: 0,
            alibi_slopes: None,
            mm_prefix_ranges: None,
            k_descale: None,
            v_descale: None,
            kv_fp8_std: None,
            q_descale: None,
            q_fp8_std: None,
        }
    }

    pub fn host_tables(&self) -> HostTables<'_> {
        HostTables {
            cu_seqlens_q: self.cu_seqlens_q.as_deref(),
            cu_seqlens_k: self.cu_seqlens_k.as_deref(),
            seqused_k: self.seqused_k.as_deref(),
            block_table: self.block_table.as_deref(),
            alibi_slopes: self.alibi_slopes.as_deref(),
            mm_prefix_ranges: self.mm_prefix_ranges.as_deref(),
            k_descale: self.k_descale.as_deref(),
            v_descale: self.v_descale.as_deref(),
            q_descale: self.q_descale.as_deref(),
        }
    }

    /// The descale factor of K's or V's table (`side`) for sequence `b`, KV head `h`; 1 for K/V
    /// in the problem's dtype.
    pub fn descale(&self, p: &AttentionProblem, side: KvSide, b: usize, h: usize) -> f32 {
        let (Some(scales), Some(table)) = (
            p.modes.kv_fp8,
            match side {
                KvSide::K => self.k_descale.as_ref(),
                KvSide::V => self.v_descale.as_ref(),
            },
        ) else {
            return 1.0;
        };
        let (batch_stride, head_stride) = scales.strides(p.heads_kv);
        table[b * batch_stride + h * head_stride]
    }

    /// The descale factor of e4m3 Q's table for sequence `b`, query head `h_q` (its KV head's
    /// entry, as K's table is indexed); 1 for Q in the problem's dtype.
    pub fn q_descale(&self, p: &AttentionProblem, b: usize, h_q: usize) -> f32 {
        let (Some(scales), true, Some(table)) =
            (p.modes.kv_fp8, p.modes.q_fp8, self.q_descale.as_ref())
        else {
            return 1.0;
        };
        let (batch_stride, head_stride) = scales.strides(p.heads_kv);
        table[b * batch_stride + (h_q / p.q_heads_per_kv()) * head_stride]
    }
}

/// Which of K and V a storage array holds (for its descale table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvSide {
    K,
    V,
}

/// Storage-order inputs of a mode case (see `flashcore::HostInputs`), in f32 or another element
/// type.
pub struct ModeInputs<E = f32> {
    pub q: ArrayD<E>,
    pub k: ArrayD<E>,
    pub v: ArrayD<E>,
    pub k_new: Option<ArrayD<E>>,
    pub v_new: Option<ArrayD<E>>,
}

impl<E> ModeInputs<E> {
    /// Every element through `f` (by way of f32).
    pub fn map<F: Clone>(&self, f: impl Fn(f32) -> F) -> ModeInputs<F>
    where
        E: Copy + Into<f32>,
    {
        let m = |a: &ArrayD<E>| a.mapv(|x| f(x.into()));
        ModeInputs {
            q: m(&self.q),
            k: m(&self.k),
            v: m(&self.v),
            k_new: self.k_new.as_ref().map(m),
            v_new: self.v_new.as_ref().map(m),
        }
    }

    /// The inputs with `draw`'s tables, as a host call takes them.
    pub fn host_inputs<'a>(&'a self, draw: &'a Draw) -> HostInputs<'a, E> {
        HostInputs::new(self.q.view(), self.k.view(), self.v.view())
            .with_append(
                self.k_new.as_ref().map(|a| a.view()),
                self.v_new.as_ref().map(|a| a.view()),
            )
            .with_tables(draw.host_tables())
    }
}

fn random_d(dtype: DType, shape: &[usize], seed: u64) -> ArrayD<f32> {
    let mut s4 = [1usize; 4];
    s4[4 - shape.len()..].copy_from_slice(shape);
    random_tensor(dtype, s4, seed)
        .into_shape_with_order(IxDyn(shape))
        .expect("same length")
}

/// dO of a varlen backward case: fresh random values in O's storage shape (packed
/// `[total_q, heads_q, dv]`), from a seed of its own.
pub fn grad_output_storage(p: &AttentionProblem, seed: u64) -> ArrayD<f32> {
    let (_, o_shape) = flashcore::host::v_o_shapes(p);
    random_d(
        p.dtype,
        &o_shape,
        seed.wrapping_mul(3).wrapping_add(0x0bad_5eed),
    )
}

/// Fresh random storage: every slot, used or not, holds a random value (reliability fills the
/// unused ones with NaN instead). With e4m3 K/V (`draw.kv_fp8_std`), K and V are the same draws
/// times the case's spread, rounded to e4m3: the stored values, which the host path takes as
/// numbers. The rows to append stay true values in the dtype, as a model hands them over: the
/// append quantizes them into the cache ([`seq_kv`]). With e4m3 Q (`draw.q_fp8_std`) Q is drawn
/// the same way.
pub fn mode_inputs(p: &AttentionProblem, draw: &Draw, seed: u64) -> ModeInputs {
    // V (a cache's pages included) and v_new are V's width (`head_dim_v`), K and k_new Q's.
    let (q_shape, k_shape, _) = flashcore::host::storage_shapes(p);
    let (v_shape, _) = flashcore::host::v_o_shapes(p);
    let s = seed.wrapping_mul(5);
    let new_shape = |d: usize| p.modes.append.map(|n| vec![p.batch, n, p.heads_kv, d]);
    let [k_std, v_std] = draw.kv_fp8_std.unwrap_or([1.0; 2]);
    let kv = |shape: &[usize], seed: u64, std: f32| {
        let a = random_d(p.dtype, shape, seed);
        match draw.kv_fp8_std {
            Some(_) => a.mapv(|x| round_e4m3(std * x)),
            None => a,
        }
    };
    let q = random_d(p.dtype, &q_shape, s);
    ModeInputs {
        q: match draw.q_fp8_std {
            Some(std) => q.mapv(|x| round_e4m3(std * x)),
            None => q,
        },
        k: kv(&k_shape, s + 1, k_std),
        v: kv(&v_shape, s + 2, v_std),
        k_new: new_shape(p.head_dim).map(|sh| random_d(p.dtype, &sh, s + 3)),
        v_new: new_shape(p.head_dim_v()).map(|sh| random_d(p.dtype, &sh, s + 4)),
    }
}

/// Q (or O) rows of sequence b as [heads_q, len_q, d], from storage order.
pub fn seq_rows(p: &AttentionProblem, draw: &Draw, q: &ArrayD<f32>, b: usize) -> Array3<f32> {
    match &draw.cu_seqlens_q {
        Some(cu) => {
            let (lo, hi) = (cu[b] as usize, cu[b + 1] as usize);
            q.slice(s![lo..hi, .., ..])
                .permuted_axes([1, 0, 2])
                .to_owned()
        }
        None => {
            let q4 = q.view().into_dimensionality::<ndarray::Ix4>().unwrap();
            to_layout(q4, p.layout).index_axis(Axis(0), b).to_owned()
        }
    }
}

/// Q's true values of sequence b as [heads_q, len_q, d]: [`seq_rows`], with e4m3 Q each head's
/// stored values times its factor of the `q_descale` table (exact: see [`draw_fp8_side`]).
pub fn seq_q_values(p: &AttentionProblem, draw: &Draw, q: &ArrayD<f32>, b: usize) -> Array3<f32> {
    let mut rows = seq_rows(p, draw, q, b);
    if p.modes.q_fp8 {
        for (h, mut head) in rows.axis_iter_mut(Axis(0)).enumerate() {
            let f = draw.q_descale(p, b, h);
            head.mapv_inplace(|x| x * f);
        }
    }
    rows
}

/// LSE of sequence b as [heads_q, len_q].
pub fn seq_lse(draw: &Draw, lse: &ArrayD<f32>, b: usize) -> Array2<f32> {
    match &draw.cu_seqlens_q {
        Some(cu) => lse
            .slice(s![.., cu[b] as usize..cu[b + 1] as usize])
            .to_owned(),
        None => lse
            .index_axis(Axis(0), b)
            .into_dimensionality()
            .unwrap()
            .to_owned(),
    }
}

/// The logical K (or V, as `side` says) sequence b attends to, [heads_kv, len_k, d]: packed rows,
/// the used rows of its cache (gathered through its pages by the oracle) followed by the
/// appended rows; with e4m3 K/V, the true values: each head's stored values, the appended rows
/// as the append stores them, times its factor of `side`'s descale table (exact: see
/// [`draw_fp8_side`]).
pub fn seq_kv(
    p: &AttentionProblem,
    draw: &Draw,
    side: KvSide,
    storage: &ArrayD<f32>,
    new: Option<&ArrayD<f32>>,
    b: usize,
) -> Array3<f32> {
    let mut kv = stored_seq_kv(p, draw, side, storage, new, b);
    if p.modes.kv_fp8.is_some() {
        for (h, mut head) in kv.axis_iter_mut(Axis(0)).enumerate() {
            let f = draw.descale(p, side, b, h);
            head.mapv_inplace(|x| x * f);
        }
    }
    kv
}

/// [`seq_kv`]'s rows as the cache stores them: with e4m3 K/V the stored values (no descale), the
/// appended rows (true values) as the append writes them, each divided by its factor and rounded
/// to e4m3, saturating (`cvt.rn.satfinite`): exact division by a power of two, then one rounding.
fn stored_seq_kv(
    p: &AttentionProblem,
    draw: &Draw,
    side: KvSide,
    storage: &ArrayD<f32>,
    new: Option<&ArrayD<f32>>,
    b: usize,
) -> Array3<f32> {
    let cached: Array3<f32> = match p.modes.kv {
        KvStorage::Packed { .. } => {
            let cu = draw.cu_seqlens_k.as_ref().unwrap();
            storage
                .slice(s![cu[b] as usize..cu[b + 1] as usize, .., ..])
                .permuted_axes([1, 0, 2])
                .to_owned()
        }
        KvStorage::Paged {
            max_blocks_per_seq, ..
        } => {
            let table = draw.block_table.as_ref().unwrap();
            let row = &table[b * max_blocks_per_seq..(b + 1) * max_blocks_per_seq];
            flashcore_oracle::gather_paged(
                storage.view().into_dimensionality().unwrap(),
                row,
                draw.used[b],
            )
        }
        KvStorage::Dense => {
            let k4 = storage
                .view()
                .into_dimensionality::<ndarray::Ix4>()
                .unwrap();
            let all = to_layout(k4, p.layout).index_axis(Axis(0), b).to_owned();
            let used = if p.modes.seqused_k {
                draw.used[b]
            } else {
                p.seq_k
            };
            all.slice(s![.., ..used, ..]).to_owned()
        }
    };
    match new {
        Some(new) => {
            let n = new.view().into_dimensionality::<ndarray::Ix4>().unwrap();
            let rows: ArrayView3<f32> = n.index_axis(Axis(0), b).permuted_axes([1, 0, 2]);
            if p.modes.kv_fp8.is_none() {
                return flashcore_oracle::append_rows(cached.view(), rows);
            }
            let mut stored = rows.to_owned();
            for (h, mut head) in stored.axis_iter_mut(Axis(0)).enumerate() {
                let f = draw.descale(p, side, b, h);
                head.mapv_inplace(|x| round_e4m3(x / f));
            }
            flashcore_oracle::append_rows(cached.view(), stored.view())
        }
        None => cached,
    }
}

/// The oracle's problem for sequence b alone.
pub fn seq_oracle_problem(p: &AttentionProblem, draw: &Draw, b: usize) -> OracleProblem {
    let mut op = OracleProblem::dense(
        1,
        p.heads_q,
        p.heads_kv,
        draw.len_q[b],
        draw.len_k[b],
        p.head_dim,
        p.causal,
        p.scale() as f64,
    );
    with_score_modes(&mut op, p, draw, b..b + 1);
    if let (Some(n), Some(r)) = (p.modes.mm_prefix, &draw.mm_prefix_ranges) {
        // Unused slots (start >= end, possibly negative) are left out; used pairs start at 0
        // or later (`HostTables::validate`).
        let pairs = r[b * n * 2..(b + 1) * n * 2]
            .chunks_exact(2)
            .filter(|pair| 0 <= pair[0] && pair[0] < pair[1])
            .map(|pair| (pair[0] as usize, pair[1] as usize))
            .collect();
        op.mm_prefix = Some(vec![pairs]);
    }
    op
}

/// The problem's modes of the scores into the oracle's problem `op` of batch entries `batch`:
/// windows, softcap, and the ALiBi slopes `draw` holds as `[batch, heads_q]` (a per-head table
/// repeated over the entries); and whether it is an fp8 forward (e4m3 Q, `op.p_e4m3`).
pub fn with_score_modes(
    op: &mut OracleProblem,
    p: &AttentionProblem,
    draw: &Draw,
    batch: std::ops::Range<usize>,
) {
    op.window_left = p.modes.window_left;
    op.window_right = p.modes.window_right;
    op.softcap = p.modes.softcap.map(|c| c as f64);
    // An fp8 forward's low-precision reference is the fp8 program's (docs/ORACLE.md).
    op.p_e4m3 = p.modes.q_fp8;
    op.alibi_slopes = draw.alibi_slopes.as_ref().map(|s| {
        batch
            .flat_map(|b| {
                let off = match p.modes.alibi {
                    Some(AlibiSlopes::PerBatchHead) => b * p.heads_q,
                    _ => 0,
                };
                s[off..off + p.heads_q].iter().map(|&x| x as f64)
            })
            .collect()
    });
}

/// Judges every sequence of a mode case's outputs; the verdict with the largest ratio (or the
/// first failure) stands for the case.
pub fn judge(
    p: &AttentionProblem,
    draw: &Draw,
    inp: &ModeInputs,
    out: &flashcore::HostOutputs,
) -> std::result::Result<Verdict, String> {
    let mut worst: Option<Verdict> = None;
    for b in 0..p.batch {
        let op = seq_oracle_problem(p, draw, b);
        let q = seq_q_values(p, draw, &inp.q, b).insert_axis(Axis(0));
        let k = seq_kv(p, draw, KvSide::K, &inp.k, inp.k_new.as_ref(), b).insert_axis(Axis(0));
        let v = seq_kv(p, draw, KvSide::V, &inp.v, inp.v_new.as_ref(), b).insert_axis(Axis(0));
        let o = seq_rows(p, draw, &out.o, b).insert_axis(Axis(0));
        let lse = seq_lse(draw, &out.lse, b).insert_axis(Axis(0));
        let v_ = flashcore_oracle::check(
            &op,
            precision(p.dtype),
            q.view(),
            k.view(),
            v.view(),
            o.view(),
            lse.view(),
            &Rows::All,
        );
        if !v_.pass {
            return Err(format!("sequence {b}: {}", v_.message));
        }
        if worst.as_ref().is_none_or(|w| v_.ratio > w.ratio) {
            worst = Some(v_);
        }
    }
    // Every row of O and LSE belongs to some sequence unless Q is dense and a sequence is
    // shorter than seq_q (it is not: dense Q has len_q = seq_q), so no NaN may remain anywhere.
    let unwritten =
        out.o.iter().filter(|x| x.is_nan()).count() + out.lse.iter().filter(|x| x.is_nan()).count();
    if unwritten > 0 && inp.q.iter().all(|x| x.is_finite()) {
        return Err(format!("{unwritten} output elements are NaN (unwritten?)"));
    }
    // After an append the cache must hold the new rows where the next call will read them; an
    // e4m3 cache as the bytes the oracle expects (both caches: each side has its own factors).
    let caches = [
        (KvSide::K, &out.k_cache, &inp.k, &inp.k_new),
        (KvSide::V, &out.v_cache, &inp.v, &inp.v_new),
    ];
    let sides = if p.modes.kv_fp8.is_some() { 2 } else { 1 };
    for (side, cache, storage, new) in caches.into_iter().take(sides) {
        let (Some(cache), Some(new)) = (cache, new) else {
            continue;
        };
        for b in 0..p.batch {
            let got = stored_seq_kv(
                p,
                &Draw {
                    used: draw.len_k.clone(),
                    ..draw.clone()
                },
                side,
                cache,
                None,
                b,
            );
            let want = stored_seq_kv(p, draw, side, storage, Some(new), b);
            if got != want {
                return Err(format!(
                    "sequence {b}: the {side:?} cache after the append does not hold the new rows at seqused_k"
                ));
            }
        }
    }
    worst.ok_or_else(|| "no sequence to judge".into())
}

/// Judges every sequence of a varlen backward case alone: its packed rows of Q, K, V, dO and of
/// the kernel's dQ, dK, dV, against the oracle's gradients of that sequence
/// (`flashcore_oracle::check_backward`: every element, so an unwritten one (NaN) fails). The
/// verdict with the largest ratio stands for the case; the first failure is returned with its
/// sequence.
pub fn judge_backward(
    p: &AttentionProblem,
    draw: &Draw,
    inp: &ModeInputs,
    d_o: &ArrayD<f32>,
    g: &flashcore::HostGradientsD<f32>,
) -> std::result::Result<BackwardVerdict, Box<(String, Option<BackwardVerdict>)>> {
    let mut worst: Option<BackwardVerdict> = None;
    for b in 0..p.batch {
        let op = seq_oracle_problem(p, draw, b);
        let q_like = |a: &ArrayD<f32>| seq_rows(p, draw, a, b).insert_axis(Axis(0));
        let k_like = |a: &ArrayD<f32>| seq_kv(p, draw, KvSide::K, a, None, b).insert_axis(Axis(0));
        let v = seq_kv(p, draw, KvSide::V, &inp.v, None, b).insert_axis(Axis(0));
        let dv = seq_kv(p, draw, KvSide::V, &g.dv, None, b).insert_axis(Axis(0));
        let verdict = flashcore_oracle::check_backward(
            &op,
            precision(p.dtype),
            q_like(&inp.q).view(),
            k_like(&inp.k).view(),
            v.view(),
            q_like(d_o).view(),
            q_like(&g.dq).view(),
            k_like(&g.dk).view(),
            dv.view(),
        );
        if !verdict.pass {
            return Err(Box::new((
                format!("sequence {b}: {}", verdict.message),
                Some(verdict),
            )));
        }
        if worst.as_ref().is_none_or(|w| verdict.ratio > w.ratio) {
            worst = Some(verdict);
        }
    }
    worst.ok_or_else(|| Box::new(("no sequence to judge".into(), None)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::case::Case;

    #[test]
    fn a_mode_case_round_trips_and_redraws_the_same_tables() {
        for line in [
            "b=3,hq=8,hkv=2,sq=1,sk=300,d=64,dtype=bf16,causal=1,layout=bshd,seed=4,cache=paged,bs=48,append=2",
            "b=4,hq=2,hkv=1,sq=65,sk=200,d=128,dtype=f16,causal=0,layout=bhsd,seed=9,varlen=1,wl=3,wr=0,softcap=50.5,alibi=batch",
            "b=3,hq=4,hkv=2,sq=40,sk=90,d=64,dtype=bf16,causal=1,layout=bshd,seed=12,varlen=1,cache=paged,bs=16,append=2,wl=7,alibi=head,mm=3",
            "b=2,hq=8,hkv=2,sq=1,sk=300,d=128,dtype=bf16,causal=1,layout=bshd,seed=3,cache=paged,bs=64,fp8=head",
            "b=3,hq=4,hkv=4,sq=4,sk=100,d=64,dtype=f16,causal=0,layout=bhsd,seed=5,fp8=tensor",
            "b=2,hq=4,hkv=1,sq=2,sk=90,d=256,dtype=f16,causal=1,layout=bshd,seed=6,varlen=1,wl=5,softcap=30,alibi=batch,fp8=batchhead",
        ] {
            let c = Case::parse(line).unwrap();
            let again = Case::parse(&c.to_arg()).unwrap();
            assert_eq!(again, c, "{}", c.to_arg());
            let mut p1 = c.problem.clone();
            let mut p2 = c.problem.clone();
            let k = ModeKeys::from_modes(&c.problem.modes);
            assert_eq!(apply(&mut p1, &k, c.data_seed), apply(&mut p2, &k, c.data_seed));
            assert_eq!(p1, c.problem);
        }
    }

    /// The case `line` with `seed`, its tables drawn; both pass the core's validation.
    fn drawn(line: &str, seed: u64) -> (AttentionProblem, Draw) {
        let c = Case::parse(&format!("{line},seed={seed}")).unwrap();
        let mut p = c.problem.clone();
        let draw = apply(&mut p, &ModeKeys::from_modes(&c.problem.modes), seed);
        p.validate().unwrap();
        draw.host_tables().validate(&p).unwrap();
        (p, draw)
    }

    /// A mode case at a V head dim of its own (`dv=`) draws V (a paged cache's pages too) and
    /// v_new at V's width and K and k_new at Q's, shapes the host path takes; the oracle's
    /// answer, written into O at V's width, passes the judge, and one off by a little fails.
    #[test]
    fn mode_cases_at_a_distinct_v_dim_draw_v_v_new_and_o_at_its_width() {
        for (i, line) in [
            "b=3,hq=4,hkv=2,sq=1,sk=100,d=64,dv=32,dtype=bf16,causal=1,cache=paged,bs=16,append=2",
            "b=3,hq=4,hkv=2,sq=20,sk=50,d=64,dv=32,dtype=f16,varlen=1,wl=5,softcap=30,alibi=batch",
            "b=3,hq=4,hkv=1,sq=9,sk=60,d=64,dv=32,causal=1,varlen=1,cache=paged,bs=32,mm=2",
            "b=2,hq=4,hkv=1,sq=9,sk=60,d=64,dv=32,dtype=bf16,causal=1,cache=contig,append=3,mm=2",
            "b=2,hq=2,sq=7,sk=40,d=64,dv=32,layout=bhsd,wl=4,wr=2,alibi=head",
        ]
        .iter()
        .enumerate()
        {
            let seed = 40 + i as u64;
            let (p, draw) = drawn(line, seed);
            let (d, dv) = (p.head_dim, p.head_dim_v());
            assert_eq!((d, dv), (64, 32), "{line}");
            let inp = mode_inputs(&p, &draw, seed);
            let last = |a: &ArrayD<f32>| *a.shape().last().unwrap();
            assert_eq!((last(&inp.q), last(&inp.k), last(&inp.v)), (d, d, dv));
            if p.modes.append.is_some() {
                let (k_new, v_new) = (inp.k_new.as_ref().unwrap(), inp.v_new.as_ref().unwrap());
                assert_eq!((last(k_new), last(v_new)), (d, dv), "{line}");
            }
            flashcore::host::check_host_inputs("t", &p, &inp.host_inputs(&draw))
                .unwrap_or_else(|e| panic!("{line}: {e}"));

            let (_, o_shape) = flashcore::host::v_o_shapes(&p);
            let (_, _, lse_shape) = flashcore::host::storage_shapes(&p);
            let mut o = ArrayD::<f32>::from_elem(IxDyn(&o_shape), f32::NAN);
            let mut lse = ArrayD::<f32>::from_elem(IxDyn(&lse_shape), f32::NAN);
            for b in 0..p.batch {
                let op = seq_oracle_problem(&p, &draw, b);
                let q = seq_q_values(&p, &draw, &inp.q, b).insert_axis(Axis(0));
                let k = seq_kv(&p, &draw, KvSide::K, &inp.k, inp.k_new.as_ref(), b);
                let v = seq_kv(&p, &draw, KvSide::V, &inp.v, inp.v_new.as_ref(), b);
                assert_eq!(v.dim(), (p.heads_kv, draw.len_k[b], dv));
                let r = flashcore_oracle::reference_f64(
                    &op,
                    q.view(),
                    k.insert_axis(Axis(0)).view(),
                    v.insert_axis(Axis(0)).view(),
                    &Rows::All,
                );
                let (ro, rl) = r.to_dense(&op);
                // [heads_q, len_q, dv] and [heads_q, len_q] into storage order.
                let (ro, rl) = (
                    ro.index_axis(Axis(0), 0).mapv(|x| x as f32),
                    rl.index_axis(Axis(0), 0).mapv(|x| x as f32),
                );
                match &draw.cu_seqlens_q {
                    Some(cu) => {
                        let rows = cu[b] as usize..cu[b + 1] as usize;
                        o.slice_mut(s![rows.clone(), .., ..])
                            .assign(&ro.view().permuted_axes([1, 0, 2]));
                        lse.slice_mut(s![.., rows]).assign(&rl);
                    }
                    None => {
                        let mut o4 = o.view_mut().into_dimensionality::<ndarray::Ix4>().unwrap();
                        let mut ob = o4.index_axis_mut(Axis(0), b);
                        match p.layout {
                            flashcore::Layout::Bshd => {
                                ob.assign(&ro.view().permuted_axes([1, 0, 2]))
                            }
                            flashcore::Layout::Bhsd => ob.assign(&ro),
                        }
                        lse.index_axis_mut(Axis(0), b).assign(&rl);
                    }
                }
            }
            let out = |o: ArrayD<f32>| flashcore::HostOutputs {
                o,
                lse: lse.clone(),
                k_cache: None,
                v_cache: None,
            };
            judge(&p, &draw, &inp, &out(o.clone())).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert!(judge(&p, &draw, &inp, &out(o.mapv(|x| x + 0.05))).is_err());
        }
    }

    #[test]
    fn drawn_tables_pass_the_cores_validation() {
        for seed in 0..200u64 {
            let line = match seed % 7 {
                0 => "b=4,hq=4,hkv=2,sq=33,sk=100,d=64,varlen=1",
                1 => "b=3,hq=2,sq=5,sk=70,d=64,cache=paged,bs=16,append=3",
                // Capacity below the appended rows (drawn by verify on the H100, commit 7c13259).
                2 => "b=1,hq=1,hkv=1,sq=1,sk=1,d=64,cache=contig,append=2",
                3 => "b=2,hq=2,sq=3,sk=1,d=64,cache=paged,bs=16,append=20",
                4 => "b=2,hq=2,sq=40,sk=90,d=64,varlen=1,cache=contig,alibi=head",
                5 => "b=3,hq=2,sq=1,sk=70,d=64,causal=1,cache=paged,bs=16,append=1,mm=2",
                _ => "b=4,hq=2,sq=33,sk=100,d=64,varlen=1,causal=1,wl=4,mm=3",
            };
            let (p, draw) = drawn(line, seed);
            let inp = mode_inputs(&p, &draw, seed);
            let (q_shape, kv_shape, _) = flashcore::host::storage_shapes(&p);
            assert_eq!(inp.q.shape(), q_shape.as_slice());
            assert_eq!(inp.k.shape(), kv_shape.as_slice());
            for b in 0..p.batch {
                let k = seq_kv(&p, &draw, KvSide::K, &inp.k, inp.k_new.as_ref(), b);
                assert_eq!(k.dim(), (p.heads_kv, draw.len_k[b], p.head_dim));
                assert_eq!(seq_rows(&p, &draw, &inp.q, b).dim().1, draw.len_q[b]);
            }
        }
    }

    /// Drawn ranges are valid tables and change what rows see: some row's key range differs
    /// from the causal/window range alone, some range ends past the keys (the clip), and
    /// unused slots come up.
    #[test]
    fn mm_cases_draw_valid_ranges_that_change_the_key_ranges() {
        let (mut widened, mut clipped, mut unused, mut decode_widened) = (0, 0, 0, 0);
        for seed in 0..300u64 {
            let line = match seed % 4 {
                0 => "b=2,hq=2,sq=50,sk=50,d=64,causal=1,mm=2",
                // Causal decode sees every key; the window leaves ranges something to add.
                1 => "b=3,hq=2,sq=1,sk=200,d=64,causal=1,wl=8,cache=paged,bs=16,append=1,mm=1",
                2 => "b=4,hq=2,sq=60,sk=30,d=64,varlen=1,causal=1,wl=0,mm=3",
                _ => "b=2,hq=2,sq=20,sk=80,d=64,wl=2,wr=2,cache=contig,mm=2",
            };
            let (p, draw) = drawn(line, seed);
            let n = p.modes.mm_prefix.unwrap();
            let r = draw.mm_prefix_ranges.as_ref().unwrap();
            assert_eq!(r.len(), p.batch * n * 2);
            for b in 0..p.batch {
                let pairs = &r[b * n * 2..(b + 1) * n * 2];
                for pair in pairs.chunks_exact(2) {
                    if pair[0] >= pair[1] {
                        unused += 1;
                    } else {
                        assert!(pair[0] >= 0 && pair[0] as usize <= draw.len_k[b]);
                        clipped += (pair[1] as usize > draw.len_k[b]) as usize;
                    }
                }
                let op = seq_oracle_problem(&p, &draw, b);
                let alone = OracleProblem {
                    mm_prefix: None,
                    ..op.clone()
                };
                let differs =
                    (0..draw.len_q[b]).any(|i| op.key_range(0, i) != alone.key_range(0, i));
                widened += differs as usize;
                decode_widened += (differs && p.seq_q == 1) as usize;
            }
        }
        assert!(
            widened > 100,
            "only {widened} sequences see more keys through their ranges"
        );
        assert!(
            decode_widened > 10,
            "only {decode_widened} decode rows see more keys"
        );
        assert!(clipped > 50, "only {clipped} ranges end past the keys");
        assert!(unused > 20, "only {unused} unused slots");
    }

    /// `fp8=` round-trips through `ModeKeys` for each table shape, `none` is no key at all, and
    /// anything else is an error that names the choices.
    #[test]
    fn the_fp8_key_round_trips() {
        for scales in [
            KvScales::PerTensor,
            KvScales::PerKvHead,
            KvScales::PerBatchKvHead,
        ] {
            let keys = ModeKeys {
                cache: Some(CacheKind::Paged { block_size: 32 }),
                kv_fp8: Some(scales),
                ..ModeKeys::default()
            };
            let arg = keys.to_arg();
            assert!(arg.ends_with(&format!(",fp8={}", kv_scales_name(scales))));
            let mut back = ModeKeys::default();
            for kv in arg.split(',').filter(|x| !x.is_empty()) {
                let (k, v) = kv.split_once('=').unwrap();
                assert!(back.parse_key(k, v).unwrap(), "{kv}");
            }
            assert_eq!(back, keys);
            assert_eq!(parse_kv_scales(kv_scales_name(scales)), Some(scales));
        }
        let mut k = ModeKeys {
            kv_fp8: Some(KvScales::PerTensor),
            ..ModeKeys::default()
        };
        assert!(k.parse_key("fp8", "none").unwrap());
        assert_eq!(k, ModeKeys::default());
        assert_eq!(k.to_arg(), "");
        let e = k.parse_key("fp8", "e5m2").unwrap_err().to_string();
        assert!(e.contains("tensor, head, batchhead"), "{e}");
        // A line with the key parses to a problem with e4m3 K/V; one without it has none.
        let c = Case::parse("b=2,hq=4,hkv=2,sq=1,sk=64,d=64,cache=contig,fp8=batchhead").unwrap();
        assert_eq!(c.problem.modes.kv_fp8, Some(KvScales::PerBatchKvHead));
        let c = Case::parse("b=2,hq=4,hkv=2,sq=1,sk=64,d=64,cache=contig").unwrap();
        assert_eq!(c.problem.modes.kv_fp8, None);
    }

    /// Over many seeds the stored K/V of e4m3 cases are e4m3 values (what the host path takes),
    /// never all zero, and they reach both ends of the range: subnormals (below 2^-6) and 448;
    /// the descale tables have the drawn shape, pass the core's validation, are powers of two in
    /// 2^-6..=2^3, and several factors come up.
    #[test]
    fn e4m3_cases_draw_representable_values_over_the_whole_range() {
        let (mut subnormal, mut top, mut zero, mut total) = (0usize, 0usize, 0usize, 0usize);
        let mut factors = std::collections::BTreeSet::new();
        let mut stds = (f32::INFINITY, 0f32);
        let mut true_stds = (f32::INFINITY, 0f32);
        for seed in 0..60u64 {
            let (line, n) = match seed % 3 {
                0 => ("b=2,hq=4,hkv=2,sq=1,sk=200,d=64,cache=contig,fp8=tensor", 1),
                1 => (
                    "b=3,hq=4,hkv=2,sq=2,sk=100,d=64,cache=paged,bs=16,fp8=head",
                    2,
                ),
                _ => ("b=2,hq=8,hkv=4,sq=1,sk=150,d=64,varlen=1,fp8=batchhead", 8),
            };
            let (p, draw) = drawn(line, seed);
            for t in [&draw.k_descale, &draw.v_descale] {
                let t = t.as_ref().expect("a descale table");
                assert_eq!(t.len(), n, "{line}");
                for &f in t {
                    let e = f.log2();
                    assert!(
                        e == e.round() && FP8_LOG2_DESCALE.contains(&(e as i32)),
                        "{f}"
                    );
                    factors.insert(e as i32);
                }
            }
            let [ks, vs] = draw.kv_fp8_std.unwrap();
            stds = (stds.0.min(ks).min(vs), stds.1.max(ks).max(vs));
            for (std, t) in [(ks, &draw.k_descale), (vs, &draw.v_descale)] {
                for &f in t.as_ref().unwrap() {
                    true_stds = (true_stds.0.min(std * f), true_stds.1.max(std * f));
                }
            }
            let inp = mode_inputs(&p, &draw, seed);
            for a in [&inp.k, &inp.v] {
                for &x in a.iter() {
                    assert_eq!(round_e4m3(x), x, "{x} is not an e4m3 value");
                    assert!(x.abs() <= 448.0);
                    total += 1;
                    zero += (x == 0.0) as usize;
                    subnormal += (x != 0.0 && x.abs() < 2f32.powi(-6)) as usize;
                    top += (x.abs() >= 384.0) as usize;
                }
                assert!(a.iter().any(|&x| x != 0.0));
            }
            // Q stays in the problem's dtype, as drawn for every case.
            assert!(inp.q.iter().all(|&x| p.dtype.round(x) == x));
        }
        assert!(subnormal > total / 100, "{subnormal} subnormals of {total}");
        assert!(top > 20, "{top} values at 384..=448 of {total}");
        assert!(zero < total / 50, "{zero} zeros of {total}");
        assert!(factors.len() >= 10, "factors 2^{factors:?}");
        assert!(stds.0 < 0.125 && stds.1 > 64.0, "stored spread {stds:?}");
        // The true values stay near unit scale.
        let (lo, hi) = true_stds;
        assert!(
            lo >= 2f32.powf(-2.5) && hi <= 2f32.powf(1.5),
            "true spread {true_stds:?}"
        );
    }

    /// `qfp8=1` beside `fp8=`: Q is stored as e4m3 values too, with a table of K's shape whose
    /// factors are powers of two; the oracle's Q is each head's stored values times its KV
    /// head's factor (computed here independently), its low-precision reference the fp8
    /// program's; an output computed from those true values passes the judge, one that left
    /// Q's factor out fails. A line without `fp8=` has no table shape for Q and is refused.
    #[test]
    fn e4m3_q_is_drawn_stored_and_judged_with_its_descale() {
        let mut some_factor_is_not_one = false;
        for (i, line) in [
            "b=2,hq=4,hkv=2,sq=17,sk=40,d=64,dtype=bf16,causal=1,fp8=tensor,qfp8=1",
            "b=3,hq=6,hkv=3,sq=5,sk=33,d=64,dtype=f16,fp8=head,qfp8=1",
            "b=2,hq=4,hkv=1,sq=9,sk=20,d=64,dtype=bf16,fp8=batchhead,qfp8=1",
        ]
        .iter()
        .enumerate()
        {
            let (p, draw) = drawn(line, 21 + i as u64);
            let scales = p.modes.kv_fp8.unwrap();
            assert!(p.modes.q_fp8);
            let table = draw.q_descale.as_ref().expect("a q_descale table");
            assert_eq!(table.len(), scales.table_len(p.batch, p.heads_kv));
            for &f in table {
                let e = f.log2();
                assert!(
                    e == e.round() && FP8_LOG2_DESCALE.contains(&(e as i32)),
                    "{f}"
                );
            }
            let inp = mode_inputs(&p, &draw, 21 + i as u64);
            for a in [&inp.q, &inp.k, &inp.v] {
                assert!(a.iter().all(|&x| round_e4m3(x) == x), "{line}");
                assert!(a.iter().any(|&x| x != 0.0));
            }
            // The host path takes Q's values as they are: its bytes encode them exactly.
            flashcore::host::e4m3_bytes("q", &inp.q.view()).unwrap();

            let (bs, hs) = scales.strides(p.heads_kv);
            let group = p.heads_q / p.heads_kv;
            let mut o = ndarray::Array4::<f32>::zeros((p.batch, p.seq_q, p.heads_q, p.head_dim));
            let mut lse = ndarray::Array3::<f32>::zeros((p.batch, p.heads_q, p.seq_q));
            let mut wrong = o.clone();
            for b in 0..p.batch {
                let stored = seq_rows(&p, &draw, &inp.q, b);
                let q = seq_q_values(&p, &draw, &inp.q, b);
                for h in 0..p.heads_q {
                    let f = table[b * bs + (h / group) * hs];
                    some_factor_is_not_one |= f != 1.0;
                    for (x, y) in q
                        .index_axis(Axis(0), h)
                        .iter()
                        .zip(stored.index_axis(Axis(0), h))
                    {
                        assert_eq!(*x, y * f);
                    }
                }
                let op = seq_oracle_problem(&p, &draw, b);
                assert!(op.p_e4m3);
                let k = seq_kv(&p, &draw, KvSide::K, &inp.k, None, b).insert_axis(Axis(0));
                let v = seq_kv(&p, &draw, KvSide::V, &inp.v, None, b).insert_axis(Axis(0));
                let reference = |q: Array3<f32>| {
                    let r = flashcore_oracle::reference_f64(
                        &op,
                        q.insert_axis(Axis(0)).view(),
                        k.view(),
                        v.view(),
                        &Rows::All,
                    );
                    r.to_dense(&op)
                };
                let (ro, rl) = reference(q);
                let (wo, _) = reference(stored);
                for h in 0..p.heads_q {
                    for r in 0..p.seq_q {
                        lse[[b, h, r]] = rl[[0, h, r]] as f32;
                        for c in 0..p.head_dim {
                            o[[b, r, h, c]] = ro[[0, h, r, c]] as f32;
                            wrong[[b, r, h, c]] = wo[[0, h, r, c]] as f32;
                        }
                    }
                }
            }
            let out = |o: ndarray::Array4<f32>| flashcore::HostOutputs {
                o: o.into_dyn(),
                lse: lse.clone().into_dyn(),
                k_cache: None,
                v_cache: None,
            };
            judge(&p, &draw, &inp, &out(o)).unwrap_or_else(|e| panic!("{line}: {e}"));
            if table.iter().any(|&f| f != 1.0) {
                assert!(judge(&p, &draw, &inp, &out(wrong)).is_err(), "{line}");
            }
        }
        assert!(some_factor_is_not_one);
        let e = Case::parse("b=1,hq=1,sq=1,sk=1,d=64,qfp8=1").unwrap_err();
        assert!(e.to_string().contains("fp8="), "{e}");
    }

    /// The oracle's K and V of an e4m3 case are the stored values times the (sequence, KV head)
    /// factor of each table shape, computed here independently in f64 and equal bit for bit (the
    /// product is exact in f32, and in the dtype: rounding it there changes nothing).
    #[test]
    fn the_oracle_sees_stored_values_times_their_descale_exactly() {
        // Whether some table gave two KV heads of a sequence, or two sequences of a KV head,
        // different factors (so that a factor read from the wrong entry would show).
        let (mut heads_differ, mut batches_differ) = (false, false);
        for (i, line) in [
            "b=3,hq=4,hkv=2,sq=1,sk=70,d=64,dtype=bf16,cache=paged,bs=16,fp8=tensor",
            "b=3,hq=4,hkv=2,sq=1,sk=70,d=64,dtype=f16,cache=contig,fp8=head",
            "b=3,hq=6,hkv=3,sq=2,sk=70,d=64,dtype=bf16,varlen=1,fp8=batchhead",
            "b=2,hq=4,hkv=2,sq=1,sk=33,d=64,dtype=f16,layout=bhsd,fp8=batchhead",
        ]
        .iter()
        .enumerate()
        {
            let (p, draw) = drawn(line, 11 + i as u64);
            let scales = p.modes.kv_fp8.unwrap();
            let inp = mode_inputs(&p, &draw, 11 + i as u64);
            let plain = AttentionProblem {
                modes: Modes {
                    kv_fp8: None,
                    ..p.modes.clone()
                },
                ..p.clone()
            };
            for (side, stored, table) in [
                (KvSide::K, &inp.k, draw.k_descale.as_ref().unwrap()),
                (KvSide::V, &inp.v, draw.v_descale.as_ref().unwrap()),
            ] {
                for b in 0..p.batch {
                    let logical = seq_kv(&p, &draw, side, stored, None, b);
                    let raw = seq_kv(&plain, &draw, side, stored, None, b);
                    assert_eq!(logical.dim(), (p.heads_kv, draw.len_k[b], p.head_dim));
                    for h in 0..p.heads_kv {
                        let f = match scales {
                            KvScales::PerTensor => table[0],
                            KvScales::PerKvHead => table[h],
                            KvScales::PerBatchKvHead => table[b * p.heads_kv + h],
                        };
                        heads_differ |= h > 0 && f != draw.descale(&p, side, b, 0);
                        batches_differ |= b > 0 && f != draw.descale(&p, side, 0, h);
                        for (x, s) in logical
                            .index_axis(Axis(0), h)
                            .iter()
                            .zip(raw.index_axis(Axis(0), h))
                        {
                            let exact = *s as f64 * f as f64;
                            assert_eq!(*x as f64, exact, "{line}: {s} x {f}");
                            assert_eq!(p.dtype.round(*x), *x, "{line}: {x} in {}", p.dtype);
                        }
                    }
                }
            }
        }
        assert!(heads_differ && batches_differ);
    }

    /// Rows appended into an e4m3 cache are true values in the dtype; the cache then holds each
    /// divided by its side's factor and rounded to e4m3, and the oracle sees that times the
    /// factor. A cache written so passes the append check's comparison; one holding the rows
    /// unquantized, or quantized with the other side's factors, does not.
    #[test]
    fn e4m3_appends_are_quantized_with_their_sides_factors() {
        let line = "b=2,hq=4,hkv=2,sq=1,sk=40,d=64,dtype=bf16,cache=contig,append=3,fp8=head";
        let mut checked = 0;
        for seed in 0..6u64 {
            let (p, draw) = drawn(line, seed);
            let inp = mode_inputs(&p, &draw, seed);
            let (k_new, v_new) = (inp.k_new.as_ref().unwrap(), inp.v_new.as_ref().unwrap());
            assert!(k_new.iter().all(|&x| p.dtype.round(x) == x));
            assert!(
                k_new.iter().any(|&x| round_e4m3(x) != x),
                "true values, not e4m3"
            );
            // What a correct append leaves in the K cache, and two wrong ones.
            let write = |side: KvSide, new: &ArrayD<f32>, quantize: bool| {
                let mut cache = inp.k.clone();
                for b in 0..p.batch {
                    for t in 0..3 {
                        for h in 0..p.heads_kv {
                            let f = draw.descale(&p, side, b, h);
                            for d in 0..p.head_dim {
                                let x = new[[b, t, h, d]];
                                cache[[b, draw.used[b] + t, h, d]] =
                                    if quantize { round_e4m3(x / f) } else { x };
                            }
                        }
                    }
                }
                cache
            };
            let after = Draw {
                used: draw.len_k.clone(),
                ..draw.clone()
            };
            let good = write(KvSide::K, k_new, true);
            let unquantized = write(KvSide::K, k_new, false);
            let other_side = write(KvSide::V, k_new, true);
            let k_differs = (0..p.heads_kv)
                .any(|h| draw.descale(&p, KvSide::K, 0, h) != draw.descale(&p, KvSide::V, 0, h));
            for b in 0..p.batch {
                let want = stored_seq_kv(&p, &draw, KvSide::K, &inp.k, Some(k_new), b);
                let got = |c: &ArrayD<f32>| stored_seq_kv(&p, &after, KvSide::K, c, None, b);
                assert_eq!(got(&good), want);
                assert_ne!(got(&unquantized), want);
                if k_differs && b == 0 {
                    assert_ne!(got(&other_side), want);
                    checked += 1;
                }
                // The oracle's rows: the stored rows times the factor, the appended ones too.
                let k = seq_kv(&p, &draw, KvSide::K, &inp.k, Some(k_new), b);
                let v = seq_kv(&p, &draw, KvSide::V, &inp.v, Some(v_new), b);
                for h in 0..p.heads_kv {
                    let (fk, fv) = (
                        draw.descale(&p, KvSide::K, b, h),
                        draw.descale(&p, KvSide::V, b, h),
                    );
                    for t in 0..3 {
                        let row = draw.used[b] + t;
                        for d in 0..p.head_dim {
                            assert_eq!(k[[h, row, d]], round_e4m3(k_new[[b, t, h, d]] / fk) * fk);
                            assert_eq!(v[[h, row, d]], round_e4m3(v_new[[b, t, h, d]] / fv) * fv);
                        }
                    }
                }
            }
        }
        assert!(checked > 0, "no seed gave K and V different factors");
    }

    /// Lines without `mm=` redraw what they drew before the key existed: the ranges come after
    /// every other draw, so adding `mm=` changes nothing else either.
    #[test]
    fn mm_leaves_the_other_draws_alone() {
        let line = "b=3,hq=2,hkv=1,sq=40,sk=90,d=64,causal=1,seed=5,varlen=1,cache=paged,bs=16,append=2,alibi=batch";
        let draw = |line: &str| {
            let c = Case::parse(line).unwrap();
            let mut p = c.problem.clone();
            apply(&mut p, &ModeKeys::from_modes(&c.problem.modes), c.data_seed)
        };
        let plain = draw(line);
        let with = draw(&format!("{line},mm=2"));
        assert!(plain.mm_prefix_ranges.is_none());
        assert_eq!(
            Draw {
                mm_prefix_ranges: None,
                ..with
            },
            plain
        );
    }
}
