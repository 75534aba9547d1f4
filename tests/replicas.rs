//! llamatap replicas that share the upstreams' slots through a real
//! `redis-server` (`queue.shared`), in front of two real llama-servers with
//! two slots each: a flood through one replica while another takes
//! interactive probes, a quiet replica leaving every slot to a busy one,
//! a replica killed while it holds leases, and Redis killed mid-flood.
//! Every figure is printed (`--nocapture` shows them); what the design
//! guarantees is asserted, what depends on how two cores are shared is
//! printed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::fleet::{percentile, serial, series, wait_for};
use common::http;
use common::llama::LlamaServer;
use common::load::*;
use common::proxy::{metric_value, Llamatap};
use common::redis::Redis;
use common::temp_config;
use llamatap::admission::shared::store::{lease_key, Models, SlotStore};

/// The lease life in these tests: short, so that a dead replica's leases
/// expire within the test's patience.
const LEASE_MS: u64 = 1500;

fn config(name: &str, redis: &Redis, queue: &str) -> String {
    let toml = format!(
        "[auth.store]\nurl = \"{}\"\ntimeout_ms = 200\n\
         [queue]\nenabled = true\nshared = true\nlease_ms = {LEASE_MS}\n{queue}\n{}",
        redis.url(),
        keys()
    );
    temp_config(name, &toml).to_str().unwrap().to_string()
}

fn servers() -> [LlamaServer; 2] {
    [
        LlamaServer::start("tiny", &NP2),
        LlamaServer::start("tiny", &NP2),
    ]
}

fn urls(servers: &[LlamaServer; 2]) -> Vec<&str> {
    servers.iter().map(|s| s.base_url.as_str()).collect()
}

/// Waits until every replica sees `n` replicas and shared slots, and has
/// read both upstreams' two slots (a warm-up request each).
fn wait_shared(replicas: &[&Llamatap], n: usize, servers: &[LlamaServer; 2]) {
    for r in replicas {
        let a = r.addr();
        let ok = wait_for(Duration::from_secs(30), || {
            chat(&a, VOICE_H, "Warm up.", 1);
            let m = r.metrics();
            m.contains(&format!("llamatap_queue_replicas {n}\n"))
                && m.contains("llamatap_queue_shared 1\n")
                && servers.iter().all(|s| {
                    let needle = format!("upstream=\"{}\"", s.addr());
                    series(&m, "llamatap_queue_slots", &needle).is_some_and(|v| v >= 0.0)
                })
        });
        assert!(
            ok.is_some(),
            "a replica never saw {n} replicas sharing slots:\n{}",
            r.metrics()
        );
    }
}

/// Two replicas of `cfg` in front of `servers`, once both see each other
/// and share slots.
fn start_pair(cfg: &str, servers: &[LlamaServer; 2]) -> (Llamatap, Llamatap) {
    let urls = urls(servers);
    let one = Llamatap::start_fleet(&urls, &["--config", cfg]);
    let two = Llamatap::start_fleet(&urls, &["--config", cfg]);
    wait_shared(&[&one, &two], 2, servers);
    (one, two)
}

