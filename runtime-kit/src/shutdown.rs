//! Shutdown is passed in: every long-running task holds a [`Shutdown`] and
//! finishes when it fires. Triggering twice is harmless.

use tokio::sync::watch;

/// Fires shutdown.
#[derive(Clone)]
pub struct Trigger(watch::Sender<bool>);

/// Waits for shutdown.
#[derive(Clone)]
pub struct Shutdown(watch::Receiver<bool>);

/// A connected trigger/token pair.
pub fn channel() -> (Trigger, Shutdown) {
    let (tx, rx) = watch::channel(false);
    (Trigger(tx), Shutdown(rx))
}

impl Trigger {
    /// Starts shutdown (idempotent).
    pub fn fire(&self) {
        let _ = self.0.send(true);
    }
}

impl Shutdown {
    /// True once shutdown has started.
    pub fn is_fired(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves when shutdown starts (at once if it already has).
    pub async fn fired(&mut self) {
        // An error means every trigger is gone: nobody can ask us to stop,
        // which we treat as a request to stop.
        let _ = self.0.wait_for(|v| *v).await;
    }
}

/// Fires `trigger` on SIGINT or SIGTERM. Must run inside a tokio runtime.
pub fn on_signals(trigger: Trigger) {
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
            tracing::error!("cannot install signal handlers; stop with SIGKILL");
            return;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        tracing::info!(event = "stopping", "signal received, shutting down");
        trigger.fire();
    });
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn fired_resolves_after_fire_and_twice_is_harmless() {
        let (t, mut s) = super::channel();
        assert!(!s.is_fired());
        t.fire();
        t.fire();
        s.fired().await;
        assert!(s.is_fired());
    }
}
