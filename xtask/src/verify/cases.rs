//! The cases a sweep draws and the fixed edge lists: random problems within a kernel's
//! capabilities (with inference modes where it takes them), seeded so that `--seed` reproduces a
//! sweep.

use flashcore::{
    AlibiSlopes, AttentionProblem, Capabilities, DType, HeadDims, KvScales, Layout, ModeSupport,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

use crate::case::Case;
use crate::mode_case::{CacheKind, InputDtype, KvDtype, ModeKeys};

/// The case generator of one kernel's sweep: ChaCha seeded by `seed` (the run's seed mixed with
/// the kernel's name, and the pass), so a rerun with the same `--seed` draws the same cases.
pub(super) fn seeded_runner(seed: u64, cases: usize) -> TestRunner {
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    TestRunner::new_with_rng(
        Config {
            cases: cases as u32,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    )
}

/// Sequence lengths: uniform, plus tile boundaries ±1 (16, 32, 64, 128-row tiles) so the
/// masked-tail paths come up often.
fn seq_strategy(max_seq: usize) -> BoxedStrategy<usize> {
    let boundary = (
        prop::sample::select(vec![16usize, 32, 64, 128]),
        1usize..=16,
        -1i64..=1,
    )
        .prop_map(move |(tile, k, delta)| {
            ((tile * k) as i64 + delta).clamp(1, max_seq as i64) as usize
        });
    prop_oneof![2 => 1usize..=max_seq, 1 => boundary].boxed()
}

fn head_dim_strategy(h: &HeadDims) -> BoxedStrategy<usize> {
    match h.clone() {
        HeadDims::List(l) => prop::sample::select(l.to_vec()).boxed(),
        HeadDims::Range {
            min,
            max,
            multiple_of,
        } => {
            let common: Vec<usize> = [32usize, 64, 96, 128, 256]
                .into_iter()
                .filter(|d| h.contains(*d))
                .collect();
            let any =
                (min.div_ceil(multiple_of)..=max / multiple_of).prop_map(move |k| k * multiple_of);
            if common.is_empty() {
                any.boxed()
            } else {
                prop_oneof![1 => prop::sample::select(common), 1 => any].boxed()
            }
        }
    }
}

/// Random problems within what `caps` claims: batch 1-4, heads_q 1-16 with heads_kv dividing
/// it, seq_q and seq_k 1..=max_seq independently, both dtypes, causal, both layouts; for a kernel
/// that takes inference modes, half the cases also draw those (`mode_keys_strategy`), and of
/// those, for a kernel that takes e4m3 K/V, one in six stores them so (`fp8_case_strategy`). For
/// a kernel that takes V's own head dim, a fifth of the dense cases and of the (16-bit) mode
/// cases draw one (`DISTINCT_V_DIMS`).
pub fn case_strategy(caps: &Capabilities, max_seq: usize) -> BoxedStrategy<Case> {
    case_strategy_kv(caps, max_seq, None)
}

/// [`case_strategy`], or with `kv_dtype` e4m3 (`verify --kv-dtype e4m3`) only e4m3-cache cases
/// ([`fp8_case_strategy`]), whatever the kernel claims: one that does not take them counts
/// every case skipped.
pub fn case_strategy_kv(
    caps: &Capabilities,
    max_seq: usize,
    kv_dtype: Option<KvDtype>,
) -> BoxedStrategy<Case> {
    if kv_dtype == Some(KvDtype::E4m3) {
        return fp8_case_strategy(caps, max_seq);
    }
    let dense = dense_case_strategy(caps, max_seq);
    let dense = if caps.distinct_head_dim_v {
        // A fifth of the dense cases with V's own head dim (`DISTINCT_V_DIMS`).
        let distinct = (
            dense_case_strategy(caps, max_seq),
            distinct_v_dims_strategy(),
        )
            .prop_map(|(case, dims)| with_v_dims(case, dims));
        prop_oneof![4 => dense, 1 => distinct].boxed()
    } else {
        dense
    };
    if caps.modes == ModeSupport::NONE {
        return dense;
    }
    let keys = || mode_keys_strategy(caps.modes, max_seq);
    let with_modes = (dense_case_strategy(caps, max_seq), keys())
        .prop_map(|(case, keys)| with_mode_keys(case, &keys));
    // A fifth of the mode cases with V's own head dim too: paged and contiguous caches, varlen,
    // windows, softcap, ALiBi and mm_prefix_ranges at V's width (appends among them, which the
    // core's append refuses: skipped). Never e4m3 caches, which take one head dim.
    let with_modes = if caps.distinct_head_dim_v {
        let distinct = (
            dense_case_strategy(caps, max_seq),
            keys(),
            distinct_v_dims_strategy(),
        )
            .prop_map(|(case, keys, dims)| with_mode_keys(with_v_dims(case, dims), &keys));
        prop_oneof![4 => with_modes, 1 => distinct].boxed()
    } else {
        with_modes.boxed()
    };
    // Only a kernel that claims e4m3 K/V draws them, so the others' sweeps stay as they were.
    let with_modes = if caps.modes.kv_fp8 {
        prop_oneof![5 => with_modes, 1 => fp8_case_strategy(caps, max_seq)].boxed()
    } else {
        with_modes
    };
    prop_oneof![1 => dense, 1 => with_modes].boxed()
}

/// A drawn case at a (head_dim, head_dim_v) pair of [`DISTINCT_V_DIMS`].
fn with_v_dims(mut case: Case, (d, dv): (usize, usize)) -> Case {
    case.problem.head_dim = d;
    case.problem = case.problem.with_head_dim_v(dv);
    case
}

/// Head dims of the decode kernel, which takes every e4m3-cache problem on the generation-5
/// paths (`flashcore_persistent::decode::HEAD_DIMS`).
pub const FP8_HEAD_DIMS: [usize; 3] = [64, 128, 256];
/// Head dims an e4m3-cache case draws now and then that the decode kernel is not built for: it
/// must refuse them (`Unsupported`, counted as skipped). Multiples of 16, as e4m3 K/V strides
/// must be (any other is an invalid problem, not a refusal).
pub const FP8_REFUSED_HEAD_DIMS: [usize; 4] = [32, 96, 160, 192];

/// e4m3-cache cases: K and V stored as e4m3 with descale tables per tensor, per KV head or per
/// (sequence, KV head) (`fp8=`), with the modes the decode kernel takes beside them (those of
/// `caps` among contiguous and paged caches, seqused_k, appended rows (which the append
/// quantizes into the cache), varlen, windows, softcap, ALiBi; causal, GQA): no
/// `mm_prefix_ranges`, no V head dim of its own. Decode shapes most of the time (1-4 and 1-16
/// query rows), any length otherwise; the decode kernel's head dims, and one case in eight a head
/// dim it must refuse.
pub fn fp8_case_strategy(caps: &Capabilities, max_seq: usize) -> BoxedStrategy<Case> {
    let modes = ModeSupport {
        mm_prefix: false,
        ..caps.modes
    };
    let refused: Vec<usize> = FP8_REFUSED_HEAD_DIMS
        .into_iter()
        .filter(|&d| caps.head_dims.contains(d))
        .collect();
    let dims = if refused.is_empty() {
        prop::sample::select(FP8_HEAD_DIMS.to_vec()).boxed()
    } else {
        prop_oneof![
            7 => prop::sample::select(FP8_HEAD_DIMS.to_vec()),
            1 => prop::sample::select(refused),
        ]
        .boxed()
    };
    let seq_q = prop_oneof![
        3 => 1usize..=4,
        1 => 1usize..=16.min(max_seq),
        2 => seq_strategy(max_seq),
    ];
    let scales = prop::sample::select(vec![
        KvScales::PerTensor,
        KvScales::PerKvHead,
        KvScales::PerBatchKvHead,
    ]);
    (
        dense_case_strategy(caps, max_seq),
        mode_keys_strategy(modes, max_seq),
        dims,
        seq_q,
        scales,
    )
        .prop_map(|(mut case, mut keys, d, sq, scales)| {
            keys.kv_fp8 = Some(scales);
            case.problem.head_dim = d;
            case.problem.seq_q = sq;
            with_mode_keys(case, &keys)
        })
        .boxed()
}

/// [`case_strategy_kv`], or with `dtype` e4m3 (`verify --dtype e4m3`) only cases whose Q, K and V
/// are all e4m3 ([`qkv_fp8_case_strategy`]), whatever the kernel claims: one that does not take
/// them counts every case skipped.
pub fn case_strategy_dtype(
    caps: &Capabilities,
    max_seq: usize,
    dtype: Option<InputDtype>,
    kv_dtype: Option<KvDtype>,
) -> BoxedStrategy<Case> {
    match dtype {
        Some(InputDtype::E4m3) => qkv_fp8_case_strategy(caps, max_seq),
        None => case_strategy_kv(caps, max_seq, kv_dtype),
    }
}

/// Lengths an fp8 forward case draws: the sweep's (uniform, tile boundaries ±1) and, a third of
/// the time, lengths off every tile (1, 17, 100, 255, 1000).
fn fp8_seq_strategy(max_seq: usize) -> BoxedStrategy<usize> {
    let odd: Vec<usize> = [1usize, 17, 100, 255, 1000]
        .into_iter()
        .map(|n| n.min(max_seq))
        .collect();
    prop_oneof![2 => seq_strategy(max_seq), 1 => prop::sample::select(odd)].boxed()
}

/// O's dtype of an fp8 forward case: bf16 three times in four, f16 otherwise.
fn fp8_o_dtype() -> BoxedStrategy<DType> {
    prop_oneof![3 => Just(DType::Bf16), 1 => Just(DType::F16)].boxed()
}

/// fp8 forward cases (FlashAttention 3's): Q, K and V stored as e4m3 (`qfp8=1` beside `fp8=`),
/// the three descale tables of one shape (per tensor, per KV head or per (sequence, KV head)),
/// O in bf16 or f16. Dense storage only for now (no varlen, cache, window, softcap, ALiBi):
/// batch 1-4, GQA and MQA, causal or not, seq_q != seq_k, lengths off the tiles, head dims 64,
/// 128 and 256 (a kernel that does not take one refuses it: skipped).
pub fn qkv_fp8_case_strategy(caps: &Capabilities, max_seq: usize) -> BoxedStrategy<Case> {
    let scales = prop::sample::select(vec![
        KvScales::PerTensor,
        KvScales::PerKvHead,
        KvScales::PerBatchKvHead,
    ]);
    (
        dense_case_strategy(caps, max_seq),
        prop::sample::select(FP8_HEAD_DIMS.to_vec()),
        fp8_seq_strategy(max_seq),
        fp8_seq_strategy(max_seq),
        fp8_o_dtype(),
        scales,
    )
        .prop_map(|(mut case, d, sq, sk, dtype, scales)| {
            let p = &mut case.problem;
            (p.head_dim, p.seq_q, p.seq_k, p.dtype) = (d, sq, sk, dtype);
            let keys = ModeKeys {
                kv_fp8: Some(scales),
                q_fp8: true,
                ..ModeKeys::default()
            };
            with_mode_keys(case, &keys)
        })
        .boxed()
}

/// Fixed fp8 forward cases (`qfp8=1`) at head dims 64, 128 and 256, every descale table shape:
/// one row and one key, seq_q != seq_k both ways with causal (seq_q > seq_k leaves rows no key),
/// lengths off the 16- and 128-row tiles, GQA and MQA, a long causal square, BHSD, O in bf16 and
/// now and then f16. Every line whatever the kernel claims (`verify --dtype e4m3` runs them all;
/// a kernel that does not take them skips them).
pub fn qkv_fp8_edge_cases() -> Vec<Case> {
    const LINES: &[&str] = &[
        "b=1,hq=1,hkv=1,sq=1,sk=1,fp8=tensor",
        "b=2,hq=4,hkv=2,sq=257,sk=333,causal=1,fp8=head",
        "b=2,hq=8,hkv=1,sq=100,sk=1000,fp8=batchhead",
        "b=1,hq=4,hkv=4,sq=300,sk=100,causal=1,fp8=head",
        "b=3,hq=6,hkv=2,sq=17,sk=255,causal=1,fp8=batchhead",
        "b=1,hq=2,hkv=1,sq=1000,sk=1000,causal=1,fp8=tensor",
        "b=4,hq=4,hkv=2,sq=128,sk=129,layout=bhsd,fp8=head",
        "b=2,hq=16,hkv=2,sq=1,sk=777,causal=1,fp8=batchhead",
    ];
    let mut cases = Vec::new();
    for (i, line) in LINES.iter().enumerate() {
        for (j, d) in FP8_HEAD_DIMS.into_iter().enumerate() {
            let n = i * FP8_HEAD_DIMS.len() + j;
            let dtype = if n % 4 == 3 { DType::F16 } else { DType::Bf16 };
            let arg = format!("{line},qfp8=1,d={d},dtype={dtype},seed={}", 9000 + n);
            cases.push(Case::parse(&arg).expect("the edge list parses"));
        }
    }
    cases
}

/// A drawn dense case with the drawn modes applied (both strategies draw them this way).
fn with_mode_keys(mut case: Case, keys: &ModeKeys) -> Case {
    let p = &mut case.problem;
    if keys.window_right.is_some() {
        p.causal = false; // causal already fixes the right edge at 0
    }
    crate::mode_case::apply(p, keys, case.data_seed);
    case
}

/// (head_dim, head_dim_v) pairs the sweep draws for kernels that take V's own head dim:
/// DeepSeek-V2/V3 prefill's (192, 128) most often, smaller V dims of other builds, and a padded
/// Q/K head dim over an exact V dim.
pub const DISTINCT_V_DIMS: &[(usize, usize)] = &[
    (192, 128),
    (192, 128),
    (192, 128),
    (128, 64),
    (256, 128),
    (96, 64),
    (184, 128),
];

fn distinct_v_dims_strategy() -> BoxedStrategy<(usize, usize)> {
    prop::sample::select(DISTINCT_V_DIMS.to_vec()).boxed()
}

/// The inference modes a case turns on, within what the kernel takes: varlen, a contiguous or
/// paged cache (block sizes 16..=256) with or without appended rows, windows (0, 1, in range,
/// past the sequence), softcap, ALiBi (per head or per batch and head) and 1-3
/// `mm_prefix_ranges` per sequence.
fn mode_keys_strategy(m: ModeSupport, max_seq: usize) -> BoxedStrategy<ModeKeys> {
    let varlen = if m.varlen {
        any::<bool>().boxed()
    } else {
        Just(false).boxed()
    };
    let mut caches: Vec<BoxedStrategy<Option<CacheKind>>> = vec![Just(None).boxed()];
    if m.seqused_k {
        caches.push(Just(Some(CacheKind::Contiguous)).boxed());
    }
    if m.paged {
        caches.push(
            prop_oneof![
                prop::sample::select(vec![16usize, 64, 256]),
                (1usize..=16).prop_map(|k| 16 * k)
            ]
            .prop_map(|block_size| Some(CacheKind::Paged { block_size }))
            .boxed(),
        );
    }
    let cache = prop::strategy::Union::new(caches);
    let window = move || {
        prop_oneof![
            3 => Just(None),
            1 => Just(Some(0usize)),
            1 => Just(Some(1usize)),
            1 => (0..=max_seq).prop_map(Some),
            1 => (max_seq..=4 * max_seq).prop_map(Some),
        ]
        .boxed()
    };
    let (wl, wr) = if m.window {
        (window(), window())
    } else {
        (Just(None).boxed(), Just(None).boxed())
    };
    let softcap = if m.softcap {
        prop_oneof![2 => Just(None), 1 => prop::sample::select(vec!["1", "5", "30", "50.5"]).prop_map(|c| Some(c.to_string()))].boxed()
    } else {
        Just(None).boxed()
    };
    let alibi = if m.alibi {
        prop_oneof![2 => Just(None), 1 => Just(Some(AlibiSlopes::PerHead)), 1 => Just(Some(AlibiSlopes::PerBatchHead))].boxed()
    } else {
        Just(None).boxed()
    };
    // `Just` draws nothing, so kernels without the mode draw the same sweeps as before it.
    let mm = if m.mm_prefix {
        prop_oneof![3 => Just(None), 1 => (1usize..=3).prop_map(Some)].boxed()
    } else {
        Just(None).boxed()
    };
    (
        varlen,
        cache,
        0usize..=8,
        any::<bool>(),
        wl,
        wr,
        softcap,
        alibi,
        mm,
    )
        .prop_map(
            |(varlen, cache, append, appends, window_left, window_right, softcap, alibi, mm)| {
                ModeKeys {
                    varlen,
                    cache,
                    append: if cache.is_some() && appends {
                        append
                    } else {
                        0
                    },
                    window_left,
                    window_right,
                    softcap,
                    alibi,
                    mm,
                    kv_fp8: None,
                    q_fp8: false,
                }
            },
        )
        .boxed()
}

pub(super) fn dense_case_strategy(caps: &Capabilities, max_seq: usize) -> BoxedStrategy<Case> {
    let gqa = caps.gqa;
    let decode_only = caps.decode_only;
    let heads = (1usize..=16).prop_flat_map(move |hq| {
        let divisors: Vec<usize> = (1..=hq).filter(|d| hq % d == 0).collect();
        let kv = if gqa {
            prop::sample::select(divisors).boxed()
        } else {
            Just(hq).boxed()
        };
        (Just(hq), kv)
    });
    let causal = if caps.causal {
        any::<bool>().boxed()
    } else {
        Just(false).boxed()
    };
    (
        1usize..=4,
        heads,
        seq_strategy(max_seq),
        seq_strategy(max_seq),
        head_dim_strategy(&caps.head_dims),
        prop::sample::select(caps.dtypes.to_vec()),
        causal,
        prop::sample::select(caps.layouts.to_vec()),
        any::<u64>(),
    )
        .prop_map(
            move |(batch, (hq, hkv), sq, sk, d, dtype, causal, layout, seed)| {
                // Past a decode-only bound, as many queries as the kernel takes there.
                let sq = match decode_only {
                    Some(only) if d > only.head_dim => {
                        sq.min((only.packed_rows / (hq / hkv)).max(1))
                    }
                    _ => sq,
                };
                Case {
                    problem: AttentionProblem::new(batch, hq, sq, d)
                        .with_kv(hkv, sk)
                        .with_dtype(dtype)
                        .with_causal(causal)
                        .with_layout(layout),
                    data_seed: seed,
                }
            },
        )
        .boxed()
}

/// The fixed edge list for a kernel: single rows and keys, seq_q != seq_k both ways with
/// causal, lengths at tile boundaries ±1, no keys at all, GQA and MQA, both dtypes and layouts.
pub fn edge_cases(caps: &Capabilities) -> Vec<Case> {
    let dims: Vec<usize> = match &caps.head_dims {
        HeadDims::List(l) => l.to_vec(),
        h => [h_min(h), 64, 128, 192, 256, 512]
            .into_iter()
            .filter(|d| h.contains(*d))
            .collect(),
    };
    let mut shapes: Vec<(usize, usize, bool)> = vec![
        (1, 1, false),
        (1, 1, true),
        (1, 777, false),
        (1, 777, true),
        (777, 1, false),
        (777, 1, true),
        (65, 130, true),
        (130, 65, true),
        (200, 1000, true),
        (1000, 200, true),
        (5, 0, false),
    ];
    for n in [
        15usize, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257,
    ] {
        shapes.push((n, n, false));
        shapes.push((n, n, true));
    }
    let mut cases = Vec::new();
    let mut i = 0u64;
    for &d in &dims {
        for &(sq, sk, causal) in &shapes {
            if causal && !caps.causal {
                continue;
            }
            let dtype = caps.dtypes[(i as usize) % caps.dtypes.len()];
            let layout = Layout::ALL[(i as usize / 2) % 2];
            let (hq, hkv) = if caps.gqa {
                [(2, 2), (8, 2), (4, 1)][(i as usize) % 3]
            } else {
                (2, 2)
            };
            cases.push(Case {
                problem: AttentionProblem::new(1 + (i as usize % 2), hq, sq, d)
                    .with_kv(hkv, sk)
                    .with_causal(causal)
                    .with_dtype(dtype)
                    .with_layout(layout),
                data_seed: 1000 + i,
            });
            i += 1;
        }
    }
    if caps.modes != ModeSupport::NONE {
        cases.extend(mode_edge_cases(caps, &dims));
    }
    if caps.modes.kv_fp8 {
        cases.extend(
            fp8_edge_cases(caps)
                .into_iter()
                .filter(|c| caps.modes.missing(&c.problem.modes).is_none()),
        );
    }
    if caps.modes.q_fp8 {
        cases.extend(qkv_fp8_edge_cases());
    }
    if caps.distinct_head_dim_v {
        cases.extend(distinct_v_edge_cases(caps));
    }
    cases
}

/// (192, 128) on the edge shapes that matter for V's own width: single rows and keys, causal
/// both ways, tile boundaries, no keys at all, GQA and MQA, both dtypes and layouts; then with
/// the modes (lines a kernel lacks a mode of are left out): decode over a paged cache (pages
/// smaller than a tile, and one a tile wide) and a contiguous one, varlen queries and keys,
/// varlen over a paged cache, a window with softcap, ALiBi with seq_q > seq_k, and
/// `mm_prefix_ranges` beside a window.
fn distinct_v_edge_cases(caps: &Capabilities) -> Vec<Case> {
    const LINES: &[&str] = &[
        "b=1,hq=2,sq=1,sk=1",
        "b=2,hq=8,hkv=2,sq=1,sk=777,causal=1",
        "b=1,hq=4,hkv=1,sq=777,sk=1,causal=1",
        "b=2,hq=2,sq=65,sk=130,causal=1",
        "b=1,hq=8,hkv=2,sq=1000,sk=200,causal=1",
        "b=2,hq=4,sq=127,sk=129",
        "b=1,hq=2,sq=257,sk=257,causal=1",
        "b=1,hq=2,sq=5,sk=0",
        "b=2,hq=16,hkv=16,sq=512,sk=512,causal=1",
    ];
    let mut cases = Vec::new();
    for (i, line) in LINES.iter().enumerate() {
        let dtype = caps.dtypes[i % caps.dtypes.len()];
        let layout = Layout::ALL[i % 2].name();
        let arg = format!(
            "{line},d=192,dv=128,dtype={dtype},layout={layout},seed={}",
            7000 + i
        );
        cases.push(Case::parse(&arg).expect("the edge list parses"));
    }
    const MODE_LINES: &[&str] = &[
        "b=3,hq=8,hkv=2,sq=1,sk=300,causal=1,cache=paged,bs=16",
        "b=2,hq=16,hkv=2,sq=1,sk=1000,cache=paged,bs=128",
        "b=4,hq=4,hkv=4,sq=1,sk=777,cache=contig",
        "b=2,hq=4,hkv=1,sq=7,sk=300,causal=1,cache=contig",
        "b=4,hq=4,hkv=2,sq=130,sk=200,causal=1,varlen=1",
        "b=3,hq=4,hkv=1,sq=65,sk=200,varlen=1,cache=paged,bs=48",
        "b=2,hq=4,sq=129,sk=257,wl=64,wr=0,softcap=30",
        "b=2,hq=4,hkv=2,sq=300,sk=100,causal=1,wl=1,alibi=batch",
        "b=2,hq=4,hkv=2,sq=90,sk=150,causal=1,wl=4,mm=2",
    ];
    for (i, line) in MODE_LINES.iter().enumerate() {
        let dtype = caps.dtypes[i % caps.dtypes.len()];
        let arg = format!("{line},d=192,dv=128,dtype={dtype},seed={}", 7100 + i);
        let case = Case::parse(&arg).expect("the edge list parses");
        if caps.modes.missing(&case.problem.modes).is_none() {
            cases.push(case);
        }
    }
    cases
}

/// Fixed mode cases: single-token decode over a paged cache, lengths 0 and 1, windows 0, 1 and
/// past the sequence with seq_q != seq_k both ways, softcap and ALiBi with and without causal,
/// and `mm_prefix_ranges` over each of those (lines a kernel lacks a mode of are left out).
fn mode_edge_cases(caps: &Capabilities, dims: &[usize]) -> Vec<Case> {
    const LINES: &[&str] = &[
        "b=3,hq=8,hkv=2,sq=1,sk=300,causal=1,cache=paged,bs=16,append=1",
        "b=4,hq=4,hkv=4,sq=1,sk=1000,cache=contig",
        "b=2,hq=4,hkv=1,sq=7,sk=256,causal=1,cache=paged,bs=256,append=7",
        "b=4,hq=2,hkv=2,sq=130,sk=130,causal=1,varlen=1",
        "b=4,hq=2,hkv=1,sq=65,sk=200,varlen=1,cache=paged,bs=48",
        "b=1,hq=2,sq=100,sk=300,causal=1,wl=0",
        "b=1,hq=2,sq=300,sk=100,causal=1,wl=1",
        "b=1,hq=2,sq=200,sk=200,wl=1000,wr=1000",
        "b=2,hq=2,sq=129,sk=257,wl=64,wr=0",
        "b=2,hq=2,sq=64,sk=64,wl=0,wr=0",
        "b=2,hq=4,sq=100,sk=333,causal=1,softcap=30",
        "b=2,hq=4,sq=100,sk=100,softcap=1,alibi=head",
        "b=2,hq=4,sq=77,sk=300,causal=1,alibi=batch",
        "b=3,hq=4,hkv=2,sq=50,sk=500,causal=1,wl=100,softcap=50.5,alibi=batch,varlen=1",
        "b=2,hq=4,hkv=2,sq=200,sk=200,causal=1,mm=2",
        "b=2,hq=4,sq=100,sk=300,causal=1,wl=16,mm=3",
        "b=2,hq=2,sq=300,sk=100,causal=1,wl=0,mm=2",
        "b=1,hq=2,sq=129,sk=257,wl=8,wr=8,mm=1",
        "b=3,hq=4,hkv=2,sq=65,sk=200,causal=1,varlen=1,cache=paged,bs=16,append=3,mm=2",
        // Causal decode sees every key anyway; the window leaves the ranges something to add.
        "b=4,hq=8,hkv=1,sq=1,sk=500,causal=1,wl=32,cache=paged,bs=64,append=1,mm=3",
        "b=2,hq=4,hkv=2,sq=90,sk=150,causal=1,wl=4,softcap=30,alibi=batch,mm=3",
    ];
    lines_at_dims(LINES, dims, caps, 5000)
        .filter(|case| caps.modes.missing(&case.problem.modes).is_none())
        .collect()
}

/// Every line of an edge list at every head dim of `dims`, the dtypes taken in turn and a seed
/// per (line, dim) from `seed0`.
fn lines_at_dims<'a>(
    lines: &'a [&str],
    dims: &'a [usize],
    caps: &'a Capabilities,
    seed0: usize,
) -> impl Iterator<Item = Case> + 'a {
    lines.iter().enumerate().flat_map(move |(i, line)| {
        dims.iter().enumerate().map(move |(j, &d)| {
            let dtype = caps.dtypes[(i + j) % caps.dtypes.len()];
            let arg = format!("{line},d={d},dtype={dtype},seed={}", seed0 + 16 * i + j);
            Case::parse(&arg).expect("the edge list parses")
        })
    })
}

