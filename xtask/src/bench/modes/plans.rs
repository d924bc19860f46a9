//! The plans of the varlen, paged and window suites: their cases, peers, comparisons and notes.

use super::cases::{
    cache_case, cache_used, cmp, dense_case, peer, peer_shape, s_eq, same_problem_peer,
    varlen_case, varlen_lengths, visible_pairs, Case, Heads, KvKind, Measure, Side, SuitePlan,
    Target, BLOCK_SIZES, CACHE_BATCH, CACHE_CAPACITY, CACHE_SLACK, PREFILL_BATCH, PREFILL_SEQ,
    SPARE_BLOCKS, VARLEN_SEQS, WINDOW_LEFT, WINDOW_SEQ,
};
use crate::bench::suite::Suite;

pub(super) fn varlen_plan(seed: u64) -> SuitePlan {
    let lens = varlen_lengths(seed);
    let max = lens.iter().copied().max().unwrap_or(0);
    let seq_eq = s_eq(&lens);
    let varlen = varlen_case("varlen", &lens, true);
    let dense = dense_case("dense-eq", VARLEN_SEQS, seq_eq, seq_eq, true, None);
    // Diagnostic: the varlen path with every sequence S_eq long. Against dense-eq it isolates the
    // cost of the varlen machinery (tables, packed rows, modes build) from that of the length mix
    // (imbalance, the tail of the last wave).
    let uniform = varlen_case("varlen-uniform", &[seq_eq; VARLEN_SEQS], true);
    let padded = peer(
        "padded",
        &format!(
            "{}; padded to max len (TFLOP/s on the varlen batch's real FLOPs)",
            peer_shape(VARLEN_SEQS, max, max, true).label()
        ),
        peer_shape(VARLEN_SEQS, max, max, true),
        varlen.flops,
    );
    let sum_sq: usize = lens.iter().map(|l| l * l).sum();
    let notes = vec![
        format!("lengths (seed {seed:#x}): {lens:?}"),
        format!(
            "Σ len = {}, Σ len² = {sum_sq}, max = {max}; S_eq = {seq_eq} (16·S_eq² = {}, rounded to 128)",
            lens.iter().sum::<usize>(),
            VARLEN_SEQS * seq_eq * seq_eq
        ),
        "FLOPs: 4·D·Hq per visible (query, key) pair, summed over the sequences (causal: len·(len+1)/2 pairs each)".into(),
        "padded: the peers on B=16, S=max len, causal: what a user without varlen runs; the ratio is their time over flashcore's varlen time".into(),
        "peers with GQA: SDPA enable_gqa=True, or K/V repeated outside the timed calls where a backend refuses it (its rows say so)".into(),
    ];
    let comparisons = vec![
        cmp(
            "varlen TFLOP/s / dense TFLOP/s at equal real FLOPs",
            ("varlen", Side::This),
            ("dense-eq", Side::This),
            Measure::Rate,
            Some(Target::AtLeast(0.95)),
        ),
        cmp(
            "varlen with every length S_eq / dense (the machinery's cost, without the length mix)",
            ("varlen-uniform", Side::This),
            ("dense-eq", Side::This),
            Measure::Rate,
            None,
        ),
        cmp(
            "best peer on the padded batch: its time / varlen time",
            ("padded", Side::BestPeer),
            ("varlen", Side::This),
            Measure::Time,
            None,
        ),
        cmp(
            "best peer on the dense batch of equal FLOPs: its time / flashcore's",
            ("dense-eq", Side::BestPeer),
            ("dense-eq", Side::This),
            Measure::Time,
            None,
        ),
    ];
    SuitePlan {
        suite: Suite::Varlen,
        peers: vec![padded, same_problem_peer(&dense)],
        cases: vec![varlen, uniform, dense],
        comparisons,
        notes,
    }
}

