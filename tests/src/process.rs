//! The `onetrip` binary run as its own process: what the CLI adds over the
//! in-process proxy (its worker runtimes, its resident memory in /proc).

use std::{
    net::{SocketAddr, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// A running `onetrip` process, killed when dropped.
pub struct ProxyProcess {
    child: Child,
    port: u16,
}

impl ProxyProcess {
    /// Starts `bin` (a test's `env!("CARGO_BIN_EXE_onetrip-cli")`: only
    /// integration tests know where cargo built it) in front of `upstream`
    /// on a free loopback port, with `env` as its only `ONETRIP_*`
    /// variables, and waits until it listens.
    pub fn start(bin: impl AsRef<Path>, upstream: SocketAddr, env: &[(&str, &str)]) -> Self {
        let port = onetrip_embedded::free_port().unwrap();
        let mut cmd = Command::new(bin.as_ref());
        // The harness's own ONETRIP_* variables (such as ONETRIP_PYTHON)
        // are not config keys.
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("ONETRIP_") {
                cmd.env_remove(k);
            }
        }
        let child = cmd
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--upstream",
                &upstream.to_string(),
            ])
            .env("ONETRIP_LOG_LEVEL", "warn")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .spawn()
            .expect("start onetrip");
        let mut p = ProxyProcess { child, port };
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                p.child.try_wait().unwrap().is_none(),
                "onetrip exited at start (its stderr is above)"
            );
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "onetrip did not start listening"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        p
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM, as a service manager stopping the proxy does.
    pub fn terminate(&self) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid fits pid_t");
        // SAFETY: kill(2) only sends a signal to our own child process.
        let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(
            rc,
            0,
            "SIGTERM to onetrip: {}",
            std::io::Error::last_os_error()
        );
    }

    /// The exit status, if the process ends within `wait`.
    pub fn exited_within(&mut self, wait: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if start.elapsed() > wait {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
