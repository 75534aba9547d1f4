use super::*;

fn req(model: &str, outcome: &'static str, end_ms: u64) -> RecentRequest {
    let d = Duration::from_millis;
    RecentRequest {
        received: UNIX_EPOCH + Duration::from_secs(3600 + 61),
        model: model.into(),
        route: "chat_completions",
        outcome,
        status: Some(200),
        streamed: true,
        upstream_headers: Some(d(5)),
        first_token_any: Some(d(20)),
        first_token: Some(d(20)),
        first_sentence: Some(d(40)),
        last_token: Some(d(end_ms - 1)),
        end: d(end_ms),
        prefill: Some(d(12)),
        decode: Some(d(end_ms - 25)),
        input_tokens: Some(100),
        cached_tokens: Some(75),
        output_tokens: Some(50),
        trace_id: Some("0123456789abcdef0123456789abcdef".into()),
        upstream: Some("gpu-a".into()),
        route_reason: Some("prefix_hit"),
        cache_break: None,
        queued: None,
        tenant: None,
        class: None,
        continuations: Vec::new(),
        predicted_first_token: None,
        corrected_first_token: None,
    }
}

#[test]
fn quantile_is_nearest_rank() {
    let mut v = vec![5.0, 1.0, 4.0, 2.0, 3.0];
    assert_eq!(quantile(&mut v, 0.5), Some(3.0));
    assert_eq!(quantile(&mut v, 0.95), Some(5.0));
    assert_eq!(quantile(&mut [], 0.5), None);
}

#[test]
fn queue_wait_is_the_first_bar_of_the_waterfall() {
    let mut r = req("/models/tiny.gguf", "ok", 100);
    r.queued = Some(Duration::from_millis(40));
    let html = render(&[r], None, true);
    let row = html.split("<div class=wf").nth(1).unwrap_or("");
    assert!(row.contains("queued 40.0"), "{row}");
    assert!(
        row.find("class='a q' style='left:0.00%")
            .is_some_and(|q| row.find("class='a w'").is_some_and(|w| q < w)),
        "{row}"
    );
    assert!(html.contains(">queued<"), "a percentile column");
}

#[test]
fn page_has_rows_percentiles_and_trace_links() {
    let rs = vec![
        req("/models/tiny.gguf", "ok", 100),
        req("/models/tiny.gguf", "client_hangup", 300),
    ];
    let html = render(&rs, Some("http://jaeger:16686/"), true);
    assert!(html.contains("http://jaeger:16686/trace/0123456789abcdef0123456789abcdef"));
    assert!(html.contains(">tiny.gguf<"), "short model name shown");
    assert!(
        html.contains("title=\"/models/tiny.gguf\""),
        "full label kept"
    );
    assert!(html.contains("client_hangup"));
    assert!(html.contains("75%"), "cache reuse per model");
    assert!(html.contains("01:01:01"), "UTC clock");
    assert!(html.contains("waterfall: 0 – 300 ms"));
    assert_eq!(html.matches("<div class=wf").count(), 2);
    assert!(
        !html.contains(" src=") && !html.contains("<link"),
        "no external assets"
    );
}

#[test]
fn a_prompt_with_no_cache_reuse_stands_out() {
    let mut miss = req("m", "ok", 80);
    miss.cached_tokens = Some(0);
    let html = render(&[req("m", "ok", 50), miss], None, true);
    assert_eq!(html.matches("class=miss").count(), 1);
    assert!(html.contains("100 (75) → 50"));
}

#[test]
fn a_cache_break_is_marked_with_its_cause_and_position() {
    let mut broke = req("m", "ok", 80);
    broke.cache_break = Some(("system_changed", Some((0, "system", 32)), 900));
    let mut clean = req("m", "ok", 60);
    clean.cache_break = Some(("reused", None, 1));
    let html = render(&[clean, broke.clone()], None, true);
    assert_eq!(html.matches("class=brk").count(), 1);
    assert!(html.contains("⚠ system_changed @0.system+32"), "{html}");
    assert!(html.contains("900 prompt tokens recomputed"));
    let v: serde_json::Value = serde_json::from_str(&json(&[broke])).unwrap();
    assert_eq!(v["requests"][0]["cache_break"]["cause"], "system_changed");
    assert_eq!(v["requests"][0]["cache_break"]["offset"], 32);
}

