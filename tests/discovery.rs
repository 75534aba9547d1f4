//! DNS discovery through the binary: a real DNS server (dnslib, started by
//! the test on a loopback port) serves one name for three real llama-servers
//! listening on one port at 127.0.0.2, .3 and .4, and the test changes its
//! answer under steady traffic: add one, remove one (a stream in flight on
//! it), remove all, back; then 100 changes in a row for memory.
//!
//! Needs llama-server and the project venv's python with dnslib
//! (`scripts/ensure-deps.sh`); fails loudly without them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::dns::DnsServer;
use common::http;
use common::llama::LlamaServer;
use common::proxy::{metric_series, rss_kib, Llamatap};

const NAME: &str = "llama.test";
const HOSTS: [&str; 3] = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];

/// The test's DNS server, serving `NAME` (TTL 0: llamatap's lower bound
/// decides).
struct Dns(DnsServer);

impl Dns {
    fn start(label: &str) -> Dns {
        Dns(DnsServer::start(label, &zone(&HOSTS)))
    }

    fn port(&self) -> u16 {
        self.0.port()
    }

    /// Makes the name resolve to `hosts`, atomically.
    fn answer(&self, hosts: &[&str]) {
        self.0.set_zone(&zone(hosts));
    }
}

fn zone(hosts: &[&str]) -> serde_json::Value {
    serde_json::json!({"ttl": 0, "names": {format!("{NAME}."): hosts}})
}

/// The three llama-servers, on one port (`-np 2`).
fn servers() -> Vec<LlamaServer> {
    for _ in 0..5 {
        let port = common::free_port();
        let started: Vec<LlamaServer> = HOSTS
            .iter()
            .filter_map(|h| {
                std::panic::catch_unwind(|| LlamaServer::start_at("tiny", &["-np", "2"], h, port))
                    .ok()
            })
            .collect();
        if started.len() == HOSTS.len() {
            return started;
        }
    }
    panic!("could not start three llama-servers on one port");
}

fn member(host: &str, port: u16) -> String {
    format!("{host}:{port}")
}

/// `llamatap_upstream_up{upstream=...}`, when the series exists.
fn up(t: &Llamatap, name: &str) -> Option<f64> {
    metric_series(
        &t.metrics(),
        "llamatap_upstream_up",
        &[&format!("upstream=\"{name}\"")],
    )
}

fn wait(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    assert!(common::wait_until(timeout, &mut done), "timed out: {what}");
}

fn readyz(t: &Llamatap) -> (u16, String) {
    let (status, body) = http::get(&t.admin(), "/readyz").unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

const CHAT: &str =
    r#"{"model":"tiny","messages":[{"role":"user","content":"Say hi."}],"max_tokens":8}"#;

/// A small chat of its own conversation (`n`), so that prefix affinity
/// spreads the traffic over the members.
fn chat(n: usize) -> String {
    format!(
        r#"{{"model":"tiny","messages":[{{"role":"user","content":"Conversation {n}: say hi."}}],"max_tokens":8}}"#
    )
}

/// Clients sending one small chat after another until stopped; every
/// answer's status, and the failures' bodies.
struct Traffic {
    stop: Arc<AtomicBool>,
    results: Arc<Mutex<Vec<(u16, String)>>>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Traffic {
    fn start(addr: &str, clients: usize) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let results = Arc::new(Mutex::new(Vec::new()));
        let threads = (0..clients)
            .map(|client| {
                let (stop, results, addr) = (stop.clone(), results.clone(), addr.to_string());
                thread::spawn(move || {
                    let mut n = client * 1_000_000;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let r = match http::post(&addr, "/v1/chat/completions", &chat(n)) {
                            Ok(mut reader) => {
                                let status = reader.head.status;
                                let body = reader.read_all().unwrap_or_default();
                                (status, String::from_utf8_lossy(&body).into_owned())
                            }
                            Err(e) => (0, e.to_string()),
                        };
                        results.lock().unwrap().push(r);
                    }
                })
            })
            .collect();
        Traffic {
            stop,
            results,
            threads,
        }
    }

    fn count(&self) -> usize {
        self.results.lock().unwrap().len()
    }

    /// Stops the clients; every answer they got.
    fn finish(self) -> Vec<(u16, String)> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        std::mem::take(&mut *self.results.lock().unwrap())
    }
}

