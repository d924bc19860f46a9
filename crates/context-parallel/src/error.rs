//! What can go wrong in a context-parallel call, each naming the rank and what it was doing.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum CpError {
    /// The single-GPU kernels or the core refused or failed (invalid block problem, compile,
    /// launch, device memory).
    #[error(transparent)]
    Core(#[from] flashcore::Error),
    /// An NCCL call returned an error, or the communicator reported one while the ring ran
    /// (a peer that failed or went away: `ncclRemoteError`, `ncclSystemError`).
    #[error("rank {rank}: NCCL {call} failed: {message} (ncclResult_t {code})")]
    Nccl {
        rank: usize,
        call: &'static str,
        code: i32,
        message: String,
    },
    /// libnccl could not be loaded.
    #[error("NCCL is not available: {0}")]
    NcclMissing(String),
    /// No progress within the watchdog's limit: a peer stopped (died, or never joined). The
    /// communicator was aborted; create a new one to go on.
    #[error(
        "rank {rank}: {what} made no progress in {after:?} (a peer rank died, hung or never \
         joined); the communicator was aborted"
    )]
    Timeout {
        rank: usize,
        what: String,
        after: Duration,
    },
    /// The call's arguments: shapes, buffers or options that cannot work.
    #[error("invalid context-parallel call: {0}")]
    Invalid(String),
    /// A CUDA driver call (streams, events, copies) failed.
    #[error("rank {rank}: CUDA {what} failed: {message}")]
    Cuda {
        rank: usize,
        what: &'static str,
        message: String,
    },
}
