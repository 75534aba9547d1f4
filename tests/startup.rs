//! Startup through the real binary: settings that would start silently
//! wrong are refused in one line with exit code 2 (an upstream URL ending in
//! `/v1`, `https://` where this build has no TLS, mistyped config values in
//! plain words); the PID file belongs to the process that wrote it; start
//! and shutdown are one structured log line each, as the manual quotes them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::proxy::Llamatap;
use common::{free_port, temp_config, wait_until};

/// Runs the binary to completion with `args` and `env`, on free ports, with
/// no config or OTLP endpoint inherited from the environment.
fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_llamatap"))
        .args([
            "--listen",
            &format!("127.0.0.1:{}", free_port()),
            "--admin-listen",
            &format!("127.0.0.1:{}", free_port()),
        ])
        .args(args)
        .env_remove("LLAMATAP_CONFIG")
        .env_remove("LLAMATAP_UPSTREAM")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("LLAMATAP_PID_FILE")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// Asserts exit code 2 and one stderr line containing every `needle`.
fn refused(out: &Output, needles: &[&str]) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} missing from: {err}");
    }
    err
}

fn check_config(name: &str, toml: &str) -> Output {
    let file = temp_config(name, toml);
    run(&["--check-config", file.to_str().unwrap()], &[])
}

// === Refused settings ===

