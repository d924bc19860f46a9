//! The decode anchors: peer timings from an earlier lease (`../shared/anchors`), a cross-check
//! column beside the peers timed in the run.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::DecodeInfo;
use crate::bench::anchors::{file_dtype, measurement_lines, read_anchor_files};
use crate::bench::modes::cases::PeerShape;

/// A peer number from the anchor file (`B=8 Hq=32 Hkv=8 Sq=1 Sk=8192 D=128 bf16 sdpa_flash
/// 95.5 us 2811 GB/s`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecodeAnchor {
    pub shape: PeerShape,
    pub backend: String,
    pub us: f64,
    /// As the file gives it.
    pub gbps: Option<f64>,
    pub file: String,
}

impl DecodeInfo {
    pub(super) fn anchors_for<'a>(
        &'a self,
        shape: &'a PeerShape,
    ) -> impl Iterator<Item = &'a DecodeAnchor> {
        self.anchors.iter().filter(move |a| a.shape == *shape)
    }
}

/// Parses one anchor file. Lines need B=, Hq=, Hkv=, Sq=, Sk=, D= and "<µs> us"; the dtype is the
/// `bf16`/`f16` word (else bf16 when the file name or a `#` line says so, else f16), the backend
/// the first other word, causal only with a `causal=1` word. Other lines (the dense anchors'
/// `H=` lines among them) are skipped.
pub fn parse_anchors(file: &str, text: &str) -> Vec<DecodeAnchor> {
    let default_dtype = file_dtype(file, text);
    let mut out = Vec::new();
    for w in measurement_lines(text) {
        let (Some(b), Some(hq), Some(hkv), Some(sq), Some(sk), Some(d)) = (
            w.count("B"),
            w.count("Hq"),
            w.count("Hkv"),
            w.count("Sq"),
            w.count("Sk"),
            w.count("D"),
        ) else {
            continue;
        };
        let Some(us) = w.number_before("us") else {
            continue;
        };
        let Some(backend) = w.first_name() else {
            continue;
        };
        out.push(DecodeAnchor {
            shape: PeerShape {
                batch: b,
                heads: hq,
                heads_kv: hkv,
                seq: sq,
                seq_k: sk,
                head_dim: d,
                causal: w.count("causal").is_some_and(|c| c != 0),
                dtype: w.dtype().unwrap_or(default_dtype),
            },
            backend: backend.to_string(),
            us,
            gbps: w.number_before("GB/s"),
            file: file.into(),
        });
    }
    out
}

/// Where to look for anchors: `--anchors DIR`, else `../shared/anchors` or `shared/anchors`
/// under the current directory where one exists.
pub fn anchor_dir(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(d) = explicit {
        return Some(d.to_path_buf());
    }
    ["../shared/anchors", "shared/anchors"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_dir())
}

/// The decode anchors of every `*.txt` under `dir`, and a note naming the files they came from.
pub fn load_anchors(dir: &Path) -> Result<(Vec<DecodeAnchor>, String)> {
    let mut all = Vec::new();
    let mut used = Vec::new();
    for f in read_anchor_files(dir, "the anchors directory")? {
        let found = parse_anchors(&f.name, &f.text);
        if !found.is_empty() {
            let n = found.len();
            let s = if n == 1 { "" } else { "s" };
            used.push(format!("{} ({n} number{s})", f.path.display()));
            all.extend(found);
        }
    }
    let note = if used.is_empty() {
        format!("no decode anchors in {}", dir.display())
    } else {
        format!("anchors: {}", used.join(", "))
    };
    Ok((all, note))
}

#[cfg(test)]
mod tests {
    use super::super::tests::ANCHORS;
    use super::super::{gbps, kv_bytes, ROWS};
    use super::*;
    use flashcore::DType;

    #[test]
    fn anchor_lines_parse() {
        let a = parse_anchors("h100-decode-peers.txt", ANCHORS);
        assert_eq!(a.len(), 3, "{a:#?}");
        assert_eq!(a[0].shape, ROWS[1].peer_shape());
        assert_eq!(
            (a[0].backend.as_str(), a[0].us, a[0].gbps),
            ("sdpa_flash", 95.5, Some(2811.0))
        );
        assert_eq!(a[1].backend, "sdpa_cudnn");
        assert_eq!(a[2].shape, ROWS[6].peer_shape());
        assert_eq!(a[2].file, "h100-decode-peers.txt");
        // The dense anchor files have no decode lines.
        let dense = "B=1 H=8 S=512 D=64 causal=0 cudnn  21.2 us  25.3 TFLOP/s rel=2.74e-04\n";
        assert!(parse_anchors("h100-torch-sdpa-fp16.txt", dense).is_empty());
        // A causal word and another dtype.
        let c = parse_anchors(
            "x.txt",
            "B=1 Hq=8 Hkv=8 Sq=4 Sk=4 D=64 f16 causal=1 sdpa_flash 3.0 us\n",
        );
        assert_eq!(c.len(), 1);
        assert!(c[0].shape.causal);
        assert_eq!(c[0].shape.dtype, DType::F16);
        assert_eq!(c[0].gbps, None);
    }

    #[test]
    fn anchor_files_load_from_a_directory() {
        let dir = std::env::temp_dir().join(format!("decode-anchors-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("h100-decode-peers.txt"), ANCHORS).unwrap();
        std::fs::write(
            dir.join("h100-torch-sdpa-fp16.txt"),
            "B=1 H=8 S=512 D=64 causal=0 cudnn 21.2 us\n",
        )
        .unwrap();
        std::fs::write(dir.join("notes.md"), ANCHORS).unwrap();
        let (a, note) = load_anchors(&dir).unwrap();
        assert_eq!(a.len(), 3);
        assert!(note.contains("h100-decode-peers.txt (3 numbers)"), "{note}");
        assert!(!note.contains("fp16"), "{note}");
        assert_eq!(anchor_dir(Some(&dir)), Some(dir.clone()));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(load_anchors(&dir).is_err());
    }

    #[test]
    fn the_shared_decode_anchors_parse_if_present() {
        for dir in ["/work/shared/anchors", "../../shared/anchors"] {
            let dir = Path::new(dir);
            if !dir.join("h100-decode-peers.txt").is_file() {
                continue;
            }
            let (a, _) = load_anchors(dir).unwrap();
            assert!(a.len() >= 8, "{}", a.len());
            for x in &a {
                if let Some(g) = x.gbps {
                    // The file's GB/s is our formula on its µs.
                    let kv = kv_bytes(x.shape.batch, x.shape.heads_kv, x.shape.seq_k, 128);
                    assert!((gbps(kv, x.us) / g - 1.0).abs() < 0.01, "{x:?}");
                }
                assert!(ROWS.iter().any(|r| r.peer_shape() == x.shape), "{x:?}");
            }
            return;
        }
    }
}
