//! The admission queue against real llama-servers (`-np 2 -t 1`, the tiny
//! model): deadlines, hang-ups while queued, a killed upstream, replicas
//! sharing slots, and a batch flood with interactive probes measured through
//! llama-server alone, llamatap with the queue off, and llamatap with the
//! queue on. Every figure is printed (`--nocapture` shows them).
//!
//! A test that needs a slot taken holds it with a [`Hold`]: a stream the
//! test itself ends, on a llama-server whose context lets it run for
//! minutes (`HOLD_NP2`), so no outcome depends on how fast the model
//! writes; a hold that ended early fails the test that relied on it. Figures that are noisy on a shared 2-core machine are printed;
//! only gaps that are large by design are asserted.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::fleet::{percentile, serial, series, wait_for};
use common::http;
use common::llama::LlamaServer;
use common::load::*;
use common::proxy::{rss_kib, Llamatap};
use common::temp_config;
use serde_json::Value;

fn config(name: &str, toml: &str) -> String {
    temp_config(name, toml).to_str().unwrap().to_string()
}

/// A streamed answer that takes a slot until the test releases it (the
/// client hangs up, llama-server cancels): the slot is held by
/// construction, not by a race against the model's speed, and
/// [`Hold::release`] checks it was held to the end.
struct Hold {
    status: u16,
    stop: Arc<AtomicBool>,
    events: Arc<AtomicU64>,
    /// Whether the stream ended before the test let it go.
    reader: Option<std::thread::JoinHandle<bool>>,
}

impl Hold {
    /// Starts a [`HOLD_TOKENS`] answer through `addr` with `headers`, and
    /// waits until its first token streams (its prompt is then counted in
    /// llama-server's `prompt_tokens_total`).
    fn start(addr: &str, headers: &[(&str, &str)], llama: &LlamaServer) -> Hold {
        let b = body("Hold the slot with an endless story.", HOLD_TOKENS);
        let mut r =
            http::send(addr, "POST", "/v1/chat/completions", headers, b.as_bytes()).unwrap();
        let status = r.head.status;
        let stop = Arc::new(AtomicBool::new(false));
        let events = Arc::new(AtomicU64::new(0));
        let (s, e) = (stop.clone(), events.clone());
        let reader = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match r.next_piece() {
                    Ok(Some(p)) => {
                        e.fetch_add(content_events(&p), Ordering::Relaxed);
                    }
                    _ => return true,
                }
            }
            false
        });
        assert_eq!(status, 200, "the held answer was refused");
        assert!(
            wait_for(Duration::from_secs(30), || {
                events.load(Ordering::Relaxed) > 0
                    && llama.metric("llamacpp:requests_processing") >= 1.0
            })
            .is_some(),
            "the held answer never started"
        );
        Hold {
            status,
            stop,
            events,
            reader: Some(reader),
        }
    }

    /// Hangs up; the content events it had received. Fails if the stream
    /// had ended before (the slot was not held all along).
    fn release(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let ended = self.reader.take().is_some_and(|r| r.join().unwrap());
        let events = self.events.load(Ordering::Relaxed);
        assert!(
            !ended,
            "the held answer ended by itself after {events} tokens"
        );
        events
    }
}

