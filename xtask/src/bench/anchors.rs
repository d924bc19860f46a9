//! Anchor files: peer timings from an earlier run on the same kind of device (`--anchors DIR`,
//! `shared/anchors`), one line of `key=value` and plain words per measurement, `#` lines for the
//! method. Three kinds of line share the files (dense forward, backward, decode); this module
//! reads the files and the words, and each kind's reader (`peers`, `backward`, `decode`) picks
//! its own fields out of them.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use flashcore::DType;

use super::suite::Shape;

/// One anchor file as read.
pub struct AnchorFile {
    /// The file name, which may carry the dtype ("…-bf16-….txt").
    pub name: String,
    pub path: PathBuf,
    pub text: String,
}

/// Every `*.txt` under `dir`, by name. `what` names the directory in the error ("--anchors").
pub fn read_anchor_files(dir: &Path, what: &str) -> Result<Vec<AnchorFile>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {what} {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let name = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .to_string();
            Ok(AnchorFile { name, path, text })
        })
        .collect()
}

/// The `#` lines of a file (its method), white space before the `#` dropped.
pub fn comment_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('#'))
}

/// The dtype of the lines that do not name one: bf16 when the file name or a `#` line says
/// so, else f16.
pub fn file_dtype(file: &str, text: &str) -> DType {
    let header_bf16 = comment_lines(text).any(|l| l.contains("bf16") || l.contains("bfloat16"));
    if file.contains("bf16") || header_bf16 {
        DType::Bf16
    } else {
        DType::F16
    }
}

/// The measurement lines of a file (every line but the `#` ones), as words.
pub fn measurement_lines(text: &str) -> impl Iterator<Item = Words<'_>> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .map(|l| Words(l.split_whitespace().collect()))
}

/// The words of one line.
pub struct Words<'a>(pub Vec<&'a str>);

impl<'a> Words<'a> {
    /// The count of `key=N`.
    pub fn count(&self, key: &str) -> Option<usize> {
        self.0
            .iter()
            .find_map(|t| t.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
            .and_then(|v| v.parse().ok())
    }

    /// The dense shape of a forward or backward line: `B=`, `H=`, `S=`, `D=` and `causal=`, in
    /// `dtype`.
    pub fn dense_shape(&self, dtype: DType) -> Option<Shape> {
        Some(Shape {
            batch: self.count("B")?,
            heads: self.count("H")?,
            seq: self.count("S")?,
            head_dim: self.count("D")?,
            causal: self.count("causal")? != 0,
            dtype,
        })
    }

    /// The number of `prefix…` (e.g. `rel=2.7e-04`).
    pub fn number_after(&self, prefix: &str) -> Option<f64> {
        self.0
            .iter()
            .find_map(|t| t.strip_prefix(prefix))
            .and_then(|v| v.parse().ok())
    }

    pub fn has(&self, word: &str) -> bool {
        self.0.contains(&word)
    }

    /// The number just before the first `unit` ("95.5 us").
    pub fn number_before(&self, unit: &str) -> Option<f64> {
        let i = self.0.iter().position(|t| *t == unit)?;
        self.0[i.checked_sub(1)?].parse().ok()
    }

    /// The number between `tag` and `unit` ("bwd 606.4 us").
    pub fn number_between(&self, tag: &str, unit: &str) -> Option<f64> {
        self.0
            .windows(3)
            .find(|w| w[0] == tag && w[2] == unit)
            .and_then(|w| w[1].parse().ok())
    }

    /// The `n`-th word after the `causal=` one (1: the backend of a dense or backward line).
    pub fn after_causal(&self, n: usize) -> Option<&'a str> {
        let i = self.0.iter().position(|t| t.starts_with("causal="))?;
        self.0.get(i + n).copied()
    }

    /// A dtype the line names (`bf16`, `f16`).
    pub fn dtype(&self) -> Option<DType> {
        self.0.iter().find_map(|t| t.parse().ok())
    }

    /// The first plain name: no `=`, no dtype, no number (the backend of a decode line).
    pub fn first_name(&self) -> Option<&'a str> {
        self.0.iter().copied().find(|t| {
            !t.contains('=')
                && t.parse::<DType>().is_err()
                && t.parse::<f64>().is_err()
                && t.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        })
    }
}

/// Peer names in the anchor files to the peer script's backend names.
pub fn backend_name(name: &str, file: &str) -> String {
    match name {
        "flash" => "sdpa_flash".into(),
        "cudnn" => "sdpa_cudnn".into(),
        "efficient" => "sdpa_efficient".into(),
        "fa3" if file.contains("jax") => "fa3-jax".into(),
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_give_the_fields_of_every_kind_of_line() {
        let w = Words(
            "B=4 H=16 S=2048 D=64 causal=0 fa3 fwd 234.5 us bwd 606.4 us rel=2.5e-04"
                .split_whitespace()
                .collect(),
        );
        assert_eq!(
            (w.count("B"), w.count("causal"), w.count("Hq")),
            (Some(4), Some(0), None)
        );
        assert_eq!(w.number_before("us"), Some(234.5));
        assert_eq!(w.number_between("bwd", "us"), Some(606.4));
        assert_eq!(w.after_causal(1), Some("fa3"));
        assert_eq!(w.number_after("rel="), Some(2.5e-4));
        assert!(w.has("bwd") && w.dtype().is_none());
        assert_eq!(w.first_name(), Some("fa3"));
        assert_eq!(backend_name("fa3", "h100-fa3-jax.txt"), "fa3-jax");
        assert_eq!(file_dtype("x.txt", "  # dtype bfloat16\nB=1"), DType::Bf16);
        assert_eq!(file_dtype("x-bf16.txt", ""), DType::Bf16);
        assert_eq!(file_dtype("x.txt", "B=1 bf16"), DType::F16);
        assert_eq!(measurement_lines("# m\nB=1\n\n").count(), 2);
    }
}