#[test]
fn a_continued_answer_is_marked_in_its_row_and_waterfall() {
    let mut moved = req("m", "ok", 80);
    moved.continuations = vec![(
        Duration::from_millis(40),
        "preempted",
        "continued",
        Duration::from_millis(12),
    )];
    let html = render(&[req("m", "ok", 60), moved.clone()], None, true);
    assert_eq!(html.matches("class=cont").count(), 1);
    assert!(html.contains("↻ preempted"), "{html}");
    assert!(html.contains("the client paused 12 ms"), "{html}");
    assert_eq!(html.matches("<i class=c ").count(), 1);
    let v: serde_json::Value = serde_json::from_str(&json(&[moved])).unwrap();
    assert_eq!(v["requests"][0]["continuations"][0]["reason"], "preempted");
    assert_eq!(v["requests"][0]["continuations"][0]["pause_ms"], 12.0);
}

#[test]
fn the_upstream_column_appears_with_more_than_one_upstream() {
    let one = render(&[req("m", "ok", 50), req("m", "ok", 60)], None, true);
    assert!(!one.contains(">upstream</th>"), "one upstream: no column");
    let mut other = req("m", "ok", 70);
    other.upstream = Some("gpu-b".into());
    other.route_reason = Some("cold");
    let two = render(&[req("m", "ok", 50), other], None, true);
    assert!(two.contains(">upstream</th>"));
    assert!(two.contains("<td class=l title=\"cold\">gpu-b</td>"));
    assert!(two.contains("<td class=l title=\"prefix_hit\">gpu-a</td>"));
}

#[test]
fn one_long_request_does_not_shrink_every_other_waterfall() {
    let mut rs: Vec<RecentRequest> = (0..19).map(|i| req("m", "ok", 100 + i)).collect();
    rs.push(req("m", "ok", 60_000));
    let html = render(&rs, None, true);
    // The axis is the 90th percentile, not the 60 s outlier, which is marked.
    assert!(html.contains("waterfall: 0 – 117 ms"), "{html}");
    assert_eq!(html.matches("class=beyond").count(), 2, "118 ms and 60 s");
    assert!(html.contains("runs off its right edge"));
    // Few requests: the longest sets it.
    let few = render(&[req("m", "ok", 50), req("m", "ok", 900)], None, true);
    assert!(few.contains("waterfall: 0 – 900 ms"), "{few}");
    assert!(!few.contains("class=beyond"));
}

#[test]
fn tenant_and_class_are_shown_once_a_request_has_them() {
    let plain = render(&[req("m", "ok", 50)], None, true);
    assert!(!plain.contains("tenant · class</th>"));
    let mut voice = req("m", "ok", 60);
    voice.tenant = Some("voice-app".into());
    voice.class = Some("interactive");
    let html = render(&[req("m", "ok", 50), voice.clone()], None, true);
    assert!(html.contains("tenant · class</th>"));
    assert!(html.contains("<td class=l>voice-app · interactive</td>"));
    // A request the queue did not take: its tenant, and no class.
    assert!(html.contains("<td class=l>anonymous · <span class=dim>–</span></td>"));
    let v: serde_json::Value = serde_json::from_str(&json(&[voice])).unwrap();
    assert_eq!(v["requests"][0]["tenant"], "voice-app");
    assert_eq!(v["requests"][0]["class"], "interactive");
}

#[test]
fn the_jaeger_hint_only_with_tracing_and_the_miss_mark_explained() {
    let off = render(&[req("m", "ok", 50)], None, false);
    assert!(!off.contains("admin.jaeger_url"));
    assert!(off.contains("nothing reused from the KV cache</span>"));
    let on = render(&[req("m", "ok", 50)], None, true);
    assert!(on.contains("admin.jaeger_url"));
}

#[test]
fn empty_window_and_no_jaeger() {
    let html = render(&[], None, true);
    assert!(html.contains("No LLM request yet"));
    assert!(html.contains("admin.jaeger_url"));
    let html = render(&[req("m", "upstream_error", 50)], None, true);
    assert!(html.contains("<code title=\"0123456789abcdef0123456789abcdef\">"));
    assert!(html.contains("pill err"));
}

