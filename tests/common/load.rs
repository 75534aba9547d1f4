//! A chat workload against llamatap or llama-server: streamed answers as
//! the client saw them (time to first token, tokens, whether whole), a
//! batch flood with interactive probes, llama-server's own queue sampled
//! meanwhile, and the figures printed as a table.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::fleet::{percentile, series, wait_for};
use super::http;
use super::llama::LlamaServer;

pub const NP2: [&str; 4] = ["-np", "2", "-c", "4096"];
/// Two slots of 262,144 tokens each (llama-server caps a slot at the
/// model's trained context, so that is raised too): a held answer of
/// [`HOLD_TOKENS`] runs for minutes even at the tiny model's best speed
/// (about 2,000 tokens/s at the start, slower as its context grows).
pub const HOLD_NP2: [&str; 6] = [
    "-np",
    "2",
    "-c",
    "524288",
    "--override-kv",
    "llama.context_length=int:262144",
];
/// The length of a held answer.
pub const HOLD_TOKENS: u32 = 250_000;

pub const VOICE: &str = "sk-voice-0123456789";

pub const BULK: &str = "sk-bulk-0123456789";

pub const OTHER: &str = "sk-other-0123456789";

pub const VOICE_H: &[(&str, &str)] = &[("Authorization", "Bearer sk-voice-0123456789")];

pub const BULK_H: &[(&str, &str)] = &[("Authorization", "Bearer sk-bulk-0123456789")];

pub const OTHER_H: &[(&str, &str)] = &[("Authorization", "Bearer sk-other-0123456789")];

pub const NONE: &[(&str, &str)] = &[];

/// One streamed chat answer as the client saw it.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub ttft: Option<Duration>,
    pub elapsed: Duration,
    pub tokens: u64,
    pub retry_after: Option<String>,
    pub body: String,
}

pub fn body(prompt: &str, max_tokens: u32) -> String {
    serde_json::json!({
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "ignore_eos": true,
        "stream": true,
        "stream_options": {"include_usage": true},
    })
    .to_string()
}

/// Why a streamed answer is not one whole answer of `max_tokens` tokens
/// (one id, no error event, `[DONE]` last, content events and
/// `usage.completion_tokens` within 3% of `max_tokens`), if it is not.
pub fn not_whole(a: &Answer, max_tokens: u32) -> Option<String> {
    let data = http::sse_data(a.body.as_bytes());
    let mut ids = Vec::new();
    let mut events = 0u64;
    let mut completion = None;
    for d in &data {
        let Ok(v) = serde_json::from_str::<Value>(d) else {
            continue;
        };
        if v.get("error").is_some() {
            return Some(format!("an error event: {d}"));
        }
        if let Some(id) = v["id"].as_str() {
            if !ids.iter().any(|i| i == id) {
                ids.push(id.to_string());
            }
        }
        if v["choices"][0]["delta"]["content"]
            .as_str()
            .is_some_and(|c| !c.is_empty())
        {
            events += 1;
        }
        if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
            completion = Some(n);
        }
    }
    let near = |n: u64| (n as f64 - f64::from(max_tokens)).abs() <= f64::from(max_tokens) * 0.03;
    if data.last().map(String::as_str) != Some("[DONE]") {
        Some("no [DONE] at the end".into())
    } else if ids.len() != 1 {
        Some(format!("ids {ids:?}"))
    } else if !near(events) {
        Some(format!("{events} content events"))
    } else if !completion.is_some_and(near) {
        Some(format!("usage.completion_tokens {completion:?}"))
    } else {
        None
    }
}

/// Sends a streamed chat request with `headers` and reads the whole answer.
pub fn chat(addr: &str, headers: &[(&str, &str)], prompt: &str, max_tokens: u32) -> Answer {
    chat_counting(addr, headers, prompt, max_tokens, None)
}

/// As [`chat`], adding each content event to `streamed` as it arrives.
pub fn chat_counting(
    addr: &str,
    headers: &[(&str, &str)],
    prompt: &str,
    max_tokens: u32,
    streamed: Option<&AtomicU64>,
) -> Answer {
    chat_body(addr, headers, &body(prompt, max_tokens), streamed)
}

