//! Captured HTTP/1 request bytes through the parser and the whole
//! transformation (routing, redaction, naming): see `../checks.rs`.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::http1(data));
