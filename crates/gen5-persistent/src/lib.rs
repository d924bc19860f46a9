//! Generation 5: persistent, pipelined, warp-specialized attention, in two paths.
//!
//! - [`PersistentHopper`] ("persistent-hopper"): sm_90a, TMA + mbarrier + wgmma, a producer
//!   warpgroup feeding two consumer warpgroups (kernels/gen5_persistent_hopper.cu).
//! - [`PersistentPortable`] ("persistent-portable"): sm_80+, a producer warp filling a cp.async
//!   ring for eight mma.sync consumer warps (kernels/gen5_persistent_portable.cu).
//! - [`Persistent`] ("persistent"): picks the Hopper path on compute capability 9.0 when it
//!   takes the problem, the portable path otherwise.
//!
//! - Decode-shaped problems (the queries per KV head fit one 16-row tile) take neither
//!   persistent kernel: both paths plan the split-KV, GQA-packed decode kernel of [`decode`]
//!   (kernels/gen5_decode.cu, mma.sync, sm_80+).
//!
//! Design and barrier protocols: docs/generations/gen5-persistent.md and gen5-decode.md.

pub mod backward;
pub mod decode;
pub mod env;
pub mod hopper;
pub mod hopper_bwd;
pub mod portable;

pub use backward::PortableAtomicBackward;
use flashcore_core::{
    Attention, AttentionProblem, Capabilities, DeviceInfo, LaunchPlan, Unsupported,
};
pub use hopper::PersistentHopper;
pub use portable::PersistentPortable;

/// Generation 5 with the path chosen from the device's compute capability.
#[derive(Clone, Copy, Debug, Default)]
pub struct Persistent;

impl Persistent {
    /// The path that runs `problem` on `device`.
    pub fn path(problem: &AttentionProblem, device: &DeviceInfo) -> &'static dyn Attention {
        if PersistentHopper.supports(problem, device).is_ok() {
            &PersistentHopper
        } else {
            &PersistentPortable
        }
    }
}

impl Attention for Persistent {
    fn name(&self) -> &'static str {
        "persistent"
    }

    fn capabilities(&self) -> Capabilities {
        // The union of the two paths is the portable one's (the Hopper path takes a subset).
        PersistentPortable.capabilities()
    }

    fn plan(
        &self,
        problem: &AttentionProblem,
        device: &DeviceInfo,
    ) -> Result<LaunchPlan, Unsupported> {
        Self::path(problem, device).plan(problem, device)
    }
}
