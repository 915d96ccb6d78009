//! Keeping the components running, each on its own.
//!
//! A component that exits is restarted alone; the others keep running and
//! find it again (their subscriptions reconnect). A component that was
//! ready restarts at once the first time and backs off if it keeps dying;
//! one that dies before reporting ready is throttled (1 s, 2 s, … 60 s), as
//! Postfix's master does, instead of looping hot. On SIGINT/SIGTERM all are
//! asked to stop, given 5 s, then killed.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use runtime_kit::shutdown::Shutdown;
use tokio::sync::mpsc;

use crate::handover::Handover;
use crate::spawn::{spawn, wait_ready, Users};
use ipc_schema::ComponentInfo;

/// How long a ready component must live for its back-off to reset.
const STABLE: Duration = Duration::from_secs(30);
/// Longest wait before restarting a component.
const MAX_DELAY: Duration = Duration::from_secs(60);
/// How long stopping components get before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How long to wait before starting a component again, after `failures`
/// quick deaths in a row: a component that was ready is back at once (100
/// ms) the first time and slower if it keeps dying (doubling); one that
/// died before it was ready is throttled from 1 s on (doubling), as
/// Postfix's master does. Never more than [`MAX_DELAY`].
pub fn restart_delay(was_ready: bool, failures: u32) -> Duration {
    let first = if was_ready { Duration::from_millis(100) } else { Duration::from_secs(1) };
    first.saturating_mul(2u32.saturating_pow(failures.min(10))).min(MAX_DELAY)
}

enum Event {
    Ready { idx: usize, generation: u64 },
    Exited { idx: usize, generation: u64, status: String },
    Start { idx: usize },
}

struct Slot {
    pid: Option<u32>,
    generation: u64,
    started: Instant,
    ready: bool,
    /// Consecutive quick deaths (for back-off).
    failures: u32,
}

/// Runs `components` (rows of the component table, in start order) until
/// `shutdown` fires.
pub async fn run(
    bin_dir: PathBuf,
    components: Vec<&'static ComponentInfo>,
    config: Handover,
    users: Users,
    mut shutdown: Shutdown,
) -> anyhow::Result<()> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Event>();
    let mut slots: Vec<Slot> =
        components.iter().map(|_| Slot { pid: None, generation: 0, started: Instant::now(), ready: false, failures: 0 }).collect();
    let start = |idx: usize, slot: &mut Slot, tx: &mpsc::UnboundedSender<Event>| {
        let c: &ComponentInfo = components[idx];
        slot.generation += 1;
        slot.started = Instant::now();
        slot.ready = false;
        let generation = slot.generation;
        match spawn(c, &bin_dir, &config, users.of(c.component)) {
            Ok(mut s) => {
                slot.pid = s.child.id();
                tracing::info!(component = c.name, pid = slot.pid, event = "started", "started");
                let ready_tx = tx.clone();
                tokio::spawn(async move {
                    if wait_ready(s.ready).await {
                        let _ = ready_tx.send(Event::Ready { idx, generation });
                    }
                });
                let exit_tx = tx.clone();
                tokio::spawn(async move {
                    let status = match s.child.wait().await {
                        Ok(st) => st.to_string(),
                        Err(e) => format!("wait failed: {e}"),
                    };
                    let _ = exit_tx.send(Event::Exited { idx, generation, status });
                });
            }
            Err(error) => {
                tracing::error!(component = c.name, %error, "cannot start");
                let _ = tx.send(Event::Exited { idx, generation, status: format!("spawn failed: {error}") });
            }
        }
    };
    for (idx, slot) in slots.iter_mut().enumerate() {
        start(idx, slot, &tx);
    }

    loop {
        let ev = tokio::select! {
            ev = rx.recv() => ev,
            _ = shutdown.fired() => break,
        };
        let Some(ev) = ev else { break };
        match ev {
            Event::Ready { idx, generation } if slots[idx].generation == generation => {
                let slot = &mut slots[idx];
                slot.ready = true;
                tracing::info!(component = components[idx].name, pid = slot.pid, after = ?slot.started.elapsed(), event = "ready", "ready");
            }
            Event::Exited { idx, generation, status } if slots[idx].generation == generation => {
                let c = components[idx];
                let slot = &mut slots[idx];
                slot.pid = None;
                let lived = slot.started.elapsed();
                if slot.ready && lived >= STABLE {
                    slot.failures = 0;
                }
                let delay = restart_delay(slot.ready, slot.failures);
                slot.failures += 1;
                if slot.ready {
                    tracing::warn!(component = c.name, %status, restart_in = ?delay, event = "restarting", "exited; restarting");
                } else {
                    tracing::error!(component = c.name, %status, restart_in = ?delay, event = "throttled", "exited before it was ready; throttled");
                }
                let tx = tx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let _ = tx.send(Event::Start { idx });
                });
            }
            Event::Start { idx } if slots[idx].pid.is_none() => start(idx, &mut slots[idx], &tx),
            _ => {} // an event of a previous generation, or a start already done
        }
    }

    tracing::info!(event = "stopping", "stopping components");
    let pids: Vec<(usize, u32)> = slots.iter().enumerate().filter_map(|(i, s)| s.pid.map(|p| (i, p))).collect();
    for (_, pid) in &pids {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(*pid as i32, libc::SIGTERM) };
    }
    let deadline = Instant::now() + STOP_GRACE;
    let mut alive: Vec<(usize, u32)> = pids;
    while !alive.is_empty() && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_millis(100), rx.recv()).await {
            Ok(Some(Event::Exited { idx, generation, status })) if slots[idx].generation == generation => {
                tracing::info!(component = components[idx].name, %status, event = "stopped", "stopped");
                alive.retain(|(i, _)| *i != idx);
            }
            _ => {}
        }
    }
    for (idx, pid) in alive {
        tracing::warn!(component = components[idx].name, "did not stop in time; killing");
        // SAFETY: as above.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ready_component_is_back_at_once_then_backs_off() {
        let ms = |f| restart_delay(true, f).as_millis();
        assert_eq!([ms(0), ms(1), ms(2), ms(3)], [100, 200, 400, 800]);
        assert_eq!(restart_delay(true, 9), Duration::from_millis(51_200));
        assert_eq!(restart_delay(true, 10), MAX_DELAY);
        assert_eq!(restart_delay(true, u32::MAX), MAX_DELAY);
    }

    #[test]
    fn a_component_dying_before_ready_is_throttled() {
        let s = |f| restart_delay(false, f).as_secs();
        assert_eq!([s(0), s(1), s(2), s(3), s(4), s(5)], [1, 2, 4, 8, 16, 32]);
        assert_eq!(restart_delay(false, 6), MAX_DELAY);
        assert_eq!(restart_delay(false, u32::MAX), MAX_DELAY);
    }
}
