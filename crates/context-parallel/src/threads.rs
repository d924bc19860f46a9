//! One process driving several GPUs, one thread (and one rank) per GPU.

use flashcore::Device;

use crate::context::{ContextParallel, CpOptions};
use crate::error::CpError;
use crate::nccl::UniqueId;

/// Runs `f` on `world` ranks, rank r on GPU r in a thread of its own, and returns each rank's
/// result in rank order. The ranks share one NCCL unique id made here. A rank that fails to
/// start (no such GPU, no NCCL) returns its error; the others then time out joining
/// (`options.timeout`) instead of hanging.
pub fn run_ranks<T: Send>(
    world: usize,
    options: &CpOptions,
    f: impl Fn(&mut ContextParallel) -> Result<T, CpError> + Sync,
) -> Result<Vec<Result<T, CpError>>, CpError> {
    let id = UniqueId::new()?;
    let f = &f;
    Ok(std::thread::scope(|s| {
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                let options = options.clone();
                s.spawn(move || {
                    let device = Device::open(rank)?;
                    let mut cp = ContextParallel::new(&device, rank, world, &id, options)?;
                    f(&mut cp)
                })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(rank, h)| {
                h.join().unwrap_or_else(|_| {
                    Err(CpError::Invalid(format!("rank {rank}'s thread panicked")))
                })
            })
            .collect()
    }))
}
