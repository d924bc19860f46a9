//! flashcore-core: what every attention generation shares.
//!
//! - [`problem`]: the problem description ([`AttentionProblem`]) and its validation; [`dtype`]:
//!   the element type ([`DType`]).
//! - [`backward`]: the backward pass ([`AttentionBackward`]: dQ, dK, dV), its tensors and host path.
//! - [`plan`]: the [`Attention`] trait a generation implements, and the checks of a call;
//!   [`launch_plan`]: what a plan asks the core to launch.
//! - [`device`]: the CUDA context, stream and module cache ([`Device`]).
//! - [`compile`]: embedded kernel sources, NVRTC compilation, the on-disk PTX cache.
//! - [`params`]: the parameter block; [`tensor_map`]: Hopper tensor maps; [`execute`]: the
//!   launches; [`launch`]: the entry points and their helpers, where callers find them;
//!   [`prepared`]: a forward checked and planned once, launched many times.
//! - [`partials`]: merging partial outputs by LSE and summing partial gradients (context
//!   parallelism).
//! - [`host`]: ndarray in, ndarray out.
//! - [`toolkit`]: finding the driver, NVRTC and CUDA headers at run time.

pub mod backward;
pub mod compile;
pub mod device;
pub mod dtype;
pub mod error;
pub mod execute;
pub mod host;
pub mod launch;
pub mod launch_plan;
pub mod modes;
pub mod params;
pub mod partials;
pub mod plan;
pub mod prepared;
pub mod problem;
pub mod tensor_map;
pub mod tensors;
pub mod toolkit;
mod toolkit_paths;

pub use backward::{
    backward_host, backward_host_modes, backward_host_with_tables, backward_on,
    backward_on_with_tables, AttentionBackward, BackwardHostInputs, BackwardParams,
    BackwardTensors, HostGradients, HostGradientsD,
};
pub use device::{Device, DeviceInfo};
pub use dtype::DType;
pub use error::{Error, InvalidProblem, Unsupported};
pub use host::{
    forward_host, forward_host_modes, nan_bits, HostElement, HostInputs, HostOutput, HostOutputs,
};
pub use launch::{forward_on, forward_with_e4m3_kvcache, forward_with_kvcache, KvAppend};
pub use modes::{AlibiSlopes, HostTables, KvScales, KvStorage, ModeSupport, Modes};
pub use partials::{add_partial, cast_partial, merge_partial, PartialShape};
pub use plan::{
    Attention, BlockSharedMemory, Capabilities, DecodeOnly, HeadDims, KernelLaunch, LaunchPlan,
    QTileKernel, Swizzle, TensorMapSpec, TransposedV,
};
pub use prepared::PreparedForward;
pub use problem::{AttentionProblem, Layout, ProblemStrides, TensorStrides};
pub use tensors::{AttentionTensors, DeviceTables, KvRef, TensorMut, TensorRef};

/// Re-exported so generation crates and tools use the same cudarc as the core.
pub use cudarc;
