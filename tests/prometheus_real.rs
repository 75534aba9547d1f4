//! The operator kit against the real thing: Debian's Prometheus scrapes
//! llamatap while it proxies the real llama-server (tiny model) under a mixed
//! workload (streams, non-streams, text completions, cache-friendly and
//! cache-defeating prompts, hang-ups before the headers, during the prefill and
//! mid-stream). Then every PromQL expression of every panel in dashboards/,
//! and every recording rule of conf/prometheus/rules.yml, is evaluated through
//! Prometheus's HTTP API and must return a finite value. `promtool` checks the
//! shipped config and rules, runs the rules' unit tests, and lints llamatap's
//! /metrics output.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
// Included by path so that this test needs no line in tests/common/mod.rs.
use common::prometheus as prom;

use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use common::http;
use common::llama::LlamaServer;
use common::otlp;
use common::proxy::{metric_sum, Llamatap};
use common::wait_until;
use prom::{promtool, promtool_ok, Prometheus};

/// Queries that may legitimately be empty because they count events the
/// workload does not produce: (dashboard uid, panel title). Every dashboard
/// query is written to return 0 rather than nothing when an event did not
/// happen, so this list is empty; it stays as the one place to add one.
const EVENT_DRIVEN: &[(&str, &str)] = &[];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn chat(system: &str, user: &str, stream: bool, max_tokens: u32) -> String {
    common::llama::chat_with_system(system, user, stream, max_tokens, 7)
}

/// Sends a request through the proxy and reads the whole answer.
fn complete(addr: &str, path: &str, body: &str) -> Vec<u8> {
    let mut r = http::post(addr, path, body).unwrap();
    assert_eq!(r.head.status, 200, "{path}");
    r.read_all().unwrap()
}

/// A stream the client abandons after its first visible token.
fn hang_up_mid_stream(addr: &str, body: &str) {
    let mut r = http::post(addr, "/v1/chat/completions", body).unwrap();
    assert_eq!(r.head.status, 200);
    let mut seen = Vec::new();
    while http::chat_content(&seen).is_empty() {
        match r.next_piece().unwrap() {
            Some(p) => seen.extend(p),
            None => break,
        }
    }
    drop(r);
}

/// A stream the client abandons as soon as the headers arrive (during the
/// prefill of a long prompt, or just after it).
fn hang_up_after_headers(addr: &str, body: &str) {
    let r = http::post(addr, "/v1/chat/completions", body).unwrap();
    assert_eq!(r.head.status, 200);
    drop(r);
}

/// A non-streaming request abandoned before llama-server answers.
fn hang_up_before_headers(addr: &str, body: &str) {
    let s = http::send_only(addr, "POST", "/v1/chat/completions", body.as_bytes()).unwrap();
    thread::sleep(Duration::from_millis(30));
    drop(s);
}

/// The mixed workload; returns the number of LLM requests sent.
fn workload(proxy: &Llamatap, llama: &LlamaServer) -> usize {
    let addr = proxy.addr();
    // A shared system prompt that llama-server's KV cache can reuse, and a
    // variant that changes at its very start on every request (defeating it).
    let system = format!(
        "You are a helpful voice assistant. {}",
        llama.prompt_of_tokens(220)
    );
    let long_prompt = llama.prompt_of_tokens(900);
    let mut sent = 0;
    for round in 0..3 {
        // Two cache-friendly streams in parallel.
        let streams: Vec<_> = (0..2)
            .map(|i| {
                let (addr, system) = (addr.clone(), system.clone());
                thread::spawn(move || {
                    let body = chat(
                        &system,
                        &format!("Question {round}.{i}: tell me a story."),
                        true,
                        48,
                    );
                    let out = complete(&addr, "/v1/chat/completions", &body);
                    assert!(!http::chat_content(&out).is_empty(), "no content streamed");
                })
            })
            .collect();
        // A non-streaming chat and a streaming text completion.
        complete(
            &addr,
            "/v1/chat/completions",
            &chat(&system, &format!("Round {round}: say hello."), false, 24),
        );
        complete(
            &addr,
            "/v1/completions",
            &serde_json::json!({"prompt": format!("Once upon a time {round}"), "max_tokens": 24, "stream": true})
                .to_string(),
        );
        // The prompt-cache killer: a request id before the system prompt.
        complete(
            &addr,
            "/v1/chat/completions",
            &chat(
                &format!("Request {round}-{:?}. {system}", Instant::now()),
                "What time is it?",
                true,
                24,
            ),
        );
        // Hang-ups: mid-stream, right after the headers, before the headers.
        hang_up_mid_stream(&addr, &chat(&system, "Tell me everything.", true, 400));
        hang_up_after_headers(&addr, &chat("Summarise.", &long_prompt, true, 64));
        hang_up_before_headers(&addr, &chat(&system, "Write a long essay.", false, 400));
        for t in streams {
            t.join().unwrap();
        }
        sent += 8;
        // Non-LLM routes pass through too.
        assert_eq!(http::get(&addr, "/v1/models").unwrap().0, 200);
        assert_eq!(http::get(&addr, "/health").unwrap().0, 200);
    }
    sent
}

