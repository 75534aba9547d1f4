//! `scripts/quickstart.sh` stops what it started. SIGTERM or SIGINT sent to
//! the script's pid alone (as a supervisor, `timeout` or a CI step sends it;
//! Ctrl-C in a terminal reaches the whole process group instead) stops
//! llamatap, then the llama-server the script started; the script exits with
//! 128 + the signal number, nothing answers on its ports any more and none of
//! its children is left. Both modes: the default one (the script starts
//! llama-server) and `--upstream URL` (only llamatap; the upstream keeps
//! running). If llamatap dies on its own, the script stops llama-server and
//! exits with llamatap's status.
//!
//! Once llamatap is ready, the script asks it one question, streamed, and
//! prints the answer with llamatap's own time to first token and to first
//! sentence (the figures of `/latency.json`). It checks every port it will
//! listen on (llama-server's too) before it builds anything.
//!
//! The script runs this build's llamatap (`LLAMATAP_BIN`) and the test
//! suite's llama-server and tiny model (`--model`, or `LLAMATAP_MODEL`), on
//! free ports.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::free_port;
use common::llama::{self, LlamaServer};

/// llamatap's grace period (its default, passed explicitly).
const GRACE_SECONDS: u64 = 10;
/// How long after the signal everything must be stopped.
const STOP_WITHIN: Duration = Duration::from_secs(GRACE_SECONDS + 5);
/// How long llamatap may take to be ready (the script may start llama-server first).
const READY_WITHIN: Duration = Duration::from_secs(120);

#[test]
fn sigterm_stops_llamatap_and_llama_server() {
    stops_everything(Stop::Script("TERM", 15), None);
}

#[test]
fn sigint_stops_llamatap_and_llama_server() {
    stops_everything(Stop::Script("INT", 2), None);
}

#[test]
fn sigterm_with_upstream_stops_llamatap() {
    let upstream = LlamaServer::start("tiny", &[]);
    stops_everything(Stop::Script("TERM", 15), Some(&upstream));
}

#[test]
fn sigint_with_upstream_stops_llamatap() {
    let upstream = LlamaServer::start("tiny", &[]);
    stops_everything(Stop::Script("INT", 2), Some(&upstream));
}

/// llamatap dying on its own (SIGKILL here) stops llama-server too, and the
/// script exits with llamatap's status (128 + 9).
#[test]
fn llamatap_dying_stops_llama_server() {
    stops_everything(Stop::LlamatapKilled, None);
}

