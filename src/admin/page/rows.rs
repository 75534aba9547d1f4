//! The latency page's table of recent requests: one row per request with
//! its figures, its waterfall (queue, upstream headers, first token, first
//! sentence, end), its cache-break mark and, in a fleet, its upstream.
//! Builds HTML text; the page around it is [`super::render`]'s.

use std::fmt::Write as _;

use super::*;

/// The requests table, newest first, each with its waterfall.
pub(super) fn requests(
    h: &mut String,
    recent: &[RecentRequest],
    jaeger_url: Option<&str>,
    tracing: bool,
) {
    let scale = axis(recent);
    let beyond = recent.iter().any(|r| ms_f(r.end) > scale);
    let queue = queue_seen(recent);
    h.push_str("<h2>Requests, newest first</h2><div class=legend>");
    for (cls, what) in [
        ("q", "queued in llamatap"),
        ("w", "waiting for upstream headers"),
        ("t", "headers → first token"),
        ("s", "first token → end (streaming)"),
        ("m", "first sentence complete"),
        ("pr", "predicted first token"),
        ("pc", "predicted first token, corrected during the prefill"),
        ("p", "llama-server prefill"),
        ("d", "llama-server decode"),
    ] {
        if cls == "q" && !queue {
            continue;
        }
        let style = match cls {
            "m" => " style=\"background:var(--sent);width:3px\"",
            "pr" => " style=\"border-left:2px dashed #0f766e;width:0;height:10px\"",
            "pc" => " style=\"border-left:2px dotted #b45309;width:0;height:10px\"",
            _ => "",
        };
        let _ = write!(h, "<span><i class={cls}{style}></i>{what}</span>");
    }
    h.push_str("<span><span class='miss key'>(0)</span> nothing reused from the KV cache</span>");
    h.push_str("<span><i class='c key' style=\"background:#7c3aed;width:3px\"></i>answer continued (↻)</span>");
    if tracing && jaeger_url.is_none() {
        h.push_str("<span>set <code>admin.jaeger_url</code> to link trace ids to Jaeger</span>");
    }
    if beyond {
        h.push_str("<span>» a request longer than the axis runs off its right edge</span>");
    }
    // The upstream column appears once requests went to more than one
    // upstream: with a single llama-server it would say the same every row.
    let fleet = recent
        .iter()
        .filter_map(|r| r.upstream.as_deref())
        .collect::<std::collections::HashSet<_>>()
        .len()
        > 1;
    let upstream_th = if fleet {
        "<th class=l title=\"the llama-server that answered; hover a name for why it was chosen\">upstream</th>"
    } else {
        ""
    };
    // The model column appears once the window holds more than one model:
    // with one, the percentile table above names it.
    let models = recent
        .iter()
        .map(|r| r.model.as_str())
        .collect::<std::collections::HashSet<_>>()
        .len()
        > 1;
    let model_th = if models { "<th class=l>model</th>" } else { "" };
    // Who asked: once a request came with a named key or through the queue.
    let who = recent
        .iter()
        .any(|r| r.tenant.is_some() || r.class.is_some());
    let who_th = match (who, queue) {
        (false, _) => "",
        (true, true) => "<th class=l title=\"the tenant (its key's name) and the request's class in the admission queue (– when the queue did not take it)\">tenant · class</th>",
        (true, false) => "<th class=l title=\"the tenant: its key's name (the queue is off, so requests have no class)\">tenant</th>",
    };
    let _ = write!(
        h,
        "</div><div class=scroll><table><thead><tr><th class=l>time (UTC)</th>{model_th}{upstream_th}{who_th}<th class=l>route</th><th class=l>outcome</th>\
<th>headers</th><th>1st token</th><th>1st sentence</th><th>end</th><th>prefill</th><th>decode</th>\
<th title=\"tokens: prompt (of which from the KV cache) → output\">in (cached) → out</th>\
<th class=l>waterfall: 0 – {scale:.0} ms</th><th class=l>trace</th></tr></thead><tbody>"
    );
    if recent.is_empty() {
        h.push_str("<tr><td class=empty colspan=15>No LLM request yet: send one through the proxy and it appears here.</td></tr>");
    }
    for r in recent.iter().rev() {
        let cls = match r.outcome {
            "ok" => "ok",
            "client_hangup" => "hang",
            _ => "err",
        };
        let status = r.status.map(|s| format!(" {s}")).unwrap_or_default();
        let opt = |n: Option<u64>| n.map(|n| n.to_string()).unwrap_or_else(|| "–".into());
        // A prompt with nothing from the KV cache: the first of its kind, or
        // one that changes at its very start (which defeats the cache).
        let cached = match (r.input_tokens, r.cached_tokens) {
            (Some(n), Some(0)) if n > 0 => {
                "<span class=miss title=\"nothing reused from the KV cache: a new prompt, or one that changes at its start\">(0)</span>".to_string()
            }
            (_, c) => format!("({})", opt(c)),
        };
        let _ = write!(
            h,
            "<tr><td class=l>{}</td>{}{}{}<td class=l>{}</td><td class=l><span class='pill {cls}'>{}{status}</span></td>\
<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=io>{} {} → {}{}</td><td class=l>",
            clock(r.received),
            model_cell(r, models),
            upstream_cell(r, fleet),
            who_cell(r, who, queue),
            esc(r.route),
            esc(r.outcome) + &continuation_mark(r),
            ms(r.upstream_headers),
            ms(r.first_token),
            ms(r.first_sentence),
            ms(Some(r.end)),
            ms(r.prefill),
            ms(r.decode),
            opt(r.input_tokens),
            cached,
            opt(r.output_tokens),
            break_mark(r),
        );
        waterfall(h, r, scale);
        h.push_str("</td><td class=l>");
        match (&r.trace_id, jaeger_url) {
            (Some(id), Some(base)) => {
                let _ = write!(
                    h,
                    "<a href=\"{}/trace/{}\" target=_blank rel=noopener title=\"open trace {} in Jaeger\"><code>{}</code></a>",
                    esc(base.trim_end_matches('/')),
                    esc(id),
                    esc(id),
                    esc(&id[..id.len().min(8)])
                );
            }
            (Some(id), None) => {
                let _ = write!(
                    h,
                    "<code title=\"{}\">{}</code>",
                    esc(id),
                    esc(&id[..id.len().min(12)])
                );
            }
            _ => h.push_str("<span class=dim>–</span>"),
        }
        h.push_str("</td></tr>\n");
    }
    h.push_str("</tbody></table></div>\n");
}

