//! `check-kernels`' header step: every header under `kernels/` compiled alone, as a translation
//! unit of its own, so that one which uses a type, constant or helper it does not include fails
//! here instead of compiling only in the include order of today's `.cu` files.
//!
//! The headers are the embedded kernel sources (`flashcore::compile::KERNEL_SOURCES`, which the
//! core crate's build script collects from the directory): a new header is checked without being
//! listed anywhere. [`HEADER_DEFINES`] is the one place that says what a header may take from the
//! including file's command line besides the dtype define every build gets.

use anyhow::Result;
use flashcore::compile::{compile, CompileRequest, KERNEL_SOURCES};
use flashcore::{DType, Error};

/// The virtual architectures each header is compiled for: the Hopper one (wgmma, TMA, clusters)
/// and the oldest one the plans build for (the portable paths, and every `__CUDA_ARCH__ < 900`
/// branch).
pub const HEADER_ARCHES: &[&str] = &["compute_90a", "compute_80"];

/// One define, as passed to NVRTC (`-DNAME=VALUE`).
pub type Define = (&'static str, &'static str);

/// What a header needs from the command line beyond `-DFC_DTYPE_*`.
pub struct HeaderDefines {
    /// A header under `kernels/`, or a folder ending in `/` for every header in it.
    pub path: &'static str,
    /// Defines without which the header cannot compile. Compiled without them it must stop at an
    /// `#error` that names one of them (so a reader learns what is missing, not an undefined name);
    /// under a folder row, a header that needs none of them may compile instead.
    pub needs: &'static [Define],
    /// Further builds, each `needs` with these defines set on top (a value here wins): they switch
    /// on the header's `#if` blocks, where a missing include would otherwise go unseen.
    pub switches: &'static [&'static [Define]],
    /// Why the header takes them.
    pub why: &'static str,
}

/// Every header not listed here compiles from its own includes alone.
pub const HEADER_DEFINES: &[HeaderDefines] = &[
    HeaderDefines {
        path: "common/backward_scores.cuh",
        needs: &[],
        switches: &[&[("FC_BWD_MODES", "1")]],
        why: "the backward's modes builds walk their tiles by the window",
    },
    HeaderDefines {
        path: "common/short_row_delta.cuh",
        needs: &[],
        switches: &[
            &[("FC_BWD_MODES", "1")],
            &[("FC_BWD_MODES", "1"), ("FC_BWD_VARLEN", "1")],
        ],
        why: "a short row's keys and storage rows follow the backward's modes and varlen builds",
    },
    HeaderDefines {
        path: "common/dq_accumulator.cuh",
        needs: &[("FC_HEAD_DIM", "128")],
        switches: &[
            &[("FC_HEAD_DIM", "64"), ("FC_BWD_STEP64", "1")],
            &[("FC_HEAD_DIM", "64"), ("FC_BWD_TWO_PHASE", "1")],
            &[("FC_HEAD_DIM", "160")],
            &[("FC_HEAD_DIM", "256"), ("FC_BWD_STEP32", "1")],
        ],
        why: "PortableDqAccumulator's tiles follow the portable backward's head dim and step",
    },
    HeaderDefines {
        path: "common/decode_trace.cuh",
        needs: &[],
        switches: &[&[("FC_DECODE_TRACE", "1")]],
        why: "the decode kernel's timeline build",
    },
    HeaderDefines {
        path: "common/hopper/mbarrier.cuh",
        needs: &[],
        switches: &[&[("FC_HOPPER_DEBUG", "1")]],
        why: "the debug build's bounded waits",
    },
    HeaderDefines {
        path: "common/pipeline.cuh",
        needs: &[],
        switches: &[&[("FC_PORTABLE_DEBUG", "1")]],
        why: "the debug build's bounded waits",
    },
    HeaderDefines {
        path: "gen5_decode/",
        needs: &[("FC_HEAD_DIM", "128")],
        switches: &[
            &[("FC_HEAD_DIM", "512"), ("FC_DECODE_KV_CACHE", "1"), ("FC_DECODE_PREFETCH", "1")],
            &[("FC_KV_E4M3", "1"), ("FC_DECODE_KV_CACHE", "2"), ("FC_DECODE_CHUNK_TILES", "4")],
            &[("FC_HEAD_DIM", "256"), ("FC_DECODE_PADDED", "1"), ("FC_HEAD_DIM_V", "192")],
        ],
        why: "config.cuh: the decode kernel's ring, warps' shares and loader follow the head dim and the cache kind",
    },
    HeaderDefines {
        path: "gen5_hopper/",
        needs: &[("FC_HEAD_DIM", "128")],
        switches: &[
            &[("FC_HOPPER_SPLIT_KV", "1")],
            &[
                ("FC_HEAD_DIM", "64"),
                ("FC_HOPPER_OVERLAP", "1"),
                ("FC_HOPPER_PINGPONG", "1"),
                ("FC_HOPPER_WG_KEY_SPLIT", "1"),
                ("FC_HOPPER_CLUSTER_KEY_SPLIT", "1"),
                ("FC_HOPPER_PREFETCH", "1"),
                ("FC_HOPPER_TRACE", "1"),
                ("FC_HOPPER_DEBUG", "1"),
            ],
            &[
                ("FC_HOPPER_MODES", "1"),
                ("FC_HOPPER_SPREAD_PAGES", "1"),
                ("FC_HOPPER_DYNAMIC", "1"),
                ("FC_HOPPER_Q_STAGES", "2"),
                ("FC_HOPPER_SMEM_EPILOGUE", "1"),
            ],
        ],
        why: "config.cuh: the forward's tile shapes and shared-memory map follow the head dim",
    },
    HeaderDefines {
        path: "gen5_hopper_bwd/",
        needs: &[("FC_HEAD_DIM", "128")],
        switches: &[
            &[("FC_BWD_QUERY_ROWS", "80"), ("FC_BWD_TRACE", "1")],
            &[("FC_HEAD_DIM", "64"), ("FC_BWD_QUERY_ROWS", "128")],
            &[("FC_BWD_MODES", "1"), ("FC_BWD_VARLEN", "1")],
            &[("FC_HEAD_DIM", "64"), ("FC_BWD_QUERY_ROWS", "128"), ("FC_BWD_MODES", "1")],
        ],
        why: "config.cuh: the backward's tile shapes and shared-memory map follow the head dim, its modes builds take their own step",
    },
];

