//! Pushes the metrics every `metrics_interval` (and once at shutdown).

use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use runtime_kit::counters::Registry;
use runtime_kit::shutdown::Shutdown;

use super::{metric_exporter, OtlpConfig, Transport};
use crate::meters::MetricsView;

/// Starts the push loop on the current thread's local task set; the task
/// ends after the push at shutdown.
pub fn start(
    transport: Transport,
    cfg: &OtlpConfig,
    view: MetricsView,
    registry: &Registry,
    mut shutdown: Shutdown,
) -> tokio::task::JoinHandle<()> {
    let pushed = registry.counter("ringtail_metric_exports_total", &[]);
    let failed = registry.counter("ringtail_metric_export_failures_total", &[]);
    let interval = cfg.metrics_interval;
    let retry = cfg.retry.clone();
    tokio::task::spawn_local(async move {
        let exporter = match metric_exporter(&transport, &retry) {
            Ok(e) => e,
            Err(error) => {
                tracing::error!(%error, "metrics will not be exported");
                return;
            }
        };
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await; // the first tick is immediate: nothing to send yet
        loop {
            let last = tokio::select! {
                _ = tick.tick() => false,
                _ = shutdown.fired() => true,
            };
            for rm in view.collect() {
                match exporter.export(&rm).await {
                    Ok(()) => pushed.inc(),
                    Err(error) => {
                        failed.inc();
                        tracing::warn!(%error, "metric export failed");
                    }
                }
            }
            if last {
                return;
            }
        }
    })
}
