//! `ringtail`: what users run. Reads the configuration, has every component
//! check its part, prepares the runtime directory, starts the probe-loader
//! (privileged) and the actors (as `actors.user`, no capabilities,
//! `no_new_privs`: the span-actor, the exporter-actor, and the k8s-actor
//! when Kubernetes metadata is on), restarts each on its own, and stops
//! them all on SIGINT/SIGTERM.
//!
//! # Layout
//! - `spawn`: starting one component: readiness pipe, privilege drop,
//!   parent-death signal.
//! - `supervise`: restarts with back-off, throttling of components that die
//!   before they are ready, orderly stop.
//! - `handover`: the effective configuration each component gets, a
//!   sealed memfd (never a file: it holds the exporter's credentials).
//! - `shared_user`: the processes that already run as `actors.user`.
//! - `prepare_runtime_dir` (here): the directories the components share.

mod handover;
mod shared_user;
mod spawn;
mod supervise;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use ipc_schema::{endpoints, Component, ComponentInfo};
use ringtail_config::Settings;
use runtime_kit::users::{self, UserIds};

/// ringtail: eBPF HTTP auto-instrumentation. Every HTTP/1.x request served
/// or sent on this host becomes an OpenTelemetry span and a duration metric.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// The configuration file (TOML); RINGTAIL_… variables override it.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run ringtail in the foreground (the default).
    Run,
    /// Validate the configuration (every component's part) and print the
    /// effective configuration.
    CheckConfig,
    /// Remove what ringtail leaves in the kernel while it is not running:
    /// the pinned probes, maps and ring buffer under `probe.pin_dir` (kept
    /// after a crash, or on stop with `probe.keep_pins_on_stop`).
    Cleanup {
        /// As the loader unit's `ExecStopPost=`: remove them only after a
        /// clean stop (systemd's `$SERVICE_RESULT` is `success`) and unless
        /// `probe.keep_pins_on_stop`; after a crash the restarted loader
        /// reopens them.
        #[arg(long)]
        after_stop: bool,
    },
    /// Report what this kernel offers (BTF, bpffs, tracefs, each hook family
    /// actually probed, capabilities), which capture backend ringtail will
    /// use and what it cannot do here; exit non-zero when it cannot run.
    /// Run as root: it loads and attaches the probes for a moment.
    CheckKernel,
}

fn bin_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("RINGTAIL_BIN_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let exe = std::env::current_exe().context("cannot find the ringtail executable")?;
    Ok(exe.parent().map(Path::to_path_buf).unwrap_or_default())
}

/// Runs `binary --check` for each component: each validates its own part
/// (e.g. the exporter its `OTEL_*` environment).
fn check_components(bin: &Path, config: Option<&Path>) -> anyhow::Result<()> {
    for c in Component::supervised() {
        let mut cmd = std::process::Command::new(bin.join(c.binary));
        cmd.arg("--check");
        if let Some(p) = config {
            cmd.arg("--config").arg(p);
        }
        let out = cmd.output().with_context(|| format!("cannot run {}", bin.join(c.binary).display()))?;
        if !out.status.success() {
            bail!("{}: {}", c.name, String::from_utf8_lossy(&out.stderr).trim());
        }
    }
    Ok(())
}

/// The components to run: every supervised one, but the k8s-actor only
/// when Kubernetes metadata is on (`kubernetes.enabled`, and for `auto`
/// this process's environment: `KUBERNETES_SERVICE_HOST`).
fn wanted(settings: &Settings) -> Vec<&'static ComponentInfo> {
    let k8s = settings.kubernetes.active();
    Component::supervised().filter(|c| c.component != Component::K8sActor || k8s).collect()
}

