//! Structured logs: `tracing` to stderr, level from `RUST_LOG` or the
//! config's `log.level`, each line tagged with the component.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. Safe to call more than once (tests).
pub fn init(level: &str) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(format!("{level},aya=warn,aya_obj=warn")))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .with_target(false)
        .compact()
        .try_init();
}
