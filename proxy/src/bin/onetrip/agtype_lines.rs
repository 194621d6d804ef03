//! `onetrip agtype normalize|encode|decode`: agtype conversions, one value
//! per line, no server needed.

use std::{
    io::{self, BufReader},
    process::ExitCode,
};

use agtype::lines::LineMode;

/// One value per stdin line, one answer per stdout line; non-zero exit if
/// any line failed.
pub fn run(mode: LineMode) -> ExitCode {
    let stdin = io::stdin();
    let stdout = io::stdout();
    match agtype::lines::run(mode, BufReader::new(stdin.lock()), stdout.lock()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("onetrip agtype: {e}");
            ExitCode::from(2)
        }
    }
}