#[test]
fn requests_queued_past_their_deadline_get_503_with_retry_after_and_never_reach_llama_server() {
    let _serial = serial();
    let llama = LlamaServer::start("tiny", &HOLD_NP2);
    let cfg = config(
        "deadline",
        "[queue]\nenabled = true\nmax_inflight = 1\n[queue.classes.default]\nmax_wait_ms = 400\n",
    );
    let proxy = Llamatap::start(&llama.base_url, &["--config", &cfg]);
    let p = proxy.addr();
    let long = Hold::start(&p, &[], &llama);
    let prompts_before = llama.metric("llamacpp:prompt_tokens_total");
    let refused: Vec<Answer> = (0..6)
        .map(|i| {
            let p = p.clone();
            std::thread::spawn(move || chat(&p, &[], &format!("Queued request {i}."), 8))
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    let prompts_after = llama.metric("llamacpp:prompt_tokens_total");
    eprintln!("deadline 400 ms: refusals answered after (ms):");
    for a in &refused {
        eprintln!(
            "  status {} retry-after {:?} after {:.1} ms",
            a.status,
            a.retry_after,
            a.elapsed.as_secs_f64() * 1e3
        );
        assert_eq!(a.status, 503, "{}", a.body);
        assert!(a.retry_after.is_some(), "no retry-after");
        assert!(a.body.contains("queue_timeout"), "{}", a.body);
        assert!(
            a.elapsed >= Duration::from_millis(400) && a.elapsed < Duration::from_millis(650),
            "answered {:?} after arrival, want within 250 ms of the 400 ms deadline",
            a.elapsed
        );
    }
    assert_eq!(
        prompts_before, prompts_after,
        "llama-server processed a prompt of a refused request"
    );
    // The refusal is counted in the logging hook, after its response went
    // out: a client can read its 503 before the sixth count is written.
    let timed_out = |m: &str| {
        series(
            m,
            "llamatap_queue_refused_total",
            "reason=\"queue_timeout\"",
        ) == Some(6.0)
    };
    let m = proxy.wait_metrics(Duration::from_secs(10), timed_out);
    assert_eq!(
        series(
            &m,
            "llamatap_queue_refused_total",
            "reason=\"queue_timeout\""
        ),
        Some(6.0),
        "{m}"
    );
    assert_eq!(long.status, 200);
    long.release();
}

#[test]
fn two_hundred_clients_that_hang_up_while_queued_leave_the_queue_and_reach_no_upstream() {
    let _serial = serial();
    let llama = LlamaServer::start("tiny", &HOLD_NP2);
    let cfg = config("hangup", "[queue]\nenabled = true\nmax_inflight = 1\n");
    // jemalloc returns freed pages at once (its default keeps them for about
    // ten seconds), so RSS after a round is the memory still in use, not the
    // round's peak: without this, a busier round's peak stayed in RSS and
    // read as growth.
    let proxy = Llamatap::start_env(
        &llama.base_url,
        &["--config", &cfg],
        &[("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0")],
    );
    let p = proxy.addr();
    let admin = format!("127.0.0.1:{}", proxy.admin_port);
    let pid = proxy.child.id();
    let long = Hold::start(&p, &[], &llama);
    let start_rss = rss_kib(pid);
    let prompts_before = llama.metric("llamacpp:prompt_tokens_total");
    let b = body("A request whose client will hang up.", 8);
    let depth = |m: &str| series(m, "llamatap_queue_depth", "class=\"default\"").unwrap_or(-1.0);
    // Eight rounds: the first ones grow the allocator's and the runtime's
    // pools to their working size; a leak raises every round.
    let mut after_round = Vec::new();
    for round in 1..=8 {
        let mut clients: Vec<TcpStream> = (0..200)
            .map(|_| http::send_only(&p, "POST", "/v1/chat/completions", b.as_bytes()).unwrap())
            .collect();
        let queued = wait_for(Duration::from_secs(20), || depth(&metrics(&admin)) == 200.0);
        assert!(queued.is_some(), "200 never queued: {}", metrics(&admin));
        let held = rss_kib(pid);
        let gone = Instant::now();
        clients.clear();
        let left = wait_for(Duration::from_secs(10), || depth(&metrics(&admin)) == 0.0);
        assert!(left.is_some(), "the queue kept them: {}", metrics(&admin));
        let emptied = gone.elapsed();
        let counted = wait_for(Duration::from_secs(10), || {
            series(
                &metrics(&admin),
                "llamatap_cancellations_total",
                "phase=\"queued\"",
            ) == Some(200.0 * f64::from(round))
        });
        assert!(counted.is_some(), "{}", metrics(&admin));
        let after = rss_kib(pid);
        eprintln!(
            "round {round}: 200 hang-ups while queued; queue empty {:.0} ms after the closes; RSS before {start_rss} KiB, with 200 queued {held} KiB, after {after} KiB",
            ms(emptied)
        );
        after_round.push(after);
    }
    let prompts_after = llama.metric("llamacpp:prompt_tokens_total");
    assert_eq!(
        prompts_before, prompts_after,
        "an upstream saw a hung-up request"
    );
    // The lowest of rounds 6 to 8 against round 2: a leak of 5 KiB per
    // hang-up would raise each of them by 4 MiB at least. Measured without a
    // leak: rounds stay within 0.5 MiB of each other.
    let later = after_round[5..].iter().min().copied().unwrap_or(u64::MAX);
    assert!(
        later <= after_round[1] + 1024,
        "memory grew round after round: {after_round:?} KiB"
    );
    long.release();
}

#[test]
fn a_tenant_over_its_share_of_a_full_queue_gets_429_and_another_tenant_displaces_its_newest() {
    let _serial = serial();
    let llama = LlamaServer::start("tiny", &HOLD_NP2);
    let cfg = config(
        "share",
        &format!(
            "{}[queue]\nenabled = true\nmax_inflight = 1\n[queue.classes.batch]\nmax_depth = 4\n",
            keys()
        ),
    );
    let proxy = Llamatap::start(&llama.base_url, &["--config", &cfg]);
    let p = proxy.addr();
    let admin = format!("127.0.0.1:{}", proxy.admin_port);
    let send = |headers: &'static [(&'static str, &'static str)], i: usize, tokens: u32| {
        let p = p.clone();
        std::thread::spawn(move || chat(&p, headers, &format!("Share request {i}."), tokens))
    };
    // The slot: one held answer of `bulk`.
    let long = Hold::start(&p, BULK_H, &llama);
    let depth = |m: &str| series(m, "llamatap_queue_depth", "class=\"batch\"").unwrap_or(0.0);
    // The queue fills: three of `bulk`, one of `other`.
    let mut queued: Vec<_> = (1..4).map(|i| send(BULK_H, i, 8)).collect();
    assert!(wait_for(Duration::from_secs(20), || depth(&metrics(&admin)) >= 3.0).is_some());
    queued.push(send(OTHER_H, 4, 8));
    assert!(wait_for(Duration::from_secs(20), || depth(&metrics(&admin)) >= 4.0).is_some());
    let prompts_before = llama.metric("llamacpp:prompt_tokens_total");
    // Full: `bulk` holds 3 of 4 (its share: 2), its own cause, so its next
    // one is refused; `other` holds 1 of its 2, so its next one gets in and
    // the newest of `bulk`'s is displaced (503 `queue_full`).
    let own = chat(&p, BULK_H, "One more of bulk.", 8);
    assert_eq!(own.status, 429, "{}", own.body);
    assert!(own.body.contains("\"tenant_queue_full\""), "{}", own.body);
    assert!(own.body.contains("\"rate_limit_error\""), "{}", own.body);
    assert_eq!(own.retry_after.as_deref(), Some("1"));
    let refused = |reason: &str| {
        series(
            &metrics(&admin),
            "llamatap_queue_refused_total",
            &format!("reason=\"{reason}\""),
        )
    };
    let theirs = send(OTHER_H, 5, 8);
    assert!(
        wait_for(Duration::from_secs(20), || refused("queue_full")
            == Some(1.0))
        .is_some(),
        "no request of bulk was displaced: {}",
        metrics(&admin)
    );
    assert_eq!(depth(&metrics(&admin)), 4.0, "the class stays full");
    // Counted when its record is written, after the 429 went out.
    let counted = wait_for(Duration::from_secs(10), || {
        refused("tenant_queue_full") == Some(1.0)
    });
    assert!(counted.is_some(), "{}", metrics(&admin));
    assert_eq!(
        llama.metric("llamacpp:prompt_tokens_total"),
        prompts_before,
        "a refused request reached llama-server"
    );
    // Nothing queued is lost but the displaced one, refused at once with
    // the OpenAI shape: every other is answered once the slot frees.
    assert_eq!(long.status, 200);
    long.release();
    let answers: Vec<Answer> = queued.into_iter().map(|q| q.join().unwrap()).collect();
    let theirs = theirs.join().unwrap();
    eprintln!(
        "full batch queue (max_depth 4: bulk 3, other 1): bulk's next gets {} {:?}; other's next gets {}; queued answers {:?}",
        own.status,
        own.retry_after,
        theirs.status,
        answers.iter().map(|a| a.status).collect::<Vec<_>>()
    );
    assert_eq!((theirs.status, theirs.tokens), (200, 8), "{}", theirs.body);
    let displaced: Vec<&Answer> = answers.iter().filter(|a| a.status != 200).collect();
    assert_eq!(displaced.len(), 1, "{answers:?}");
    assert_eq!(displaced[0].status, 503, "{}", displaced[0].body);
    assert!(
        displaced[0].body.contains("\"queue_full\""),
        "{}",
        displaced[0].body
    );
    assert_eq!(displaced[0].retry_after.as_deref(), Some("1"));
    // It was one of bulk's: `other`'s first (the last of `queued`) is served.
    assert_eq!(answers[3].status, 200, "{}", answers[3].body);
    for a in answers.iter().filter(|a| a.status == 200) {
        assert_eq!(a.tokens, 8, "{}", a.body);
    }
}

/// With `/slots` disabled (`--no-slots`), the capacity comes from `/props`.
#[test]
fn the_capacity_comes_from_props_when_slots_are_disabled() {
    let _serial = serial();
    let llama = LlamaServer::start("tiny", &["-np", "3", "--no-slots"]);
    let (status, _) = llama
        .request("GET", "/slots", None, Duration::from_secs(10))
        .unwrap();
    assert_ne!(
        status, 200,
        "this llama-server serves /slots despite --no-slots"
    );
    let cfg = config("props", "[queue]\nenabled = true\n");
    let proxy = Llamatap::start(&llama.base_url, &["--config", &cfg]);
    let p = proxy.addr();
    let admin = format!("127.0.0.1:{}", proxy.admin_port);
    assert!(
        wait_for(Duration::from_secs(20), || {
            chat(&p, &[], "Warm up.", 1);
            series(&metrics(&admin), "llamatap_queue_slots", "upstream=") == Some(3.0)
        })
        .is_some(),
        "capacity not read from /props: {}",
        metrics(&admin)
    );
}

#[test]
fn a_killed_upstream_leaves_the_pool_and_its_queued_requests_go_to_the_other() {
    let _serial = serial();
    let mut a = LlamaServer::start("tiny", &NP2);
    let b = LlamaServer::start("tiny", &NP2);
    let cfg = config("killed", "[queue]\nenabled = true\nmax_inflight = 1\n");
    let proxy = Llamatap::start_fleet(&[&a.base_url, &b.base_url], &["--config", &cfg]);
    let p = proxy.addr();
    let admin = format!("127.0.0.1:{}", proxy.admin_port);
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let p = p.clone();
            std::thread::spawn(move || chat(&p, &[], &format!("Request {i} of eight."), 400))
        })
        .collect();
    let depth = |m: &str| series(m, "llamatap_queue_depth", "class=\"default\"").unwrap_or(0.0);
    assert!(wait_for(Duration::from_secs(20), || depth(&metrics(&admin)) >= 5.0).is_some());
    a.kill();
    let answers: Vec<Answer> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let ok = answers
        .iter()
        .filter(|x| x.status == 200 && x.tokens == 400)
        .count();
    eprintln!(
        "killed upstream: {ok} of 8 answered whole; others: {:?}",
        answers
            .iter()
            .filter(|x| !(x.status == 200 && x.tokens == 400))
            .map(|x| (x.status, x.tokens))
            .collect::<Vec<_>>()
    );
    // The one request in flight on the killed upstream may fail (it reached
    // it); every queued one is answered by the other.
    assert!(ok >= 7, "{answers:?}");
    assert!(
        answers.iter().all(|x| x.status != 0),
        "a request got no answer"
    );
}

