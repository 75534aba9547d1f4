//! A real `redis-server` on a free loopback port (`LLAMATAP_REDIS_SERVER`,
//! else the one on the PATH), killed when dropped, and a plain RESP client
//! for the test's own look at it: one connection per call, logged in first
//! when the server wants a password.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::{free_port, wait_until};

/// A running `redis-server`.
pub struct Redis {
    /// Its plain (non-TLS) port.
    pub port: u16,
    child: Child,
    password: Option<String>,
    /// Connections the test itself opened (each call opens one).
    pub own_connections: AtomicUsize,
}

impl Redis {
    /// A server with no persistence, on a free port.
    pub fn start() -> Redis {
        Self::start_on(free_port())
    }

    /// The same on `port`.
    pub fn start_on(port: u16) -> Redis {
        Self::launch(port, &[], None)
    }

    /// With `extra` arguments (`--timeout 1`, ACL users, TLS); `password`:
    /// the default user's (`--requirepass`), which the test's calls use.
    pub fn launch(port: u16, extra: &[&str], password: Option<&str>) -> Redis {
        let bin = std::env::var("LLAMATAP_REDIS_SERVER")
            .ok()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "redis-server".into());
        let port_s = port.to_string();
        let mut args = vec![
            "--port",
            &port_s,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ];
        if let Some(p) = password {
            args.extend(["--requirepass", p]);
        }
        args.extend(extra);
        let child = Command::new(&bin)
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{bin}: {e}: run scripts/ensure-deps.sh"));
        let r = Redis {
            port,
            child,
            password: password.map(str::to_string),
            own_connections: AtomicUsize::new(0),
        };
        assert!(
            wait_until(Duration::from_secs(10), || r
                .command(&["PING"])
                .is_some_and(|s| s == "PONG")),
            "redis-server did not come up"
        );
        r
    }

    /// One command; the reply's text (`None`: no connection, nil or an error).
    pub fn command(&self, args: &[&str]) -> Option<String> {
        self.commands(&[args]).pop().flatten()
    }

    /// Several commands on one connection; each reply's text.
    pub fn commands(&self, commands: &[&[&str]]) -> Vec<Option<String>> {
        let none = || vec![None; commands.len()];
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return none();
        };
        self.own_connections.fetch_add(1, Ordering::SeqCst);
        if s.set_read_timeout(Some(Duration::from_secs(5))).is_err() {
            return none();
        }
        let mut out = String::new();
        let auth = self.password.as_deref().map(|p| vec!["AUTH", p]);
        for args in auth
            .iter()
            .map(Vec::as_slice)
            .chain(commands.iter().copied())
        {
            out.push_str(&format!("*{}\r\n", args.len()));
            for a in args {
                out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
            }
        }
        if s.write_all(out.as_bytes()).is_err() {
            return none();
        }
        let mut r = BufReader::new(s);
        if auth.is_some() && read_reply(&mut r).is_none() {
            return none();
        }
        commands.iter().map(|_| read_reply(&mut r)).collect()
    }

    /// Clients connected now, the test's own left out (those whose last
    /// command was `CLIENT LIST`).
    pub fn clients(&self) -> usize {
        self.command(&["CLIENT", "LIST"])
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.contains(" cmd=client|list "))
            .count()
    }

    /// A field of `INFO` (`total_connections_received`, …).
    pub fn info(&self, field: &str) -> Option<u64> {
        let info = self.command(&["INFO"])?;
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .and_then(|v| v.trim().parse().ok())
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Stops the server.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One reply as text: a status, an integer or a whole bulk string.
fn read_reply(r: &mut impl BufRead) -> Option<String> {
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let line = line.trim_end();
    match line.as_bytes().first()? {
        b'+' | b':' => Some(line[1..].to_string()),
        b'$' => {
            let n: i64 = line[1..].parse().ok()?;
            let n = usize::try_from(n).ok()?;
            let mut v = vec![0u8; n + 2];
            r.read_exact(&mut v).ok()?;
            v.truncate(n);
            String::from_utf8(v).ok()
        }
        _ => None,
    }
}
