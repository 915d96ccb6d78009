//! One `main` for every component, so that each starts, stops and cleans
//! up the same way: parse the command line, load the configuration (and
//! the component's own checks; `--check` stops there), start logging,
//! signals and the runtime, then run the component's body with a
//! [`Process`], which offers the rest: the profiling endpoint at the
//! component table's offset, readiness, and socket files that are unlinked
//! however the body ends (an early `?` included).
//!
//! Shutdown is the body's: it waits for `Process::shutdown`, then joins its
//! tasks (each with a deadline) before returning; nothing sleeps and hopes.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ipc_schema::{Component, Producer};
use ringtail_config::{ConfigError, Settings};

use crate::counters::Registry;
use crate::shutdown::{self, Shutdown};

/// Which async runtime the body runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// A current-thread tokio runtime (the loader: one thread, no actors).
    CurrentThread,
    /// An actix system (the actors), stopped when the body returns.
    Actix,
}

/// Why a component could not start before its own code ran.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("invalid configuration")]
    Config {
        #[source]
        source: ConfigError,
    },
    #[error("cannot start the runtime")]
    Runtime {
        #[source]
        source: std::io::Error,
    },
    #[error("cannot make the process non-dumpable (prctl PR_SET_DUMPABLE)")]
    NotDumpable {
        #[source]
        source: std::io::Error,
    },
    #[error("cannot become the actors' user")]
    RunAs {
        #[source]
        source: crate::users::SwitchError,
    },
    #[error("cannot serve CPU profiles")]
    Profiling {
        #[source]
        source: crate::http::BindError,
    },
}

/// Exit status of a process that panicked (Rust's own for a panic in
/// `main`): a panic anywhere ends the process, whatever the profile's
/// `panic` setting, so that it is restarted rather than left running with a
/// dead actor or task.
pub const EXIT_PANIC: i32 = 101;

/// Exit status of a process whose vital actor stopped before shutdown.
pub const EXIT_ACTOR_STOPPED: i32 = 70;

/// Makes every panic end the process with [`EXIT_PANIC`] once it is
/// reported: tokio and actix catch a panic in a task or an actor and keep
/// the process up, which would leave it alive but unable to work (every
/// later event dropped). [`main`] installs it.
pub fn exit_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        tracing::error!(event = "panic", %info, "panicked; exiting so that the process is restarted");
        std::process::exit(EXIT_PANIC);
    }));
}

/// An actor the process cannot work without. Its `Actor::stopped` calls
/// [`Vital::stopped`]: stopping before shutdown has started ends the process
/// with [`EXIT_ACTOR_STOPPED`], so that the supervisor (or systemd) restarts
/// it.
#[derive(Clone)]
pub struct Vital {
    name: &'static str,
    shutdown: Shutdown,
}

impl Vital {
    /// The actor `name` of a process stopping on `shutdown`.
    pub fn new(name: &'static str, shutdown: Shutdown) -> Vital {
        Vital { name, shutdown }
    }

    /// The actor has stopped: fine during shutdown, fatal before.
    pub fn stopped(&self) {
        if !self.shutdown.is_fired() {
            tracing::error!(
                event = "actor_stopped",
                actor = self.name,
                "actor stopped before shutdown; exiting so that the process is restarted"
            );
            std::process::exit(EXIT_ACTOR_STOPPED);
        }
    }
}

/// Socket files to remove when the component ends.
#[derive(Default)]
struct Unlink(Mutex<Vec<PathBuf>>);

impl Drop for Unlink {
    fn drop(&mut self) {
        let paths = std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()));
        for p in paths {
            match std::fs::remove_file(&p) {
                Ok(()) => tracing::debug!(path = %p.display(), "socket file removed"),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => tracing::warn!(path = %p.display(), %error, "cannot remove socket file"),
            }
        }
    }
}

/// What a running component gets from [`main`].
pub struct Process {
    /// Which component this is.
    pub component: Component,
    /// The whole configuration (already validated).
    pub settings: Settings,
    /// This start's random id (names it as a producer).
    pub instance: u64,
    /// Its counters and gauges.
    pub registry: Registry,
    /// Fires on SIGINT/SIGTERM.
    pub shutdown: Shutdown,
    sockets: Arc<Unlink>,
}