fn readyz(r: &Llamatap) -> String {
    http::get(&r.admin(), "/readyz")
        .map(|(_, b)| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

#[test]
fn a_flood_through_one_replica_leaves_the_reserve_to_probes_through_another() {
    let _serial = serial();
    let redis = Redis::start();
    let servers = servers();
    let urls = urls(&servers);
    let batch_reserve = "[queue.classes.batch]\nreserve = 1\n";
    let flooders = 8; // twice the 4 slots
    let probes = 16;

    // One replica alone, without the store: the throughput to match.
    let alone_cfg = temp_config(
        "replicas-alone",
        &format!("[queue]\nenabled = true\n{batch_reserve}{}", keys()),
    );
    let alone = Llamatap::start_fleet(&urls, &["--config", alone_cfg.to_str().unwrap()]);
    let a = alone.addr();
    for _ in 0..2 {
        chat(&a, VOICE_H, "Warm up.", 1);
    }
    let alone_idle = idle_ttft(&a, VOICE_H, probes);
    let alone_flood = flood(&a, BULK_H, VOICE_H, flooders, WINDOW);
    drop(alone);

    // One replica alone with the store: what a lease round trip costs.
    let cfg = config("replicas-reserve", &redis, batch_reserve);
    let one = Llamatap::start_fleet(&urls, &["--config", &cfg]);
    wait_shared(&[&one], 1, &servers);
    let leased_idle = idle_ttft(&one.addr(), VOICE_H, probes);
    let leased_flood = flood(&one.addr(), BULK_H, VOICE_H, flooders, WINDOW);
    let m = one.metrics();
    let leases = metric_value(&m, "llamatap_queue_lease_duration_seconds_count").unwrap();
    let lease_mean =
        metric_value(&m, "llamatap_queue_lease_duration_seconds_sum").unwrap() / leases;
    let lease_under_1ms = series(
        &m,
        "llamatap_queue_lease_duration_seconds_bucket",
        "le=\"0.001\"",
    )
    .unwrap()
        / leases;
    drop(one);

    // Two replicas: the flood through the first, probes through the second;
    // with the reserve, then with batch preemptible instead.
    let preempt_cfg = config(
        "replicas-preempt",
        &redis,
        "[queue.classes.batch]\npreemptible = true\n",
    );
    let mut rows = vec![
        (
            "one replica alone (no store)".to_string(),
            alone_idle.clone(),
            alone_flood,
        ),
        (
            "one replica alone with the store (shared slots)".to_string(),
            leased_idle.clone(),
            leased_flood,
        ),
    ];
    let mut samples = Vec::new();
    let mut conflicts = Vec::new();
    let mut paused = (0.0, 0.0);
    for (name, cfg) in [
        (
            "flood through replica 1, probes through replica 2, batch reserve 1",
            &cfg,
        ),
        (
            "flood through replica 1, probes through replica 2, batch preemptible",
            &preempt_cfg,
        ),
    ] {
        let (first, second) = start_pair(cfg, &servers);
        let idle = idle_ttft(&second.addr(), VOICE_H, probes);
        let batch = [first.addr()];
        let (f, sampled) = sample_during(&[&servers[0], &servers[1]], || {
            flood_with(
                &batch,
                Some(&second.addr()),
                BULK_H,
                VOICE_H,
                flooders,
                WINDOW,
                |_| {},
            )
        });
        conflicts.push([&first, &second].map(|r| {
            metric_value(&r.metrics(), "llamatap_queue_lease_conflicts_total").unwrap_or(-1.0)
        }));
        if name.contains("preemptible") {
            // Every answer recorded, each pause with its continuation.
            let (_, preempted, continued) = paused_and_continued(&first, |_| true);
            paused = (preempted, continued);
        }
        samples.push(sampled);
        rows.push((name.to_string(), idle, f));
    }
    let figures = print_rows(
        &format!("batch flood ({flooders} clients x 160 tokens, 2 llama-servers x 2 slots) for {WINDOW:?}, interactive probes every 300 ms; tiny model, -np 2 -t 1 each"),
        &rows,
    );
    let lease = ms(percentile(&leased_idle, 50.0)) - ms(percentile(&alone_idle, 50.0));
    eprintln!(
        "leases refused for a stale view (replica 1, replica 2), per run: {conflicts:?}\n\
         llama-servers' requests_deferred peaked at {:?} / {:?}; {} / {} slots busy at most\n\
         issue's targets, two replicas sharing slots with the reserve: {}\n\
         issue's targets, two replicas sharing slots, batch preemptible: {}; {} batch answers paused at replica 1 for probes at replica 2, {} continued\n\
         one replica with the store against without it, same flood: batch tokens/s {:.0}%; {leases} leases took {:.3} ms on average ({:.0}% under 1 ms)\n\
         idle interactive TTFT p50: {:.1} ms without the store, {:.1} ms with shared slots (a lease round trip and its release: {lease:+.1} ms)",
        samples[0].deferred,
        samples[1].deferred,
        samples[0].busy,
        samples[1].busy,
        targets(figures[2], figures[0]),
        targets(figures[3], figures[0]),
        paused.0,
        paused.1,
        100.0 * figures[1].2 / figures[0].2,
        lease_mean * 1e3,
        100.0 * lease_under_1ms,
        ms(percentile(&alone_idle, 50.0)),
        ms(percentile(&leased_idle, 50.0)),
    );
    // No llama-server ever queued a request: the replicas together never
    // sent more than its slots.
    for s in &samples {
        assert_eq!(s.deferred, vec![0.0, 0.0], "an upstream was overfilled");
        assert!(s.busy <= 4);
    }
    assert!(figures.iter().all(|f| f.3 == 0), "errors in a run");
    // The reserve held across replicas: a probe through the second never
    // waited for a batch answer of the first to end (one takes well over
    // 100 ms here). Pre-emption reached across them: answers at the first
    // were paused for probes at the second, and continued whole (errors
    // count any that was not). Its TTFT is printed, not asserted: the pause
    // takes a few more round trips than the reserve's free slot, and how
    // long they take depends on how busy the two cores are.
    let reserve95 = figures[2].0;
    assert!(
        reserve95 < 100.0,
        "with the reserve, an interactive turn at replica 2 waited for a batch answer of replica 1 ({reserve95:.1} ms)"
    );
    assert!(figures[2].2 > 0.0 && figures[3].2 > 0.0, "batch starved");
    assert!(paused.0 >= 1.0, "no batch answer at replica 1 was paused");
    assert_eq!(paused.0, paused.1, "a paused answer was not continued");
}

#[test]
fn a_quiet_replica_leaves_every_slot_to_the_flooding_one() {
    let _serial = serial();
    let redis = Redis::start();
    let servers = servers();
    let urls = urls(&servers);
    let run = |cfg: &str| {
        let busy = Llamatap::start_fleet(&urls, &["--config", cfg]);
        let quiet = Llamatap::start_fleet(&urls, &["--config", cfg]);
        for r in [&busy, &quiet] {
            let a = r.addr();
            assert!(wait_for(Duration::from_secs(30), || {
                chat(&a, VOICE_H, "Warm up.", 1);
                let m = r.metrics();
                urls.iter().all(|u| {
                    let needle = format!("upstream=\"{}\"", u.trim_start_matches("http://"));
                    series(&m, "llamatap_queue_slots", &needle).is_some_and(|v| v >= 1.0)
                })
            })
            .is_some());
        }
        let batch = [busy.addr()];
        let (f, sampled) = sample_during(&[&servers[0], &servers[1]], || {
            flood_with(
                &batch,
                None,
                BULK_H,
                NONE,
                8,
                Duration::from_secs(4),
                |_| {},
            )
        });
        assert_eq!(f.errors, 0);
        assert!(f.broken.is_empty(), "{:?}", f.broken);
        sampled
    };
    let shared = run(&config("replicas-quiet-shared", &redis, ""));
    let static_cfg = temp_config(
        "replicas-quiet-static",
        &format!("[queue]\nenabled = true\nmax_inflight = 1\n{}", keys()),
    );
    let fixed = run(static_cfg.to_str().unwrap());
    eprintln!(
        "one replica flooding, one quiet: {} of 4 slots busy at most with shared slots, {} with a static share (max_inflight = 1 each); deferred {:?} / {:?}",
        shared.busy, fixed.busy, shared.deferred, fixed.deferred
    );
    assert_eq!(
        shared.busy, 4,
        "the flooding replica did not get every slot"
    );
    assert_eq!(shared.deferred, vec![0.0, 0.0]);
    assert!(fixed.busy <= 2);
}

#[test]
fn a_killed_replica_s_leases_expire_and_its_slots_serve_the_other() {
    let _serial = serial();
    let redis = Redis::start();
    let servers = [
        LlamaServer::start("tiny", &HOLD_NP2),
        LlamaServer::start("tiny", &HOLD_NP2),
    ];
    let cfg = config("replicas-kill", &redis, "");
    let (mut doomed, survivor) = start_pair(&cfg, &servers);
    // The doomed replica takes all four slots with answers that run for
    // minutes.
    let addr = doomed.addr();
    let holds: Vec<_> = (0..4)
        .map(|i| {
            let a = addr.clone();
            std::thread::spawn(move || chat(&a, BULK_H, &format!("Hold {i}."), HOLD_TOKENS))
        })
        .collect();
    let keys: Vec<String> = servers
        .iter()
        .map(|s| format!("llamatap:{{llamatap-slots}}:lease:{}", s.addr()))
        .collect();
    let leases = || -> u64 {
        keys.iter()
            .map(|k| {
                redis
                    .command(&["ZCARD", k])
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            })
            .sum()
    };
    assert!(
        wait_for(Duration::from_secs(30), || leases() == 4
            && servers
                .iter()
                .all(|s| s.metric("llamacpp:requests_processing") >= 2.0))
        .is_some(),
        "the four answers never held the four slots ({} leases)",
        leases()
    );
    // The survivor sees them leased elsewhere.
    assert!(wait_for(Duration::from_secs(5), || {
        series(
            &survivor.metrics(),
            "llamatap_queue_slots_elsewhere",
            "upstream=",
        ) == Some(4.0)
    })
    .is_some());
    let killed = Instant::now();
    doomed.child.kill().unwrap();
    doomed.child.wait().unwrap();
    for h in holds {
        h.join().unwrap();
    }
    // A request through the survivor is served once the dead replica's
    // leases expire.
    let r = chat(&survivor.addr(), VOICE_H, "Are the slots back?", 4);
    let served = killed.elapsed();
    let gone = wait_for(Duration::from_secs(10), || leases() == 0).map(|_| killed.elapsed());
    let replicas = wait_for(Duration::from_secs(10), || {
        survivor.metrics().contains("llamatap_queue_replicas 1")
    })
    .map(|_| killed.elapsed());
    eprintln!(
        "a replica holding 4 leases killed: its leases gone {gone:?} later (lease_ms {LEASE_MS}), the survivor's request answered after {served:?} (status {}), the survivor counted 1 replica after {replicas:?}",
        r.status
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.ttft.is_some());
    assert!(gone.is_some(), "the dead replica's leases never expired");
    assert!(
        replicas.is_some(),
        "the survivor still counts the dead replica"
    );
    // Expiry within the lease's life (renewed every third of it), plus a
    // sync round and a loaded machine's slack.
    assert!(
        served < Duration::from_millis(LEASE_MS) + Duration::from_secs(3),
        "the survivor waited {served:?} for the dead replica's slots"
    );
}

#[test]
fn redis_killed_mid_flood_falls_back_to_shares_and_comes_back() {
    let _serial = serial();
    let mut redis = Redis::start();
    let port = redis.port;
    let servers = servers();
    let cfg = config("replicas-redis-down", &redis, "");
    let (one, two) = start_pair(&cfg, &servers);
    let batch = [one.addr(), two.addr()];
    let mut phase = 0;
    let mut fell_back = None;
    let mut ready_meanwhile = String::new();
    let mut returned = None;
    let mut restarted: Option<Redis> = None;
    let started = Instant::now();
    let (f, sampled) = sample_during(&[&servers[0], &servers[1]], || {
        flood_with(
            &batch,
            None,
            BULK_H,
            NONE,
            8,
            Duration::from_secs(12),
            |t| match phase {
                0 if t >= Duration::from_secs(2) => {
                    redis.kill();
                    phase = 1;
                }
                1 if [&one, &two]
                    .iter()
                    .all(|r| r.metrics().contains("llamatap_queue_shared 0")) =>
                {
                    fell_back = Some(started.elapsed());
                    ready_meanwhile = readyz(&one);
                    phase = 2;
                }
                2 if t >= Duration::from_secs(6) => {
                    restarted = Some(Redis::start_on(port));
                    phase = 3;
                }
                3 if [&one, &two].iter().all(|r| {
                    let m = r.metrics();
                    m.contains("llamatap_queue_shared 1") && m.contains("llamatap_queue_replicas 2")
                }) =>
                {
                    returned = Some(started.elapsed());
                    phase = 4;
                }
                _ => {}
            },
        )
    });
    let (one_err, two_err) = (one.stderr(), two.stderr());
    eprintln!(
        "Redis killed 2 s into a 12 s flood over two replicas, restarted at 6 s: both on static shares at {fell_back:?}, both shared again at {returned:?}; llama-servers' requests_deferred peaked at {:?}, {} slots busy at most; {} errors, {} answers not whole",
        sampled.deferred,
        sampled.busy,
        f.errors,
        f.broken.len()
    );
    assert!(
        fell_back.is_some(),
        "a replica never fell back to its share"
    );
    // Still ready (it serves), saying why slots are not shared.
    assert!(
        ready_meanwhile.starts_with("ready\n")
            && ready_meanwhile.contains("slots: static share, 1/2 of each upstream"),
        "{ready_meanwhile}"
    );
    assert!(returned.is_some(), "a replica never shared slots again");
    assert_eq!(f.errors, 0, "a request failed because Redis failed");
    assert!(f.broken.is_empty(), "{:?}", f.broken);
    // During the switch a replica may have granted on its old view: at most
    // one slot over per upstream.
    assert!(
        sampled.deferred.iter().all(|d| *d <= 1.0),
        "an upstream was overfilled by more than one: {:?}",
        sampled.deferred
    );
    for err in [&one_err, &two_err] {
        // No tenant has a per-minute limit: the store is not spoken of as
        // the rate limits'.
        assert!(!err.contains("rate-limit store"), "{err}");
        assert_eq!(
            err.matches("shared slots: the store is unreachable")
                .count(),
            1,
            "{err}"
        );
        assert_eq!(
            err.matches("shared slots: the store answers again").count(),
            1,
            "{err}"
        );
    }
    assert!(
        readyz(&one).contains("slots: shared by 2 replicas"),
        "{}",
        readyz(&one)
    );
    drop(restarted);
}

/// Two tenants of one class flood for `window`, client `i` of each going
/// to `route(tenant, i)`; the content events each tenant received, and
/// the requests that failed.
fn two_tenants(
    route: impl Fn(usize, usize) -> String,
    clients: usize,
    window: Duration,
) -> ([u64; 2], u64) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let stop = Arc::new(AtomicBool::new(false));
    let tokens = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    let failed = Arc::new(AtomicU64::new(0));
    let mut hs = Vec::new();
    for (tenant, headers) in [BULK_H, OTHER_H].into_iter().enumerate() {
        for i in 0..clients {
            let (a, s, t, f) = (
                route(tenant, i),
                stop.clone(),
                tokens[tenant].clone(),
                failed.clone(),
            );
            hs.push(std::thread::spawn(move || {
                let mut n = 0;
                while !s.load(Ordering::Relaxed) {
                    let r = chat_counting(
                        &a,
                        headers,
                        &format!("Tenant {tenant} {i}-{n}."),
                        160,
                        Some(&t),
                    );
                    if r.status != 200 {
                        f.fetch_add(1, Ordering::Relaxed);
                    }
                    n += 1;
                }
            }));
        }
    }
    // Measured once every client has an answer streaming.
    assert!(wait_for(Duration::from_secs(30), || tokens
        .iter()
        .all(|t| t.load(Ordering::Relaxed) > 0))
    .is_some());
    let start = tokens.each_ref().map(|t| t.load(Ordering::Relaxed));
    std::thread::sleep(window);
    let end = tokens.each_ref().map(|t| t.load(Ordering::Relaxed));
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        h.join().unwrap();
    }
    (
        [end[0] - start[0], end[1] - start[1]],
        failed.load(Ordering::Relaxed),
    )
}

