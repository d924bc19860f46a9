//! Generation 5: persistent, pipelined, warp-specialized attention.
//!
//! - [`hopper::PersistentHopper`] ("persistent-hopper"): sm_90a, TMA + mbarrier + wgmma,
//!   a producer warpgroup feeding two consumer warpgroups (kernels/gen5_persistent_hopper.cu).
//!
//! Design and barrier protocol: docs/generations/gen5-persistent.md.

pub mod hopper;

pub use hopper::PersistentHopper;
