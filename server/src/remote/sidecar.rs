//! Sidecar processes the scheduler starts itself (`simulate --sidecar 'CMD'`, the demo,
//! `switchyard bench`): each runs under `sh -c` in its own process group, is told where
//! to listen through `SWITCHYARD_PLUGIN_LISTEN` (the SDKs read it), and is stopped with
//! its children when dropped. In a cluster the sidecars are containers instead.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use switchyard_proto::LISTEN_ENV;

/// Why a sidecar the scheduler starts itself did not come up.
#[derive(Debug, thiserror::Error)]
pub enum SidecarError {
    #[error("cannot create {}: {source}", dir.display())]
    SocketDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("sidecar `{command}`: cannot start: {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("sidecar `{command}` exited ({status}) before listening on {address}; its error output is above")]
    Exited {
        command: String,
        status: std::process::ExitStatus,
        address: String,
    },
    #[error("sidecar `{command}` did not listen on {address} within {wait:?}")]
    NotListening {
        command: String,
        address: String,
        wait: Duration,
    },
}

/// A running sidecar; terminated (SIGTERM, then SIGKILL after a grace period) on drop.
pub struct SidecarProcess {
    child: Child,
    /// The scheduler's endpoint for it: `unix:///…` or `http://127.0.0.1:PORT`.
    pub endpoint: String,
    socket: Option<PathBuf>,
}

/// Where a started sidecar listens.
#[derive(Clone, Debug)]
pub enum Listen {
    Unix(PathBuf),
    /// 127.0.0.1 and this port.
    Tcp(u16),
}

impl Listen {
    /// A free TCP port on 127.0.0.1, as the kernel hands it out.
    pub fn free_tcp() -> std::io::Result<Listen> {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        Ok(Listen::Tcp(l.local_addr()?.port()))
    }

    fn sidecar_address(&self) -> String {
        match self {
            Listen::Unix(p) => format!("unix://{}", p.display()),
            Listen::Tcp(port) => format!("tcp://127.0.0.1:{port}"),
        }
    }

    fn endpoint(&self) -> String {
        match self {
            Listen::Unix(p) => format!("unix://{}", p.display()),
            Listen::Tcp(port) => format!("http://127.0.0.1:{port}"),
        }
    }
}

impl SidecarProcess {
    /// Starts `command` and waits until it listens (the socket file exists, or the
    /// port accepts), at most `wait`. Fails with the exit status if it dies first.
    pub fn start(
        command: &str,
        listen: Listen,
        wait: Duration,
    ) -> Result<SidecarProcess, SidecarError> {
        if let Listen::Unix(p) = &listen {
            if let Some(dir) = p.parent() {
                std::fs::create_dir_all(dir).map_err(|source| SidecarError::SocketDir {
                    dir: dir.to_path_buf(),
                    source,
                })?;
            }
            let _ = std::fs::remove_file(p);
        }
        let child = Command::new("sh")
            .arg("-c")
            .arg(command)
            .env(LISTEN_ENV, listen.sidecar_address())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|source| SidecarError::Spawn {
                command: command.to_string(),
                source,
            })?;
        let mut s = SidecarProcess {
            child,
            endpoint: listen.endpoint(),
            socket: match &listen {
                Listen::Unix(p) => Some(p.clone()),
                Listen::Tcp(_) => None,
            },
        };
        let deadline = Instant::now() + wait;
        loop {
            let ready = match &listen {
                Listen::Unix(p) => p.exists(),
                Listen::Tcp(port) => std::net::TcpStream::connect(("127.0.0.1", *port)).is_ok(),
            };
            if ready {
                return Ok(s);
            }
            if let Ok(Some(status)) = s.child.try_wait() {
                return Err(SidecarError::Exited {
                    command: command.to_string(),
                    status,
                    address: listen.sidecar_address(),
                });
            }
            if Instant::now() >= deadline {
                return Err(SidecarError::NotListening {
                    command: command.to_string(),
                    address: listen.sidecar_address(),
                    wait,
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends `signal` (a name: TERM, KILL, STOP, CONT) to the sidecar's whole process
    /// group, through the shell's `kill` (this crate has no unsafe code).
    pub fn signal(&self, signal: &str) {
        let _ = Command::new("sh")
            .arg("-c")
            .arg(format!("kill -{signal} -{} 2>/dev/null", self.child.id()))
            .status();
    }

    /// The sidecar's process group (it leads one: the shell started in it and
    /// whatever that starts).
    pub fn process_group(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has exited.
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Whether any process of the sidecar's group is still alive: the shell that
    /// started it may be gone while the sidecar itself still flushes its spans.
    /// Zombies do not count (an orphaned sidecar that exited waits for init to reap
    /// it, which `kill -0` would still see).
    fn group_alive(&mut self) -> bool {
        let _ = self.exited(); // reap the shell, or it counts as alive
        let pgid = self.child.id();
        match super::procfs::processes() {
            Some(mut stats) => stats
                .any(|l| super::procfs::parse(&l).is_some_and(|s| s.pgrp == pgid && s.running())),
            None => Command::new("sh")
                .arg("-c")
                .arg(format!("kill -0 -{pgid} 2>/dev/null"))
                .status()
                .is_ok_and(|s| s.success()),
        }
    }
}

impl Drop for SidecarProcess {
    fn drop(&mut self) {
        if self.group_alive() {
            self.signal("TERM");
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline && self.group_alive() {
                std::thread::sleep(Duration::from_millis(10));
            }
            if self.group_alive() {
                self.signal("KILL");
                let _ = self.child.kill();
            }
        }
        // Bounded: a process that survives SIGKILL (uninterruptible sleep) is left
        // behind rather than hanging the scheduler.
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline && !self.exited() {
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Some(p) = &self.socket {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A `sh -c` command line that runs `program` with `args` in place of the shell
/// (`exec`, so signals reach it), every word quoted.
pub fn exec_command(program: &str, args: &[&str]) -> String {
    let quote = |w: &str| format!("'{}'", w.replace('\'', r"'\''"));
    std::iter::once("exec".to_string())
        .chain(std::iter::once(quote(program)))
        .chain(args.iter().map(|a| quote(a)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A per-process scratch directory for sockets of started sidecars.
pub fn socket_dir() -> PathBuf {
    std::env::temp_dir().join(format!("switchyard-{}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_command_quotes_every_word() {
        assert_eq!(
            exec_command("/opt/my plugins/p", &["--flag", "it's"]),
            r"exec '/opt/my plugins/p' '--flag' 'it'\''s'"
        );
        let out = Command::new("sh")
            .arg("-c")
            .arg(exec_command("echo", &["a b", "it's"]))
            .output()
            .expect("sh");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "a b it's\n");
    }
}
