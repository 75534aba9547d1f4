//! Runs the real `llamatap` binary on free loopback ports.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::free_port;

/// A running llamatap process.
pub struct Llamatap {
    pub port: u16,
    pub admin_port: u16,
    pub child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Llamatap {
    /// Starts llamatap in front of `upstream` with extra flags; waits for /healthz.
    pub fn start(upstream: &str, extra: &[&str]) -> Llamatap {
        Self::start_env(upstream, extra, &[])
    }

    /// Starts llamatap in front of several upstreams (one `--upstream` flag
    /// each, in order) with extra flags; waits for /healthz.
    pub fn start_fleet(upstreams: &[&str], extra: &[&str]) -> Llamatap {
        let (first, rest) = upstreams
            .split_first()
            .expect("start_fleet needs at least one upstream");
        let mut args: Vec<&str> = Vec::new();
        for u in rest {
            args.extend_from_slice(&["--upstream", u]);
        }
        args.extend_from_slice(extra);
        Self::start_env(first, &args, &[])
    }

    /// Starts llamatap in front of `upstream` with a config of `toml` and
    /// an access log, both named after `name` (the log emptied first);
    /// returns it and its access log's path.
    pub fn start_logged(upstream: &str, name: &str, toml: &str) -> (Llamatap, std::path::PathBuf) {
        let log = std::env::temp_dir().join(format!("llamatap-{name}.jsonl"));
        let _ = std::fs::remove_file(&log);
        let config = super::temp_config(name, toml);
        let args = [
            "--config",
            config.to_str().unwrap(),
            "--access-log",
            log.to_str().unwrap(),
        ];
        (Self::start(upstream, &args), log)
    }

    /// As [`start`], with environment variables. Started again on other
    /// ports when one it was given was taken before it could bind it: a
    /// free port is released before llamatap binds it, and another program
    /// may bind it meanwhile ([`super::free_port`] takes them outside the
    /// kernel's ephemeral range, so no port-0 listener can).
    pub fn start_env(upstream: &str, extra: &[&str], env: &[(&str, &str)]) -> Llamatap {
        let mut tries = 0;
        loop {
            match Self::try_start(upstream, extra, env) {
                Ok(t) => return t,
                Err(e) if e.contains("Address already in use") && tries < 4 => tries += 1,
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// One start of [`Llamatap::start_env`]; `Err` when llamatap exited at
    /// start, with what it said.
    fn try_start(upstream: &str, extra: &[&str], env: &[(&str, &str)]) -> Result<Llamatap, String> {
        let port = free_port();
        let admin_port = free_port();
        let dir = std::env::temp_dir();
        let mut cmd = Command::new(binary());
        cmd.args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--admin-listen",
            &format!("127.0.0.1:{admin_port}"),
            "--upstream",
            upstream,
            "--pid-file",
            dir.join(format!("llamatap-{port}.pid")).to_str().unwrap(),
            "--upgrade-sock",
            dir.join(format!("llamatap-{port}.sock")).to_str().unwrap(),
        ])
        .args(extra)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("LLAMATAP_CONFIG")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn llamatap");
        let stderr = Arc::new(Mutex::new(String::new()));
        let pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let mut t = Llamatap {
            port,
            admin_port,
            child,
            stderr,
        };
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = t.child.try_wait() {
                // Let the reader thread drain the closed pipe for the message.
                let drained = Instant::now();
                while t.stderr().is_empty() && drained.elapsed() < Duration::from_secs(1) {
                    std::thread::sleep(Duration::from_millis(10));
                }
                return Err(format!(
                    "llamatap exited at start ({status}): {}",
                    t.stderr()
                ));
            }
            if let Ok((200, _)) = super::http::get(&format!("127.0.0.1:{admin_port}"), "/healthz") {
                // The proxy listener comes up with the admin one; check it accepts too.
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return Ok(t);
                }
            }
            if start.elapsed() > Duration::from_secs(20) {
                panic!("llamatap did not start: {}", t.stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The PID file this llamatap was given (`--pid-file`).
    pub fn pid_file(&self) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("llamatap-{}.pid", self.port))
    }

    /// The upgrade socket this llamatap hands its listeners over on.
    pub fn upgrade_sock(&self) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("llamatap-{}.sock", self.port))
    }

    /// Starts a second llamatap with `--upgrade` on the same ports and upgrade
    /// socket: it waits for this one's listening sockets (send SIGQUIT to this one).
    pub fn spawn_upgrade(&self, upstream: &str) -> Child {
        let dir = std::env::temp_dir();
        Command::new(binary())
            .args([
                "--listen",
                &format!("127.0.0.1:{}", self.port),
                "--admin-listen",
                &format!("127.0.0.1:{}", self.admin_port),
                "--upstream",
                upstream,
                // The same PID file: the new process takes it over.
                "--pid-file",
                self.pid_file().to_str().unwrap(),
                "--upgrade-sock",
                dir.join(format!("llamatap-{}.sock", self.port))
                    .to_str()
                    .unwrap(),
                "--upgrade",
            ])
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn llamatap --upgrade")
    }

    /// Sends a signal (`TERM`, `QUIT`, ...).
    pub fn signal(&self, sig: &str) {
        unsafe_kill(self.child.id(), sig);
    }

    /// `127.0.0.1:port` of the proxy.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:port` of the admin listener.
    pub fn admin(&self) -> String {
        format!("127.0.0.1:{}", self.admin_port)
    }

    /// Its stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// GET /metrics.
    pub fn metrics(&self) -> String {
        let (_, body) = super::http::get(&self.admin(), "/metrics").unwrap();
        String::from_utf8(body).unwrap()
    }

