//! `ringtail-span-actor`: raw request events in, spans out. Runs with
//! no privileges; see the library docs (`span_actor`) for the layout.

use std::time::Duration;

use anyhow::Context;
use ipc_schema::{endpoints, Component};
use ringtail_ipc::{Access, Consumer, ConsumerOptions, Producer, ProducerOptions};
use runtime_kit::component::{Process, Runtime};
use span_actor::actors::{self, publisher::Flush, Wiring};

/// How long the last span batches may take to reach a connected exporter
/// at shutdown; then the last raw ack goes out.
const LINGER: Duration = Duration::from_millis(500);

runtime_kit::component_main!(Component::SpanActor, Runtime::Actix, "Turns ringtail's raw request events into OpenTelemetry spans.", run);

async fn run(p: Process) -> anyhow::Result<()> {
    let settings = &p.settings;
    let registry = &p.registry;
    for (old, new) in settings.pipeline.deprecated() {
        tracing::warn!(event = "deprecated_key", "{old} is deprecated: it is {new} now (it bounds the connections of every protocol that keeps state per connection); the old name still works");
    }
    let dir = &settings.pipeline.runtime_dir;
    let own = endpoints::actors_dir(dir);
    std::fs::create_dir_all(&own)
        .with_context(|| format!("cannot create {} (the supervisor makes it, owned by actors.user)", own.display()))?;
    let spans_path = endpoints::spans(dir);
    let acks_path = endpoints::raw_acks(dir);
    p.socket_file(&spans_path);
    p.socket_file(&acks_path);
    let replay = settings.pipeline.replay_batches;
    let (spans, spans_task, settled) = Producer::start(
        ProducerOptions {
            path: spans_path,
            // Our user only: the exporter runs as the same user.
            access: Access::private(),
            acks: endpoints::span_acks(dir),
            me: p.me(),
            consumer: Component::ExporterActor,
            capacity: replay,
            backlog_full: registry.drops("ringtail_dropped_spans_total", "backlog_full"),
            publish_failed: registry.drops("ringtail_dropped_spans_total", "publish_failed"),
        },
        // Every kept batch may settle at once.
        replay + 64,
        registry,
    )
    .await?;
    let (raw_consumer, raw_task, raw) = Consumer::start(
        ConsumerOptions {
            path: endpoints::raw_events(dir),
            acks: acks_path,
            // Our group too, which the loader joins to read them.
            access: Access { mode: 0o660, gid: None, uid: None, peer: None },
            me: p.me(),
            producer: Component::ProbeLoader,
            capacity: 16,
            max_outstanding: replay,
            duplicates: registry.counter("ringtail_raw_batches_duplicate_total", &[]),
            duplicate_items: |_| 1,
        },
        registry,
        p.shutdown.clone(),
    )
    .await?;

    p.serve_profiles().await?;
    let actors = actors::start(
        settings,
        registry,
        Wiring { raw, raw_consumer: raw_consumer.clone(), spans: spans.clone(), settled, shutdown: p.shutdown.clone() },
    );
    p.ready();

    p.shutdown.clone().fired().await;
    // The raw subscription has stopped; publish what is pending, let it
    // reach the exporter, then send the last raw ack.
    let _ = actors.publisher.send(Flush).await;
    let _ = spans.close(LINGER).await;
    spans_task.join(2 * LINGER).await;
    raw_consumer.close().await;
    raw_task.join(LINGER).await;
    Ok(())
}
