//! The argument rules (`super`) against candle-flash-attn's conventions, without a GPU.

use super::*;

fn dense(dims: &[usize]) -> Vec<usize> {
    (0..dims.len())
        .map(|i| dims[i + 1..].iter().product())
        .collect()
}

fn opts() -> Options {
    Options::new(DType::F16, 0.125)
}

/// [`dense_problem`] of q and of k = v, each (dims, strides).
fn dense_of(
    q: (&[usize], &[usize]),
    kv: (&[usize], &[usize]),
    opts: &Options,
) -> Result<AttentionProblem, ArgError> {
    dense_problem(
        &View::new("q", q.0, q.1),
        &View::new("k", kv.0, kv.1),
        &View::new("v", kv.0, kv.1),
        opts,
    )
}

/// [`paged_varlen_problem`] of dense q and k = v.
/// Three packed sequences: q [30, 8, 128], k/v [50, 4, 128], at most 12 query and 20 key rows.
fn varlen_of(opts: &Options) -> AttentionProblem {
    let (qd, kd) = ([30, 8, 128], [50, 4, 128]);
    varlen_problem(
        &View::new("q", &qd, &dense(&qd)),
        &View::new("k", &kd, &dense(&kd)),
        &View::new("v", &kd, &dense(&kd)),
        3,
        12,
        20,
        opts,
    )
    .unwrap()
}

fn paged_of(
    qd: &[usize],
    kd: &[usize],
    table: &[usize],
    max_k: usize,
    block: usize,
    opts: &Options,
) -> Result<AttentionProblem, ArgError> {
    paged_varlen_problem(
        &View::new("q", qd, &dense(qd)),
        &View::new("k", kd, &dense(kd)),
        &View::new("v", kd, &dense(kd)),
        table,
        2,
        6,
        max_k,
        block,
        opts,
    )
}

/// [`kvcache_problem`] of dense q and caches k = v, with `new` = (k_new, v_new) strides.
fn kvcache_of(
    qd: &[usize],
    cd: &[usize],
    table: Option<&[usize]>,
    new: Option<(&[usize], &[usize], &[usize])>,
    opts: &Options,
) -> Result<AttentionProblem, ArgError> {
    let views = new.map(|(nd, ks, vs)| (View::new("k_new", nd, ks), View::new("v_new", nd, vs)));
    kvcache_problem(
        &View::new("q", qd, &dense(qd)),
        &View::new("k_cache", cd, &dense(cd)),
        &View::new("v_cache", cd, &dense(cd)),
        &[2],
        table,
        views.as_ref().map(|(k, v)| (k, v)),
        opts,
    )
}

#[test]
fn causal_and_window_conventions() {
    // flash_attn(causal = true) passes (None, Some(0)).
    assert_eq!(
        masking(None, Some(0), 100),
        Masking {
            causal: true,
            window_left: None,
            window_right: None
        }
    );
    assert_eq!(masking(None, None, 100), masking(Some(101), Some(500), 100));
    assert!(!masking(None, None, 100).causal);
    // One-sided windows get seqlen_k on the other side, as FlashAttention 2 does.
    assert_eq!(
        masking(Some(16), None, 100),
        Masking {
            causal: false,
            window_left: Some(16),
            window_right: Some(100)
        }
    );
    assert_eq!(
        masking(None, Some(4), 100),
        Masking {
            causal: false,
            window_left: Some(100),
            window_right: Some(4)
        }
    );
    // A left window with right = 0 is local causal attention, not plain causal.
    assert_eq!(
        masking(Some(8), Some(0), 100),
        Masking {
            causal: false,
            window_left: Some(8),
            window_right: Some(0)
        }
    );
    // A left window larger than seqlen_k counts as none: then right = 0 is causal.
    assert!(masking(Some(1000), Some(0), 100).causal);
}

#[test]
fn dtype_rules() {
    assert_eq!(dtype_of("flash-attn", "f16", "f16", "f16"), Ok(DType::F16));
    assert_eq!(
        dtype_of("flash-attn", "bf16", "bf16", "bf16"),
        Ok(DType::Bf16)
    );
    assert!(dtype_of("flash-attn", "f32", "f32", "f32")
        .unwrap_err()
        .0
        .contains("only supported for f16/bf16"));
    assert!(dtype_of("flash-attn", "f16", "bf16", "f16").is_err());
}

#[test]
fn softcap_zero_is_off() {
    assert_eq!(softcap(Some(0.0)), Ok(None));
    assert_eq!(softcap(None), Ok(None));
    assert_eq!(softcap(Some(30.0)), Ok(Some(30.0)));
    assert!(softcap(Some(f32::NAN)).is_err());
}