/// A Grafana-style regex escape of one variable value (as its Prometheus data
/// source does for multi-value variables): a backslash pair before each regex
/// metacharacter, inside a PromQL string.
fn grafana_regex_escape(v: &str) -> String {
    let mut out = String::new();
    for c in v.chars() {
        if "\\$^*+?.()|{}[]'".contains(c) {
            out.push_str("\\\\");
        }
        out.push(c);
    }
    out
}

/// Substitutes the Grafana variables the dashboards use.
fn substitute(expr: &str, model: &str, window: &str) -> String {
    let mut e = expr.to_string();
    for (var, value) in [
        ("${__rate_interval}", window),
        ("$__rate_interval", window),
        ("${__interval}", "5s"),
        ("$__interval", "5s"),
        ("${__range}", window),
        ("$__range", window),
        ("${model}", model),
        ("$model", model),
    ] {
        e = e.replace(var, value);
    }
    e
}

/// Every `expr` of every panel (rows included) of a dashboard:
/// (panel title, refId, expr).
fn panel_exprs(dash: &serde_json::Value) -> Vec<(String, String, String)> {
    fn walk(panels: &serde_json::Value, out: &mut Vec<(String, String, String)>) {
        for p in panels.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = t["expr"].as_str() {
                    out.push((
                        p["title"].as_str().unwrap_or("").to_string(),
                        t["refId"].as_str().unwrap_or("").to_string(),
                        expr.to_string(),
                    ));
                }
            }
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dash["panels"], &mut out);
    out
}

fn dashboards() -> Vec<(PathBuf, serde_json::Value)> {
    let mut out: Vec<_> = std::fs::read_dir(repo().join("dashboards"))
        .expect("dashboards/")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let v = serde_json::from_slice(&std::fs::read(&p).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, v)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(!out.is_empty(), "no dashboards in dashboards/");
    out
}

/// The first finite sample value of a query result, if any.
fn finite_value(data: &serde_json::Value) -> Option<f64> {
    let result = data["result"].as_array()?;
    result.iter().find_map(|s| {
        let v = if data["resultType"] == "matrix" {
            s["values"].as_array()?.last()?[1].as_str()?.to_string()
        } else if data["resultType"] == "scalar" {
            data["result"][1].as_str()?.to_string()
        } else {
            s["value"][1].as_str()?.to_string()
        };
        v.parse::<f64>().ok().filter(|x| x.is_finite())
    })
}

/// Now, in Unix seconds (Prometheus's timestamps).
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn rel(p: &Path) -> String {
    p.strip_prefix(repo()).unwrap_or(p).display().to_string()
}