    /// `/metrics` in the OpenMetrics format (the one with exemplars).
    pub fn openmetrics(&self) -> String {
        let mut r = super::http::send(
            &self.admin(),
            "GET",
            "/metrics",
            &[
                ("Accept", "application/openmetrics-text; version=1.0.0"),
                ("Connection", "close"),
            ],
            b"",
        )
        .unwrap();
        String::from_utf8(r.read_all().unwrap()).unwrap()
    }

    /// Waits until the metrics text satisfies `pred`, and returns the scrape
    /// after the first that did. llamatap writes a finished request's series
    /// one after another, so a scrape can run in the middle of them and see
    /// the series `pred` looks at but not yet the others; the next scrape
    /// starts after that one ended, and so after the request's writes.
    pub fn wait_metrics(&self, timeout: Duration, pred: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let m = self.metrics();
            if pred(&m) {
                let next = self.metrics();
                if pred(&next) {
                    return next;
                }
            }
            if start.elapsed() > timeout {
                return m;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Sends SIGTERM.
    pub fn term(&self) {
        unsafe_kill(self.child.id(), "TERM");
    }

    /// Waits for exit, up to `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            if start.elapsed() > timeout {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn unsafe_kill(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status();
}

impl Drop for Llamatap {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Killed, it could not remove its PID file; a file another process
        // took over (an upgrade) is left to that one.
        let file = self.pid_file();
        let ours =
            std::fs::read_to_string(&file).is_ok_and(|s| s.trim() == self.child.id().to_string());
        if ours {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// Resident memory of process `pid` (`VmRSS`), in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// Reads one line-terminated metric value: `name{labels} value`, by prefix.
pub fn metric_value(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            l.starts_with(prefix) && l[prefix.len()..].starts_with([' ', '{'])
                || l.split(' ').next() == Some(prefix)
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Sum of all samples whose series line starts with `prefix` and contains every `needle`.
pub fn metric_sum(text: &str, prefix: &str, needles: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#') && l.starts_with(prefix))
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

/// The value of the one series `name{...}` whose labels include every
/// `needle` (`key="value"`), or `None` when no such series is exported (a
/// series at zero is `Some(0.0)`, unlike [`metric_sum`]).
pub fn metric_series(text: &str, name: &str, needles: &[&str]) -> Option<f64> {
    let open = format!("{name}{{");
    text.lines()
        .filter(|l| l.starts_with(&open))
        .find(|l| {
            let labels = &l[open.len()..l.rfind('}').unwrap_or(l.len())];
            needles
                .iter()
                .all(|n| labels.split(',').any(|pair| pair == *n))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Asserts that every series of `model` llamatap can record a request under
/// is exported at zero: each stage histogram (its `_count`, `_sum` and `+Inf`
/// bucket), time per output token, the longest token gap, and the counters.
pub fn assert_model_series_at_zero(text: &str, model: &str) {
    use llamatap_telemetry::metrics::STAGES;
    use llamatap_telemetry::record::{HangupPhase, Outcome};
    use llamatap_wire::request::Route;
    let m = format!("model=\"{model}\"");
    let mut want: Vec<(String, Vec<String>)> = Vec::new();
    let hist = |want: &mut Vec<(String, Vec<String>)>, name: &str, labels: Vec<String>| {
        for (suffix, extra) in [
            ("_count", None),
            ("_sum", None),
            ("_bucket", Some("le=\"+Inf\"")),
        ] {
            let mut l = labels.clone();
            l.extend(extra.map(str::to_string));
            want.push((format!("{name}{suffix}"), l));
        }
    };
    for stage in STAGES {
        hist(
            &mut want,
            "llamatap_stage_duration_seconds",
            vec![format!("stage=\"{stage}\""), m.clone()],
        );
    }
    hist(
        &mut want,
        "llamatap_time_per_output_token_seconds",
        vec![m.clone()],
    );
    hist(&mut want, "llamatap_max_token_gap_seconds", vec![m.clone()]);
    let llm: Vec<Route> = Route::all()
        .iter()
        .copied()
        .filter(|r| r.operation_name().is_some())
        .collect();
    for route in &llm {
        for outcome in Outcome::ALL {
            // Refusals come before the body names a model.
            if outcome == Outcome::Rejected && model != "none" {
                continue;
            }
            want.push((
                "llamatap_requests_total".into(),
                vec![
                    m.clone(),
                    format!("route=\"{}\"", route.as_str()),
                    format!("outcome=\"{}\"", outcome.as_str()),
                ],
            ));
        }
    }
    for kind in ["prompt", "cached", "completion"] {
        want.push((
            "llamatap_tokens_total".into(),
            vec![m.clone(), format!("kind=\"{kind}\"")],
        ));
    }
    for phase in HangupPhase::ALL {
        want.push((
            "llamatap_cancellations_total".into(),
            vec![m.clone(), format!("phase=\"{}\"", phase.as_str())],
        ));
    }
    want.push((
        "llamatap_hangup_elapsed_seconds_total".into(),
        vec![m.clone()],
    ));
    let missing: Vec<String> = want
        .iter()
        .filter(|(name, labels)| {
            let needles: Vec<&str> = labels.iter().map(String::as_str).collect();
            metric_series(text, name, &needles) != Some(0.0)
        })
        .map(|(name, labels)| format!("{name}{{{}}}", labels.join(",")))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} series of model {model:?} not exported at 0, e.g. {:?}\n{text}",
        missing.len(),
        want.len(),
        &missing[..missing.len().min(5)]
    );
}

#[allow(dead_code)]
fn _unused(_: &mut dyn Read) {}

/// The llamatap binary the tests start: this build's, or
/// `LLAMATAP_TEST_BINARY` (to measure another build on the same workload).
pub fn binary() -> std::path::PathBuf {
    std::env::var_os("LLAMATAP_TEST_BINARY")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_llamatap").into())
}