/// The waterfalls' shared axis, ms: the longest request when there are few,
/// else the 90th percentile of their ends (one long request would shrink
/// every other waterfall to a pixel; those beyond run off the edge).
fn axis(recent: &[RecentRequest]) -> f64 {
    let mut ends: Vec<f64> = recent.iter().map(|r| ms_f(r.end)).collect();
    ends.sort_by(f64::total_cmp);
    let at = if ends.len() < 10 {
        ends.len().saturating_sub(1)
    } else {
        (ends.len() - 1) * 9 / 10
    };
    ends.get(at).copied().unwrap_or(0.0).max(0.001)
}

/// The tenant · class cell, when the column is shown: both once the queue
/// took a request of the window (`–` for a request it did not take), the
/// tenant alone with the queue off.
fn who_cell(r: &RecentRequest, shown: bool, queue: bool) -> String {
    if !shown {
        return String::new();
    }
    let tenant = r.tenant.as_deref().unwrap_or("anonymous");
    match (r.class, queue) {
        (Some(c), _) => format!("<td class=l>{} · {}</td>", esc(tenant), esc(c)),
        (None, true) => format!(
            "<td class=l>{} · <span class=dim>–</span></td>",
            esc(tenant)
        ),
        (None, false) => format!("<td class=l>{}</td>", esc(tenant)),
    }
}

/// One segment `[from, to]` (ms) as a positioned bar.
fn seg(h: &mut String, class: &str, from: f64, to: f64, scale: f64) {
    let left = (from / scale * 100.0).clamp(0.0, 100.0);
    let right = (to / scale * 100.0).clamp(0.0, 100.0);
    let width = (right - left).max(0.4);
    let _ = write!(
        h,
        "<i class='{class}' style='left:{left:.2}%;width:{width:.2}%'></i>"
    );
}