#[test]
fn dense_contiguous_gqa() {
    let (qd, kd) = ([2, 7, 8, 64], [2, 9, 2, 64]);
    let (qs, ks) = (dense(&qd), dense(&kd));
    let p = dense_of((&qd, &qs), (&kd, &ks), &opts().with_window(None, Some(0))).unwrap();
    assert_eq!(
        (p.batch, p.seq_q, p.seq_k, p.heads_q, p.heads_kv, p.head_dim),
        (2, 7, 9, 8, 2, 64)
    );
    assert!(p.causal);
    assert_eq!(p.softmax_scale, Some(0.125));
    let s = p.strides();
    assert_eq!(
        s.q,
        TensorStrides {
            batch: 7 * 8 * 64,
            row: 8 * 64,
            head: 64
        }
    );
    assert_eq!(
        s.k,
        TensorStrides {
            batch: 9 * 2 * 64,
            row: 2 * 64,
            head: 64
        }
    );
    assert_eq!(s.o, s.q);
    assert!(p.modes.is_dense());
}

#[test]
fn the_batch_invariant_switch_reaches_the_problem() {
    let (qd, kd) = ([2, 7, 8, 64], [2, 9, 2, 64]);
    let (qs, ks) = (dense(&qd), dense(&kd));
    let build = || dense_of((&qd, &qs), (&kd, &ks), &opts()).unwrap();
    assert!(!batch_invariant());
    assert!(!build().batch_invariant);
    set_batch_invariant(true);
    let on = build().batch_invariant;
    set_batch_invariant(false);
    assert!(on);
    assert!(!build().batch_invariant);
}

#[test]
fn strided_views_are_taken() {
    // q, k, v as slices of a packed qkv tensor (b, s, 3 * h, d): k starts h heads in.
    let (b, s, h, d) = (2, 5, 4, 64);
    let qkv_strides = [s * 3 * h * d, 3 * h * d, d, 1];
    let dims = [b, s, h, d];
    let p = dense_of((&dims, &qkv_strides), (&dims, &qkv_strides), &opts()).unwrap();
    assert_eq!(p.strides().q.row, 3 * h * d);
    assert_eq!(p.strides().o.row, h * d, "O is allocated contiguous");
    // A transposed (b, h, s, d) tensor viewed as (b, s, h, d).
    let t_strides = [h * s * d, d, s * d, 1];
    let p = dense_of((&dims, &t_strides), (&dims, &t_strides), &opts()).unwrap();
    assert_eq!(
        p.strides().q,
        TensorStrides {
            batch: h * s * d,
            row: d,
            head: s * d
        }
    );
}

#[test]
fn extent_one_axes_get_dense_strides() {
    let dims = [1, 1, 8, 64];
    let odd = [3, 5, 64, 1];
    let p = dense_of((&dims, &odd), (&dims, &odd), &opts()).unwrap();
    assert_eq!(
        p.strides().q,
        TensorStrides {
            batch: 8 * 64,
            row: 8 * 64,
            head: 64
        }
    );
}

#[test]
fn refusals_name_the_problem() {
    let dims = [1, 4, 2, 64];
    let s = dense(&dims);
    let non_contig = [512, 128, 1, 2];
    let err = dense_of((&dims, &non_contig), (&dims, &s), &opts()).unwrap_err();
    assert!(err.0.contains("last dim of q must be contiguous"), "{err}");
    let k3 = [1, 4, 3, 64];
    let err = dense_of((&dims, &s), (&k3, &dense(&k3)), &opts()).unwrap_err();
    assert!(err.0.contains("must divide"), "{err}");
    let r3 = [4, 2, 64];
    let err = dense_of((&r3, &dense(&r3)), (&dims, &s), &opts()).unwrap_err();
    assert!(err.0.contains("rank 4"), "{err}");
    let err = dense_of((&dims, &s), (&dims, &s), &opts().with_alibi(&[3])).unwrap_err();
    assert!(err.0.contains("alibi_slopes"), "{err}");
}

#[test]
fn modes_carry_over() {
    let dims = [2, 4, 2, 64];
    let s = dense(&dims);
    let modes = opts()
        .with_window(Some(2), Some(1))
        .with_softcap(Some(20.0))
        .with_alibi(&[2]);
    let p = dense_of((&dims, &s), (&dims, &s), &modes).unwrap();
    assert_eq!(p.modes.window_left, Some(2));
    assert_eq!(p.modes.window_right, Some(1));
    assert_eq!(p.modes.softcap, Some(20.0));
    assert_eq!(p.modes.alibi, Some(AlibiSlopes::PerHead));
    assert!(!p.causal);
}