#[test]
fn two_replicas_with_a_share_each_never_overfill_one_llama_server() {
    let _serial = serial();
    let llama = LlamaServer::start("tiny", &NP2);
    let run = |cfg: &str| {
        let one = Llamatap::start(&llama.base_url, &["--config", cfg]);
        let two = Llamatap::start(&llama.base_url, &["--config", cfg]);
        let addrs = [one.addr(), two.addr()];
        let most = max_deferred_during(&llama, || {
            let hs: Vec<_> = (0..8)
                .map(|i| {
                    let a = addrs[i % 2].clone();
                    std::thread::spawn(move || chat(&a, &[], &format!("Replica load {i}."), 200))
                })
                .collect();
            for h in hs {
                assert_eq!(h.join().unwrap().status, 200);
            }
        });
        most
    };
    // Each replica learns the upstream's 2 slots from /slots: together they
    // send 4, and llama-server queues 2 of them itself.
    let learned = run(&config("replicas-learned", "[queue]\nenabled = true\n"));
    // A share each (2 slots / 2 replicas): llama-server never queues.
    let shared = run(&config(
        "replicas-share",
        "[queue]\nenabled = true\nmax_inflight = 1\n",
    ));
    eprintln!(
        "two replicas, 8 requests: llama-server's requests_deferred peaked at {learned} with each replica using every slot, {shared} with max_inflight = 1 each"
    );
    assert_eq!(shared, 0.0);
}

