#![no_main]
//! See `onetrip::protocol::fuzzing::fuzz_startup`: nothing the network sends
//! may panic the proxy.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    onetrip::protocol::fuzzing::fuzz_startup(data);
});
