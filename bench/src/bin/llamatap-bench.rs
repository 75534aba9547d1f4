//! The side-by-side streaming benchmark: direct, llamatap (full telemetry and
//! telemetry off), nginx and LiteLLM, against one scripted llama-server
//! stand-in, in one run with interleaved rounds.
//!
//! cd bench && cargo run --release --bin llamatap-bench -- --out ../docs/benchmarks.json
//!
//! Phases:
//! 1. latency: open-loop rounds (streams start on a fixed schedule), every
//!    variant once per round, the order rotating between rounds;
//! 2. hang-ups: 1,000 streams held under load, then all closed at once; how
//!    long until the upstream sees each close;
//! 3. memory: RSS of each proxy at 0, 1,000 and 10,000 held slow streams,
//!    and whether every stream was held without error;
//! 4. real llama-server (tiny model): TTFT direct vs through llamatap;
//! 5. plain: answers that do not stream (`/tokenize`, `/health`) from the
//!    real llama-server through each variant, one at a time
//!    (`llamatap_bench::plain`).
//!
//! `--help` lists the knobs.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use llamatap_bench::client::{self, Counters, Held, Pool, StreamOpts, StreamRec, Target};
use llamatap_bench::clock::mono_ns;
use llamatap_bench::ctl::{self, SinkStats};
use llamatap_bench::procs;
use llamatap_bench::proxies::{self, Kind, Running, LITELLM_KEY};
use serde_json::{json, Value};

const DEFAULT_VARIANTS: &str =
    "direct,llamatap-full-t1,llamatap-off-t1,llamatap-full-t2,nginx-w1,nginx-w2,litellm-w1";

struct Args {
    out: PathBuf,
    md: Option<PathBuf>,
    variants: Vec<String>,
    rounds: usize,
    round_secs: f64,
    rate: f64,
    tokens: usize,
    interval_ms: f64,
    prefill_ms: u64,
    hangup_streams: u64,
    hangup_interval_ms: u64,
    mem_steps: Vec<u64>,
    mem_interval_ms: u64,
    ramp: f64,
    real_requests: usize,
    plain_rounds: usize,
    plain_requests: usize,
    continuation_rounds: usize,
    llamatap: PathBuf,
    llamatap_alt: PathBuf,
    venv: PathBuf,
    llama_server: PathBuf,
    model: PathBuf,
    real_model: PathBuf,
    skip: Vec<String>,
    nice: i32,
    rt: bool,
    upstream_keepalive: bool,
}

fn home() -> PathBuf {
    PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()))
}

fn usage() -> ! {
    eprintln!(
        "llamatap-bench [options]
  --out FILE             JSON results (default: bench-results.json)
  --md FILE              markdown tables (default: next to --out, .tables.md)
  --variants LIST        default: {DEFAULT_VARIANTS}
  --rounds N             interleaved latency rounds (default 4)
  --round-secs S         seconds of arrivals per variant per round (default 6)
  --rate R               streams started per second, open loop (default 40)
  --tokens N             tokens per answer (default 64)
  --interval-ms MS       between tokens (default 20, i.e. 50 tokens/s)
  --prefill-ms MS        before the first token (default 10)
  --hangup-streams N     streams open when all hang up (default 1000)
  --hangup-interval-ms   token interval while they are held (default 100)
  --mem-steps LIST       held-stream counts for RSS (default 1000,10000)
  --mem-interval-ms MS   token interval of held slow streams (default 1000)
  --ramp R               new held streams per second (default 1000)
  --real-requests N      requests per side against the real llama-server (default 50)
  --plain-rounds N       rounds of the plain-request phase (default 10)
  --plain-requests N     requests per variant per plain round (default 200)
  --continuation-rounds N  answers of each kind in the continuation phase (default 200)
  --skip LIST            phases to skip: latency,hangup,memory,real,plain,continuation
  --upstream-keepalive   the scripted upstream keeps a connection open after a
                         streamed answer (by default it closes it, as llama-server does)
  --no-rt                do not run under SCHED_RR (see below)
  --nice N               without real-time scheduling: nice of the bench and everything
                         it starts (default -10; 0 leaves it)

By default the bench and every process it starts (upstream, proxies, llama-server)
run under SCHED_RR priority 1, so that other work on a shared box (compile jobs)
does not decide the tail latencies; the mode used is recorded in the JSON.
  --llamatap PATH        binary (default ../target/release/llamatap, built if missing)
 --llamatap-alt PATH    a second binary for `alt-llamatap-…` variants (a candidate change)
  --venv PATH            LiteLLM venv (default ~/.cache/llamatap/bench-venv)
  --llama-server PATH    default ~/.cache/llamatap/bin/llama-server
  --model PATH           default ~/.cache/llamatap/models/tiny.gguf
  --real-model PATH      a real instruct model for the `real` phase's second run
                         (default ~/.cache/llamatap/models/smollm2-135m-instruct-q4_1.gguf,
                         scripts/install-real-model.sh fetches it)"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut a = Args {
        out: PathBuf::from("bench-results.json"),
        md: None,
        variants: DEFAULT_VARIANTS.split(',').map(String::from).collect(),
        rounds: 4,
        round_secs: 6.0,
        rate: 40.0,
        tokens: 64,
        interval_ms: 20.0,
        prefill_ms: 10,
        hangup_streams: 1000,
        hangup_interval_ms: 100,
        mem_steps: vec![1000, 10000],
        mem_interval_ms: 1000,
        ramp: 1000.0,
        real_requests: 50,
        plain_rounds: 10,
        continuation_rounds: 200,
        plain_requests: 200,
        llamatap: repo.join("target/release/llamatap"),
        llamatap_alt: PathBuf::new(),
        venv: home().join(".cache/llamatap/bench-venv"),
        llama_server: home().join(".cache/llamatap/bin/llama-server"),
        model: home().join(".cache/llamatap/models/tiny.gguf"),
        real_model: home().join(".cache/llamatap/models/smollm2-135m-instruct-q4_1.gguf"),
        skip: Vec::new(),
        nice: -10,
        rt: true,
        upstream_keepalive: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().unwrap_or_else(|| usage());
        let list = |s: String| {
            s.split(',')
                .filter(|x| !x.is_empty())
                .map(String::from)
                .collect::<Vec<_>>()
        };
        let num = |s: String| s.parse::<f64>().unwrap_or_else(|_| usage());
        match k.as_str() {
            "--out" => a.out = v().into(),
            "--md" => a.md = Some(v().into()),
            "--variants" => a.variants = list(v()),
            "--rounds" => a.rounds = num(v()) as usize,
            "--round-secs" => a.round_secs = num(v()),
            "--rate" => a.rate = num(v()),
            "--tokens" => a.tokens = num(v()) as usize,
            "--interval-ms" => a.interval_ms = num(v()),
            "--prefill-ms" => a.prefill_ms = num(v()) as u64,
            "--hangup-streams" => a.hangup_streams = num(v()) as u64,
            "--hangup-interval-ms" => a.hangup_interval_ms = num(v()) as u64,
            "--mem-steps" => a.mem_steps = list(v()).into_iter().map(|s| num(s) as u64).collect(),
            "--mem-interval-ms" => a.mem_interval_ms = num(v()) as u64,
            "--ramp" => a.ramp = num(v()),
            "--real-requests" => a.real_requests = num(v()) as usize,
            "--real-model" => a.real_model = PathBuf::from(v()),
            "--plain-rounds" => a.plain_rounds = num(v()) as usize,
            "--continuation-rounds" => a.continuation_rounds = num(v()) as usize,
            "--plain-requests" => a.plain_requests = num(v()) as usize,
            "--skip" => a.skip = list(v()),
            "--nice" => a.nice = num(v()) as i32,
            "--no-rt" => a.rt = false,
            "--upstream-keepalive" => a.upstream_keepalive = true,
            "--llamatap" => a.llamatap = v().into(),
            "--llamatap-alt" => a.llamatap_alt = v().into(),
            "--venv" => a.venv = v().into(),
            "--llama-server" => a.llama_server = v().into(),
            "--model" => a.model = v().into(),
            _ => usage(),
        }
    }
    a
}