#[test]
fn two_tenants_share_the_slots_across_replicas() {
    let _serial = serial();
    let redis = Redis::start();
    let servers = servers();
    let cfg = config("replicas-fair", &redis, "");
    let (one, two) = start_pair(&cfg, &servers);
    let addrs = [one.addr(), two.addr()];
    let window = Duration::from_secs(5);
    // Each tenant's four clients spread over both replicas.
    let (spread, spread_failed) = two_tenants(|_, i| addrs[i % 2].clone(), 4, window);
    // Each tenant through a replica of its own.
    let (split, split_failed) = two_tenants(|t, _| addrs[t].clone(), 4, window);
    let share = |t: [u64; 2]| t[0] as f64 / (t[0] + t[1]).max(1) as f64;
    eprintln!(
        "two batch tenants of equal weight, 4 clients each, 4 slots, {window:?}: tokens {spread:?} ({:.0}% / {:.0}%) with each tenant's clients spread over both replicas; {split:?} ({:.0}% / {:.0}%) with each tenant through its own replica",
        100.0 * share(spread),
        100.0 * (1.0 - share(spread)),
        100.0 * share(split),
        100.0 * (1.0 - share(split)),
    );
    assert_eq!(spread_failed + split_failed, 0);
    // Within the stated tolerance (one request per replica of the four
    // slots, a quarter): each tenant gets at least a quarter of the tokens
    // either way, around its half.
    for t in [spread, split] {
        let s = share(t);
        assert!(
            (0.25..=0.75).contains(&s),
            "a tenant got {:.0}% of the tokens: {t:?}",
            100.0 * s
        );
    }
}

