//! The continuation phase: what continuing a cut answer costs llamatap.
//!
//! Two scripted upstreams (`sse-upstream`) behind one llamatap (each
//! `--llamatap` and `--llamatap-alt` build in turn). Each round sends, one
//! after another on new connections, a whole streamed chat answer of
//! `tokens` tokens and the same answer cut by its upstream after `cut`
//! tokens (`bench-cut:K`), which llamatap continues on the other upstream
//! (`/apply-template`, then `/completion`). Per kind: llamatap's CPU per
//! answer (its threads' run time from `/proc/PID/task/*/schedstat`, in
//! nanoseconds, around each answer; the median over the kind's answers),
//! the client's
//! longest gap between two content events, and whether every answer was
//! whole (its tokens, `[DONE]`, no error event). The difference of the two
//! CPU figures is the cost of one continuation.
//!
//! Not here: real llama-servers (the test suite continues answers on them)
//! or concurrency (one answer at a time, so each figure is one answer's).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::procs;

/// One answer as the client saw it.
struct Seen {
    content_events: usize,
    done: bool,
    error: bool,
    longest_gap: Duration,
}

async fn answer(addr: SocketAddr, body: &str) -> Option<Seen> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.ok()?;
    let mut raw = Vec::new();
    let mut tmp = vec![0u8; 16 * 1024];
    let mut last_content: Option<Instant> = None;
    let mut longest_gap = Duration::ZERO;
    loop {
        let n = tokio::time::timeout(Duration::from_secs(30), s.read(&mut tmp))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            break;
        }
        let piece = &tmp[..n];
        if memchr::memmem::find(piece, b"\"content\":\"").is_some() {
            let now = Instant::now();
            if let Some(t) = last_content {
                longest_gap = longest_gap.max(now - t);
            }
            last_content = Some(now);
        }
        raw.extend_from_slice(piece);
    }
    let text = String::from_utf8_lossy(&raw);
    Some(Seen {
        content_events: text.matches("\"delta\":{\"content\":\"").count(),
        done: text.contains("data: [DONE]"),
        error: text.contains("\"error\""),
        longest_gap,
    })
}

fn body(tokens: usize, cut: Option<usize>, i: usize) -> String {
    let marker = cut.map(|k| format!(" bench-cut:{k}")).unwrap_or_default();
    json!({
        "messages": [{"role": "user", "content": format!("bench-id:{i}{marker}")}],
        "stream": true,
        "max_tokens": tokens,
    })
    .to_string()
}

/// Runs `rounds` rounds against llamatap at `addr` (root pid `pid`);
/// `tokens` per answer, the cut after `cut`.
pub async fn run(addr: SocketAddr, pid: u32, rounds: usize, tokens: usize, cut: usize) -> Value {
    let mut cpu: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut gaps: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut broken = [0usize; 2];
    // One round not counted: first connections, first continuation.
    for round in 0..=rounds {
        for (k, cut) in [None, Some(cut)].into_iter().enumerate() {
            let before = procs::run_secs(pid);
            let seen = answer(addr, &body(tokens, cut, round * 2 + k)).await;
            let spent = procs::run_secs(pid) - before;
            if round == 0 {
                continue;
            }
            cpu[k].push(spent * 1e6);
            match seen {
                Some(s) if s.done && !s.error && s.content_events == tokens => {
                    gaps[k].push(s.longest_gap.as_secs_f64() * 1e3);
                }
                _ => broken[k] += 1,
            }
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    // Medians: a health check or a model-list read of llamatap's own that
    // falls within one answer does not move them.
    let whole_us = median(&mut cpu[0]).unwrap_or(f64::NAN);
    let cont_us = median(&mut cpu[1]).unwrap_or(f64::NAN);
    json!({
        "rounds": rounds,
        "tokens": tokens,
        "cut_after": cut,
        "cpu_per_whole_answer_us": whole_us,
        "cpu_per_continued_answer_us": cont_us,
        "cpu_per_continuation_us": cont_us - whole_us,
        "longest_gap_whole_median_ms": median(&mut gaps[0]),
        "longest_gap_continued_median_ms": median(&mut gaps[1]),
        "not_whole": {"whole": broken[0], "continued": broken[1]},
    })
}

/// One markdown line per build.
pub fn markdown(r: &Value) -> String {
    let mut s = String::from(
        "\nContinuation (scripted upstreams, one answer at a time): llamatap CPU per answer (median)\n\n\
         | build | whole answer µs | continued answer µs | per continuation µs | longest gap whole / continued ms | not whole |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    if let Some(builds) = r["builds"].as_object() {
        for (name, b) in builds {
            s += &format!(
                "| {name} | {:.0} | {:.0} | {:.0} | {:.2} / {:.2} | {} |\n",
                b["cpu_per_whole_answer_us"].as_f64().unwrap_or(f64::NAN),
                b["cpu_per_continued_answer_us"]
                    .as_f64()
                    .unwrap_or(f64::NAN),
                b["cpu_per_continuation_us"].as_f64().unwrap_or(f64::NAN),
                b["longest_gap_whole_median_ms"]
                    .as_f64()
                    .unwrap_or(f64::NAN),
                b["longest_gap_continued_median_ms"]
                    .as_f64()
                    .unwrap_or(f64::NAN),
                b["not_whole"],
            );
        }
    }
    s
}
