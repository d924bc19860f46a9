//! Host-side checks of the inference modes (docs/MODES.md): every bad table or combination is a
//! named error before anything launches, and the shapes/lengths the core derives are right.

use flashcore_core::{
    AlibiSlopes, AttentionProblem, DType, DeviceInfo, HostTables, InvalidProblem, KvStorage,
    ModeSupport, Modes,
};

fn field_of(e: InvalidProblem) -> &'static str {
    match e {
        InvalidProblem::Mode { field, .. } | InvalidProblem::Table { field, .. } => field,
        other => panic!("expected a named mode/table error, got {other}"),
    }
}

fn varlen(
    batch: usize,
    max_q: usize,
    total_q: usize,
    max_k: usize,
    total_k: usize,
) -> AttentionProblem {
    AttentionProblem::new(batch, 4, max_q, 64)
        .with_kv(2, max_k)
        .with_modes(Modes {
            packed_q: Some(total_q),
            kv: KvStorage::Packed { total_k },
            ..Modes::default()
        })
}

fn paged(
    batch: usize,
    num_blocks: usize,
    block_size: usize,
    max_blocks: usize,
) -> AttentionProblem {
    AttentionProblem::new(batch, 8, 1, 128)
        .with_kv(2, max_blocks * block_size)
        .with_dtype(DType::Bf16)
        .with_modes(Modes {
            kv: KvStorage::Paged {
                num_blocks,
                block_size,
                max_blocks_per_seq: max_blocks,
            },
            seqused_k: true,
            ..Modes::default()
        })
}

/// The tables of a paged cache: used rows and block table per sequence.
fn paged_tables<'a>(seqused_k: &'a [i32], block_table: &'a [i32]) -> HostTables<'a> {
    HostTables {
        seqused_k: Some(seqused_k),
        block_table: Some(block_table),
        ..Default::default()
    }
}

#[test]
fn good_varlen_tables_pass_and_sizes_follow_the_totals() {
    let p = varlen(3, 5, 9, 7, 12);
    p.validate().unwrap();
    let cu_q = [0, 5, 5, 9];
    let cu_k = [0, 7, 10, 12];
    HostTables {
        cu_seqlens_q: Some(&cu_q),
        cu_seqlens_k: Some(&cu_k),
        ..Default::default()
    }
    .validate(&p)
    .unwrap();
    assert_eq!(p.q_len(), 9 * 4 * 64);
    assert_eq!(p.k_len(), 12 * 2 * 64);
    assert_eq!(p.lse_len(), 4 * 9, "LSE is [heads_q, total_q] for packed Q");
}

#[test]
fn bad_cu_seqlens_name_the_field_and_the_problem() {
    let p = varlen(3, 5, 9, 7, 12);
    let cu_k = [0, 7, 10, 12];
    let check = |cu_q: &[i32]| {
        HostTables {
            cu_seqlens_q: Some(cu_q),
            cu_seqlens_k: Some(&cu_k),
            ..Default::default()
        }
        .validate(&p)
        .unwrap_err()
    };
    for (cu, needle) in [
        (&[1, 5, 5, 9][..], "start at 0"),
        (&[0, 5, 4, 9][..], "decreases"),
        (&[0, 6, 6, 9][..], "max_seqlen"),
        (&[0, 5, 5, 8][..], "ends at 8"),
        (&[0, 5, 9][..], "entries"),
    ] {
        let e = check(cu);
        assert!(e.to_string().contains(needle), "{e}");
        assert_eq!(field_of(e), "cu_seqlens_q");
    }
    // A table the problem does not use, and one it needs but lacks.
    let e = HostTables {
        cu_seqlens_q: Some(&[0, 5, 5, 9]),
        ..Default::default()
    }
    .validate(&p)
    .unwrap_err();
    assert_eq!(field_of(e), "cu_seqlens_k");
    let dense = AttentionProblem::new(2, 4, 8, 64);
    let e = HostTables {
        seqused_k: Some(&[1, 2]),
        ..Default::default()
    }
    .validate(&dense)
    .unwrap_err();
    assert!(e.to_string().contains("does not use it"), "{e}");
}

#[test]
fn paged_tables_check_block_ids_only_where_they_are_read() {
    let p = paged(2, 10, 16, 4);
    p.validate().unwrap();
    // Sequence 0 uses 20 rows (2 blocks), sequence 1 uses 0: entries past those are never read
    // and may hold anything (-1 here).
    let table = [3, 9, -1, -1, -1, -1, -1, -1];
    paged_tables(&[20, 0], &table).validate(&p).unwrap();
    for (used, table, needle) in [
        (
            [33, 0],
            [3, 9, 10, 0, 0, 0, 0, 0],
            "block 10 is outside 0..10",
        ),
        ([20, 1], [3, 9, 0, 0, -2, 0, 0, 0], "block -2"),
        ([65, 0], [0; 8], "exceed its capacity 64"),
        ([-1, 0], [0; 8], "negative"),
    ] {
        let e = paged_tables(&used, &table).validate(&p).unwrap_err();
        assert!(e.to_string().contains(needle), "{e}");
    }
}

#[test]
fn appended_rows_must_fit_the_cache() {
    let mut p = paged(1, 4, 16, 4);
    p.modes.append = Some(5);
    p.validate().unwrap();
    let table = [0, 1, 2, 3];
    paged_tables(&[59], &table).validate(&p).unwrap();
    let e = paged_tables(&[60], &table).validate(&p).unwrap_err();
    assert!(e.to_string().contains("60 used + 5 appended"), "{e}");
}

