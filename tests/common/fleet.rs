//! Fleet tests' harness: several real llama-servers, a multi-turn chat
//! workload, and per-request measurement.
//!
//! * [`start_servers`] starts llama-servers side by side (each `-np 2 -t 1`
//!   and a host-RAM prompt cache, see [`FLEET_ARGS`]).
//! * [`Workload`] holds conversations: each has its own long system prompt (or
//!   one shared by all), one user message per turn, and the assistant answers
//!   received so far, so turn n+1 repeats turn n's messages and extends them.
//! * [`chat_stream`] sends one streaming chat request and measures it on the
//!   client side: TTFT (first non-empty `delta.content`), how the stream ended
//!   (`[DONE]`, an error event, a cut), and llama-server's own final `timings`
//!   (`cache_n`: prompt tokens reused from its cache, `prompt_n`: tokens it had
//!   to prefill). [`Figures`] sums those into prompt-cache reuse and TTFT
//!   percentiles, so they never depend on what llamatap reports.
//! * Every request carries a `traceparent` with a fresh trace id. With tracing
//!   on, llamatap's `/latency.json` entries carry the same id, which pairs each
//!   request with the upstream llamatap chose ([`latency_by_trace`]), also
//!   under concurrent load.
//!
//! It does not start llamatap (tests/common/proxy.rs does) and asserts nothing
//! itself beyond the shape of what it reads.

#![allow(dead_code, clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::http;
use super::llama::LlamaServer;

/// Flags of every fleet llama-server, after `LlamaServer::start`'s own.
///
/// * `-np 2`: two slots, as the fleet has.
/// * `-c 4096`: the two slots are not unified (an explicit `-np` turns
///   `--kv-unified` off), so each gets half: 2,048 tokens, the models' training
///   context, enough for the longest conversation here.
/// * `--cache-ram 256`: llama-server keeps prompts it served in host RAM and
///   restores the best match (it needs to keep at least a quarter of the
///   cached prompt) when a slot is reused. Non-zero so that a replica
///   remembers more conversations than it has slots, as a real one does;
///   large enough that no replica evicts anything during a run (the medium
///   model's KV takes 12 KiB per token, so 256 MiB hold ~21,000 tokens, about
///   12 of the longest prompts here, while a saved prompt replaces the older
///   ones it contains), so reuse depends only on where requests went, not on
///   eviction order or timing. [`evictions`] checks that.
pub const FLEET_ARGS: [&str; 6] = ["-np", "2", "-c", "4096", "--cache-ram", "256"];

