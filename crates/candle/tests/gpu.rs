//! candle-flash-attn-style tests of every function against a float32 candle reference
//! (matmul-softmax on the CPU, from the same rounded inputs), over dtypes, causal, windows,
//! softcap, ALiBi, strided views, varlen, paged, the KV cache (16-bit and fp8) and the fp8
//! forward. They need the `cuda` feature and a CUDA device, and skip with a message otherwise.

#[cfg(not(feature = "cuda"))]
#[test]
fn gpu_tests_skipped_without_cuda_feature() {
    eprintln!(
        "flashcore-candle GPU tests skipped: built without the `cuda` feature \
         (run `cargo test -p flashcore-candle --features cuda` on a machine with a GPU)"
    );
}

#[cfg(feature = "cuda")]
mod gpu {
    use fc::candle::{DType, Device, Result, Tensor};
    use flashcore_candle as fc;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    fn device() -> Option<Device> {
        match Device::new_cuda(0) {
            Ok(d) => Some(d),
            Err(e) => {
                eprintln!("flashcore-candle GPU test skipped: no CUDA device ({e})");
                None
            }
        }
    }

    fn randn(rng: &mut StdRng, shape: &[usize], scale: f32) -> Vec<f32> {
        let n: usize = shape.iter().product();
        (0..n)
            .map(|_| {
                // Box-Muller
                let (u, v): (f32, f32) = (rng.gen_range(1e-7..1.0), rng.gen());
                scale * (-2.0 * u.ln()).sqrt() * (2.0 * std::f32::consts::PI * v).cos()
            })
            .collect()
    }

    fn tensor(
        rng: &mut StdRng,
        shape: &[usize],
        scale: f32,
        dtype: DType,
        dev: &Device,
    ) -> Result<Tensor> {
        Tensor::from_vec(randn(rng, shape, scale), shape, dev)?.to_dtype(dtype)
    }

    /// What masks and modifies the logits, in FlashAttention's terms (docs/MODES.md).
    #[derive(Clone, Debug, Default)]
    struct Spec {
        scale: f32,
        window_left: Option<usize>,
        window_right: Option<usize>,
        softcap: Option<f32>,
        slopes: Option<Vec<f32>>,
        /// mm_prefix_ranges of the sequence: `[start, end)` pairs, unused where start >= end.
        ranges: Vec<(i64, i64)>,
    }

    /// candle-flash-attn's window arguments as the reference sees them: a size larger than the
    /// key length counts as none; `(None, Some(0))` is causal.
    fn spec(
        scale: f32,
        left: Option<usize>,
        right: Option<usize>,
        seqlen_k: usize,
        softcap: Option<f32>,
        slopes: Option<Vec<f32>>,
    ) -> Spec {
        Spec {
            scale,
            window_left: left.filter(|&w| w <= seqlen_k),
            window_right: right.filter(|&w| w <= seqlen_k),
            softcap: softcap.filter(|&c| c > 0.0),
            slopes,
            ranges: Vec::new(),
        }
    }

    /// One sequence: q `(sq, hq, d)`, k/v `(sk, hkv, d)` f32 on the CPU; returns `(sq, hq, d)`.
    fn reference(q: &Tensor, k: &Tensor, v: &Tensor, s: &Spec) -> Result<Vec<f32>> {
        let (sq, hq, d) = q.dims3()?;
        let (sk, hkv, _) = k.dims3()?;
        let g = hq / hkv;
        let rep = |t: &Tensor| -> Result<Tensor> {
            t.transpose(0, 1)?
                .unsqueeze(1)?
                .expand((hkv, g, sk, d))?
                .reshape((hq, sk, d))
        };
        let (kr, vr) = (rep(k)?, rep(v)?);
        let qh = q.transpose(0, 1)?.contiguous()?;
        let mut scores = (qh.matmul(&kr.t()?)? * s.scale as f64)?;
        if let Some(c) = s.softcap {
            scores = ((scores / c as f64)?.tanh()? * c as f64)?;
        }
        let off = sk as i64 - sq as i64;
        let mut bias = vec![0f32; hq * sq * sk];
        let mut visible_row = vec![false; hq * sq];
        for h in 0..hq {
            for i in 0..sq {
                for j in 0..sk {
                    let (i, j) = (i as i64, j as i64);
                    let diag = i + off;
                    let in_range = s.ranges.iter().any(|&(start, end)| {
                        start < end && (start..end).contains(&diag) && (start..end).contains(&j)
                    });
                    let ok = in_range
                        || (s.window_left.is_none_or(|w| j >= diag - w as i64)
                            && s.window_right.is_none_or(|w| j <= diag + w as i64));
                    let idx = (h * sq + i as usize) * sk + j as usize;
                    bias[idx] = if !ok {
                        f32::NEG_INFINITY
                    } else {
                        visible_row[h * sq + i as usize] = true;
                        match &s.slopes {
                            Some(sl) => -sl[h] * (diag - j).abs() as f32,
                            None => 0.0,
                        }
                    };
                }
            }
        }
        let bias = Tensor::from_vec(bias, (hq, sq, sk), &Device::Cpu)?;
        let p = candle_nn::ops::softmax_last_dim(&(scores + bias)?)?;
        let o = p.matmul(&vr)?.transpose(0, 1)?.contiguous()?; // (sq, hq, d)
        let mut o = o.flatten_all()?.to_vec1::<f32>()?;
        for i in 0..sq {
            for h in 0..hq {
                if !visible_row[h * sq + i] {
                    o[(i * hq + h) * d..][..d].fill(0.0);
                }
            }
        }
        Ok(o)
    }

    fn cpu32(t: &Tensor) -> Result<Tensor> {
        // Converted on the host: on the H200 (2026-11-29) candle-kernels had no CUDA cast from
        // F8E4M3 ("named symbol not found"), and the host's conversion is exact anyway.
        t.to_device(&Device::Cpu)?.to_dtype(DType::F32)
    }

    fn tolerance(dtype: DType) -> f32 {
        match dtype {
            DType::BF16 => 3e-2,
            _ => 1e-2,
        }
    }

