//! `ringtail-exporter-actor`: exports spans and metrics. Runs with no
//! privileges; see the library docs (`exporter_actor`) for the layout.

/// mimalloc: the actors allocate per event; glibc's malloc was a quarter of
/// their CPU.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::SocketAddr;
use std::time::Duration;

use actix::Actor;
use anyhow::Context;
use exporter_actor::meters::{self, Meters};
use exporter_actor::receiver::Receiver;
use exporter_actor::sinks::otlp::{self, OtlpConfig, Transport};
use exporter_actor::sinks::prometheus;
use ipc_schema::config::Settings;
use ipc_schema::{endpoints, Component, Producer};
use runtime_kit::counters::Registry;
use runtime_kit::ipc::{self, AckSender, Access};
use runtime_kit::{ready, shutdown};

fn main() -> anyhow::Result<()> {
    let args = runtime_kit::cli::parse("Exports ringtail's spans and metrics.");
    let settings = runtime_kit::cli::load(&args).context("invalid configuration")?;
    let env = std::env::vars().collect();
    let otlp = OtlpConfig::resolve(&settings.export.otlp, &env).context("invalid OTLP configuration")?;
    if args.check {
        return Ok(());
    }
    let system = actix_rt::System::new();
    system.block_on(run(settings, otlp))
}

async fn run(settings: Settings, otlp: OtlpConfig) -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        tracing::warn!("running as root: the exporter-actor needs no privileges (the supervisor runs it as actors.user)");
    }
    let instance = runtime_kit::instance_id();
    let registry = Registry::new(Component::ExporterActor, instance);
    let (trigger, mut shutdown) = shutdown::channel();
    shutdown::on_signals(trigger);

    let dir = &settings.pipeline.runtime_dir;
    let own = endpoints::actors_dir(dir);
    std::fs::create_dir_all(&own).with_context(|| format!("cannot create {}", own.display()))?;
    let acks_path = endpoints::span_acks(dir);
    let acks = ipc::bind_pub(&acks_path, Access::private()).await?;
    let acks = AckSender::new(acks, acks_path.clone(), Producer { component: Component::ExporterActor, instance });

    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_owned()).unwrap_or_default();
    let meters = Meters::new(otlp.resource_attributes.clone(), &host, &registry).evict_idle_after(meters::idle_limit(otlp.metrics_interval));
    if !settings.export.prometheus.listen.is_empty() {
        // Validated by the config rules.
        let listen: SocketAddr = settings.export.prometheus.listen.parse().context("export.prometheus.listen")?;
        prometheus::start(listen, meters.view(), shutdown.clone()).await?;
    }
    let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel();
    let traces = match &otlp.traces_endpoint {
        Some(url) => {
            let t = Transport::new(url, &otlp)?;
            tracing::info!(endpoint = %url, protocol = otlp.protocol.as_str(), "exporting traces");
            Some(otlp::traces::TraceSink::start(t, &otlp, settings.export.queue_size, &registry, done_tx))
        }
        None => None,
    };
    if let Some(url) = &otlp.metrics_endpoint {
        let t = Transport::new(url, &otlp)?;
        tracing::info!(endpoint = %url, interval = ?otlp.metrics_interval, "exporting metrics");
        otlp::metrics::start(t, &otlp, meters.view(), &registry, shutdown.clone());
    }
    if let Some(addr) = runtime_kit::profiling::address(settings.profile.port, 2) {
        runtime_kit::profiling::start(addr, Component::ExporterActor.name(), shutdown.clone()).await?;
    }
    let spans = ipc::subscribe(endpoints::spans(dir), 16, &registry, shutdown.clone());
    let _receiver = Receiver::new(&registry, settings.export.stdout, meters, traces, acks, spans, done_rx).start();
    ready::notify_ready(Component::ExporterActor.name());

    shutdown.fired().await;
    // Give queued exports and the last metric push a moment to leave.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = std::fs::remove_file(&acks_path);
    tracing::info!(event = "stopped", "stopped");
    actix_rt::System::current().stop();
    Ok(())
}