fn assert_all_ok(results: &[(u16, String)], phase: &str) {
    let failed: Vec<&(u16, String)> = results.iter().filter(|(s, _)| *s != 200).collect();
    assert!(
        failed.is_empty(),
        "{phase}: {} of {} requests failed, first: {:?}",
        failed.len(),
        results.len(),
        failed.first()
    );
    assert!(!results.is_empty(), "{phase}: no request was sent");
}

#[test]
fn a_fleet_follows_its_name_under_steady_traffic() {
    let _serial = common::fleet::serial();
    let servers = servers();
    let port = servers[0].port;
    let dns = Dns::start("discovery");
    dns.answer(&HOSTS[..2]);
    let config = common::temp_config(
        "discovery",
        &format!(
            "[discovery]\nresolver = \"127.0.0.1:{}\"\nmin_refresh_ms = 100\nmax_refresh_ms = 1000\n",
            dns.port()
        ),
    );
    let t = Llamatap::start(
        &format!("dns+http://{NAME}:{port}"),
        &["--config", config.to_str().unwrap()],
    );
    let names: Vec<String> = HOSTS.iter().map(|h| member(h, port)).collect();

    // Two members from the first answer, healthy; the third is not one.
    wait("two members up", Duration::from_secs(30), || {
        up(&t, &names[0]) == Some(1.0) && up(&t, &names[1]) == Some(1.0)
    });
    assert_eq!(
        up(&t, &names[2]),
        None,
        "{} is not in the answer yet",
        names[2]
    );
    wait("ready", Duration::from_secs(30), || readyz(&t).0 == 200);

    // Add one under traffic: it joins, passes its check, takes requests.
    let traffic = Traffic::start(&t.addr(), 2);
    wait("traffic flows", Duration::from_secs(30), || {
        traffic.count() >= 5
    });
    dns.answer(&HOSTS);
    wait("the third member up", Duration::from_secs(30), || {
        up(&t, &names[2]) == Some(1.0)
    });
    let routed = |name: &str| {
        metric_series(
            &t.metrics(),
            "llamatap_upstream_requests_total",
            &[&format!("upstream=\"{name}\""), "outcome=\"ok\""],
        )
        .unwrap_or(0.0)
    };
    wait("the new member serves", Duration::from_secs(60), || {
        routed(&names[2]) >= 1.0
    });

    // A long stream in flight on the member about to be removed.
    let long = r#"{"model":"tiny","messages":[{"role":"user","content":"Tell a long story."}],"max_tokens":1500,"ignore_eos":true,"stream":true}"#;
    let addr = t.addr();
    let stream = thread::spawn(move || {
        let mut r = http::post(&addr, "/v1/chat/completions", long).unwrap();
        let status = r.head.status;
        (status, r.read_all().unwrap_or_default())
    });
    let mut on = None;
    wait("the stream holds a slot", Duration::from_secs(30), || {
        on = servers.iter().position(|s| {
            s.slots().as_array().is_some_and(|a| {
                a.iter()
                    .any(|slot| slot["is_processing"].as_bool() == Some(true) && decoded(slot) > 30)
            })
        });
        on.is_some()
    });
    let gone = on.unwrap();
    let kept: Vec<&str> = (0..HOSTS.len())
        .filter(|i| *i != gone)
        .map(|i| HOSTS[i])
        .collect();
    dns.answer(&kept);
    let (status, body) = stream.join().unwrap();
    assert_eq!(status, 200);
    let text = String::from_utf8_lossy(&body);
    assert!(
        text.trim_end().ends_with("data: [DONE]"),
        "the stream on the removed member finished whole: {}",
        common::fleet::tail_chars(&text, 300)
    );
    wait(
        "the removed member's series are gone",
        Duration::from_secs(30),
        || !t.metrics().contains(&format!("\"{}\"", names[gone])),
    );
    assert_eq!(readyz(&t).0, 200, "two members remain");
    let served_before = routed(&names[(gone + 1) % 3]);
    wait("traffic goes on", Duration::from_secs(30), || {
        routed(&names[(gone + 1) % 3]) > served_before
    });
    let results = traffic.finish();
    assert_all_ok(&results, "adding and removing a member");

    // Remove all: not ready, a clear 503; back: ready and serving.
    dns.answer(&[]);
    wait("not ready with no member", Duration::from_secs(30), || {
        let (s, b) = readyz(&t);
        s == 503 && b.contains("resolves to no address")
    });
    let mut r = http::post(&t.addr(), "/v1/chat/completions", CHAT).unwrap();
    let status = r.head.status;
    let body = String::from_utf8_lossy(&r.read_all().unwrap()).into_owned();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("\"error\""), "an OpenAI-shaped error: {body}");
    dns.answer(&HOSTS);
    wait("ready again", Duration::from_secs(30), || {
        readyz(&t).0 == 200
    });
    let traffic = Traffic::start(&t.addr(), 2);
    wait("traffic flows again", Duration::from_secs(30), || {
        traffic.count() >= 10
    });
    assert_all_ok(&traffic.finish(), "back after removing all");

    // 100 changes: the third member joins and leaves; memory stays flat.
    let toggle = |n: usize| {
        for _ in 0..n {
            dns.answer(&HOSTS[..2]);
            wait("left", Duration::from_secs(30), || {
                up(&t, &names[2]).is_none()
            });
            dns.answer(&HOSTS);
            wait("joined", Duration::from_secs(30), || {
                up(&t, &names[2]).is_some()
            });
        }
    };
    toggle(10);
    let pid = t.child.id();
    let before = rss_kib(pid);
    // The joining member's own series come and go with its checks: count the others.
    let series = || {
        t.metrics()
            .lines()
            .filter(|l| !l.starts_with('#') && !l.contains(&names[2]))
            .count()
    };
    let series_before = series();
    toggle(40);
    let after = rss_kib(pid);
    let series_after = series();
    eprintln!(
        "discovery: RSS {before} KiB after 20 changes, {after} KiB after 100; series {series_before} -> {series_after}"
    );
    assert_eq!(
        series_after, series_before,
        "the series are bounded over time"
    );
    assert!(
        after <= before + 2048,
        "memory grew over 100 membership changes: {before} KiB -> {after} KiB"
    );
    drop(t);

    two_replicas_place_alike(&dns, port, &config, &names);
}

