//! Shape suites for `bench-all`: which (B, H, S, D) x causal x dtype problems are timed.

use flashcore::{AttentionProblem, DType, Layout};
use serde::{Deserialize, Serialize};

/// One benchmarked problem: self-attention, seq_q = seq_k = `seq`, heads_q = heads_kv = `heads`,
/// default scale, the layout given on the command line (BHSD unless told otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shape {
    pub batch: usize,
    pub heads: usize,
    pub seq: usize,
    pub head_dim: usize,
    pub causal: bool,
    #[serde(with = "dtype_name")]
    pub dtype: DType,
}

impl Shape {
    pub fn problem(&self, layout: Layout) -> AttentionProblem {
        AttentionProblem::new(self.batch, self.heads, self.seq, self.head_dim)
            .with_causal(self.causal)
            .with_dtype(self.dtype)
            .with_layout(layout)
    }

    /// 4·B·H·S²·D, halved for causal (`AttentionProblem::flops`).
    pub fn flops(&self) -> f64 {
        self.problem(Layout::Bhsd).flops()
    }

    /// "1,8,512,64": B,H,S,D as a table cell.
    pub fn bhsd(&self) -> String {
        format!(
            "{},{},{},{}",
            self.batch, self.heads, self.seq, self.head_dim
        )
    }

    /// "B=1 H=8 S=512 D=64 f16 causal" for progress lines.
    pub fn label(&self) -> String {
        format!(
            "B={} H={} S={} D={} {}{}",
            self.batch,
            self.heads,
            self.seq,
            self.head_dim,
            self.dtype,
            if self.causal { " causal" } else { "" }
        )
    }

    /// "b4-h16-s2048-d64-f16-c1": what `--case` matches in the backward passes.
    pub fn key(&self) -> String {
        format!(
            "b{}-h{}-s{}-d{}-{}-c{}",
            self.batch, self.heads, self.seq, self.head_dim, self.dtype, self.causal as u8
        )
    }

    /// The peer script's shape object.
    pub fn peer_json(&self) -> serde_json::Value {
        serde_json::json!({
            "batch": self.batch,
            "heads": self.heads,
            "seq": self.seq,
            "head_dim": self.head_dim,
            "causal": self.causal,
            "dtype": self.dtype.name(),
        })
    }
}

