//! The real Prometheus (Debian's `prometheus` package) and `promtool` for
//! integration tests, and headless Chromium for screenshots.
//!
//! [`Prometheus::start`] runs the server on a free loopback port with its own
//! temporary TSDB and a config generated for the test; dropping it kills the
//! process and removes the directory. A missing binary is a test failure that
//! names `scripts/ensure-deps.sh`, never a skip.

// Test helper: panicking with a clear message is the error handling here, and
// each test binary uses only part of the API.
#![allow(dead_code, clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

// `crate::common` (not `super`) so that a test may also include this file on its
// own with `#[path = "common/prometheus.rs"]`.
use crate::common::http;

/// Finds `name` on `PATH` (plus the usual system directories); panics with
/// instructions when it is missing.
pub fn require_binary(name: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.extend(["/usr/bin", "/usr/local/bin", "/bin"].map(PathBuf::from));
    for dir in dirs {
        let p = dir.join(name);
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "`{name}` not found on PATH: install Debian's `{package}` package \
         (scripts/ensure-deps.sh installs it: run it, or scripts/test.sh, first)"
    );
}

/// Runs `promtool` with `args` (and `stdin`, if any); returns its output.
pub fn promtool(args: &[&str], stdin: Option<&[u8]>) -> Output {
    use std::io::Write;
    let bin = require_binary("promtool", "prometheus");
    let mut child = Command::new(&bin)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("promtool stdin");
        pipe.write_all(input).expect("write to promtool");
    }
    child.wait_with_output().expect("promtool output")
}

/// Panics unless `promtool args...` exits 0; returns stdout + stderr.
pub fn promtool_ok(args: &[&str], stdin: Option<&[u8]>) -> String {
    let out = promtool(args, stdin);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool {} failed ({}):\n{text}",
        args.join(" "),
        out.status
    );
    text
}

/// A new empty directory under the system temp dir.
pub fn temp_dir(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "llamatap-{tag}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
    dir
}

/// A running Prometheus, killed (and its directory removed) when dropped.
pub struct Prometheus {
    pub port: u16,
    pub dir: PathBuf,
    child: Child,
}

impl Prometheus {
    /// Starts Prometheus with `config` (YAML text, written to `prometheus.yml`
    /// in a new temp directory that also holds the TSDB) on a free loopback
    /// port, and waits until `/-/ready` answers 200 (at most 60 s).
    pub fn start(config: &str) -> Prometheus {
        Self::start_with(config, &[])
    }

    /// As [`Prometheus::start`], with extra command-line flags (e.g.
    /// `--enable-feature=exemplar-storage`).
    pub fn start_with(config: &str, flags: &[&str]) -> Prometheus {
        let bin = require_binary("prometheus", "prometheus");
        let mut last = String::new();
        for _attempt in 0..5 {
            let dir = temp_dir("prometheus");
            let config_path = dir.join("prometheus.yml");
            std::fs::write(&config_path, config).unwrap();
            let log_path = dir.join("prometheus.log");
            let log = std::fs::File::create(&log_path).unwrap();
            let port = crate::common::free_port();
            let child = Command::new(&bin)
                .arg(format!("--config.file={}", config_path.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .arg("--storage.tsdb.retention.time=1h")
                .args(flags)
                .stdin(Stdio::null())
                .stdout(Stdio::from(log.try_clone().unwrap()))
                .stderr(Stdio::from(log))
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
            let mut p = Prometheus { port, dir, child };
            let start = Instant::now();
            loop {
                if let Ok((200, _)) = http::get(&p.addr(), "/-/ready") {
                    return p;
                }
                if let Ok(Some(_)) = p.child.try_wait() {
                    break;
                }
                if start.elapsed() > Duration::from_secs(60) {
                    panic!("prometheus not ready after 60 s:\n{}", p.log());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            last = p.log();
            if !last.contains("address already in use") {
                panic!("prometheus exited at start:\n{last}");
            }
        }
        panic!("prometheus could not bind a free port in 5 tries:\n{last}");
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// `GET path` answered with JSON `{"status":"success","data":...}`: the data.
    pub fn api(&self, path: &str) -> Result<serde_json::Value, String> {
        let (status, body) = http::get(&self.addr(), path).map_err(|e| e.to_string())?;
        let v: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| format!("HTTP {status}: {e}: {}", String::from_utf8_lossy(&body)))?;
        if status != 200 || v["status"] != "success" {
            return Err(format!("HTTP {status}: {v}"));
        }
        Ok(v["data"].clone())
    }

    /// An instant query (`/api/v1/query`) evaluated now: its `data`
    /// (`resultType` and `result`).
    pub fn query(&self, expr: &str) -> Result<serde_json::Value, String> {
        self.api(&format!("/api/v1/query?query={}", urlencode(expr)))
    }

    /// An instant query evaluated at `at` (Unix seconds): its `data`. A
    /// pinned time makes every query of a test see the same samples, however
    /// long the queries take.
    pub fn query_at(&self, expr: &str, at: f64) -> Result<serde_json::Value, String> {
        self.api(&format!(
            "/api/v1/query?query={}&time={at:.3}",
            urlencode(expr)
        ))
    }

    /// The value of the first sample `expr` returns now, if any.
    pub fn value(&self, expr: &str) -> Option<f64> {
        let d = self.query(expr).ok()?;
        d["result"][0]["value"][1].as_str()?.parse().ok()
    }

    /// Waits until `expr` returns a vector whose first sample equals `value`.
    pub fn wait_value(&self, expr: &str, value: f64, timeout: Duration) -> bool {
        crate::common::wait_until(timeout, || self.value(expr) == Some(value))
    }

    /// The timestamp (Unix seconds) of the newest sample of the series
    /// `selector` selects: when Prometheus scraped it (for a recorded series,
    /// when the rule was evaluated).
    pub fn sample_time(&self, selector: &str) -> Option<f64> {
        self.value(&format!("max(timestamp({selector}))"))
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- prometheus log ({}) ---\n{}",
                self.dir.display(),
                tail(&self.log(), 30)
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
pub fn urlencode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Takes a screenshot of `url` with headless Chromium (Debian's `chromium`
/// package) into `png`, at `width`x`height`; panics with Chromium's output on
/// failure or after 90 s.
pub fn chromium_screenshot(url: &str, png: &Path, width: u32, height: u32) {
    let bin = require_binary("chromium", "chromium");
    let profile = temp_dir("chromium");
    let _ = std::fs::remove_file(png);
    let log_path = profile.join("chromium.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new(&bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!(
            "--user-data-dir={}",
            profile.join("profile").display()
        ))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("--window-size={width},{height}"))
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "chromium did not finish the screenshot in 90 s:\n{}",
                std::fs::read_to_string(&log_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let log_text = std::fs::read_to_string(&log_path).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&profile);
    assert!(
        status.success() && png.is_file(),
        "chromium --screenshot failed ({status}):\n{log_text}"
    );
}

/// Width and height of a PNG file (from its IHDR chunk).
pub fn png_size(bytes: &[u8]) -> Option<(u32, u32)> {
    if bytes.len() < 24 || &bytes[..8] != b"\x89PNG\r\n\x1a\n" || &bytes[12..16] != b"IHDR" {
        return None;
    }
    let w = u32::from_be_bytes(bytes[16..20].try_into().ok()?);
    let h = u32::from_be_bytes(bytes[20..24].try_into().ok()?);
    Some((w, h))
}