/// Where each llamatap placed each of `bodies` (the upstream on its latency
/// page), sent in order.
fn placements(t: &Llamatap, bodies: &[String]) -> Vec<String> {
    let sent: Vec<String> = bodies
        .iter()
        .map(|b| {
            let ex = common::fleet::chat_stream(&t.addr(), b);
            assert!(
                matches!(ex.end, common::fleet::End::Done),
                "{:?}: {}",
                ex.end,
                ex.body
            );
            ex.trace_id
        })
        .collect();
    let ids: Vec<&str> = sent.iter().map(String::as_str).collect();
    let by_id = common::fleet::latency_by_trace(&t.admin(), &ids, Duration::from_secs(10));
    ids.iter()
        .map(|id| by_id[*id]["upstream"].as_str().unwrap().to_string())
        .collect()
}

/// Two replicas following the same name place new conversations on the
/// same members; when one member leaves, only its conversations move.
fn two_replicas_place_alike(dns: &Dns, port: u16, config: &Path, names: &[String]) {
    dns.answer(&HOSTS);
    let (otlp_url, _spans) = common::otlp::http_receiver();
    let start = || {
        Llamatap::start(
            &format!("dns+http://{NAME}:{port}"),
            &[
                "--config",
                config.to_str().unwrap(),
                "--otlp-endpoint",
                &otlp_url,
                "--otlp-protocol",
                "http",
            ],
        )
    };
    let (a, b) = (start(), start());
    for t in [&a, &b] {
        wait("three members up", Duration::from_secs(30), || {
            names.iter().all(|n| up(t, n) == Some(1.0))
        });
    }
    const N: usize = 30;
    let question = |c: usize| format!("Conversation {c} about the tides.");
    let first: Vec<String> = (0..N)
        .map(|c| {
            format!(
                r#"{{"model":"tiny","messages":[{{"role":"user","content":"{}"}}],"max_tokens":4,"stream":true}}"#,
                question(c)
            )
        })
        .collect();
    let on_a = placements(&a, &first);
    let on_b = placements(&b, &first);
    assert_eq!(
        on_a, on_b,
        "two replicas place every new conversation alike"
    );
    let mut per: Vec<usize> = names
        .iter()
        .map(|n| on_a.iter().filter(|u| *u == n).count())
        .collect();
    eprintln!("discovery: {N} conversations per member {per:?}, placed alike by both replicas");
    // The busiest member leaves both replicas' answer.
    let (gone, _) = per.iter().enumerate().max_by_key(|(_, n)| **n).unwrap();
    per.clear();
    let kept: Vec<&str> = (0..HOSTS.len())
        .filter(|i| *i != gone)
        .map(|i| HOSTS[i])
        .collect();
    dns.answer(&kept);
    for t in [&a, &b] {
        wait("the member left", Duration::from_secs(30), || {
            up(t, &names[gone]).is_none()
        });
    }
    // The next turn of every conversation: those on a member that stayed
    // stay there; those on the one that left move, alike in both replicas.
    let next: Vec<String> = (0..N)
        .map(|c| {
            format!(
                r#"{{"model":"tiny","messages":[{{"role":"user","content":"{}"}},{{"role":"assistant","content":"High and low."}},{{"role":"user","content":"And the moon?"}}],"max_tokens":4,"stream":true}}"#,
                question(c)
            )
        })
        .collect();
    let now_a = placements(&a, &next);
    let now_b = placements(&b, &next);
    assert_eq!(
        now_a, now_b,
        "both replicas move the same conversations alike"
    );
    let mut moved = 0;
    for c in 0..N {
        if on_a[c] == names[gone] {
            moved += 1;
            assert_ne!(now_a[c], names[gone]);
        } else {
            assert_eq!(
                now_a[c], on_a[c],
                "conversation {c} moved off a member that stayed"
            );
        }
    }
    eprintln!(
        "discovery: after {} left, {moved} of {N} conversations moved, all from it",
        names[gone]
    );
}

