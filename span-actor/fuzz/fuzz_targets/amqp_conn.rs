//! Arbitrary records into one AMQP 0-9-1 connection
//! (`span_actor::messaging`): see `../checks.rs`.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::amqp_conn(data));