fn log(msg: impl AsRef<str>) {
    eprintln!("[{:>7.1}s] {}", START.elapsed().as_secs_f64(), msg.as_ref());
}

static START: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(Instant::now);

/// One variant under test.
struct Variant {
    name: String,
    kind: Kind,
    run: Running,
    target: Arc<Target>,
    pool: Arc<Pool>,
    acc: Acc,
    hangup: Option<Value>,
    memory: Option<Value>,
    failed: Option<String>,
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000_000, 3).expect("histogram")
}

/// Latency-phase accumulators.
struct Acc {
    ttft: Histogram<u64>,
    ttft_over: Histogram<u64>,
    ev: Histogram<u64>,
    gap: Histogram<u64>,
    streams: u64,
    errors: u64,
    error_samples: Vec<String>,
    merged: u64,
    merged_reads: u64,
    reads: u64,
    data_events: u64,
    content_events: u64,
    short_streams: u64,
    missing_stamps: u64,
    stamps_from_log: u64,
    cpu: f64,
    upstream_cpu: f64,
    client_cpu: f64,
    others_cpu: f64,
    wall: f64,
    rounds: Vec<Value>,
}

impl Acc {
    fn new() -> Acc {
        Acc {
            ttft: hist(),
            ttft_over: hist(),
            ev: hist(),
            gap: hist(),
            streams: 0,
            errors: 0,
            error_samples: Vec::new(),
            merged: 0,
            merged_reads: 0,
            reads: 0,
            data_events: 0,
            content_events: 0,
            short_streams: 0,
            missing_stamps: 0,
            stamps_from_log: 0,
            cpu: 0.0,
            upstream_cpu: 0.0,
            client_cpu: 0.0,
            others_cpu: 0.0,
            wall: 0.0,
            rounds: Vec::new(),
        }
    }
}

fn pct(h: &Histogram<u64>, q: f64) -> Option<f64> {
    (!h.is_empty()).then(|| h.value_at_quantile(q) as f64 / 1000.0)
}

/// p50/p95/p99/p99.9/max in microseconds.
fn summary(h: &Histogram<u64>) -> Value {
    json!({
        "n": h.len(),
        "p50_us": pct(h, 0.5),
        "p95_us": pct(h, 0.95),
        "p99_us": pct(h, 0.99),
        "p999_us": pct(h, 0.999),
        "max_us": (!h.is_empty()).then(|| h.max() as f64 / 1000.0),
        "mean_us": (!h.is_empty()).then(|| h.mean() / 1000.0),
    })
}

struct Machine {
    busy: u64,
    total: u64,
}

fn machine() -> Machine {
    let (busy, total) = procs::machine_jiffies();
    Machine { busy, total }
}

fn self_cpu() -> f64 {
    procs::cpu_secs(&[std::process::id()])
}

async fn set_pace(up: SocketAddr, prefill_ms: u64, interval_us: u64, tokens: usize, log: bool) {
    let body =
        json!({"prefill_ms": prefill_ms, "interval_us": interval_us, "tokens": tokens, "log": log});
    let r = ctl::request(up, "POST", "/_bench/pace", body.to_string().as_bytes()).await;
    assert!(
        matches!(r, Some((200, _))),
        "cannot set the upstream's pace"
    );
}

async fn stamps(up: SocketAddr) -> HashMap<u64, Vec<u64>> {
    match ctl::get(up, "/_bench/stamps").await {
        Some((200, b)) => serde_json::from_slice::<HashMap<String, Vec<u64>>>(&b)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(k, v)| Some((k.parse().ok()?, v)))
            .collect(),
        _ => HashMap::new(),
    }
}

async fn closes(up: SocketAddr) -> Vec<(u64, u64, u64)> {
    match ctl::get(up, "/_bench/closes").await {
        Some((200, b)) => serde_json::from_slice(&b).unwrap_or_default(),
        _ => Vec::new(),
    }
}

/// Adds one round's records to the accumulators.
fn account(
    acc: &mut Acc,
    recs: &[StreamRec],
    log: &HashMap<u64, Vec<u64>>,
    tokens: usize,
) -> Value {
    let mut round_ev = hist();
    let mut round_over = hist();
    for r in recs {
        acc.streams += 1;
        if let Some(e) = &r.error {
            acc.errors += 1;
            if acc.error_samples.len() < 5 {
                acc.error_samples.push(e.clone());
            }
        }
        acc.merged += r.merged;
        acc.merged_reads += r.merged_reads;
        acc.reads += r.reads;
        acc.data_events += r.data_events;
        acc.content_events += r.content.len() as u64;
        if r.error.is_none() && r.content.len() != tokens {
            acc.short_streams += 1;
        }
        let logged = log.get(&r.id);
        let stamp = |k: usize, own: Option<u64>| -> Option<u64> {
            own.or_else(|| logged.and_then(|l| l.get(k + 1).copied()))
        };
        for (k, (arr, own)) in r.content.iter().enumerate() {
            if own.is_none() && logged.is_some() {
                acc.stamps_from_log += 1;
            }
            match stamp(k, *own) {
                Some(s) => {
                    let d = arr.saturating_sub(s).max(1);
                    let _ = acc.ev.record(d);
                    let _ = round_ev.record(d);
                }
                None => acc.missing_stamps += 1,
            }
            if k > 0 {
                let _ = acc
                    .gap
                    .record(arr.saturating_sub(r.content[k - 1].0).max(1));
            }
        }
        if let Some(first) = r.first_content {
            let ttft = first.saturating_sub(r.t_start).max(1);
            let _ = acc.ttft.record(ttft);
            let t_req = r.t_req.or_else(|| logged.and_then(|l| l.first().copied()));
            let first_send = r.content.first().and_then(|(_, own)| stamp(0, *own));
            if let (Some(q), Some(s)) = (t_req, first_send) {
                let think = s.saturating_sub(q);
                let over = ttft.saturating_sub(think).max(1);
                let _ = acc.ttft_over.record(over);
                let _ = round_over.record(over);
            }
        }
    }
    json!({
        "streams": recs.len(),
        "event_p50_us": pct(&round_ev, 0.5),
        "event_p99_us": pct(&round_ev, 0.99),
        "ttft_overhead_p50_us": pct(&round_over, 0.5),
        "ttft_overhead_p99_us": pct(&round_over, 0.99),
    })
}

/// Waits until `cond` or `limit`.
async fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t = tokio::time::Instant::now();
    while t.elapsed() < limit {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cond()
}

