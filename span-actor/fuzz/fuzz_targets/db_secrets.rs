//! Statements, keys and values with planted secrets, written as clients
//! following each session's quoting rule write them, into one database
//! connection of each protocol (`span_actor::db`): see `../checks.rs`.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::db_secrets(data));