pub mod dtype_name {
    use flashcore::DType;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &DType, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(d.name())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DType, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Suite {
    /// The mission shape alone: (1, 8, 512, 64).
    Mission,
    /// Six shapes from launch-bound to large: what the README's results table shows.
    Ladder,
    /// The ladder plus small-sequence and many-heads shapes.
    Full,
    /// Varlen prefill: 16 packed causal sequences (lengths 128..=4096 from --seed), Hq=32,
    /// Hkv=8, D=128, bf16, against a dense batch of equal real FLOPs and the peers on the padded
    /// batch.
    Varlen,
    /// Paged KV cache (block sizes 16, 64, 256, shuffled tables) against the same contiguous
    /// cache: decode, chunked prefill (capacity 8192) and a 4096-token prefill.
    Paged,
    /// Sliding window 4096 at 32k tokens against full causal 32k and a dense Sk=4096 run.
    Window,
    /// Decode and its neighbours (Sq = 1, 4, 128 against caches of 2k..32k keys, GQA and MHA),
    /// each on a contiguous and a paged (block 64) cache, as graph replays, beside the peers and
    /// a device-to-device copy of the same bytes (the bandwidth ceiling).
    Decode,
    /// Context parallelism over every visible GPU (ring and all-gather, forward and backward,
    /// up to a million causal tokens) against the single-GPU kernel at equal work per GPU.
    Cp,
    /// The fp8 forward: e4m3 Q, K, V (descales per sequence and KV head, O bf16) at
    /// (1,16,16384,128) and (8,32,4096,128), against flashcore's bf16 at the same shape and
    /// cuDNN's fp8 SDPA in the same run (bench/peers/cudnn_fp8.py).
    Fp8,
    /// With `--pass bwd`: each backward mode (windows, varlen, softcap, ALiBi) against a dense
    /// backward of the same visible pairs, both timed in the run (`bench::backward_modes`).
    BwdModes,
}

impl Suite {
    /// The inference-mode suites (`bench::modes`), which build their own problems.
    pub fn is_modes(self) -> bool {
        matches!(
            self,
            Suite::Varlen | Suite::Paged | Suite::Window | Suite::Decode
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CausalSel {
    Both,
    On,
    Off,
}

impl CausalSel {
    pub fn values(self) -> &'static [bool] {
        match self {
            CausalSel::Both => &[false, true],
            CausalSel::On => &[true],
            CausalSel::Off => &[false],
        }
    }
}

/// The mission shape.
pub const MISSION: [(usize, usize, usize, usize); 1] = [(1, 8, 512, 64)];

pub use flashcore::LADDER;

/// B, H, S, D of `--suite fp8` (MHA, head dim 128: the e4m3 build's): the ladder's two largest
/// prefill shapes, one long sequence and one wide batch.
pub const FP8_ROWS: [(usize, usize, usize, usize); 2] = [(1, 16, 16384, 128), (8, 32, 4096, 128)];

/// Added to the ladder by `--suite full` (all three also have peer anchors).
pub const FULL_EXTRA: [(usize, usize, usize, usize); 3] =
    [(16, 16, 1024, 64), (1, 32, 1024, 128), (4, 16, 512, 64)];

pub fn suite_bhsd(suite: Suite) -> Vec<(usize, usize, usize, usize)> {
    match suite {
        Suite::Mission => MISSION.to_vec(),
        Suite::Ladder => LADDER.to_vec(),
        Suite::Full => LADDER.iter().chain(FULL_EXTRA.iter()).copied().collect(),
        // Not B,H,S,D lists: see `bench::modes::plan`.
        Suite::Fp8 => FP8_ROWS.to_vec(),
        Suite::Varlen
        | Suite::Paged
        | Suite::Window
        | Suite::Decode
        | Suite::Cp
        | Suite::BwdModes => vec![],
    }
}

/// Every (B, H, S, D) x causal x dtype, shape-major: for each (B, H, S, D), each dtype, causal
/// off then on. Duplicates are dropped (keeping the first).
pub fn expand(
    bhsd: &[(usize, usize, usize, usize)],
    causal: CausalSel,
    dtypes: &[DType],
) -> Vec<Shape> {
    let mut out: Vec<Shape> = Vec::new();
    for &(batch, heads, seq, head_dim) in bhsd {
        for &dtype in dtypes {
            for &c in causal.values() {
                let s = Shape {
                    batch,
                    heads,
                    seq,
                    head_dim,
                    causal: c,
                    dtype,
                };
                if !out.contains(&s) {
                    out.push(s);
                }
            }
        }
    }
    out
}

/// The shapes whose [`Shape::key`] contains one of `filters` (all of them when there is none).
pub fn filter_by_key(shapes: Vec<Shape>, filters: &[String]) -> Vec<Shape> {
    if filters.is_empty() {
        return shapes;
    }
    shapes
        .into_iter()
        .filter(|s| {
            let key = s.key();
            filters.iter().any(|f| key.contains(f.as_str()))
        })
        .collect()
}

/// Parses `--shape B,H,S,D` (also `BxHxSxD`).
pub fn parse_bhsd(s: &str) -> Result<(usize, usize, usize, usize), String> {
    let parts: Vec<&str> = s.split([',', 'x', 'X']).map(str::trim).collect();
    let nums: Result<Vec<usize>, _> = parts.iter().map(|p| p.parse::<usize>()).collect();
    match nums {
        Ok(v) if v.len() == 4 && v.iter().all(|&x| x > 0) => Ok((v[0], v[1], v[2], v[3])),
        _ => Err(format!(
            "'{s}' is not B,H,S,D (four positive integers, e.g. 1,8,512,64)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suites_nest() {
        assert_eq!(suite_bhsd(Suite::Mission), vec![(1, 8, 512, 64)]);
        let ladder = suite_bhsd(Suite::Ladder);
        assert_eq!(ladder.len(), 6);
        assert_eq!(ladder[0], MISSION[0]);
        let full = suite_bhsd(Suite::Full);
        assert!(ladder.iter().all(|s| full.contains(s)));
        assert!(full.len() > ladder.len());
    }

    #[test]
    fn expansion_is_shape_major_and_deduplicated() {
        let v = expand(
            &[(1, 8, 512, 64), (1, 8, 512, 64), (2, 2, 64, 32)],
            CausalSel::Both,
            &[DType::F16, DType::Bf16],
        );
        assert_eq!(v.len(), 8);
        assert_eq!((v[0].causal, v[0].dtype), (false, DType::F16));
        assert_eq!((v[1].causal, v[1].dtype), (true, DType::F16));
        assert_eq!((v[2].causal, v[2].dtype), (false, DType::Bf16));
        assert_eq!(v[4].seq, 64);
        assert_eq!(expand(&LADDER, CausalSel::On, &[DType::F16]).len(), 6);
    }

    #[test]
    fn flops_halve_for_causal() {
        let s = expand(&MISSION, CausalSel::Both, &[DType::F16]);
        assert_eq!(s[0].flops(), 4.0 * 8.0 * 512.0 * 512.0 * 64.0);
        assert_eq!(s[1].flops(), s[0].flops() / 2.0);
    }

    #[test]
    fn case_filters_match_shape_keys() {
        let all = expand(&LADDER, CausalSel::Both, &[DType::F16]);
        assert_eq!(all[3].key(), "b4-h16-s2048-d64-f16-c1");
        assert_eq!(filter_by_key(all.clone(), &[]).len(), 12);
        let picked = filter_by_key(all.clone(), &["s2048-d128".into(), "b1-h8-".into()]);
        let keys: Vec<String> = picked.iter().map(Shape::key).collect();
        assert_eq!(
            keys,
            [
                "b1-h8-s512-d64-f16-c0",
                "b1-h8-s512-d64-f16-c1",
                "b4-h16-s2048-d128-f16-c0",
                "b4-h16-s2048-d128-f16-c1"
            ]
        );
        assert_eq!(filter_by_key(all, &["c1".into()]).len(), 6);
    }

    #[test]
    fn shapes_parse_and_round_trip_json() {
        assert_eq!(parse_bhsd("1,8,512,64").unwrap(), (1, 8, 512, 64));
        assert_eq!(parse_bhsd("2x16x8192x64").unwrap(), (2, 16, 8192, 64));
        assert!(parse_bhsd("1,8,512").is_err());
        assert!(parse_bhsd("1,0,512,64").is_err());
        let s = expand(&MISSION, CausalSel::On, &[DType::Bf16])[0];
        let j = serde_json::to_string(&s).unwrap();
        assert!(j.contains("\"dtype\":\"bf16\""), "{j}");
        assert_eq!(serde_json::from_str::<Shape>(&j).unwrap(), s);
        assert_eq!(s.peer_json()["dtype"], "bf16");
    }
}