// === the flood ===

#[test]
fn a_batch_flood_with_interactive_probes_side_by_side() {
    let _serial = serial();
    let llama = LlamaServer::start("tiny", &NP2);
    let k = keys();
    let off = config("flood-off", &k);
    let on = config("flood-on", &format!("[queue]\nenabled = true\n{k}"));
    let reserve = config(
        "flood-reserve",
        &format!("[queue]\nenabled = true\n[queue.classes.batch]\nreserve = 1\n{k}"),
    );
    let probes = 16;
    let flooders = 4; // twice the 2 slots
    let mut rows: Vec<(String, Vec<Duration>, Flood)> = Vec::new();
    let direct = llama.addr();
    let idle = idle_ttft(&direct, NONE, probes);
    rows.push((
        "llama-server alone".into(),
        idle.clone(),
        flood(&direct, NONE, NONE, flooders, WINDOW),
    ));
    for (name, cfg) in [
        ("llamatap, queue off", &off),
        ("llamatap, queue on (priority)", &on),
        ("llamatap, queue on, batch reserve 1", &reserve),
    ] {
        let proxy = Llamatap::start(&llama.base_url, &["--config", cfg]);
        let a = proxy.addr();
        // Wait for the watcher's first /slots read (queue on).
        let admin = format!("127.0.0.1:{}", proxy.admin_port);
        if !name.contains("off") {
            // The queue reads the capacity as requests pass.
            assert!(wait_for(Duration::from_secs(10), || {
                chat(&a, VOICE_H, "Warm up.", 1);
                series(&metrics(&admin), "llamatap_queue_slots", "upstream=") == Some(2.0)
            })
            .is_some());
        }
        let idle = idle_ttft(&a, VOICE_H, probes);
        let f = flood(&a, BULK_H, VOICE_H, flooders, WINDOW);
        rows.push((name.into(), idle, f));
    }
    let figures = print_rows(
        &format!("batch flood ({flooders} clients x 160 tokens, 2 slots) for {WINDOW:?}, interactive probes (4 tokens) every 300 ms; {probes} probes on the idle path first; tiny model, -np 2 -t 1"),
        &rows,
    );
    let (off95, _, off_tps, _) = figures[1];
    let (on95, _, on_tps, _) = figures[2];
    let (res95, _, _, _) = figures[3];
    eprintln!(
        "issue's targets, queue on with the reserve: {}; priority alone: {:.0}%",
        targets(figures[3], figures[1]),
        100.0 * on_tps / off_tps,
    );
    assert!(figures.iter().all(|f| f.3 == 0), "errors in a run");
    // Asserted, the gaps that are large by design: with the reserve an
    // interactive turn never waits for a batch answer to end (one takes well
    // over 100 ms here), so it beats priority alone (which waits for the
    // next slot to free); and the reserve, which leaves batch 1 of the 2
    // slots, does not starve it: batch answers keep completing through the
    // window. How much of the queue-off throughput batch keeps on its one
    // slot is printed, not asserted: it depends on how the 2 cores are
    // shared between llama-server, llamatap and the clients, and it moved
    // between 22% and 134% over runs on a quiet machine (docs/saturation.md).
    // Priority alone against the first-come order is printed, not asserted:
    // without a reserved slot both wait for a batch answer to end, and the
    // difference (who is ahead in llama-server's own queue) is within this
    // machine's noise when the other core is busy. The 1.5x and 90%
    // targets are printed above and not asserted either: on -np 2 they are
    // not met every run (docs/saturation.md has the measured figures and
    // why).
    eprintln!(
        "priority alone against the queue off: interactive p95 {on95:.1} ms against {off95:.1} ms ({:.2}x)",
        on95 / off95
    );
    assert!(
        res95 < on95,
        "the reserve did not shorten the interactive p95"
    );
    assert!(
        res95 < 100.0,
        "an interactive turn waited for a batch answer"
    );
    // Two whole 160-token answers at the least: batch is served, not parked.
    let res_batch = rows[3].2.batch_tokens;
    assert!(
        res_batch >= 2 * 160,
        "batch starved under the reserve: {res_batch} tokens in the window"
    );
}