/// Checks a variant streams at all (LiteLLM takes a while to boot).
async fn ready(v: &Variant, limit: Duration) -> Result<(), String> {
    let t = tokio::time::Instant::now();
    let opts = StreamOpts {
        max_tokens: 4,
        timeout: Duration::from_secs(20),
        record_events: true,
    };
    let ctr = Counters::default();
    let mut last = String::from("no attempt");
    while t.elapsed() < limit {
        if tokio::net::TcpStream::connect(v.target.addr).await.is_ok() {
            let r = client::run_stream(&v.target, None, 1, &opts, None, &ctr).await;
            match r.error {
                None if r.first_content.is_some() => return Ok(()),
                None => last = "no content event".into(),
                Some(e) => last = e,
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(format!("not streaming after {}s: {last}", limit.as_secs()))
}

fn tree_cpu(v: &Variant) -> f64 {
    v.run.pid().map(procs::tree_cpu_secs).unwrap_or(0.0)
}

fn tree_rss(v: &Variant) -> u64 {
    v.run
        .pid()
        .map(|p| procs::rss_kib(&procs::tree(p)))
        .unwrap_or(0)
}

fn tree_fds(v: &Variant) -> usize {
    v.run
        .pid()
        .map(|p| procs::fds(&procs::tree(p)))
        .unwrap_or(0)
}

fn main() {
    let args = parse_args();
    let _ = *START;
    let nofile = procs::raise_nofile();
    // Children inherit the priority: the client, the upstream and every proxy
    // run at the same one, ahead of whatever else the machine is doing.
    // SAFETY: setpriority on this process.
    let realtime = args.rt && {
        let p = libc::sched_param { sched_priority: 1 };
        // SAFETY: sched_setscheduler on this thread, before any other starts.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_RR, &p) == 0 }
    };
    if args.rt && !realtime {
        log("cannot use SCHED_RR (not root?); falling back to nice");
    }
    // SAFETY: setpriority on this thread.
    let reniced = realtime
        || args.nice == 0
        || unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, args.nice) } == 0;
    if !reniced {
        log(format!(
            "cannot set nice {} (not root?); running at the default priority",
            args.nice
        ));
    }
    log(format!(
        "scheduling: {}",
        if realtime {
            "SCHED_RR priority 1".to_string()
        } else if reniced {
            format!("nice {}", args.nice)
        } else {
            "default".into()
        }
    ));
    let dir = std::env::temp_dir().join(format!("llamatap-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    log(format!(
        "files in {}; open-files limit {nofile}",
        dir.display()
    ));
    let load_before = procs::loadavg();

    // The llamatap binary.
    let wants_llamatap = args.variants.iter().any(|v| v.starts_with("llamatap"));
    if wants_llamatap && !args.llamatap.exists() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        log("building llamatap (cargo build --release) in the repository root");
        let ok = std::process::Command::new("cargo")
            .args(["build", "--release", "--bin", "llamatap"])
            .current_dir(&repo)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "cannot build llamatap");
    }

    let me = std::env::current_exe().expect("current exe");
    let up_bin = me.with_file_name("sse-upstream");
    let mut upstream = proxies::start_upstream(&up_bin, &dir, args.upstream_keepalive);
    let up = upstream.addr;
    UPSTREAM_PID.store(upstream.pid().unwrap_or(0), Ordering::Relaxed);
    log(format!("scripted upstream on {up}"));

    // Aux runtime: the OTLP sink and the metric scrapes, off the client's thread.
    let sink_stats = Arc::new(SinkStats::default());
    let stop = Arc::new(AtomicBool::new(false));
    let sink_l = std::net::TcpListener::bind("127.0.0.1:0").expect("sink");
    sink_l.set_nonblocking(true).expect("nonblocking");
    let sink = sink_l.local_addr().expect("sink addr");
    let (scrape_tx, scrape_rx) = std::sync::mpsc::channel::<SocketAddr>();
    let scrapes = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let scrape_errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let aux = {
        let (stats, stop, scrapes, scrape_errors) = (
            sink_stats.clone(),
            stop.clone(),
            scrapes.clone(),
            scrape_errors.clone(),
        );
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("aux runtime");
            rt.block_on(async move {
                let l = tokio::net::TcpListener::from_std(sink_l).expect("sink listener");
                tokio::spawn(ctl::otlp_sink(l, stats));
                let mut admins: Vec<SocketAddr> = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    while let Ok(a) = scrape_rx.try_recv() {
                        admins.push(a);
                    }
                    for a in &admins {
                        match ctl::get(*a, "/metrics").await {
                            Some((200, _)) => scrapes.fetch_add(1, Ordering::Relaxed),
                            _ => scrape_errors.fetch_add(1, Ordering::Relaxed),
                        };
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            });
        })
    };

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");

    // Start every variant.
    let mut variants: Vec<Variant> = Vec::new();
    for name in &args.variants {
        let Some(kind) = Kind::parse(name) else {
            eprintln!("unknown variant {name}");
            std::process::exit(2);
        };
        let (run, failed) = match proxies::start(
            name,
            &kind,
            up,
            sink,
            &dir,
            &args.llamatap,
            &args.llamatap_alt,
            &args.venv,
        ) {
            Ok(r) => (r, None),
            Err(e) => (
                Running {
                    child: None,
                    addr: up,
                    admin: None,
                    log: None,
                },
                Some(format!("cannot start: {e}")),
            ),
        };
        if let (Kind::Llamatap { full: true, .. }, Some(a)) = (&kind, run.admin) {
            let _ = scrape_tx.send(a);
        }
        let target = Arc::new(Target {
            name: name.clone(),
            addr: run.addr,
            model: "tiny.gguf".into(),
            auth: matches!(kind, Kind::Litellm { .. }).then(|| format!("Bearer {LITELLM_KEY}")),
        });
        variants.push(Variant {
            name: name.clone(),
            kind,
            run,
            target,
            pool: Arc::new(Pool::default()),
            acc: Acc::new(),
            hangup: None,
            memory: None,
            failed,
        });
    }

    let interval_us = (args.interval_ms * 1000.0) as u64;
    let mut results = json!({});
    rt.block_on(async {
        set_pace(up, args.prefill_ms, interval_us, args.tokens, false).await;
        for v in variants.iter_mut() {
            if v.failed.is_some() {
                continue;
            }
            let limit = if matches!(v.kind, Kind::Litellm { .. }) {
                240
            } else {
                30
            };
            match ready(v, Duration::from_secs(limit)).await {
                Ok(()) => log(format!("{} ready on {}", v.name, v.target.addr)),
                Err(e) => {
                    log(format!("{}: {e}", v.name));
                    v.failed = Some(e);
                }
            }
        }
        if !args.skip.iter().any(|s| s == "latency") {
            latency_phase(&args, up, &mut variants).await;
        }
        if !args.skip.iter().any(|s| s == "hangup") {
            hangup_phase(&args, up, &mut variants).await;
        }
        if !args.skip.iter().any(|s| s == "memory") {
            memory_phase(&args, up, &mut variants).await;
        }
        if !args.skip.iter().any(|s| s == "real") {
            results["real_llama_server"] = real_phase(&args, &dir, sink, &args.model).await;
            // The same, with a real instruct model answering in English.
            results["real_model"] = real_phase(&args, &dir, sink, &args.real_model).await;
        }
        if !args.skip.iter().any(|s| s == "plain") {
            results["plain"] = plain_phase(&args, &dir, sink).await;
        }
        if !args.skip.iter().any(|s| s == "continuation") {
            results["continuation"] = continuation_phase(&args, &dir, &up_bin).await;
        }
    });

    let load_after = procs::loadavg();
    for v in variants.iter_mut() {
        v.run.stop();
    }
    upstream.stop();
    stop.store(true, Ordering::Relaxed);
    let _ = aux.join();

    let by_name: HashMap<String, Value> = variants
        .iter()
        .map(|v| (v.name.clone(), variant_json(&args, v)))
        .collect();
    results["variants"] = json!(by_name);
    results["order"] = json!(args.variants);
    results["setup"] = json!({
        "rounds": args.rounds,
        "round_secs": args.round_secs,
        "rate_streams_per_s": args.rate,
        "tokens": args.tokens,
        "interval_ms": args.interval_ms,
        "prefill_ms": args.prefill_ms,
        "hangup_streams": args.hangup_streams,
        "hangup_interval_ms": args.hangup_interval_ms,
        "mem_steps": args.mem_steps,
        "mem_interval_ms": args.mem_interval_ms,
        "ramp_streams_per_s": args.ramp,
        "upstream_closes_after_stream": !args.upstream_keepalive,
        "nofile_limit": nofile,
        "scheduling": if realtime { "SCHED_RR priority 1".to_string() } else if reniced { format!("nice {}", args.nice) } else { "default".to_string() },
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "otlp_sink": {
            "requests": sink_stats.requests.load(Ordering::Relaxed),
            "bytes": sink_stats.bytes.load(Ordering::Relaxed),
        },
        "metric_scrapes": scrapes.load(Ordering::Relaxed),
        "metric_scrape_errors": scrape_errors.load(Ordering::Relaxed),
        "duration_s": START.elapsed().as_secs_f64(),
    });
    derive_comparisons(&mut results, &args);
    let md = markdown(&results, &args);
    if let Some(parent) = args.out.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    std::fs::write(
        &args.out,
        serde_json::to_string_pretty(&results).expect("json"),
    )
    .expect("write json");
    let md_path = args
        .md
        .clone()
        .unwrap_or_else(|| args.out.with_extension("tables.md"));
    std::fs::write(&md_path, &md).expect("write md");
    println!("{md}");
    log(format!(
        "wrote {} and {}",
        args.out.display(),
        md_path.display()
    ));
    log(format!(
        "process logs and generated configs kept in {}",
        dir.display()
    ));
}