#[test]
fn varlen() {
    assert_eq!(cu_seqlens_batch(&[4], &[4]), Ok(3));
    assert!(cu_seqlens_batch(&[1], &[1]).is_err());
    assert!(cu_seqlens_batch(&[4], &[3]).is_err());
    let p = varlen_of(&opts().with_window(None, Some(0)));
    assert_eq!(p.modes.packed_q, Some(30));
    assert_eq!(p.modes.kv, KvStorage::Packed { total_k: 50 });
    assert_eq!((p.batch, p.seq_q, p.seq_k), (3, 12, 20));
    assert!(p.causal);
    assert_eq!(
        p.strides().k,
        TensorStrides {
            batch: 0,
            row: 4 * 128,
            head: 128
        }
    );
    assert_eq!(p.q_len(), 30 * 8 * 128);
}

#[test]
fn paged() {
    let qd = [10, 8, 64];
    let kd = [16, 32, 2, 64];
    let p = paged_of(&qd, &kd, &[2, 4], 100, 32, &opts().with_softcap(Some(10.0))).unwrap();
    assert_eq!(
        p.modes.kv,
        KvStorage::Paged {
            num_blocks: 16,
            block_size: 32,
            max_blocks_per_seq: 4
        }
    );
    assert!(p.modes.seqused_k);
    assert_eq!(p.seq_k, 128);
    // Wrong page size, table shape, capacity.
    assert!(paged_of(&qd, &kd, &[2, 4], 100, 16, &opts()).is_err());
    assert!(paged_of(&qd, &kd, &[3, 4], 100, 32, &opts()).is_err());
    assert!(paged_of(&qd, &kd, &[2, 4], 200, 32, &opts()).is_err());
    // flashcore pages are multiples of 16 up to 256: a 512-row page is refused.
    let big = [4, 512, 2, 64];
    let err = paged_of(&qd, &big, &[2, 1], 100, 512, &opts()).unwrap_err();
    assert!(err.0.contains("block_size"), "{err}");
}

#[test]
fn kvcache() {
    let qd = [2, 1, 8, 64];
    let cd = [2, 256, 2, 64];
    let nd = [2, 1, 2, 64];
    let contiguous = dense(&nd);
    let new = Some((&nd[..], &contiguous[..], &contiguous[..]));
    let p = kvcache_of(&qd, &cd, None, new, &opts().with_window(None, Some(0))).unwrap();
    assert_eq!(p.modes.append, Some(1));
    assert!(p.modes.seqused_k);
    assert_eq!(p.seq_k, 256);
    assert!(p.causal);
    // Paged, no append.
    let pd = [8, 64, 2, 64];
    let p = kvcache_of(&qd, &pd, Some(&[2, 3]), None, &opts()).unwrap();
    assert_eq!(p.seq_k, 192);
    assert_eq!(p.modes.append, None);
    // A non-contiguous k_new is refused.
    let nt = [128, 128, 1, 2];
    let new = Some((&nd[..], &nt[..], &contiguous[..]));
    assert!(kvcache_of(&qd, &cd, None, new, &opts()).is_err());
}

#[test]
fn mm_prefix_ranges_follow_candle_flash_attn() {
    // i32 (batch, max_ranges, 2); no ranges is no mode, as candle-flash-attn masks nothing more.
    assert_eq!(mm_prefix_ranges("i32", &[2, 3, 2], 2), Ok(Some(3)));
    assert_eq!(mm_prefix_ranges("i32", &[2, 0, 2], 2), Ok(None));
    for (dtype, dims, needle) in [
        (
            "u32",
            &[2, 3, 2][..],
            "mm_prefix_ranges must be i32, got u32",
        ),
        ("f32", &[2, 3, 2], "must be i32"),
        (
            "i32",
            &[3, 3, 2],
            "mm_prefix_ranges shape must be (2, max_ranges, 2), got [3, 3, 2]",
        ),
        ("i32", &[2, 3, 3], "shape must be (2, max_ranges, 2)"),
        ("i32", &[2, 6], "shape must be"),
        ("i32", &[2, 1, 3, 2], "shape must be"),
    ] {
        let err = mm_prefix_ranges(dtype, dims, 2).unwrap_err();
        assert!(err.0.contains(needle), "{dtype} {dims:?}: {err}");
    }
    // The count reaches the problem with causal masking kept beside it.
    let (qp, kp) = ([10, 8, 64], [16, 32, 2, 64]);
    let o = opts().with_window(None, Some(0)).with_mm_prefix(Some(3));
    let p = paged_of(&qp, &kp, &[2, 4], 100, 32, &o).unwrap();
    assert_eq!(p.modes.mm_prefix, Some(3));
    assert!(p.causal);
    let p = paged_of(&qp, &kp, &[2, 4], 100, 32, &opts()).unwrap();
    assert_eq!(p.modes.mm_prefix, None);
    let p = varlen_of(&opts().with_mm_prefix(Some(1)));
    assert_eq!(p.modes.mm_prefix, Some(1));
}