/// Creates the runtime directory (root, 0755), the actors' directory
/// (theirs, 0750: the loader reads their acks through the group) and,
/// when the k8s-actor runs, its directory (its uid, the actors' group,
/// 2750: the span-actor reads what it publishes, writes nothing there, and
/// new files take the actors' group). The configuration is not written
/// there (see `handover`).
fn prepare_runtime_dir(settings: &Settings, actors: UserIds, k8s: Option<UserIds>) -> anyhow::Result<()> {
    let dir = &settings.pipeline.runtime_dir;
    // Never through a symlink, never someone else's directory, never below
    // a directory another user could rename it out of.
    runtime_kit::dirs::ensure_trusted(dir, 0, 0, 0o755).with_context(|| format!("pipeline.runtime_dir {}", dir.display()))?;
    let own = endpoints::actors_dir(dir);
    runtime_kit::dirs::ensure_trusted(&own, actors.uid, actors.gid, 0o750)
        .with_context(|| format!("cannot give {} to the actors", own.display()))?;
    if let Some(k8s) = k8s {
        let dir = endpoints::k8s_dir(dir);
        runtime_kit::dirs::ensure_trusted(&dir, k8s.uid, actors.gid, 0o2750)
            .with_context(|| format!("cannot give {} to the k8s-actor", dir.display()))?;
    }
    // Stale sockets of a previous run would only confuse a connect; the
    // effective configuration earlier versions wrote here held secrets.
    // A previous run's Kubernetes metadata is not this one's (metadata
    // may be off now, or the node another).
    for p in [
        endpoints::raw_events(dir),
        endpoints::spans(dir),
        endpoints::raw_acks(dir),
        endpoints::span_acks(dir),
        dir.join(STALE_CONFIG),
        endpoints::k8s_snapshot(dir),
        endpoints::k8s_health(dir),
    ] {
        let _ = std::fs::remove_file(p);
    }
    Ok(())
}

/// The effective configuration earlier versions left in the runtime directory.
const STALE_CONFIG: &str = "ringtail.toml";

