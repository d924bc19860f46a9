//! Progress of a long sweep of cases (`verify`). On a terminal: indicatif's bar. In a log
//! (stderr not a terminal, as on the GPU machine, where runs write to files) the bar draws
//! nothing and drops the lines printed above it, so there each line goes to stderr as it is, a
//! count line is written every [`LOG_EVERY`], and a watchdog thread names a case still running
//! after [`STUCK_AFTER`]: a kernel that hangs leaves its case in the log, and a run killed by a
//! time limit still says how far it got.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// How often a log gets a count line.
pub const LOG_EVERY: Duration = Duration::from_secs(20);
/// How long one case may run before the watchdog names it (once per case). The slowest cases
/// of a sweep (the scalar kernel at the largest drawn shapes, a first compile) take seconds.
pub const STUCK_AFTER: Duration = Duration::from_secs(60);

type Sink = Arc<dyn Fn(&str) + Send + Sync>;

struct State {
    done: usize,
    failed: usize,
    last_line: Instant,
    /// The running case: its label, when it started, whether the watchdog named it already.
    current: Option<(String, Instant, bool)>,
}

pub struct CaseProgress {
    bar: ProgressBar,
    log: bool,
    prefix: String,
    total: usize,
    started: Instant,
    log_every: Duration,
    sink: Sink,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    watchdog: Option<JoinHandle<()>>,
}

impl CaseProgress {
    /// A sweep of `total` cases named `prefix` (the kernel), drawn as a bar on a terminal and
    /// written as lines otherwise.
    pub fn new(total: usize, prefix: String) -> Self {
        let log = !std::io::stderr().is_terminal();
        let bar = ProgressBar::new(total as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "{prefix:>20} [{bar:30}] {pos}/{len} {msg} ({elapsed}, eta {eta})",
            )
            .unwrap()
            .progress_chars("=> "),
        );
        bar.set_prefix(prefix.clone());
        let sink: Sink = if log {
            Arc::new(|line: &str| eprintln!("{line}"))
        } else {
            let bar = bar.clone();
            Arc::new(move |line: &str| bar.println(line))
        };
        Self::with(total, prefix, bar, log, sink, LOG_EVERY, STUCK_AFTER)
    }

    fn with(
        total: usize,
        prefix: String,
        bar: ProgressBar,
        log: bool,
        sink: Sink,
        log_every: Duration,
        stuck_after: Duration,
    ) -> Self {
        let now = Instant::now();
        let state = Arc::new(Mutex::new(State {
            done: 0,
            failed: 0,
            last_line: now,
            current: None,
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let watchdog = {
            let (state, stop, sink, prefix) =
                (state.clone(), stop.clone(), sink.clone(), prefix.clone());
            let tick = (stuck_after / 4).clamp(Duration::from_millis(1), Duration::from_secs(1));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::park_timeout(tick); // unparked by stop_watchdog
                    let mut s = state.lock().unwrap();
                    let done = s.done;
                    if let Some((label, since, named)) = s.current.as_mut() {
                        if !*named && since.elapsed() >= stuck_after {
                            *named = true;
                            sink(&format!(
                                "{prefix}: case {} of {total} still running after {} s: {label}",
                                done + 1,
                                since.elapsed().as_secs()
                            ));
                        }
                    }
                }
            })
        };
        CaseProgress {
            bar,
            log,
            prefix,
            total,
            started: now,
            log_every,
            sink,
            state,
            stop,
            watchdog: Some(watchdog),
        }
    }

    /// A case is about to run; `label` is how to rerun it.
    pub fn start_case(&self, label: String) {
        self.state.lock().unwrap().current = Some((label, Instant::now(), false));
    }

    /// The running case is done; `failed` is the sweep's failure count so far.
    pub fn finish_case(&self, failed: usize) {
        let line = {
            let mut s = self.state.lock().unwrap();
            s.current = None;
            s.done += 1;
            s.failed = failed;
            let now = Instant::now();
            let due = self.log && now.duration_since(s.last_line) >= self.log_every;
            if due {
                s.last_line = now;
            }
            due.then(|| self.count_line(s.done, failed))
        };
        if let Some(line) = line {
            (self.sink)(&line);
        }
        self.bar.set_message(format!("{failed} failed"));
        self.bar.inc(1);
    }

    /// A line for the log or above the bar (a failure and how to rerun it).
    pub fn println(&self, line: impl AsRef<str>) {
        (self.sink)(line.as_ref());
    }

    fn count_line(&self, done: usize, failed: usize) -> String {
        format!(
            "{}: {done}/{} cases, {failed} failed, {:.0} s",
            self.prefix,
            self.total,
            self.started.elapsed().as_secs_f64()
        )
    }

    /// Ends the sweep: clears the bar (the caller prints the summary) and stops the watchdog.
    pub fn finish(mut self) {
        self.bar.finish_and_clear();
        self.stop_watchdog();
    }

    fn stop_watchdog(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(w) = self.watchdog.take() {
            w.thread().unpark();
            let _ = w.join();
        }
    }
}

impl Drop for CaseProgress {
    fn drop(&mut self) {
        self.stop_watchdog();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hidden bar of `total` cases whose lines are recorded.
    fn recorded(
        total: usize,
        log: bool,
        log_every: Duration,
        stuck_after: Duration,
    ) -> (CaseProgress, Arc<Mutex<Vec<String>>>) {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = lines.clone();
        let sink: Sink = Arc::new(move |s: &str| l.lock().unwrap().push(s.to_string()));
        let p = CaseProgress::with(
            total,
            "k".into(),
            ProgressBar::hidden(),
            log,
            sink,
            log_every,
            stuck_after,
        );
        (p, lines)
    }

    #[test]
    fn a_case_that_runs_too_long_is_named_once() {
        let (p, lines) = recorded(3, true, Duration::from_secs(60), Duration::from_millis(20));
        p.start_case("b=1,sq=7".into());
        p.finish_case(0);
        p.start_case("b=2,sq=9".into());
        std::thread::sleep(Duration::from_millis(500));
        p.finish_case(0);
        p.finish();
        let lines = lines.lock().unwrap();
        let stuck: Vec<_> = lines
            .iter()
            .filter(|l| l.contains("still running"))
            .collect();
        assert_eq!(stuck.len(), 1, "{lines:?}");
        assert!(stuck[0].starts_with("k: case 2 of 3 still running after "));
        assert!(stuck[0].ends_with(": b=2,sq=9"));
    }

    #[test]
    fn quick_cases_are_not_named_and_lines_pass_through() {
        let (p, lines) = recorded(2, true, Duration::from_secs(60), Duration::from_secs(30));
        for i in 0..2 {
            p.start_case(format!("case {i}"));
            p.finish_case(i);
        }
        p.println("FAIL k: something");
        p.finish();
        // No count line within a minute of the start, no watchdog line: only the printed one.
        assert_eq!(
            *lines.lock().unwrap(),
            vec!["FAIL k: something".to_string()]
        );
    }

    #[test]
    fn a_log_gets_count_lines_and_a_terminal_does_not() {
        for log in [true, false] {
            let (p, lines) = recorded(3, log, Duration::ZERO, Duration::from_secs(30));
            for failed in [0, 1, 1] {
                p.start_case("c".into());
                p.finish_case(failed);
            }
            p.finish();
            let lines = lines.lock().unwrap();
            if log {
                assert_eq!(lines.len(), 3, "{lines:?}");
                assert!(
                    lines[2].starts_with("k: 3/3 cases, 1 failed, "),
                    "{lines:?}"
                );
            } else {
                assert!(lines.is_empty(), "{lines:?}");
            }
        }
    }
}