#[test]
fn shipped_prometheus_config_and_rules_pass_promtool() {
    let root = repo();
    let config = root.join("conf/prometheus.yml");
    let rules = root.join("conf/prometheus/rules.yml");
    let tests = root.join("conf/prometheus/rules_test.yml");
    let out = promtool_ok(&["check", "config", config.to_str().unwrap()], None);
    assert!(out.contains("1 rule files found"), "{out}");
    let out = promtool_ok(&["check", "rules", rules.to_str().unwrap()], None);
    assert!(out.contains("SUCCESS"), "{out}");
    let out = promtool_ok(&["test", "rules", tests.to_str().unwrap()], None);
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn every_dashboard_query_returns_data_from_real_prometheus() {
    let t0 = Instant::now();
    let llama = LlamaServer::start("tiny", &[]);
    let (otlp_url, _spans) = otlp::http_receiver();
    let proxy = Llamatap::start(
        &llama.base_url,
        &["--otlp-endpoint", &otlp_url, "--otlp-protocol", "http"],
    );
    let rules = repo().join("conf/prometheus/rules.yml");
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n  - {}\n\
         scrape_configs:\n  - job_name: llamatap\n    metrics_path: /metrics\n    static_configs:\n      - targets: ['{}']\n",
        rules.display(),
        proxy.admin()
    );
    let prometheus = Prometheus::start(&config);
    // Before the workload, Prometheus has scraped the model's series at zero
    // (llamatap creates them when it reads llama-server's /v1/models): every
    // rate() below then has a sample from before the first request, however
    // fast the workload is.
    let seeded = format!(
        "llamatap_stage_duration_seconds_count{{stage=\"ttft\",model={}}}",
        serde_json::to_string(&llama.model_id).unwrap()
    );
    assert!(
        prometheus.wait_value(&seeded, 0.0, Duration::from_secs(60)),
        "Prometheus never scraped {seeded} at 0: {:?}\n{}",
        prometheus.query(&seeded),
        prometheus.log()
    );
    let before = prometheus.sample_time(&seeded).unwrap();
    let setup = t0.elapsed();

    // The mixed workload.
    let t1 = Instant::now();
    let sent = workload(&proxy, &llama);
    let load = t1.elapsed();

    // llamatap's final counts...
    let llm_requests = |m: &str, needles: &[&str]| {
        ["chat_completions", "completions"]
            .iter()
            .map(|route| {
                let route = format!("route=\"{route}\"");
                let mut all = vec![route.as_str()];
                all.extend_from_slice(needles);
                metric_sum(m, "llamatap_requests_total", &all)
            })
            .sum::<f64>()
    };
    let m = proxy.wait_metrics(Duration::from_secs(30), |m| {
        llm_requests(m, &[]) >= sent as f64
            && metric_sum(m, "llamatap_inflight_requests", &[]) == 0.0
    });
    let total = metric_sum(&m, "llamatap_requests_total", &[]);
    assert_eq!(
        llm_requests(&m, &[]),
        sent as f64,
        "LLM requests recorded\n{m}"
    );
    // Only answers that arrived whole are timed to their end: the hang-ups
    // have no e2e.
    let llm = metric_sum(
        &m,
        "llamatap_stage_duration_seconds_count",
        &["stage=\"e2e\""],
    );
    assert_eq!(
        llm,
        llm_requests(&m, &["outcome=\"ok\""]),
        "e2e counts the ok answers\n{m}"
    );
    // ...are what Prometheus's latest scrape shows. (Counters only grow, so a
    // family's sum equals llamatap's only once every series does.)
    let e2e = "sum(llamatap_stage_duration_seconds_count{stage=\"e2e\"})";
    assert!(
        wait_until(Duration::from_secs(60), || {
            prometheus.value("sum(llamatap_requests_total)") == Some(total)
                && prometheus.value(e2e) == Some(llm)
        }),
        "Prometheus never saw {total} requests and {llm} LLM requests: {:?}, {:?}",
        prometheus.query("sum(llamatap_requests_total)"),
        prometheus.query(e2e)
    );
    let stored = unix_now();
    // Every panel query is evaluated at the time of that scrape, over a
    // window reaching back before the workload: each rate() sees the
    // increase from the zero scrape to the final one.
    let after = prometheus.sample_time("llamatap_requests_total").unwrap();
    assert!(after > before, "scraped at {after} after {before}");
    // The recording rules (one group, evaluated together) have run on it.
    assert!(
        wait_until(Duration::from_secs(60), || prometheus
            .sample_time("llamatap:requests:rate5m")
            .is_some_and(|t| t > stored)),
        "the recording rules were not evaluated after {stored}: {:?}",
        prometheus.query("timestamp(llamatap:requests:rate5m)")
    );

    // The workload produced what the panels show.
    for (needle, what) in [
        ("outcome=\"client_hangup\"", "client hang-ups"),
        ("route=\"completions\"", "text completions"),
        ("route=\"models\"", "a non-LLM route"),
    ] {
        assert!(
            metric_sum(&m, "llamatap_requests_total", &[needle]) > 0.0,
            "no {what}\n{m}"
        );
    }
    assert!(
        metric_sum(
            &m,
            "llamatap_cancellations_total",
            &["phase=\"before_headers\""]
        ) >= 1.0,
        "no hang-up before the headers\n{m}"
    );
    assert!(
        metric_sum(&m, "llamatap_tokens_total", &["kind=\"cached\""]) > 0.0,
        "no prompt-cache reuse\n{m}"
    );

    // promtool lints the exposition: llamatap's own families are clean. The
    // one message allowed is about llama-server's re-exported names, which
    // keep llama.cpp's `llamacpp:` prefix (promtool reserves ':' for
    // recording rules) so that queries written for llama-server work as they
    // are; everything else about them is clean too.
    let lint = promtool(&["check", "metrics"], Some(m.as_bytes()));
    let lint_text = format!(
        "{}{}",
        String::from_utf8_lossy(&lint.stdout),
        String::from_utf8_lossy(&lint.stderr)
    );
    let reexported = lint_text
        .lines()
        .filter(|l| {
            l.starts_with("llamacpp:") && l.ends_with(" metric names should not contain ':'")
        })
        .count();
    let other: Vec<&str> = lint_text
        .lines()
        .filter(|l| {
            !(l.starts_with("llamacpp:") && l.ends_with(" metric names should not contain ':'"))
        })
        .collect();
    assert!(
        reexported > 0 && other.is_empty(),
        "promtool check metrics on llamatap's /metrics:\n{lint_text}"
    );

    // The model variable's query.
    let models = prometheus
        .api(&format!(
            "/api/v1/label/model/values?match[]={}",
            prom::urlencode("llamatap_requests_total")
        ))
        .unwrap();
    assert!(
        models
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v == llama.model_id.as_str()),
        "label_values(llamatap_requests_total, model) = {models}, lacks {}",
        llama.model_id
    );

    // Every panel query, with the model variable at "All" and at the model.
    let window = format!("{}s", ((after - before).ceil() as u64 + 5).max(30));
    let model_regex = grafana_regex_escape(&llama.model_id);
    let t2 = Instant::now();
    let mut failures = Vec::new();
    let mut evaluated = 0;
    for (path, dash) in dashboards() {
        let uid = dash["uid"].as_str().unwrap_or("").to_string();
        for (title, ref_id, expr) in panel_exprs(&dash) {
            let allowed_empty = EVENT_DRIVEN.contains(&(uid.as_str(), title.as_str()));
            for model in [".*", model_regex.as_str()] {
                let q = substitute(&expr, model, &window);
                assert!(
                    !q.contains('$'),
                    "{}: panel {title:?} {ref_id}: unsubstituted variable in {q}",
                    rel(&path)
                );
                evaluated += 1;
                match prometheus.query_at(&q, after) {
                    Err(e) => failures.push(format!(
                        "{} / {title} / {ref_id}: query failed: {e}\n    {q}",
                        rel(&path)
                    )),
                    Ok(data) if finite_value(&data).is_none() && !allowed_empty => {
                        failures.push(format!(
                            "{} / {title} / {ref_id}: no finite value: {}\n    {q}",
                            rel(&path),
                            data["result"]
                        ))
                    }
                    Ok(_) => {}
                }
            }
        }
    }
    // Every recording rule.
    let rules_yaml: serde_yaml::Value =
        serde_yaml::from_slice(&std::fs::read(&rules).unwrap()).unwrap();
    for group in rules_yaml["groups"].as_sequence().unwrap() {
        for rule in group["rules"].as_sequence().unwrap() {
            if let Some(record) = rule["record"].as_str() {
                evaluated += 1;
                match prometheus.query(record) {
                    Ok(data) if finite_value(&data).is_some() => {}
                    other => failures.push(format!("recording rule {record}: {other:?}")),
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {evaluated} queries returned no data:\n{}\n\n/metrics was:\n{m}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!(
        "prometheus_real: setup {setup:?}, workload {load:?} ({sent} LLM requests), \
         {evaluated} queries in {:?} (window {window}), total {:?}",
        t2.elapsed(),
        t0.elapsed()
    );
}