/// The same flood on a fleet of two llama-servers (4 slots): the reserve
/// keeps back one slot of four, not one of two.
#[test]
fn a_batch_flood_on_a_fleet_of_two_with_the_reserve() {
    let _serial = serial();
    let servers = [
        LlamaServer::start("tiny", &NP2),
        LlamaServer::start("tiny", &NP2),
    ];
    let urls: Vec<&str> = servers.iter().map(|s| s.base_url.as_str()).collect();
    let k = keys();
    let off = config("fleet-flood-off", &k);
    let reserve = config(
        "fleet-flood-reserve",
        &format!("[queue]\nenabled = true\n[queue.classes.batch]\nreserve = 1\n{k}"),
    );
    let preempt = config(
        "fleet-flood-preempt",
        &format!("[queue]\nenabled = true\n[queue.classes.batch]\npreemptible = true\n{k}"),
    );
    let probes = 16;
    let flooders = 8; // twice the 4 slots
    let mut rows = Vec::new();
    let mut paused = None;
    for (name, cfg) in [
        ("llamatap, queue off", &off),
        ("llamatap, queue on, batch reserve 1", &reserve),
        ("llamatap, queue on, batch preemptible", &preempt),
    ] {
        let proxy = Llamatap::start_fleet(&urls, &["--config", cfg]);
        let a = proxy.addr();
        let admin = format!("127.0.0.1:{}", proxy.admin_port);
        if !name.contains("off") {
            assert!(wait_for(Duration::from_secs(10), || {
                chat(&a, VOICE_H, "Warm up.", 1);
                let m = metrics(&admin);
                urls.iter().all(|u| {
                    let needle = format!("upstream=\"{}\"", u.trim_start_matches("http://"));
                    series(&m, "llamatap_queue_slots", &needle) == Some(2.0)
                })
            })
            .is_some());
        }
        let idle = idle_ttft(&a, VOICE_H, probes);
        let f = flood(&a, BULK_H, VOICE_H, flooders, WINDOW);
        if name.contains("preemptible") {
            // Every answer recorded: no slot in use, and each pause counted
            // with its continuation (one record holds both).
            let (m, preempted, continued) = paused_and_continued(&proxy, |m| {
                series(m, "llamatap_queue_slots_in_use", "upstream=") == Some(0.0)
            });
            paused = Some((
                preempted,
                continued,
                m.lines()
                    .filter(|l| l.starts_with("llamatap_continuations_total") && !l.ends_with(" 0"))
                    .collect::<Vec<_>>()
                    .join("; "),
            ));
        }
        rows.push((name, idle, f));
    }
    let figures = print_rows(
        &format!("batch flood on a fleet of two ({flooders} clients x 160 tokens, 4 slots) for {WINDOW:?}, interactive probes every 300 ms; tiny model, -np 2 -t 1 each"),
        &rows,
    );
    let (off95, _, _, _) = figures[0];
    let (res95, _, _, _) = figures[1];
    let (pre95, _, pre_tps, _) = figures[2];
    let (preemptions, continued, all) = paused.unwrap();
    eprintln!(
        "issue's targets on the fleet, queue on with the reserve: {}\n\
         issue's targets on the fleet, batch preemptible: {}; {preemptions} batch answers paused, {continued} continued ({all})",
        targets(figures[1], figures[0]),
        targets(figures[2], figures[0]),
    );
    // Pre-emption: interactive turns took running batch answers' slots,
    // and every paused answer was continued whole (no error event, no
    // repeat, its 160 tokens: `errors` counts any that was not).
    assert!(preemptions >= 1.0, "no batch answer was paused: {all}");
    assert_eq!(
        preemptions, continued,
        "a paused answer was not continued: {all}"
    );
    assert!(
        pre95 < off95,
        "pre-emption did not shorten the interactive p95"
    );
    assert!(pre_tps > 0.0, "batch starved under pre-emption");
    assert!(figures.iter().all(|f| f.3 == 0), "errors in a run");
    assert!(
        res95 < off95,
        "the reserve did not shorten the interactive p95"
    );
    assert!(
        res95 < 100.0,
        "an interactive turn waited for a batch answer"
    );
    // One slot of four kept back: three quarters of the concurrency. The
    // share of the queue-off throughput batch keeps is printed (90% to 119%
    // on a quiet machine), not asserted, for the reason given in the test
    // above; that batch is served at all is.
    let res_batch = rows[1].2.batch_tokens;
    assert!(
        res_batch >= 2 * 160,
        "batch starved under the reserve: {res_batch} tokens in the window"
    );
}