    fn compare(what: &str, got: &Tensor, want: &[f32], dtype: DType) -> Result<()> {
        let got = host(got)?;
        assert_eq!(got.len(), want.len(), "{what}: length");
        let (mut worst, mut at) = (0f32, 0);
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            let e = (g - w).abs();
            if e.is_nan() || e > worst {
                worst = if e.is_nan() { f32::INFINITY } else { e };
                at = i;
            }
        }
        let tol = tolerance(dtype);
        assert!(
            worst <= tol,
            "{what}: max |flashcore - reference| = {worst} at {at} (got {}, want {}), tolerance {tol}",
            got[at],
            want[at]
        );
        Ok(())
    }

    /// Reference for batched `(b, s, h, d)` tensors.
    fn reference_batched(q: &Tensor, k: &Tensor, v: &Tensor, s: &Spec) -> Result<Vec<f32>> {
        let (q, k, v) = (cpu32(q)?, cpu32(k)?, cpu32(v)?);
        let mut out = Vec::new();
        for b in 0..q.dim(0)? {
            out.extend(reference(&q.get(b)?, &k.get(b)?, &v.get(b)?, s)?);
        }
        Ok(out)
    }

    const DTYPES: [DType; 2] = [DType::F16, DType::BF16];
    // (batch, seq_q, seq_k, heads_q, heads_kv, head_dim)
    const SHAPES: [(usize, usize, usize, usize, usize, usize); 4] = [
        (2, 37, 37, 4, 4, 64),
        (1, 20, 53, 8, 2, 128),
        (2, 1, 70, 4, 1, 64),
        (1, 65, 65, 2, 2, 32),
    ];

    #[test]
    fn flash_attn_causal_and_not() -> Result<()> {
        let Some(dev) = device() else { return Ok(()) };
        let mut rng = StdRng::seed_from_u64(1);
        for dtype in DTYPES {
            for (b, sq, sk, hq, hkv, d) in SHAPES {
                let q = tensor(&mut rng, &[b, sq, hq, d], 1.0, dtype, &dev)?;
                let k = tensor(&mut rng, &[b, sk, hkv, d], 1.0, dtype, &dev)?;
                let v = tensor(&mut rng, &[b, sk, hkv, d], 1.0, dtype, &dev)?;
                let scale = 1.0 / (d as f32).sqrt();
                for causal in [false, true] {
                    let got = fc::flash_attn(&q, &k, &v, scale, causal)?;
                    assert_eq!(got.dims(), q.dims());
                    assert_eq!(got.dtype(), dtype);
                    let right = causal.then_some(0);
                    let want =
                        reference_batched(&q, &k, &v, &spec(scale, None, right, sk, None, None))?;
                    compare(
                        &format!(
                            "flash_attn {dtype:?} {:?} causal={causal}",
                            (b, sq, sk, hq, hkv, d)
                        ),
                        &got,
                        &want,
                        dtype,
                    )?;
                }
            }
        }
        Ok(())
    }

    #[test]
    fn flash_attn_windowed_alibi_softcap() -> Result<()> {
        let Some(dev) = device() else { return Ok(()) };
        let mut rng = StdRng::seed_from_u64(2);
        let windows = [
            (Some(8), Some(0)),
            (Some(5), Some(3)),
            (None, Some(2)),
            (Some(10), None),
            (Some(1000), Some(0)), // larger than seq_k: plain causal
        ];
        for dtype in DTYPES {
            for (b, sq, sk, hq, hkv, d) in SHAPES {
                let q = tensor(&mut rng, &[b, sq, hq, d], 1.0, dtype, &dev)?;
                let k = tensor(&mut rng, &[b, sk, hkv, d], 1.0, dtype, &dev)?;
                let v = tensor(&mut rng, &[b, sk, hkv, d], 1.0, dtype, &dev)?;
                let slopes: Vec<f32> = (0..hq).map(|h| 0.5f32.powi(h as i32 + 1)).collect();
                let alibi = Tensor::from_vec(slopes.clone(), hq, &dev)?;
                let scale = 1.0 / (d as f32).sqrt();
                let tag = format!("{dtype:?} {:?}", (b, sq, sk, hq, hkv, d));
                for (l, r) in windows {
                    let got = fc::flash_attn_windowed(&q, &k, &v, scale, l, r)?;
                    let want = reference_batched(&q, &k, &v, &spec(scale, l, r, sk, None, None))?;
                    compare(&format!("windowed {tag} {l:?} {r:?}"), &got, &want, dtype)?;

                    let got = fc::flash_attn_alibi_windowed(&q, &k, &v, &alibi, scale, l, r)?;
                    let s = spec(scale, l, r, sk, None, Some(slopes.clone()));
                    let want = reference_batched(&q, &k, &v, &s)?;
                    compare(
                        &format!("alibi_windowed {tag} {l:?} {r:?}"),
                        &got,
                        &want,
                        dtype,
                    )?;

                    for (alibi_arg, sl) in [(None, None), (Some(&alibi), Some(slopes.clone()))] {
                        let got = fc::flash_attn_alibi_windowed_softcap(
                            &q, &k, &v, alibi_arg, scale, l, r, 0.5,
                        )?;
                        let want =
                            reference_batched(&q, &k, &v, &spec(scale, l, r, sk, Some(0.5), sl))?;
                        compare(&format!("softcap {tag} {l:?} {r:?}"), &got, &want, dtype)?;
                    }
                }
                for causal in [false, true] {
                    let got = fc::flash_attn_alibi(&q, &k, &v, &alibi, scale, causal)?;
                    let right = causal.then_some(0);
                    let s = spec(scale, None, right, sk, None, Some(slopes.clone()));
                    let want = reference_batched(&q, &k, &v, &s)?;
                    compare(&format!("alibi {tag} causal={causal}"), &got, &want, dtype)?;
                }
            }
        }
        Ok(())
    }

    #[test]
    fn strided_views() -> Result<()> {
        let Some(dev) = device() else { return Ok(()) };
        let mut rng = StdRng::seed_from_u64(3);
        let (b, s, h, d) = (2, 33, 4, 64);
        for dtype in DTYPES {
            // q, k, v as head slices of one packed qkv tensor (b, s, 3h, d).
            let qkv = tensor(&mut rng, &[b, s, 3 * h, d], 1.0, dtype, &dev)?;
            let (q, k, v) = (
                qkv.narrow(2, 0, h)?,
                qkv.narrow(2, h, h)?,
                qkv.narrow(2, 2 * h, h)?,
            );
            assert!(!q.is_contiguous());
            let got = fc::flash_attn(&q, &k, &v, 0.125, true)?;
            let want = reference_batched(&q, &k, &v, &spec(0.125, None, Some(0), s, None, None))?;
            compare(&format!("qkv views {dtype:?}"), &got, &want, dtype)?;
            // (b, h, s, d) tensors transposed to (b, s, h, d).
            let t = |rng: &mut StdRng| -> Result<Tensor> {
                tensor(rng, &[b, h, s, d], 1.0, dtype, &dev)?.transpose(1, 2)
            };
            let (q, k, v) = (t(&mut rng)?, t(&mut rng)?, t(&mut rng)?);
            let got = fc::flash_attn(&q, &k, &v, 0.125, false)?;
            let want = reference_batched(&q, &k, &v, &spec(0.125, None, None, s, None, None))?;
            compare(&format!("transposed {dtype:?}"), &got, &want, dtype)?;
            // A head dim that is not contiguous is refused, not computed wrongly.
            let bad = tensor(&mut rng, &[b, s, d, h], 1.0, dtype, &dev)?.transpose(2, 3)?;
            let err = fc::flash_attn(&bad, &bad, &bad, 0.125, false).unwrap_err();
            assert!(err.to_string().contains("contiguous"), "{err}");
        }
        Ok(())
    }

    #[test]
    fn refusals() -> Result<()> {
        let Some(dev) = device() else { return Ok(()) };
        let q = Tensor::zeros((1, 4, 2, 64), DType::F32, &dev)?;
        let err = fc::flash_attn(&q, &q, &q, 0.125, false).unwrap_err();
        assert!(err.to_string().contains("f16/bf16"), "{err}");
        let h = q.to_dtype(DType::F16)?;
        let b = q.to_dtype(DType::BF16)?;
        assert!(fc::flash_attn(&h, &b, &h, 0.125, false).is_err());
        Ok(())
    }

    /// Packed `(total, h, d)` tensors split by cumulative lengths.
    fn split(t: &Tensor, cu: &[u32]) -> Result<Vec<Tensor>> {
        cu.windows(2)
            .map(|w| t.narrow(0, w[0] as usize, (w[1] - w[0]) as usize))
            .collect()
    }

    #[test]
    fn varlen_all_variants() -> Result<()> {
        let Some(dev) = device() else { return Ok(()) };
        let mut rng = StdRng::seed_from_u64(4);
        let cu_q: Vec<u32> = vec![0, 5, 17, 40, 41];
        let cu_k: Vec<u32> = vec![0, 9, 20, 50, 90];
        let (max_q, max_k) = (23, 40);
        let (hq, hkv, d) = (8, 2, 64);
        let seqlens_q = Tensor::new(cu_q.as_slice(), &dev)?;
        let seqlens_k = Tensor::new(cu_k.as_slice(), &dev)?;
        let slopes: Vec<f32> = (0..hq).map(|h| 0.3f32.powi(h as i32 + 1)).collect();
        let alibi = Tensor::from_vec(slopes.clone(), hq, &dev)?;
        for dtype in DTYPES {
            let q = tensor(&mut rng, &[41, hq, d], 1.0, dtype, &dev)?;
            let k = tensor(&mut rng, &[90, hkv, d], 1.0, dtype, &dev)?;
            let v = tensor(&mut rng, &[90, hkv, d], 1.0, dtype, &dev)?;
            let (qc, kc, vc) = (cpu32(&q)?, cpu32(&k)?, cpu32(&v)?);
            let (qs, ks, vs) = (split(&qc, &cu_q)?, split(&kc, &cu_k)?, split(&vc, &cu_k)?);
            let want = |l: Option<usize>,
                        r: Option<usize>,
                        cap: Option<f32>,
                        sl: Option<Vec<f32>>|
             -> Result<Vec<f32>> {
                let mut out = Vec::new();
                for i in 0..qs.len() {
                    out.extend(reference(
                        &qs[i],
                        &ks[i],
                        &vs[i],
                        &spec(0.125, l, r, max_k, cap, sl.clone()),
                    )?);
                }
                Ok(out)
            };
            let tag = format!("varlen {dtype:?}");
            for causal in [false, true] {
                let r = causal.then_some(0);
                let got = fc::flash_attn_varlen(
                    &q, &k, &v, &seqlens_q, &seqlens_k, max_q, max_k, 0.125, causal,
                )?;
                compare(
                    &format!("{tag} causal={causal}"),
                    &got,
                    &want(None, r, None, None)?,
                    dtype,
                )?;
                let got = fc::flash_attn_varlen_alibi(
                    &q, &k, &v, &alibi, &seqlens_q, &seqlens_k, max_q, max_k, 0.125, causal,
                )?;
                compare(
                    &format!("{tag} alibi causal={causal}"),
                    &got,
                    &want(None, r, None, Some(slopes.clone()))?,
                    dtype,
                )?;
            }
            for (l, r) in [(Some(4), Some(0)), (Some(6), Some(2)), (None, Some(1))] {
                let got = fc::flash_attn_varlen_windowed(
                    &q, &k, &v, &seqlens_q, &seqlens_k, max_q, max_k, 0.125, l, r,
                )?;
                compare(
                    &format!("{tag} window {l:?} {r:?}"),
                    &got,
                    &want(l, r, None, None)?,
                    dtype,
                )?;
                let got = fc::flash_attn_varlen_alibi_windowed(
                    &q, &k, &v, &alibi, &seqlens_q, &seqlens_k, max_q, max_k, 0.125, l, r,
                )?;
                compare(
                    &format!("{tag} alibi window {l:?} {r:?}"),
                    &got,
                    &want(l, r, None, Some(slopes.clone()))?,
                    dtype,
                )?;
                let got = fc::flash_attn_varlen_alibi_windowed_softcap(
                    &q,
                    &k,
                    &v,
                    Some(&alibi),
                    &seqlens_q,
                    &seqlens_k,
                    max_q,
                    max_k,
                    0.125,
                    l,
                    r,
                    0.7,
                )?;
                compare(
                    &format!("{tag} alibi softcap window {l:?} {r:?}"),
                    &got,
                    &want(l, r, Some(0.7), Some(slopes.clone()))?,
                    dtype,
                )?;
            }
        }
        Ok(())
    }

    #[test]
    fn varlen_paged() -> Result<()> {
        let Some(dev) = device() else { return Ok(()) };
        let mut rng = StdRng::seed_from_u64(5);
        let (hq, hkv, d, page) = (4, 2, 128, 32);
        let cu_q: Vec<u32> = vec![0, 3, 4, 20];
        let cu_k: Vec<u32> = vec![0, 40, 41, 141];
        let (max_q, max_k) = (16, 100);
        let max_blocks = 4;
        let num_blocks = 14;
        // A shuffled block table: sequence b's block j is table[b][j].
        let mut ids: Vec<u32> = (0..num_blocks as u32).collect();
        for i in (1..ids.len()).rev() {
            ids.swap(i, rng.gen_range(0..=i));
        }
        let table: Vec<u32> = ids[..3 * max_blocks].to_vec();
        let block_table = Tensor::from_vec(table.clone(), (3, max_blocks), &dev)?;
        let seqlens_q = Tensor::new(cu_q.as_slice(), &dev)?;
        let seqlens_k = Tensor::new(cu_k.as_slice(), &dev)?;
        for dtype in DTYPES {
            let q = tensor(&mut rng, &[20, hq, d], 1.0, dtype, &dev)?;
            let kp = tensor(&mut rng, &[num_blocks, page, hkv, d], 1.0, dtype, &dev)?;
            let vp = tensor(&mut rng, &[num_blocks, page, hkv, d], 1.0, dtype, &dev)?;
            let (qc, kpc, vpc) = (cpu32(&q)?, cpu32(&kp)?, cpu32(&vp)?);
            let qs = split(&qc, &cu_q)?;
            let gather = |pages: &Tensor, b: usize, len: usize| -> Result<Tensor> {
                let rows: Vec<Tensor> = (0..max_blocks)
                    .map(|j| pages.get(table[b * max_blocks + j] as usize))
                    .collect::<Result<_>>()?;
                Tensor::cat(&rows, 0)?.narrow(0, 0, len)
            };
            // Every sequence's reference, through its own pages, with its own spec.
            let want_of = |spec_of: &dyn Fn(usize) -> Spec| -> Result<Vec<f32>> {
                let mut want = Vec::new();
                for b in 0..3 {
                    let len = (cu_k[b + 1] - cu_k[b]) as usize;
                    let (kb, vb) = (gather(&kpc, b, len)?, gather(&vpc, b, len)?);
                    want.extend(reference(&qs[b], &kb, &vb, &spec_of(b))?);
                }
                Ok(want)
            };
            let paged = |ranges: Option<&Tensor>, l, r, cap| {
                fc::flash_attn_varlen_paged_windowed(
                    &q,
                    &kp,
                    &vp,
                    &seqlens_q,
                    &seqlens_k,
                    &block_table,
                    ranges,
                    max_q,
                    max_k,
                    0.125,
                    l,
                    r,
                    page,
                    cap,
                )
            };
            for (l, r, cap) in [
                (None, None, None),
                (None, Some(0), None),
                (Some(7), Some(0), Some(0.6)),
                (Some(20), Some(5), None),
            ] {
                let got = paged(None, l, r, cap)?;
                let want = want_of(&|_| spec(0.125, l, r, max_k, cap, None))?;
                compare(
                    &format!("paged {dtype:?} {l:?} {r:?} softcap {cap:?}"),
                    &got,
                    &want,
                    dtype,
                )?;
            }
            // mm_prefix_ranges reach the core: [start, end) key positions per sequence, which a
            // query inside a range sees whatever the causal mask and the window say. Sequence 0
            // (3 queries at 37..40 over 40 keys) reaches past its diagonal, sequence 1 has an
            // unused pair, sequence 2 (queries at 84..100) has overlapping ranges that also reach
            // past the left window.
            let ranges: [[(i32, i32); 2]; 3] =
                [[(30, 45), (0, 0)], [(0, 1), (5, 2)], [(80, 96), (90, 92)]];
            let flat: Vec<i32> = ranges.iter().flatten().flat_map(|&(a, b)| [a, b]).collect();
            let mm = Tensor::from_vec(flat, (3, 2, 2), &dev)?;
            let paged_with = |r: &Tensor, l: Option<usize>| paged(Some(r), l, Some(0), None);
            // Until a compiled-in generation takes the ranges, the core refuses them by name.
            let taken = flashcore::kernels()
                .iter()
                .any(|k| k.capabilities().modes.mm_prefix);
            for l in [None, Some(7)] {
                let got = paged_with(&mm, l);
                if !taken {
                    let err = got.unwrap_err().to_string();
                    assert!(err.contains("mm_prefix_ranges"), "{err}");
                    continue;
                }
                let got = got?;
                let want = want_of(&|b| {
                    let mut s = spec(0.125, l, Some(0), max_k, None, None);
                    s.ranges = ranges[b]
                        .iter()
                        .map(|&(a, e)| (a as i64, e as i64))
                        .collect();
                    s
                })?;
                compare(
                    &format!("paged {dtype:?} mm_prefix_ranges left {l:?}"),
                    &got,
                    &want,
                    dtype,
                )?;
            }
            // An empty table masks nothing more, as in candle-flash-attn: plain causal. (A view,
            // not a new tensor: CUDA allocates no zero-byte buffers.)
            let got = paged_with(&mm.narrow(1, 0, 0)?, None)?;
            let want = want_of(&|_| spec(0.125, None, Some(0), max_k, None, None))?;
            compare(
                &format!("paged {dtype:?} empty mm_prefix_ranges"),
                &got,
                &want,
                dtype,
            )?;
            // candle-flash-attn's rules: i32 only, (batch, max_ranges, 2).
            let err = paged_with(&Tensor::zeros((3, 2, 2), DType::U32, &dev)?, None).unwrap_err();
            assert!(
                err.to_string().contains("mm_prefix_ranges must be i32"),
                "{err}"
            );
            let err = paged_with(&mm.narrow(0, 0, 2)?, None).unwrap_err();
            assert!(
                err.to_string()
                    .contains("mm_prefix_ranges shape must be (3, max_ranges, 2)"),
                "{err}"
            );
        }
        Ok(())
    }

    #[test]
    fn kvcache_append_contiguous_and_paged() -> Result<()> {
        let Some(dev) = device() else { return Ok(()) };
        let mut rng = StdRng::seed_from_u64(6);
        let (b, hq, hkv, d, cap) = (2, 8, 2, 64, 128);
        let used: Vec<u32> = vec![10, 77];
        let seqused_k = Tensor::new(used.as_slice(), &dev)?;
        for dtype in DTYPES {
            for s_new in [0usize, 1, 3] {
                let k_cache = tensor(&mut rng, &[b, cap, hkv, d], 1.0, dtype, &dev)?;
                let v_cache = tensor(&mut rng, &[b, cap, hkv, d], 1.0, dtype, &dev)?;
                let q = tensor(&mut rng, &[b, s_new.max(1), hq, d], 1.0, dtype, &dev)?;
                // No empty k_new/v_new for s_new = 0: candle cannot allocate a zero-sized CUDA
                // tensor (cuMemAlloc of 0 bytes is CUDA_ERROR_INVALID_VALUE on the H100, commit
                // 8e61095).
                let rows = s_new.max(1);
                let k_new = tensor(&mut rng, &[b, rows, hkv, d], 1.0, dtype, &dev)?;
                let v_new = tensor(&mut rng, &[b, rows, hkv, d], 1.0, dtype, &dev)?;
                let (kn, vn) = if s_new > 0 {
                    (Some(&k_new), Some(&v_new))
                } else {
                    (None, None)
                };
                // Expected cache contents after the append, from host copies taken before.
                let (kc0, vc0) = (cpu32(&k_cache)?, cpu32(&v_cache)?);
                let got = fc::flash_attn_with_kvcache(
                    &q,
                    &k_cache,
                    &v_cache,
                    kn,
                    vn,
                    &seqused_k,
                    None,
                    None,
                    0.125,
                    None,
                    Some(0),
                    None,
                )?;
                let (qc, knc, vnc) = (cpu32(&q)?, cpu32(&k_new)?, cpu32(&v_new)?);
                let mut want = Vec::new();
                for (i, &u) in used.iter().enumerate() {
                    let u = u as usize;
                    let cat = |c: &Tensor, n: &Tensor| -> Result<Tensor> {
                        let cached = c.get(i)?.narrow(0, 0, u)?;
                        if s_new == 0 {
                            return Ok(cached); // k_new/v_new hold a placeholder row, not passed
                        }
                        Tensor::cat(&[cached, n.get(i)?], 0)
                    };
                    let (kb, vb) = (cat(&kc0, &knc)?, cat(&vc0, &vnc)?);
                    want.extend(reference(
                        &qc.get(i)?,
                        &kb,
                        &vb,
                        &spec(0.125, None, Some(0), cap, None, None),
                    )?);
                    if s_new > 0 {
                        // The new rows are now in the cache at seqused_k[b].
                        let written = cpu32(&k_cache)?.get(i)?.narrow(0, u, s_new)?;
                        let diff = (written - knc.get(i)?)?
                            .abs()?
                            .max_all()?
                            .to_scalar::<f32>()?;
                        assert_eq!(diff, 0.0, "k_new written into the cache");
                    }
                }
                compare(
                    &format!("kvcache {dtype:?} s_new={s_new}"),
                    &got,
                    &want,
                    dtype,
                )?;
            }
            // Paged cache, no append, GQA, sliding window.
            let (page, blocks) = (64, 6);
            let kp = tensor(&mut rng, &[blocks, page, hkv, d], 1.0, dtype, &dev)?;
            let vp = tensor(&mut rng, &[blocks, page, hkv, d], 1.0, dtype, &dev)?;
            let table: Vec<u32> = vec![5, 0, 3, 1, 2, 4];
            let block_table = Tensor::from_vec(table.clone(), (2, 3), &dev)?;
            let q = tensor(&mut rng, &[b, 1, hq, d], 1.0, dtype, &dev)?;
            let got = fc::flash_attn_with_kvcache(
                &q,
                &kp,
                &vp,
                None,
                None,
                &seqused_k,
                Some(&block_table),
                None,
                0.125,
                Some(16),
                Some(0),
                None,
            )?;
            let (kpc, vpc, qc) = (cpu32(&kp)?, cpu32(&vp)?, cpu32(&q)?);
            let mut want = Vec::new();
            for i in 0..b {
                let g = |p: &Tensor| -> Result<Tensor> {
                    let rows: Vec<Tensor> = (0..3)
                        .map(|j| p.get(table[i * 3 + j] as usize))
                        .collect::<Result<_>>()?;
                    Tensor::cat(&rows, 0)?.narrow(0, 0, used[i] as usize)
                };
                want.extend(reference(
                    &qc.get(i)?,
                    &g(&kpc)?,
                    &g(&vpc)?,
                    &spec(0.125, Some(16), Some(0), 3 * page, None, None),
                )?);
            }
            compare(&format!("kvcache paged {dtype:?}"), &got, &want, dtype)?;
        }
        Ok(())
    }

    // ---- fp8 (F8E4M3) KV caches with FlashAttention 3's k_descale / v_descale ----

    /// Stored e4m3 values (unscaled) of a cache or pool of `shape`, on `dev`, from randn draws.
    fn e4m3(rng: &mut StdRng, shape: &[usize], dev: &Device) -> Result<Tensor> {
        // Drawn and converted to e4m3 on the host, then moved to `dev`.
        tensor(rng, shape, 1.0, DType::F8E4M3, &Device::Cpu)?.to_device(dev)
    }

    /// A tensor's values as f32 on the host (exact for e4m3 and 16-bit floats).
    fn host(t: &Tensor) -> Result<Vec<f32>> {
        cpu32(t)?.flatten_all()?.to_vec1::<f32>()
    }

    /// An fp8 cache (contiguous or paged), with and without rows to append, for both dtypes:
    /// the cache afterwards holds exactly the appended rows quantized as `value / descale`
    /// rounded to nearest even (candle's CPU conversion, float8's port of CUDA's, and the
    /// kernel's `cvt.rn.satfinite` after an IEEE division agree on every byte while no value nears
    /// 448), every other byte unchanged, and the output matches the f32 reference on the
    /// dequantized cache (`e4m3 value · descale[b, h_kv]`).
    #[test]
    fn kvcache_e4m3_against_dequantized_reference() -> Result<()> {
        let Some(dev) = device() else { return Ok(()) };
        let mut rng = StdRng::seed_from_u64(8);
        let (b, hq, hkv, d, cap, page) = (2, 8, 2, 128, 256, 64);
        let bps = cap / page; // blocks per sequence
        let used: Vec<u32> = vec![10, 200];
        let seqused_k = Tensor::new(used.as_slice(), &dev)?;
        // Sequence b's blocks in a shuffled pool with one spare block (8).
        let table: Vec<u32> = vec![7, 0, 5, 2, 1, 6, 3, 4];
        let block_table = Tensor::from_vec(table.clone(), (b, bps), &dev)?;
        for dtype in DTYPES {
            for (paged, s_new) in [(false, 0usize), (false, 3), (true, 1)] {
                // Factors per (sequence, KV head) in [0.25, 1.75): randn rows divided by them
                // stay far below e4m3's 448.
                let mut factors = || -> Vec<f32> {
                    (0..b * hkv)
                        .map(|_| 0.25 + 1.5 * rng.gen::<f32>())
                        .collect()
                };
                let (kd, vd) = (factors(), factors());
                let k_descale = Tensor::from_vec(kd.clone(), (b, hkv), &dev)?;
                let v_descale = Tensor::from_vec(vd.clone(), (b, hkv), &dev)?;
                let shape = if paged {
                    [b * bps + 1, page, hkv, d]
                } else {
                    [b, cap, hkv, d]
                };
                let k_cache = e4m3(&mut rng, &shape, &dev)?;
                let v_cache = e4m3(&mut rng, &shape, &dev)?;
                // The flat index of (sequence, logical row, KV head, column).
                let at = |i: usize, row: usize, h: usize, j: usize| {
                    let (block, off) = if paged {
                        (table[i * bps + row / page] as usize, row % page)
                    } else {
                        (i, row)
                    };
                    ((block * shape[1] + off) * hkv + h) * d + j
                };
                let q = tensor(&mut rng, &[b, s_new.max(1), hq, d], 1.0, dtype, &dev)?;
                // No empty k_new/v_new for s_new = 0 (candle allocates no zero-sized CUDA
                // tensor): a placeholder row, not passed.
                let rows = s_new.max(1);
                let k_new = tensor(&mut rng, &[b, rows, hkv, d], 1.0, dtype, &dev)?;
                let v_new = tensor(&mut rng, &[b, rows, hkv, d], 1.0, dtype, &dev)?;
                let (kn, vn) = if s_new > 0 {
                    (Some(&k_new), Some(&v_new))
                } else {
                    (None, None)
                };
                let (mut k_want, mut v_want) = (host(&k_cache)?, host(&v_cache)?);
                let got = fc::flash_attn_with_kvcache_fp8(
                    &q,
                    &k_cache,
                    &v_cache,
                    kn,
                    vn,
                    &seqused_k,
                    paged.then_some(&block_table),
                    None,
                    Some(&k_descale),
                    Some(&v_descale),
                    0.125,
                    None,
                    Some(0),
                    None,
                )?;
                assert_eq!((got.dims(), got.dtype()), (q.dims(), dtype));
                // The appended rows as the append quantizes them, on the host.
                let quantized = |t: &Tensor, f: &[f32]| -> Result<Vec<f32>> {
                    let f = Tensor::from_vec(f.to_vec(), (b, 1, hkv, 1), &Device::Cpu)?;
                    host(&cpu32(t)?.broadcast_div(&f)?.to_dtype(DType::F8E4M3)?)
                };
                if s_new > 0 {
                    for (want, rows_q) in [
                        (&mut k_want, quantized(&k_new, &kd)?),
                        (&mut v_want, quantized(&v_new, &vd)?),
                    ] {
                        for (i, &u) in used.iter().enumerate() {
                            for t in 0..s_new {
                                for h in 0..hkv {
                                    for j in 0..d {
                                        want[at(i, u as usize + t, h, j)] =
                                            rows_q[((i * s_new + t) * hkv + h) * d + j];
                                    }
                                }
                            }
                        }
                    }
                }
                for (name, cache, want) in [
                    ("k_cache", &k_cache, &k_want),
                    ("v_cache", &v_cache, &v_want),
                ] {
                    let now = host(cache)?;
                    let differ = now
                        .iter()
                        .zip(want.iter())
                        .filter(|(a, b)| a.to_bits() != b.to_bits())
                        .count();
                    assert_eq!(differ, 0, "{name} {dtype:?} paged={paged} s_new={s_new}");
                }
                // The reference on the dequantized cache, sequence by sequence.
                let qc = cpu32(&q)?;
                let mut want = Vec::new();
                for (i, &u) in used.iter().enumerate() {
                    let len = u as usize + s_new;
                    let rows_of = |cache: &[f32], f: &[f32]| -> Result<Tensor> {
                        let mut out = Vec::with_capacity(len * hkv * d);
                        for row in 0..len {
                            for h in 0..hkv {
                                for j in 0..d {
                                    out.push(cache[at(i, row, h, j)] * f[i * hkv + h]);
                                }
                            }
                        }
                        Tensor::from_vec(out, (len, hkv, d), &Device::Cpu)
                    };
                    want.extend(reference(
                        &qc.get(i)?,
                        &rows_of(&k_want, &kd)?,
                        &rows_of(&v_want, &vd)?,
                        &spec(0.125, None, Some(0), cap, None, None),
                    )?);
                }
                compare(
                    &format!("kvcache e4m3 {dtype:?} paged={paged} s_new={s_new}"),
                    &got,
                    &want,
                    dtype,
                )?;
            }
        }
        Ok(())
    }

    /// Bad mixes are candle errors before anything runs (the rules' own tests are the crate's
    /// CPU unit tests); a descale on the host is named.
    #[test]
    fn kvcache_e4m3_refusals() -> Result<()> {
        let Some(dev) = device() else { return Ok(()) };
        let mut rng = StdRng::seed_from_u64(9);
        let q = tensor(&mut rng, &[1, 1, 4, 64], 1.0, DType::BF16, &dev)?;
        let cache = e4m3(&mut rng, &[1, 64, 2, 64], &dev)?;
        let half = tensor(&mut rng, &[1, 64, 2, 64], 1.0, DType::BF16, &dev)?;
        let used = Tensor::new(&[5u32], &dev)?;
        let ones = Tensor::ones((1, 2), DType::F32, &dev)?;
        let call = |k: &Tensor, v: &Tensor, kd: Option<&Tensor>| {
            fc::flash_attn_with_kvcache_fp8(
                &q, k, v, None, None, &used, None, None, kd, kd, 0.125, None, None, None,
            )
        };
        let msg = |r: Result<Tensor>| r.unwrap_err().to_string();
        assert!(msg(call(&cache, &half, None)).contains("must both be e4m3"));
        assert!(msg(call(&half, &half, Some(&ones))).contains("not e4m3"));
        let on_host = Tensor::ones((1, 2), DType::F32, &Device::Cpu)?;
        assert!(msg(call(&cache, &cache, Some(&on_host))).contains("k_descale"));
        // The same call with its descales on the device runs.
        call(&cache, &cache, Some(&ones))?;
        call(&cache, &cache, None)?;
        Ok(())
    }

    // ---- fp8 (F8E4M3) forward: e4m3 Q, K and V with q/k/v descales, O in bf16 ----

    /// Stored e4m3 values on the host (candle's CPU conversion of randn draws), for the
    /// reference, and the same bytes on `dev`.
    fn e4m3_pair(rng: &mut StdRng, shape: &[usize], dev: &Device) -> Result<(Tensor, Tensor)> {
        let t = tensor(rng, shape, 1.0, DType::F8E4M3, &Device::Cpu)?;
        Ok((t.to_dtype(DType::F32)?, t.to_device(dev)?))
    }

    /// `x` `(b, s, h, d)` f32 on the host times the descale of its (sequence, KV head), from
    /// `f` `(b, hkv)` (a query head `h` reads KV head `h / (h_x / hkv)`'s factor).
    fn dequantize(x: &Tensor, f: &[f32], hkv: usize) -> Result<Tensor> {
        let (b, s, h, d) = x.dims4()?;
        let f = Tensor::from_vec(f.to_vec(), (b, 1, hkv, 1, 1), &Device::Cpu)?;
        x.reshape((b, s, hkv, h / hkv, d))?
            .broadcast_mul(&f)?
            .reshape((b, s, h, d))
    }

    /// `flash_attn_fp8` at (2, 300, 4 q heads, 2 KV heads, 128), causal and not, over every
    /// descale layout, against the f32 reference on the dequantized values (each e4m3 value times
    /// its factor; the factors powers of two, so dequantizing is exact). The bar is
    /// max |O - ref| ≤ 0.05 · max |ref| + 0.01: Q, K and V are the reference's own values, but
    /// the kernel rounds the probabilities P to e4m3 before P·V (3 mantissa bits: up to 2^-4
    /// relative per weight, as FlashAttention 3's fp8 program does), its e4m3 QKᵀ does not sum
    /// in f32 (Hopper's fp8 tensor cores), and O is bf16; `cargo xtask verify --dtype e4m3` is
    /// the kernel's accuracy gate (a reference with P rounded alike), this is the plumbing's. O's
    /// memory is first handed back to candle's pool holding NaN, so an element the kernel never
    /// writes would show as non-finite (if the pool reuses it, as it usually does).
    #[test]
    fn flash_attn_fp8_against_dequantized_reference() -> Result<()> {
        let Some(dev) = device() else { return Ok(()) };
        let mut rng = StdRng::seed_from_u64(14);
        let (b, s, hq, hkv, d) = (2, 300, 4, 2, 128);
        let scale = 1.0 / (d as f32).sqrt();
        let (q32, q) = e4m3_pair(&mut rng, &[b, s, hq, d], &dev)?;
        let (k32, k) = e4m3_pair(&mut rng, &[b, s, hkv, d], &dev)?;
        let (v32, v) = e4m3_pair(&mut rng, &[b, s, hkv, d], &dev)?;
        // Factors per (sequence, KV head), and the layouts that read fewer of them: one per KV
        // head (given as (hkv)) and one for all (given as (1)).
        let pow2 = |e: &[i32]| -> Vec<f32> { e.iter().map(|&e| 2f32.powi(e)).collect() };
        let per_batch_head = [
            pow2(&[-1, 1, 0, -2]),
            pow2(&[1, -1, 2, 0]),
            pow2(&[0, -2, -1, 1]),
        ];
        let per_head = [pow2(&[1, -1]), pow2(&[-1, 0]), pow2(&[0, 1])];
        let one = [pow2(&[1]), pow2(&[-1]), pow2(&[0])];
        let cases = [
            ("(b, hkv)", &per_batch_head, vec![b, hkv], false),
            ("(b, hkv)", &per_batch_head, vec![b, hkv], true),
            ("(hkv)", &per_head, vec![hkv], true),
            ("(1)", &one, vec![1], false),
            ("(1)", &one, vec![1], true),
        ];
        for (layout, factors, shape, causal) in cases {
            let table = |f: &Vec<f32>| Tensor::from_vec(f.clone(), shape.as_slice(), &dev);
            let (qd, kd, vd) = (
                table(&factors[0])?,
                table(&factors[1])?,
                table(&factors[2])?,
            );
            // The factors as (b, hkv), for the reference.
            let full =
                |f: &Vec<f32>| -> Vec<f32> { (0..b * hkv).map(|i| f[i % f.len()]).collect() };
            let poison = Tensor::full(half::bf16::NAN, (b, s, hq, d), &dev)?;
            drop(poison);
            let got = fc::flash_attn_fp8(&q, &k, &v, &qd, &kd, &vd, scale, causal)?;
            assert_eq!((got.dims(), got.dtype()), (q.dims(), DType::BF16));
            let want = reference_batched(
                &dequantize(&q32, &full(&factors[0]), hkv)?,
                &dequantize(&k32, &full(&factors[1]), hkv)?,
                &dequantize(&v32, &full(&factors[2]), hkv)?,
                &spec(scale, None, causal.then_some(0), s, None, None),
            )?;
            let got = host(&got)?;
            assert_eq!(got.len(), want.len());
            let what = format!("flash_attn_fp8 descales {layout} causal={causal}");
            if let Some(i) = got.iter().position(|g| !g.is_finite()) {
                panic!("{what}: O[{i}] = {} (not written, or overflowed)", got[i]);
            }
            let peak = want.iter().fold(0f32, |m, w| m.max(w.abs()));
            let (worst, at) = got
                .iter()
                .zip(&want)
                .map(|(g, w)| (g - w).abs())
                .enumerate()
                .fold(
                    (0f32, 0),
                    |(m, at), (i, e)| if e > m { (e, i) } else { (m, at) },
                );
            let tol = 0.05 * peak + 1e-2;
            eprintln!("{what}: max |O - ref| = {worst} (max |ref| {peak}, tolerance {tol})");
            assert!(
                worst <= tol,
                "{what}: max |O - ref| = {worst} at {at} (got {}, want {}), tolerance {tol}",
                got[at],
                want[at]
            );
        }
        Ok(())
    }

    /// What the fp8 forward refuses, as candle errors: 16-bit inputs, a descale on the host, a
    /// head dim no kernel takes (the kernels' reasons, Hopper's among them), and a backward.
    #[test]
    fn flash_attn_fp8_refusals() -> Result<()> {
        use candle::Var;
        let Some(dev) = device() else { return Ok(()) };
        let mut rng = StdRng::seed_from_u64(15);
        let ones = Tensor::ones((1, 2), DType::F32, &dev)?;
        let (_, q) = e4m3_pair(&mut rng, &[1, 64, 4, 128], &dev)?;
        let (_, k) = e4m3_pair(&mut rng, &[1, 64, 2, 128], &dev)?;
        let call = |q: &Tensor, k: &Tensor, qd: &Tensor| {
            fc::flash_attn_fp8(q, k, k, qd, &ones, &ones, 0.125, true)
        };
        let msg = |r: Result<Tensor>| r.unwrap_err().to_string();
        let q16 = tensor(&mut rng, &[1, 64, 4, 128], 1.0, DType::BF16, &dev)?;
        assert!(msg(call(&q16, &k, &ones)).contains("f8e4m3"));
        let on_host = Tensor::ones((1, 2), DType::F32, &Device::Cpu)?;
        assert!(msg(call(&q, &k, &on_host)).contains("q_descale"));
        let (_, q64) = e4m3_pair(&mut rng, &[1, 64, 4, 64], &dev)?;
        let (_, k64) = e4m3_pair(&mut rng, &[1, 64, 2, 64], &dev)?;
        let e = msg(call(&q64, &k64, &ones));
        assert!(e.contains("head_dim 128"), "{e}");
        // The same call at head dim 128 runs; its backward is an error, not a gradient.
        call(&q, &k, &ones)?;
        let qv = Var::from_tensor(&q)?;
        let out = call(qv.as_tensor(), &k, &ones)?;
        let e = out.to_dtype(DType::F32)?.sum_all()?.backward().unwrap_err();
        assert!(e.to_string().contains("no backward"), "{e}");
        Ok(())
    }

    // ---- Backward: flash_attn carries dQ, dK, dV into candle's autograd ----

    /// Differentiable f32 attention on `(b, s, h, d)` tensors (GQA by repeating K/V heads) with
    /// `s`'s masking and modes (docs/MODES.md; bottom-right aligned): what the backward tests
    /// differentiate as the reference. The slopes are `(h)` or `(b, h)` flat. A row that sees no
    /// key gives O = 0 (and so no gradient), as the kernels do.
    fn reference_attention(q: &Tensor, k: &Tensor, v: &Tensor, s: &Spec) -> Result<Tensor> {
        let (b, sq, hq, d) = q.dims4()?;
        let (_, sk, hkv, _) = k.dims4()?;
        let rep = |t: &Tensor| -> Result<Tensor> {
            t.transpose(1, 2)?
                .unsqueeze(2)?
                .expand((b, hkv, hq / hkv, sk, d))?
                .reshape((b, hq, sk, d))
        };
        let qh = q.transpose(1, 2)?.contiguous()?;
        let mut scores = (qh.matmul(&rep(k)?.transpose(2, 3)?.contiguous()?)? * s.scale as f64)?;
        if let Some(c) = s.softcap {
            scores = ((scores / c as f64)?.tanh()? * c as f64)?;
        }
        // The additive bias (ALiBi, and -inf where masked) and which rows see a key; a row that
        // sees none gets a zero bias (a finite softmax) and is zeroed after P·V.
        let off = sk as i64 - sq as i64;
        let mut bias = vec![0f32; b * hq * sq * sk];
        let mut visible = vec![0f32; b * hq * sq];
        for bi in 0..b {
            for h in 0..hq {
                let slope = s.slopes.as_ref().map(|sl| {
                    if sl.len() == hq {
                        sl[h]
                    } else {
                        sl[bi * hq + h]
                    }
                });
                for i in 0..sq {
                    let row = (bi * hq + h) * sq + i;
                    let diag = i as i64 + off;
                    for j in 0..sk as i64 {
                        let ok = s.window_left.is_none_or(|w| j >= diag - w as i64)
                            && s.window_right.is_none_or(|w| j <= diag + w as i64);
                        bias[row * sk + j as usize] = match (ok, slope) {
                            (false, _) => f32::NEG_INFINITY,
                            (true, Some(sl)) => -sl * (diag - j).abs() as f32,
                            (true, None) => 0.0,
                        };
                        if ok {
                            visible[row] = 1.0;
                        }
                    }
                    if visible[row] == 0.0 {
                        bias[row * sk..][..sk].fill(0.0);
                    }
                }
            }
        }
        let bias = Tensor::from_vec(bias, (b, hq, sq, sk), q.device())?;
        let visible = Tensor::from_vec(visible, (b, hq, sq, 1), q.device())?;
        let p = candle_nn::ops::softmax(&(scores + bias)?, candle::D::Minus1)?;
        p.matmul(&rep(v)?.contiguous()?)?
            .broadcast_mul(&visible)?
            .transpose(1, 2)?
            .contiguous()
    }

    /// [`spec`] of plain attention, causal (bottom-right) or not.
    fn causal_spec(scale: f32, causal: bool, seqlen_k: usize) -> Spec {
        spec(scale, None, causal.then_some(0), seqlen_k, None, None)
    }

    /// max |got − want| over max |want|: a plumbing check (right tensors, shapes, GQA sums); the
    /// kernels' accuracy gate is `cargo xtask verify --pass bwd` against f64 gradients.
    fn relative_error(got: &Tensor, want: &Tensor) -> Result<f32> {
        let (got, want) = (host(got)?, host(want)?);
        assert_eq!(got.len(), want.len());
        let scale = want.iter().fold(1e-6f32, |m, w| m.max(w.abs()));
        let worst = got
            .iter()
            .zip(&want)
            .map(|(g, w)| {
                if (g - w).is_nan() {
                    f32::INFINITY
                } else {
                    (g - w).abs()
                }
            })
            .fold(0f32, f32::max);
        Ok(worst / scale)
    }

    /// dQ, dK, dV of `ours` (flashcore's, in `dtype`) against the f32 reference's of `theirs`, by
    /// the backward's rule: relative error (NaN counts as infinite) at most twice the forward's
    /// tolerance.
    fn check_grads(
        tag: &str,
        dtype: DType,
        (grads, ours): (&candle::backprop::GradStore, &[&candle::Var; 3]),
        (grads_r, theirs): (&candle::backprop::GradStore, &[&candle::Var; 3]),
    ) -> Result<()> {
        for (name, (o, t)) in ["dq", "dk", "dv"].into_iter().zip(ours.iter().zip(theirs)) {
            let g = grads.get(o.as_tensor()).expect("a gradient");
            let w = grads_r.get(t.as_tensor()).expect("a reference gradient");
            assert_eq!(g.dims(), o.dims(), "{tag} {name} shape");
            assert_eq!(g.dtype(), dtype, "{tag} {name} dtype");
            let e = relative_error(g, w)?;
            assert!(
                e <= 2.0 * tolerance(dtype),
                "{tag} {name}: relative error {e}"
            );
        }
        Ok(())
    }

    /// The backward tests' one step: `flash` (flashcore's forward) on leaves of `q`, `k`, `v`
    /// and `reference` (f32, built on [`reference_attention`]) on f32 leaves of the same rounded
    /// values, each backed through `sum(out · d_o)`, then dQ, dK, dV compared by
    /// [`check_grads`]'s rule. Returns flashcore's dQ, dK, dV.
    fn check_backward_against_reference(
        tag: &str,
        (q, k, v): (&Tensor, &Tensor, &Tensor),
        d_o: &Tensor,
        flash: impl FnOnce(&Tensor, &Tensor, &Tensor) -> Result<Tensor>,
        reference: impl FnOnce(&Tensor, &Tensor, &Tensor) -> Result<Tensor>,
    ) -> Result<[Tensor; 3]> {
        use candle::Var;
        let (qv, kv, vv) = (
            Var::from_tensor(q)?,
            Var::from_tensor(k)?,
            Var::from_tensor(v)?,
        );
        let out = flash(qv.as_tensor(), kv.as_tensor(), vv.as_tensor())?;
        let grads = (out.to_dtype(DType::F32)? * d_o)?.sum_all()?.backward()?;
        let f32v = |t: &Tensor| Var::from_tensor(&t.to_dtype(DType::F32)?);
        let (qr, kr, vr) = (f32v(q)?, f32v(k)?, f32v(v)?);
        let out_r = reference(qr.as_tensor(), kr.as_tensor(), vr.as_tensor())?;
        let grads_r = (out_r * d_o)?.sum_all()?.backward()?;
        check_grads(
            tag,
            q.dtype(),
            (&grads, &[&qv, &kv, &vv]),
            (&grads_r, &[&qr, &kr, &vr]),
        )?;
        let grad = |x: &Var| grads.get(x.as_tensor()).expect("a gradient").clone();
        Ok([grad(&qv), grad(&kv), grad(&vv)])
    }

    /// The dense backward tests' problem: random Q `(b, sq, hq, d)`, K and V `(b, sk, hkv, d)` in
    /// `dtype` and an f32 dO shaped as Q, drawn in that order from `rng`.
    fn dense_problem(
        rng: &mut StdRng,
        (b, sq, sk, hq, hkv, d): (usize, usize, usize, usize, usize, usize),
        dtype: DType,
        dev: &Device,
    ) -> Result<(Tensor, Tensor, Tensor, Tensor)> {
        Ok((
            tensor(rng, &[b, sq, hq, d], 1.0, dtype, dev)?,
            tensor(rng, &[b, sk, hkv, d], 1.0, dtype, dev)?,
            tensor(rng, &[b, sk, hkv, d], 1.0, dtype, dev)?,
            tensor(rng, &[b, sq, hq, d], 1.0, DType::F32, dev)?,
        ))
    }

    /// Hands `n` NaN elements of `dtype` back to candle's pool, so that gradients allocated next
    /// (usually from the same memory) show any element the kernels leave unwritten as NaN.
    fn poison(dev: &Device, n: usize, dtype: DType) -> Result<()> {
        let t = match dtype {
            DType::BF16 => Tensor::full(half::bf16::NAN, n, dev)?,
            _ => Tensor::full(half::f16::NAN, n, dev)?,
        };
        drop(t);
        Ok(())
    }

    #[test]
    fn flash_attn_backward_matches_f32_autograd() -> Result<()> {
        let Some(dev) = device() else { return Ok(()) };
        let mut rng = StdRng::seed_from_u64(11);
        for dtype in DTYPES {
            for (b, sq, sk, hq, hkv, d) in SHAPES {
                let scale = 1.0 / (d as f32).sqrt();
                let (q, k, v, d_o) = dense_problem(&mut rng, (b, sq, sk, hq, hkv, d), dtype, &dev)?;
                for causal in [false, true] {
                    let tag = format!("{dtype:?} {:?} causal={causal}", (b, sq, sk, hq, hkv, d));
                    check_backward_against_reference(
                        &tag,
                        (&q, &k, &v),
                        &d_o,
                        |q, k, v| fc::flash_attn(q, k, v, scale, causal),
                        |q, k, v| reference_attention(q, k, v, &causal_spec(scale, causal, sk)),
                    )?;
                }
            }
        }
        Ok(())
    }

    /// The backward of every mode `flash_attn*` takes (sliding windows, causal among them,
    /// softcap, ALiBi per head and per (batch, head), and all at once) over [`SHAPES`] (GQA, MQA,
    /// decode, seq_q < seq_k), f16 and bf16, against f32 autograd of [`reference_attention`] on
    /// the same rounded inputs, by [`check_grads`]'s rule.
    #[test]
    fn flash_attn_backward_of_windows_softcap_alibi_matches_f32_autograd() -> Result<()> {
        let Some(dev) = device() else { return Ok(()) };
        let mut rng = StdRng::seed_from_u64(16);
        // (window left, window right, softcap, ALiBi: none, per head, per (batch, head))
        type Mode = (Option<usize>, Option<usize>, Option<f32>, u8);
        let modes: [Mode; 9] = [
            (Some(8), Some(0), None, 0),
            (Some(5), Some(3), None, 0),
            (None, Some(2), None, 0),
            (Some(10), None, None, 0),
            (None, None, Some(0.5), 0),
            (None, Some(0), Some(0.5), 0),
            (None, None, None, 1),
            (None, Some(0), None, 2),
            (Some(6), Some(1), Some(0.5), 2),
        ];
        for dtype in DTYPES {
            for (b, sq, sk, hq, hkv, d) in SHAPES {
                let scale = 1.0 / (d as f32).sqrt();
                let (q, k, v, d_o) = dense_problem(&mut rng, (b, sq, sk, hq, hkv, d), dtype, &dev)?;
                for (l, r, cap, alibi) in modes {
                    let slopes: Option<Vec<f32>> = match alibi {
                        0 => None,
                        1 => Some((0..hq).map(|h| 0.5f32.powi(h as i32 + 1)).collect()),
                        _ => Some((0..b * hq).map(|i| 0.3 / (i + 1) as f32).collect()),
                    };
                    let slopes_t = match &slopes {
                        Some(sl) if sl.len() == hq => Some(Tensor::from_vec(sl.clone(), hq, &dev)?),
                        Some(sl) => Some(Tensor::from_vec(sl.clone(), (b, hq), &dev)?),
                        None => None,
                    };
                    let tag = format!(
                        "{dtype:?} {:?} window ({l:?}, {r:?}) softcap {cap:?} alibi {alibi}",
                        (b, sq, sk, hq, hkv, d)
                    );
                    let flash = |qt: &Tensor, kt: &Tensor, vt: &Tensor| -> Result<Tensor> {
                        // Each entry point once, the general one for the rest.
                        let out = match (cap, &slopes_t) {
                            (None, None) => fc::flash_attn_windowed(qt, kt, vt, scale, l, r)?,
                            (None, Some(a)) => {
                                fc::flash_attn_alibi_windowed(qt, kt, vt, a, scale, l, r)?
                            }
                            (Some(c), a) => fc::flash_attn_alibi_windowed_softcap(
                                qt,
                                kt,
                                vt,
                                a.as_ref(),
                                scale,
                                l,
                                r,
                                c,
                            )?,
                        };
                        poison(&dev, q.elem_count() + 2 * k.elem_count(), dtype)?;
                        Ok(out)
                    };
                    check_backward_against_reference(
                        &tag,
                        (&q, &k, &v),
                        &d_o,
                        flash,
                        |q, k, v| {
                            reference_attention(
                                q,
                                k,
                                v,
                                &spec(scale, l, r, sk, cap, slopes.clone()),
                            )
                        },
                    )?;
                }
            }
        }
        Ok(())
    }

    /// The varlen backward (FlashAttention 2's packed layout) over five sequences of different
    /// lengths, one with no query (its keys get zero gradients), GQA 8:2, f16 and bf16, causal and
    /// not, with windows, softcap and ALiBi per head and per (sequence, head): against f32
    /// autograd of [`reference_attention`] sequence by sequence on views of the same packed
    /// tensors, by [`check_grads`]'s rule.
    #[test]
    fn flash_attn_varlen_backward_matches_f32_autograd() -> Result<()> {
        let Some(dev) = device() else { return Ok(()) };
        let mut rng = StdRng::seed_from_u64(17);
        let cu_q: Vec<u32> = vec![0, 5, 17, 17, 40, 41];
        let cu_k: Vec<u32> = vec![0, 9, 20, 33, 63, 103];
        let (max_q, max_k, batch) = (23, 40, cu_q.len() - 1);
        let (hq, hkv, d) = (8, 2, 64);
        let (total_q, total_k) = (41, 103);
        let scale = 0.125;
        let seqlens_q = Tensor::new(cu_q.as_slice(), &dev)?;
        let seqlens_k = Tensor::new(cu_k.as_slice(), &dev)?;
        // (window left, window right, softcap, ALiBi: none, per head, per (sequence, head))
        type Mode = (Option<usize>, Option<usize>, Option<f32>, u8);
        let modes: [Mode; 7] = [
            (None, None, None, 0),
            (None, Some(0), None, 0),
            (Some(4), Some(0), None, 0),
            (Some(6), Some(2), None, 1),
            (None, Some(0), None, 2),
            (None, None, Some(0.7), 0),
            (Some(6), Some(2), Some(0.7), 2),
        ];
        for dtype in DTYPES {
            let q = tensor(&mut rng, &[total_q, hq, d], 1.0, dtype, &dev)?;
            let k = tensor(&mut rng, &[total_k, hkv, d], 1.0, dtype, &dev)?;
            let v = tensor(&mut rng, &[total_k, hkv, d], 1.0, dtype, &dev)?;
            let d_o = tensor(&mut rng, &[total_q, hq, d], 1.0, DType::F32, &dev)?;
            for (l, r, cap, alibi) in modes {
                let slopes: Option<Vec<f32>> = match alibi {
                    0 => None,
                    1 => Some((0..hq).map(|h| 0.3f32.powi(h as i32 + 1)).collect()),
                    _ => Some((0..batch * hq).map(|i| 0.3 / (i + 1) as f32).collect()),
                };
                let slopes_t = match &slopes {
                    Some(sl) if sl.len() == hq => Some(Tensor::from_vec(sl.clone(), hq, &dev)?),
                    Some(sl) => Some(Tensor::from_vec(sl.clone(), (batch, hq), &dev)?),
                    None => None,
                };
                let tag =
                    format!("varlen {dtype:?} window ({l:?}, {r:?}) softcap {cap:?} alibi {alibi}");
                let flash = |qt: &Tensor, kt: &Tensor, vt: &Tensor| -> Result<Tensor> {
                    let out = match (cap, &slopes_t) {
                        (None, None) => fc::flash_attn_varlen_windowed(
                            qt, kt, vt, &seqlens_q, &seqlens_k, max_q, max_k, scale, l, r,
                        )?,
                        (None, Some(a)) => fc::flash_attn_varlen_alibi_windowed(
                            qt, kt, vt, a, &seqlens_q, &seqlens_k, max_q, max_k, scale, l, r,
                        )?,
                        (Some(c), a) => fc::flash_attn_varlen_alibi_windowed_softcap(
                            qt,
                            kt,
                            vt,
                            a.as_ref(),
                            &seqlens_q,
                            &seqlens_k,
                            max_q,
                            max_k,
                            scale,
                            l,
                            r,
                            c,
                        )?,
                    };
                    assert_eq!(out.dims(), q.dims());
                    poison(&dev, q.elem_count() + 2 * k.elem_count(), dtype)?;
                    Ok(out)
                };
                // The reference: each sequence's rows of the same packed f32 leaves.
                let reference = |qr: &Tensor, kr: &Tensor, vr: &Tensor| -> Result<Tensor> {
                    let mut outs = Vec::new();
                    for i in 0..batch {
                        let (q0, nq) = (cu_q[i] as usize, (cu_q[i + 1] - cu_q[i]) as usize);
                        let (k0, nk) = (cu_k[i] as usize, (cu_k[i + 1] - cu_k[i]) as usize);
                        if nq == 0 {
                            continue;
                        }
                        let rows = |t: &Tensor, at, n| t.narrow(0, at, n)?.unsqueeze(0);
                        let sl = slopes.as_ref().map(|sl| match alibi {
                            1 => sl.clone(),
                            _ => sl[i * hq..][..hq].to_vec(),
                        });
                        let o = reference_attention(
                            &rows(qr, q0, nq)?,
                            &rows(kr, k0, nk)?,
                            &rows(vr, k0, nk)?,
                            &spec(scale, l, r, max_k, cap, sl),
                        )?;
                        outs.push(o.squeeze(0)?);
                    }
                    Tensor::cat(&outs, 0)
                };
                let [_, dk, _] =
                    check_backward_against_reference(&tag, (&q, &k, &v), &d_o, flash, reference)?;
                // The keys of the sequence with no query get none.
                let dk = dk.narrow(0, 20, 13)?;
                assert!(
                    host(&dk)?.iter().all(|x| *x == 0.0),
                    "{tag}: dk of unread keys"
                );
            }
        }
        Ok(())
    }

    /// What has no backward says so when `backward()` runs, never a gradient: a paged call.
    #[test]
    fn backward_of_a_paged_call_is_an_error_not_a_wrong_gradient() -> Result<()> {
        use candle::Var;
        let Some(dev) = device() else { return Ok(()) };
        let mut rng = StdRng::seed_from_u64(12);
        let (hq, hkv, d, page) = (4, 2, 128, 32);
        let q = Var::from_tensor(&tensor(&mut rng, &[20, hq, d], 1.0, DType::BF16, &dev)?)?;
        let cache = tensor(&mut rng, &[14, page, hkv, d], 1.0, DType::BF16, &dev)?;
        let table =
            Tensor::new((0u32..12).collect::<Vec<_>>().as_slice(), &dev)?.reshape((3, 4))?;
        let seqlens_q = Tensor::new(&[0u32, 3, 4, 20], &dev)?;
        let seqlens_k = Tensor::new(&[0u32, 40, 41, 141], &dev)?;
        let out = fc::flash_attn_varlen_paged_windowed(
            q.as_tensor(),
            &cache,
            &cache,
            &seqlens_q,
            &seqlens_k,
            &table,
            None,
            16,
            100,
            0.125,
            None,
            Some(0),
            page,
            None,
        )?;
        let e = out.to_dtype(DType::F32)?.sum_all()?.backward().unwrap_err();
        assert!(e.to_string().contains("no backward"), "{e}");
        assert!(e.to_string().contains("paged K/V"), "{e}");
        Ok(())
    }

    /// A small training step through the op: one attention layer (bf16 activations, f32 master
    /// weights), an MSE loss and plain SGD. Each step's weight gradient matches the same step with
    /// the f32 reference attention, and the loss goes down.
    #[test]
    fn a_training_step_runs_through_flash_attn() -> Result<()> {
        use candle::Var;
        let Some(dev) = device() else { return Ok(()) };
        let mut rng = StdRng::seed_from_u64(13);
        let (b, s, hidden, hq, hkv) = (2, 64, 256, 4, 2);
        let d = hidden / hq;
        let x = tensor(&mut rng, &[b, s, hidden], 1.0, DType::F32, &dev)?;
        let target = tensor(&mut rng, &[b, s, hq * d], 0.5, DType::F32, &dev)?;
        let w = |rng: &mut StdRng, out: usize| -> Result<Var> {
            Var::from_tensor(&tensor(
                rng,
                &[hidden, out],
                1.0 / (hidden as f32).sqrt(),
                DType::F32,
                &dev,
            )?)
        };
        let (wq, wk, wv) = (
            w(&mut rng, hq * d)?,
            w(&mut rng, hkv * d)?,
            w(&mut rng, hkv * d)?,
        );
        let scale = 1.0 / (d as f32).sqrt();
        let loss_of = |flash: bool| -> Result<Tensor> {
            let proj = |w: &Var, h: usize| -> Result<Tensor> {
                x.broadcast_matmul(w.as_tensor())?.reshape((b, s, h, d))
            };
            let (q, k, v) = (proj(&wq, hq)?, proj(&wk, hkv)?, proj(&wv, hkv)?);
            let o = if flash {
                let bf = |t: &Tensor| t.to_dtype(DType::BF16);
                fc::flash_attn(&bf(&q)?, &bf(&k)?, &bf(&v)?, scale, true)?.to_dtype(DType::F32)?
            } else {
                reference_attention(&q, &k, &v, &causal_spec(scale, true, s))?
            };
            (o.reshape((b, s, hq * d))? - &target)?.sqr()?.mean_all()
        };
        let mut losses = Vec::new();
        for step in 0..3 {
            let loss = loss_of(true)?;
            let grads = loss.backward()?;
            let grads_r = loss_of(false)?.backward()?;
            for (name, var) in [("wq", &wq), ("wk", &wk), ("wv", &wv)] {
                let g = grads.get(var.as_tensor()).expect("a weight gradient");
                let e = relative_error(
                    g,
                    grads_r.get(var.as_tensor()).expect("a reference gradient"),
                )?;
                assert!(
                    e <= 2.0 * tolerance(DType::BF16),
                    "step {step} {name}: relative error {e}"
                );
            }
            for var in [&wq, &wk, &wv] {
                let g = grads.get(var.as_tensor()).expect("a weight gradient");
                var.set(&(var.as_tensor() - (g * 0.5)?)?)?;
            }
            losses.push(loss.to_scalar::<f32>()?);
        }
        assert!(losses.iter().all(|l| l.is_finite()), "{losses:?}");
        assert!(
            losses.windows(2).all(|p| p[1] < p[0]),
            "the loss did not go down: {losses:?}"
        );
        Ok(())
    }
}
