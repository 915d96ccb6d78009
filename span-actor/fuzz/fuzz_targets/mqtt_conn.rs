//! Arbitrary records into one MQTT connection
//! (`span_actor::messaging`): see `../checks.rs`.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::mqtt_conn(data));
