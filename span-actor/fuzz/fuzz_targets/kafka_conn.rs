//! Arbitrary records into one Kafka connection
//! (`span_actor::messaging`): see `../checks.rs`.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::kafka_conn(data));
