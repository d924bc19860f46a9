//! `aot-modules.txt`, the list of kernel modules the `aot` feature compiles to cubins, must be
//! what the compiled-in generations plan for. This test derives the list from the generations'
//! `plan` over a grid of problems on a synthetic device per architecture and compares it with
//! the file; to refresh the file after a plan changes its defines:
//!
//! `FLASHCORE_UPDATE_AOT_MANIFEST=1 cargo test -p flashcore --test aot_manifest`
//!
//! A stale file is not a correctness problem (a module it lacks is compiled by NVRTC at run
//! time), only a lost AOT benefit; this test keeps it from going stale silently.

use flashcore::{AttentionProblem, DType, DeviceInfo, HeadDims, KvStorage, Modes};

/// The core's NVRTC architecture names (`compile::arch_for`) the build covers.
const ARCHS: [((u32, u32), &str); 4] = [
    ((8, 0), "compute_80"),
    ((8, 6), "compute_86"),
    ((8, 9), "compute_89"),
    ((9, 0), "compute_90a"),
];

/// Synthetic devices per architecture: plans may read shared memory, SM count or L2 size, and
/// any of those that reaches a define makes another module.
fn devices(cc: (u32, u32)) -> Vec<DeviceInfo> {
    let dev = |sm: u32, optin_kb: u32, l2_mb: u32| DeviceInfo {
        ordinal: 0,
        name: format!("sm_{}{} (synthetic)", cc.0, cc.1),
        compute_capability: cc,
        sm_count: sm,
        max_shared_memory_per_block: 48 * 1024,
        max_shared_memory_per_block_optin: optin_kb * 1024,
        l2_bytes: l2_mb << 20,
        total_memory: 80 << 30,
    };
    match cc {
        (8, 0) => vec![dev(108, 163, 40)],                          // A100
        (8, 6) => vec![DeviceInfo::synthetic_sm86()],               // RTX 30xx, A10
        (8, 9) => vec![dev(58, 99, 48), dev(128, 99, 72)],          // L4, RTX 4090
        _ => vec![DeviceInfo::synthetic_h100(), dev(132, 227, 60)], // H100, H200
    }
}

fn head_dims(h: &HeadDims) -> Vec<usize> {
    match h {
        HeadDims::List(l) => l.to_vec(),
        h => [32, 64, 96, 128, 160, 192, 224, 256]
            .into_iter()
            .filter(|d| h.contains(*d))
            .collect(),
    }
}

#[derive(Clone, Copy)]
enum Variant {
    Dense,
    Window,
    Pages16,
    /// One query against the size's keys: the decode plan, split where the keys are long enough
    /// (a split plan's build has the L2 prefetch on sm_90).
    Decode,
    /// Packed queries and keys: in the batch-invariant mode, the plan that routes decode-shaped
    /// sequences to the decode kernel beside a persistent one.
    Varlen,
    /// Decode over a paged cache of this many rows a page: the decode kernel builds a loader per
    /// cache (`FC_DECODE_KV_CACHE`), pages of whole key tiles (64) and smaller ones (16) apart.
    PagedDecode(usize),
}

impl Variant {
    fn problem(self, b: usize, h: usize, s: usize, d: usize) -> AttentionProblem {
        let p = AttentionProblem::new(b, h, s, d);
        match self {
            Variant::Dense => p,
            Variant::Decode => AttentionProblem::new(b, h, 1, d).with_kv(h, s),
            Variant::Varlen => p.with_modes(Modes {
                packed_q: Some(b * s),
                kv: KvStorage::Packed { total_k: b * s },
                ..Modes::default()
            }),
            Variant::Window => p.with_modes(Modes {
                window_left: Some(64),
                ..Modes::default()
            }),
            Variant::Pages16 => paged(p, b, h, s, 16),
            Variant::PagedDecode(block_size) => {
                paged(AttentionProblem::new(b, h, 1, d), b, h, s, block_size)
            }
        }
    }
}