#[test]
fn upstream_url_ending_in_v1_is_refused_from_flag_env_and_file() {
    let hint = [
        "ends in /v1",
        "give llama-server's base URL (http://127.0.0.1:8081)",
        "llamatap forwards /v1/... as the client sent it",
    ];
    let out = check_config("v1-single", "upstream = \"http://127.0.0.1:8081/v1\"\n");
    refused(&out, &hint);
    let out = check_config(
        "v1-list",
        "[[upstreams]]\nurl = \"http://127.0.0.1:8082\"\n[[upstreams]]\nurl = \"http://127.0.0.1:8081/v1/\"\n",
    );
    let err = refused(&out, &hint);
    assert!(err.contains("upstreams.url"), "{err}");
    // Startup, not only --check-config.
    let out = run(&["--upstream", "http://127.0.0.1:8081/v1"], &[]);
    refused(&out, &hint);
    let out = run(&[], &[("LLAMATAP_UPSTREAM", "http://127.0.0.1:8081/v1")]);
    refused(&out, &hint);
    // A prefix before /v1 stays in the suggested base URL.
    let out = run(&["--upstream", "http://h:9000/llama/v1"], &[]);
    refused(&out, &["(http://h:9000/llama)"]);
    // /v1 inside a prefix is a prefix like any other.
    let file = temp_config(
        "v1-inside",
        "upstream = \"http://127.0.0.1:8081/v1/llama\"\n",
    );
    let out = run(&["--check-config", file.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{out:?}");
}

/// A client's full endpoint URL (`.../v1/chat/completions`) given as the
/// upstream is refused like a base URL ending in `/v1` (llama-server would
/// answer every request 404); a URL without a scheme gets the `http://` one.
#[test]
fn upstream_endpoint_urls_and_missing_schemes_are_refused_naming_the_fix() {
    for (url, wanted) in [
        (
            "http://127.0.0.1:8081/v1/chat/completions",
            "ends in the endpoint /v1/chat/completions; give llama-server's base URL (http://127.0.0.1:8081)",
        ),
        (
            "http://127.0.0.1:8081/completion",
            "ends in the endpoint /completion; give llama-server's base URL (http://127.0.0.1:8081)",
        ),
        (
            "http://h:9000/llama/v1/completions/",
            "give llama-server's base URL (http://h:9000/llama)",
        ),
        (
            "127.0.0.1:8081",
            "no scheme; did you mean http://127.0.0.1:8081?",
        ),
    ] {
        let out = run(&["--upstream", url], &[]);
        refused(&out, &["upstream", wanted]);
    }
    let out = check_config(
        "endpoint-list",
        "[[upstreams]]\nurl = \"http://127.0.0.1:8081/v1/chat/completions\"\n",
    );
    refused(&out, &["line 2: upstreams.url", "ends in the endpoint"]);
    // A prefix that merely looks like a word of an endpoint is a prefix.
    let file = temp_config(
        "endpoint-prefix",
        "upstream = \"http://127.0.0.1:8081/my-models\"\n",
    );
    let out = run(&["--check-config", file.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{out:?}");
}

/// A taken listen address is refused in one line naming what set it: the
/// flag, the environment variable or the file's key.
#[test]
fn a_taken_listen_address_names_the_flag_or_key_that_set_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let admin = format!("127.0.0.1:{}", free_port());
    let start = |args: &[&str], env: &[(&str, &str)]| {
        Command::new(env!("CARGO_BIN_EXE_llamatap"))
            .args(["--upstream", "http://127.0.0.1:1", "--admin-listen", &admin])
            .args(args)
            .env_remove("LLAMATAP_CONFIG")
            .env_remove("LLAMATAP_LISTEN")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("LLAMATAP_PID_FILE")
            .envs(env.iter().copied())
            .output()
            .unwrap()
    };
    let out = start(&["--listen", &addr], &[]);
    refused(
        &out,
        &[&format!("cannot listen on {addr} (proxy, set by --listen)")],
    );
    let out = start(&[], &[("LLAMATAP_LISTEN", &addr)]);
    refused(&out, &["set by LLAMATAP_LISTEN"]);
    let file = temp_config("taken-listen", &format!("listen = \"{addr}\"\n"));
    let out = start(&["--config", file.to_str().unwrap()], &[]);
    refused(&out, &[&format!("set by listen in {}", file.display())]);
    drop(taken);
}

/// Config errors name the file and the line at fault: a misspelt class
/// table, a `key_env` whose variable is unset (its own line, not `name`'s),
/// a mistyped key (with the closest one, and every key whole).
#[test]
fn config_errors_name_the_file_and_the_line_at_fault() {
    for (name, toml, wanted) in [
        (
            "class-typo",
            "[queue]\nenabled = true\n[queue.classes.interactiv]\nmax_wait_ms = 50\n",
            "line 3: queue.classes.interactiv: \"interactiv\" is not one of interactive, default, batch",
        ),
        (
            "key-env",
            "[[auth.keys]]\nname = \"a\"\nkey_env = \"LLAMATAP_TEST_NO_SUCH_KEY\"\n",
            "line 3: auth.keys.key_env: tenant \"a\": environment variable LLAMATAP_TEST_NO_SUCH_KEY is not set",
        ),
        (
            "key-typo",
            "\nupstrem = \"http://127.0.0.1:8081\"\n",
            "line 2: upstrem: unknown key; did you mean `upstream`? expected one of: listen, upstream,",
        ),
    ] {
        let file = temp_config(name, toml);
        let out = run(&["--check-config", file.to_str().unwrap()], &[]);
        let err = refused(&out, &[&file.display().to_string(), wanted]);
        assert!(!err.contains('…'), "{name}: cut: {err}");
    }
}

#[test]
fn https_otlp_endpoint_and_upstream_are_refused_naming_the_fix() {
    let out = check_config(
        "otlp-https",
        "[telemetry]\notlp_endpoint = \"https://collector.example:4318\"\notlp_protocol = \"http\"\n",
    );
    refused(
        &out,
        &[
            "telemetry.otlp_endpoint",
            "https:// is not supported",
            "local OpenTelemetry Collector over http://",
        ],
    );
    // gRPC and the environment variable alike, at startup.
    let out = run(
        &["--upstream", "http://127.0.0.1:8081"],
        &[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "https://collector.example:4317",
        )],
    );
    refused(&out, &["telemetry.otlp_endpoint", "no TLS"]);
    let out = run(&["--upstream", "https://127.0.0.1:8081"], &[]);
    refused(&out, &["upstream", "https:// is not supported", "no TLS"]);
    let out = check_config(
        "upstream-https",
        "[[upstreams]]\nurl = \"https://127.0.0.1:8081\"\n",
    );
    refused(&out, &["upstreams.url", "https:// is not supported"]);
}

#[test]
fn config_type_errors_are_in_plain_words_with_line_and_key() {
    for (toml, wanted) in [
        (
            "threads = \"two\"\n",
            "line 1: threads: expected a non-negative whole number, got \"two\"",
        ),
        (
            "listen = \"127.0.0.1:8080\"\n[telemetry]\nsample_ratio = \"high\"\n",
            "line 3: telemetry.sample_ratio: expected a number, got \"high\"",
        ),
        (
            "[telemetry]\nmetrics = \"yes\"\n",
            "telemetry.metrics: expected true or false, got \"yes\"",
        ),
        (
            "[models]\naliases = \"qwen\"\n",
            "models.aliases: expected a list in brackets",
        ),
        (
            "[upstream_timeouts]\nread_seconds = -5\n",
            "upstream_timeouts.read_seconds: expected a non-negative whole number, got -5",
        ),
        (
            "[[upstreams]]\nurl = \"http://a:1\"\nweight = 1.5\n",
            "upstreams.weight: expected a non-negative whole number, got 1.5",
        ),
        (
            "listen = 8080\n",
            "listen: expected a string in quotes, got 8080",
        ),
    ] {
        let out = check_config("types", toml);
        let err = refused(&out, &[wanted]);
        for rust in ["usize", "u64", "u32", "f64", "a boolean", "a sequence"] {
            assert!(!err.contains(rust), "{toml:?}: Rust type name in {err}");
        }
    }
}

// === PID file ===

/// The id in a PID file, if it holds one.
fn pid_in(path: &std::path::Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[test]
fn a_pid_file_belongs_to_the_process_that_wrote_it() {
    let up = format!("http://127.0.0.1:{}", free_port());
    let dir = std::env::temp_dir();
    // Llamatap::start gives each process --pid-file llamatap-{port}.pid.
    let mut first = Llamatap::start(&up, &[]);
    let first_file = dir.join(format!("llamatap-{}.pid", first.port));
    assert_eq!(pid_in(&first_file), Some(first.child.id()));

    // A second llamatap given the same file refuses to start, and leaves it.
    let out = run(
        &[
            "--upstream",
            &up,
            "--pid-file",
            first_file.to_str().unwrap(),
        ],
        &[],
    );
    refused(
        &out,
        &["belongs to llamatap process", &first.child.id().to_string()],
    );
    assert_eq!(pid_in(&first_file), Some(first.child.id()));
    // One that cannot start (its port is taken) leaves it too.
    let taken = format!("127.0.0.1:{}", first.port);
    let out = run(
        &[
            "--upstream",
            &up,
            "--listen",
            &taken,
            "--pid-file",
            first_file.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(pid_in(&first_file), Some(first.child.id()));

    // A second one with its own file runs and exits; the first's file stays.
    let mut second = Llamatap::start(&up, &[]);
    let second_file = dir.join(format!("llamatap-{}.pid", second.port));
    assert_eq!(pid_in(&second_file), Some(second.child.id()));
    second.term();
    assert!(second.wait_exit(Duration::from_secs(20)).is_some());
    assert!(!second_file.exists(), "the second's own file is removed");
    assert_eq!(pid_in(&first_file), Some(first.child.id()));

    // A file that no longer holds the process's id is left at exit.
    std::fs::write(&first_file, "1\n").unwrap();
    first.term();
    assert!(first.wait_exit(Duration::from_secs(20)).is_some());
    assert_eq!(
        pid_in(&first_file),
        Some(1),
        "another process's file removed"
    );
    let _ = std::fs::remove_file(&first_file);
}

#[test]
fn no_pid_file_by_default() {
    let up = format!("http://127.0.0.1:{}", free_port());
    let (port, admin) = (free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_llamatap"))
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--admin-listen",
            &format!("127.0.0.1:{admin}"),
            "--upstream",
            &up,
        ])
        .env_remove("LLAMATAP_CONFIG")
        .env_remove("LLAMATAP_PID_FILE")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let up_and_running = wait_until(Duration::from_secs(20), || {
        matches!(
            common::http::get(&format!("127.0.0.1:{admin}"), "/healthz"),
            Ok((200, _))
        )
    });
    // The old shared default: never written with this process's id.
    let shared = pid_in(std::path::Path::new("/tmp/llamatap.pid"));
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(up_and_running, "{err}");
    assert_ne!(shared, Some(pid), "/tmp/llamatap.pid written by default");
    assert!(!err.contains("pid_file="), "{err}");
}

// === Log lines ===

/// `TIME LEVEL target: message`: the one line format.
fn structured(line: &str) -> bool {
    let mut parts = line.split_whitespace();
    let time = parts.next().unwrap_or("");
    let level = parts.next().unwrap_or("");
    let target = parts.next().unwrap_or("");
    time.len() == 24
        && time.ends_with('Z')
        && time.as_bytes()[10] == b'T'
        && ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&level)
        && target.ends_with(':')
}

#[test]
fn start_and_shutdown_are_one_structured_line_each() {
    let (a, b) = (free_port(), free_port());
    let (ua, ub) = (
        format!("http://127.0.0.1:{a}"),
        format!("http://127.0.0.1:{b}"),
    );
    let cfg = temp_config(
        "start-fleet",
        "[[auth.keys]]\nname = \"voice-app\"\nkey = \"sk-voice-0123\"\n",
    );
    let mut proxy = Llamatap::start_fleet(&[&ua, &ub], &["--config", cfg.to_str().unwrap()]);
    proxy.term();
    assert!(proxy.wait_exit(Duration::from_secs(20)).is_some());
    assert!(
        wait_until(Duration::from_secs(5), || proxy
            .stderr()
            .contains("drained: exiting")),
        "{}",
        proxy.stderr()
    );
    let log = proxy.stderr();
    for line in log.lines() {
        assert!(structured(line), "not a structured line: {line:?}\n{log}");
    }
    let started: Vec<&str> = log.lines().filter(|l| l.contains("listening")).collect();
    assert_eq!(started.len(), 1, "{log}");
    let start = started[0];
    assert!(start.contains(" INFO llamatap::server: llamatap listening on 127.0.0.1:"));
    assert!(
        start.contains(&format!("upstreams=127.0.0.1:{a},127.0.0.1:{b}")),
        "{start}"
    );
    assert!(
        start.contains(&format!("upstream_urls={ua},{ub}")),
        "{start}"
    );
    assert!(start.contains("routing=\"prefix_affinity\""), "{start}");
    assert!(start.contains("queue=\"off\""), "{start}");
    assert!(start.contains("tenants=voice-app"), "{start}");
    let draining: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("SIGTERM") || l.contains("gracefully"))
        .collect();
    assert_eq!(draining.len(), 1, "{log}");
    assert!(
        draining[0].contains(" INFO llamatap::shutdown: SIGTERM: draining in-flight requests"),
        "{log}"
    );

    // The README quotes these lines as the binary writes them: each quoted
    // line's level, target and words without digits, in order.
    let readme = common::manual();
    let quoted: Vec<&str> = readme
        .lines()
        .filter(|l| {
            structured(l) && (l.contains("llamatap::server:") || l.contains("llamatap::shutdown:"))
        })
        .collect();
    assert!(
        quoted.len() >= 2,
        "README quotes the start and SIGTERM lines"
    );
    for q in quoted {
        let shape = |l: &str| -> Vec<String> {
            l.split_whitespace()
                .skip(1)
                .map(|w| w.split('=').next().unwrap_or(w).to_string())
                .filter(|w| !w.bytes().any(|b| b.is_ascii_digit()))
                .collect()
        };
        // The quoted words in order; the binary may add fields it leaves out.
        let within = |written: Vec<String>| {
            let mut written = written.into_iter();
            shape(q).iter().all(|w| written.any(|x| x == *w))
        };
        assert!(
            log.lines().any(|l| within(shape(l))),
            "README line not written by the binary: {q}\n{log}"
        );
    }
}

#[test]
fn the_start_line_says_the_queue_is_on_and_names_the_tenants() {
    let up = format!("http://127.0.0.1:{}", free_port());
    let cfg = common::temp_config(
        "start-line",
        "[queue]\nenabled = true\n[[auth.keys]]\nname = \"voice\"\nkey = \"sk-voice-0123\"\n\
         [[auth.keys]]\nname = \"bulk\"\nkey = \"sk-bulk-01234\"\n",
    );
    let mut proxy = Llamatap::start(&up, &["--config", cfg.to_str().unwrap()]);
    let mut start = String::new();
    let seen = wait_until(Duration::from_secs(10), || {
        start = proxy
            .stderr()
            .lines()
            .find(|l| l.contains("listening"))
            .unwrap_or("")
            .to_string();
        !start.is_empty()
    });
    assert!(seen, "{}", proxy.stderr());
    assert!(start.contains("queue=\"on\""), "{start}");
    assert!(start.contains("tenants=voice,bulk"), "{start}");
    proxy.term();
    assert!(proxy.wait_exit(Duration::from_secs(20)).is_some());
}
