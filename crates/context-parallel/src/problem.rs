//! One rank's share of a context-parallel attention call.

use flashcore::{AttentionProblem, DType, KvStorage, Modes};

use crate::error::CpError;
use crate::schedule::Sharding;

/// The local shard every rank passes: Q, K, V (and O, dO, gradients) are dense BSHD
/// `[batch, seq_local, heads, head_dim]`, the LSE `[batch, heads_q, seq_local]` (f32, natural
/// log), holding the global rows [`Sharding::global_rows`] names, in that order. The global
/// sequence is `world · seq_local` rows; causal masking is over the global positions.
#[derive(Clone, Debug, PartialEq)]
pub struct CpProblem {
    pub batch: usize,
    pub heads_q: usize,
    pub heads_kv: usize,
    pub seq_local: usize,
    pub head_dim: usize,
    pub dtype: DType,
    pub causal: bool,
    /// None means 1/sqrt(head_dim).
    pub softmax_scale: Option<f32>,
    pub sharding: Sharding,
    /// Packed variable-length sequences (FlashAttention's varlen), forward only: this rank's
    /// rows of each sequence, in order (every rank holds the same number of each sequence's rows,
    /// a multiple of the sharding's parts). Q, K, V and O are then `[Σ rows, heads, head_dim]`,
    /// the LSE `[heads_q, Σ rows]`; `batch` is the number of sequences and `seq_local` the
    /// longest. Set with [`CpProblem::with_varlen`].
    pub seqlens_local: Option<Vec<usize>>,
}

impl CpProblem {
    /// Non-causal, contiguous shards, f16, MHA.
    pub fn new(batch: usize, heads: usize, seq_local: usize, head_dim: usize) -> Self {
        CpProblem {
            batch,
            heads_q: heads,
            heads_kv: heads,
            seq_local,
            head_dim,
            dtype: DType::F16,
            causal: false,
            softmax_scale: None,
            sharding: Sharding::Contiguous,
            seqlens_local: None,
        }
    }

    /// Packed sequences of these local lengths (rows on every rank; each sequence's global
    /// length is `world ·` its local one). Forward only.
    pub fn with_varlen(mut self, local: Vec<usize>) -> Self {
        self.batch = local.len();
        self.seq_local = local.iter().copied().max().unwrap_or(0);
        self.seqlens_local = Some(local);
        self
    }

    /// Each sequence's rows per part (one chunk of the global sequence).
    pub fn chunks(&self) -> Vec<usize> {
        match &self.seqlens_local {
            Some(l) => l.iter().map(|&n| n / self.sharding.parts()).collect(),
            None => vec![self.chunk(); self.batch],
        }
    }