/// As [`chat`], naming `model`.
pub fn chat_model(
    addr: &str,
    headers: &[(&str, &str)],
    model: &str,
    prompt: &str,
    max_tokens: u32,
) -> Answer {
    let mut b: Value = serde_json::from_str(&body(prompt, max_tokens)).unwrap();
    b["model"] = Value::String(model.to_string());
    chat_body(addr, headers, &b.to_string(), None)
}

/// Sends the streamed chat request `b` and reads the whole answer.
fn chat_body(
    addr: &str,
    headers: &[(&str, &str)],
    b: &str,
    streamed: Option<&AtomicU64>,
) -> Answer {
    let sent = Instant::now();
    let mut r = match http::send(addr, "POST", "/v1/chat/completions", headers, b.as_bytes()) {
        Ok(r) => r,
        Err(e) => {
            return Answer {
                status: 0,
                ttft: None,
                elapsed: sent.elapsed(),
                tokens: 0,
                retry_after: None,
                body: e.to_string(),
            }
        }
    };
    let status = r.head.status;
    let retry_after = r.head.header("retry-after").map(str::to_string);
    let mut raw = Vec::new();
    let mut ttft = None;
    while let Ok(Some(p)) = r.next_piece() {
        if ttft.is_none() && status == 200 && has_content(&p) {
            ttft = Some(sent.elapsed());
        }
        if let Some(c) = streamed {
            c.fetch_add(content_events(&p), Ordering::Relaxed);
        }
        raw.extend_from_slice(&p);
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let mut tokens = 0;
    for d in http::sse_data(&raw) {
        if let Ok(v) = serde_json::from_str::<Value>(&d) {
            if let Some(n) = v["timings"]["predicted_n"].as_u64() {
                tokens = n;
            }
        }
    }
    Answer {
        status,
        ttft,
        elapsed: sent.elapsed(),
        tokens,
        retry_after,
        body: text,
    }
}

/// A piece carries a non-empty `"content"` string.
pub fn has_content(piece: &[u8]) -> bool {
    content_events(piece) > 0
}

/// Non-empty `"content"` strings in a piece: tokens streamed.
pub fn content_events(piece: &[u8]) -> u64 {
    let text = String::from_utf8_lossy(piece);
    text.match_indices("\"content\":\"")
        .filter(|(i, m)| text[i + m.len()..].chars().next().is_some_and(|c| c != '"'))
        .count() as u64
}

pub fn metrics(admin: &str) -> String {
    http::get(admin, "/metrics")
        .map(|(_, b)| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

pub fn keys() -> String {
    format!(
        "[[auth.keys]]\nname = \"voice\"\nkey = \"{VOICE}\"\npriority = \"interactive\"\n\
         [[auth.keys]]\nname = \"bulk\"\nkey = \"{BULK}\"\npriority = \"batch\"\n\
         [[auth.keys]]\nname = \"other\"\nkey = \"{OTHER}\"\npriority = \"batch\"\n"
    )
}

/// Samples llama-server's own queue while `work` runs; the largest value.
pub fn max_deferred_during(llama: &LlamaServer, work: impl FnOnce()) -> f64 {
    sample_during(&[llama], work).1.deferred[0]
}

/// Waits until every pause `proxy` counted has its continuation recorded
/// (`llamatap_preemptions_total{class="batch"}` equals the preempted
/// continuations), and `more` holds of the metrics too; the metrics then,
/// the batch answers paused and those continued.
pub fn paused_and_continued(
    proxy: &super::proxy::Llamatap,
    more: impl Fn(&str) -> bool,
) -> (String, f64, f64) {
    let m = proxy.wait_metrics(Duration::from_secs(10), |m| {
        more(m)
            && series(m, "llamatap_preemptions_total", "class=\"batch\"")
                == series(m, "llamatap_continuations_total", "reason=\"preempted\"")
    });
    let paused = series(&m, "llamatap_preemptions_total", "class=\"batch\"").unwrap_or(0.0);
    let continued = series(
        &m,
        "llamatap_continuations_total",
        "reason=\"preempted\",result=\"continued\"",
    )
    .unwrap_or(0.0);
    (m, paused, continued)
}

/// Figures of one flood run.
pub struct Flood {
    pub probe_ttft: Vec<Duration>,
    pub batch_tokens: u64,
    pub wall: Duration,
    pub errors: usize,
    /// Batch answers (status 200) that were not whole, and why.
    pub broken: Vec<String>,
}

/// Runs `flooders` batch clients in a loop against `addr`, and sends
/// interactive probes one after another (300 ms apart) for `window`; batch
/// tokens per second are the content events the batch clients received
/// within the window.
pub fn flood(
    addr: &str,
    batch_headers: &'static [(&'static str, &'static str)],
    probe_headers: &'static [(&'static str, &'static str)],
    flooders: usize,
    window: Duration,
) -> Flood {
    let batch = [addr.to_string()];
    flood_with(
        &batch,
        Some(addr),
        batch_headers,
        probe_headers,
        flooders,
        window,
        |_| {},
    )
}

/// As [`flood`], with the batch clients spread over `batch` (client `i`
/// on `batch[i % len]`), the probes sent to `probe` (none: no probes), and
/// `at` called with the time into the window every 100 ms or so (to kill
/// or restart something mid-flood).
pub fn flood_with(
    batch: &[String],
    probe: Option<&str>,
    batch_headers: &'static [(&'static str, &'static str)],
    probe_headers: &'static [(&'static str, &'static str)],
    flooders: usize,
    window: Duration,
    mut at: impl FnMut(Duration),
) -> Flood {
    let stop = Arc::new(AtomicBool::new(false));
    let tokens = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let broken = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sent = Arc::new(AtomicU64::new(0));
    let hs: Vec<_> = (0..flooders)
        .map(|i| {
            let (a, s, t, e, c, b) = (
                batch[i % batch.len()].clone(),
                stop.clone(),
                tokens.clone(),
                errors.clone(),
                sent.clone(),
                broken.clone(),
            );
            std::thread::spawn(move || {
                let mut n = 0;
                while !s.load(Ordering::Relaxed) {
                    c.fetch_add(1, Ordering::Relaxed);
                    let prompt = format!("Summarise document {i}-{n}.");
                    let r = chat_counting(&a, batch_headers, &prompt, 160, Some(&t));
                    if r.status != 200 {
                        e.fetch_add(1, Ordering::Relaxed);
                    } else if let Some(why) = not_whole(&r, 160) {
                        b.lock().unwrap().push(why);
                    }
                    n += 1;
                }
            })
        })
        .collect();
    // Let the flood fill every slot and the queue first: every flooder has
    // a request out, and answers stream.
    assert!(
        wait_for(Duration::from_secs(30), || {
            sent.load(Ordering::Relaxed) >= flooders as u64 && tokens.load(Ordering::Relaxed) > 0
        })
        .is_some(),
        "the flood never started"
    );
    let t0 = Instant::now();
    let k0 = tokens.load(Ordering::Relaxed);
    let mut probe_ttft = Vec::new();
    let mut i = 0;
    while t0.elapsed() < window {
        at(t0.elapsed());
        let Some(addr) = probe else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let r = chat(addr, probe_headers, &format!("Quick question {i}?"), 4);
        if let Some(t) = r.ttft {
            probe_ttft.push(t);
        } else {
            errors.fetch_add(1, Ordering::Relaxed);
        }
        i += 1;
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(100));
            at(t0.elapsed());
        }
    }
    let batch_tokens = tokens.load(Ordering::Relaxed) - k0;
    let wall = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        // A batch answer still running finishes (never refused: no deadline).
        h.join().unwrap();
    }
    let broken_now = std::mem::take(&mut *broken.lock().unwrap());
    Flood {
        probe_ttft,
        batch_tokens,
        wall,
        errors: errors.load(Ordering::Relaxed) as usize,
        broken: broken_now,
    }
}