/// FlashAttention 3's `headdim_v`: V (and so O) may have its own last dim, as DeepSeek-V2/V3
/// prefill's Q·K at 192 and V at 128.
#[test]
fn v_may_have_its_own_head_dim() {
    let (qd, kd, vd) = ([2, 5, 4, 192], [2, 7, 2, 192], [2, 7, 2, 128]);
    let p = dense_problem(
        &View::new("q", &qd, &dense(&qd)),
        &View::new("k", &kd, &dense(&kd)),
        &View::new("v", &vd, &dense(&vd)),
        &opts(),
    )
    .unwrap();
    assert_eq!((p.head_dim, p.head_dim_v()), (192, 128));
    assert_eq!(o_dims(&qd, p.head_dim_v()), [2, 5, 4, 128]);
    // O is allocated contiguous in its own dims.
    assert_eq!(
        p.strides().o,
        TensorStrides {
            batch: 5 * 4 * 128,
            row: 4 * 128,
            head: 128
        }
    );
    assert_eq!(p.o_len(), 2 * 5 * 4 * 128);
    assert_eq!(p.v_len(), 2 * 7 * 2 * 128);
    // Equal dims stay the default problem.
    let same = dense_of((&qd, &dense(&qd)), (&kd, &dense(&kd)), &opts()).unwrap();
    assert_eq!(same.head_dim_v, None);
    // Any other dim of V must still be K's.
    let vd2 = [2, 6, 2, 128];
    let err = dense_problem(
        &View::new("q", &qd, &dense(&qd)),
        &View::new("k", &kd, &dense(&kd)),
        &View::new("v", &vd2, &dense(&vd2)),
        &opts(),
    )
    .unwrap_err();
    assert!(err.0.contains("shape mismatch k"), "{err}");

    // Varlen: O is [total_q, h_q, d_v].
    let (qd, kd, vd) = ([30, 8, 192], [50, 4, 192], [50, 4, 128]);
    let p = varlen_problem(
        &View::new("q", &qd, &dense(&qd)),
        &View::new("k", &kd, &dense(&kd)),
        &View::new("v", &vd, &dense(&vd)),
        3,
        12,
        20,
        &opts(),
    )
    .unwrap();
    assert_eq!(p.head_dim_v(), 128);
    assert_eq!(p.o_len(), 30 * 8 * 128);
    assert_eq!(p.strides().v.row, 4 * 128);

    // A KV cache: v_cache and v_new carry the V dim.
    let (qd, kc, vc) = ([2, 1, 8, 192], [2, 64, 2, 192], [2, 64, 2, 128]);
    let (kn, vn) = ([2, 1, 2, 192], [2, 1, 2, 128]);
    let cache = |vn: &[usize]| {
        kvcache_problem(
            &View::new("q", &qd, &dense(&qd)),
            &View::new("k_cache", &kc, &dense(&kc)),
            &View::new("v_cache", &vc, &dense(&vc)),
            &[2],
            None,
            Some((
                &View::new("k_new", &kn, &dense(&kn)),
                &View::new("v_new", vn, &dense(vn)),
            )),
            &opts(),
        )
    };
    let p = cache(&vn).unwrap();
    assert_eq!(
        (p.head_dim, p.head_dim_v(), p.modes.append),
        (192, 128, Some(1))
    );
    let err = cache(&kn).unwrap_err();
    assert!(err.0.contains("v_new"), "{err}");
}

// ---- e4m3 (fp8) KV caches: FlashAttention 3's k_descale / v_descale ----

/// A contiguous f32 descale of these dims.
fn descale(name: &'static str, dims: &[usize]) -> Descale {
    Descale::new(name, "f32", dims, &dense(dims)).unwrap()
}