    /// Rows of one rank's shard, all sequences.
    pub fn local_rows(&self) -> usize {
        match &self.seqlens_local {
            Some(l) => l.iter().sum(),
            None => self.batch * self.seq_local,
        }
    }
    /// Causal masking over the global sequence, on zig-zag shards (balanced).
    pub fn causal(mut self) -> Self {
        self.causal = true;
        self.sharding = Sharding::ZigZag;
        self
    }
    pub fn with_dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }
    pub fn with_heads_kv(mut self, heads_kv: usize) -> Self {
        self.heads_kv = heads_kv;
        self
    }
    pub fn with_sharding(mut self, sharding: Sharding) -> Self {
        self.sharding = sharding;
        self
    }
    pub fn with_scale(mut self, scale: f32) -> Self {
        self.softmax_scale = Some(scale);
        self
    }

    pub fn scale(&self) -> f32 {
        self.softmax_scale
            .unwrap_or_else(|| 1.0 / (self.head_dim.max(1) as f32).sqrt())
    }

    /// Rows of one part (a chunk of the global sequence).
    pub fn chunk(&self) -> usize {
        self.seq_local / self.sharding.parts()
    }

    pub fn global_seq(&self, world: usize) -> usize {
        self.seq_local * world
    }

    /// The single-GPU problem of the whole sequence (what `verify --cp` compares with).
    pub fn global_problem(&self, world: usize) -> AttentionProblem {
        AttentionProblem::new(
            self.batch,
            self.heads_q,
            self.global_seq(world),
            self.head_dim,
        )
        .with_kv(self.heads_kv, self.global_seq(world))
        .with_dtype(self.dtype)
        .with_causal(self.causal)
        .with_scale(self.scale())
    }

    /// One block: a part of the queries against a part of a K/V shard (packed sequences: a
    /// varlen problem whose `cu_seqlens` are the chunks' prefix sums, for Q and K alike).
    pub fn block_problem(&self, causal: bool) -> AttentionProblem {
        let c = self.chunk();
        let p = AttentionProblem::new(self.batch, self.heads_q, c, self.head_dim)
            .with_kv(self.heads_kv, c)
            .with_dtype(self.dtype)
            .with_causal(causal)
            .with_scale(self.scale());
        match &self.seqlens_local {
            None => p,
            Some(_) => {
                let total: usize = self.chunks().iter().sum();
                p.with_modes(Modes {
                    packed_q: Some(total),
                    kv: KvStorage::Packed { total_k: total },
                    ..Modes::default()
                })
            }
        }
    }

    /// The blocks' `cu_seqlens` (Q and K): prefix sums of [`CpProblem::chunks`].
    pub fn block_cu_seqlens(&self) -> Vec<i32> {
        let mut cu = vec![0i32];
        for c in self.chunks() {
            cu.push(cu.last().unwrap() + c as i32);
        }
        cu
    }

    /// Elements of a local Q (or O) and K (or V) tensor.
    pub fn q_len(&self) -> usize {
        self.local_rows() * self.heads_q * self.head_dim
    }
    pub fn kv_len(&self) -> usize {
        self.local_rows() * self.heads_kv * self.head_dim
    }
    pub fn lse_len(&self) -> usize {
        self.heads_q * self.local_rows()
    }

    /// Everything that must hold before anything is allocated or sent. Every rank checks the
    /// same problem, so they all refuse it together.
    pub fn validate(&self, world: usize) -> Result<(), CpError> {
        let bad = |m: String| Err(CpError::Invalid(m));
        if world == 0 {
            return bad("a world of 0 ranks".into());
        }
        if self.causal && self.sharding == Sharding::Contiguous && world > 1 {
            // Correct, but rank r would wait on rank world-1 for most of every step.
            return bad(
                "causal attention over contiguous shards leaves the early ranks idle: use \
                 Sharding::ZigZag (CpProblem::causal() does)"
                    .into(),
            );
        }
        if let Some(l) = &self.seqlens_local {
            let parts = self.sharding.parts();
            if l.is_empty() || l.iter().any(|&n| n == 0 || !n.is_multiple_of(parts)) {
                return bad(format!(
                    "packed sequences need a positive multiple of {parts} local rows each ({} \
                     sharding), got {l:?}",
                    self.sharding.name()
                ));
            }
            if l.iter().sum::<usize>() > i32::MAX as usize / world.max(1) {
                return bad("packed sequences past 2^31 rows in all".into());
            }
            return self
                .block_problem(self.causal)
                .validate()
                .map_err(|e| flashcore::Error::from(e).into());
        }
        if self.seq_local == 0 || !self.seq_local.is_multiple_of(self.sharding.parts()) {
            return bad(format!(
                "seq_local {} must be a positive multiple of {} ({} sharding)",
                self.seq_local,
                self.sharding.parts(),
                self.sharding.name()
            ));
        }
        self.block_problem(self.causal)
            .validate()
            .map_err(flashcore::Error::from)?;
        self.global_problem(world)
            .validate()
            .map_err(flashcore::Error::from)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_sequences_size_and_refuse_odd_shards() {
        let p = CpProblem::new(1, 8, 2, 64)
            .with_heads_kv(2)
            .causal()
            .with_varlen(vec![6, 2, 10]);
        assert_eq!(p.batch, 3);
        assert_eq!(p.local_rows(), 18);
        assert_eq!(p.chunks(), vec![3, 1, 5]);
        assert_eq!(p.block_cu_seqlens(), vec![0, 3, 4, 9]);
        assert_eq!(p.q_len(), 18 * 8 * 64);
        assert_eq!(p.lse_len(), 8 * 18);
        p.validate(4).unwrap();
        // Zig-zag needs an even number of local rows per sequence, and none empty.
        assert!(CpProblem::new(1, 8, 2, 64)
            .causal()
            .with_varlen(vec![6, 3])
            .validate(2)
            .is_err());
        assert!(CpProblem::new(1, 8, 2, 64)
            .with_varlen(vec![0])
            .validate(2)
            .is_err());
        assert!(CpProblem::new(1, 8, 2, 64)
            .with_varlen(vec![])
            .validate(2)
            .is_err());
        // Causal over contiguous shards would idle the early ranks.
        let p = CpProblem::new(1, 8, 4, 64)
            .causal()
            .with_sharding(Sharding::Contiguous);
        assert!(p.validate(2).is_err());
        assert!(p.validate(1).is_ok());
    }
}
