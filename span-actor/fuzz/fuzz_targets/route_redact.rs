//! Paths through the router and queries through the redactor, checked
//! against an independent oracle: see `../checks.rs`.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::route_redact(data));