fn waterfall(h: &mut String, r: &RecentRequest, scale: f64) {
    let end = ms_f(r.end);
    let headers = r.upstream_headers.map(ms_f);
    let first = r.first_token_any.or(r.first_token).map(ms_f);
    let queued = match r.queued {
        Some(q) => format!("queued {} · ", ms(Some(q))),
        None => String::new(),
    };
    let predicted = match r.predicted_first_token {
        Some(p) => format!("predicted first token {} · ", ms(Some(p))),
        None => String::new(),
    };
    let corrected = match r.corrected_first_token {
        Some(p) => format!("corrected first token {} · ", ms(Some(p))),
        None => String::new(),
    };
    let title = format!(
        "{queued}{predicted}{corrected}headers {} · first token {} · first sentence {} · end {} · prefill {} · decode {} (ms)",
        ms(r.upstream_headers),
        ms(r.first_token),
        ms(r.first_sentence),
        ms(Some(r.end)),
        ms(r.prefill),
        ms(r.decode)
    );
    let _ = write!(h, "<div class=wf title=\"{}\">", esc(&title));
    if end > scale {
        h.push_str("<b class=beyond>»</b>");
    }
    // Lane a: the proxy's moments, the queue's wait first.
    let q = r.queued.map(ms_f).unwrap_or(0.0);
    if q > 0.0 {
        seg(h, "a q", 0.0, q, scale);
    }
    match (headers, first) {
        (Some(hd), Some(f)) => {
            seg(h, "a w", q.min(hd), hd, scale);
            seg(h, "a t", hd, f.max(hd), scale);
            seg(h, "a s", f.max(hd), end, scale);
        }
        (Some(hd), None) => {
            seg(h, "a w", q.min(hd), hd, scale);
            if end - hd > 0.05 * scale {
                seg(h, "a t", hd, end, scale);
            }
        }
        (None, _) => seg(h, "a w", q.min(end), end, scale),
    }
    if let Some(s) = r.first_sentence.map(ms_f) {
        let left = (s / scale * 100.0).clamp(0.0, 99.5);
        let _ = write!(h, "<i class=m style='left:{left:.2}%'></i>");
    }
    if let Some(p) = r.predicted_first_token.map(ms_f) {
        let left = (p / scale * 100.0).clamp(0.0, 99.5);
        let _ = write!(h, "<i class=pr style='left:{left:.2}%'></i>");
    }
    if let Some(p) = r.corrected_first_token.map(ms_f) {
        let left = (p / scale * 100.0).clamp(0.0, 99.5);
        let _ = write!(h, "<i class=pc style='left:{left:.2}%'></i>");
    }
    for (at, ..) in &r.continuations {
        let left = (ms_f(*at) / scale * 100.0).clamp(0.0, 99.5);
        let _ = write!(h, "<i class=c style='left:{left:.2}%'></i>");
    }
    // Lane b: llama-server's own prefill and decode, ending with generation.
    let gen_end = r.last_token.map(ms_f).unwrap_or(end);
    let decode = r.decode.map(ms_f).unwrap_or(0.0);
    let decode_start = (gen_end - decode).max(0.0);
    if r.decode.is_some() {
        seg(h, "b d", decode_start, gen_end, scale);
    }
    if let Some(p) = r.prefill.map(ms_f) {
        seg(h, "b p", (decode_start - p).max(0.0), decode_start, scale);
    }
    h.push_str("</div>");
}

/// The continuation marker of a request row: one mark however many cuts
/// the answer had (the row keeps its width), `↻ reason` for one, `↻ N×`
/// for more; its title lists each cut, why, how it went and the client's
/// pause. Empty when it had none.
fn continuation_mark(r: &RecentRequest) -> String {
    let cuts: Vec<String> = r
        .continuations
        .iter()
        .map(|(at, reason, result, pause)| {
            format!(
                "cut at {:.0} ms ({reason}): {result}, the client paused {:.0} ms",
                ms_f(*at),
                ms_f(*pause),
            )
        })
        .collect();
    let label = match r.continuations.as_slice() {
        [] => return String::new(),
        [(_, reason, ..)] => (*reason).to_string(),
        more => format!("{}×", more.len()),
    };
    format!(
        " <span class=cont title=\"{}\">↻ {}</span>",
        esc(&cuts.join("; ")),
        esc(&label)
    )
}

/// The cache-break marker of a request row: its cause and where the prompt
/// stopped matching the previous turn; empty unless the cause is a break.
fn break_mark(r: &RecentRequest) -> String {
    let Some((cause, at, tokens)) = r.cache_break else {
        return String::new();
    };
    if matches!(cause, "reused" | "new_conversation" | "unknown") {
        return String::new();
    }
    let (short, long) = match at {
        Some((i, field, offset)) => (
            format!(" @{i}.{field}+{offset}"),
            format!("message {i}, {field}, character {offset}"),
        ),
        None => (
            String::new(),
            "the prompt extends the previous turn".to_string(),
        ),
    };
    format!(
        "<span class=brk title=\"cache break: {} at {}; {} prompt tokens recomputed\">⚠ {}{}</span>",
        esc(cause),
        esc(&long),
        tokens,
        esc(cause),
        esc(&short)
    )
}

/// The model cell of a request row, when the page shows the column: the
/// file name, cut with `…` past the column's width (the title has it all).
fn model_cell(r: &RecentRequest, shown: bool) -> String {
    if !shown {
        return String::new();
    }
    format!(
        "<td class='l clip' title=\"{}\">{}</td>",
        esc(&r.model),
        esc(short_model(&r.model))
    )
}

/// The upstream cell of a request row, when the page shows the column.
fn upstream_cell(r: &RecentRequest, fleet: bool) -> String {
    if !fleet {
        return String::new();
    }
    format!(
        "<td class=l title=\"{}\">{}</td>",
        esc(r.route_reason.unwrap_or("")),
        esc(r.upstream.as_deref().unwrap_or("–"))
    )
}
