//! The TTFT predictor behind a pipe, for measuring it against real
//! llama-servers from a harness in another language
//! (`examples/ttft_accuracy.py` drives it).
//!
//! One JSON object per line in, one per line out:
//! - `{"op":"observe","key":K,"prompt_n":..,"prompt_ms":..,"cache_n":..,
//!   "predicted_n":..,"predicted_ms":..,"busy_others":..,"prefill_others":..,
//!   "beside_at_dispatch":..,"max_tokens":..,"prompt_bytes":..,"ttft_ms":..,"started_ms":..,
//!   "cached_bytes":..}` → `{"ok":true}` (`ttft_ms`, `started_ms` and
//!   `max_tokens` may be null; `cached_bytes` is the cached prefix the
//!   request was predicted with);
//! - `{"op":"predict","key":K,"tokens":N}` or `"bytes":N`, with `"cached":N`
//!   (tokens) or `"cached_bytes":N`, `"slots":N,"busy":N,"queue_ahead":N,
//!   "in_flight":[[generated,max,prefill_left,prefilling_ms,prefill_context],..]`
//!   (the last two may be left out) → the prediction;
//! - `{"op":"correct","key":K,"total":..,"cache":..,"processed":..,
//!   "time_ms":..,"since_ms":..,"busy_others":..,"prefill_others":..}` → the
//!   prediction;
//! - `{"op":"learned","key":K}` → what the key learned;
//! - `{"op":"forget","key":K}`.
//!
//! A prediction is `{"ttft_ms":x,"wait_ms":..,"prefill_ms":..,
//! "overhead_ms":..,"prompt_tokens":..,"ahead_tokens":..,"confidence":"low"|"high"}`, or
//! `{"ttft_ms":null}` when there is no data. A bad line gets `{"error":..}`.
//!
//! Try: `echo '{"op":"predict","key":"a","tokens":10}' | cargo run -p llamatap-policy --example ttft_pipe`

use std::io::{BufRead, Write};

use llamatap_policy::ttft::{
    Confidence, InFlight, Load, Observation, Prediction, Progress, PromptSize, Query, Timings,
    TtftBook,
};
use serde_json::{json, Value};

fn u32_of(v: &Value, k: &str) -> u32 {
    v.get(k)
        .and_then(Value::as_u64)
        .map_or(0, |n| n.min(u64::from(u32::MAX)) as u32)
}

fn f64_of(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(Value::as_f64)
}

fn answer(p: Prediction) -> Value {
    match p {
        Prediction::NoData => json!({ "ttft_ms": null }),
        Prediction::Estimate(e) => json!({
            "ttft_ms": e.ttft_ms,
            "wait_ms": e.wait_ms,
            "prefill_ms": e.prefill_ms,
            "overhead_ms": e.overhead_ms,
            "prompt_tokens": e.prompt_tokens,
            "ahead_tokens": e.ahead_tokens,
            "confidence": match e.confidence {
                Confidence::Low => "low",
                Confidence::High => "high",
            },
        }),
    }
}

fn handle(book: &mut TtftBook<String>, v: &Value) -> Value {
    let key = v
        .get("key")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    match v.get("op").and_then(Value::as_str).unwrap_or("") {
        "observe" => {
            let obs = Observation {
                timings: Timings {
                    prompt_n: u32_of(v, "prompt_n"),
                    prompt_ms: f64_of(v, "prompt_ms").unwrap_or(f64::NAN),
                    cache_n: u32_of(v, "cache_n"),
                    predicted_n: u32_of(v, "predicted_n"),
                    predicted_ms: f64_of(v, "predicted_ms").unwrap_or(f64::NAN),
                },
                busy_others: u32_of(v, "busy_others"),
                prefill_others: u32_of(v, "prefill_others"),
                prefill_before: u32_of(v, "prefill_before"),
                beside_at_dispatch: u32_of(v, "beside_at_dispatch"),
                max_tokens: v
                    .get("max_tokens")
                    .and_then(Value::as_u64)
                    .map(|m| m as u32),
                prompt_bytes: v.get("prompt_bytes").and_then(Value::as_u64),
                ttft_ms: f64_of(v, "ttft_ms"),
                started_ms: f64_of(v, "started_ms"),
                process: 0,
                predicted_uncached: v.get("cached_bytes").and_then(Value::as_u64) == Some(0),
            };
            // One model on every member: each is the others' peer.
            book.observe_among(&key, &obs, |_| true);
            json!({ "ok": true })
        }
        "predict" => {
            let flights: Vec<InFlight> = v
                .get("in_flight")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|f| InFlight {
                            generated: f.get(0).and_then(Value::as_u64).unwrap_or(0) as u32,
                            max_tokens: f.get(1).and_then(Value::as_u64).map(|m| m as u32),
                            prefill_left: f.get(2).and_then(Value::as_u64).unwrap_or(0) as u32,
                            decoding_ms: 0,
                            prefilling_ms: f.get(3).and_then(Value::as_u64).unwrap_or(0) as u32,
                            prefill_context: f.get(4).and_then(Value::as_u64).unwrap_or(0) as u32,
                        })
                        .collect()
                })
                .unwrap_or_default();
            let prompt = match v.get("tokens").and_then(Value::as_u64) {
                Some(n) => PromptSize::Tokens(n.min(u64::from(u32::MAX)) as u32),
                None => PromptSize::Bytes(v.get("bytes").and_then(Value::as_u64).unwrap_or(0)),
            };
            let q = Query {
                prompt,
                cached: match v.get("cached_bytes").and_then(Value::as_u64) {
                    Some(b) => PromptSize::Bytes(b),
                    None => PromptSize::Tokens(u32_of(v, "cached")),
                },
                load: Load {
                    slots: u32_of(v, "slots"),
                    busy: u32_of(v, "busy"),
                    queue_ahead: u32_of(v, "queue_ahead"),
                    in_flight: &flights,
                },
            };
            answer(book.predict(&key, &q))
        }
        "correct" => {
            let p = Progress {
                total: u32_of(v, "total"),
                cache: u32_of(v, "cache"),
                processed: u32_of(v, "processed"),
                time_ms: v.get("time_ms").and_then(Value::as_u64).unwrap_or(0),
            };
            let since = f64_of(v, "since_ms").unwrap_or(0.0);
            let (busy, others) = (u32_of(v, "busy_others"), u32_of(v, "prefill_others"));
            answer(book.correct(&key, &p, since, busy, others))
        }
        "learned" => match book.learned(&key) {
            Some(l) => json!({
                "observations": l.observations,
                "prefill_fixed_ms": l.prefill_fixed_ms,
                "prefill_ms_per_1k_tokens": l.prefill_ms_per_1k_tokens,
                "prefill_context_ms": l.prefill_context_ms,
                "prefill_cached_ms": l.prefill_cached_ms,
                "prefill_bend": l.prefill_bend.to_vec(),
                "decode_ms_per_token": l.decode_ms_per_token,
                "overhead_ms": l.overhead_ms,
                "bytes_per_token": l.bytes_per_token,
            }),
            None => json!({ "observations": 0 }),
        },
        "forget" => {
            book.forget(&key);
            json!({ "ok": true })
        }
        other => json!({ "error": format!("unknown op {other:?}") }),
    }
}

fn main() -> std::io::Result<()> {
    let mut book: TtftBook<String> = TtftBook::new(64);
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let line = line?;
        let reply = match serde_json::from_str::<Value>(&line) {
            Ok(v) => handle(&mut book, &v),
            Err(e) => json!({ "error": e.to_string() }),
        };
        writeln!(out, "{reply}")?;
        out.flush()?;
    }
    Ok(())
}
