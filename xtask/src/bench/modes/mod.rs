//! The inference-mode suites of `bench-all` (`--suite varlen | paged | window`, issue 11): what
//! each suite builds (problems, per-sequence lengths and tables, all drawn from `--seed`), the
//! FLOPs each row is credited with (only the (query, key) pairs the masks let through), the
//! comparisons with their targets, and the report and its tables. Nothing here touches a GPU;
//! `modes_gpu` times the problems.
//!
//! - varlen: 16 packed sequences (lengths in 128..=4096), causal, against a dense causal batch of
//!   the same real FLOPs (B = 16, S_eq with 16·S_eq² ≈ Σ len²) timed on the same generation, and
//!   against the peers on the padded batch (B = 16, S = max len): what a user without varlen runs.
//! - paged: a KV cache of capacity 8192 (B = 8, decode Sq = 1 and chunked prefill Sq = 128) and a
//!   compute-bound prefill (B = 4, Sq = Sk = 4096), contiguous against paged at block sizes 16,
//!   64 and 256 with shuffled block tables, on the same keys and values.
//! - window: a sliding window of 4096 at 32k tokens against the full causal run and against a
//!   dense non-causal run with Sk = 4096 (the same number of visible keys per query).
//!
//! `cases` holds the constants, cases, comparisons and their builders; `plans` the three suites'
//! plans; `report` the report and its tables. This module picks a suite's plan and its markdown.
//!
//! `--suite decode` builds its plan in `bench::decode` from the pieces here (`cache_case_heads`,
//! `dense_case_heads`) and adds its own part to the report ([`ModeReport::decode`]).

use super::suite::Suite;

pub mod cases;
mod plans;
pub mod report;
#[cfg(test)]
pub mod tests;

pub use cases::*;
pub use report::*;

/// What `--suite` runs, deterministic in `seed`.
pub fn plan(suite: Suite, seed: u64) -> SuitePlan {
    match suite {
        Suite::Varlen => plans::varlen_plan(seed),
        Suite::Paged => plans::paged_plan(seed),
        Suite::Window => plans::window_plan(),
        Suite::Decode => super::decode::plan(seed, false, super::decode::HEAD_DIM, None),
        Suite::Mission | Suite::Ladder | Suite::Full | Suite::Cp | Suite::Fp8 | Suite::BwdModes => {
            SuitePlan {
                suite,
                cases: vec![],
                peers: vec![],
                comparisons: vec![],
                notes: vec![],
            }
        }
    }
}

pub fn render_markdown(r: &ModeReport) -> String {
    // The decode suite's own table holds its comparisons (and its two targets).
    let (title, middle) = match &r.decode {
        Some(d) => ("Decode", super::decode::render(r, d)),
        None => ("Comparisons", render_comparisons(r)),
    };
    format!(
        "# flashcore bench-all --suite {}\n\n{}\n## Cases\n\n{}\n## {title}\n\n{middle}\n## All rows\n\n{}",
        suite_name(r.suite),
        render_header(r),
        render_cases(r),
        render_rows(r)
    )
}