/// A slot's `n_decoded`, wherever this llama-server version nests it.
fn decoded(v: &serde_json::Value) -> u64 {
    match v {
        serde_json::Value::Object(m) => m
            .iter()
            .map(|(k, v)| match (k.as_str(), v.as_u64()) {
                ("n_decoded", Some(n)) => n,
                _ => decoded(v),
            })
            .max()
            .unwrap_or(0),
        serde_json::Value::Array(a) => a.iter().map(decoded).max().unwrap_or(0),
        _ => 0,
    }
}

/// A name that suddenly resolves to 300 addresses: 64 members at most, the
/// rest left out with one warning; back to two, the others drain and leave.
/// (Nothing listens on these addresses: membership is what is tested.)
#[test]
fn a_name_resolving_to_hundreds_of_addresses_is_capped_and_logged() {
    let dns = Dns::start("capped");
    let many: Vec<String> = (0..300)
        .map(|i| format!("127.0.{}.{}", 10 + i / 200, 1 + i % 200))
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    dns.answer(&many[..2]);
    let config = common::temp_config(
        "discovery-capped",
        &format!(
            "[discovery]\nresolver = \"127.0.0.1:{}\"\nmin_refresh_ms = 100\nmax_refresh_ms = 1000\n",
            dns.port()
        ),
    );
    let port = common::free_port();
    let t = Llamatap::start(
        &format!("dns+http://{NAME}:{port}"),
        &["--config", config.to_str().unwrap()],
    );
    let members = |t: &Llamatap| {
        t.metrics()
            .lines()
            .filter(|l| l.starts_with("llamatap_upstream_up{"))
            .count()
    };
    wait("two members", Duration::from_secs(30), || members(&t) == 2);
    dns.answer(&many);
    wait("64 members", Duration::from_secs(30), || members(&t) == 64);
    wait("the warning", Duration::from_secs(30), || {
        t.stderr().contains("left_out=236")
    });
    assert_eq!(
        t.stderr()
            .matches("more addresses than the fleet holds")
            .count(),
        1,
        "logged once, not at every lookup"
    );
    assert_eq!(members(&t), 64);
    // Back to the first two: the other 62 drain (nothing in flight) and leave.
    dns.answer(&many[..2]);
    wait("two members again", Duration::from_secs(30), || {
        members(&t) == 2
    });
    let (status, body) = readyz(&t);
    assert_eq!(status, 503, "nothing listens there: {body}");
}

