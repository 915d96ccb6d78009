//! Where spans and metrics go. Each sink is a folder: its configuration,
//! its implementation, its tests.

pub mod otlp;
pub mod prometheus;
pub mod stdout;