async fn latency_phase(args: &Args, up: SocketAddr, variants: &mut [Variant]) {
    let interval_us = (args.interval_ms * 1000.0) as u64;
    let expected_s =
        (args.prefill_ms as f64 + args.interval_ms * (args.tokens + 2) as f64) / 1000.0;
    let opts = StreamOpts {
        max_tokens: args.tokens,
        timeout: Duration::from_secs_f64(expected_s + 10.0),
        record_events: true,
    };
    set_pace(up, args.prefill_ms, interval_us, args.tokens, true).await;
    // Warm-up: pools, caches, connection reuse.
    for v in variants.iter_mut().filter(|v| v.failed.is_none()) {
        let ctr = Arc::new(Counters::default());
        let _ = client::open_loop(
            v.target.clone(),
            v.pool.clone(),
            args.rate,
            Duration::from_secs(2),
            9_000_000,
            opts.clone(),
            ctr,
        )
        .await;
        let _ = stamps(up).await;
        log(format!("warm-up {} done", v.name));
    }
    let n = variants.len();
    let mut id_base = 10_000_000u64;
    for round in 0..args.rounds {
        for j in 0..n {
            let i = (j + round) % n;
            let v = &mut variants[i];
            if v.failed.is_some() || v.run.exited() {
                if v.failed.is_none() {
                    v.failed = Some("process exited".into());
                }
                continue;
            }
            let up_root = UPSTREAM_PID.load(Ordering::Relaxed);
            let (c0, u0, s0, m0, t0) = (
                tree_cpu(v),
                procs::tree_cpu_secs(up_root),
                self_cpu(),
                machine(),
                Instant::now(),
            );
            // Every round starts with no idle connection (uvicorn closes idle
            // ones after 5 s; the others would keep them): the same for all.
            v.pool.clear();
            let ctr = Arc::new(Counters::default());
            let recs = client::open_loop(
                v.target.clone(),
                v.pool.clone(),
                args.rate,
                Duration::from_secs_f64(args.round_secs),
                id_base,
                opts.clone(),
                ctr,
            )
            .await;
            id_base += 1_000_000;
            let (c1, u1, s1, m1, wall) = (
                tree_cpu(v),
                procs::tree_cpu_secs(up_root),
                self_cpu(),
                machine(),
                t0.elapsed().as_secs_f64(),
            );
            let log_map = stamps(up).await;
            let mut summary = account(&mut v.acc, &recs, &log_map, args.tokens);
            let hz = procs::ticks_per_sec();
            let machine_cpu = (m1.busy - m0.busy) as f64 / hz;
            let ours = (c1 - c0) + (u1 - u0) + (s1 - s0);
            v.acc.cpu += c1 - c0;
            v.acc.upstream_cpu += u1 - u0;
            v.acc.client_cpu += s1 - s0;
            v.acc.others_cpu += (machine_cpu - ours).max(0.0);
            v.acc.wall += wall;
            let evs: u64 = recs.iter().map(|r| r.data_events).sum();
            summary["proxy_cpu_s"] = json!(c1 - c0);
            summary["events"] = json!(evs);
            summary["wall_s"] = json!(wall);
            summary["machine_busy_cores"] = json!(machine_cpu / wall);
            summary["others_busy_cores"] = json!((machine_cpu - ours).max(0.0) / wall);
            summary["loadavg"] = json!(procs::loadavg());
            let _ = m1.total;
            log(format!(
                "round {} {:<18} streams {:>4} errors {:>3} event p50 {:>7.1}us p99 {:>8.1}us ttft-overhead p50 {:>7.1}us  cpu {:.2}s  others {:.2} cores",
                round + 1,
                v.name,
                recs.len(),
                recs.iter().filter(|r| r.error.is_some()).count(),
                summary["event_p50_us"].as_f64().unwrap_or(f64::NAN),
                summary["event_p99_us"].as_f64().unwrap_or(f64::NAN),
                summary["ttft_overhead_p50_us"].as_f64().unwrap_or(f64::NAN),
                c1 - c0,
                (machine_cpu - ours).max(0.0) / wall,
            ));
            v.acc.rounds.push(summary);
        }
    }
    for v in variants.iter() {
        v.pool.clear();
    }
}

static UPSTREAM_PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Close latency per stream: upstream EOF time minus client close time.
fn close_latencies(recs: &[StreamRec], seen: &HashMap<u64, u64>) -> (Histogram<u64>, u64) {
    let mut h = hist();
    let mut missing = 0;
    for r in recs {
        let Some(c) = r.closed_at else { continue };
        match seen.get(&r.id) {
            Some(t) => {
                let _ = h.record(t.saturating_sub(c).max(1));
            }
            None => missing += 1,
        }
    }
    (h, missing)
}