/// Serialises the tests of one test binary: several fleets at once would
/// share 2 cores and blur every timing.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Starts `n` llama-servers with `model`, [`FLEET_ARGS`] and `extra`, side by
/// side (start-up is mostly waiting), in order.
pub fn start_servers(n: usize, model: &str, extra: &[&str]) -> Vec<LlamaServer> {
    let mut args: Vec<&str> = FLEET_ARGS.to_vec();
    args.extend_from_slice(extra);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|_| s.spawn(|| LlamaServer::start(model, &args)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// How many prompts `server` dropped from its RAM prompt cache for room (its
/// log's warnings), so far.
pub fn evictions(server: &LlamaServer) -> usize {
    server.log_count("removing oldest entry")
}

/// An upstream's default name in llamatap: `host:port`.
pub fn upstream_name(server: &LlamaServer) -> String {
    format!("127.0.0.1:{}", server.port)
}

/// A fresh W3C trace id (32 hex digits, never all zero).
pub fn new_trace_id() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(1);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    format!(
        "{:08x}{:08x}{:016x}",
        std::process::id(),
        nanos as u32,
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// How a response ended.
#[derive(Clone, Debug, PartialEq)]
pub enum End {
    /// 200 and `data: [DONE]`.
    Done,
    /// 200, then `data: {"error": ...}` (the payload), and no `[DONE]`.
    ErrorEvent(String),
    /// 200, then the body ended with neither `[DONE]` nor an error event.
    Cut,
    /// Not 200: the status and body.
    Status(u16, String),
    /// The connection failed (connect, reset, timeout).
    Io(String),
}

/// One chat request as the client saw it.
#[derive(Clone, Debug)]
pub struct Exchange {
    /// The trace id it was sent with.
    pub trace_id: String,
    /// When the request was about to be sent.
    pub sent: Instant,
    /// Until the first non-empty `delta.content`.
    pub ttft: Option<Duration>,
    /// Until the body ended.
    pub elapsed: Duration,
    pub end: End,
    /// Whether the HTTP body ended properly (last chunk or full length).
    pub clean_end: bool,
    /// Concatenated `delta.content`.
    pub content: String,
    /// From the final event's `timings`.
    pub cache_n: Option<u64>,
    pub prompt_n: Option<u64>,
    /// The raw body, for failure messages.
    pub body: String,
}

impl Exchange {
    /// `cache_n` and `prompt_n`, or a panic naming the request.
    pub fn timings(&self) -> (u64, u64) {
        match (self.cache_n, self.prompt_n) {
            (Some(c), Some(p)) => (c, p),
            _ => panic!(
                "request {} has no timings (end {:?}): {}",
                self.trace_id,
                self.end,
                tail_chars(&self.body, 600)
            ),
        }
    }
}

/// POSTs a streaming chat body to `addr` and reads the whole answer.
pub fn chat_stream(addr: &str, body: &str) -> Exchange {
    let trace_id = new_trace_id();
    let traceparent = format!("00-{trace_id}-00f067aa0ba902b7-01");
    let sent = Instant::now();
    let mut ex = Exchange {
        trace_id,
        sent,
        ttft: None,
        elapsed: Duration::ZERO,
        end: End::Cut,
        clean_end: false,
        content: String::new(),
        cache_n: None,
        prompt_n: None,
        body: String::new(),
    };
    let mut reader = match http::send(
        addr,
        "POST",
        "/v1/chat/completions",
        &[("traceparent", &traceparent)],
        body.as_bytes(),
    ) {
        Ok(r) => r,
        Err(e) => {
            ex.end = End::Io(e.to_string());
            ex.elapsed = sent.elapsed();
            return ex;
        }
    };
    let status = reader.head.status;
    let mut raw: Vec<u8> = Vec::new();
    let mut pending = String::new();
    let mut saw_done = false;
    let mut error_event: Option<String> = None;
    loop {
        let piece = match reader.next_piece() {
            Ok(Some(p)) => p,
            Ok(None) => break,
            Err(e) => {
                ex.body = String::from_utf8_lossy(&raw).into_owned();
                ex.end = End::Io(e.to_string());
                ex.elapsed = sent.elapsed();
                return ex;
            }
        };
        let now = Instant::now();
        raw.extend_from_slice(&piece);
        if status != 200 {
            continue;
        }
        pending.push_str(&String::from_utf8_lossy(&piece));
        let normalized = pending.replace("\r\n", "\n");
        pending = normalized;
        while let Some(pos) = pending.find("\n\n") {
            let event: String = pending.drain(..pos + 2).collect();
            for data in event.lines().filter_map(|l| l.strip_prefix("data:")) {
                let data = data.strip_prefix(' ').unwrap_or(data);
                if data == "[DONE]" {
                    saw_done = true;
                    continue;
                }
                let Ok(v) = serde_json::from_str::<Value>(data) else {
                    continue;
                };
                if v.get("error").is_some() {
                    error_event = Some(data.to_string());
                    continue;
                }
                if let Some(text) = v["choices"][0]["delta"]["content"].as_str() {
                    if !text.is_empty() && ex.ttft.is_none() {
                        ex.ttft = Some(now - sent);
                    }
                    ex.content.push_str(text);
                }
                if let Some(t) = v.get("timings") {
                    ex.cache_n = t["cache_n"].as_u64();
                    ex.prompt_n = t["prompt_n"].as_u64();
                }
            }
        }
    }
    ex.elapsed = sent.elapsed();
    ex.clean_end = reader.clean_end;
    ex.body = String::from_utf8_lossy(&raw).into_owned();
    ex.end = if status != 200 {
        End::Status(status, ex.body.clone())
    } else if let Some(e) = error_event.filter(|_| !saw_done) {
        End::ErrorEvent(e)
    } else if saw_done {
        End::Done
    } else {
        End::Cut
    };
    ex
}

/// What a [`Workload`] looks like.
#[derive(Clone, Debug)]
pub struct WorkloadSpec {
    pub conversations: usize,
    pub turns: usize,
    /// Tokens of each system prompt.
    pub system_tokens: usize,
    /// Tokens of each user message.
    pub user_tokens: usize,
    /// One system prompt for all conversations (else one each, differing from
    /// their first token on).
    pub shared_system: bool,
    /// `max_tokens` of every request (greedy decoding: `temperature` 0).
    pub max_tokens: u32,
    /// Sets this workload's texts apart from another's (word stems).
    pub salt: String,
}

/// One conversation: its messages so far and its remaining user turns.
#[derive(Clone, Debug)]
pub struct Conversation {
    pub messages: Vec<Value>,
    pub users: Vec<String>,
}

/// Conversations to replay, turn by turn.
#[derive(Clone, Debug)]
pub struct Workload {
    pub spec: WorkloadSpec,
    pub conversations: Vec<Conversation>,
}

/// A stem of ASCII letters for index `i` (`a`, `b`, ..., `ba`, ...): words
/// `<stem><number>` tokenize alike whatever the stem, and two stems give
/// texts that differ from the first word on.
fn stem(i: usize) -> String {
    let mut n = i;
    let mut s = Vec::new();
    loop {
        s.push(b'a' + (n % 26) as u8);
        n /= 26;
        if n == 0 {
            break;
        }
    }
    s.reverse();
    String::from_utf8(s).unwrap()
}

impl Workload {
    /// Builds the texts, sized with `tokenizer`'s `/tokenize` (every test model
    /// shares one vocabulary).
    pub fn new(tokenizer: &LlamaServer, spec: WorkloadSpec) -> Workload {
        let shared =
            tokenizer.prompt_of_tokens_from(&format!("{}sys", spec.salt), spec.system_tokens);
        let conversations = (0..spec.conversations)
            .map(|c| {
                let system = if spec.shared_system {
                    shared.clone()
                } else {
                    tokenizer.prompt_of_tokens_from(
                        &format!("{}{}sys", spec.salt, stem(c)),
                        spec.system_tokens,
                    )
                };
                let users = (0..spec.turns)
                    .map(|t| {
                        let words = tokenizer.prompt_of_tokens_from(
                            &format!("{}{}q{t}w", spec.salt, stem(c)),
                            spec.user_tokens,
                        );
                        format!("Question {} of conversation {c}: {words}", t + 1)
                    })
                    .collect();
                Conversation {
                    messages: vec![json!({"role": "system", "content": system})],
                    users,
                }
            })
            .collect();
        Workload {
            spec,
            conversations,
        }
    }

    /// The body of turn `turn` (0-based) of conversation `c`: its messages so
    /// far plus the turn's user message (which is recorded).
    pub fn turn_body(&mut self, c: usize, turn: usize) -> String {
        let conv = &mut self.conversations[c];
        let user = conv.users[turn].clone();
        conv.messages.push(json!({"role": "user", "content": user}));
        json!({
            "messages": conv.messages,
            "stream": true,
            "max_tokens": self.spec.max_tokens,
            "temperature": 0,
        })
        .to_string()
    }

    /// Records the assistant's answer to conversation `c`'s last turn.
    pub fn answer(&mut self, c: usize, content: &str) {
        self.conversations[c]
            .messages
            .push(json!({"role": "assistant", "content": content}));
    }
}

/// One turn of one conversation, as sent.
#[derive(Clone, Debug)]
pub struct TurnResult {
    pub conversation: usize,
    /// 0-based.
    pub turn: usize,
    pub exchange: Exchange,
}

/// Replays `workload` against `addr`: turn 1 of every conversation, then
/// turn 2 of every conversation, and so on, one request at a time. Each
/// answer becomes part of the conversation. Panics on any request that does
/// not end with `[DONE]` and timings.
pub fn run_interleaved(addr: &str, workload: &mut Workload) -> Vec<TurnResult> {
    run_interleaved_via(workload, |_, _| addr.to_string())
}

/// As [`run_interleaved`], sending request number `seq` (0-based, in sending
/// order) of conversation `c` to `route(c, seq)`: a client-side placement,
/// for baselines without a router.
pub fn run_interleaved_via(
    workload: &mut Workload,
    mut route: impl FnMut(usize, usize) -> String,
) -> Vec<TurnResult> {
    let mut out = Vec::new();
    for turn in 0..workload.spec.turns {
        for c in 0..workload.spec.conversations {
            let body = workload.turn_body(c, turn);
            let ex = chat_stream(&route(c, out.len()), &body);
            if ex.end != End::Done {
                panic!(
                    "conversation {c} turn {}: {:?}\n{}",
                    turn + 1,
                    ex.end,
                    tail_chars(&ex.body, 800)
                );
            }
            ex.timings();
            workload.answer(c, &ex.content);
            out.push(TurnResult {
                conversation: c,
                turn,
                exchange: ex,
            });
        }
    }
    out
}

/// Prompt-cache reuse and TTFT of a run.
#[derive(Clone, Debug)]
pub struct Figures {
    pub requests: usize,
    /// sum(cache_n) / sum(cache_n + prompt_n) over all turns.
    pub reuse_all: f64,
    /// The same over turns 2 and later (turn 1 of a new conversation can
    /// never be cached, whatever the routing).
    pub reuse_followups: f64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub ttft_p50: Duration,
    pub ttft_p95: Duration,
    pub wall: Duration,
}

/// `sum(cache_n) / sum(cache_n + prompt_n)` over `results`.
pub fn reuse<'a>(results: impl IntoIterator<Item = &'a TurnResult>) -> (f64, u64, u64) {
    let (mut cached, mut total) = (0u64, 0u64);
    for r in results {
        let (c, p) = r.exchange.timings();
        cached += c;
        total += c + p;
    }
    let ratio = if total == 0 {
        0.0
    } else {
        cached as f64 / total as f64
    };
    (ratio, cached, total)
}

/// Nearest-rank percentile (`p` in 0..=100) of `values`; zero when empty.
pub fn percentile(values: &[Duration], p: f64) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    let mut v = values.to_vec();
    v.sort();
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

impl Figures {
    /// Figures of a run that took `wall`.
    pub fn of(results: &[TurnResult], wall: Duration) -> Figures {
        let (reuse_all, cached_tokens, prompt_tokens) = reuse(results);
        let (reuse_followups, _, _) = reuse(results.iter().filter(|r| r.turn > 0));
        let ttfts: Vec<Duration> = results
            .iter()
            .map(|r| {
                r.exchange
                    .ttft
                    .unwrap_or_else(|| panic!("request {} had no content", r.exchange.trace_id))
            })
            .collect();
        Figures {
            requests: results.len(),
            reuse_all,
            reuse_followups,
            prompt_tokens,
            cached_tokens,
            ttft_p50: percentile(&ttfts, 50.0),
            ttft_p95: percentile(&ttfts, 95.0),
            wall,
        }
    }

    /// The table's header, for [`Figures::row`].
    pub fn header() -> &'static str {
        "| policy             | reuse all | reuse follow-ups | cached/prompt tokens | TTFT p50 | TTFT p95 |   wall |\n\
         |--------------------|-----------|------------------|----------------------|----------|----------|--------|"
    }

    /// One Markdown table row.
    pub fn row(&self, name: &str) -> String {
        format!(
            "| {:<18} | {:>9.3} | {:>16.3} | {:>20} | {:>5.0} ms | {:>5.0} ms | {:>4.1} s |",
            name,
            self.reuse_all,
            self.reuse_followups,
            format!("{}/{}", self.cached_tokens, self.prompt_tokens),
            self.ttft_p50.as_secs_f64() * 1000.0,
            self.ttft_p95.as_secs_f64() * 1000.0,
            self.wall.as_secs_f64(),
        )
    }
}

/// `/latency.json`'s `requests` (oldest first).
pub fn latency_entries(admin: &str) -> Vec<Value> {
    let (status, body) = http::get(admin, "/latency.json").unwrap();
    assert_eq!(status, 200, "GET /latency.json");
    let v: Value = serde_json::from_slice(&body).unwrap();
    v["requests"]
        .as_array()
        .unwrap_or_else(|| panic!("/latency.json has no requests array: {v}"))
        .clone()
}

/// Waits until `/latency.json` holds an entry for every trace id in `ids`
/// (requests are recorded as they finish, a moment after the client saw the
/// end), and returns them by trace id.
pub fn latency_by_trace(admin: &str, ids: &[&str], timeout: Duration) -> HashMap<String, Value> {
    let deadline = Instant::now() + timeout;
    loop {
        let by_id: HashMap<String, Value> = latency_entries(admin)
            .into_iter()
            .filter_map(|e| e["trace_id"].as_str().map(|id| (id.to_string(), e.clone())))
            .collect();
        let missing: Vec<&&str> = ids.iter().filter(|id| !by_id.contains_key(**id)).collect();
        if missing.is_empty() {
            return by_id;
        }
        if Instant::now() >= deadline {
            panic!(
                "/latency.json lacks {} of {} requests (first missing: {}); is tracing on? \
                 it holds {} entries",
                missing.len(),
                ids.len(),
                missing[0],
                by_id.len()
            );
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// The upstream llamatap recorded for each result, in order, checking on the
/// way that llamatap's cached-token count agrees with the client's `cache_n`
/// (so the pairing is right).
pub fn upstreams_of(admin: &str, results: &[TurnResult]) -> Vec<(String, String)> {
    let ids: Vec<&str> = results
        .iter()
        .map(|r| r.exchange.trace_id.as_str())
        .collect();
    let by_id = latency_by_trace(admin, &ids, Duration::from_secs(10));
    results
        .iter()
        .map(|r| {
            let e = &by_id[&r.exchange.trace_id];
            if let (Some(theirs), Some(ours)) = (e["cached_tokens"].as_u64(), r.exchange.cache_n) {
                assert_eq!(theirs, ours, "latency entry does not match request: {e}");
            }
            let upstream = e["upstream"]
                .as_str()
                .unwrap_or_else(|| panic!("latency entry without \"upstream\": {e}"))
                .to_string();
            let reason = e["route_reason"].as_str().unwrap_or("").to_string();
            (upstream, reason)
        })
        .collect()
}

/// The sum of the samples of metric `name` whose labels contain `needle`
/// (e.g. `upstream="127.0.0.1:40123"`), or None when there is no such series.
pub fn series(text: &str, name: &str, needle: &str) -> Option<f64> {
    let values: Vec<f64> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{'))
        })
        .filter(|l| l.contains(needle))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// `llamatap_upstream_up` of `server` in `metrics`.
pub fn upstream_up(metrics: &str, server: &LlamaServer) -> Option<f64> {
    series(
        metrics,
        "llamatap_upstream_up",
        &format!("upstream=\"{}\"", upstream_name(server)),
    )
}

/// Polls `done` every 25 ms until it holds or `timeout` passes; returns the
/// time it took, or None.
pub fn wait_for(timeout: Duration, mut done: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if done() {
            return Some(start.elapsed());
        }
        if start.elapsed() >= timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// The last `n` characters of `s`.
pub fn tail_chars(s: &str, n: usize) -> String {
    let chars: Vec<char> = s.chars().collect();
    chars[chars.len().saturating_sub(n)..].iter().collect()
}