pub fn idle_ttft(
    addr: &str,
    headers: &'static [(&'static str, &'static str)],
    n: usize,
) -> Vec<Duration> {
    (0..n)
        .filter_map(|i| chat(addr, headers, &format!("Quick question {i}?"), 4).ttft)
        .collect()
}

/// How long each flood is measured.
pub const WINDOW: Duration = Duration::from_secs(6);

/// Prints one table row per path (idle and flood TTFT, batch tokens/s,
/// errors); each path's flood p95 and idle p95 (ms), batch tokens/s and
/// errors.
pub fn print_rows<S: std::fmt::Display>(
    title: &str,
    rows: &[(S, Vec<Duration>, Flood)],
) -> Vec<(f64, f64, f64, usize)> {
    eprintln!(
        "\n{title}\n\
         | path | idle TTFT p50 / p95 ms | flood TTFT p50 / p95 ms | p95 flood / idle | batch tokens/s | errors |\n\
         | --- | --- | --- | --- | --- | --- |"
    );
    let mut figures = Vec::new();
    for (name, idle, f) in rows {
        let (i50, i95) = (percentile(idle, 50.0), percentile(idle, 95.0));
        let (f50, f95) = (
            percentile(&f.probe_ttft, 50.0),
            percentile(&f.probe_ttft, 95.0),
        );
        let tps = f.batch_tokens as f64 / f.wall.as_secs_f64();
        eprintln!(
            "| {name} | {:.1} / {:.1} | {:.1} / {:.1} | {:.2}x | {:.0} | {} |",
            ms(i50),
            ms(i95),
            ms(f50),
            ms(f95),
            ms(f95) / ms(i95),
            tps,
            f.errors
        );
        for why in f.broken.iter().take(3) {
            eprintln!("  {name}: a batch answer not whole: {why}");
        }
        figures.push((ms(f95), ms(i95), tps, f.errors + f.broken.len()));
    }
    figures
}