/// [`kv_descales`] of two contiguous descales of these dims.
fn fp8_opts(dims: &[usize]) -> Options {
    let pair = kv_descales(
        true,
        Some(descale("k_descale", dims)),
        Some(descale("v_descale", dims)),
    )
    .unwrap();
    opts().with_kv_fp8(pair)
}

#[test]
fn kv_dtypes_take_e4m3_caches_only_together_and_never_for_q() {
    for e4m3 in ["e4m3", "f8e4m3"] {
        assert!(is_e4m3(e4m3));
        assert_eq!(
            kv_dtype_of("kv", "bf16", e4m3, e4m3),
            Ok((DType::Bf16, true))
        );
        assert_eq!(kv_dtype_of("kv", "f16", e4m3, e4m3), Ok((DType::F16, true)));
        let err = kv_dtype_of("kv", e4m3, e4m3, e4m3).unwrap_err();
        assert!(err.0.contains("q must be f16/bf16"), "{err}");
        for (k, v) in [(e4m3, "bf16"), ("bf16", e4m3)] {
            let err = kv_dtype_of("kv", "bf16", k, v).unwrap_err();
            assert!(err.0.contains("must both be e4m3"), "{err}");
        }
    }
    assert_eq!(
        kv_dtype_of("kv", "f16", "f16", "f16"),
        Ok((DType::F16, false))
    );
    // Other 8-bit formats and plain mismatches name the tensor.
    let err = kv_dtype_of("kv", "bf16", "torch.float8_e5m2", "torch.float8_e5m2").unwrap_err();
    assert!(err.0.contains("k is torch.float8_e5m2"), "{err}");
    let err = kv_dtype_of("kv", "bf16", "bf16", "f16").unwrap_err();
    assert!(err.0.contains("v is f16"), "{err}");
    assert!(kv_dtype_of("kv", "f32", "f32", "f32").is_err());
}

#[test]
fn descale_shapes_and_strides_map_to_kv_scales() {
    let (b, h) = (3, 4);
    let scales = |dims: &[usize], strides: &[usize]| {
        Descale::new("k_descale", "f32", dims, strides).and_then(|d| d.scales(b, h))
    };
    // FlashAttention 3's (batch, nheads_k), contiguous.
    assert_eq!(scales(&[3, 4], &[4, 1]), Ok(KvScales::PerBatchKvHead));
    // One per KV head, and (batch, nheads_k) views expanded from it or from one factor, as
    // serving engines pass them (`scale.expand(batch, nheads_k)`).
    assert_eq!(scales(&[4], &[1]), Ok(KvScales::PerKvHead));
    assert_eq!(scales(&[3, 4], &[0, 1]), Ok(KvScales::PerKvHead));
    assert_eq!(scales(&[3, 4], &[0, 0]), Ok(KvScales::PerTensor));
    assert_eq!(scales(&[4], &[0]), Ok(KvScales::PerTensor));
    // One element, whatever its rank.
    for dims in [&[][..], &[1], &[1, 1], &[1, 1, 1]] {
        assert_eq!(
            scales(dims, &vec![1; dims.len()]),
            Ok(KvScales::PerTensor),
            "{dims:?}"
        );
    }
    // Wrong shapes, dtypes and strides are refused, naming the tensor.
    for dims in [&[4, 3][..], &[3], &[2, 4], &[3, 4, 1], &[12]] {
        let err = scales(dims, &dense(dims)).unwrap_err();
        assert!(
            err.0.contains("k_descale must have shape"),
            "{dims:?}: {err}"
        );
    }
    let err = scales(&[3, 4], &[1, 3]).unwrap_err();
    assert!(err.0.contains("contiguous"), "{err}");
    let err = scales(&[3, 4], &[1, 0]).unwrap_err();
    assert!(err.0.contains("contiguous"), "{err}");
    let err = Descale::new("v_descale", "bf16", &[3, 4], &[4, 1]).unwrap_err();
    assert!(err.0.contains("v_descale must be f32"), "{err}");
    // Extent-1 axes have no stride of their own: a batch of one, a single KV head.
    let one = |dims: &[usize], strides: &[usize], b, h| {
        Descale::new("k_descale", "f32", dims, strides)
            .unwrap()
            .scales(b, h)
    };
    assert_eq!(one(&[1, 4], &[99, 1], 1, 4), Ok(KvScales::PerKvHead));
    assert_eq!(one(&[3, 1], &[1, 1], 3, 1), Ok(KvScales::PerBatchKvHead));
    assert_eq!(one(&[3, 1], &[0, 1], 3, 1), Ok(KvScales::PerTensor));
}

