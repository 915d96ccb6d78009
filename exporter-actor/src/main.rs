//! `ringtail-exporter-actor`: exports spans and metrics. Runs with no
//! privileges; see the library docs (`exporter_actor`) for the layout.

use std::time::Duration;

use actix::Actor;
use anyhow::Context;
use exporter_actor::meters::{self, Meters};
use exporter_actor::receiver::{Drain, Receiver};
use exporter_actor::sinks::otlp::{self, OtlpConfig, Transport};
use exporter_actor::sinks::prometheus;
use ipc_schema::{endpoints, Component};
use ringtail_ipc::{Access, Consumer, ConsumerOptions};
use runtime_kit::component::{Process, Runtime};

/// How long queued exports and the last metric push may take at shutdown
/// (the supervisor kills what is still running after 10 s).
const DRAIN: Duration = Duration::from_secs(2);

runtime_kit::component_main!(Component::ExporterActor, Runtime::Actix, "Exports ringtail's spans and metrics.", check = otlp_config, run);

/// Its own part of the configuration: the `OTEL_*` environment on top of
/// `[export.otlp]`.
fn otlp_config(settings: &ringtail_config::Settings) -> anyhow::Result<OtlpConfig> {
    let env = std::env::vars().collect();
    OtlpConfig::resolve(&settings.export.otlp, &env).context("invalid OTLP configuration")
}

async fn run(p: Process, otlp: OtlpConfig) -> anyhow::Result<()> {
    let settings = &p.settings;
    let registry = &p.registry;
    let dir = &settings.pipeline.runtime_dir;
    let own = endpoints::actors_dir(dir);
    std::fs::create_dir_all(&own).with_context(|| format!("cannot create {}", own.display()))?;
    let acks_path = endpoints::span_acks(dir);
    p.socket_file(&acks_path);

    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_owned()).unwrap_or_default();
    let derived = meters::Derived { service_graph: settings.metrics.service_graph, span_metrics: settings.metrics.span_metrics };
    let meters = Meters::new(otlp.resource_attributes.clone(), &host, registry)
        .evict_idle_after(meters::idle_limit(otlp.metrics_interval))
        .derive(derived);
    if let Some(listen) = settings.export.prometheus.listen {
        prometheus::start(listen.get(), meters.view(), registry, p.shutdown.clone()).await?;
    }
    let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel();
    let traces = match &otlp.traces_endpoint {
        Some(url) => {
            let t = Transport::new(url, &otlp)?;
            tracing::info!(endpoint = %url, protocol = otlp.protocol.as_str(), "exporting traces");
            Some(otlp::traces::TraceSink::start(t, &otlp, settings.export.queue_size, registry, done_tx))
        }
        None => None,
    };
    let metrics = match &otlp.metrics_endpoint {
        Some(url) => {
            let t = Transport::new(url, &otlp)?;
            tracing::info!(endpoint = %url, interval = ?otlp.metrics_interval, "exporting metrics");
            Some(otlp::metrics::start(t, &otlp, meters.view(), registry, p.shutdown.clone()))
        }
        None => None,
    };
    p.serve_profiles().await?;
    let (consumer, consumer_task, spans) = Consumer::start(
        ConsumerOptions {
            path: endpoints::spans(dir),
            acks: acks_path,
            access: Access::private(),
            me: p.me(),
            producer: Component::SpanActor,
            capacity: 16,
            max_outstanding: settings.pipeline.replay_batches,
            duplicates: registry.counter("ringtail_spans_duplicate_total", &[]),
            duplicate_items: Receiver::duplicate_spans,
        },
        registry,
        p.shutdown.clone(),
    )
    .await?;
    let receiver = Receiver::new(registry, settings.export.stdout, meters, traces, consumer.clone(), spans, done_rx)
        .vital(runtime_kit::component::Vital::new("receiver", p.shutdown.clone()))
        .start();
    p.ready();

    p.shutdown.clone().fired().await;
    // The span subscription has stopped: let queued exports and the last
    // metric push finish (bounded), then send the last ack.
    let deadline = tokio::time::Instant::now() + DRAIN;
    if tokio::time::timeout_at(deadline, receiver.send(Drain)).await.is_err() {
        tracing::warn!("exports still queued at shutdown; the span-actor replays them to the next exporter");
    }
    if let Some(task) = metrics {
        if tokio::time::timeout_at(deadline, task).await.is_err() {
            tracing::warn!("the last metric push did not finish in time");
        }
    }
    consumer.close().await;
    consumer_task.join(Duration::from_secs(1)).await;
    Ok(())
}
