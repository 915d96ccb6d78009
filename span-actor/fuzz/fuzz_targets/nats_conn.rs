//! Arbitrary records into one NATS connection
//! (`span_actor::messaging`): see `../checks.rs`.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::nats_conn(data));