/// The two targets for a run with the reserve (`reserve`: its
/// `print_rows` figures) against the queue-off flood (`off`), each said met
/// or not.
pub fn targets(reserve: (f64, f64, f64, usize), off: (f64, f64, f64, usize)) -> String {
    let (res95, res_idle95, res_tps, _) = reserve;
    let off_tps = off.2;
    let met = |ok: bool| if ok { "met" } else { "NOT met" };
    format!(
        "interactive p95 <= 1.5x idle: {:.2}x ({}); batch tokens/s >= 90% of the queue-off flood: {:.0}% ({})",
        res95 / res_idle95,
        met(res95 <= 1.5 * res_idle95),
        100.0 * res_tps / off_tps,
        met(res_tps >= 0.9 * off_tps),
    )
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// What llama-servers showed while a workload ran, sampled every 50 ms.
#[derive(Debug, Default, Clone)]
pub struct Sampled {
    /// Per server, the most requests it deferred (its own queue).
    pub deferred: Vec<f64>,
    /// The most slots busy at once, all servers together (`/slots`).
    pub busy: usize,
}

/// Runs `work` while sampling `servers`' `llamacpp:requests_deferred` and
/// busy slots.
pub fn sample_during<R>(servers: &[&LlamaServer], work: impl FnOnce() -> R) -> (R, Sampled) {
    let stop = Arc::new(AtomicBool::new(false));
    let addrs: Vec<String> = servers.iter().map(|s| s.addr()).collect();
    let s = stop.clone();
    let sampler = std::thread::spawn(move || {
        let mut out = Sampled {
            deferred: vec![0.0; addrs.len()],
            busy: 0,
        };
        while !s.load(Ordering::Relaxed) {
            let mut busy = 0;
            for (i, a) in addrs.iter().enumerate() {
                if let Ok((_, body)) = http::get(a, "/metrics") {
                    let text = String::from_utf8_lossy(&body);
                    if let Some(v) = text
                        .lines()
                        .find(|l| l.starts_with("llamacpp:requests_deferred "))
                        .and_then(|l| l.rsplit(' ').next())
                        .and_then(|v| v.parse::<f64>().ok())
                    {
                        out.deferred[i] = out.deferred[i].max(v);
                    }
                }
                if let Ok((_, body)) = http::get(a, "/slots") {
                    if let Ok(Value::Array(slots)) = serde_json::from_slice::<Value>(&body) {
                        busy += slots
                            .iter()
                            .filter(|s| s["is_processing"].as_bool() == Some(true))
                            .count();
                    }
                }
            }
            out.busy = out.busy.max(busy);
            std::thread::sleep(Duration::from_millis(50));
        }
        out
    });
    let r = work();
    stop.store(true, Ordering::Relaxed);
    (r, sampler.join().unwrap())
}
