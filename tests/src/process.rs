//! The `onetrip` binary run as its own process: what the CLI adds over the
//! in-process proxy (its worker runtimes, its resident memory in /proc).

use std::{
    io::Read,
    net::{SocketAddr, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

/// A running `onetrip` process, killed when dropped.
pub struct ProxyProcess {
    child: Child,
    port: u16,
    /// Its stderr so far, when captured (`start_with_config`).
    stderr: Option<Arc<Mutex<String>>>,
}

impl ProxyProcess {
    /// Starts `bin` (a test's `env!("CARGO_BIN_EXE_onetrip-cli")`: only
    /// integration tests know where cargo built it) in front of `upstream`
    /// on a free loopback port, with `env` as its only `ONETRIP_*`
    /// variables, and waits until it listens.
    pub fn start(bin: impl AsRef<Path>, upstream: SocketAddr, env: &[(&str, &str)]) -> Self {
        Self::spawn(
            bin.as_ref(),
            upstream,
            &[("ONETRIP_LOG_LEVEL", "warn")],
            env,
            None,
        )
    }

    /// Like `start`, with `config` as its config file (the log level is the
    /// file's), and its stderr captured (`stderr`).
    pub fn start_with_config(bin: impl AsRef<Path>, upstream: SocketAddr, config: &Path) -> Self {
        let config = config.to_str().expect("a UTF-8 path");
        let env = [("ONETRIP_CONFIG", config)];
        Self::spawn(bin.as_ref(), upstream, &[], &env, Some(Stdio::piped()))
    }

    fn spawn(
        bin: &Path,
        upstream: SocketAddr,
        defaults: &[(&str, &str)],
        env: &[(&str, &str)],
        stderr: Option<Stdio>,
    ) -> Self {
        let port = onetrip_embedded::free_port().unwrap();
        let mut cmd = Command::new(bin);
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
            .envs(defaults.iter().copied())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stderr(stderr.unwrap_or_else(Stdio::inherit))
            .spawn();
        let mut child = child.expect("start onetrip");
        // Read as it comes, by a thread: a full pipe would block the proxy.
        let stderr = child.stderr.take().map(|mut pipe| {
            let text = Arc::new(Mutex::new(String::new()));
            let t = text.clone();
            std::thread::spawn(move || {
                let mut chunk = [0u8; 4096];
                while let Ok(n @ 1..) = pipe.read(&mut chunk) {
                    let s = String::from_utf8_lossy(&chunk[..n]);
                    eprint!("{s}");
                    t.lock().unwrap().push_str(&s);
                }
            });
            text
        });
        let mut p = ProxyProcess {
            child,
            port,
            stderr,
        };
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
        self.signal(libc::SIGTERM, "SIGTERM");
    }

    /// Sends SIGHUP, as a service manager reloading the proxy does.
    pub fn hangup(&self) {
        self.signal(libc::SIGHUP, "SIGHUP");
    }

    fn signal(&self, signal: libc::c_int, name: &str) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid fits pid_t");
        // SAFETY: kill(2) only sends a signal to our own child process.
        let rc = unsafe { libc::kill(pid, signal) };
        let err = std::io::Error::last_os_error();
        assert_eq!(rc, 0, "{name} to onetrip: {err}");
    }

    /// What it wrote to stderr so far (empty unless captured).
    pub fn stderr(&self) -> String {
        match &self.stderr {
            Some(t) => t.lock().unwrap().clone(),
            None => String::new(),
        }
    }

    /// Waits until its stderr holds `text` `count` times or more; panics
    /// after `wait` (a proxy that never says it would hang the test).
    pub fn wait_for_stderr(&self, text: &str, count: usize, wait: Duration) -> String {
        let start = Instant::now();
        loop {
            let all = self.stderr();
            if all.matches(text).count() >= count {
                return all;
            }
            assert!(
                start.elapsed() < wait,
                "onetrip's stderr never said {text:?} {count} times:\n{all}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
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