/// A store client for the test's own calls on `redis` (the library's).
fn slot_store(redis: &Redis) -> SlotStore {
    slot_store_with(redis, None)
}

/// The same, logging in with `password` (as `[auth.store] password_env`
/// gives it).
fn slot_store_with(redis: &Redis, password: Option<&str>) -> SlotStore {
    let cfg = llamatap::config::Store {
        url: llamatap::config::Secret::new(redis.url()),
        address: format!("127.0.0.1:{}", redis.port),
        timeout: Duration::from_secs(5),
        on_error: llamatap::config::OnError::Allow,
        password: password.map(|p| llamatap::config::Secret::new(p.to_string())),
    };
    let store =
        llamatap::store::Store::new(cfg, prometheus_client::metrics::gauge::Gauge::default())
            .with_limits(false);
    SlotStore::new(std::sync::Arc::new(store))
}

#[tokio::test]
async fn leases_and_heartbeats_no_replica_could_have_written_hold_nothing() {
    let redis = Redis::start();
    let store = slot_store(&redis);
    let up = "10.0.0.7:8080".to_string();
    let key = lease_key(&up);
    let replicas = "llamatap:{llamatap-slots}:replicas";
    let waiting = "llamatap:{llamatap-slots}:waiting";
    let ttl = LEASE_MS;
    let none: [Models; 3] = Default::default();
    // Replica a is registered; something else writes leases that expire in
    // 3,000 years on both slots of the upstream, a lease of a replica never
    // registered, a heartbeat that far ahead, and waiting counts of a
    // replica that is not there.
    let view = store
        .sync("a", ttl, [0; 3], &none, std::slice::from_ref(&up))
        .await
        .unwrap();
    assert_eq!((view.replicas, view.leases.clone()), (1, vec![0]));
    let soon = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + ttl / 2)
        .to_string();
    for cmd in [
        &["ZADD", &key, "99999999999999", "forged:1"][..],
        &["ZADD", &key, "99999999999999", "forged:2"],
        &["ZADD", &key, &soon, "ghost:1"],
        &["ZADD", replicas, "99999999999999", "immortal"],
        &["HSET", waiting, "ghost", "5,5,5"],
    ] {
        assert!(redis.command(cmd).is_some(), "{cmd:?}");
    }
    // A grant of one of its two slots goes through.
    assert_eq!(
        store.acquire(&up, "a:0", 2, ttl).await.unwrap(),
        (true, 1),
        "forged leases held the upstream's slots"
    );
    // The view counts a's lease only, one replica, nothing waiting.
    let view = store
        .sync("a", ttl, [0; 3], &none, std::slice::from_ref(&up))
        .await
        .unwrap();
    assert_eq!(view.leases, vec![1]);
    assert_eq!(view.replicas, 1);
    assert_eq!(view.waiting, [0; 3]);
    // And the forged entries are gone from the store.
    assert_eq!(redis.command(&["ZCARD", &key]).as_deref(), Some("1"));
    assert!(redis.command(&["ZSCORE", &key, "a:0"]).is_some());
    assert_eq!(redis.command(&["ZSCORE", replicas, "immortal"]), None);
    assert_eq!(redis.command(&["HGET", waiting, "ghost"]), None);
    // A replica that registers counts as before: its lease and its waiting.
    // (and the model its waiting request names).
    let mut wants: [Models; 3] = Default::default();
    wants[0].add(Some("model-a"));
    let view = store
        .sync("b", ttl, [1, 0, 0], &wants, std::slice::from_ref(&up))
        .await
        .unwrap();
    assert_eq!((view.replicas, view.leases.clone()), (2, vec![1]));
    assert_eq!(store.acquire(&up, "b:0", 2, ttl).await.unwrap(), (true, 2));
    assert_eq!(store.acquire(&up, "a:1", 2, ttl).await.unwrap(), (false, 2));
    let view = store
        .sync("a", ttl, [0; 3], &none, std::slice::from_ref(&up))
        .await
        .unwrap();
    assert_eq!(
        (view.replicas, view.waiting, view.leases),
        (2, [1, 0, 0], vec![2])
    );
    assert_eq!(view.models, wants, "the models b's requests wait for");
    // A grant before its replica's first heartbeat registers it: the
    // lease is not taken for a stray one.
    store.release(&up, "b:0").await.unwrap();
    assert_eq!(store.acquire(&up, "c:0", 2, ttl).await.unwrap(), (true, 2));
    let view = store
        .sync("a", ttl, [0; 3], &none, std::slice::from_ref(&up))
        .await
        .unwrap();
    assert_eq!((view.replicas, view.leases), (3, vec![2]));
}