#[test]
fn descales_are_given_exactly_with_e4m3_caches() {
    let d = descale("k_descale", &[2]);
    assert_eq!(kv_descales(false, None, None), Ok(None));
    assert_eq!(kv_descales(true, Some(d), Some(d)), Ok(Some((d, d))));
    let err = kv_descales(true, Some(d), None).unwrap_err();
    assert!(err.0.contains("v_descale is missing"), "{err}");
    let err = kv_descales(true, None, Some(d)).unwrap_err();
    assert!(err.0.contains("k_descale is missing"), "{err}");
    let err = kv_descales(false, None, Some(d)).unwrap_err();
    assert!(err.0.contains("v_descale is given"), "{err}");
}

#[test]
fn e4m3_caches_reach_every_problem() {
    // flash_attn_with_kvcache: (batch, nheads_k) descales, contiguous and paged caches.
    let qd = [2, 1, 8, 64];
    let cd = [2, 256, 2, 64];
    let p = kvcache_of(&qd, &cd, None, None, &fp8_opts(&[2, 2])).unwrap();
    assert_eq!(p.modes.kv_fp8, Some(KvScales::PerBatchKvHead));
    let pd = [8, 64, 2, 64];
    let p = kvcache_of(&qd, &pd, Some(&[2, 3]), None, &fp8_opts(&[2])).unwrap();
    assert_eq!(p.modes.kv_fp8, Some(KvScales::PerKvHead));
    // With rows to append (in q's dtype; the bindings check that).
    let nd = [2, 1, 2, 64];
    let contiguous = dense(&nd);
    let new = Some((&nd[..], &contiguous[..], &contiguous[..]));
    let p = kvcache_of(&qd, &cd, None, new, &fp8_opts(&[1])).unwrap();
    assert_eq!(
        (p.modes.kv_fp8, p.modes.append),
        (Some(KvScales::PerTensor), Some(1))
    );
    // Dense, varlen (3 sequences, 4 KV heads) and paged varlen take them too.
    let (qd, kd) = ([2, 7, 8, 64], [2, 9, 2, 64]);
    let p = dense_of((&qd, &dense(&qd)), (&kd, &dense(&kd)), &fp8_opts(&[2, 2])).unwrap();
    assert_eq!(p.modes.kv_fp8, Some(KvScales::PerBatchKvHead));
    let p = varlen_of(&fp8_opts(&[3, 4]));
    assert_eq!(p.modes.kv_fp8, Some(KvScales::PerBatchKvHead));
    let p = paged_of(
        &[10, 4, 64],
        &[8, 16, 2, 64],
        &[2, 4],
        64,
        16,
        &fp8_opts(&[2]),
    )
    .unwrap();
    assert_eq!(p.modes.kv_fp8, Some(KvScales::PerKvHead));
    // The descales' shape is checked against the problem's batch and KV heads.
    let err = kvcache_of(&[2, 1, 8, 64], &cd, None, None, &fp8_opts(&[2, 8])).unwrap_err();
    assert!(err.0.contains("k_descale must have shape (2, 2)"), "{err}");
    // Both tables are indexed alike.
    let mixed = kv_descales(
        true,
        Some(descale("k_descale", &[2, 2])),
        Some(descale("v_descale", &[1])),
    )
    .unwrap();
    let err = kvcache_of(&[2, 1, 8, 64], &cd, None, None, &opts().with_kv_fp8(mixed)).unwrap_err();
    assert!(err.0.contains("laid out alike"), "{err}");
}

#[test]
fn e4m3_caches_keep_the_cores_rules() {
    // One head dim for K and V (the core's kv_fp8 rule).
    let (qd, kd, vd) = ([2, 5, 4, 192], [2, 7, 2, 192], [2, 7, 2, 128]);
    let err = dense_problem(
        &View::new("q", &qd, &dense(&qd)),
        &View::new("k", &kd, &dense(&kd)),
        &View::new("v", &vd, &dense(&vd)),
        &fp8_opts(&[1]),
    )
    .unwrap_err();
    assert!(err.0.contains("one head dim"), "{err}");
    // K/V rows are copied 16 bytes at a time: a head dim of 8 e4m3 bytes with one KV head
    // makes an 8-byte row stride.
    let (qd, kd) = ([1, 4, 1, 8], [1, 4, 1, 8]);
    let err = dense_of((&qd, &dense(&qd)), (&kd, &dense(&kd)), &fp8_opts(&[1])).unwrap_err();
    assert!(err.0.contains("not a multiple of 16"), "{err}");
}