/// Removes the pinned probes (detaching them) and their maps, if any: every
/// entry of `probe.pin_dir` (no symlink followed), once that directory and
/// each one above it are found root's alone. The directory itself stays,
/// root's and 0700, so that no other user can make one of that name before
/// the next start.
fn remove_pins(settings: &Settings) -> anyhow::Result<bool> {
    use std::os::fd::AsFd;
    let dir = &settings.probe.pin_dir;
    if !settings.probe.pins() || std::fs::symlink_metadata(dir).is_err() {
        return Ok(false);
    }
    let fd = runtime_kit::dirs::open_trusted(dir)
        .with_context(|| format!("not removing the pinned probes in {} (probe.pin_dir): it is not root's alone", dir.display()))?;
    let names = runtime_kit::files::names_in(fd.as_fd())
        .with_context(|| format!("cannot list the pinned probes in {} (probe.pin_dir)", dir.display()))?;
    let removed = !names.is_empty();
    for name in names {
        let path = dir.join(name);
        // Does not follow symlinks (a symlink is removed, not its target).
        let gone = if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        gone.with_context(|| format!("cannot remove the pinned probes in {} (probe.pin_dir)", path.display()))?;
    }
    Ok(removed)
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut settings = Settings::load(args.config.as_deref()).context("invalid configuration")?;
    // `auto` decided once, here, from this process's environment: the
    // components get the decision (the span-actor waits for metadata only
    // when the k8s-actor runs).
    settings.kubernetes.enabled =
        if settings.kubernetes.active() { ringtail_config::kubernetes::Enabled::On } else { ringtail_config::kubernetes::Enabled::Off };
    let bin = bin_dir()?;
    match args.command.unwrap_or(Command::Run) {
        Command::CheckKernel => {
            // The probe-loader knows the probes: it runs the checks.
            let loader = bin.join(Component::ProbeLoader.info().binary);
            let mut cmd = std::process::Command::new(&loader);
            cmd.arg("check-kernel");
            if let Some(p) = &args.config {
                cmd.arg("--config").arg(p);
            }
            let status = cmd.status().with_context(|| format!("cannot run {}", loader.display()))?;
            std::process::exit(status.code().unwrap_or(1));
        }
        Command::CheckConfig => {
            check_components(&bin, args.config.as_deref())?;
            // Printed, so without its secrets' values (names kept).
            print!("{}", settings.redacted().to_toml());
            eprintln!("configuration is valid");
            Ok(())
        }
        Command::Cleanup { after_stop } => {
            if after_stop {
                let result = std::env::var("SERVICE_RESULT").unwrap_or_default();
                if result != "success" || settings.probe.keep_pins_on_stop {
                    eprintln!(
                        "pinned probes kept (service result {result:?}, probe.keep_pins_on_stop = {})",
                        settings.probe.keep_pins_on_stop
                    );
                    return Ok(());
                }
            }
            if remove_pins(&settings)? {
                eprintln!("removed the pinned probes in {}", settings.probe.pin_dir.display());
            } else {
                eprintln!("nothing pinned in {}", settings.probe.pin_dir.display());
            }
            Ok(())
        }
        Command::Run => {
            runtime_kit::logging::init(&settings.log.level);
            check_components(&bin, args.config.as_deref()).context("invalid configuration")?;
            // OBI / Beyla variables ringtail has no equivalent of: said, not read.
            for (var, instead) in ringtail_config::obi::unmapped(&std::env::vars().collect()) {
                tracing::warn!(variable = %var, instead, event = "unmapped_variable", "an OBI or Beyla setting ringtail has no equivalent of: ignored");
            }
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } != 0 {
                bail!(
                    "ringtail must start as root: the probe-loader needs CAP_BPF and CAP_PERFMON, and the actors are started as {:?}",
                    settings.actors.user
                );
            }
            let actors = users::actor_ids(&settings.actors).with_context(|| {
                format!("actors.user {:?} / actors.group {:?}: no such user or group", settings.actors.user, settings.actors.group)
            })?;
            if actors.uid == 0 {
                bail!("actors.user {:?} is root: the actors must run unprivileged", settings.actors.user);
            }
            // Before any actor runs: every other process of that uid could
            // read what they hold.
            let others = shared_user::processes_of(actors.uid).context("cannot list the processes in /proc")?;
            settings.actors.check_unshared(actors.uid, &others).context("invalid configuration")?;
            if !others.is_empty() {
                tracing::warn!(user = %settings.actors.user, uid = actors.uid, processes = ?others, event = "shared_user", "actors.allow_shared_user: other processes run as the actors' user and can read what they hold");
            }
            let components = wanted(&settings);
            let k8s = if components.iter().any(|c| c.component == Component::K8sActor) {
                let k8s = users::user(&settings.actors.k8s_user).with_context(|| {
                    format!(
                        "actors.k8s_user {:?}: no such user (the k8s-actor's own: `useradd --system --user-group {}`)",
                        settings.actors.k8s_user, settings.actors.k8s_user
                    )
                })?;
                settings.actors.check_k8s_ids((actors.uid, actors.gid), (k8s.uid, k8s.gid)).context("invalid configuration")?;
                let others = shared_user::processes_of(k8s.uid).context("cannot list the processes in /proc")?;
                settings.actors.check_k8s_unshared(k8s.uid, &others).context("invalid configuration")?;
                Some(k8s)
            } else {
                None
            };
            prepare_runtime_dir(&settings, actors, k8s)?;
            let config = handover::Handover::new(&settings).context("cannot hand the configuration over")?;
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(async {
                let (trigger, shutdown) = runtime_kit::shutdown::channel();
                runtime_kit::shutdown::on_signals(trigger);
                if let Some(addr) = runtime_kit::profiling::address(settings.profile.port, Component::Supervisor.info().profiling_offset) {
                    // Counted, though nothing exports the supervisor's counters.
                    let registry = runtime_kit::counters::Registry::new(Component::Supervisor, runtime_kit::instance_id());
                    runtime_kit::profiling::start(addr, Component::Supervisor.name(), &registry, shutdown.clone()).await?;
                }
                tracing::info!(
                    version = env!("CARGO_PKG_VERSION"),
                    actors_uid = actors.uid,
                    k8s_uid = k8s.map(|k| k.uid),
                    event = "starting",
                    "ringtail starting"
                );
                if k8s.is_none() {
                    tracing::info!(event = "k8s_off", "Kubernetes metadata is off (kubernetes.enabled; not in a cluster): no k8s-actor");
                }
                supervise::run(bin, components, config, spawn::Users { actors, k8s }, shutdown).await
            })?;
            let dir = &settings.pipeline.runtime_dir;
            for p in [
                endpoints::raw_events(dir),
                endpoints::spans(dir),
                endpoints::raw_acks(dir),
                endpoints::span_acks(dir),
                endpoints::k8s_snapshot(dir),
                endpoints::k8s_health(dir),
            ] {
                let _ = std::fs::remove_file(p);
            }
            if settings.probe.keep_pins_on_stop {
                tracing::info!(dir = %settings.probe.pin_dir.display(), event = "pins_kept", "probes stay pinned: capture goes on into the ring until ringtail starts again (`ringtail cleanup` removes them)");
            } else if remove_pins(&settings)? {
                tracing::info!(dir = %settings.probe.pin_dir.display(), event = "pins_removed", "pinned probes removed");
            }
            tracing::info!(event = "stopped", "ringtail stopped");
            Ok(())
        }
    }
}