pub(super) fn paged_plan(seed: u64) -> SuitePlan {
    let mut cases = Vec::new();
    let mut peers = Vec::new();
    let mut comparisons = Vec::new();
    let groups: [(&str, usize, usize, usize, Vec<usize>); 3] = [
        (
            "decode",
            CACHE_BATCH,
            1,
            CACHE_CAPACITY,
            cache_used(CACHE_BATCH, CACHE_CAPACITY, seed),
        ),
        (
            "chunk",
            CACHE_BATCH,
            128,
            CACHE_CAPACITY,
            cache_used(CACHE_BATCH, CACHE_CAPACITY, seed ^ 1),
        ),
        (
            "prefill",
            PREFILL_BATCH,
            PREFILL_SEQ,
            PREFILL_SEQ,
            vec![PREFILL_SEQ; PREFILL_BATCH],
        ),
    ];
    for (name, batch, sq, cap, used) in groups {
        let base = format!("{name}/contig");
        cases.push(cache_case(
            &base,
            Heads::SUITES,
            sq,
            cap,
            &used,
            true,
            KvKind::Contiguous,
            seed,
        ));
        for bs in BLOCK_SIZES {
            let key = format!("{name}/paged-{bs}");
            let mut c = cache_case(
                &key,
                Heads::SUITES,
                sq,
                cap,
                &used,
                true,
                KvKind::Paged { block_size: bs },
                seed,
            );
            c.data_from = Some(base.clone());
            cases.push(c);
            comparisons.push(cmp(
                &format!("{name}: paged block {bs} time / contiguous time"),
                (&key, Side::This),
                (&base, Side::This),
                Measure::Time,
                Some(Target::AtMost(if bs >= 64 { 1.05 } else { 1.15 })),
            ));
        }
        // The peers on a dense cache: the same problem for the prefill (every row used, square,
        // causal); for decode and chunks SDPA cannot take seqused_k nor a bottom-right causal
        // mask, so it runs the full capacity without a mask: a reference, not the same problem.
        let reference = if sq == cap {
            peer(
                &format!("{name}/sdpa"),
                &format!(
                    "{}; the same problem on a dense cache",
                    peer_shape(batch, sq, cap, true).label()
                ),
                peer_shape(batch, sq, cap, true),
                cases.last().map(|c: &Case| c.flops).unwrap_or(0.0),
            )
        } else {
            let shape = peer_shape(batch, sq, cap, false);
            peer(
                &format!("{name}/sdpa"),
                &format!(
                    "{}; reference only: dense cache at full capacity, no mask (TFLOP/s on its own FLOPs)",
                    shape.label()
                ),
                shape,
                shape.dense_flops(),
            )
        };
        comparisons.push(cmp(
            &format!("{name}: best peer ({name}/sdpa) time / flashcore contiguous time"),
            (&reference.key.clone(), Side::BestPeer),
            (&base, Side::This),
            Measure::Time,
            None,
        ));
        peers.push(reference);
    }
    let notes = vec![
        format!(
            "seqused_k per sequence = capacity - r, r drawn in 0..{CACHE_SLACK} (seed {seed:#x}); block tables are shuffled permutations of a pool with {SPARE_BLOCKS} spare blocks; paged and contiguous hold the same keys and values"
        ),
        "decode (Sq=1) rows show the paged overhead only: decode speed itself is a later issue (no split-K tuning here)".into(),
        "no torch kernel takes a paged cache: the paged comparison is flashcore paged against flashcore contiguous; the SDPA rows time a dense cache (see each row)".into(),
    ];
    SuitePlan {
        suite: Suite::Paged,
        cases,
        peers,
        comparisons,
        notes,
    }
}

pub(super) fn window_plan() -> SuitePlan {
    let window = dense_case("window", 1, WINDOW_SEQ, WINDOW_SEQ, true, Some(WINDOW_LEFT));
    let full = dense_case("causal-32k", 1, WINDOW_SEQ, WINDOW_SEQ, true, None);
    let band = dense_case("dense-sk4096", 1, WINDOW_SEQ, WINDOW_LEFT, false, None);
    let comparisons = vec![
        cmp(
            "window time / dense Sq=32768 Sk=4096 time (same keys per query)",
            ("window", Side::This),
            ("dense-sk4096", Side::This),
            Measure::Time,
            Some(Target::AtMost(1.2)),
        ),
        cmp(
            "window time / full causal 32k time (the tile-level skip)",
            ("window", Side::This),
            ("causal-32k", Side::This),
            Measure::Time,
            None,
        ),
        cmp(
            "best peer on full causal 32k: its time / flashcore's",
            ("causal-32k", Side::BestPeer),
            ("causal-32k", Side::This),
            Measure::Time,
            None,
        ),
        cmp(
            "best peer on dense Sk=4096: its time / flashcore's",
            ("dense-sk4096", Side::BestPeer),
            ("dense-sk4096", Side::This),
            Measure::Time,
            None,
        ),
    ];
    let notes = vec![
        "no peer runs the window natively: torch SDPA has sliding windows only through an explicit mask (not a fair peer), and FA3's window is not available here; the peers run the two dense comparison problems".into(),
        format!(
            "real FLOPs: the window row counts the {} visible pairs per head (row i sees min(i, {WINDOW_LEFT}) + 1 keys)",
            visible_pairs(WINDOW_SEQ, WINDOW_SEQ, true, Some(WINDOW_LEFT), None)
        ),
    ];
    SuitePlan {
        suite: Suite::Window,
        peers: vec![same_problem_peer(&full), same_problem_peer(&band)],
        cases: vec![window, full, band],
        comparisons,
        notes,
    }
}
