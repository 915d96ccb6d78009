//! `ringtail-span-actor`: raw request events in, HTTP spans out. Runs with
//! no privileges; see the library docs (`span_actor`) for the layout.

/// mimalloc: the actors allocate per event; glibc's malloc was a quarter of
/// their CPU.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::Duration;

use anyhow::Context;
use ipc_schema::config::Settings;
use ipc_schema::{endpoints, Component, Producer};
use runtime_kit::counters::Registry;
use runtime_kit::ipc::{self, AckSender, Access, ReplayPublisher};
use runtime_kit::{ready, shutdown};

fn main() -> anyhow::Result<()> {
    let args = runtime_kit::cli::parse("Turns ringtail's raw request events into OpenTelemetry spans.");
    let settings = runtime_kit::cli::load(&args).context("invalid configuration")?;
    if args.check {
        return Ok(());
    }
    let system = actix_rt::System::new();
    system.block_on(run(settings))
}

async fn run(settings: Settings) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        tracing::warn!("running as root: the span-actor needs no privileges (the supervisor runs it as actors.user)");
    }
    let instance = runtime_kit::instance_id();
    let registry = Registry::new(Component::SpanActor, instance);
    let (trigger, mut shutdown) = shutdown::channel();
    shutdown::on_signals(trigger);

    let dir = &settings.pipeline.runtime_dir;
    let own = endpoints::actors_dir(dir);
    std::fs::create_dir_all(&own).with_context(|| format!("cannot create {} (the supervisor makes it, owned by actors.user)", own.display()))?;
    let spans_path = endpoints::spans(dir);
    let acks_path = endpoints::raw_acks(dir);
    // Spans: our user only (the exporter runs as the same user). Acks: our
    // group too, which the loader joins to read them.
    let spans = ipc::bind_pub(&spans_path, Access::private()).await?;
    let raw_acks = ipc::bind_pub(&acks_path, Access { mode: 0o660, gid: None, uid: None }).await?;
    let me = Producer { component: Component::SpanActor, instance };
    let backlog = registry.drops("ringtail_dropped_spans_total", "backlog_full");
    let spans = ReplayPublisher::new(spans, spans_path.clone(), me, settings.pipeline.replay_batches, &registry, backlog);
    let raw_acks = AckSender::new(raw_acks, acks_path.clone(), me);

    if let Some(addr) = runtime_kit::profiling::address(settings.profile.port, 1) {
        runtime_kit::profiling::start(addr, Component::SpanActor.name(), shutdown.clone()).await?;
    }
    let raw = ipc::subscribe(endpoints::raw_events(dir), 16, &registry, shutdown.clone());
    let exporter_acks = ipc::subscribe(endpoints::span_acks(dir), 64, &registry, shutdown.clone());
    let actors = span_actor::actors::start(&settings, &registry, raw, exporter_acks, spans, raw_acks);
    ready::notify_ready(Component::SpanActor.name());

    shutdown.fired().await;
    let _ = actors.publisher.send(span_actor::actors::publisher::Flush).await;
    // Let the last batch leave the socket before the runtime stops.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for p in [&spans_path, &acks_path] {
        let _ = std::fs::remove_file(p);
    }
    tracing::info!(event = "stopped", "stopped");
    actix_rt::System::current().stop();
    Ok(())
}
