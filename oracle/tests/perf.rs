//! Timing of the full-size reference; run with
//! `cargo test -p flashcore-oracle --release --test perf -- --ignored --nocapture`.

use std::time::Instant;

use flashcore_oracle::{reference_f64, reference_low_precision, OracleProblem, Precision, Rows};
use ndarray::Array4;

fn inputs(p: &OracleProblem) -> (Array4<f32>, Array4<f32>, Array4<f32>) {
    // Cheap deterministic pseudo-random values on the f16 grid.
    let mut s = 0x1234_5678u32;
    let mut gen = |shape: (usize, usize, usize, usize)| {
        Array4::from_shape_simple_fn(shape, || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            Precision::F16.round((s as f32 / u32::MAX as f32) * 2.0 - 1.0)
        })
    };
    let q = gen((p.batch, p.heads_q, p.seq_q, p.head_dim));
    let k = gen((p.batch, p.heads_kv, p.seq_k, p.head_dim));
    let v = gen((p.batch, p.heads_kv, p.seq_k, p.head_dim));
    (q, k, v)
}

#[test]
#[ignore = "timing; run in release"]
fn full_size_rows_all() {
    for causal in [false, true] {
        let p = OracleProblem {
            batch: 4,
            heads_q: 16,
            heads_kv: 16,
            seq_q: 1100,
            seq_k: 1100,
            head_dim: 128,
            causal,
            scale: 1.0 / (128f64).sqrt(),
            window_left: None,
            window_right: None,
            softcap: None,
            alibi_slopes: None,
            mm_prefix: None,
            p_e4m3: false,
        };
        let (q, k, v) = inputs(&p);
        let t = Instant::now();
        let r = reference_f64(&p, q.view(), k.view(), v.view(), &Rows::All);
        let t64 = t.elapsed();
        let t = Instant::now();
        let l =
            reference_low_precision(&p, Precision::F16, q.view(), k.view(), v.view(), &Rows::All);
        let tlp = t.elapsed();
        assert_eq!(r.len(), l.len());
        println!("causal={causal}: f64 {t64:?}, low precision {tlp:?}");
    }
}

#[test]
#[ignore = "timing; run in release"]
fn backward_largest_verify_shape() {
    use flashcore_oracle::{gradients_f64, gradients_low_precision};
    // The largest dense problem `verify --pass bwd` draws at its default max seq (512).
    let p = OracleProblem::dense(4, 16, 4, 512, 512, 256, false, 1.0 / 16.0);
    let (q, k, v) = inputs(&p);
    let d_o = q.mapv(|x| -x);
    let t = Instant::now();
    let g = gradients_f64(&p, q.view(), k.view(), v.view(), d_o.view());
    let t64 = t.elapsed();
    let t = Instant::now();
    let l = gradients_low_precision(&p, Precision::F16, q.view(), k.view(), v.view(), d_o.view());
    let tlp = t.elapsed();
    assert_eq!(g.dq.shape(), l.dq.shape());
    println!("backward (4,16:4,512,512,256): f64 {t64:?}, low precision {tlp:?}");
}
