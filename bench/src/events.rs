//! llama-server's streaming chat format, as the scripted upstream writes it
//! and the client reads it. Each event is about 250 bytes, like llama-server's
//! token events, plus a `t_ns` send stamp (CLOCK_MONOTONIC nanoseconds).

use std::io::Write;

/// The answer's text, one word (token) per event; the first sentence ends
/// after 15 tokens, so llamatap's sentence rule runs as it would on a real answer.
pub const WORDS: &[&str] = &[
    "Sure",
    ",",
    " the",
    " weather",
    " in",
    " Paris",
    " tomorrow",
    " looks",
    " mild",
    " and",
    " mostly",
    " sunny",
    " all",
    " day",
    ".",
    " Expect",
    " a",
    " high",
    " of",
    " 21",
    " degrees",
    " in",
    " the",
    " afternoon",
    ",",
    " with",
    " a",
    " light",
    " breeze",
    ".",
];

const TAIL: &str = "\"created\":1764493200,\"id\":\"chatcmpl-Zk3mQ8vR2tLw9XcY7bN4pJ6hF1sD0aGe\",\"model\":\"tiny.gguf\",\"system_fingerprint\":\"b0-unknown\",\"object\":\"chat.completion.chunk\"";

/// `data: {role-only event}\n\n`, stamped with the request's arrival too.
pub fn role(out: &mut Vec<u8>, t_req_ns: u64, t_ns: u64) {
    let _ = write!(
        out,
        "data: {{\"choices\":[{{\"finish_reason\":null,\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":null}}}}],{TAIL},\"t_req_ns\":{t_req_ns},\"t_ns\":{t_ns}}}\n\n"
    );
}

/// `data: {token event}\n\n` for token number `k`.
pub fn token(out: &mut Vec<u8>, k: usize, t_ns: u64) {
    let w = WORDS[k % WORDS.len()];
    let _ = write!(
        out,
        "data: {{\"choices\":[{{\"finish_reason\":null,\"index\":0,\"delta\":{{\"content\":\"{w}\"}}}}],{TAIL},\"t_ns\":{t_ns}}}\n\n"
    );
}

/// The final event: finish reason, usage and llama-server's `timings`.
pub fn last(out: &mut Vec<u8>, tokens: usize, prefill_ms: f64, interval_ms: f64, t_ns: u64) {
    let predicted_ms = interval_ms * tokens as f64;
    let pps = if interval_ms > 0.0 {
        1000.0 / interval_ms
    } else {
        0.0
    };
    let _ = write!(
        out,
        "data: {{\"choices\":[{{\"finish_reason\":\"length\",\"index\":0,\"delta\":{{}}}}],{TAIL},\
\"usage\":{{\"completion_tokens\":{tokens},\"prompt_tokens\":12,\"total_tokens\":{}}},\
\"timings\":{{\"cache_n\":0,\"prompt_n\":12,\"prompt_ms\":{prefill_ms:.3},\"prompt_per_token_ms\":{:.3},\"prompt_per_second\":1200.0,\
\"predicted_n\":{tokens},\"predicted_ms\":{predicted_ms:.3},\"predicted_per_token_ms\":{interval_ms:.3},\"predicted_per_second\":{pps:.3}}},\"t_ns\":{t_ns}}}\n\n",
        tokens + 12,
        prefill_ms / 12.0,
    );
}

/// The end of a stream.
pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// What the client needs from one received event.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Seen {
    /// A data event (not a comment or blank).
    pub data: bool,
    /// Carries non-empty visible content.
    pub content: bool,
    /// `data: [DONE]`.
    pub done: bool,
    /// Carries a finish reason.
    pub finish: bool,
    /// An error event.
    pub error: bool,
    /// The upstream's send stamp, if the event still carries it.
    pub t_ns: Option<u64>,
    /// The upstream's request-arrival stamp (role event).
    pub t_req_ns: Option<u64>,
}

fn number_after(ev: &[u8], key: &[u8]) -> Option<u64> {
    let at = memchr::memmem::find(ev, key)? + key.len();
    let digits = ev[at..]
        .iter()
        .skip_while(|b| **b == b' ')
        .take_while(|b| b.is_ascii_digit());
    let mut v: u64 = 0;
    let mut any = false;
    for d in digits {
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
        any = true;
    }
    any.then_some(v)
}

/// Classifies one SSE event (the bytes before its blank line).
pub fn classify(ev: &[u8]) -> Seen {
    let mut s = Seen::default();
    let Some(at) = memchr::memmem::find(ev, b"data:") else {
        return s;
    };
    s.data = true;
    let payload = &ev[at + 5..];
    let payload = payload.strip_prefix(b" ").unwrap_or(payload);
    if payload.starts_with(b"[DONE]") {
        s.done = true;
        return s;
    }
    if let Some(c) = memchr::memmem::find(payload, b"\"content\":") {
        let rest = &payload[c + 10..];
        let rest = &rest[rest.iter().take_while(|b| **b == b' ').count()..];
        s.content = rest.len() > 1 && rest[0] == b'"' && rest[1] != b'"';
    }
    s.finish = memchr::memmem::find(payload, b"\"finish_reason\":\"").is_some()
        || memchr::memmem::find(payload, b"\"finish_reason\": \"").is_some();
    s.error = payload.starts_with(b"{\"error\"");
    s.t_ns = number_after(payload, b"\"t_ns\":");
    s.t_req_ns = number_after(payload, b"\"t_req_ns\":");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_and_sizes() {
        let mut v = Vec::new();
        role(&mut v, 5, 6);
        let r = classify(&v[..v.len() - 2]);
        assert!(r.data && !r.content && r.t_req_ns == Some(5) && r.t_ns == Some(6));
        v.clear();
        token(&mut v, 3, 1_234_567_890_123);
        assert!((220..=270).contains(&v.len()), "{}", v.len());
        let t = classify(&v);
        assert!(t.content && t.t_ns == Some(1_234_567_890_123) && !t.finish);
        v.clear();
        last(&mut v, 64, 10.0, 20.0, 9);
        let l = classify(&v);
        assert!(l.finish && !l.content && l.t_ns == Some(9));
        assert!(classify(DONE).done);
        assert!(classify(b"data: {\"id\":\"x\",\"choices\":[{\"delta\":{\"content\": \"hi\",\"role\":\"assistant\"}}]}").content);
        assert!(
            !classify(
                b"data: {\"choices\":[{\"delta\":{\"content\":\"\",\"role\":\"assistant\"}}]}"
            )
            .content
        );
    }
}
