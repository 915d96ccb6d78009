//! Work on other processes' files, with a deadline the caller keeps.
//!
//! A file another process chose can be slow to answer: a network
//! filesystem whose server is gone, or anything the mount check
//! (`runtime_kit::files::served_by_a_process`) did not recognise. Such a
//! call may wait uninterruptibly: no signal ends it, and the thread making
//! it is lost until the filesystem answers. So the privileged side never
//! makes such a call on a thread it needs: each job (one process's files)
//! runs on a worker thread ([`Overseer::run`]), and the caller waits at
//! most the job's deadline. A worker past its deadline is abandoned (it
//! ends on its own if the call ever returns; its result is dropped); if it
//! was inside a call into a mount then ([`Gate::enter`] to [`Gate::leave`]),
//! that mount is never entered again by any later job (a job merely slow
//! between calls marks nothing: its mount is not at fault), and a fresh
//! worker takes the next job. At most
//! [`MAX_ABANDONED`] workers are abandoned in a process's life: past that
//! no job runs ([`Outcome::Exhausted`]), so that a filesystem that hangs
//! can cost a few threads and never more.

use std::any::Any;
use std::collections::BTreeSet;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Most workers abandoned in the life of a process.
pub const MAX_ABANDONED: usize = 4;
/// How often [`Overseer::run_with`] calls back while it waits.
const SLICE: Duration = Duration::from_millis(5);

/// What the jobs and their overseer share.
#[derive(Debug, Default)]
struct Shared {
    /// The mount the running job is calling into now, if it is.
    current: Mutex<Option<u64>>,
    /// Mounts a job hung in: never entered again.
    hung: Mutex<BTreeSet<u64>>,
}

/// A job's way to say which mount it calls into next, and to learn that
/// one hung before.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    shared: Arc<Shared>,
}

/// A mount that hung a job before: not entered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("mount {mount} hung an earlier job: not entered again")]
pub struct Hung {
    pub mount: u64,
}

impl Gate {
    /// A gate of its own (no overseer: nothing is abandoned through it).
    pub fn new() -> Gate {
        Gate::default()
    }

    /// Says that the job is about to call into `mount` (until
    /// [`Gate::leave`]); refused if that mount hung a job before.
    pub fn enter(&self, mount: u64) -> Result<(), Hung> {
        // A poisoned lock only means a job panicked (the process aborts on
        // panic): the data is a set of numbers either way.
        if self.shared.hung.lock().unwrap_or_else(|e| e.into_inner()).contains(&mount) {
            return Err(Hung { mount });
        }
        *self.shared.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(mount);
        Ok(())
    }

    /// Says that the job's call into a mount returned.
    pub fn leave(&self) {
        self.take_current();
    }

    /// [`Gate::enter`] `mount`, `call`, [`Gate::leave`].
    pub fn call<T>(&self, mount: u64, call: impl FnOnce() -> T) -> Result<T, Hung> {
        self.enter(mount)?;
        let r = call();
        self.leave();
        Ok(r)
    }