#[test]
fn a_flooding_tenant_does_not_starve_another_in_its_class() {
    let _serial = serial();
    let llama = LlamaServer::start("tiny", &NP2);
    let k = keys();
    let mut rows = Vec::new();
    for (name, toml) in [
        ("queue off", k.clone()),
        ("queue on", format!("[queue]\nenabled = true\n{k}")),
        (
            "queue on, tenant reserve 1",
            format!("[queue]\nenabled = true\n[queue.classes.batch]\ntenant_reserve = 1\n{k}"),
        ),
    ] {
        let cfg = config(&format!("fair-{}", name.replace(' ', "-")), &toml);
        let proxy = Llamatap::start(&llama.base_url, &["--config", &cfg]);
        let a = proxy.addr();
        let alone = idle_ttft(&a, OTHER_H, 10);
        // The flooding tenant sends 6 at once, three times the slots.
        let f = flood(&a, BULK_H, OTHER_H, 6, Duration::from_secs(4));
        rows.push((name, alone, f));
    }
    eprintln!(
        "\ntwo batch tenants, one flooding (6 clients x 160 tokens, 2 slots)\n\
         | path | other tenant alone p95 ms | under the flood p50 / p95 ms | p95 ratio |\n| --- | --- | --- | --- |"
    );
    let mut p95s = Vec::new();
    for (name, alone, f) in &rows {
        let a95 = ms(percentile(alone, 95.0));
        let (f50, f95) = (
            ms(percentile(&f.probe_ttft, 50.0)),
            ms(percentile(&f.probe_ttft, 95.0)),
        );
        eprintln!(
            "| {name} | {a95:.1} | {f50:.1} / {f95:.1} | {:.2}x | {} probes, {} errors |",
            f95 / a95,
            f.probe_ttft.len(),
            f.errors
        );
        p95s.push(f95);
    }
    assert!(
        p95s[1] < p95s[0],
        "turns between tenants did not help the other tenant"
    );
    // The tenant reserve keeps a slot for the tenant with none running: the
    // other's turn never waits for one of the flood's answers (160 tokens,
    // well over 100 ms here). Its ratio to the p95 alone is printed above,
    // not asserted: both are a few milliseconds, at this machine's noise
    // floor (0.9x to 3.3x over runs).
    let (_, alone, reserved) = &rows[2];
    let ratio = p95s[2] / ms(percentile(alone, 95.0));
    assert!(
        p95s[2] < p95s[1] && p95s[2] < 100.0,
        "the tenant reserve did not keep the other tenant's turn fast: p95 {:.1} ms ({ratio:.2}x alone), {} probes",
        p95s[2],
        reserved.probe_ttft.len()
    );
}

