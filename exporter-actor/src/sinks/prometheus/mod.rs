//! The Prometheus scrape endpoint: `GET /metrics` on `export.prometheus.listen`.

pub mod render;

#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::Arc;

use runtime_kit::http::{self, Handler, Response};
use runtime_kit::shutdown::Shutdown;

use crate::meters::MetricsView;

/// The whole exposition text.
pub fn exposition(view: &MetricsView) -> String {
    let mut out = String::with_capacity(16 * 1024);
    view.read(|m| {
        render::render_metrics(m, &mut out);
        render::render_health(m.health(), &mut out);
    });
    out
}

/// Binds `listen` (failing start-up if it cannot) and serves scrapes.
pub async fn start(listen: SocketAddr, view: MetricsView, shutdown: Shutdown) -> Result<SocketAddr, http::BindError> {
    let listener = http::bind(listen).await?;
    let bound = listener.local_addr().unwrap_or(listen);
    let handler: Handler = Arc::new(move |target: String| {
        let view = view.clone();
        Box::pin(async move {
            match target.split('?').next() {
                Some("/metrics") => Response::ok("text/plain; version=0.0.4; charset=utf-8", exposition(&view).into_bytes()),
                _ => Response::error(404, "try /metrics"),
            }
        })
    });
    http::serve(listener, handler, shutdown);
    tracing::info!(%bound, event = "listening", "prometheus endpoint");
    Ok(bound)
}
