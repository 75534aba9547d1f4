//! The latency page: recent requests drawn as waterfalls of their moments,
//! with p50/p95 per stage and model over the window. Server-rendered HTML,
//! no external assets; a little JavaScript only for auto-refresh.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use crate::telemetry::recent::RecentRequest;

/// Reads one stage's duration from a request.
type StageOf = fn(&RecentRequest) -> Option<Duration>;

/// Stages shown, with the field that holds each.
const STAGES: &[(&str, StageOf)] = &[
    ("upstream_headers", |r| r.upstream_headers),
    ("ttft", |r| r.first_token),
    ("first_sentence", |r| r.first_sentence),
    ("e2e", |r| Some(r.end)),
    ("prefill", |r| r.prefill),
    ("decode", |r| r.decode),
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn ms(d: Option<Duration>) -> String {
    d.map(|d| format!("{:.1}", d.as_secs_f64() * 1000.0))
        .unwrap_or_else(|| "–".into())
}

/// The `q` quantile (nearest rank) of `v`, sorted in place.
pub fn quantile(v: &mut [f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let idx = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v.get(idx).copied()
}

/// The page.
pub fn render(recent: &[RecentRequest], jaeger_url: Option<&str>) -> String {
    let mut h = String::with_capacity(16 * 1024);
    h.push_str(r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>llamatap · latency</title>
<meta name="viewport" content="width=device-width,initial-scale=1">
<style>
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#1d2433;background:#fafbfc}
h1{font-size:20px;margin:0 0 4px}h2{font-size:15px;margin:24px 0 8px}.sub{color:#5b6475}
table{border-collapse:collapse;background:#fff;box-shadow:0 1px 2px #0001}th,td{padding:4px 10px;border-bottom:1px solid #eef0f3;text-align:right;white-space:nowrap}
th{background:#f3f5f8;font-weight:600}td.l,th.l{text-align:left}
.bar{position:relative;height:14px;width:420px;background:#f3f5f8;border-radius:3px}
.seg{position:absolute;top:0;height:14px;border-radius:3px}
.h{background:#b8c2d6}.p{background:#f2b45a}.d{background:#5aa0f2}.s{position:absolute;top:-2px;width:2px;height:18px;background:#d6336c}
.legend span{display:inline-block;margin-right:14px}.legend i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px;vertical-align:-1px}
.ok{color:#2b8a3e}.bad{color:#c92a2a}a{color:#1c6fd1}
</style></head><body>
<h1>llamatap · latency</h1>
<div class="sub">The last "#);
    let _ = write!(h, "{}", recent.len());
    h.push_str(r#" LLM requests; times in milliseconds from arrival at llamatap. <label><input type="checkbox" id="auto" checked> auto-refresh</label></div>
<div class="legend sub" style="margin-top:8px"><span><i class="h"></i>waiting for upstream headers</span><span><i class="p"></i>prefill (headers → first token)</span><span><i class="d"></i>decode (first token → end)</span><span><i style="background:#d6336c"></i>first sentence</span></div>
"#);
    // Percentiles per stage and model.
    let mut by_model: BTreeMap<&str, Vec<&RecentRequest>> = BTreeMap::new();
    for r in recent {
        by_model.entry(r.model.as_str()).or_default().push(r);
    }
    h.push_str("<h2>p50 / p95 per stage and model</h2><table><tr><th class=l>model</th><th>n</th>");
    for (name, _) in STAGES {
        let _ = write!(h, "<th>{name}</th>");
    }
    h.push_str("</tr>");
    for (model, rs) in &by_model {
        let _ = write!(
            h,
            "<tr><td class=l>{}</td><td>{}</td>",
            esc(model),
            rs.len()
        );
        for (_, get) in STAGES {
            let mut v: Vec<f64> = rs
                .iter()
                .filter_map(|r| get(r))
                .map(|d| d.as_secs_f64() * 1000.0)
                .collect();
            let p50 = quantile(&mut v, 0.5);
            let p95 = quantile(&mut v, 0.95);
            match (p50, p95) {
                (Some(a), Some(b)) => {
                    let _ = write!(h, "<td>{a:.1} / {b:.1}</td>");
                }
                _ => h.push_str("<td>–</td>"),
            }
        }
        h.push_str("</tr>");
    }
    h.push_str("</table>");
    // Waterfalls, newest first.
    h.push_str("<h2>Requests</h2><table><tr><th class=l>time (UTC)</th><th class=l>model</th><th class=l>route</th><th class=l>outcome</th><th>headers</th><th>ttft</th><th>first sentence</th><th>end</th><th>prefill</th><th>decode</th><th>tokens in/cached/out</th><th class=l>waterfall</th><th class=l>trace</th></tr>");
    let scale = recent
        .iter()
        .map(|r| r.end.as_secs_f64())
        .fold(0.0_f64, f64::max)
        .max(0.001);
    for r in recent.iter().rev() {
        let t = r
            .received
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let (hh, mm, ss) = ((t / 3600) % 24, (t / 60) % 60, t % 60);
        let cls = if r.outcome == "ok" { "ok" } else { "bad" };
        let _ = write!(
            h,
            "<tr><td class=l>{hh:02}:{mm:02}:{ss:02}</td><td class=l>{}</td><td class=l>{}</td><td class='l {cls}'>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}/{}/{}</td><td class=l>",
            esc(&r.model),
            r.route,
            r.outcome,
            r.status.map(|s| format!(" ({s})")).unwrap_or_default(),
            ms(r.upstream_headers),
            ms(r.first_token),
            ms(r.first_sentence),
            ms(Some(r.end)),
            ms(r.prefill),
            ms(r.decode),
            r.input_tokens.map(|n| n.to_string()).unwrap_or_else(|| "–".into()),
            r.cached_tokens.map(|n| n.to_string()).unwrap_or_else(|| "–".into()),
            r.output_tokens.map(|n| n.to_string()).unwrap_or_else(|| "–".into()),
        );
        waterfall(&mut h, r, scale);
        h.push_str("</td><td class=l>");
        match (&r.trace_id, jaeger_url) {
            (Some(id), Some(base)) => {
                let _ = write!(
                    h,
                    "<a href=\"{}/trace/{id}\" target=_blank>{}</a>",
                    esc(base.trim_end_matches('/')),
                    &id[..id.len().min(12)]
                );
            }
            (Some(id), None) => {
                let _ = write!(h, "<code title=\"{id}\">{}</code>", &id[..id.len().min(12)]);
            }
            _ => h.push('–'),
        }
        h.push_str("</td></tr>");
    }
    h.push_str("</table>\n<script>setInterval(function(){if(document.getElementById('auto').checked)location.reload()},5000)</script></body></html>\n");
    h
}

fn waterfall(h: &mut String, r: &RecentRequest, scale: f64) {
    let pct = |d: Duration| (d.as_secs_f64() / scale * 100.0).clamp(0.0, 100.0);
    let headers = r.upstream_headers.map(pct).unwrap_or(0.0);
    let first = r.first_token_any.or(r.first_token).map(pct);
    let end = pct(r.end);
    h.push_str("<div class=bar>");
    let _ = write!(
        h,
        "<div class='seg h' style='left:0;width:{headers:.2}%'></div>"
    );
    match first {
        Some(f) => {
            let _ = write!(
                h,
                "<div class='seg p' style='left:{headers:.2}%;width:{:.2}%'></div>",
                (f - headers).max(0.0)
            );
            let _ = write!(
                h,
                "<div class='seg d' style='left:{f:.2}%;width:{:.2}%'></div>",
                (end - f).max(0.3)
            );
        }
        None => {
            let _ = write!(
                h,
                "<div class='seg p' style='left:{headers:.2}%;width:{:.2}%'></div>",
                (end - headers).max(0.3)
            );
        }
    }
    if let Some(s) = r.first_sentence.map(pct) {
        let _ = write!(
            h,
            "<div class=s style='left:{s:.2}%' title='first sentence'></div>"
        );
    }
    h.push_str("</div>");
}

/// The page's data as JSON (milliseconds).
pub fn json(recent: &[RecentRequest]) -> String {
    let msf = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1000.0);
    let items: Vec<serde_json::Value> = recent
        .iter()
        .map(|r| {
            serde_json::json!({
                "received_unix_ms": r.received.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
                "model": r.model, "route": r.route, "outcome": r.outcome, "status": r.status,
                "streamed": r.streamed,
                "upstream_headers_ms": msf(r.upstream_headers), "first_token_any_ms": msf(r.first_token_any),
                "ttft_ms": msf(r.first_token), "first_sentence_ms": msf(r.first_sentence),
                "last_token_ms": msf(r.last_token), "e2e_ms": msf(Some(r.end)),
                "prefill_ms": msf(r.prefill), "decode_ms": msf(r.decode),
                "input_tokens": r.input_tokens, "cached_tokens": r.cached_tokens, "output_tokens": r.output_tokens,
                "trace_id": r.trace_id,
            })
        })
        .collect();
    serde_json::json!({ "requests": items }).to_string()
}
