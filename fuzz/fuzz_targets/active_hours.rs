#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| overdue::fuzzing::active_hours(data));