/// A name whose lookups fail (the resolver never answers) gives no member:
/// `/readyz` and requests say the lookup failed and why, rather than that
/// the name resolves to nothing; the failure is logged once, not at every
/// lookup.
#[test]
fn a_name_whose_lookups_fail_is_reported_as_failing_not_empty() {
    // A resolver that takes every query and answers none; when each came.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let resolver = silent.local_addr().unwrap();
    let queries: Arc<Mutex<Vec<std::time::Instant>>> = Arc::default();
    let q = queries.clone();
    thread::spawn(move || {
        let mut buf = [0u8; 512];
        while silent.recv_from(&mut buf).is_ok() {
            q.lock().unwrap().push(std::time::Instant::now());
        }
    });
    let config = common::temp_config(
        "discovery-failing",
        &format!("[discovery]\nresolver = \"{resolver}\"\nmin_refresh_ms = 100\n"),
    );
    let t = Llamatap::start(
        &format!("dns+http://{NAME}:{}", common::free_port()),
        &["--config", config.to_str().unwrap()],
    );
    let (status, body) = readyz(&t);
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("is not resolved yet") || body.contains("its lookup failed"),
        "{body}"
    );
    let mut last = (0, String::new());
    wait("readyz naming the failure", Duration::from_secs(30), || {
        last = readyz(&t);
        last.1.contains("its lookup failed")
    });
    assert_eq!(last.0, 503, "{}", last.1);
    assert!(last.1.contains(NAME), "{}", last.1);
    let mut r = http::post(&t.addr(), "/v1/chat/completions", &chat(0)).unwrap();
    assert_eq!(r.head.status, 503);
    let answer = String::from_utf8_lossy(&r.read_all().unwrap()).into_owned();
    // The client hears a plain reason, without the internal name or the
    // resolver's error; /readyz (admin listener) has both.
    assert!(answer.contains("has no healthy upstream now"), "{answer}");
    assert!(
        !answer.contains(NAME) && !answer.contains("lookup"),
        "{answer}"
    );
    // Each lookup gives up after 2 s; queries spread over more than 4.5 s
    // are three lookups at least.
    wait("three lookups", Duration::from_secs(30), || {
        let q = queries.lock().unwrap();
        q.len() >= 2 && q[q.len() - 1] - q[0] > Duration::from_millis(4500)
    });
    assert_eq!(
        t.stderr().matches("upstream name lookup failed").count(),
        1,
        "logged once, not at every lookup"
    );
}

/// Five scripted llama-servers on one port at 127.0.0.2 to .6, each naming
/// itself in its answers; the port.
fn named_upstreams() -> (Vec<common::upstream::Scripted>, u16) {
    'ports: for _ in 0..10 {
        let port = common::free_port();
        let mut listeners = Vec::new();
        for last in 2..=6 {
            match std::net::TcpListener::bind((format!("127.0.0.{last}"), port)) {
                Ok(l) => listeners.push((last, l)),
                Err(_) => continue 'ports,
            }
        }
        let ups = listeners
            .into_iter()
            .map(|(last, l)| {
                common::upstream::Scripted::start_at(l, move |s, req| {
                    if req.path == "/v1/chat/completions" {
                        let body = format!(
                            r#"{{"object":"chat.completion","choices":[{{"index":0,"message":{{"role":"assistant","content":"served by 127.0.0.{last}"}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":8,"completion_tokens":1,"total_tokens":9}}}}"#
                        );
                        common::upstream::json(s, 200, &body);
                    } else {
                        common::upstream::json(s, 404, r#"{"error":"not here"}"#);
                    }
                })
            })
            .collect();
        return (ups, port);
    }
    panic!("no port free on 127.0.0.2 to .6");
}