/// `p` with its `s` keys of each of `b` sequences in a paged cache of `block_size`-row pages.
fn paged(p: AttentionProblem, b: usize, h: usize, s: usize, block_size: usize) -> AttentionProblem {
    let pages = s.div_ceil(block_size);
    p.with_kv(h, block_size * pages).with_modes(Modes {
        kv: KvStorage::Paged {
            num_blocks: b * pages,
            block_size,
            max_blocks_per_seq: pages,
        },
        seqused_k: true,
        ..Modes::default()
    })
}

fn manifest() -> String {
    let sizes = [
        (1, 8, 512),
        (4, 16, 2048),
        (8, 32, 4096),
        (1, 16, 16384),
        (1, 1, 1),
        (2, 4, 130),
    ];
    let mut lines: Vec<String> = Vec::new();
    for (cc, arch) in ARCHS {
        for dtype in DType::ALL {
            // The core's own kernels: the answer for problems without keys, the KV-cache
            // append (`forward_with_kvcache` with k_new/v_new), and the merge and sums of
            // partial results (`partials`, for context parallelism).
            lines.push(format!("core_fill.cu {arch} {dtype}"));
            lines.push(format!("core_append_kv.cu {arch} {dtype}"));
            lines.push(format!("core_partials.cu {arch} {dtype}"));
        }
        for dev in devices(cc) {
            for k in flashcore::kernels() {
                let caps = k.capabilities();
                for &dtype in caps.dtypes {
                    for d in head_dims(&caps.head_dims) {
                        for causal in [false, true] {
                            if causal && !caps.causal {
                                continue;
                            }
                            for &layout in caps.layouts {
                                // Dense, and with modes: plans build the mode-aware
                                // variant of a kernel for any non-dense problem (varlen, KV
                                // cache, paged, window, softcap, ALiBi alike), so a window
                                // stands for all of them; but pages of fewer than 64 rows
                                // get a Hopper build of their own (FC_HOPPER_SPREAD_PAGES).
                                // Each in the default and the batch-invariant mode.
                                let variants = [
                                    Variant::Dense,
                                    Variant::Window,
                                    Variant::Pages16,
                                    Variant::Decode,
                                    Variant::PagedDecode(16),
                                    Variant::PagedDecode(64),
                                    Variant::Varlen,
                                ];
                                let cases = sizes.into_iter().flat_map(|sz| {
                                    variants
                                        .map(|v| (sz, v))
                                        .into_iter()
                                        .flat_map(|(sz, v)| [false, true].map(|bi| (sz, v, bi)))
                                });
                                for ((b, h, s), variant, bi) in cases {
                                    let p = variant
                                        .problem(b, h, s, d)
                                        .with_dtype(dtype)
                                        .with_causal(causal)
                                        .with_layout(layout)
                                        .with_batch_invariant(bi);
                                    let Ok(plan) = k.plan(&p, &dev) else { continue };
                                    for l in plan.launches {
                                        let mut line = format!("{} {arch} {dtype}", l.source);
                                        for (key, v) in &l.defines {
                                            assert!(
                                                !key.contains(char::is_whitespace)
                                                    && !v.contains(char::is_whitespace),
                                                "{key}={v}: the manifest splits on whitespace"
                                            );
                                            line.push_str(&format!(" {key}={v}"));
                                        }
                                        lines.push(line);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    lines.sort();
    lines.dedup();
    let mut out = String::from(
        "# Kernel modules the `aot` feature compiles to cubins: <source> <NVRTC arch> <dtype> [DEFINE=VALUE ...]\n\
         # (defines in the plan's order). Generated by tests/aot_manifest.rs; refresh with\n\
         # FLASHCORE_UPDATE_AOT_MANIFEST=1 cargo test -p flashcore --test aot_manifest\n",
    );
    for l in lines {
        out.push_str(&l);
        out.push('\n');
    }
    out
}

// The file lists the modules of every default generation: other feature sets plan fewer.
#[cfg(all_generations)]
#[test]
fn aot_manifest_is_current() {
    // Plans read these at run time; the manifest is for the defaults.
    for v in [
        "FLASHCORE_HOPPER_OVERLAP",
        "FLASHCORE_HOPPER_DEBUG",
        "FLASHCORE_HOPPER_TRACE",
    ] {
        if std::env::var_os(v).is_some() {
            eprintln!("{v} is set: not comparing the AOT manifest");
            return;
        }
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("aot-modules.txt");
    let want = manifest();
    if std::env::var_os("FLASHCORE_UPDATE_AOT_MANIFEST").is_some() {
        std::fs::write(&path, &want).unwrap();
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "{} is stale (a plan's defines or a generation changed); refresh it with\n  \
         FLASHCORE_UPDATE_AOT_MANIFEST=1 cargo test -p flashcore --test aot_manifest",
        path.display()
    );
}

/// With `aot`: the lookup `kernels()` registers with the core answers every manifest line of the
/// architectures the build compiled, with a cubin, so a stale or failed build is caught here
/// rather than as a slow first call on a GPU. (Without a compiler at build time the build embeds
/// nothing and says so; CI sets `FLASHCORE_AOT_REQUIRE=1`, which makes that a build error.)
#[cfg(feature = "aot")]
#[test]
fn aot_images_cover_the_manifest_for_the_built_archs() {
    use flashcore::compile::{prebuilt, CompileRequest};

    eprintln!("aot: {}", flashcore::aot::status());
    let archs = flashcore::aot::archs();
    if archs.is_empty() {
        assert!(flashcore::aot::images().is_empty());
        assert!(
            flashcore::aot::status().contains("NVRTC at run time"),
            "{}",
            flashcore::aot::status()
        );
        return;
    }
    let _ = flashcore::kernels(); // registers the lookup with the core
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("aot-modules.txt");
    let text = std::fs::read_to_string(&path).unwrap();
    let (mut covered, mut missing) = (0usize, Vec::new());
    for line in text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
    {
        let mut f = line.split_whitespace();
        let (source, arch, dtype) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
        if !archs.contains(&arch) {
            continue;
        }
        let dtype: DType = dtype.parse().unwrap();
        let defines: Vec<(String, String)> = f
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                (k.to_string(), v.to_string())
            })
            .collect();
        let req = CompileRequest {
            source,
            dtype,
            defines: &defines,
            arch,
        };
        match prebuilt(&req) {
            Some(image) => {
                // A CUDA ELF: magic, 64-bit, e_machine EM_CUDA (190).
                assert!(
                    image.len() > 64
                        && image.starts_with(b"\x7fELF\x02")
                        && u16::from_le_bytes([image[18], image[19]]) == 190,
                    "{line}: not a cubin"
                );
                // CUDA 13's ELF ABI (EI_ABIVERSION 8) keeps the SM number in e_flags bits 8-15.
                if image[8] == 8 {
                    let flags = u32::from_le_bytes([image[48], image[49], image[50], image[51]]);
                    let sm: u32 = arch
                        .trim_start_matches("compute_")
                        .trim_end_matches('a')
                        .parse()
                        .unwrap();
                    assert_eq!((flags >> 8) & 0xff, sm, "{line}: cubin for another SM");
                }
                covered += 1;
            }
            None => missing.push(line.to_string()),
        }
    }
    assert!(
        missing.is_empty(),
        "{} manifest lines for {archs:?} have no embedded image (a module failed at build time?):\n{}",
        missing.len(),
        missing.join("\n")
    );
    assert!(covered > 0, "no manifest line for {archs:?}");
    assert_eq!(
        covered,
        flashcore::aot::images().len(),
        "images the manifest does not list"
    );
}
