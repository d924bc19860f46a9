//! One rank's share of a context-parallel attention call.

use flashcore::{AttentionProblem, DType};

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

    /// One block: a part of the queries against a part of a K/V shard.
    pub fn block_problem(&self, causal: bool) -> AttentionProblem {
        let c = self.chunk();
        AttentionProblem::new(self.batch, self.heads_q, c, self.head_dim)
            .with_kv(self.heads_kv, c)
            .with_dtype(self.dtype)
            .with_causal(causal)
            .with_scale(self.scale())
    }

    /// Elements of a local Q (or O) and K (or V) tensor.
    pub fn q_len(&self) -> usize {
        self.batch * self.seq_local * self.heads_q * self.head_dim
    }
    pub fn kv_len(&self) -> usize {
        self.batch * self.seq_local * self.heads_kv * self.head_dim
    }
    pub fn lse_len(&self) -> usize {
        self.batch * self.heads_q * self.seq_local
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
