//! Bytes as a Go executable, into the privileged loader's reader of them
//! (`probe-loader/src/gobin.rs`, compiled in here: the loader is a binary
//! crate): see `gobin::check`. Seeds: `probe-loader`'s `synthetic`.
#![no_main]

#[path = "../../../probe-loader/src/gobin.rs"]
#[allow(dead_code)]
mod gobin;

// What gobin.rs reads through (`crate::budget::ReadAt`), and what that
// names.
#[path = "../../../probe-loader/src/budget.rs"]
#[allow(dead_code)]
mod budget;
#[path = "../../../probe-loader/src/deadline.rs"]
#[allow(dead_code)]
mod deadline;

libfuzzer_sys::fuzz_target!(|data: &[u8]| gobin::check(data));
