//! Host loops on every core, for the inputs and oracle work of bench, verify and reliability
//! (tensors of up to 2^29 values, where one core takes seconds). Results never depend on the
//! number of cores.

/// The cores to spread work over.
pub fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Calls `f(first_index, chunk)` on disjoint chunks of `out` (at least `min_chunk` elements each,
/// but the last) from every core.
pub fn par_chunks<T: Send>(out: &mut [T], min_chunk: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let n = out.len();
    if n == 0 {
        return;
    }
    let per = n.div_ceil(threads()).max(min_chunk).max(1);
    let f = &f;
    std::thread::scope(|s| {
        for (i, chunk) in out.chunks_mut(per).enumerate() {
            s.spawn(move || f(i * per, chunk));
        }
    });
}

/// `f` of every item, in order, the items split over the cores in contiguous runs.
pub fn par_map<T: Sync, U: Send>(items: &[T], f: impl Fn(&T) -> U + Sync) -> Vec<U> {
    let per = items.len().div_ceil(threads()).max(1);
    let f = &f;
    std::thread::scope(|s| {
        let runs: Vec<_> = items
            .chunks(per)
            .map(|run| s.spawn(move || run.iter().map(f).collect::<Vec<U>>()))
            .collect();
        runs.into_iter()
            .flat_map(|h| h.join().expect("a worker thread panicked"))
            .collect()
    })
}

/// `f` of every item, in order, each worker taking the next item when it finishes one: for
/// items of very different cost (compiling kernels), where contiguous runs would leave cores idle.
pub fn par_map_queue<T: Sync, U: Send>(items: &[T], f: impl Fn(&T) -> U + Sync) -> Vec<U> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let (f, next) = (&f, &next);
    let mut out: Vec<(usize, U)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads().min(items.len()).max(1))
            .map(|_| {
                s.spawn(move || {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else { break };
                        done.push((i, f(item)));
                    }
                    done
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a worker thread panicked"))
            .collect()
    });
    out.sort_unstable_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, u)| u).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn par_map_queue_keeps_the_order_of_its_items() {
        let items: Vec<usize> = (0..1000).collect();
        let tripled: Vec<usize> = items.iter().map(|i| i * 3).collect();
        assert_eq!(par_map_queue(&items, |&i| i * 3), tripled);
        assert!(par_map_queue(&[] as &[usize], |&i| i).is_empty());
    }

    #[test]
    fn par_map_keeps_the_order_of_its_items() {
        let items: Vec<usize> = (0..1000).collect();
        let tripled: Vec<usize> = items.iter().map(|i| i * 3).collect();
        assert_eq!(par_map(&items, |&i| i * 3), tripled);
        assert!(par_map(&[] as &[usize], |&i| i).is_empty());
    }

    #[test]
    fn par_chunks_visits_every_element_once_with_its_index() {
        let mut v = vec![0usize; 100_003];
        par_chunks(&mut v, 7, |first, c| {
            for (j, x) in c.iter_mut().enumerate() {
                *x += first + j;
            }
        });
        assert!(v.iter().enumerate().all(|(i, &x)| x == i));
        par_chunks(&mut [] as &mut [usize], 1, |_, _| {
            panic!("nothing to visit")
        });
    }
}
