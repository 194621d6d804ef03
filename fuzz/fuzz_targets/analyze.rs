#![no_main]
//! The planner's analysis of any statement text (lexer, classifier, words,
//! fingerprint, cypher() calls) never panics.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    onetrip_planner::analysis::fuzzing::fuzz_analyze(data);
});