#[test]
fn backward_is_carried_for_dense_and_varlen_with_every_score_mode() {
    let (qd, kd) = ([2, 7, 8, 64], [2, 9, 2, 64]);
    let modes = opts()
        .with_window(Some(3), Some(0))
        .with_softcap(Some(30.0))
        .with_alibi(&[2, 8]);
    for o in [opts(), opts().with_window(None, Some(0)), modes] {
        let p = dense_of((&qd, &dense(&qd)), (&kd, &dense(&kd)), &o).unwrap();
        assert_eq!(backward_refusal(&p), Ok(()), "{:?}", p.modes);
    }
    let modes = opts()
        .with_window(Some(4), Some(2))
        .with_softcap(Some(5.0))
        .with_alibi(&[8]);
    for o in [opts(), opts().with_window(None, Some(0)), modes] {
        let p = varlen_of(&o);
        assert_eq!(backward_refusal(&p), Ok(()), "{:?}", p.modes);
    }
}

#[test]
fn backward_refusals_name_what_is_inference_only() {
    let refusal = |p: AttentionProblem| backward_refusal(&p).unwrap_err().0;
    let (qd, kd) = ([2, 7, 8, 64], [2, 9, 2, 64]);
    let fp8 = dense_of((&qd, &dense(&qd)), (&kd, &dense(&kd)), &fp8_opts(&[1])).unwrap();
    assert!(refusal(fp8).contains("fp8 (e4m3)"));
    let paged = paged_of(&[10, 4, 64], &[8, 16, 2, 64], &[2, 4], 64, 16, &opts()).unwrap();
    assert!(refusal(paged).contains("paged K/V"));
    let cache = kvcache_of(&[2, 1, 8, 64], &[2, 256, 2, 64], None, None, &opts()).unwrap();
    assert!(refusal(cache).contains("KV cache"));
    let ranges = varlen_of(&opts().with_mm_prefix(Some(2)));
    let e = refusal(ranges);
    assert!(e.contains("mm_prefix_ranges has no backward"), "{e}");
    assert!(e.contains("sliding windows, softcap and ALiBi"), "{e}");
}

// ---- e4m3 (fp8) Q, K and V: FlashAttention 3's fp8 forward (q_descale) ----

#[test]
fn qkv_dtypes_take_an_e4m3_q_with_e4m3_k_and_v_only() {
    assert_eq!(FP8_OUT, DType::Bf16);
    for e4m3 in ["e4m3", "f8e4m3"] {
        assert_eq!(
            qkv_dtype_of("f", e4m3, e4m3, e4m3),
            Ok((FP8_OUT, true, true))
        );
        for (k, v) in [
            (e4m3, "bf16"),
            ("bf16", e4m3),
            ("bf16", "bf16"),
            ("f16", "f16"),
        ] {
            let err = qkv_dtype_of("f", e4m3, k, v).unwrap_err();
            assert!(err.0.contains("k and v must be e4m3 too"), "{err}");
            assert!(err.0.contains(&format!("k is {k}, v is {v}")), "{err}");
        }
    }
    // A 16-bit q: kv_dtype_of's rules, unchanged.
    assert_eq!(
        qkv_dtype_of("f", "f16", "e4m3", "e4m3"),
        Ok((DType::F16, true, false))
    );
    assert_eq!(
        qkv_dtype_of("f", "bf16", "bf16", "bf16"),
        Ok((DType::Bf16, false, false))
    );
    let err = qkv_dtype_of("f", "bf16", "e4m3", "bf16").unwrap_err();
    assert!(err.0.contains("must both be e4m3"), "{err}");
}

/// The dense problem of e4m3 q `(2, 30, 4, 128)` and k = v `(2, 40, 2, 128)` (dense), with
/// k_descale = v_descale of `kv_dims` and `q_descale` as given.
fn fp8_forward(
    kv_dims: &[usize],
    q_descale: Option<Descale>,
) -> Result<AttentionProblem, ArgError> {
    let (qd, kd) = ([2, 30, 4, 128], [2, 40, 2, 128]);
    let pair = kv_descales(
        true,
        Some(descale("k_descale", kv_dims)),
        Some(descale("v_descale", kv_dims)),
    )?;
    let o = Options::new(FP8_OUT, 0.125)
        .with_window(None, Some(0))
        .with_kv_fp8(pair)
        .with_q_fp8(true, q_descale)?;
    dense_of((&qd, &dense(&qd)), (&kd, &dense(&kd)), &o)
}