impl Process {
    /// This process as the producer of its messages.
    pub fn me(&self) -> Producer {
        Producer { component: self.component, instance: self.instance }
    }

    /// Removes the socket file at `path` when the component ends, however
    /// it ends. Call it before binding.
    pub fn socket_file(&self, path: &Path) {
        self.sockets.0.lock().unwrap_or_else(|p| p.into_inner()).push(path.to_owned());
    }

    /// Serves CPU profiles on loopback at `profile.port` plus this
    /// component's offset in the component table (when profiling is on).
    pub async fn serve_profiles(&self) -> Result<(), StartError> {
        let offset = self.component.info().profiling_offset;
        if let Some(addr) = crate::profiling::address(self.settings.profile.port, offset) {
            crate::profiling::start(addr, self.component.name(), &self.registry, self.shutdown.clone())
                .await
                .map_err(|source| StartError::Profiling { source })?;
        }
        Ok(())
    }

    /// Tells the supervisor (or systemd) that start-up is done.
    pub fn ready(&self) {
        crate::ready::notify_ready(self.component.name());
    }
}

/// Runs a component: `about` is its one-line description, `check` its own
/// configuration checks beyond the file's rules (what it returns is handed
/// to `run`), `run` its body.
pub fn main<T, E, Fut>(
    component: Component,
    about: &'static str,
    runtime: Runtime,
    check: impl FnOnce(&Settings) -> Result<T, E>,
    run: impl FnOnce(Process, T) -> Fut,
) -> Result<(), E>
where
    E: From<StartError>,
    Fut: Future<Output = Result<(), E>>,
{
    let args = crate::cli::parse(about);
    // Was this process open to its own user from its exec until now? Not
    // when exec'd as root (the supervisor: it switches below), nor from an
    // executable its user cannot read (the kernel then makes it
    // non-dumpable at exec: systemd/install.sh installs them 0711).
    let exposed_at_exec = args.run_as.is_none() && !component.info().privileged && was_dumpable_as_user();
    if let Some(ids) = args.run_as {
        crate::users::become_user(ids).map_err(|source| StartError::RunAs { source })?;
    }
    if !component.info().privileged {
        // The actors hold spans and the exporter's headers: no core dumps,
        // and no ptrace, /proc/PID/mem or /proc/PID/fd (the configuration's
        // memfd) by other processes of their user. First, before the
        // configuration is read.
        non_dumpable().map_err(|source| StartError::NotDumpable { source })?;
    }
    let settings = crate::cli::load(&args).map_err(|source| StartError::Config { source })?;
    let checked = check(&settings)?;
    if args.check {
        return Ok(());
    }
    exit_on_panic();
    if exposed_at_exec && component.info().secrets {
        tracing::warn!(
            event = "dumpable_at_exec",
            "this process was readable by every process of its user (uid {}) from its exec until it made itself non-dumpable: \
             its environment (OTEL_EXPORTER_OTLP_HEADERS) and configuration were exposed in that window. \
             Install the binary execute-only (chmod 0711, as systemd/install.sh does) or run it under the ringtail supervisor",
            // SAFETY: geteuid has no preconditions.
            unsafe { libc::geteuid() }
        );
    }
    // Files and sockets are created private (a socket file is never, even
    // briefly, reachable by others before its mode is set on purpose).
    // SAFETY: umask cannot fail and touches no memory.
    unsafe { libc::umask(0o077) };
    let body = async move {
        // SAFETY: geteuid has no preconditions.
        if !component.info().privileged && unsafe { libc::geteuid() } == 0 {
            tracing::warn!("running as root: the {} needs no privileges (the supervisor runs it as actors.user)", component.name());
        }
        let instance = crate::instance_id();
        let registry = Registry::new(component, instance);
        let (trigger, shutdown) = shutdown::channel();
        shutdown::on_signals(trigger);
        let sockets = Arc::new(Unlink::default());
        // On this thread, where the component allocates: memory it freed
        // goes back to the system within a second, busy or idle.
        tokio::task::spawn_local(crate::memory::collector(shutdown.clone()));
        let process = Process { component, settings, instance, registry, shutdown, sockets: sockets.clone() };
        let result = run(process, checked).await;
        drop(sockets);
        if result.is_ok() {
            tracing::info!(event = "stopped", "stopped");
        }
        result
    };
    match runtime {
        Runtime::CurrentThread => {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|source| StartError::Runtime { source })?;
            tokio::task::LocalSet::new().block_on(&rt, body)
        }
        Runtime::Actix => actix_rt::System::new().block_on(async {
            let result = body.await;
            actix_rt::System::current().stop();
            result
        }),
    }
}