/// Fixed e4m3-cache cases at each of the decode kernel's head dims, every descale table shape:
/// single-token decode over contiguous, paged and plain K/V, appending into the cache (a decode
/// step's token, a speculative step's four), one key, a long sequence over many
/// splits, 16 packed query rows (speculative decoding with GQA), a window, softcap with ALiBi,
/// varlen queries over a paged cache and packed keys, a query longer than a decode tile, and
/// BHSD K/V. Every line whatever the kernel claims (`verify --kv-dtype e4m3` runs them all; a
/// kernel that does not take them skips them).
pub fn fp8_edge_cases(caps: &Capabilities) -> Vec<Case> {
    const LINES: &[&str] = &[
        "b=3,hq=8,hkv=2,sq=1,sk=300,causal=1,cache=paged,bs=16,append=1,fp8=head",
        "b=4,hq=4,hkv=4,sq=1,sk=1000,cache=contig,fp8=tensor",
        "b=2,hq=8,hkv=2,sq=1,sk=257,fp8=batchhead",
        "b=2,hq=2,hkv=2,sq=1,sk=1,cache=contig,fp8=head",
        "b=2,hq=8,hkv=1,sq=1,sk=4097,cache=paged,bs=64,fp8=batchhead",
        "b=2,hq=4,hkv=1,sq=4,sk=777,causal=1,cache=contig,append=4,fp8=batchhead",
        "b=1,hq=16,hkv=2,sq=2,sk=513,causal=1,cache=paged,bs=256,fp8=head",
        "b=3,hq=8,hkv=2,sq=1,sk=600,causal=1,wl=64,cache=paged,bs=64,fp8=tensor",
        "b=2,hq=8,hkv=2,sq=1,sk=500,cache=contig,softcap=30,alibi=batch,fp8=batchhead",
        "b=4,hq=4,hkv=2,sq=3,sk=300,causal=1,varlen=1,cache=paged,bs=16,fp8=head",
        "b=4,hq=4,hkv=1,sq=1,sk=500,varlen=1,fp8=tensor",
        "b=2,hq=4,hkv=2,sq=100,sk=300,causal=1,cache=contig,fp8=head",
        "b=2,hq=4,hkv=2,sq=1,sk=200,layout=bhsd,fp8=batchhead",
    ];
    lines_at_dims(LINES, &FP8_HEAD_DIMS, caps, 8000).collect()
}