#[test]
fn an_e4m3_q_takes_a_q_descale_laid_out_as_k_descale() {
    for (dims, scales) in [
        (&[2, 2][..], KvScales::PerBatchKvHead),
        (&[2], KvScales::PerKvHead),
        (&[1], KvScales::PerTensor),
    ] {
        let p = fp8_forward(dims, Some(descale("q_descale", dims))).unwrap();
        assert!(p.modes.q_fp8 && p.causal, "{dims:?}");
        assert_eq!(
            (p.modes.kv_fp8, p.dtype, p.heads_kv),
            (Some(scales), DType::Bf16, 2)
        );
    }
    // A (batch, nheads_k) view expanded from one factor per KV head reads as (nheads_k,).
    let expanded = Descale::new("q_descale", "f32", &[2, 2], &[0, 1]).unwrap();
    assert!(fp8_forward(&[2], Some(expanded)).unwrap().modes.q_fp8);
    // Another layout than K's and V's, a shape the problem does not have (named before K's,
    // which the bindings shape as Q's when only Q's is given), strides no kernel indexes.
    let err = fp8_forward(&[2, 2], Some(descale("q_descale", &[2]))).unwrap_err();
    assert!(
        err.0.contains("q_descale (one factor per KV head)") && err.0.contains("laid out alike"),
        "{err}"
    );
    let err = fp8_forward(&[3, 2], Some(descale("q_descale", &[3, 2]))).unwrap_err();
    assert!(err.0.contains("q_descale must have shape (2, 2)"), "{err}");
    let transposed = Descale::new("q_descale", "f32", &[2, 2], &[1, 2]).unwrap();
    let err = fp8_forward(&[2, 2], Some(transposed)).unwrap_err();
    assert!(err.0.contains("q_descale with strides"), "{err}");
    // The bindings always pass one (ones for a missing one, FlashAttention 3's 1.0).
    let err = fp8_forward(&[1], None).unwrap_err();
    assert!(err.0.contains("needs q_descale"), "{err}");
}

#[test]
fn q_descale_goes_with_an_e4m3_q_beside_e4m3_k_and_v_only() {
    let d = descale("q_descale", &[1]);
    assert_eq!(opts().with_q_fp8(false, None), Ok(opts()));
    let err = opts().with_q_fp8(false, Some(d)).unwrap_err();
    assert!(err.0.contains("q is not e4m3"), "{err}");
    // An e4m3 Q over 16-bit K/V (qkv_dtype_of refuses it first; the rule holds on its own).
    let (qd, kd) = ([2, 7, 8, 64], [2, 9, 2, 64]);
    let o = opts().with_q_fp8(true, Some(d)).unwrap();
    let err = dense_of((&qd, &dense(&qd)), (&kd, &dense(&kd)), &o).unwrap_err();
    assert!(err.0.contains("needs e4m3 k and v"), "{err}");
    // The fp8 KV cache's problem is not the fp8 forward's.
    let p = dense_of((&qd, &dense(&qd)), (&kd, &dense(&kd)), &fp8_opts(&[1])).unwrap();
    assert!(!p.modes.q_fp8 && p.modes.kv_fp8.is_some());
}

#[test]
fn an_e4m3_q_keeps_the_cores_rules() {
    // Q's rows are copied 16 bytes at a time too: a row stride of 40 bytes is refused (K and V
    // dense at head dim 16 are fine).
    let (qd, qs, kd) = ([1, 4, 2, 16], [160, 40, 16, 1], [1, 4, 1, 16]);
    let pair = kv_descales(
        true,
        Some(descale("k_descale", &[1])),
        Some(descale("v_descale", &[1])),
    )
    .unwrap();
    let o = Options::new(FP8_OUT, 0.25)
        .with_kv_fp8(pair)
        .with_q_fp8(true, Some(descale("q_descale", &[1])))
        .unwrap();
    let err = dense_of((&qd, &qs), (&kd, &dense(&kd)), &o).unwrap_err();
    assert!(
        err.0
            .contains("q row stride 40 bytes is not a multiple of 16"),
        "{err}"
    );
    assert!(
        dense_of((&qd, &dense(&qd)), (&kd, &dense(&kd)), &o)
            .unwrap()
            .modes
            .q_fp8
    );
    // Its backward is refused as the fp8 KV cache's.
    let p = fp8_forward(&[1], Some(descale("q_descale", &[1]))).unwrap();
    assert!(backward_refusal(&p).unwrap_err().0.contains("fp8 (e4m3)"));
}