/// What ends the script.
#[derive(Clone, Copy, Debug)]
enum Stop {
    /// This signal (name, number) sent to the script's pid alone.
    Script(&'static str, i32),
    /// SIGKILL sent to llamatap.
    LlamatapKilled,
}

/// Starts the script, waits for `/readyz`, stops it as `stop` says and checks
/// that everything it started is gone in time.
fn stops_everything(stop: Stop, upstream: Option<&LlamaServer>) {
    let name = match stop {
        Stop::Script(sig, _) => sig,
        Stop::LlamatapKilled => "llamatap-killed",
    };
    let mode = if upstream.is_some() {
        "upstream"
    } else {
        "default"
    };
    let mut qs = Quickstart::start(&format!("{name}-{mode}"), upstream);
    qs.wait_ready();
    qs.assert_first_question_answered();

    let children = qs.children();
    let mut names: Vec<&str> = children.iter().map(|p| p.comm.as_str()).collect();
    names.sort_unstable();
    let expected: &[&str] = if upstream.is_some() {
        &["llamatap"]
    } else {
        &["llama-server", "llamatap"]
    };
    assert_eq!(names, expected, "children of the script while it runs");

    let deadline = Instant::now() + STOP_WITHIN;
    let expected_code = match stop {
        Stop::Script(sig, signo) => {
            send_signal(qs.child.id(), sig);
            128 + signo
        }
        Stop::LlamatapKilled => {
            let tap = children.iter().find(|p| p.comm == "llamatap").unwrap();
            send_signal(tap.pid, "KILL");
            128 + 9
        }
    };

    let status = qs.wait_exit(deadline);
    let ports_closed = wait_until(deadline, || {
        qs.ports
            .iter()
            .all(|p| TcpStream::connect(("127.0.0.1", *p)).is_err())
    });
    let left = |qs: &Quickstart| -> Vec<String> {
        let mut left: Vec<String> = children
            .iter()
            .filter(|p| p.alive())
            .map(|p| format!("{} ({})", p.pid, p.comm))
            .collect();
        left.extend(qs.port_users());
        left
    };
    wait_until(deadline, || left(&qs).is_empty());

    let log = qs.log();
    assert_eq!(
        status.map(|s| s.code()),
        Some(Some(expected_code)),
        "exit status within {STOP_WITHIN:?} of {stop:?} (None: still running)\n{log}"
    );
    assert!(
        ports_closed,
        "something still answers on {:?} {STOP_WITHIN:?} after {stop:?}\n{log}",
        qs.ports
    );
    assert_eq!(left(&qs), Vec::<String>::new(), "processes left\n{log}");
    if let Stop::Script(..) = stop {
        // SIGINT too: llamatap is asked to drain, and only then is llama-server stopped.
        let drained = log.find("SIGTERM: draining in-flight requests");
        assert!(drained.is_some(), "llamatap was not sent SIGTERM\n{log}");
        if upstream.is_none() {
            let llama_stopped = log.find("stopping llama-server");
            assert!(drained < llama_stopped, "llama-server stopped first\n{log}");
        }
    }
    if let Some(upstream) = upstream {
        let health = upstream.request("GET", "/health", None, Duration::from_secs(5));
        assert_eq!(
            health.map(|(s, _)| s),
            Ok(200),
            "the script must leave an upstream it did not start running"
        );
    }
}

/// A port llamatap needs that is taken stops the script before it builds
/// or starts anything, with a line naming the port and the variable to set
/// (not after llama-server started, with llamatap's bind error).
#[test]
fn a_taken_port_stops_the_script_before_it_starts_anything() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let mut qs = Quickstart::start_on("taken", None, port);
    let status = qs.wait_exit(Instant::now() + Duration::from_secs(20));
    let log = qs.log();
    assert_eq!(status.map(|s| s.code()), Some(Some(1)), "{log}");
    assert!(
        log.contains(&format!(
            "something already listens on port {port}; stop it or set LLAMATAP_PORT"
        )),
        "{log}"
    );
    assert!(!log.contains("starting llama-server"), "{log}");
    drop(taken);
}