fn h_min(h: &HeadDims) -> usize {
    match h {
        HeadDims::Range {
            min, multiple_of, ..
        } => min.div_ceil(*multiple_of) * multiple_of,
        HeadDims::List(l) => l[0],
    }
}

/// Backward-only edges beyond the forward's list: negative and zero scale, an odd head dim
/// with seq_k > seq_q causal, one query row over many keys with MQA (every key's dK/dV sums a
/// single row per head), many query rows over one key (dV sums them all), and head dims a
/// kernel may run padded in a wider build (136 in 160, 200 in 224: the portable backward's).
/// Then the modes of the scores with GQA, for kernels that take them: windows that leave rows
/// no key (seq_q > seq_k) and keys no row sees (a left window, seq_k > seq_q), windows across
/// the tile edges, both sides at once, softcap with the key tiles' tails, ALiBi per head and per
/// (batch, head), and all three together; varlen batches (lengths drawn from the seed, 0 and the
/// maxima among them) alone, causal with a window, with softcap and ALiBi, and at head dim 256
/// (the lines of a mode a kernel lacks are left out).
pub(super) fn backward_edge_cases(caps: &Capabilities) -> Vec<Case> {
    [
        "b=2,hq=4,hkv=2,sq=100,sk=37,d=64,causal=1,scale=-0.3,seed=9001",
        "b=1,hq=2,sq=64,sk=64,d=32,scale=0,seed=9002",
        "b=1,hq=3,hkv=1,sq=129,sk=257,d=100,causal=1,dtype=bf16,scale=0.5,seed=9003",
        "b=2,hq=8,hkv=1,sq=1,sk=300,d=128,causal=1,seed=9004",
        "b=1,hq=4,hkv=2,sq=500,sk=1,d=64,dtype=bf16,seed=9005",
        "b=3,hq=2,sq=33,sk=65,d=256,layout=bhsd,causal=1,seed=9006",
        "b=2,hq=4,hkv=2,sq=130,sk=200,d=200,causal=1,dtype=bf16,seed=9007",
        "b=1,hq=2,sq=65,sk=33,d=136,layout=bhsd,seed=9008",
        "b=2,hq=8,hkv=2,sq=300,sk=100,d=64,causal=1,wl=0,seed=9009",
        "b=1,hq=4,hkv=1,sq=70,sk=333,d=128,causal=1,wl=40,dtype=bf16,seed=9010",
        "b=2,hq=6,hkv=2,sq=257,sk=257,d=96,wl=63,wr=65,layout=bhsd,seed=9011",
        "b=1,hq=4,hkv=2,sq=129,sk=200,d=64,wl=0,wr=0,dtype=bf16,seed=9012",
        "b=2,hq=4,hkv=2,sq=150,sk=191,d=160,causal=1,softcap=5,seed=9013",
        "b=2,hq=8,hkv=4,sq=65,sk=300,d=32,softcap=30,dtype=bf16,seed=9014",
        "b=2,hq=4,hkv=1,sq=200,sk=130,d=128,alibi=head,seed=9015",
        "b=3,hq=4,hkv=2,sq=100,sk=100,d=64,causal=1,alibi=batch,dtype=bf16,seed=9016",
        "b=2,hq=8,hkv=2,sq=129,sk=257,d=256,causal=1,wl=100,softcap=50.5,alibi=batch,seed=9017",
        "b=1,hq=6,hkv=3,sq=90,sk=45,d=72,wl=8,wr=30,softcap=1,alibi=head,dtype=bf16,seed=9018",
        "b=3,hq=4,hkv=2,sq=130,sk=200,d=64,varlen=1,seed=9019",
        "b=4,hq=2,sq=65,sk=65,d=128,causal=1,varlen=1,wl=16,dtype=bf16,seed=9020",
        "b=2,hq=6,hkv=3,sq=100,sk=40,d=96,varlen=1,softcap=30,alibi=batch,seed=9021",
        "b=5,hq=2,hkv=1,sq=257,sk=129,d=256,causal=1,varlen=1,dtype=bf16,seed=9022",
    ]
    .iter()
    .map(|a| Case::parse(a).expect("the backward edge list parses"))
    .filter(|c| caps.head_dims.contains(c.problem.head_dim))
    .filter(|c| caps.modes.missing(&c.problem.modes).is_none())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::ValueTree;

    /// A case's problem and mode tables drawn again from its modes and seed: the tables alone
    /// (drawing the inputs too would take minutes unoptimised).
    fn drawn_tables(c: &Case) -> (AttentionProblem, crate::mode_case::Draw) {
        let mut p = c.problem.clone();
        let keys = ModeKeys::from_modes(&c.problem.modes);
        let draw = crate::mode_case::apply(&mut p, &keys, c.data_seed);
        (p, draw)
    }

    /// `--dtype e4m3`: every case an fp8 forward (e4m3 Q, K and V with tables of one shape)
    /// on dense storage, at head dims 64, 128 and 256, O mostly bf16 and some f16, with GQA,
    /// MQA, causal, seq_q != seq_k and lengths off the tiles among them; each line reruns the
    /// case, its tables pass the core's checks, and a kernel that does not claim e4m3 Q refuses
    /// every one. The edge list likewise, with every table shape at every head dim.
    /// The generation-5 paths take head dims past 256 for decode-shaped problems only
    /// (`Capabilities::decode_only`): the sweep draws those dims with as many queries as fit,
    /// so none of its cases is refused for that reason, and the wide dims are still drawn.
    #[test]
    fn decode_only_head_dims_are_drawn_decode_shaped() {
        let hopper = flashcore::kernels()
            .into_iter()
            .find(|k| k.name() == "persistent-hopper")
            .expect("the Hopper path is compiled in");
        let caps = hopper.capabilities();
        let only = caps
            .decode_only
            .expect("the Hopper path is decode-only past 256");
        let s = case_strategy(&caps, 600);
        let mut runner = TestRunner::deterministic();
        let mut wide = 0;
        for _ in 0..400 {
            let c = s.new_tree(&mut runner).unwrap().current();
            assert!(!only.excludes(&c.problem), "{}", c.to_arg());
            if c.problem.head_dim > only.head_dim {
                wide += 1;
                let h100 = flashcore::DeviceInfo::synthetic_h100();
                hopper
                    .plan(&c.problem, &h100)
                    .unwrap_or_else(|e| panic!("{}: {e}", c.to_arg()));
            }
        }
        assert!(wide > 20, "{wide} cases past {}", only.head_dim);
    }

    #[test]
    fn qkv_fp8_cases_are_dense_fp8_forwards() {
        let mut caps = flashcore::kernels()[0].capabilities();
        let claims = ModeSupport {
            kv_fp8: true,
            q_fp8: true,
            ..ModeSupport::NONE
        };
        let check = |c: &Case| {
            let (p, m) = (&c.problem, &c.problem.modes);
            let only = flashcore::Modes {
                kv_fp8: m.kv_fp8,
                q_fp8: true,
                ..flashcore::Modes::default()
            };
            assert!(m.kv_fp8.is_some() && m.q_fp8, "{}", c.to_arg());
            assert_eq!(*m, only, "dense storage only: {}", c.to_arg());
            assert!(FP8_HEAD_DIMS.contains(&p.head_dim), "{}", c.to_arg());
            assert!(matches!(p.dtype, DType::Bf16 | DType::F16));
            assert_eq!(Case::parse(&c.to_arg()).unwrap(), *c);
            let (drawn, draw) = drawn_tables(c);
            assert_eq!(drawn, *p);
            p.validate()
                .unwrap_or_else(|e| panic!("{}: {e}", c.to_arg()));
            draw.host_tables()
                .validate(p)
                .unwrap_or_else(|e| panic!("{}: {e}", c.to_arg()));
            // Q's table has K's shape.
            assert_eq!(
                draw.q_descale.as_ref().map(Vec::len),
                draw.k_descale.as_ref().map(Vec::len)
            );
            // Claimed or refused as a whole: e4m3 K/V alone do not take it.
            assert_eq!(claims.missing(m), None);
            let kv_only = ModeSupport {
                q_fp8: false,
                ..claims
            };
            assert_eq!(kv_only.missing(m), Some("an e4m3 (fp8) Q (q_fp8)"));
            assert!(ModeSupport::ALL.missing(m).is_some());
        };
        let mut runner = TestRunner::deterministic();
        let s = case_strategy_dtype(&caps, 1100, Some(InputDtype::E4m3), None);
        let mut scales = Vec::new();
        let (mut bf16, mut causal, mut gqa, mut mqa, mut uneven, mut odd) = (0, 0, 0, 0, 0, 0);
        let mut dims = Vec::new();
        for _ in 0..300 {
            let c = s.new_tree(&mut runner).unwrap().current();
            check(&c);
            let p = &c.problem;
            bf16 += (p.dtype == DType::Bf16) as usize;
            causal += p.causal as usize;
            gqa += (1 < p.heads_kv && p.heads_kv < p.heads_q) as usize;
            mqa += (p.heads_kv == 1 && p.heads_q > 1) as usize;
            uneven += (p.seq_q != p.seq_k) as usize;
            odd += [p.seq_q, p.seq_k]
                .iter()
                .filter(|n| [1, 17, 100, 255, 1000].contains(n))
                .count();
            if !scales.contains(&p.modes.kv_fp8) {
                scales.push(p.modes.kv_fp8);
            }
            if !dims.contains(&p.head_dim) {
                dims.push(p.head_dim);
            }
        }
        assert!((180..=270).contains(&bf16), "{bf16} of 300 in bf16");
        assert!((90..=210).contains(&causal), "{causal} of 300 causal");
        assert!(gqa > 30 && mqa > 30, "GQA {gqa}, MQA {mqa}");
        assert!(uneven > 250, "{uneven} of 300 with seq_q != seq_k");
        assert!(odd > 100, "{odd} lengths off the tiles");
        assert_eq!((scales.len(), dims.len()), (3, 3));

        let edges = qkv_fp8_edge_cases();
        assert_eq!(edges.len(), 8 * FP8_HEAD_DIMS.len());
        for c in &edges {
            check(c);
        }
        for k in [
            KvScales::PerTensor,
            KvScales::PerKvHead,
            KvScales::PerBatchKvHead,
        ] {
            for d in FP8_HEAD_DIMS {
                assert!(edges
                    .iter()
                    .any(|c| c.problem.modes.kv_fp8 == Some(k) && c.problem.head_dim == d));
            }
        }
        assert!(edges.iter().any(|c| c.problem.dtype == DType::F16));
        // A kernel that claims e4m3 Q has the fp8 edges in its edge list; one that does not,
        // none of them.
        caps.modes = ModeSupport {
            q_fp8: false,
            ..caps.modes
        };
        assert!(edge_cases(&caps).iter().all(|c| !c.problem.modes.q_fp8));
        caps.modes = ModeSupport {
            q_fp8: true,
            kv_fp8: true,
            ..caps.modes
        };
        let n = edge_cases(&caps)
            .iter()
            .filter(|c| c.problem.modes.q_fp8)
            .count();
        assert_eq!(n, edges.len());
    }

    /// No kernel compiled in claims e4m3 Q unless it also claims e4m3 K/V (a q_fp8 problem has
    /// both), and every kernel that does not claim it refuses each fp8 forward case with
    /// `Unsupported` (skipped by verify, never passed).
    #[test]
    fn kernels_that_do_not_claim_e4m3_q_refuse_every_fp8_forward() {
        let h100 = flashcore::DeviceInfo::synthetic_h100();
        let edges = qkv_fp8_edge_cases();
        for k in flashcore::kernels() {
            let caps = k.capabilities();
            if caps.modes.q_fp8 {
                assert!(caps.modes.kv_fp8, "{}", k.name());
                continue;
            }
            for c in &edges {
                assert!(k.supports(&c.problem, &h100).is_err(), "{}", k.name());
            }
        }
    }

    /// `--seed` reproduces a sweep: the same seed draws the same cases, another seed others.
    #[test]
    fn a_seed_draws_the_same_cases_again() {
        let caps = flashcore::kernels()[0].capabilities();
        let s = case_strategy(&caps, 1100);
        let draw = |seed: u64| {
            let mut r = seeded_runner(seed, 5);
            (0..5)
                .map(|_| s.new_tree(&mut r).unwrap().current().to_arg())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(41), draw(41));
        assert_ne!(draw(41), draw(42));
    }

    #[test]
    fn generated_cases_stay_in_bounds() {
        let caps = flashcore::kernels()[0].capabilities();
        let mut runner = TestRunner::deterministic();
        let s = case_strategy(&caps, 1100);
        let mut with_modes = 0;
        for _ in 0..300 {
            let c = s.new_tree(&mut runner).unwrap().current();
            let p = &c.problem;
            assert!((1..=4).contains(&p.batch));
            assert!((1..=16).contains(&p.heads_q) && p.heads_q.is_multiple_of(p.heads_kv));
            // A paged cache's capacity is rounded up to whole blocks (at most 256 rows).
            let max_k = if matches!(p.modes.kv, flashcore::KvStorage::Paged { .. }) {
                1100 + 255
            } else {
                1100
            };
            assert!((1..=1100).contains(&p.seq_q) && (1..=max_k).contains(&p.seq_k));
            assert!(caps.head_dims.contains(p.head_dim));
            p.validate().unwrap();
            assert_eq!(caps.modes.missing(&p.modes), None);
            with_modes += !p.modes.is_dense() as usize;
        }
        if caps.modes != ModeSupport::NONE {
            assert!(
                (100..=200).contains(&with_modes),
                "{with_modes} of 300 draw modes"
            );
        }
    }

    #[test]
    fn tile_boundaries_come_up() {
        let caps = flashcore::kernels()[0].capabilities();
        let mut runner = TestRunner::deterministic();
        let s = case_strategy(&caps, 1100);
        let hits = (0..500)
            .map(|_| s.new_tree(&mut runner).unwrap().current())
            .filter(|c| [63, 64, 65, 127, 128, 129].contains(&c.problem.seq_q))
            .count();
        assert!(hits > 10, "only {hits} boundary lengths in 500 cases");
    }

    #[test]
    fn edge_list_covers_the_named_edges() {
        let caps = flashcore::kernels()[0].capabilities();
        let e = edge_cases(&caps);
        let has = |f: &dyn Fn(&AttentionProblem) -> bool| e.iter().any(|c| f(&c.problem));
        assert!(has(&|p| p.seq_q == 1));
        assert!(has(&|p| p.seq_k == 1));
        assert!(has(&|p| p.causal && p.seq_q > p.seq_k));
        assert!(has(&|p| p.causal && p.seq_q < p.seq_k));
        assert!(has(&|p| p.seq_k == 0));
        assert!(has(&|p| p.seq_q == 129));
        assert!(has(&|p| p.heads_kv == 1 && p.heads_q > 1));
    }

    /// A kernel that claims `mm_prefix_ranges` gets them in its sweep and edge list, with
    /// tables the core accepts; one that does not never does.
    #[test]
    fn mm_cases_come_up_where_claimed() {
        let mut caps = flashcore::kernels()[0].capabilities();
        caps.modes = ModeSupport {
            mm_prefix: true,
            ..ModeSupport::ALL
        };
        let mut runner = TestRunner::deterministic();
        let s = case_strategy(&caps, 600);
        let mut with_mm = 0;
        for _ in 0..300 {
            let c = s.new_tree(&mut runner).unwrap().current();
            let (p, draw) = drawn_tables(&c);
            p.validate().unwrap();
            draw.host_tables().validate(&p).unwrap();
            assert_eq!(Case::parse(&c.to_arg()).unwrap(), c);
            with_mm += p.modes.mm_prefix.is_some() as usize;
        }
        assert!((20..=80).contains(&with_mm), "{with_mm} of 300 draw mm");
        let edges = edge_cases(&caps);
        let mm_edges: Vec<&Case> = edges
            .iter()
            .filter(|c| c.problem.modes.mm_prefix.is_some())
            .collect();
        assert!(mm_edges.len() >= 7, "{} mm edge cases", mm_edges.len());
        for c in &mm_edges {
            let (p, draw) = drawn_tables(c);
            p.validate().unwrap();
            draw.host_tables().validate(&p).unwrap();
        }
        let has = |f: &dyn Fn(&AttentionProblem) -> bool| mm_edges.iter().any(|c| f(&c.problem));
        assert!(has(
            &|p| p.seq_q == 1 && matches!(p.modes.kv, flashcore::KvStorage::Paged { .. })
        ));
        assert!(has(&|p| p.modes.packed_q.is_some() && p.modes.seqused_k));
        assert!(has(&|p| p.causal && p.seq_q > p.seq_k));
        assert!(has(&|p| p.causal
            && p.seq_q < p.seq_k
            && p.modes.window_left.is_some()));
        assert!(has(
            &|p| p.modes.alibi.is_some() && p.modes.softcap.is_some()
        ));

        caps.modes.mm_prefix = false;
        assert!(edge_cases(&caps)
            .iter()
            .all(|c| c.problem.modes.mm_prefix.is_none()));
        let s = case_strategy(&caps, 600);
        for _ in 0..100 {
            let c = s.new_tree(&mut runner).unwrap().current();
            assert!(c.problem.modes.mm_prefix.is_none());
        }
    }

    /// A kernel that claims e4m3 K/V draws them in about one mode case in six (a twelfth of its
    /// cases), only with the modes the decode kernel takes beside them (appended rows among
    /// them), at head dims that are multiples of 16 (mostly the decode kernel's), with tables the
    /// core accepts; `--kv-dtype e4m3` draws nothing else, whatever the kernel claims; a kernel
    /// that does not claim them never draws them otherwise. The edge list has them at each of
    /// the decode kernel's head dims, with every table shape.
    #[test]
    fn fp8_cases_come_up_where_claimed() {
        let mut caps = flashcore::kernels()[0].capabilities();
        caps.modes = ModeSupport {
            kv_fp8: true,
            ..ModeSupport::ALL
        };
        let tables = |c: &Case| {
            let (p, draw) = drawn_tables(c);
            p.validate()
                .unwrap_or_else(|e| panic!("{}: {e}", c.to_arg()));
            draw.host_tables()
                .validate(&p)
                .unwrap_or_else(|e| panic!("{}: {e}", c.to_arg()));
            assert_eq!(p, c.problem);
        };
        let check_fp8 = |c: &Case| {
            let (p, m) = (&c.problem, &c.problem.modes);
            assert!(m.kv_fp8.is_some());
            assert!(p.head_dim.is_multiple_of(16), "{}", c.to_arg());
            assert!(
                FP8_HEAD_DIMS.contains(&p.head_dim) || FP8_REFUSED_HEAD_DIMS.contains(&p.head_dim)
            );
            assert_eq!(m.mm_prefix, None, "{}", c.to_arg());
            assert!(!p.has_distinct_head_dim_v());
            assert_eq!(caps.modes.missing(m), None);
            assert_eq!(Case::parse(&c.to_arg()).unwrap(), *c);
            tables(c);
        };
        let mut runner = TestRunner::deterministic();
        let s = case_strategy(&caps, 600);
        let mut fp8 = 0;
        for _ in 0..600 {
            let c = s.new_tree(&mut runner).unwrap().current();
            if c.problem.modes.kv_fp8.is_some() {
                fp8 += 1;
                check_fp8(&c);
            }
        }
        assert!((25..=90).contains(&fp8), "{fp8} of 600 draw e4m3 K/V");

        // --kv-dtype e4m3: every case.
        let s = case_strategy_kv(&caps, 600, Some(KvDtype::E4m3));
        let (mut decode, mut refused, mut scales, mut caches) = (0, 0, Vec::new(), [0; 3]);
        let mut appends = 0;
        for _ in 0..300 {
            let c = s.new_tree(&mut runner).unwrap().current();
            check_fp8(&c);
            let p = &c.problem;
            decode += (p.seq_q * p.q_heads_per_kv() <= 16) as usize;
            appends += p.modes.append.is_some() as usize;
            refused += !FP8_HEAD_DIMS.contains(&p.head_dim) as usize;
            if !scales.contains(&p.modes.kv_fp8) {
                scales.push(p.modes.kv_fp8);
            }
            caches[match p.modes.kv {
                flashcore::KvStorage::Paged { .. } => 0,
                _ if p.modes.seqused_k => 1,
                _ => 2,
            }] += 1;
        }
        assert!(decode > 120, "{decode} of 300 decode-shaped");
        assert!(
            (10..=75).contains(&refused),
            "{refused} of 300 refused dims"
        );
        assert_eq!(scales.len(), 3);
        assert!(
            caches.iter().all(|&n| n > 30),
            "paged, contig, none: {caches:?}"
        );
        assert!(appends > 30, "{appends} of 300 append");

        let edges: Vec<Case> = edge_cases(&caps)
            .into_iter()
            .filter(|c| c.problem.modes.kv_fp8.is_some())
            .collect();
        assert_eq!(edges.len(), 3 * 13);
        for c in &edges {
            check_fp8(c);
        }
        for d in FP8_HEAD_DIMS {
            assert!(edges.iter().any(|c| c.problem.head_dim == d));
        }
        for k in [
            KvScales::PerTensor,
            KvScales::PerKvHead,
            KvScales::PerBatchKvHead,
        ] {
            assert!(edges.iter().any(|c| c.problem.modes.kv_fp8 == Some(k)));
        }

        // A kernel that does not claim them: none drawn, none on its edge list; with
        // --kv-dtype e4m3 all of them still (it skips them).
        caps.modes.kv_fp8 = false;
        assert!(edge_cases(&caps)
            .iter()
            .all(|c| c.problem.modes.kv_fp8.is_none()));
        assert_eq!(fp8_edge_cases(&caps).len(), 3 * 13);
        let s = case_strategy(&caps, 600);
        for _ in 0..200 {
            assert!(s
                .new_tree(&mut runner)
                .unwrap()
                .current()
                .problem
                .modes
                .kv_fp8
                .is_none());
        }
        let s = case_strategy_kv(&caps, 600, Some(KvDtype::E4m3));
        for _ in 0..50 {
            let c = s.new_tree(&mut runner).unwrap().current();
            assert!(c.problem.modes.kv_fp8.is_some());
        }
    }

    /// Where a generation-5 path claims e4m3 K/V, it takes the drawn cases at the decode
    /// kernel's head dims and refuses the others with a reason (verify counts them skipped),
    /// and every other generation refuses them all.
    #[test]
    fn fp8_cases_are_taken_by_the_decode_kernel_only() {
        let h100 = flashcore::DeviceInfo::synthetic_h100();
        for k in flashcore::kernels() {
            let caps = k.capabilities();
            let mut runner = TestRunner::deterministic();
            let s = case_strategy_kv(&caps, 300, Some(KvDtype::E4m3));
            for _ in 0..60 {
                let c = s.new_tree(&mut runner).unwrap().current();
                let got = k.supports(&c.problem, &h100);
                let decode_dim = FP8_HEAD_DIMS.contains(&c.problem.head_dim);
                if !caps.modes.kv_fp8 || !decode_dim {
                    let u = got.expect_err(&format!("{} takes {}", k.name(), c.to_arg()));
                    assert!(!u.reason.is_empty());
                } else if caps.modes.missing(&c.problem.modes).is_none()
                    && caps.head_dims.contains(c.problem.head_dim)
                {
                    got.unwrap_or_else(|u| panic!("{}: {}: {}", k.name(), c.to_arg(), u.reason));
                }
            }
        }
    }

    /// A kernel that takes V's own head dim gets (192, 128) and the other pairs in its sweep
    /// (a fifth of its dense cases and of its 16-bit mode cases) and edge list, each a problem
    /// the portable plan takes, except an append, which is refused naming both dims (skipped);
    /// the mode cases have paged and contiguous caches, varlen, windows, softcap, ALiBi and
    /// `mm_prefix_ranges` among them, with tables the core accepts, and never e4m3 caches.
    #[test]
    fn distinct_v_dims_come_up_where_claimed() {
        let portable = flashcore::kernels()
            .into_iter()
            .find(|k| k.name() == "persistent-portable")
            .unwrap();
        let caps = portable.capabilities();
        assert!(caps.distinct_head_dim_v && caps.modes.kv_fp8);
        let h100 = flashcore::DeviceInfo::synthetic_h100();
        let mut runner = TestRunner::deterministic();
        let s = case_strategy(&caps, 600);
        let (mut dense, mut dense_distinct) = (0, 0);
        let (mut modes, mut modes_distinct) = (0, 0);
        // Paged, contiguous cache, append, varlen, window, softcap, ALiBi, mm_prefix_ranges.
        let mut seen = [0usize; 8];
        for _ in 0..1200 {
            let c = s.new_tree(&mut runner).unwrap().current();
            let (p, m) = (&c.problem, &c.problem.modes);
            p.validate().unwrap();
            assert_eq!(Case::parse(&c.to_arg()).unwrap(), c);
            if m.kv_fp8.is_some() {
                assert!(!p.has_distinct_head_dim_v(), "{}", c.to_arg());
                continue;
            }
            let distinct = p.has_distinct_head_dim_v();
            if m.is_dense() {
                dense += 1;
                dense_distinct += distinct as usize;
            } else {
                modes += 1;
                modes_distinct += distinct as usize;
            }
            if !distinct {
                continue;
            }
            assert!(DISTINCT_V_DIMS.contains(&(p.head_dim, p.head_dim_v())));
            let (drawn, draw) = drawn_tables(&c);
            assert_eq!(drawn, *p);
            draw.host_tables()
                .validate(p)
                .unwrap_or_else(|e| panic!("{}: {e}", c.to_arg()));
            let got = portable.supports(p, &h100);
            if m.append.is_some() {
                let u = got.expect_err(&c.to_arg());
                assert!(
                    u.reason.contains("appending")
                        && u.reason.contains(&format!("head_dim_v {}", p.head_dim_v())),
                    "{}",
                    u.reason
                );
            } else {
                got.unwrap_or_else(|u| panic!("{}: {}", c.to_arg(), u.reason));
            }
            let modes_drawn = [
                matches!(m.kv, flashcore::KvStorage::Paged { .. }),
                m.seqused_k && matches!(m.kv, flashcore::KvStorage::Dense),
                m.append.is_some(),
                m.packed_q.is_some(),
                m.window_left.is_some() || m.window_right.is_some(),
                m.softcap.is_some(),
                m.alibi.is_some(),
                m.mm_prefix.is_some(),
            ];
            for (n, on) in seen.iter_mut().zip(modes_drawn) {
                *n += on as usize;
            }
        }
        let fifth = |n: usize, of: usize| 10 * n >= of && 10 * n <= 3 * of;
        assert!(
            fifth(dense_distinct, dense),
            "{dense_distinct} of {dense} dense cases draw a V dim"
        );
        assert!(
            fifth(modes_distinct, modes),
            "{modes_distinct} of {modes} mode cases draw a V dim"
        );
        assert!(seen.iter().all(|&n| n >= 3), "{seen:?}");

        let edges: Vec<Case> = edge_cases(&caps)
            .into_iter()
            .filter(|c| c.problem.has_distinct_head_dim_v())
            .collect();
        assert!(edges.len() >= 18, "{} edge cases", edges.len());
        for c in &edges {
            assert_eq!((c.problem.head_dim, c.problem.head_dim_v()), (192, 128));
            assert!(c.to_arg().contains(",dv=128"));
            let (p, draw) = drawn_tables(c);
            draw.host_tables().validate(&p).unwrap();
            portable.supports(&c.problem, &h100).unwrap();
        }
        let has = |f: &dyn Fn(&AttentionProblem) -> bool| edges.iter().any(|c| f(&c.problem));
        assert!(has(
            &|p| p.seq_q == 1 && matches!(p.modes.kv, flashcore::KvStorage::Paged { .. })
        ));
        assert!(has(&|p| p.modes.packed_q.is_some()
            && matches!(p.modes.kv, flashcore::KvStorage::Packed { .. })));
        assert!(has(
            &|p| p.modes.window_left.is_some() && p.modes.softcap.is_some()
        ));
        assert!(has(&|p| p.modes.mm_prefix.is_some()));
        // A kernel without a mode has no line of it.
        let no_paged = Capabilities {
            modes: ModeSupport {
                paged: false,
                ..caps.modes
            },
            ..caps.clone()
        };
        let fewer = edge_cases(&no_paged)
            .into_iter()
            .filter(|c| c.problem.has_distinct_head_dim_v())
            .collect::<Vec<_>>();
        assert_eq!(fewer.len(), edges.len() - 3);
        assert!(fewer
            .iter()
            .all(|c| !matches!(c.problem.modes.kv, flashcore::KvStorage::Paged { .. })));

        // The Hopper path takes every pair too (the V ring and P·V at the V dim), dense and with
        // the modes: its sweep and edge list draw them, each a problem it plans.
        let hopper = flashcore::kernels()
            .into_iter()
            .find(|k| k.name() == "persistent-hopper")
            .unwrap();
        assert!(hopper.capabilities().distinct_head_dim_v);
        for &(d, dv) in DISTINCT_V_DIMS {
            let p = flashcore::AttentionProblem::new(2, 8, 300, d).with_head_dim_v(dv);
            hopper.plan(&p, &h100).unwrap();
        }
        let hopper_edges: Vec<Case> = edge_cases(&hopper.capabilities())
            .into_iter()
            .filter(|c| c.problem.has_distinct_head_dim_v())
            .collect();
        assert_eq!(hopper_edges.len(), edges.len());
        for c in &hopper_edges {
            hopper
                .supports(&c.problem, &h100)
                .unwrap_or_else(|u| panic!("{}: {}", c.to_arg(), u.reason));
        }
    }

    /// Every generation-5 path that claims V's own head dim plans the mode cases its sweep draws
    /// at a V dim, except appends, which it refuses naming them (the core's append kernel copies
    /// rows of one head dim); a generation that does not claim it refuses every one.
    #[test]
    fn mode_cases_at_a_v_dim_are_planned_or_refused_by_name() {
        let h100 = flashcore::DeviceInfo::synthetic_h100();
        let portable = flashcore::kernels()
            .into_iter()
            .find(|k| k.name() == "persistent-portable")
            .unwrap();
        let s = case_strategy(&portable.capabilities(), 600);
        let mut runner = TestRunner::deterministic();
        let cases: Vec<Case> = (0..2000)
            .map(|_| s.new_tree(&mut runner).unwrap().current())
            .filter(|c| c.problem.has_distinct_head_dim_v() && !c.problem.modes.is_dense())
            .take(60)
            .collect();
        assert_eq!(cases.len(), 60);
        for k in flashcore::kernels() {
            let caps = k.capabilities();
            let mut planned = 0;
            for c in &cases {
                let got = k.supports(&c.problem, &h100);
                if !caps.distinct_head_dim_v {
                    let u = got.expect_err(&format!("{} takes {}", k.name(), c.to_arg()));
                    assert!(!u.reason.is_empty());
                } else if c.problem.modes.append.is_some() {
                    let u = got.expect_err(&format!("{} takes {}", k.name(), c.to_arg()));
                    assert!(u.reason.contains("appending"), "{}", u.reason);
                } else if caps.modes.missing(&c.problem.modes).is_none() {
                    got.unwrap_or_else(|u| panic!("{}: {}: {}", k.name(), c.to_arg(), u.reason));
                    planned += 1;
                }
            }
            if caps.distinct_head_dim_v {
                assert!(planned > 30, "{}: {planned} of 60 planned", k.name());
            }
        }
    }

    /// A kernel that does not claim V's own head dim never draws one, dense or with the modes;
    /// nor do e4m3 caches (`--kv-dtype e4m3`), whatever the kernel claims.
    #[test]
    fn distinct_v_dims_stay_out_where_not_claimed_and_of_e4m3_caches() {
        let mut caps = flashcore::kernels()
            .into_iter()
            .find(|k| k.name() == "persistent-portable")
            .unwrap()
            .capabilities();
        let mut runner = TestRunner::deterministic();
        let s = case_strategy_kv(&caps, 600, Some(KvDtype::E4m3));
        for _ in 0..200 {
            let c = s.new_tree(&mut runner).unwrap().current();
            assert!(!c.problem.has_distinct_head_dim_v(), "{}", c.to_arg());
        }
        caps.distinct_head_dim_v = false;
        let s = case_strategy(&caps, 600);
        let mut modes = 0;
        for _ in 0..400 {
            let c = s.new_tree(&mut runner).unwrap().current();
            assert!(!c.problem.has_distinct_head_dim_v(), "{}", c.to_arg());
            modes += !c.problem.modes.is_dense() as usize;
        }
        assert!(modes > 100, "{modes} of 400 with modes");
        assert!(edge_cases(&caps)
            .iter()
            .all(|c| !c.problem.has_distinct_head_dim_v()));
    }
    /// A backward kernel that claims the modes of the scores draws them (windows, causal too,
    /// softcap, ALiBi both ways, varlen, with GQA) in half its cases, on dense or varlen storage
    /// the core's backward validation takes, and gets them on its edge list; one that claims
    /// none draws dense problems only.
    #[test]
    fn backward_cases_draw_the_modes_a_kernel_claims_and_stay_in_bounds() {
        // The scalar backward takes every head dim, so the whole edge list applies to it.
        let caps = flashcore::backward_kernel("scalar")
            .expect("the scalar backward is compiled in")
            .capabilities();
        assert_eq!(caps.modes, flashcore::backward::BACKWARD_MODES);
        let mut runner = TestRunner::deterministic();
        let s = case_strategy(&caps, 300);
        let (mut with_modes, mut windows, mut causal_windows, mut softcap, mut alibi) =
            (0, 0, 0, 0, [0; 2]);
        let mut varlen = 0;
        let mut gqa_modes = 0;
        for _ in 0..300 {
            let c = s.new_tree(&mut runner).unwrap().current();
            let (p, m) = (&c.problem, &c.problem.modes);
            assert!(p.seq_q <= 300 && p.seq_k <= 300);
            flashcore::backward::validate_backward(p).unwrap();
            assert_eq!(caps.modes.missing(m), None);
            assert_eq!(Case::parse(&c.to_arg()).unwrap(), c);
            with_modes += !m.is_dense() as usize;
            varlen += flashcore::backward::is_varlen(p) as usize;
            windows += (m.window_left.is_some() || m.window_right.is_some()) as usize;
            causal_windows += (p.causal && m.window_left.is_some()) as usize;
            softcap += m.softcap.is_some() as usize;
            match m.alibi {
                Some(AlibiSlopes::PerHead) => alibi[0] += 1,
                Some(AlibiSlopes::PerBatchHead) => alibi[1] += 1,
                None => {}
            }
            gqa_modes += (!m.is_dense() && p.heads_kv < p.heads_q) as usize;
        }
        assert!((100..=250).contains(&with_modes), "{with_modes} of 300");
        assert!((50..=150).contains(&varlen), "{varlen} of 300");
        assert!(
            windows > 50 && causal_windows > 10,
            "{windows} {causal_windows}"
        );
        assert!(
            softcap > 20 && alibi.iter().all(|&n| n > 10),
            "{softcap} {alibi:?}"
        );
        assert!(gqa_modes > 30, "{gqa_modes}");
        let edges = backward_edge_cases(&caps);
        assert_eq!(edges.len(), 22);
        assert_eq!(
            edges
                .iter()
                .filter(|c| flashcore::backward::is_varlen(&c.problem))
                .count(),
            4
        );
        assert!(edges.iter().any(|c| c.problem.softmax_scale == Some(0.0)));
        // The oracle's problem of a mode edge has its modes, the slopes as drawn.
        let c = &edges[16];
        let op = c.oracle_problem();
        assert_eq!((op.window_left, op.softcap), (Some(100), Some(50.5)));
        let slopes = c.draw().alibi_slopes.unwrap();
        assert_eq!(op.alibi_slopes.unwrap()[9], slopes[9] as f64);
        // The forward's mode edges with windows, softcap or ALiBi alone come up too.
        let all = edge_cases(&caps);
        assert!(all
            .iter()
            .any(|c| c.problem.modes.window_left == Some(1000)));
        assert!(all
            .iter()
            .all(|c| flashcore::backward::validate_backward(&c.problem).is_ok()));
        let none = Capabilities {
            modes: ModeSupport::NONE,
            ..caps
        };
        assert_eq!(backward_edge_cases(&none).len(), 8);
        let s = case_strategy(&none, 300);
        for _ in 0..50 {
            assert!(s
                .new_tree(&mut runner)
                .unwrap()
                .current()
                .problem
                .modes
                .is_dense());
        }
    }
}
