#![no_main]
//! The Cypher parser, compiler and cypher() call rewriter never panic.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    onetrip_planner::cypher::fuzzing::fuzz_cypher_parse(data);
});
