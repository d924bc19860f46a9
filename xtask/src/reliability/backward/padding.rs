//! `nan-padding`: Q, K, V, O, dO and LSE inside larger NaN-filled buffers (custom strides) give
//! dQ, dK, dV bit-identical to the dense run, and the gradient buffers' padding keeps its
//! sentinel.

use flashcore::{AttentionProblem, Capabilities, Error, Layout};

use super::buffers::{inputs_for, with_places, BwdBuffers, HostBits, Places};
use super::placement::{compare_padded, Padding};
use super::{KernelCheck, CHECK};
use crate::reliability::host::{count_nan_bits, padding_sentinel};
use crate::reliability::watchdog::progress;
use crate::reliability::{dims_in, wanted_dims, PaddedTally, Report};

const GRADS: [&str; 3] = ["dQ", "dK", "dV"];

/// (seq_q, seq_k): one row and key, tails at tile sizes ± 1, seq_q above and below seq_k, no
/// keys at all.
const PADDING_SHAPES: &[(usize, usize)] = &[
    (1, 1),
    (15, 17),
    (65, 130),
    (130, 65),
    (129, 129),
    (17, 200),
    (200, 17),
    (257, 257),
    (33, 0),
];

/// `nan-padding`'s head dims unless `--head-dims` names others: 64 and 128, and 200, which the
/// portable backward runs padded in its 224 build (the columns past head_dim are then the
/// kernel's to zero-fill, never to read or write).
pub(super) const PADDING_DIMS: &[usize] = &[64, 128, 200];

/// The problems `nan-padding` runs on a backward kernel: every shape at each of `wanted`'s head
/// dims it takes, causal and not, GQA where it takes it, dtypes and layouts alternating.
fn padding_problems(caps: &Capabilities, wanted: &[usize]) -> Vec<AttentionProblem> {
    let (hq, hkv) = if caps.gqa { (4, 2) } else { (4, 4) };
    let mut v = Vec::new();
    for d in dims_in(&caps.head_dims, wanted) {
        for &(sq, sk) in PADDING_SHAPES {
            for causal in [false, true] {
                if causal && !caps.causal {
                    continue;
                }
                let i = v.len();
                v.push(
                    AttentionProblem::new(2, hq, sq, d)
                        .with_kv(hkv, sk)
                        .with_causal(causal)
                        .with_dtype(caps.dtypes[i % caps.dtypes.len()])
                        .with_layout(caps.layouts[(i / 2) % caps.layouts.len()]),
                );
            }
        }
    }
    v
}

/// How Q, K, V and O (with dO) are padded in variant `n`: each tensor differently (a kernel
/// that takes one tensor's strides for another's reads or writes the wrong elements), heads
/// outside rows or rows outside heads alternating between tensors and variants. Every amount
/// is a multiple of 8 elements where it moves a row start, so 16-byte loads stay aligned.
fn paddings(n: usize) -> [Padding; 4] {
    let order = |i: usize| Layout::ALL[(n + i) % 2];
    let pad = |cols, rows, heads, i| Padding {
        cols,
        rows,
        heads,
        front: 64,
        back: 64,
        order: order(i),
    };
    [
        pad(8, 29, 1, 0),
        pad(16, 13, 0, 1),
        pad(8, 7, 1, 2),
        pad(0, 3, 2, 3),
    ]
}

pub(super) fn nan_padding(cx: &KernelCheck, report: &mut Report) {
    let line = cx.start("nan-padding");
    let mut tally = PaddedTally::default();
    let wanted = wanted_dims(cx.args, PADDING_DIMS);
    for (i, p) in padding_problems(&cx.kernel.capabilities(), wanted)
        .iter()
        .enumerate()
    {
        progress();
        let outcome = padding_one(cx, p, i);
        tally.count(outcome, || p.to_string());
    }
    tally.report(
        report,
        CHECK,
        &line.label,
        |ran| {
            format!(
                "{ran} padded runs bit-identical to dense (tails 1..257, seq_k 0, causal and not, \
                 NaN past seq/head_dim/heads/base in Q, K, V, O, dO, LSE), no gradient padding \
                 written"
            )
        },
        line.t,
    );
}

