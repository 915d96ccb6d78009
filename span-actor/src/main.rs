//! `ringtail-span-actor`: raw request events in, HTTP spans out. Runs with
//! no privileges; see the library docs (`span_actor`) for the layout.

/// mimalloc: the actors allocate per event; glibc's malloc was a quarter of
/// their CPU.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::time::Duration;

use anyhow::Context;
use ringtail_config::Settings;
use ipc_schema::{endpoints, Component, Producer as Me};
use ringtail_ipc::{Access, Consumer, ConsumerOptions, Producer, ProducerOptions};
use runtime_kit::counters::Registry;
use runtime_kit::{ready, shutdown};
use span_actor::actors::{self, publisher::Flush, Wiring};

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
    let me = Me { component: Component::SpanActor, instance };
    let replay = settings.pipeline.replay_batches;
    let (spans, spans_task, settled) = Producer::start(
        ProducerOptions {
            path: spans_path.clone(),
            // Our user only: the exporter runs as the same user.
            access: Access::private(),
            acks: endpoints::span_acks(dir),
            me,
            consumer: Component::ExporterActor,
            capacity: replay,
            backlog_full: registry.drops("ringtail_dropped_spans_total", "backlog_full"),
            publish_failed: registry.drops("ringtail_dropped_spans_total", "publish_failed"),
        },
        // Every kept batch may settle at once.
        replay + 64,
        &registry,
    )
    .await?;
    let (raw_consumer, raw_task, raw) = Consumer::start(
        ConsumerOptions {
            path: endpoints::raw_events(dir),
            acks: acks_path.clone(),
            // Our group too, which the loader joins to read them.
            access: Access { mode: 0o660, gid: None, uid: None },
            me,
            producer: Component::ProbeLoader,
            capacity: 16,
            max_outstanding: replay,
            duplicates: registry.counter("ringtail_raw_batches_duplicate_total", &[]),
            duplicate_items: |_| 1,
        },
        &registry,
        shutdown.clone(),
    )
    .await?;

    if let Some(addr) = runtime_kit::profiling::address(settings.profile.port, 1) {
        runtime_kit::profiling::start(addr, Component::SpanActor.name(), shutdown.clone()).await?;
    }
    let actors = actors::start(&settings, &registry, Wiring { raw, raw_consumer: raw_consumer.clone(), spans: spans.clone(), settled });
    ready::notify_ready(Component::SpanActor.name());

    shutdown.fired().await;
    let _ = actors.publisher.send(Flush).await;
    let _ = spans.close(Duration::from_millis(500)).await;
    spans_task.join(Duration::from_secs(1)).await;
    raw_consumer.close().await;
    raw_task.join(Duration::from_secs(1)).await;
    for p in [&spans_path, &acks_path] {
        let _ = std::fs::remove_file(p);
    }
    tracing::info!(event = "stopped", "stopped");
    actix_rt::System::current().stop();
    Ok(())
}
