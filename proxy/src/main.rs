use std::process::ExitCode;

fn main() -> ExitCode {
    onetrip::cli::main()
}