/// One padded-versus-dense comparison. Ok(false): the kernel (or its forward) does not take
/// the problem.
fn padding_one(
    cx: &KernelCheck,
    p: &AttentionProblem,
    variant: usize,
) -> std::result::Result<bool, String> {
    let KernelCheck {
        dev,
        kernel: k,
        args,
    } = *cx;
    let seed = args.seed.wrapping_add(900 + variant as u64);
    if k.supports_backward(p, dev.info()).is_err() {
        return Ok(false);
    }
    let Some(bi) = inputs_for(k, dev, p, seed)? else {
        return Ok(false);
    };
    let e = |e: Error| e.to_string();
    let hb = HostBits::new(p, &bi);
    let dense = Places::dense(p);
    let mut c = BwdBuffers::from_host(dev, p, &hb, &dense, 0).map_err(e)?;
    let clean = c.run(k, dev).map_err(|err| format!("dense run: {err}"))?;
    let clean: Vec<Vec<u16>> = clean
        .iter()
        .zip(dense.grads())
        .map(|(bits, pl)| pl.gather(bits))
        .collect();
    let unwritten: usize = clean.iter().map(|g| count_nan_bits(p.dtype, g)).sum();
    if unwritten > 0 {
        return Err(format!(
            "dense run left {unwritten} gradient elements NaN (unwritten)"
        ));
    }
    drop(c);

    let padded = Places::padded(p, paddings(variant));
    let pp = with_places(p, &padded);
    flashcore::backward::validate_backward(&pp).map_err(|err| err.to_string())?;
    if let Err(u) = k.supports_backward(&pp, dev.info()) {
        return Err(format!(
            "takes the dense problem but not the padded one: {}",
            u.reason
        ));
    }
    let mut c = BwdBuffers::from_host(dev, &pp, &hb, &padded, 16).map_err(e)?;
    let got = c.run(k, dev).map_err(|err| format!("padded run: {err}"))?;
    let sentinel = padding_sentinel(p.dtype);
    // A kernel that is not deterministic (atomic dQ) may round dQ differently in the two runs:
    // there dQ must be written everywhere and leave its padding alone, not match bit for bit.
    let loose_dq = !k.deterministic();
    let got_dq = padded.grads()[0].gather(&got[0]);
    if loose_dq && count_nan_bits(p.dtype, &got_dq) > 0 {
        return Err(format!(
            "padded run left {} dQ elements NaN (unwritten)",
            count_nan_bits(p.dtype, &got_dq)
        ));
    }
    let why: Vec<String> = (0..3)
        .map(|i| {
            let want = if loose_dq && i == 0 {
                &got_dq
            } else {
                &clean[i]
            };
            compare_padded(want, &padded.grads()[i], &got[i], sentinel)
        })
        .zip(GRADS)
        .filter(|(d, _)| !d.is_clean())
        .map(|(d, name)| d.describe(name))
        .collect();
    if why.is_empty() {
        Ok(true)
    } else {
        Err(why.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reliability::backward::valid_problems_per_kernel;
    use flashcore::DeviceInfo;

    #[test]
    fn padding_problems_cover_tails_gqa_causal_and_both_layouts() {
        for (name, caps, v) in valid_problems_per_kernel(|c| padding_problems(c, PADDING_DIMS)) {
            assert!(v.len() >= PADDING_SHAPES.len(), "{name}");
            assert!(v.iter().any(|p| p.seq_k == 0));
            assert!(v.iter().any(|p| p.seq_q > p.seq_k && p.causal) || !caps.causal);
            assert!(v.iter().any(|p| p.heads_q > p.heads_kv) || !caps.gqa);
            for layout in caps.layouts {
                assert!(v.iter().any(|p| p.layout == *layout), "{name} {layout:?}");
            }
            for dt in caps.dtypes {
                assert!(v.iter().any(|p| p.dtype == *dt), "{name} {dt}");
            }
        }
    }

    #[test]
    fn every_padded_problem_validates_and_the_kernels_that_take_it_dense_take_it_padded() {
        let dev = DeviceInfo::synthetic_h100();
        for k in flashcore::backward_kernels() {
            for (i, p) in padding_problems(&k.capabilities(), PADDING_DIMS)
                .iter()
                .enumerate()
            {
                let places = Places::padded(p, paddings(i));
                let pp = with_places(p, &places);
                flashcore::backward::validate_backward(&pp).unwrap_or_else(|e| panic!("{p}: {e}"));
                // Each buffer holds its tensor from its front offset (what the check passes).
                let lens = [
                    (places.q, pp.q_len()),
                    (places.k, pp.k_len()),
                    (places.v, pp.v_len()),
                    (places.o, pp.o_len()),
                ];
                for (pl, need) in lens {
                    assert!(pl.len - pl.front >= need, "{p}");
                }
                if k.supports_backward(p, &dev).is_ok() {
                    k.supports_backward(&pp, &dev)
                        .unwrap_or_else(|u| panic!("{} {p}: {}", k.name(), u.reason));
                }
            }
        }
    }

    #[test]
    fn padded_strides_are_valid_distinct_per_tensor_and_aligned() {
        let p = AttentionProblem::new(2, 4, 65, 64)
            .with_kv(2, 130)
            .with_causal(true);
        for variant in 0..2 {
            let places = Places::padded(&p, paddings(variant));
            let pp = with_places(&p, &places);
            flashcore::backward::validate_backward(&pp).unwrap();
            let s = pp.strides();
            // No two tensors share strides (Q and O have the same dims, K and V too).
            assert_ne!(s.q, s.o);
            assert_ne!(s.k, s.v);
            for st in [s.q, s.k, s.v, s.o] {
                assert!(st.batch % 8 == 0 && st.head % 8 == 0 && st.row % 8 == 0);
            }
            for pl in [places.q, places.k, places.v, places.o] {
                assert_eq!(pl.front % 8, 0);
                // Padding on every side: before, past the rows and past the tensor.
                assert!(pl.len > pl.elements() + pl.front);
            }
            // Both orders appear across the tensors of a variant.
            let orders: Vec<Layout> = paddings(variant).iter().map(|x| x.order).collect();
            assert!(orders.contains(&Layout::Bhsd) && orders.contains(&Layout::Bshd));
            // The kernels that take the dense problem take the padded one.
            for k in flashcore::backward_kernels() {
                let dev = DeviceInfo::synthetic_h100();
                if k.supports_backward(&p, &dev).is_ok() {
                    k.supports_backward(&pp, &dev).unwrap();
                }
            }
        }
        assert_ne!(paddings(0)[0].order, paddings(1)[0].order);
    }
}