#[test]
fn labels_are_escaped() {
    let html = render(&[req("<b>\"x\"</b>", "ok", 50)], None, true);
    assert!(!html.contains("<b>\"x\"</b>"));
    assert!(html.contains("&lt;b&gt;&quot;x&quot;&lt;/b&gt;"));
}

/// With the queue off (no request of the window went through it), no
/// "queued" column, legend entry or tooltip; a named tenant's column says
/// "tenant", not "tenant · class".
#[test]
fn the_queue_column_and_legend_only_once_the_queue_took_a_request() {
    let mut voice = req("m", "ok", 60);
    voice.tenant = Some("voice-app".into());
    let off = render(&[req("m", "ok", 50), voice.clone()], None, true);
    assert!(!off.contains(">queued<"), "{off}");
    assert!(!off.contains("queued in llamatap"), "{off}");
    assert!(!off.contains("queued –"), "{off}");
    assert!(off.contains(">tenant</th>"), "{off}");
    assert!(!off.contains("tenant · class"), "{off}");
    assert!(off.contains("<td class=l>voice-app</td>"), "{off}");
    voice.class = Some("batch");
    voice.queued = Some(Duration::from_millis(3));
    let on = render(&[req("m", "ok", 50), voice], None, true);
    assert!(on.contains(">queued<") && on.contains("queued in llamatap"));
    assert!(on.contains("tenant · class</th>"));
    assert!(on.contains("<td class=l>voice-app · batch</td>"));
}

/// Refused requests (no model ran) make no model row of dashes; they are
/// counted under the table.
#[test]
fn refused_requests_are_left_out_of_the_model_rows() {
    let mut refused = req("none", "rejected", 30);
    refused.status = Some(401);
    (
        refused.upstream_headers,
        refused.first_token,
        refused.first_sentence,
    ) = (None, None, None);
    let html = render(&[req("m", "ok", 50), refused.clone(), refused], None, true);
    let table = html.split("<h2>Requests").next().unwrap_or("");
    assert!(!table.contains("title=\"none\""), "{table}");
    assert!(
        table.contains("<td class=l title=\"m\">m</td><td>1</td>"),
        "{table}"
    );
    assert!(
        table.contains("2 refused requests (4xx) not in these rows"),
        "{table}"
    );
    // They still have their rows among the requests.
    assert_eq!(html.matches("pill err").count(), 2);
}

/// However many times an answer was continued, its row carries one mark
/// (the title lists every cut), and the table scrolls rather than push the
/// trace column off the page.
#[test]
fn a_long_continued_answer_keeps_its_row_narrow() {
    let mut moved = req("m", "ok", 900);
    moved.continuations = (0..6)
        .map(|i| {
            (
                Duration::from_millis(100 * i + 50),
                "upstream_died",
                "continued",
                Duration::from_millis(7),
            )
        })
        .collect();
    let html = render(&[moved], None, true);
    assert_eq!(html.matches("class=cont").count(), 1, "{html}");
    assert!(html.contains(">↻ 6×</span>"), "{html}");
    assert_eq!(html.matches("cut at ").count(), 6, "{html}");
    assert_eq!(html.matches("<i class=c ").count(), 6);
    assert!(html.contains("<div class=scroll><table>"));
    assert!(html.contains(".scroll{max-width:100%;overflow-x:auto}"));
}

/// The requests table names the model only once the window holds more
/// than one (the percentile table names it already); a cache break sits
/// under the token counts, not beside them.
#[test]
fn the_model_column_only_with_more_than_one_model() {
    let one = render(
        &[req("/m/a.gguf", "ok", 50), req("/m/a.gguf", "ok", 60)],
        None,
        true,
    );
    let rows = one.split("<h2>Requests").nth(1).unwrap_or("");
    assert!(!rows.contains(">model</th>"), "{rows}");
    assert!(!rows.contains("a.gguf"), "{rows}");
    let mut broke = req("/m/b.gguf", "ok", 70);
    broke.cache_break = Some(("system_changed", Some((0, "system", 3)), 9));
    let two = render(&[req("/m/a.gguf", "ok", 50), broke], None, true);
    let rows = two.split("<h2>Requests").nth(1).unwrap_or("");
    assert!(rows.contains(">model</th>"), "{rows}");
    assert!(
        rows.contains("<td class='l clip' title=\"/m/b.gguf\">b.gguf</td>"),
        "{rows}"
    );
    assert!(two.contains(".brk{display:block;"), "{two}");
}