/// Which member answered each of `bodies`, through `t`, two at a time (two
/// in flight never trip the load bound, `max(2, ...)` over the least loaded,
/// so the placement is the rendezvous draw's alone).
fn served_by(t: &Llamatap, bodies: &[String]) -> Vec<String> {
    let addr = t.addr();
    let mut out = vec![String::new(); bodies.len()];
    thread::scope(|scope| {
        for (part, chunk) in out.chunks_mut(bodies.len().div_ceil(2)).enumerate() {
            let addr = &addr;
            let start = part * bodies.len().div_ceil(2);
            scope.spawn(move || {
                for (k, slot) in chunk.iter_mut().enumerate() {
                    let mut r =
                        http::post(addr, "/v1/chat/completions", &bodies[start + k]).unwrap();
                    let body = String::from_utf8(r.read_all().unwrap()).unwrap();
                    assert_eq!(r.head.status, 200, "{body}");
                    let at = body
                        .find("served by ")
                        .expect("an answer naming its server")
                        + 10;
                    *slot = body[at..].split('"').next().unwrap().to_string();
                }
            });
        }
    });
    out
}

/// Two replicas following one name of five members place 2,000 new
/// conversations alike; when one member leaves, exactly its conversations
/// move, alike in both, and every other stays where it was.
#[test]
fn replicas_place_thousands_of_conversations_alike_and_a_departure_moves_only_its_own() {
    let (_ups, port) = named_upstreams();
    let hosts: Vec<String> = (2..=6).map(|last| format!("127.0.0.{last}")).collect();
    let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
    let dns = Dns::start("thousands");
    dns.answer(&hosts);
    let config = common::temp_config(
        "discovery-thousands",
        &format!(
            "[discovery]\nresolver = \"127.0.0.1:{}\"\nmin_refresh_ms = 100\nmax_refresh_ms = 1000\n",
            dns.port()
        ),
    );
    let start = || {
        Llamatap::start(
            &format!("dns+http://{NAME}:{port}"),
            &["--config", config.to_str().unwrap()],
        )
    };
    let (a, b) = (start(), start());
    for t in [&a, &b] {
        wait("five members ready", Duration::from_secs(30), || {
            hosts.iter().all(|h| up(t, &member(h, port)) == Some(1.0)) && readyz(t).0 == 200
        });
    }
    const N: usize = 2000;
    let first: Vec<String> = (0..N)
        .map(|c| format!(r#"{{"model":"tiny","messages":[{{"role":"user","content":"Conversation {c}: plan a trip."}}]}}"#))
        .collect();
    let on_a = served_by(&a, &first);
    let on_b = served_by(&b, &first);
    let agree = (0..N).filter(|c| on_a[*c] == on_b[*c]).count();
    let per: Vec<usize> = hosts
        .iter()
        .map(|h| on_a.iter().filter(|s| s == h).count())
        .collect();
    eprintln!(
        "discovery: {N} conversations over five members {per:?}; the two replicas agree on {agree}"
    );
    assert_eq!(agree, N, "two replicas place every new conversation alike");
    assert!(
        per.iter().all(|n| *n > N / 10),
        "every member takes a share: {per:?}"
    );
    // The busiest member leaves both replicas' answer.
    let gone = (0..hosts.len()).max_by_key(|i| per[*i]).unwrap();
    let kept: Vec<&str> = hosts
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != gone)
        .map(|(_, h)| *h)
        .collect();
    dns.answer(&kept);
    for t in [&a, &b] {
        wait("the member left", Duration::from_secs(30), || {
            up(t, &member(hosts[gone], port)).is_none()
        });
    }
    let next: Vec<String> = (0..N)
        .map(|c| format!(r#"{{"model":"tiny","messages":[{{"role":"user","content":"Conversation {c}: plan a trip."}},{{"role":"assistant","content":"Where to?"}},{{"role":"user","content":"Somewhere warm."}}]}}"#))
        .collect();
    let now_a = served_by(&a, &next);
    let now_b = served_by(&b, &next);
    let mut moved = 0;
    for c in 0..N {
        assert_eq!(
            now_a[c], now_b[c],
            "conversation {c}: the replicas disagree after the change"
        );
        if on_a[c] == hosts[gone] {
            moved += 1;
            assert_ne!(now_a[c], hosts[gone]);
        } else {
            assert_eq!(
                now_a[c], on_a[c],
                "conversation {c} moved off a member that stayed"
            );
        }
    }
    eprintln!(
        "discovery: after {} left, {moved} of {N} conversations moved ({} were on it), none other",
        hosts[gone], per[gone]
    );
    assert_eq!(moved, per[gone]);
}

/// One empty answer (NOERROR, no records, an SOA whose negative TTL is an
/// hour) drains nothing: the name is looked up again after
/// `min_refresh_ms`, and its members drain only if it stays empty. The DNS
/// server gives the empty answer exactly once (both questions of one
/// lookup), then the address again.
#[test]
fn one_empty_answer_drains_nothing_and_the_name_is_asked_again_soon() {
    let _serial = common::fleet::serial();
    let host = HOSTS[0];
    let server = LlamaServer::start_at("tiny", &["-np", "2"], host, common::free_port());
    let port = server.port;
    let dns = Dns(DnsServer::start("empty-once", &zone(&[host])));
    let config = common::temp_config(
        "discovery-empty-once",
        &format!(
            "[discovery]\nresolver = \"127.0.0.1:{}\"\nmin_refresh_ms = 300\nmax_refresh_ms = 8000\n",
            dns.port()
        ),
    );
    let t = Llamatap::start(
        &format!("dns+http://{NAME}:{port}"),
        &["--config", config.to_str().unwrap()],
    );
    let name = member(host, port);
    wait("the member up", Duration::from_secs(30), || {
        up(&t, &name) == Some(1.0)
    });
    wait("ready", Duration::from_secs(30), || readyz(&t).0 == 200);
    let traffic = Traffic::start(&t.addr(), 2);
    wait("traffic flows", Duration::from_secs(30), || {
        traffic.count() >= 5
    });
    let back = zone(&[host]);
    dns.0.set_zone(&serde_json::json!({
        "ttl": 3600,
        "names": {format!("{NAME}."): []},
        "then": back,
        "after": 2,
    }));
    wait("the empty answer given", Duration::from_secs(30), || {
        dns.0.zone_now() == back
    });
    // Traffic goes on well past the next lookup (300 ms later); on a
    // member drained by the empty answer it would get 503s for seconds.
    let at_switch = traffic.count();
    let started = std::time::Instant::now();
    wait(
        "traffic after the empty answer",
        Duration::from_secs(60),
        || traffic.count() >= at_switch + 20 && started.elapsed() >= Duration::from_millis(1500),
    );
    let results = traffic.finish();
    assert_all_ok(&results, "around one empty answer");
    let log = t.stderr();
    assert_eq!(
        log.matches("answered with no address").count(),
        1,
        "the empty answer is logged once: {log}"
    );
    assert!(!log.contains("upstream draining"), "{log}");
    assert_eq!(readyz(&t).0, 200);
}

/// Without `[discovery] resolver`, a name is looked up with the system's
/// configuration, `/etc/hosts` first: `localhost` (in every machine's hosts
/// file) gives its member without a DNS server, and no lookup fails.
/// (Nothing listens there: membership is what is tested.)
#[test]
fn a_name_in_etc_hosts_is_followed_without_a_configured_resolver() {
    let port = common::free_port();
    let t = Llamatap::start(&format!("dns+http://localhost:{port}"), &[]);
    wait("the member of localhost", Duration::from_secs(30), || {
        up(&t, &member("127.0.0.1", port)).is_some()
    });
    let log = t.stderr();
    assert!(!log.contains("upstream name lookup failed"), "{log}");
}
