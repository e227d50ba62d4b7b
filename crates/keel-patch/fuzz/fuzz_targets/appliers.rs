//! Feeds arbitrary bytes, split into JSON documents, to every applier and patch builder.

#![no_main]

#[path = "../../tests/fuzz_check/mod.rs"]
mod fuzz_check;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_check::check(data));