#[test]
fn bad_mode_combinations_are_named() {
    let base = AttentionProblem::new(2, 4, 8, 64);
    let cases: Vec<(Modes, bool, &str)> = vec![
        (
            Modes {
                softcap: Some(0.0),
                ..Modes::default()
            },
            false,
            "softcap",
        ),
        (
            Modes {
                softcap: Some(f32::INFINITY),
                ..Modes::default()
            },
            false,
            "softcap",
        ),
        (
            Modes {
                window_right: Some(3),
                ..Modes::default()
            },
            true,
            "window_right",
        ),
        (
            Modes {
                append: Some(1),
                ..Modes::default()
            },
            false,
            "k_new",
        ),
        (
            Modes {
                kv: KvStorage::Paged {
                    num_blocks: 4,
                    block_size: 24,
                    max_blocks_per_seq: 1,
                },
                seqused_k: true,
                ..Modes::default()
            },
            false,
            "block_size",
        ),
        (
            Modes {
                kv: KvStorage::Paged {
                    num_blocks: 4,
                    block_size: 16,
                    max_blocks_per_seq: 1,
                },
                ..Modes::default()
            },
            false,
            "seqused_k",
        ),
        (
            Modes {
                kv: KvStorage::Packed { total_k: 8 },
                seqused_k: true,
                append: Some(1),
                ..Modes::default()
            },
            false,
            "k_new",
        ),
    ];
    for (modes, causal, field) in cases {
        let mut p = base.clone().with_causal(causal).with_modes(modes.clone());
        if let KvStorage::Paged {
            block_size,
            max_blocks_per_seq,
            ..
        } = modes.kv
        {
            p.seq_k = block_size * max_blocks_per_seq;
        }
        let e = p.validate().unwrap_err();
        assert_eq!(field_of(e.clone()), field, "{modes:?}: {e}");
    }
    // A page size that does not divide the capacity is named too.
    let mut p = paged(1, 4, 16, 4);
    p.seq_k = 60;
    assert_eq!(field_of(p.validate().unwrap_err()), "block_table");
}

#[test]
fn kernels_without_a_mode_say_which() {
    let p = AttentionProblem::new(1, 2, 8, 64).with_modes(Modes {
        alibi: Some(AlibiSlopes::PerHead),
        ..Modes::default()
    });
    let none = ModeSupport::NONE;
    assert_eq!(none.missing(&p.modes), Some("ALiBi"));
    assert_eq!(ModeSupport::ALL.missing(&p.modes), None);
    let caps =
        flashcore_core::Capabilities::all_features(flashcore_core::HeadDims::List(&[64]), (8, 0));
    let e = caps
        .check("k", &p, &DeviceInfo::synthetic_h100())
        .unwrap_err();
    assert!(e.reason.contains("ALiBi"), "{e}");
}

#[test]
fn mm_prefix_ranges_are_checked_and_select_their_builds() {
    let p = AttentionProblem::new(2, 4, 64, 64)
        .with_causal(true)
        .with_modes(Modes {
            mm_prefix: Some(2),
            ..Modes::default()
        });
    p.validate().unwrap();
    // [batch, 2, 2]: a used range per sequence and an unused slot (start >= end, any values).
    let good = [0, 16, -5, -9, 8, 40, 3, 3];
    HostTables {
        mm_prefix_ranges: Some(&good),
        ..Default::default()
    }
    .validate(&p)
    .unwrap();
    let bad_start = [0, 16, -5, -9, -8, 40, 3, 3];
    let e = HostTables {
        mm_prefix_ranges: Some(&bad_start),
        ..Default::default()
    }
    .validate(&p)
    .unwrap_err();
    assert!(e.to_string().contains("sequence 1, range 0"), "{e}");
    assert_eq!(field_of(e), "mm_prefix_ranges");
    let e = HostTables {
        mm_prefix_ranges: Some(&good[..6]),
        ..Default::default()
    }
    .validate(&p)
    .unwrap_err();
    assert_eq!(field_of(e), "mm_prefix_ranges");
    let none = AttentionProblem::new(2, 4, 64, 64).with_modes(Modes {
        mm_prefix: Some(0),
        ..Modes::default()
    });
    assert_eq!(field_of(none.validate().unwrap_err()), "mm_prefix_ranges");
    assert_eq!(ModeSupport::ALL.missing(&p.modes), None);
    assert_eq!(
        ModeSupport::NONE.missing(&p.modes),
        Some("mm_prefix_ranges")
    );
    // Only builds of problems with ranges read them.
    assert_eq!(
        p.modes.build_defines(),
        vec![("FC_MM_PREFIX".to_string(), "1".to_string())]
    );
    assert!(Modes::default().build_defines().is_empty());
}

#[test]
fn a_paged_cache_holds_every_sequence_s_keys_in_whole_pages() {
    let p = AttentionProblem::new(3, 8, 1, 64)
        .with_kv(2, 4000)
        .with_causal(true)
        .with_paged_cache(64);
    assert_eq!(p.seq_k, 4032);
    assert_eq!(
        p.modes.kv,
        KvStorage::Paged {
            num_blocks: 3 * 63,
            block_size: 64,
            max_blocks_per_seq: 63,
        }
    );
    assert!(p.modes.seqused_k);
    assert!(p.causal, "the rest of the problem is kept");
    p.validate().expect("a valid paged problem");
}
