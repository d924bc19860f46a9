//! The watchdog of `cargo xtask reliability`: a step that makes no progress for too long
//! becomes exit code 3 naming the step.

use std::sync::Mutex;
use std::time::{Duration, Instant};

struct StepState {
    what: String,
    last_progress: Instant,
    limit: Duration,
}

static STEP: Mutex<Option<StepState>> = Mutex::new(None);

pub(super) struct Step;

impl Drop for Step {
    fn drop(&mut self) {
        *STEP.lock().unwrap() = None;
    }
}

pub(super) fn step(what: impl Into<String>, limit_s: u64) -> Step {
    *STEP.lock().unwrap() = Some(StepState {
        what: what.into(),
        last_progress: Instant::now(),
        limit: Duration::from_secs(limit_s),
    });
    Step
}

/// The current step made progress (for long steps made of many small ones).
pub(super) fn progress() {
    if let Some(s) = STEP.lock().unwrap().as_mut() {
        s.last_progress = Instant::now();
    }
}

pub(super) fn start_watchdog() {
    std::thread::spawn(|| loop {
        std::thread::sleep(Duration::from_secs(1));
        let guard = STEP.lock().unwrap();
        if let Some(s) = guard.as_ref() {
            if s.last_progress.elapsed() > s.limit {
                eprintln!(
                    "reliability: HANG: '{}' made no progress for {} s; stopping (exit 3)",
                    s.what,
                    s.limit.as_secs()
                );
                std::process::exit(3);
            }
        }
    });
}