/// Collects upstream closes until every closed stream is seen or `limit`.
async fn collect_closes(up: SocketAddr, recs: &[StreamRec], limit: Duration) -> HashMap<u64, u64> {
    let want: std::collections::HashSet<u64> = recs
        .iter()
        .filter(|r| r.closed_at.is_some())
        .map(|r| r.id)
        .collect();
    let mut seen = HashMap::new();
    let t = tokio::time::Instant::now();
    loop {
        for (id, at, _) in closes(up).await {
            seen.insert(id, at);
        }
        if want.iter().all(|id| seen.contains_key(id)) || t.elapsed() > limit {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn hangup_phase(args: &Args, up: SocketAddr, variants: &mut [Variant]) {
    let opts = StreamOpts {
        max_tokens: 100_000,
        timeout: Duration::from_secs(600),
        record_events: true,
    };
    set_pace(up, 0, args.hangup_interval_ms * 1000, 100_000, false).await;
    let mut id_base = 500_000_000u64;
    for v in variants.iter_mut() {
        if v.failed.is_some() || v.run.exited() {
            continue;
        }
        let _ = closes(up).await;
        let n = args.hangup_streams;
        let mut held = Held::new();
        let t_open = Instant::now();
        held.open(&v.target, n, args.ramp, id_base, &opts).await;
        id_base += 10_000_000;
        let ctr = held.ctr.clone();
        let all = wait_until(Duration::from_secs(30), || {
            ctr.streaming.load(Ordering::Relaxed) + ctr.errors.load(Ordering::Relaxed) >= n
        })
        .await;
        let opened_s = t_open.elapsed().as_secs_f64();
        // Steady state under load: measure event latency and CPU here.
        let steady_from = mono_ns();
        let (c0, e0, t0) = (
            tree_cpu(v),
            ctr.events.load(Ordering::Relaxed),
            Instant::now(),
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (c1, e1, wall) = (
            tree_cpu(v),
            ctr.events.load(Ordering::Relaxed),
            t0.elapsed().as_secs_f64(),
        );
        let streaming = ctr.streaming.load(Ordering::Relaxed);
        // First single hang-ups, 10 ms apart, while the rest stream on; then
        // the rest all at once (a storm: each close queues behind the others).
        let singles = (n / 5).min(200);
        held.hang_up_one_by_one(singles, Duration::from_millis(10))
            .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let storm_at = mono_ns();
        let recs = held.hang_up().await;
        let seen = collect_closes(up, &recs, Duration::from_secs(5)).await;
        // Streams a proxy never closed would go on loading it: end them.
        let _ = ctl::request(up, "POST", "/_bench/abort", b"").await;
        let single_recs: Vec<StreamRec> = recs
            .iter()
            .filter(|r| r.closed_at.is_some_and(|c| c < storm_at))
            .cloned()
            .collect();
        let storm_recs: Vec<StreamRec> = recs
            .iter()
            .filter(|r| r.closed_at.is_some_and(|c| c >= storm_at))
            .cloned()
            .collect();
        let (h, missing) = close_latencies(&single_recs, &seen);
        let (hs, missing_storm) = close_latencies(&storm_recs, &seen);
        let mut ev = hist();
        for r in &recs {
            for (arr, own) in &r.content {
                if let (true, Some(s)) = (*arr >= steady_from, own) {
                    let _ = ev.record(arr.saturating_sub(*s).max(1));
                }
            }
        }
        let errors = recs.iter().filter(|r| r.error.is_some()).count();
        let samples: Vec<String> = recs
            .iter()
            .filter_map(|r| r.error.clone())
            .take(3)
            .collect();
        let events = e1 - e0;
        let cpu_per_1k = if events > 0 {
            (c1 - c0) / events as f64 * 1000.0
        } else {
            f64::NAN
        };
        log(format!(
            "hang-up {:<18} streams {streaming}/{n} (errors {errors}) single close p50 {:?}us p99 {:?}us max {:?}us, not seen {missing}; storm p50 {:?}us p99 {:?}us not seen {missing_storm}; event p50 {:?}us p99 {:?}us",
            v.name,
            pct(&h, 0.5),
            pct(&h, 0.99),
            (!h.is_empty()).then(|| h.max() / 1000),
            pct(&hs, 0.5),
            pct(&hs, 0.99),
            pct(&ev, 0.5),
            pct(&ev, 0.99),
        ));
        v.hangup = Some(json!({
            "streams": n,
            "all_streaming": all,
            "streaming": streaming,
            "open_s": opened_s,
            "errors": errors,
            "error_samples": samples,
            "single_hangups": single_recs.len(),
            "close": summary(&h),
            "close_not_seen_within_5s": missing,
            "storm_hangups": storm_recs.len(),
            "storm_close": summary(&hs),
            "storm_close_not_seen_within_5s": missing_storm,
            "event_latency_under_load": summary(&ev),
            "events_per_s": events as f64 / wall,
            "cpu_s_per_1k_events": cpu_per_1k,
        }));
        // Let every socket settle before the next variant.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn memory_phase(args: &Args, up: SocketAddr, variants: &mut [Variant]) {
    let opts = StreamOpts {
        max_tokens: 100_000,
        timeout: Duration::from_secs(900),
        record_events: false,
    };
    set_pace(up, 0, args.mem_interval_ms * 1000, 100_000, false).await;
    let mut id_base = 2_000_000_000u64;
    for v in variants.iter_mut() {
        if v.failed.is_some() || v.run.exited() {
            continue;
        }
        let _ = closes(up).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut steps = vec![json!({"streams": 0, "rss_kib": tree_rss(v), "fds": tree_fds(v)})];
        let mut held = Held::new();
        let mut opened = 0u64;
        let ctr = held.ctr.clone();
        for &target in &args.mem_steps {
            if opened > 0 && ctr.streaming.load(Ordering::Relaxed) < opened / 2 {
                log(format!(
                    "memory {:<18} fewer than half of {opened} streaming: no larger step",
                    v.name
                ));
                break;
            }
            let more = target.saturating_sub(opened);
            let t = Instant::now();
            held.open(&v.target, more, args.ramp, id_base, &opts).await;
            opened = target;
            let all = wait_until(Duration::from_secs(30), || {
                ctr.streaming.load(Ordering::Relaxed) + ctr.errors.load(Ordering::Relaxed) >= opened
            })
            .await;
            tokio::time::sleep(Duration::from_secs(3)).await;
            let streaming = ctr.streaming.load(Ordering::Relaxed);
            let errors = ctr.errors.load(Ordering::Relaxed);
            let rss = tree_rss(v);
            log(format!(
                "memory {:<18} {streaming}/{target} streaming, {errors} errors, RSS {} KiB, fds {} ({:.1}s)",
                v.name,
                rss,
                tree_fds(v),
                t.elapsed().as_secs_f64()
            ));
            steps.push(json!({
                "streams": target,
                "streaming": streaming,
                "errors": errors,
                "all_streaming": all,
                "rss_kib": rss,
                "fds": tree_fds(v),
                "alive": !v.run.exited(),
            }));
        }
        id_base += 100_000_000;
        // Hold: every stream must keep receiving events.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let hang_at = mono_ns();
        let recs = held.hang_up().await;
        let window = 2 * args.mem_interval_ms * 1_000_000 + 500_000_000;
        let held_ok = recs
            .iter()
            .filter(|r| {
                r.error.is_none()
                    && r.first_content.is_some()
                    && r.last_arrival
                        .is_some_and(|t| hang_at.saturating_sub(t) <= window)
            })
            .count();
        let errors = recs.iter().filter(|r| r.error.is_some()).count();
        let mut kinds: HashMap<String, u64> = HashMap::new();
        for e in recs.iter().filter_map(|r| r.error.as_ref()) {
            *kinds.entry(e.clone()).or_default() += 1;
        }
        let seen = collect_closes(up, &recs, Duration::from_secs(10)).await;
        let _ = ctl::request(up, "POST", "/_bench/abort", b"").await;
        let (h, missing) = close_latencies(&recs, &seen);
        log(format!(
            "memory {:<18} held {held_ok}/{} without error; storm close p50 {:?}us p99 {:?}us, not seen {missing}",
            v.name,
            recs.len(),
            pct(&h, 0.5),
            pct(&h, 0.99)
        ));
        v.memory = Some(json!({
            "steps": steps,
            "held_ok": held_ok,
            "streams": recs.len(),
            "errors": errors,
            "error_kinds": kinds,
            "alive_after": !v.run.exited(),
            "storm_close": summary(&h),
            "storm_close_not_seen_within_10s": missing,
        }));
        // Sockets in TIME_WAIT and the proxy's own cleanup.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

async fn real_phase(args: &Args, dir: &Path, sink: SocketAddr, model: &Path) -> Value {
    if !args.llama_server.exists() || !model.exists() {
        return json!({"skipped": format!("{} or {} missing (scripts/ensure-deps.sh builds them)", args.llama_server.display(), model.display())});
    }
    let mut ls = match proxies::start_llama_server(&args.llama_server, model, dir) {
        Ok(r) => r,
        Err(e) => return json!({"skipped": format!("cannot start llama-server: {e}")}),
    };
    let ok = {
        let t = tokio::time::Instant::now();
        loop {
            if matches!(ctl::get(ls.addr, "/health").await, Some((200, _))) {
                break true;
            }
            if t.elapsed() > Duration::from_secs(120) || ls.exited() {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    if !ok {
        ls.stop();
        return json!({"skipped": "llama-server did not become healthy"});
    }
    let kind = Kind::Llamatap {
        threads: 2,
        full: true,
        alt: false,
    };
    let mut lt = match proxies::start(
        "llamatap-real",
        &kind,
        ls.addr,
        sink,
        dir,
        &args.llamatap,
        &args.llamatap_alt,
        &args.venv,
    ) {
        Ok(r) => r,
        Err(e) => {
            ls.stop();
            return json!({"skipped": format!("cannot start llamatap: {e}")});
        }
    };
    let direct = Target {
        name: "direct".into(),
        addr: ls.addr,
        model: "tiny.gguf".into(),
        auth: None,
    };
    let via = Target {
        name: "llamatap".into(),
        addr: lt.addr,
        model: "tiny.gguf".into(),
        auth: None,
    };
    let opts = StreamOpts {
        max_tokens: 8,
        timeout: Duration::from_secs(60),
        record_events: true,
    };
    let ctr = Counters::default();
    // Wait for llamatap, and warm both paths.
    for _ in 0..100 {
        let r = client::run_stream(&via, None, 1, &opts, None, &ctr).await;
        if r.error.is_none() && r.first_content.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = client::run_stream(&direct, None, 2, &opts, None, &ctr).await;
    let (mut hd, mut hp) = (hist(), hist());
    let mut diffs: Vec<f64> = Vec::new();
    let mut errors = 0;
    let mut seq: Vec<Value> = Vec::new();
    for i in 0..args.real_requests {
        let mut pair = [0u64; 2];
        let order: [usize; 2] = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for which in order {
            let t = if which == 0 { &direct } else { &via };
            let r = client::run_stream(
                t,
                None,
                100 + i as u64 * 2 + which as u64,
                &opts,
                None,
                &ctr,
            )
            .await;
            seq.push(json!({
                "side": if which == 0 { "direct" } else { "llamatap" },
                "ttft_us": r.first_content.map(|f| (f - r.t_start) as f64 / 1000.0),
                "error": r.error.clone(),
            }));
            match (r.error, r.first_content) {
                (None, Some(f)) => {
                    let ttft = f - r.t_start;
                    pair[which] = ttft;
                    let _ = if which == 0 {
                        hd.record(ttft)
                    } else {
                        hp.record(ttft)
                    };
                }
                _ => errors += 1,
            }
        }
        if pair[0] > 0 && pair[1] > 0 {
            diffs.push((pair[1] as f64 - pair[0] as f64) / 1000.0);
        }
    }
    diffs.sort_by(|a, b| a.total_cmp(b));
    let med = diffs.get(diffs.len() / 2).copied();
    lt.stop();
    ls.stop();
    log(format!(
        "real llama-server: TTFT direct p50 {:?}us, via llamatap p50 {:?}us, paired difference median {:?}us",
        pct(&hd, 0.5),
        pct(&hp, 0.5),
        med
    ));
    json!({
        "model": model.file_name().map(|n| n.to_string_lossy().into_owned()),
        "requests_per_side": args.real_requests,
        "max_tokens": 8,
        "errors": errors,
        "ttft_direct": summary(&hd),
        "ttft_llamatap": summary(&hp),
        "paired_difference_median_us": med,
        "paired_difference_p10_us": diffs.get(diffs.len() / 10).copied(),
        "paired_difference_p90_us": diffs.get(diffs.len() * 9 / 10).copied(),
        "llamatap": "full telemetry (OTLP/HTTP to the sink, metrics on), --threads 2",
        "sequence": seq,
    })
}

/// The plain-request phase: every variant but LiteLLM in front of one real
/// llama-server.
async fn plain_phase(args: &Args, dir: &Path, sink: SocketAddr) -> Value {
    if !args.llama_server.exists() || !args.model.exists() {
        return json!({"skipped": format!("{} or {} missing (scripts/ensure-deps.sh builds them)", args.llama_server.display(), args.model.display())});
    }
    let mut ls = match proxies::start_llama_server(&args.llama_server, &args.model, dir) {
        Ok(r) => r,
        Err(e) => return json!({"skipped": format!("cannot start llama-server: {e}")}),
    };
    let mut running: Vec<(String, Running)> = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    for name in &args.variants {
        let Some(kind) = Kind::parse(name) else {
            continue;
        };
        if matches!(kind, Kind::Litellm { .. }) {
            continue;
        }
        let run_name = format!("plain-{name}");
        match proxies::start(
            &run_name,
            &kind,
            ls.addr,
            sink,
            dir,
            &args.llamatap,
            &args.llamatap_alt,
            &args.venv,
        ) {
            Ok(r) => running.push((name.clone(), r)),
            Err(e) => failed.push(format!("{name}: {e}")),
        }
    }
    // Ready: llama-server healthy, and a /health through every side.
    let t = tokio::time::Instant::now();
    let mut ready = false;
    while t.elapsed() < Duration::from_secs(120) && !ls.exited() {
        let mut all = true;
        for (_, r) in &running {
            all &= matches!(ctl::get(r.addr, "/health").await, Some((200, _)));
        }
        if all {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let result = if !ready {
        json!({"skipped": "llama-server or a proxy in front of it did not become ready"})
    } else {
        let sides: Vec<llamatap_bench::plain::Side> = running
            .iter()
            .map(|(name, r)| llamatap_bench::plain::Side {
                name: name.clone(),
                addr: r.addr,
                pid: r.pid(),
            })
            .collect();
        let upstream_pid = ls.pid().unwrap_or(0);
        let mut r = llamatap_bench::plain::run(
            &sides,
            upstream_pid,
            args.plain_rounds,
            args.plain_requests,
        )
        .await;
        r["failed_to_start"] = json!(failed);
        log(llamatap_bench::plain::markdown(&r));
        r
    };
    for (_, r) in running.iter_mut() {
        r.stop();
    }
    ls.stop();
    result
}

/// Two scripted upstreams behind each llamatap build in turn; answers whole
/// and cut (continued on the other upstream), llamatap's CPU per answer.
async fn continuation_phase(args: &Args, dir: &Path, up_bin: &Path) -> Value {
    let mut ups = [
        proxies::start_upstream(up_bin, dir, false),
        proxies::start_upstream(up_bin, dir, false),
    ];
    for u in &ups {
        set_pace(u.addr, 1, 1000, 64, false).await;
    }
    let mut builds = serde_json::Map::new();
    let mut paths = vec![("llamatap", args.llamatap.clone())];
    if args.llamatap_alt != args.llamatap {
        paths.push(("alt-llamatap", args.llamatap_alt.clone()));
    }
    for (name, bin) in paths {
        let addr = proxies::free_addr();
        let admin = proxies::free_addr();
        let log = dir.join(format!("continuation-{name}.log"));
        let Ok(f) = std::fs::File::create(&log) else {
            continue;
        };
        let child = std::process::Command::new(&bin)
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--upstream")
            .arg(format!("http://{}", ups[0].addr))
            .arg("--upstream")
            .arg(format!("http://{}", ups[1].addr))
            .arg("--admin-listen")
            .arg(admin.to_string())
            .arg("--threads")
            .arg("1")
            .env_remove("LLAMATAP_CONFIG")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdout(std::process::Stdio::null())
            .stderr(f)
            .spawn();
        let Ok(mut child) = child else {
            builds.insert(name.into(), json!({"skipped": "cannot start"}));
            continue;
        };
        let t = tokio::time::Instant::now();
        let mut ready = false;
        while t.elapsed() < Duration::from_secs(30) {
            let m = ctl::get(admin, "/metrics")
                .await
                .map(|(_, b)| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            if m.lines()
                .filter(|l| l.starts_with("llamatap_upstream_up{") && l.ends_with(" 1"))
                .count()
                == 2
            {
                ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let r = if ready {
            llamatap_bench::continuation::run(addr, child.id(), args.continuation_rounds, 64, 16)
                .await
        } else {
            json!({"skipped": "the upstreams never came up"})
        };
        let _ = child.kill();
        let _ = child.wait();
        builds.insert(name.into(), r);
    }
    for u in ups.iter_mut() {
        u.stop();
    }
    let r = json!({"builds": builds});
    log(llamatap_bench::continuation::markdown(&r));
    r
}

fn variant_json(args: &Args, v: &Variant) -> Value {
    let a = &v.acc;
    let per_1k = |cpu: f64| {
        if a.data_events > 0 {
            Some(cpu / a.data_events as f64 * 1000.0)
        } else {
            None
        }
    };
    json!({
        "kind": format!("{:?}", v.kind),
        "failed": v.failed,
        "log": v.run.log.as_ref().map(|p| p.display().to_string()),
        "latency": {
            "streams": a.streams,
            "errors": a.errors,
            "error_samples": a.error_samples,
            "ttft": summary(&a.ttft),
            "ttft_overhead": summary(&a.ttft_over),
            "event_latency": summary(&a.ev),
            "event_gap": summary(&a.gap),
            "merged_events": a.merged,
            "merged_reads": a.merged_reads,
            "reads": a.reads,
            "data_events": a.data_events,
            "content_events": a.content_events,
            "streams_with_wrong_token_count": a.short_streams,
            "events_without_stamp": a.missing_stamps,
            "stamps_from_upstream_log": a.stamps_from_log,
            "proxy_cpu_s": a.cpu,
            "proxy_cpu_s_per_1k_events": per_1k(a.cpu),
            "upstream_cpu_s_per_1k_events": per_1k(a.upstream_cpu),
            "client_cpu_s_per_1k_events": per_1k(a.client_cpu),
            "others_busy_cores": if a.wall > 0.0 { a.others_cpu / a.wall } else { 0.0 },
            "wall_s": a.wall,
            "rounds": a.rounds,
            "interval_ms": args.interval_ms,
        },
        "hangup": v.hangup,
        "memory": v.memory,
    })
}

fn f(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// Added latency vs direct, ratios vs nginx, memory slopes.
fn derive_comparisons(results: &mut Value, args: &Args) {
    let vars = results["variants"].clone();
    let direct = &vars["direct"]["latency"];
    let mut out = serde_json::Map::new();
    for name in &args.variants {
        let l = &vars[name]["latency"];
        let mut c = serde_json::Map::new();
        for (key, metric) in [("ttft", "ttft_overhead"), ("event", "event_latency")] {
            for q in ["p50_us", "p99_us", "p999_us"] {
                if let (Some(x), Some(d)) = (f(&l[metric][q]), f(&direct[metric][q])) {
                    c.insert(format!("added_{key}_{q}"), json!(x - d));
                }
            }
        }
        let m = &vars[name]["memory"];
        if let Some(steps) = m["steps"].as_array() {
            let pts: Vec<(f64, f64)> = steps
                .iter()
                .filter_map(|s| Some((f(&s["streaming"]).or(f(&s["streams"]))?, f(&s["rss_kib"])?)))
                .collect();
            if pts.len() >= 2 {
                let (s0, r0) = pts[0];
                let (s1, r1) = pts[1];
                if s1 > s0 {
                    c.insert(
                        "kib_per_stream_0_to_first".into(),
                        json!((r1 - r0) / (s1 - s0)),
                    );
                }
                if let Some(&(sn, rn)) = pts.last() {
                    if pts.len() >= 3 && sn > s1 {
                        c.insert(
                            "kib_per_stream_first_to_last".into(),
                            json!((rn - r1) / (sn - s1)),
                        );
                    }
                }
            }
        }
        out.insert(name.clone(), Value::Object(c));
    }
    // Ratios: llamatap against nginx with the same worker count.
    for name in &args.variants {
        let Some(Kind::Llamatap { threads, .. }) = Kind::parse(name) else {
            continue;
        };
        let threads = threads.min(2);
        let ng = format!("nginx-w{threads}");
        if vars[&ng].is_null() {
            continue;
        }
        let mut r = serde_json::Map::new();
        r.insert("vs".into(), json!(ng));
        let cpu = |n: &str| f(&vars[n]["latency"]["proxy_cpu_s_per_1k_events"]);
        if let (Some(a), Some(b)) = (cpu(name), cpu(&ng)) {
            r.insert("cpu_ratio".into(), json!(a / b));
        }
        for k in [
            "added_ttft_p50_us",
            "added_ttft_p99_us",
            "added_event_p50_us",
            "added_event_p99_us",
        ] {
            if let (Some(a), Some(b)) = (f(&out[name][k]), f(&out[&ng][k])) {
                r.insert(format!("{k}_minus_nginx"), json!(a - b));
            }
        }
        if let Some(Value::Object(o)) = out.get_mut(name) {
            o.insert("vs_nginx".into(), Value::Object(r));
        }
    }
    for t in [1, 2] {
        let (full, off) = (format!("llamatap-full-t{t}"), format!("llamatap-off-t{t}"));
        let cpu = |n: &str| f(&vars[n]["latency"]["proxy_cpu_s_per_1k_events"]);
        if let (Some(a), Some(b)) = (cpu(&full), cpu(&off)) {
            out.insert(format!("telemetry_cpu_ratio_t{t}"), json!(a / b));
        }
    }
    results["comparisons"] = Value::Object(out);
}

fn us(v: &Value) -> String {
    match v.as_f64() {
        Some(x) if x.abs() >= 10_000.0 => format!("{:.1} ms", x / 1000.0),
        Some(x) if x.abs() >= 100.0 => format!("{x:.0}"),
        Some(x) => format!("{x:.1}"),
        None => "–".into(),
    }
}

fn signed(v: &Value) -> String {
    match v.as_f64() {
        Some(x) if x >= 0.0 => format!("+{}", us(v)),
        Some(_) => us(v),
        None => "–".into(),
    }
}

fn markdown(r: &Value, args: &Args) -> String {
    let mut s = String::new();
    let set = &r["setup"];
    s += &format!(
        "Load: open loop, {} streams/s for {} s per variant per round, {} interleaved rounds; \
         each stream: {} ms prefill, {} tokens {} ms apart (about 250 B per event). \
         Load average before/after: {} / {}. Other processes on the box used on average {} cores during the rounds (see JSON per variant).\n\n",
        args.rate, args.round_secs, args.rounds, args.prefill_ms, args.tokens, args.interval_ms,
        set["loadavg_before"].as_str().unwrap_or("?"),
        set["loadavg_after"].as_str().unwrap_or("?"),
        {
            let v: Vec<f64> = args.variants.iter().filter_map(|n| r["variants"][n]["latency"]["others_busy_cores"].as_f64()).collect();
            if v.is_empty() { "?".to_string() } else { format!("{:.2}", v.iter().sum::<f64>() / v.len() as f64) }
        }
    );
    s += "Latencies in µs. TTFT overhead = TTFT minus the upstream's own think time (request received → first token sent); \
          added = variant minus direct at the same percentile.\n\n";
    s += "| variant | streams (errors) | TTFT p50 / p99 | TTFT overhead p50 / p99 | added TTFT p50 / p99 | event p50 / p95 / p99 / p99.9 | added event p50 / p99 | gap p99 | merged events | proxy CPU s per 1k events |\n";
    s += "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
    for name in &args.variants {
        let v = &r["variants"][name];
        let l = &v["latency"];
        let c = &r["comparisons"][name];
        if let Some(fail) = v["failed"].as_str() {
            s += &format!("| {name} | failed: {fail} | | | | | | | | |\n");
            continue;
        }
        s += &format!(
            "| {name} | {} ({}) | {} / {} | {} / {} | {} / {} | {} / {} / {} / {} | {} / {} | {} | {} | {} |\n",
            l["streams"], l["errors"],
            us(&l["ttft"]["p50_us"]), us(&l["ttft"]["p99_us"]),
            us(&l["ttft_overhead"]["p50_us"]), us(&l["ttft_overhead"]["p99_us"]),
            signed(&c["added_ttft_p50_us"]), signed(&c["added_ttft_p99_us"]),
            us(&l["event_latency"]["p50_us"]), us(&l["event_latency"]["p95_us"]), us(&l["event_latency"]["p99_us"]), us(&l["event_latency"]["p999_us"]),
            signed(&c["added_event_p50_us"]), signed(&c["added_event_p99_us"]),
            us(&l["event_gap"]["p99_us"]),
            l["merged_events"],
            l["proxy_cpu_s_per_1k_events"].as_f64().map_or("–".into(), |x| format!("{x:.3}")),
        );
    }
    s += "\n";
    s += &format!(
        "Held streams: hang-ups with {} streams open ({} ms between tokens, so about {} events/s): first a fifth of them (at most 200) one by one, 10 ms apart, while the rest stream on, then the rest all at once; memory with slow streams ({} ms between tokens) at {:?} open, then all hung up at once.\n\n",
        args.hangup_streams,
        args.hangup_interval_ms,
        args.hangup_streams * 1000 / args.hangup_interval_ms.max(1),
        args.mem_interval_ms,
        args.mem_steps
    );
    s += "| variant | single hang-up → upstream close p50 / p99 / max (not seen) | storm of the rest: p50 / p99 (not seen) | event p50 / p99 at that load | CPU s per 1k events at that load | RSS at 0 / steps (MiB) | KiB per stream (0→first, first→last) | held without error | storm close at the last step p50 / p99 | errors |\n";
    s += "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
    for name in &args.variants {
        let v = &r["variants"][name];
        if v["failed"].is_string() {
            continue;
        }
        let h = &v["hangup"];
        let m = &v["memory"];
        let c = &r["comparisons"][name];
        let rss: Vec<String> = m["steps"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|s| {
                        s["rss_kib"]
                            .as_f64()
                            .map_or("–".into(), |k| format!("{:.1}", k / 1024.0))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let kib = |k: &str| c[k].as_f64().map_or("–".into(), |x| format!("{x:.1}"));
        let errors: Vec<String> = m["error_kinds"]
            .as_object()
            .map(|o| o.iter().map(|(k, v)| format!("{v}× {k}")).collect())
            .unwrap_or_default();
        s += &format!(
            "| {name} | {} / {} / {} ({}) | {} / {} ({}) | {} / {} | {} | {} | {} , {} | {} / {} | {} / {} | {} |\n",
            us(&h["close"]["p50_us"]),
            us(&h["close"]["p99_us"]),
            us(&h["close"]["max_us"]),
            h["close_not_seen_within_5s"],
            us(&h["storm_close"]["p50_us"]),
            us(&h["storm_close"]["p99_us"]),
            h["storm_close_not_seen_within_5s"],
            us(&h["event_latency_under_load"]["p50_us"]),
            us(&h["event_latency_under_load"]["p99_us"]),
            h["cpu_s_per_1k_events"]
                .as_f64()
                .map_or("–".into(), |x| format!("{x:.3}")),
            rss.join(" / "),
            kib("kib_per_stream_0_to_first"),
            kib("kib_per_stream_first_to_last"),
            m["held_ok"],
            m["streams"],
            us(&m["storm_close"]["p50_us"]),
            us(&m["storm_close"]["p99_us"]),
            if errors.is_empty() {
                "0".into()
            } else {
                errors.join("; ")
            },
        );
    }
    for (key, what) in [
        ("real_llama_server", "tiny random-weight model"),
        (
            "real_model",
            "real instruct model, SmolLM2-135M-Instruct Q4_1",
        ),
    ] {
        let real = &r[key];
        if real.is_object() && real["skipped"].is_null() {
            s += &format!(
            "\nReal llama-server ({what}, {} requests per side, alternating, new connection each, max_tokens 8): \
             TTFT (µs unless marked ms) direct p50 {} / p95 {}; through llamatap (full telemetry) p50 {} / p95 {}; \
             paired difference (llamatap − direct) median {} (p10 {}, p90 {}); errors {}.\n",
            real["requests_per_side"],
            us(&real["ttft_direct"]["p50_us"]), us(&real["ttft_direct"]["p95_us"]),
            us(&real["ttft_llamatap"]["p50_us"]), us(&real["ttft_llamatap"]["p95_us"]),
            signed(&real["paired_difference_median_us"]),
            signed(&real["paired_difference_p10_us"]),
            signed(&real["paired_difference_p90_us"]),
            real["errors"],
        );
        } else if real.is_object() {
            s += &format!(
                "\nReal llama-server ({what}): skipped ({}).\n",
                real["skipped"]
            );
        }
    }
    if r["continuation"]["builds"].is_object() {
        s += &llamatap_bench::continuation::markdown(&r["continuation"]);
    }
    let plain = &r["plain"];
    if plain["sides"].is_object() {
        s += &llamatap_bench::plain::markdown(plain);
    } else if plain.is_object() {
        s += &format!("\nPlain requests: skipped ({}).\n", plain["skipped"]);
    }
    s
}
