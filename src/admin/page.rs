//! The latency page: recent requests drawn as waterfalls of their moments,
//! with p50/p95 per stage and model over the window. Server-rendered HTML,
//! no external assets; a little JavaScript only for auto-refresh (it swaps
//! the page body in place, so the scroll position survives).
//!
//! Each request's waterfall has two lanes on a time axis shared by every row:
//! the proxy's own moments (waiting for upstream headers, waiting for the
//! first token, streaming, the first-sentence mark), and under it
//! llama-server's prefill and decode from its `timings`, placed so that
//! generation ends at the last token (or the end, without one).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use llamatap_telemetry::recent::RecentRequest;

mod rows;
use rows::requests;

/// Reads one stage's duration from a request.
type StageOf = fn(&RecentRequest) -> Option<Duration>;

/// Stages in the percentile table, in waterfall order: (column title, field).
const STAGES: &[(&str, StageOf)] = &[
    ("queued", |r| r.queued),
    ("upstream headers", |r| r.upstream_headers),
    ("first token", |r| r.first_token),
    ("first sentence", |r| r.first_sentence),
    // Only a whole answer's end is an answer's timing; a cut request ended
    // at the cut (the metrics' `e2e` stage follows the same rule).
    ("end", |r| (r.outcome == "ok").then_some(r.end)),
    ("prefill", |r| r.prefill),
    ("decode", |r| r.decode),
];

