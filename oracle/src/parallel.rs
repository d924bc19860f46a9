//! The oracle's worker pool: independent tasks spread over the machine's cores.

use std::sync::atomic::{AtomicUsize, Ordering};

/// `f` of every task, in no particular order (each output says which task it was). Threads, one
/// per core up to one per task, take the next task from a shared counter; with `parallel` false
/// (too little work to pay for threads) or one core, everything runs on the caller's thread.
pub(crate) fn map_tasks<T: Sync, O: Send>(
    tasks: &[T],
    parallel: bool,
    f: impl Fn(&T) -> O + Sync,
) -> Vec<O> {
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(tasks.len());
    if threads <= 1 || !parallel {
        return tasks.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let t = next.fetch_add(1, Ordering::Relaxed);
                        if t >= tasks.len() {
                            break mine;
                        }
                        mine.push(f(&tasks[t]));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("oracle worker panicked"))
            .collect()
    })
}
