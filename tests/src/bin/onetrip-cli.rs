//! The `onetrip` command line, built inside the test crate so its end-to-end
//! tests can run it as a subprocess.

fn main() -> std::process::ExitCode {
    onetrip::cli::main()
}
