//! Arbitrary records into one database connection of each protocol
//! (`span_actor::db`): see `../checks.rs`.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::db_conn(data));
