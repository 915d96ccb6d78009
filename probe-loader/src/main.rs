//! `ringtail-probe-loader`: ringtail's only privileged process.
//!
//! It loads the eBPF programs, attaches them to BTF tracepoints, seeds the
//! in-kernel process selection, binds its socket, drops every capability it
//! no longer needs, and then only reads the ring buffer and publishes raw
//! request events in batches. It never acts on a message from the
//! unprivileged actors beyond forgetting acknowledged batches.
//!
//! # Layout
//! - `kernel`: Rust mirrors of `bpf/ringtail.h`, layout-checked, and their
//!   conversion into `ipc_schema::RawEvent`.
//! - `probes`: loading and attaching the programs; the maps user space uses.
//! - `discovery`: seeding the selection from /proc; exe-name matching.
//! - `procinfo`: process names and `OTEL_*` variables, read once per process.
//! - `privileges`: the capability check before, and the drop after.
//! - `pump`: the loop: ring buffer → batches → PUB socket, plus heartbeats.
//! - `bpf/ringtail.bpf.c`: the kernel programs themselves.

/// mimalloc: the actors allocate per event; glibc's malloc was a quarter of
/// their CPU.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod discovery;
mod kernel;
mod privileges;
mod probes;
mod procinfo;
mod pump;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use anyhow::Context;
use ipc_schema::{endpoints, Component};
use ringtail_ipc::{Access, Producer, ProducerOptions};
use runtime_kit::component::{self, Process, Runtime};
use runtime_kit::users;

/// How long the last batches may take to reach a connected span-actor at
/// shutdown (what it has not received, a restarted loader cannot replay).
const LINGER: Duration = Duration::from_millis(500);

fn main() -> anyhow::Result<()> {
    component::main(
        Component::ProbeLoader,
        "Loads ringtail's eBPF probes and publishes raw HTTP request events.",
        Runtime::CurrentThread,
        |_| Ok(()),
        |p, ()| run(p),
    )
}

async fn run(p: Process) -> anyhow::Result<()> {
    let settings = &p.settings;
    privileges::check(settings.probe.read_process_env)?;

    // 1. Privileged work: load and attach, seed the selection, bind.
    let wakeup_len = settings.effective_wakeup_len();
    let (mut probes, rings) = probes::Probes::load(&settings.probe, &settings.discovery, wakeup_len)?;
    tracing::info!(event = "attached", wakeup_len, "probes attached");
    // Parsing the kernel's BTF was a one-off peak: give it back.
    runtime_kit::memory::release();
    if !settings.discovery.selects_all() {
        let pids = discovery::Discovery::new(&settings.discovery).scan(std::path::Path::new("/proc"));
        for (pid, why) in &pids {
            probes.select_pid(*pid, *why)?;
        }
        tracing::info!(processes = pids.len(), ports = ?settings.discovery.open_ports, "selection seeded");
    }
    let dir = &settings.pipeline.runtime_dir;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).with_context(|| format!("chmod {}", dir.display()))?;
    let actors = users::actor_ids(&settings.actors)
        .with_context(|| format!("actors.user {:?} / actors.group {:?} do not exist", settings.actors.user, settings.actors.group))?;
    let raw_path = endpoints::raw_events(dir);
    p.socket_file(&raw_path);
    let options = ProducerOptions {
        path: raw_path,
        // Only the actors' group may connect; only we can bind here.
        access: Access { mode: 0o660, gid: Some(actors.gid), uid: None },
        acks: endpoints::raw_acks(dir),
        me: p.me(),
        consumer: Component::SpanActor,
        capacity: settings.pipeline.replay_batches,
        backlog_full: p.registry.drops("ringtail_dropped_events_total", "backlog_full"),
        publish_failed: p.registry.drops("ringtail_dropped_events_total", "publish_failed"),
    };
    // The batches' fate does not matter here (no tags): the reports are not read.
    let (publisher, publisher_task, _) = Producer::<()>::start(options, 1, &p.registry).await?;

    // 2. Drop what is no longer needed. The actors' group stays, as the only
    //    way into their directory for the acks they publish.
    privileges::join_group(actors.gid)?;
    privileges::drop_all(settings.probe.read_process_env)?;
    tracing::info!(event = "dropped_privileges", kept = %privileges::effective(), "privileges dropped");

    // 3. Work.
    p.serve_profiles().await?;
    p.ready();
    pump::Pump::new(probes, publisher.clone(), settings, p.registry.clone()).run(rings, p.shutdown.clone()).await?;
    let _ = publisher.close(LINGER).await;
    publisher_task.join(2 * LINGER).await;
    Ok(())
}