/// Runs the script to its end without `LLAMATAP_BIN` and with a `cargo`
/// that only records it was called: whether the script got as far as a
/// build, its exit code and its output.
fn run_before_build(
    name: &str,
    args: &[&str],
    env: &[(&str, String)],
) -> (bool, Option<i32>, String) {
    let dir =
        std::env::temp_dir().join(format!("llamatap-quickstart-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let built = dir.join("cargo-called");
    let cargo = dir.join("cargo");
    std::fs::write(
        &cargo,
        format!("#!/bin/sh\ntouch '{}'\nexit 1\n", built.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/quickstart.sh"))
        .args(args)
        .env("PATH", path)
        .env_remove("LLAMATAP_BIN")
        .env_remove("LLAMATAP_MODEL")
        .env("LLAMATAP_PORT", free_port().to_string())
        .env("LLAMATAP_ADMIN_PORT", free_port().to_string())
        .env("LLAMA_SERVER_PORT", free_port().to_string())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    let called = built.exists();
    let _ = std::fs::remove_dir_all(&dir);
    (called, out.status.code(), log)
}

/// llama-server's port is checked with llamatap's, before the build (as the
/// README promises): a taken one stops the script at once, naming the
/// variable that moves it.
#[test]
fn a_taken_llama_server_port_stops_the_script_before_the_build() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let (built, code, log) = run_before_build(
        "taken-llama",
        &[],
        &[("LLAMA_SERVER_PORT", port.to_string())],
    );
    assert_eq!(code, Some(1), "{log}");
    assert!(!built, "cargo ran before the port check\n{log}");
    assert!(
        log.contains(&format!(
            "something already listens on port {port}; stop it or set LLAMA_SERVER_PORT"
        )),
        "{log}"
    );
    // With --upstream, llama-server's port is not the script's to check.
    let (built, _, log) = run_before_build(
        "taken-llama-upstream",
        &["--upstream", "http://127.0.0.1:1"],
        &[("LLAMA_SERVER_PORT", port.to_string())],
    );
    assert!(built, "{log}");
    drop(taken);
}

/// A model that is not there, or a model with `--upstream`, is refused
/// before anything is built.
#[test]
fn a_wrong_model_is_refused_before_the_build() {
    let (built, code, log) = run_before_build("no-model", &["--model", "/nonexistent/m.gguf"], &[]);
    assert_eq!(code, Some(1), "{log}");
    assert!(!built, "{log}");
    assert!(
        log.contains("no model file at /nonexistent/m.gguf"),
        "{log}"
    );
    let (built, code, log) = run_before_build(
        "model-env",
        &[],
        &[("LLAMATAP_MODEL", "/nonexistent/env.gguf".to_string())],
    );
    assert_eq!((built, code), (false, Some(1)), "{log}");
    assert!(log.contains("/nonexistent/env.gguf"), "{log}");
    let (built, code, log) = run_before_build(
        "model-and-upstream",
        &[
            "--model",
            "/nonexistent/m.gguf",
            "--upstream",
            "http://127.0.0.1:1",
        ],
        &[],
    );
    assert_eq!((built, code), (false, Some(2)), "{log}");
    assert!(log.contains("give one of them"), "{log}");
}

// === impl Quickstart ===

/// The running script; on drop, it and everything it started are killed.
struct Quickstart {
    child: Child,
    /// Proxy, admin and (in the default mode) llama-server ports.
    ports: Vec<u16>,
    dir: PathBuf,
}

impl Quickstart {
    fn start(name: &str, upstream: Option<&LlamaServer>) -> Quickstart {
        Self::start_on(name, upstream, free_port())
    }

    /// After `/readyz`, the first question's exchange is printed: the
    /// question, the answer, and llamatap's figures for it, the very ones
    /// `/latency.json` holds (rounded to the millisecond).
    fn assert_first_question_answered(&mut self) {
        // The hints come once the question's process has ended.
        let deadline = Instant::now() + READY_WITHIN;
        let done = wait_until(deadline, || self.log().contains("Ask your own"));
        let log = self.log();
        assert!(done, "no end of the first question\n{log}");
        assert!(log.contains("  > What is the capital of France?"), "{log}");
        let admin = format!("127.0.0.1:{}", self.ports[1]);
        let (status, body) = common::http::get(&admin, "/latency.json").unwrap();
        assert_eq!(status, 200);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let first = &v["requests"][0];
        let figure = |key: &str| match first[key].as_f64() {
            Some(x) => format!("{x:.0} ms"),
            None => "–".to_string(),
        };
        for (label, key) in [
            ("first token", "ttft_ms"),
            ("first sentence", "first_sentence_ms"),
            ("whole answer", "e2e_ms"),
        ] {
            let printed = log
                .lines()
                .find(|l| l.trim_start().starts_with(label))
                .unwrap_or_else(|| panic!("no {label} line\n{log}"));
            assert!(
                printed.contains(&figure(key)),
                "{label}: printed {printed:?}, /latency.json {}\n{log}",
                first[key]
            );
        }
        assert!(first["ttft_ms"].as_f64().is_some(), "{v}");
    }

    /// As [`Quickstart::start`], with llamatap's listener on `port`.
    fn start_on(name: &str, upstream: Option<&LlamaServer>, port: u16) -> Quickstart {
        let binary = llama::llama_server_binary();
        let model = llama::model_path("tiny");
        assert!(
            binary.is_file() && model.is_file(),
            "{} or {} missing (set LLAMATAP_LLAMA_SERVER and LLAMATAP_TINY_MODEL, \
             or run scripts/ensure-deps.sh)",
            binary.display(),
            model.display()
        );
        let dir =
            std::env::temp_dir().join(format!("llamatap-quickstart-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut ports = vec![port, free_port(), free_port()];
        let log = std::fs::File::create(dir.join("quickstart.log")).unwrap();
        // SIGINT and SIGTERM at their defaults: a shell that started with
        // one ignored (a background job of a non-interactive shell starts
        // with SIGINT ignored, and so does everything it runs) cannot trap
        // it, and the test is about the script's traps, not its parent's.
        let mut cmd = Command::new("env");
        cmd.arg("--default-signal=INT,TERM")
            .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/quickstart.sh"));
        cmd.env_remove("LLAMATAP_MODEL")
            .env_remove("LLAMATAP_QUESTION");
        match upstream {
            Some(u) => {
                cmd.args(["--upstream", &u.base_url]);
            }
            // The model by flag, and once by the variable.
            None if name.starts_with("INT") => {
                cmd.env("LLAMATAP_MODEL", &model);
            }
            None => {
                cmd.arg("--model").arg(&model);
            }
        }
        cmd.env("LLAMATAP_BIN", env!("CARGO_BIN_EXE_llamatap"))
            .env("LLAMATAP_LLAMA_SERVER", &binary)
            .env("LLAMATAP_HOST", "127.0.0.1")
            .env("LLAMATAP_PORT", ports[0].to_string())
            .env("LLAMATAP_ADMIN_PORT", ports[1].to_string())
            .env("LLAMA_SERVER_PORT", ports[2].to_string())
            .env("LLAMATAP_GRACE_PERIOD_SECONDS", GRACE_SECONDS.to_string())
            .env("LLAMATAP_PID_FILE", dir.join("llamatap.pid"))
            .env("LLAMATAP_UPGRADE_SOCK", dir.join("upgrade.sock"))
            .env("TMPDIR", &dir)
            .env_remove("LLAMATAP_CONFIG")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let child = cmd.spawn().expect("run scripts/quickstart.sh");
        if upstream.is_some() {
            ports.truncate(2);
        }
        Quickstart { child, ports, dir }
    }

    /// Polls llamatap's `/readyz` until it answers 200.
    fn wait_ready(&mut self) {
        let admin = format!("127.0.0.1:{}", self.ports[1]);
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Ok((200, _)) = common::http::get(&admin, "/readyz") {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("quickstart.sh exited early ({status})\n{}", self.log());
            }
            if Instant::now() >= deadline {
                panic!("/readyz not 200 after {READY_WITHIN:?}\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_exit(&mut self, deadline: Instant) -> Option<ExitStatus> {
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The script's direct children now.
    fn children(&self) -> Vec<Proc> {
        procs()
            .into_iter()
            .filter(|p| p.ppid == self.child.id())
            .collect()
    }

    /// Live processes with one of the ports on their command line.
    fn port_procs(&self) -> Vec<Proc> {
        let ports: Vec<String> = self.ports.iter().map(u16::to_string).collect();
        procs()
            .into_iter()
            .filter(|p| {
                p.args.iter().any(|a| {
                    ports
                        .iter()
                        .any(|port| a == port || a.ends_with(&format!(":{port}")))
                })
            })
            .collect()
    }

    fn port_users(&self) -> Vec<String> {
        self.port_procs()
            .iter()
            .map(|p| format!("{} ({}: {})", p.pid, p.comm, p.args.join(" ")))
            .collect()
    }

    /// The script's output (with llamatap's), and llama-server's log.
    fn log(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
        format!(
            "--- quickstart.sh ---\n{}--- llama-server ---\n{}",
            read("quickstart.log"),
            read("llamatap-quickstart-llama-server.log")
        )
    }
}

impl Drop for Quickstart {
    fn drop(&mut self) {
        for p in self.children().into_iter().chain(self.port_procs()) {
            send_signal(p.pid, "KILL");
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

// === processes, from /proc ===

/// One process, as `/proc/PID/stat` and `cmdline` describe it.
struct Proc {
    pid: u32,
    ppid: u32,
    comm: String,
    /// Field 22 of `stat`: tells a process from a later one with the same pid.
    start_time: u64,
    args: Vec<String>,
}

impl Proc {
    fn read(pid: u32) -> Option<Proc> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (head, tail) = stat.rsplit_once(')')?;
        let comm = head.split_once('(')?.1.to_string();
        let fields: Vec<&str> = tail.split_whitespace().collect();
        // fields[0] is field 3 (state).
        if fields.first() == Some(&"Z") {
            return None;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        Some(Proc {
            pid,
            ppid: fields.get(1)?.parse().ok()?,
            comm,
            start_time: fields.get(19)?.parse().ok()?,
            args: cmdline
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect(),
        })
    }

    /// Still running (not a zombie, and not replaced by another process).
    fn alive(&self) -> bool {
        Proc::read(self.pid).is_some_and(|now| now.start_time == self.start_time)
    }
}

/// Every live process.
fn procs() -> Vec<Proc> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter_map(Proc::read)
        .collect()
}

fn send_signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status();
}

fn wait_until(deadline: Instant, mut done: impl FnMut() -> bool) -> bool {
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