#[test]
fn a_queued_request_and_a_refusal_are_on_spans_and_in_the_access_log() {
    let _serial = serial();
    let llama = LlamaServer::start("tiny", &HOLD_NP2);
    let (otlp_url, received) = common::otlp::http_receiver();
    let access = std::env::temp_dir().join(format!("llamatap-sat-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&access);
    let cfg = config(
        "spans",
        &format!(
            "[queue]\nenabled = true\nmax_inflight = 1\n[queue.classes.batch]\nmax_wait_ms = 300\n{}",
            keys()
        ),
    );
    let proxy = Llamatap::start(
        &llama.base_url,
        &[
            "--config",
            &cfg,
            "--otlp-endpoint",
            &otlp_url,
            "--otlp-protocol",
            "http",
            "--access-log",
            access.to_str().unwrap(),
        ],
    );
    let p = proxy.addr();
    let admin = format!("127.0.0.1:{}", proxy.admin_port);
    // Answers the predictor learns the member from, so that the refusal
    // below carries a prediction.
    for i in 0..3 {
        let warm = chat(&p, BULK_H, &format!("Warm-up answer {i}."), 4);
        assert_eq!(warm.status, 200, "{}", warm.body);
    }
    let long = Hold::start(&p, BULK_H, &llama);
    let a = p.clone();
    let voice = std::thread::spawn(move || chat(&a, VOICE_H, "Quick?", 4));
    let depth = |class: &str| {
        series(
            &metrics(&admin),
            "llamatap_queue_depth",
            &format!("class=\"{class}\""),
        )
    };
    assert!(
        wait_for(Duration::from_secs(20), || depth("interactive")
            == Some(1.0))
        .is_some(),
        "the interactive turn never queued"
    );
    // A batch request behind it waits 300 ms and is refused: the slot is
    // held until the test lets it go.
    let b = body("Another batch job.", 8);
    let mut r = http::send(&p, "POST", "/v1/chat/completions", BULK_H, b.as_bytes()).unwrap();
    assert_eq!(r.head.status, 503);
    assert!(r.head.header("retry-after").is_some());
    assert!(r.head.header("traceresponse").is_some(), "no traceresponse");
    // The fastest member's prediction behind the queue: the held answer's
    // slot and the queued turn ahead of it.
    let predicted: u64 = r
        .head
        .header("x-llamatap-predicted-ttft-ms")
        .expect("a refusal of the queue carries the prediction")
        .parse()
        .unwrap();
    assert!(predicted >= 1);
    let refusal = String::from_utf8_lossy(&r.read_all().unwrap()).into_owned();
    let v: Value = serde_json::from_str(&refusal).unwrap();
    assert_eq!(v["error"]["code"], "queue_timeout", "{refusal}");
    assert_eq!(long.status, 200);
    long.release();
    let voice = voice.join().unwrap();
    assert_eq!(voice.status, 200);
    let spans = received.wait(3, Duration::from_secs(30));
    let server: Vec<_> = spans
        .iter()
        .filter(|s| common::otlp::attr_str(s, "llamatap.priority").is_some())
        .collect();
    let of = |class: &str| {
        server
            .iter()
            .filter(|s| common::otlp::attr_str(s, "llamatap.priority").as_deref() == Some(class))
            .collect::<Vec<_>>()
    };
    let queued = of("interactive");
    assert_eq!(queued.len(), 1, "{server:?}");
    assert!(queued[0].events.iter().any(|e| e.name == "llamatap.queued"));
    let refused = of("batch")
        .into_iter()
        .find(|s| common::otlp::attr_str(s, "error.type").as_deref() == Some("queue_timeout"));
    assert!(refused.is_some(), "no refused span: {server:?}");
    assert!(wait_for(Duration::from_secs(10), || {
        std::fs::read_to_string(&access)
            .unwrap_or_default()
            .lines()
            .count()
            >= 6
    })
    .is_some());
    let lines: Vec<Value> = std::fs::read_to_string(&access)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let voice_line = lines
        .iter()
        .find(|l| l["priority"] == "interactive")
        .unwrap();
    let waited = voice_line["queued_ms"].as_f64().unwrap();
    eprintln!(
        "queued interactive turn: queued_ms {waited:.1}, ttft_ms {}; refusal line: {}",
        voice_line["ttft_ms"],
        lines
            .iter()
            .find(|l| l["status"] == 503)
            .map(|l| l.to_string())
            .unwrap_or_default()
    );
    assert!(
        waited > 50.0,
        "the interactive turn did not wait: {voice_line}"
    );
    assert!(
        voice_line["ttft_ms"].as_f64().unwrap() >= waited,
        "TTFT includes the wait"
    );
    let refused_line = lines.iter().find(|l| l["status"] == 503).unwrap();
    assert_eq!(refused_line["outcome"], "rejected");
    assert_eq!(refused_line["error_type"], "queue_timeout");
    assert_eq!(refused_line["priority"], "batch");
    assert!(refused_line["upstream"].is_null(), "{refused_line}");
    assert_eq!(
        refused_line["predicted_ttft_ms"], predicted,
        "{refused_line}"
    );
}