const STYLE: &str = r#"
:root{--fg:#1d2433;--muted:#5b6475;--line:#e6e9ef;--bg:#f6f7f9;--card:#fff;
--wait:#c3cad8;--ttft:#fab005;--stream:#3b82f6;--sent:#e03131;--prefill:#9775fa;--decode:#12b886}
*{box-sizing:border-box}
body{font:13px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;margin:0;color:var(--fg);background:var(--bg)}
header{display:flex;align-items:baseline;gap:16px;padding:16px 24px 8px}
h1{font-size:18px;margin:0;font-weight:650}
h2{font-size:14px;margin:20px 0 8px;font-weight:650}
.muted{color:var(--muted)}
main{padding:0 24px 24px}
label.auto{margin-left:auto;color:var(--muted);user-select:none}
.cards{display:flex;gap:10px;flex-wrap:wrap;margin:8px 0 4px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:8px 14px;min-width:120px}
.card b{display:block;font-size:18px;font-weight:650;font-variant-numeric:tabular-nums}
.card span{color:var(--muted);font-size:12px}
table{border-collapse:collapse;background:var(--card);border:1px solid var(--line);border-radius:8px;overflow:hidden;font-variant-numeric:tabular-nums}
th,td{padding:5px 7px;border-bottom:1px solid var(--line);text-align:right;white-space:nowrap}
th{background:#eef1f5;font-weight:600;font-size:12px;color:#39414f}
tr:last-child td{border-bottom:0}
tbody tr:hover td{background:#f8fafc}
.l{text-align:left}
.dim{color:#a0a7b4}
.miss{color:#c2410c;font-weight:600}
.brk{display:block;color:#b91c1c;font-weight:600;font-size:12px}
.pill{display:inline-block;padding:0 7px;border-radius:9px;font-size:12px;line-height:18px}
.ok{background:#e6f6ea;color:#1e7a34}.hang{background:#fff3db;color:#9a5b00}.err{background:#fde8e8;color:#b42318}
.wf{position:relative;width:250px;height:20px;background:linear-gradient(90deg,#f1f3f6 1px,transparent 1px) 0 0/25% 100%;border-radius:3px}
.wf i{position:absolute;display:block;border-radius:2px}
.a{top:3px;height:8px}.b{top:13px;height:5px}
.q{background:#868e96}.w{background:var(--wait)}.t{background:var(--ttft)}.s{background:var(--stream)}.p{background:var(--prefill)}.d{background:var(--decode)}
.m{top:0;width:2px;height:13px;background:var(--sent)}
.c{top:0;width:2px;height:20px;background:#7c3aed}
.pr{top:0;width:0;height:13px;border-left:2px dashed #0f766e}
.pc{top:0;width:0;height:13px;border-left:2px dotted #b45309}
.cont{color:#7c3aed;font-weight:600;white-space:nowrap}
.beyond{position:absolute;right:-10px;top:0;font-size:12px;color:var(--muted)}
.legend{display:flex;gap:16px;flex-wrap:wrap;color:var(--muted);margin:6px 0 8px}
.legend i{display:inline-block;width:12px;height:8px;border-radius:2px;margin-right:5px;vertical-align:0}
a{color:#1c64d1;text-decoration:none}a:hover{text-decoration:underline}
code{font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
.empty{padding:18px;color:var(--muted);text-align:center}
.scroll{max-width:100%;overflow-x:auto}
td.clip{max-width:180px;overflow:hidden;text-overflow:ellipsis}
"#;

const SCRIPT: &str = r#"<script>
(function(){var box=document.getElementById('auto');
setInterval(function(){if(!box.checked)return;
fetch(location.pathname,{cache:'no-store'}).then(function(r){return r.text()}).then(function(t){
var m=new DOMParser().parseFromString(t,'text/html').getElementById('main');
if(m)document.getElementById('main').replaceWith(m);}).catch(function(){});},5000);})();
</script>"#;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

fn ms_f(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Milliseconds with one decimal, or a dash.
fn ms(d: Option<Duration>) -> String {
    d.map(|d| format!("{:.1}", ms_f(d)))
        .unwrap_or_else(|| "–".into())
}

/// A model label as shown: the file name of a path, the label itself otherwise.
fn short_model(model: &str) -> &str {
    model.rsplit('/').next().unwrap_or(model)
}

/// `HH:MM:SS` (UTC) of a wall-clock time.
fn clock(t: SystemTime) -> String {
    let s = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("{:02}:{:02}:{:02}", (s / 3600) % 24, (s / 60) % 60, s % 60)
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

/// Whether the outcome is a failure of the upstream or the proxy.
fn is_failure(outcome: &str) -> bool {
    matches!(outcome, "upstream_error" | "proxy_error")
}

/// Whether the request was refused: a 4xx from llama-server or from
/// llamatap itself (`client_error`, e.g. `model_not_found`), or refused by
/// llamatap before the upstream (`rejected`: API key, size limits).
fn is_refused(outcome: &str) -> bool {
    matches!(outcome, "client_error" | "rejected")
}

/// Whether the admission queue took any request of the window: only then
/// are its column, legend entry and bar shown.
fn queue_seen(recent: &[RecentRequest]) -> bool {
    recent
        .iter()
        .any(|r| r.class.is_some() || r.queued.is_some())
}

/// Decode speed of one request, tokens per second of llama-server's decode.
fn decode_speed(r: &RecentRequest) -> Option<f64> {
    let (n, d) = (r.output_tokens?, r.decode?);
    (n > 0 && d > Duration::ZERO).then(|| n as f64 / d.as_secs_f64())
}

/// Cached / all prompt tokens over `rs`, when any prompt tokens are known.
fn cache_reuse<'a>(rs: impl Iterator<Item = &'a RecentRequest>) -> Option<f64> {
    let (mut cached, mut all) = (0u64, 0u64);
    for r in rs {
        if let Some(n) = r.input_tokens {
            all = all.saturating_add(n);
            cached = cached.saturating_add(r.cached_tokens.unwrap_or(0).min(n));
        }
    }
    (all > 0).then(|| cached as f64 / all as f64)
}

/// The page.
/// `tracing`: spans are exported (trace ids exist to link).
pub fn render(recent: &[RecentRequest], jaeger_url: Option<&str>, tracing: bool) -> String {
    let mut h = String::with_capacity(8 * 1024 + recent.len() * 1500);
    h.push_str("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>llamatap · latency</title>\n<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><style>");
    h.push_str(STYLE);
    h.push_str("</style></head><body>\n<header><h1>llamatap · latency</h1>");
    h.push_str("<span class=muted>recent LLM requests; times in milliseconds from arrival at llamatap</span>");
    h.push_str("<label class=auto><input type=checkbox id=auto checked> auto-refresh (5 s)</label></header>\n<main id=main>");
    summary(&mut h, recent);
    percentiles(&mut h, recent);
    requests(&mut h, recent, jaeger_url, tracing);
    h.push_str("</main>\n");
    h.push_str(SCRIPT);
    h.push_str("</body></html>\n");
    h
}

/// Cards: counts by outcome, window, cache reuse.
fn summary(h: &mut String, recent: &[RecentRequest]) {
    let n = recent.len();
    let ok = recent.iter().filter(|r| r.outcome == "ok").count();
    let hang = recent
        .iter()
        .filter(|r| r.outcome == "client_hangup")
        .count();
    let failed = recent.iter().filter(|r| is_failure(r.outcome)).count();
    let refused = recent.iter().filter(|r| is_refused(r.outcome)).count();
    let window = match (recent.first(), recent.last()) {
        (Some(a), Some(b)) => format!("{} – {} UTC", clock(a.received), clock(b.received)),
        _ => "–".into(),
    };
    let reuse = cache_reuse(recent.iter())
        .map(|x| format!("{:.0}%", x * 100.0))
        .unwrap_or_else(|| "–".into());
    let mut ttft: Vec<f64> = recent
        .iter()
        .filter_map(|r| r.first_token)
        .map(ms_f)
        .collect();
    let ttft95 = quantile(&mut ttft, 0.95)
        .map(|x| format!("{x:.1} ms"))
        .unwrap_or_else(|| "–".into());
    h.push_str("<div class=cards>");
    for (value, what, tip) in [
        (n.to_string(), "requests in the window", ""),
        (ok.to_string(), "ok", ""),
        (hang.to_string(), "client hang-ups", ""),
        (
            failed.to_string(),
            "upstream/proxy errors",
            "upstream_error and proxy_error: unreachable, timeout, 5xx, cut stream, error event",
        ),
        (
            refused.to_string(),
            "refused (4xx)",
            "client_error and rejected: a 4xx from llama-server, or from llamatap itself (model_not_found, API key, size limits)",
        ),
        (ttft95, "first token p95", ""),
        (reuse, "prompt tokens from cache", ""),
        (window, "window", ""),
    ] {
        let _ = write!(
            h,
            "<div class=card title=\"{}\"><b>{}</b><span>{what}</span></div>",
            esc(tip),
            esc(&value)
        );
    }
    h.push_str("</div>\n");
}

/// p50 / p95 per stage and model. Refused requests (a 4xx: no model ran,
/// every stage empty) are left out of the rows and counted under them.
fn percentiles(h: &mut String, recent: &[RecentRequest]) {
    let mut by_model: BTreeMap<&str, Vec<&RecentRequest>> = BTreeMap::new();
    for r in recent.iter().filter(|r| !is_refused(r.outcome)) {
        by_model.entry(r.model.as_str()).or_default().push(r);
    }
    let stages: Vec<&(&str, StageOf)> = STAGES
        .iter()
        .filter(|(name, _)| *name != "queued" || queue_seen(recent))
        .collect();
    h.push_str("<h2>p50 / p95 per stage and model</h2><table><thead><tr><th class=l>model</th><th>requests</th>");
    for (name, _) in &stages {
        let _ = write!(h, "<th>{name}</th>");
    }
    h.push_str("<th>decode tokens/s</th><th>prompt cache reuse</th></tr></thead><tbody>");
    if by_model.is_empty() {
        let _ = write!(
            h,
            "<tr><td class=empty colspan={}>no data yet</td></tr>",
            stages.len() + 4
        );
    }
    for (model, rs) in &by_model {
        let _ = write!(
            h,
            "<tr><td class=l title=\"{}\">{}</td><td>{}</td>",
            esc(model),
            esc(short_model(model)),
            rs.len()
        );
        for (_, get) in &stages {
            let mut v: Vec<f64> = rs.iter().filter_map(|r| get(r)).map(ms_f).collect();
            pair(h, &mut v, 1);
        }
        let mut speed: Vec<f64> = rs.iter().filter_map(|r| decode_speed(r)).collect();
        pair(h, &mut speed, 0);
        match cache_reuse(rs.iter().copied()) {
            Some(x) => {
                let _ = write!(h, "<td>{:.0}%</td>", x * 100.0);
            }
            None => h.push_str("<td class=dim>–</td>"),
        }
        h.push_str("</tr>");
    }
    h.push_str("</tbody></table>\n");
    let refused = recent.iter().filter(|r| is_refused(r.outcome)).count();
    if refused > 0 {
        let _ = writeln!(
            h,
            "<p class=muted>{refused} refused request{} (4xx) not in these rows: no model ran for them.</p>",
            if refused == 1 { "" } else { "s" }
        );
    }
}

/// One `p50 / p95` cell.
fn pair(h: &mut String, v: &mut [f64], decimals: usize) {
    match (quantile(v, 0.5), quantile(v, 0.95)) {
        (Some(a), Some(b)) => {
            let _ = write!(h, "<td>{a:.decimals$} / {b:.decimals$}</td>");
        }
        _ => h.push_str("<td class=dim>–</td>"),
    }
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
                "predicted_first_token_ms": msf(r.predicted_first_token), "corrected_first_token_ms": msf(r.corrected_first_token), "prefill_ms": msf(r.prefill), "decode_ms": msf(r.decode), "queued_ms": msf(r.queued),
                "input_tokens": r.input_tokens, "cached_tokens": r.cached_tokens, "output_tokens": r.output_tokens,
                "trace_id": r.trace_id,
                "upstream": r.upstream, "route_reason": r.route_reason,
                "cache_break": r.cache_break.map(|(cause, at, tokens)| serde_json::json!({
                    "cause": cause,
                    "message_index": at.map(|a| a.0), "field": at.map(|a| a.1), "offset": at.map(|a| a.2),
                    "recomputed_tokens": tokens,
                })),
                "tenant": r.tenant.as_deref().unwrap_or("anonymous"), "class": r.class,
                "continuations": r.continuations.iter().map(|(at, reason, result, pause)| serde_json::json!({
                    "at_ms": at.as_secs_f64() * 1000.0, "reason": reason, "result": result,
                    "pause_ms": pause.as_secs_f64() * 1000.0,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::json!({ "requests": items }).to_string()
}

#[cfg(test)]
mod tests;
