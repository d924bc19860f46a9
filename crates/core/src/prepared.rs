//! A forward call checked, planned and resolved to its compiled functions once, then launched on
//! new tensors of the same problem as often as the caller likes: the per-call path of a framework
//! binding, whose callers repeat a few shapes (a model's layers, a decode loop). What a
//! [`crate::forward_on`] call redoes every time — the problem's validation, the capability check,
//! the plan, the mode defines and the function lookup — is done once here; a launch checks only
//! what can change between two calls of one problem: the tensors' lengths, dtypes and base
//! alignment, and the stream.

use std::sync::Arc;

use cudarc::driver::{sys, CudaFunction, CudaStream};

use crate::device::Device;
use crate::error::{Error, InvalidProblem};
use crate::execute::{check_pointer_alignment, run_launches};
use crate::launch_plan::LaunchPlan;
use crate::plan::Attention;
use crate::problem::AttentionProblem;
use crate::tensors::AttentionTensors;

/// One generation's forward for one problem, ready to launch (see the module docs).
pub struct PreparedForward {
    kernel: &'static str,
    problem: AttentionProblem,
    /// The plan, its launches' defines including the problem's mode defines.
    plan: LaunchPlan,
    /// `functions[i]` runs `plan.launches[i]`; they belong to `context`.
    functions: Vec<CudaFunction>,
    context: sys::CUcontext,
    alignment_elems: usize,
}

// SAFETY: `context` is a driver handle used only for comparison; the functions are cudarc's
// (Send + Sync) and the rest is plain data.
unsafe impl Send for PreparedForward {}
unsafe impl Sync for PreparedForward {}

impl PreparedForward {
    /// Checks `problem` against `attention` on `device`, plans it and compiles (or loads) the
    /// plan's kernels. `Unsupported` when the generation does not take it, as its `forward` would
    /// answer; the pointer alignment, which depends on the tensors, is checked at each launch.
    pub fn new(
        attention: &(impl Attention + ?Sized),
        device: &Device,
        problem: &AttentionProblem,
    ) -> Result<Self, Error> {
        problem.validate()?;
        if problem.modes.append.is_some() {
            return Err(InvalidProblem::Mode {
                field: "k_new",
                reason: "appending writes into the cache: call forward_with_kvcache".into(),
            }
            .into());
        }
        let caps = attention.capabilities();
        caps.check(attention.name(), problem, device.info())?;
        let mut plan = attention.plan(problem, device.info())?;
        let mode_defines = problem.modes.build_defines();
        for launch in &mut plan.launches {
            launch.defines.extend(mode_defines.iter().cloned());
        }
        let functions = plan
            .launches
            .iter()
            .map(|l| {
                device.function(
                    l.source,
                    l.entry,
                    problem.dtype,
                    &l.defines,
                    l.dynamic_smem_bytes,
                )
            })
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(PreparedForward {
            kernel: attention.name(),
            problem: problem.clone(),
            plan,
            functions,
            context: device.context().cu_ctx(),
            alignment_elems: caps.alignment_elems,
        })
    }

    /// The generation that runs it.
    pub fn kernel(&self) -> &'static str {
        self.kernel
    }

    pub fn problem(&self) -> &AttentionProblem {
        &self.problem
    }

    /// The plan it launches (defines including the mode defines).
    pub fn plan(&self) -> &LaunchPlan {
        &self.plan
    }

    /// f32 words of workspace a launch needs (see [`LaunchPlan`]'s contract).
    pub fn workspace_words(&self) -> usize {
        self.plan.workspace_f32
    }

    /// Queues the plan on `stream` (of `device`'s context, the one it was prepared on) for
    /// `tensors`, which must fit the prepared problem (lengths and dtypes are checked, as is the
    /// base alignment the kernel needs: a misaligned tensor is `Unsupported`, nothing launches).
    pub fn forward_on(
        &self,
        device: &Device,
        stream: &Arc<CudaStream>,
        tensors: &mut AttentionTensors<'_>,
    ) -> Result<(), Error> {
        if device.context().cu_ctx() != self.context {
            return Err(Error::Cuda {
                context: "launching a prepared forward".into(),
                message: "the device's CUDA context is not the one the call was prepared on".into(),
            });
        }
        tensors.check(&self.problem)?;
        check_pointer_alignment(self.kernel, self.alignment_elems, tensors, stream)?;
        run_launches(
            device,
            stream,
            &self.problem,
            &self.plan,
            Some(&self.functions),
            tensors,
        )
    }
}