/// Calls of `command` Redis has served (`INFO commandstats`).
fn calls(redis: &Redis, command: &str) -> u64 {
    redis
        .command(&["INFO", "commandstats"])
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_burst_of_queued_requests_takes_one_announcement_round_at_a_time() {
    let _serial = serial();
    let redis = Redis::start();
    let servers = [
        LlamaServer::start("tiny", &HOLD_NP2),
        LlamaServer::start("tiny", &HOLD_NP2),
    ];
    // The store may take 10 s: it outlasts the pause below, so no replica
    // falls back to its static share meanwhile.
    let toml = format!(
        "[auth.store]\nurl = \"{}\"\ntimeout_ms = 10000\n\
         [queue]\nenabled = true\nshared = true\nlease_ms = {LEASE_MS}\n{}",
        redis.url(),
        keys()
    );
    let cfg = temp_config("replicas-announce", &toml);
    let (one, two) = start_pair(cfg.to_str().unwrap(), &servers);
    // Batch answers that run for minutes hold all four slots.
    let addr = one.addr();
    let holds: Vec<_> = (0..4)
        .map(|i| {
            let a = addr.clone();
            std::thread::spawn(move || chat(&a, BULK_H, &format!("Hold {i}."), HOLD_TOKENS))
        })
        .collect();
    assert!(
        wait_for(Duration::from_secs(30), || servers
            .iter()
            .all(|s| s.metric("llamacpp:requests_processing") >= 2.0))
        .is_some(),
        "the four answers never held the four slots"
    );
    // Redis holds every write (sync rounds, messages) while a burst of
    // interactive requests queues at one replica: each asks for an
    // announcement.
    let before = calls(&redis, "publish");
    let baseline = redis.clients();
    assert_eq!(
        redis
            .command(&["CLIENT", "PAUSE", "8000", "WRITE"])
            .as_deref(),
        Some("OK")
    );
    const BURST: usize = 24;
    let burst: Vec<_> = (0..BURST)
        .map(|i| {
            let a = addr.clone();
            std::thread::spawn(move || chat(&a, VOICE_H, &format!("Burst {i}."), 4))
        })
        .collect();
    let queued = wait_for(Duration::from_secs(6), || {
        one.metrics().contains(&format!(
            "llamatap_queue_depth{{class=\"interactive\"}} {BURST}\n"
        ))
    });
    // Meanwhile the replica's connections to Redis stay few: the
    // heartbeat's, one announcement round's, the subscription (before:
    // one per queued request, up to the store's 16, which tenant
    // admission needs too).
    let mut most = redis.clients();
    let _ = wait_for(Duration::from_secs(1), || {
        most = most.max(redis.clients());
        false
    });
    assert_eq!(redis.command(&["CLIENT", "UNPAUSE"]).as_deref(), Some("OK"));
    assert!(
        queued.is_some(),
        "the burst never queued:\n{}",
        one.metrics()
    );
    // The rounds asked for while one was held make one more round: a
    // message or two, not one per request.
    assert!(
        wait_for(Duration::from_secs(10), || calls(&redis, "publish")
            > before)
        .is_some(),
        "no announcement went out"
    );
    let mut published = 0;
    let _ = wait_for(Duration::from_secs(2), || {
        published = calls(&redis, "publish") - before;
        false
    });
    eprintln!(
        "{BURST} requests queued while Redis held writes: {published} announcements, \
         at most {most} connections to Redis ({baseline} before)"
    );
    assert!(published <= 3, "{published} announcements for one burst");
    assert!(
        most <= baseline + 3,
        "{most} connections to Redis during the burst ({baseline} before)"
    );
    drop(one);
    drop(two);
    for h in holds.into_iter().chain(burst) {
        let _ = h.join();
    }
}

#[tokio::test]
async fn a_password_from_the_environment_logs_in_to_a_redis_that_requires_one() {
    const PASSWORD: &str = "slots-pass-9c41e2";
    let redis = Redis::launch(common::free_port(), &[], Some(PASSWORD));
    let none: [Models; 3] = Default::default();
    let up = ["10.0.0.7:8080".to_string()];
    let without = slot_store(&redis)
        .sync("a", LEASE_MS, [0; 3], &none, &up)
        .await;
    assert!(
        without.is_err(),
        "a Redis with a password answered without it"
    );
    let with = slot_store_with(&redis, Some(PASSWORD))
        .sync("a", LEASE_MS, [0; 3], &none, &up)
        .await
        .unwrap();
    assert_eq!(with.replicas, 1);
}

#[test]
fn a_request_waiting_elsewhere_pauses_only_an_answer_of_its_model() {
    let _serial = serial();
    let redis = Redis::start();
    let mut hold = HOLD_NP2.to_vec();
    let a_args: Vec<&str> = hold.iter().copied().chain(["--alias", "model-a"]).collect();
    hold.extend(["--alias", "model-b"]);
    let servers = [
        LlamaServer::start("tiny", &a_args),
        LlamaServer::start("tiny", &hold),
    ];
    // Batch answers may pause for interactive requests; an interactive
    // request gives up after 30 s.
    let cfg = config(
        "replicas-models",
        &redis,
        "max_inflight = 2\n[queue.classes.batch]\npreemptible = true\n\
         [queue.classes.interactive]\nmax_wait_ms = 30000\n",
    );
    let urls = urls(&servers);
    let one = Llamatap::start_fleet(&urls, &["--config", &cfg]);
    let two = Llamatap::start_fleet(&urls, &["--config", &cfg]);
    for r in [&one, &two] {
        let ok = wait_for(Duration::from_secs(30), || {
            let m = r.metrics();
            m.contains("llamatap_queue_replicas 2\n")
                && m.contains("llamatap_queue_shared 1\n")
                && readyz(r).starts_with("ready\n")
        });
        assert!(
            ok.is_some(),
            "a replica never shared slots:\n{}",
            r.metrics()
        );
    }
    // Through replica 1: model-a's two slots held first, then model-b's
    // (the newest answers are model-b's).
    let addr = one.addr();
    let mut holds = Vec::new();
    for (model, server) in [("model-a", &servers[0]), ("model-b", &servers[1])] {
        for i in 0..2 {
            let a = addr.clone();
            holds.push(std::thread::spawn(move || {
                chat_model(&a, BULK_H, model, &format!("Hold {i}."), HOLD_TOKENS)
            }));
        }
        assert!(
            wait_for(Duration::from_secs(30), || server
                .metric("llamacpp:requests_processing")
                >= 2.0)
            .is_some(),
            "{model}'s answers never held its slots"
        );
    }
    // Replica 2 sees the four slots leased by replica 1 (the store's next
    // round after the holds started): before, it would count model-a's
    // slots free and send straight to a llama-server whose slots are busy,
    // where the request waits out a whole hold.
    assert!(
        wait_for(Duration::from_secs(30), || series(
            &two.metrics(),
            "llamatap_queue_slots_elsewhere",
            "upstream="
        ) == Some(4.0))
        .is_some(),
        "replica 2 never saw the holds' leases:\n{}",
        two.metrics()
    );
    // Through replica 2: an interactive request for model-a. Replica 1
    // pauses an answer of model-a for it, never one of model-b (whose slot
    // it could not take).
    let r = chat_model(&two.addr(), VOICE_H, "model-a", "Is a slot mine?", 4);
    // The paused answer waits at replica 1 (its pause is counted when it
    // ends); model-b's server still runs both of its answers.
    let processing = |s: &LlamaServer| s.metric("llamacpp:requests_processing");
    eprintln!(
        "an interactive request for model-a at replica 2 while replica 1 held every slot: \
         status {}, after {:?}; requests processing: model-a {}, model-b {}",
        r.status,
        r.elapsed,
        processing(&servers[0]),
        processing(&servers[1])
    );
    assert_eq!(r.status, 200, "{}", r.body);
    // Model-b's answers ran on throughout.
    assert_eq!(processing(&servers[1]), 2.0);
    drop(one);
    drop(two);
    for h in holds {
        let _ = h.join();
    }
}
