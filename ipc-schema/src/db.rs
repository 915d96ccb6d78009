//! The database call duration metric of the OpenTelemetry database
//! conventions (stable set, semconv `docs/database/database-metrics.md`):
//! the span-actor reads database calls off the wire ([`crate::DbCall`] on a
//! span), the exporter records each into this histogram. One definition,
//! read by both.

/// Instrument name.
pub const NAME: &str = "db.client.operation.duration";
/// UCUM unit.
pub const UNIT: &str = "s";
/// Instrument description.
pub const DESCRIPTION: &str = "Duration of database client operations.";
/// The conventions' advised bucket boundaries, in seconds.
pub const BUCKETS: [f64; 9] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0];
/// Nanoseconds per second.
pub const NS_PER_UNIT: f64 = 1e9;

/// The `db.system.name` values ringtail reads (the conventions' names).
pub mod system {
    pub const POSTGRESQL: &str = "postgresql";
    pub const MYSQL: &str = "mysql";
    pub const MARIADB: &str = "mariadb";
    pub const REDIS: &str = "redis";
    pub const MEMCACHED: &str = "memcached";
}
