//! Every way an attention call can fail, each with a message that names the offending value.

use crate::dtype::DType;

/// The problem itself is malformed, whatever kernel is asked.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidProblem {
    #[error("head_dim is 0: each query/key row needs at least one element")]
    ZeroHeadDim,
    #[error("head_dim_v is 0: each value/output row needs at least one element")]
    ZeroHeadDimV,
    #[error("heads_q = {heads_q} and heads_kv = {heads_kv}: both must be at least 1")]
    ZeroHeads { heads_q: usize, heads_kv: usize },
    #[error(
        "heads_q = {heads_q} is not a multiple of heads_kv = {heads_kv} (GQA needs whole groups)"
    )]
    HeadsNotDivisible { heads_q: usize, heads_kv: usize },
    #[error("softmax_scale = {0} is not finite")]
    NonFiniteScale(f32),
    #[error("{what} = {value} exceeds the limit {limit} that kernel indexing allows")]
    TooLarge {
        what: &'static str,
        value: u128,
        limit: u128,
    },
    #[error(
        "{tensor}: row stride {row_stride} is smaller than head_dim {head_dim}, so rows overlap"
    )]
    OverlappingRows {
        tensor: &'static str,
        row_stride: usize,
        head_dim: usize,
    },
    #[error(
        "o: {axis} stride {stride} is smaller than the {span} elements the inner axes span, so \
         output elements alias (blocks would race to write them)"
    )]
    OverlappingOutput {
        axis: &'static str,
        stride: usize,
        span: u128,
    },
    #[error("{tensor}: buffer holds {got} elements but the problem addresses {needed}")]
    LengthMismatch {
        tensor: &'static str,
        got: usize,
        needed: usize,
    },
    #[error("{tensor}: dtype {got} does not match the problem's {expected}")]
    DTypeMismatch {
        tensor: &'static str,
        got: DType,
        expected: DType,
    },
    #[error(
        "{tensor}: K/V are given as {got} but the problem's K/V are {expected} (Modes::kv_fp8 \
         says whether they are e4m3 bytes)"
    )]
    KvDTypeMismatch {
        tensor: &'static str,
        got: &'static str,
        expected: &'static str,
    },
    #[error(
        "q: Q is given as {got} but the problem's Q is {expected} (Modes::q_fp8 says whether it \
         is e4m3 bytes)"
    )]
    QDTypeMismatch {
        got: &'static str,
        expected: &'static str,
    },
    #[error("{field}: {reason}")]
    Mode { field: &'static str, reason: String },
    #[error("{field}: {reason}")]
    Table { field: &'static str, reason: String },
    #[error(
        "{table}: entry {index} is {value}; a descale factor must be finite and > 0 (the true \
         Q/K/V value is the stored e4m3 value times it)"
    )]
    BadDescale {
        table: &'static str,
        index: usize,
        value: f32,
    },
    #[error(
        "{tensor}: element {index} is {value}, not an e4m3 value; with kv_fp8 (K/V) or q_fp8 (Q) \
         the host arrays hold the stored e4m3 values (unscaled), which are not quantized for you"
    )]
    NotE4m3 {
        tensor: &'static str,
        index: usize,
        value: f32,
    },
    #[error("{tensor}: host array shape {got:?} does not match the problem's {expected:?}")]
    ShapeMismatch {
        tensor: &'static str,
        got: Vec<usize>,
        expected: Vec<usize>,
    },
}

/// A valid problem that one kernel does not take; another generation may.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kernel} does not support this problem: {reason}")]
pub struct Unsupported {
    pub kernel: &'static str,
    pub reason: String,
}

impl Unsupported {
    pub fn new(kernel: &'static str, reason: impl Into<String>) -> Self {
        Unsupported {
            kernel,
            reason: reason.into(),
        }
    }
}

/// Everything that can go wrong between a problem and its output.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Invalid(#[from] InvalidProblem),
    #[error(transparent)]
    Unsupported(#[from] Unsupported),
    #[error("no CUDA driver: {0}")]
    NoDriver(String),
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    #[error("NVRTC not found: {0}")]
    NoNvrtc(String),
    #[error("kernel {source_name} failed to compile for {arch} with options {options:?}:\n{log}")]
    Compile {
        source_name: String,
        arch: String,
        options: Vec<String>,
        log: String,
    },
    #[error("out of device memory allocating {bytes} bytes for {what}")]
    OutOfMemory { what: String, bytes: usize },
    #[error(
        "{what} needs {needed} bytes of shared memory per block, but this device allows {limit}"
    )]
    SharedMemory {
        what: String,
        needed: usize,
        limit: usize,
    },
    #[error(
        "the caller's workspace holds {given} f32 words, this call needs {needed} (the first \
         {counters} zero); nothing was launched"
    )]
    WorkspaceTooSmall {
        needed: usize,
        counters: usize,
        given: usize,
    },
    #[error("CUDA error in {context}: {message}")]
    Cuda { context: String, message: String },
    #[error("I/O error on {path}: {message}")]
    Io { path: String, message: String },
}

impl Error {
    pub fn cuda(context: impl Into<String>, err: impl std::fmt::Debug) -> Self {
        Error::Cuda {
            context: context.into(),
            message: format!("{err:?}"),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
