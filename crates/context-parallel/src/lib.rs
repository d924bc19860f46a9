//! Context-parallel attention: one sequence split over several GPUs, K/V shards moved over
//! NCCL, partial outputs merged by their log-sum-exp (as split-KV does), on flashcore's
//! single-GPU kernels. See `docs/CONTEXT_PARALLEL.md`.
//!
//! - [`ContextParallel`]: one rank (one GPU) of a group; [`ContextParallel::forward`] and
//!   [`ContextParallel::backward`] are collective calls on the rank's shard.
//! - [`Strategy`]: the ring (shards rotate, overlapped with the kernels) or all-gather.
//! - [`Sharding`]: zig-zag shards balance a causal mask; [`schedule`] says which blocks each
//!   rank computes at each step.
//! - [`run_ranks`]: one thread per GPU in this process, for tests, benches and simple programs.

mod backward;
mod context;
mod copy;
pub mod error;
mod forward;
pub mod nccl;
mod problem;
pub mod schedule;
mod threads;

pub use context::{ContextParallel, CpOptions, CpRun, Strategy};
pub use error::CpError;
pub use nccl::{nccl_available, nccl_version, UniqueId};
pub use problem::CpProblem;
pub use schedule::Sharding;
pub use threads::run_ranks;