/// True if this process, not root, is dumpable (`PR_GET_DUMPABLE` 1): every
/// process of its uid could read it since its exec.
fn was_dumpable_as_user() -> bool {
    // SAFETY: geteuid has no preconditions; PR_GET_DUMPABLE takes no pointer.
    unsafe { libc::geteuid() != 0 && libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) == 1 }
}

/// prctl(PR_SET_DUMPABLE, 0): /proc/PID files become root's, ptrace needs
/// CAP_SYS_PTRACE, no core dump.
pub fn non_dumpable() -> std::io::Result<()> {
    // SAFETY: prctl(PR_SET_DUMPABLE) takes integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// A component binary's entry point: mimalloc as the global allocator (the
/// processes allocate per event; glibc's malloc was a quarter of the actors'
/// CPU) and `fn main` running [`main`]. The binary depends on `mimalloc`
/// and `anyhow`.
///
/// `component_main!(Component::X, Runtime::Y, "about", run)` for a body
/// `async fn run(Process) -> anyhow::Result<()>`, or with `check = f` first
/// for a component with checks of its own (`f(&Settings)` returns what
/// `run(Process, T)` gets).
#[macro_export]
macro_rules! component_main {
    ($component:expr, $runtime:expr, $about:expr, check = $check:expr, $run:expr) => {
        #[global_allocator]
        static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

        fn main() -> anyhow::Result<()> {
            $crate::component::main($component, $about, $runtime, $check, $run)
        }
    };
    ($component:expr, $runtime:expr, $about:expr, $run:expr) => {
        $crate::component_main!($component, $runtime, $about, check = |_| Ok(()), |p, ()| $run(p));
    };
}

#[cfg(test)]
mod tests {
    use super::Unlink;

    /// Runs this test binary's test `name` alone in a child with `env` set.
    fn child(name: &str, env: &str) -> std::process::ExitStatus {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--test-threads=1"])
            .env(env, "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
    }

    #[test]
    fn a_panic_in_an_actor_task_ends_the_process() {
        const ENV: &str = "RK_TEST_PANIC_CHILD";
        if std::env::var_os(ENV).is_some() {
            super::exit_on_panic();
            actix_rt::System::new().block_on(async {
                // actix_rt (tokio) would catch it and carry on
                let _ = actix_rt::spawn(async { panic!("from the wire") }).await;
            });
            std::process::exit(0); // the process outlived the panic: the parent fails
        }
        let status = child("component::tests::a_panic_in_an_actor_task_ends_the_process", ENV);
        assert_eq!(status.code(), Some(super::EXIT_PANIC), "{status:?}");
    }

    #[test]
    fn a_vital_actor_stopping_before_shutdown_ends_the_process() {
        const ENV: &str = "RK_TEST_VITAL_CHILD";
        if std::env::var_os(ENV).is_some() {
            let (trigger, shutdown) = crate::shutdown::channel();
            let vital = super::Vital::new("test", shutdown);
            trigger.fire();
            vital.stopped(); // during shutdown: nothing
            let (_trigger, shutdown) = crate::shutdown::channel();
            super::Vital::new("test", shutdown).stopped();
            std::process::exit(0);
        }
        let status = child("component::tests::a_vital_actor_stopping_before_shutdown_ends_the_process", ENV);
        assert_eq!(status.code(), Some(super::EXIT_ACTOR_STOPPED), "{status:?}");
    }

    #[test]
    fn socket_files_go_when_the_guard_does() {
        let dir = std::env::temp_dir().join(format!("rk-unlink-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a.sock"), dir.join("never-bound.sock"));
        std::fs::write(&a, b"").unwrap();
        let guard = Unlink::default();
        guard.0.lock().unwrap().extend([a.clone(), b]);
        // An early `?` return drops the guard like this.
        drop(guard);
        assert!(!a.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
