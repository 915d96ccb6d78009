//! The Prometheus scrape endpoint: `GET /metrics` on `export.prometheus.listen`.

pub mod render;

#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::Arc;

use runtime_kit::counters::Registry;
use runtime_kit::http::{self, Endpoint, Handler, Peers, Response};
use runtime_kit::shutdown::Shutdown;

use crate::meters::MetricsView;

/// The whole exposition text.
pub fn exposition(view: &MetricsView) -> String {
    let mut out = String::with_capacity(16 * 1024);
    view.read(|m| {
        render::render_metrics(m, &mut out);
        render::render_derived(m, &mut out);
        render::render_health(m.health(), &mut out);
    });
    out
}

/// Serves scrapes on `listen` (see [`http::listen`]: a port someone else
/// holds is retried, not a start-up failure; any other bind error is).
pub async fn start(listen: SocketAddr, view: MetricsView, registry: &Registry, shutdown: Shutdown) -> Result<(), http::BindError> {
    let handler: Handler = Arc::new(move |target: String| {
        let view = view.clone();
        Box::pin(async move {
            match target.split('?').next() {
                Some("/metrics") => Response::ok("text/plain; version=0.0.4; charset=utf-8", exposition(&view).into_bytes()),
                _ => Response::error(404, "try /metrics"),
            }
        })
    });
    http::listen(listen, Endpoint { name: "metrics", peers: Peers::Anyone, handler }, registry, shutdown).await
}