    /// The mounts that hung jobs, so far.
    #[cfg(test)]
    pub fn hung(&self) -> usize {
        self.shared.hung.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn take_current(&self) -> Option<u64> {
        self.shared.current.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn mark_hung(&self, mount: u64) {
        self.shared.hung.lock().unwrap_or_else(|e| e.into_inner()).insert(mount);
    }
}

type Job = Box<dyn FnOnce(&Gate) -> Box<dyn Any + Send> + Send>;

/// One worker thread: where its jobs go, and where their results come.
struct Worker {
    jobs: mpsc::Sender<Job>,
    results: mpsc::Receiver<Box<dyn Any + Send>>,
}

/// How a job went.
#[derive(Debug)]
pub enum Outcome<R> {
    /// It finished in time.
    Done(R),
    /// Past its deadline: abandoned, with the mount it was in (if it said).
    Abandoned { mount: Option<u64> },
    /// Not run: [`MAX_ABANDONED`] workers are abandoned already.
    Exhausted,
}

/// Runs jobs on a worker thread, each within its deadline (module doc).
pub struct Overseer {
    gate: Gate,
    worker: Option<Worker>,
    abandoned: usize,
}

impl Default for Overseer {
    fn default() -> Self {
        Self::new()
    }
}

impl Overseer {
    /// No worker yet: the first job starts one.
    pub fn new() -> Overseer {
        Overseer { gate: Gate::new(), worker: None, abandoned: 0 }
    }

    /// Workers abandoned so far.
    #[cfg(test)]
    pub fn abandoned(&self) -> usize {
        self.abandoned
    }

    /// The gate the jobs are given.
    #[cfg(test)]
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// Runs `job` on the worker and waits for it at most `deadline`.
    pub fn run<R: Send + 'static>(&mut self, deadline: Duration, job: impl FnOnce(&Gate) -> R + Send + 'static) -> Outcome<R> {
        self.run_with(deadline, job, || {})
    }

    /// [`Overseer::run`], calling `meanwhile` every few milliseconds while
    /// it waits (the TLS attacher reads the kernel's reports so: a job
    /// never holds up a process's exec).
    pub fn run_with<R: Send + 'static>(
        &mut self,
        deadline: Duration,
        job: impl FnOnce(&Gate) -> R + Send + 'static,
        mut meanwhile: impl FnMut(),
    ) -> Outcome<R> {
        if self.abandoned >= MAX_ABANDONED {
            return Outcome::Exhausted;
        }
        let worker = match self.worker.take() {
            Some(w) => w,
            None => match self.spawn() {
                Some(w) => w,
                // No thread to be had (out of memory or threads): as if exhausted.
                None => return Outcome::Exhausted,
            },
        };
        let boxed: Job = Box::new(move |gate: &Gate| Box::new(job(gate)) as Box<dyn Any + Send>);
        if worker.jobs.send(boxed).is_err() {
            // The worker is gone (it cannot be: it only ends when its
            // sender is dropped); a fresh one next time.
            return Outcome::Exhausted;
        }
        let until = std::time::Instant::now() + deadline;
        let received = loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            match worker.results.recv_timeout(left.min(SLICE)) {
                Ok(result) => break Ok(result),
                Err(mpsc::RecvTimeoutError::Timeout) if !left.is_zero() => meanwhile(),
                Err(e) => break Err(e),
            }
        };
        match received {
            Ok(result) => {
                self.gate.take_current();
                self.worker = Some(worker);
                match result.downcast::<R>() {
                    Ok(r) => Outcome::Done(*r),
                    // The job's own type came back: cannot differ.
                    Err(_) => Outcome::Exhausted,
                }
            }
            Err(_) => {
                // Dropping `worker` closes its job channel: if its call ever
                // returns, the thread finds no next job and ends.
                self.abandoned += 1;
                let mount = self.gate.take_current();
                if let Some(m) = mount {
                    self.gate.mark_hung(m);
                }
                Outcome::Abandoned { mount }
            }
        }
    }

    fn spawn(&self) -> Option<Worker> {
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (result_tx, results) = mpsc::channel();
        let gate = self.gate.clone();
        std::thread::Builder::new()
            .name("files".into())
            .spawn(move || {
                while let Ok(job) = job_rx.recv() {
                    if result_tx.send(job(&gate)).is_err() {
                        return;
                    }
                }
            })
            .ok()?;
        Some(Worker { jobs, results })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;

    #[test]
    fn a_job_in_time_gives_its_result_and_the_worker_is_kept() {
        let mut o = Overseer::new();
        let first = match o.run(Duration::from_secs(5), |_| std::thread::current().id()) {
            Outcome::Done(id) => id,
            other => panic!("{other:?}"),
        };
        let second = match o.run(Duration::from_secs(5), |_| std::thread::current().id()) {
            Outcome::Done(id) => id,
            other => panic!("{other:?}"),
        };
        assert_eq!(first, second, "one worker for jobs in time");
        assert_ne!(first, std::thread::current().id());
        assert_eq!(o.abandoned(), 0);
    }

    #[test]
    fn a_job_past_its_deadline_is_abandoned_and_its_mount_never_entered_again() {
        let mut o = Overseer::new();
        let (release, held) = channel::<()>();
        // Stands for a call that does not return: it waits for `release`.
        let outcome = o.run(Duration::from_millis(50), move |gate| gate.call(7, || held.recv()).expect("not hung yet"));
        assert!(matches!(outcome, Outcome::Abandoned { mount: Some(7) }), "{outcome:?}");
        assert_eq!(o.gate().hung(), 1);
        // The next job runs on a fresh worker, and is refused mount 7.
        match o.run(Duration::from_secs(5), |gate| (gate.call(7, || 7), gate.call(8, || 8))) {
            Outcome::Done((seven, eight)) => {
                assert_eq!(seven, Err(Hung { mount: 7 }));
                assert_eq!(eight, Ok(8));
            }
            other => panic!("{other:?}"),
        }
        drop(release);
    }

    #[test]
    fn a_job_slow_between_calls_marks_no_mount() {
        let mut o = Overseer::new();
        let (release, held) = channel::<()>();
        let outcome = o.run(Duration::from_millis(50), move |gate| {
            gate.call(9, || ()).expect("not hung");
            // Slow after the call returned (stands for parsing).
            let _ = held.recv();
        });
        assert!(matches!(outcome, Outcome::Abandoned { mount: None }), "{outcome:?}");
        assert_eq!(o.gate().hung(), 0);
        drop(release);
    }

    #[test]
    fn abandoned_workers_are_bounded() {
        let mut o = Overseer::new();
        let mut keep = Vec::new();
        for _ in 0..MAX_ABANDONED {
            let (release, held) = channel::<()>();
            keep.push(release);
            assert!(matches!(
                o.run(Duration::from_millis(20), move |_| {
                    let _ = held.recv();
                }),
                Outcome::Abandoned { mount: None }
            ));
        }
        assert!(matches!(o.run(Duration::from_secs(1), |_| 1), Outcome::Exhausted));
        assert_eq!(o.abandoned(), MAX_ABANDONED);
    }
}
