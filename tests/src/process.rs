//! `switchyard run` as a child process, for the end-to-end tests against the
//! API-server double and against a real control plane: started with a
//! configuration and a kubeconfig, its log in a file, its health endpoint on a free
//! port of 127.0.0.1, killed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::binary;

/// A free TCP port on 127.0.0.1 (free when asked; the caller binds it soon).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

pub struct SwitchyardRun {
    pub name: String,
    pub child: Child,
    /// The port of `--health-address 127.0.0.1:PORT`.
    pub health: u16,
    /// Where stderr (the log) goes: `<dir>/<name>.log`.
    pub log: PathBuf,
}

impl SwitchyardRun {
    /// `switchyard run --identity NAME --config CONFIG --kubeconfig KUBECONFIG
    /// --health-address 127.0.0.1:<free> --plain-http EXTRA...`, logging at info into
    /// `<dir>/<name>.log`. Plain HTTP without authentication, for [`Self::fetch`].
    pub fn start(
        dir: &Path,
        name: &str,
        config: &Path,
        kubeconfig: &Path,
        extra: &[&str],
    ) -> SwitchyardRun {
        let mut args = vec!["--plain-http"];
        args.extend_from_slice(extra);
        Self::start_secure(dir, name, config, kubeconfig, &args)
    }

    /// As [`Self::start`] but with the default serving: HTTPS with delegated
    /// authentication (fetch with an HTTPS client, not [`Self::fetch`]).
    pub fn start_secure(
        dir: &Path,
        name: &str,
        config: &Path,
        kubeconfig: &Path,
        extra: &[&str],
    ) -> SwitchyardRun {
        let health = free_port();
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(binary("switchyard"))
            .args(["run", "--log-level", "info", "--identity", name])
            .arg("--config")
            .arg(config)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--health-address")
            .arg(format!("127.0.0.1:{health}"))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start switchyard run");
        SwitchyardRun {
            name: name.to_string(),
            child,
            health,
            log,
        }
    }

    /// The HTTP status of GET path on the health address (0 if unreachable).
    pub fn get(&self, path: &str) -> u16 {
        self.fetch(path).0
    }

    /// Status and body of GET path on the health address ((0, "") if unreachable).
    /// The API calls the server refused, as `switchyard_api_errors_total` lines of
    /// `/metrics` (empty when every call was allowed).
    pub fn refused_api_calls(&self) -> Vec<String> {
        self.fetch("/metrics")
            .1
            .lines()
            .filter(|l| l.starts_with("switchyard_api_errors_total{"))
            .map(str::to_string)
            .collect()
    }

    pub fn fetch(&self, path: &str) -> (u16, String) {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.health)) else {
            return (0, String::new());
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let _ = write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        );
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        let code = out
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = out
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (code, body)
    }

    /// Sends a signal (`-TERM`, `-KILL`, ...).
    pub fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status();
    }

    /// Waits for the process to exit; its exit code. Panics after `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let start = Instant::now();
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st.code();
            }
            assert!(
                start.elapsed() < limit,
                "{} did not exit within {limit:?}\n{}",
                self.name,
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Whether the process still runs.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for SwitchyardRun {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