/// The headers among the embedded kernel sources, sorted.
pub fn headers<'a>(sources: &[(&'a str, &str)]) -> Vec<&'a str> {
    let mut h: Vec<&str> = sources
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| name.ends_with(".cuh"))
        .collect();
    h.sort_unstable();
    h
}

/// The table's rows for `header` (a folder row covers every header in that folder).
pub fn rows_for(header: &str) -> Vec<&'static HeaderDefines> {
    HEADER_DEFINES
        .iter()
        .filter(|row| {
            if row.path.ends_with('/') {
                header.starts_with(row.path)
            } else {
                header == row.path
            }
        })
        .collect()
}

/// `needs` with `switch` set on top (a define in both takes the switch's value).
pub fn with_switch(needs: &[Define], switch: &[Define]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = needs
        .iter()
        .filter(|(k, _)| switch.iter().all(|(s, _)| s != k))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    out.extend(switch.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    out
}

/// Every define set `header` is compiled with: its needs, then each switch on top of them.
pub fn builds_for(header: &str) -> Vec<Vec<(String, String)>> {
    let rows = rows_for(header);
    let needs: Vec<Define> = rows.iter().flat_map(|r| r.needs.iter().copied()).collect();
    let mut builds = vec![with_switch(&needs, &[])];
    for row in &rows {
        builds.extend(row.switches.iter().map(|s| with_switch(&needs, s)));
    }
    builds
}

/// Whether a compile log is an `#error` that names one of `needs` (what a header must say when
/// compiled without them).
pub fn names_a_need(log: &str, needs: &[Define]) -> bool {
    log.lines()
        .any(|l| l.contains("#error") && needs.iter().any(|(name, _)| l.contains(name)))
}

/// Whether a header's text guards itself with `#pragma once`.
pub fn has_pragma_once(text: &str) -> bool {
    text.lines().any(|l| l.trim() == "#pragma once")
}

/// What the step found.
pub struct HeaderReport {
    pub headers: usize,
    pub builds: usize,
    pub failures: Vec<String>,
}

/// Compiles every header alone for [`HEADER_ARCHES`] in both dtypes, once per define set of
/// [`builds_for`], and once without its needs: there it must either compile (a header of a folder
/// row that needs none of them) or stop at an `#error` naming one.
pub fn check() -> Result<HeaderReport> {
    let names = headers(KERNEL_SOURCES);
    // Headers on every core, each header's builds in order (its first failure ends it).
    let checked = crate::parallel::par_map_queue(&names, |header| check_one(header));
    Ok(HeaderReport {
        headers: names.len(),
        builds: checked.iter().map(|(builds, _)| builds).sum(),
        failures: checked.into_iter().flat_map(|(_, f)| f).collect(),
    })
}

/// One header's builds: how many were compiled, and what failed.
fn check_one(header: &str) -> (usize, Vec<String>) {
    let mut builds = 0;
    let mut failures = Vec::new();
    let text = flashcore::compile::kernel_source(header).unwrap_or_default();
    if !has_pragma_once(text) {
        failures.push(format!("{header}: no #pragma once"));
    }
    for defines in builds_for(header) {
        for arch in HEADER_ARCHES {
            for dtype in DType::ALL {
                let req = CompileRequest {
                    source: header,
                    dtype,
                    defines: &defines,
                    arch,
                };
                builds += 1;
                if let Err(e) = compile(&req) {
                    // One failure a header: its other builds would mostly say the same.
                    failures.push(format!("{header} alone ({arch} {dtype} {defines:?}): {e}"));
                    return (builds, failures);
                }
            }
        }
    }
    let rows = rows_for(header);
    let needs: Vec<Define> = rows.iter().flat_map(|r| r.needs.iter().copied()).collect();
    if needs.is_empty() {
        return (builds, failures);
    }
    let why: Vec<&str> = rows.iter().map(|r| r.why).collect();
    let req = CompileRequest {
        source: header,
        dtype: DType::F16,
        defines: &[],
        arch: HEADER_ARCHES[0],
    };
    match compile(&req) {
        Err(Error::Compile { log, .. }) if names_a_need(&log, &needs) => {}
        Err(e) => failures.push(format!(
            "{header} without {needs:?} ({}) must stop at an #error naming one of them, got: {e}",
            why.join("; ")
        )),
        // A folder's row may cover a header that needs none of it (a trace part, say).
        Ok(_) if rows.iter().all(|r| r.path.ends_with('/')) => {}
        Ok(_) => failures.push(format!(
            "{header} compiles without {needs:?}: take them off its HEADER_DEFINES row"
        )),
    }
    (builds, failures)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_headers_are_whatever_the_folder_holds() {
        let sources = [
            ("gen5_hopper/new_part.cuh", ""),
            ("gen5_persistent_hopper.cu", ""),
            ("common/types.cuh", ""),
        ];
        assert_eq!(
            headers(&sources),
            vec!["common/types.cuh", "gen5_hopper/new_part.cuh"]
        );
        assert!(headers(KERNEL_SOURCES).contains(&"gen5_hopper/config.cuh"));
    }

    #[test]
    fn a_folder_row_covers_its_folder_only() {
        let fwd = builds_for("gen5_hopper/new_part.cuh");
        assert_eq!(fwd[0], vec![("FC_HEAD_DIM".to_string(), "128".to_string())]);
        assert!(fwd.len() > 1);
        // gen5_hopper_bwd/ is not under gen5_hopper/: one row each.
        assert_eq!(rows_for("gen5_hopper_bwd/config.cuh").len(), 1);
        assert_eq!(builds_for("common/types.cuh"), vec![Vec::new()]);
    }

    #[test]
    fn a_switch_overrides_a_need() {
        let merged = with_switch(
            &[("FC_HEAD_DIM", "128")],
            &[("FC_HEAD_DIM", "64"), ("FC_HOPPER_OVERLAP", "1")],
        );
        let expect: Vec<(String, String)> = [("FC_HEAD_DIM", "64"), ("FC_HOPPER_OVERLAP", "1")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(merged, expect);
    }

    #[test]
    fn every_row_names_a_header() {
        let all = headers(KERNEL_SOURCES);
        for row in HEADER_DEFINES {
            assert!(
                all.iter()
                    .any(|h| rows_for(h).iter().any(|r| r.path == row.path)),
                "HEADER_DEFINES row {} matches no header",
                row.path
            );
        }
    }

    #[test]
    fn a_missing_define_must_be_named() {
        let needs = [("FC_HEAD_DIM", "128")];
        let error = "gen5_hopper/config.cuh(7): catastrophic error: #error directive: \
\"compile with -DFC_HEAD_DIM=64 or 128\"";
        assert!(names_a_need(error, &needs));
        let undefined =
            "gen5_hopper/config.cuh(140): error: identifier \"FC_HEAD_DIM\" is undefined";
        assert!(!names_a_need(undefined, &needs));
        assert!(has_pragma_once("// x\n#pragma once\n"));
        assert!(!has_pragma_once("// #pragma once is missing\n"));
    }
}
