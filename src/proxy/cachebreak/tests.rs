use super::*;
use llamatap_policy::cachebreak::Cause;
use llamatap_wire::llama::Timings;

fn record(outcome: Outcome, timings: Option<Timings>) -> RequestRecord {
    let mut rec = crate::proxy::context::RequestCtx::new().record(
        "POST".into(),
        "/v1/chat/completions".into(),
        outcome,
        None,
        None,
    );
    rec.timings = timings;
    rec
}

fn turn(user: &[&str]) -> Option<PromptDigest> {
    let mut messages = vec![serde_json::json!({"role": "system", "content": "s"})];
    for u in user {
        messages.push(serde_json::json!({"role": "user", "content": u}));
    }
    let body = serde_json::json!({"messages": messages}).to_string();
    inspect(Route::ChatCompletions, body.as_bytes(), false).1
}

#[test]
fn a_turn_is_judged_when_it_succeeded_or_brought_timings() {
    let breaks = Breaks::new(false);
    let timings = Timings {
        cache_n: Some(0),
        prompt_n: Some(10),
        ..Timings::default()
    };
    let failed = record(Outcome::UpstreamError, None);
    assert_eq!(
        breaks.finish(turn(&["a"]), None, TenantId::Anonymous, &failed),
        None
    );
    let hung_up = record(Outcome::ClientHangup, Some(timings));
    let d = breaks
        .finish(turn(&["a"]), None, TenantId::Anonymous, &hung_up)
        .unwrap();
    assert_eq!(d.cause, Cause::NewConversation);
    let ok = record(Outcome::Ok, Some(timings));
    let d = breaks
        .finish(turn(&["a", "b"]), None, TenantId::Anonymous, &ok)
        .unwrap();
    assert_eq!(d.cause, Cause::Evicted, "nothing reused of 10 tokens");
    // Other routes carry no digest.
    assert_eq!(inspect(Route::Completions, b"{}", false).1, None);
}

#[test]
fn a_session_names_the_conversation() {
    let breaks = Breaks::new(false);
    let ok = record(Outcome::Ok, None);
    assert_eq!(
        breaks
            .finish(turn(&["a"]), Some(7), TenantId::Anonymous, &ok)
            .map(|d| d.cause),
        Some(Cause::NewConversation)
    );
    // Another first message, the same session: the same conversation.
    assert_eq!(
        breaks
            .finish(turn(&["b"]), Some(7), TenantId::Anonymous, &ok)
            .map(|d| d.cause),
        Some(Cause::HistoryEdited)
    );
}

#[test]
fn tenants_never_see_each_others_turns() {
    let breaks = Breaks::new(true);
    let ok = record(Outcome::Ok, None);
    let body = |system: &str, user: &[&str]| {
        let mut messages = vec![serde_json::json!({"role": "system", "content": system})];
        for u in user {
            messages.push(serde_json::json!({"role": "user", "content": u}));
        }
        let body = serde_json::json!({"model": "m", "messages": messages}).to_string();
        inspect(Route::ChatCompletions, body.as_bytes(), true).1
    };
    let (alice, bob) = (TenantId::Named(0), TenantId::Named(1));
    let first = breaks.finish(body("secret of alice", &["hi"]), None, alice, &ok);
    assert_eq!(first.map(|d| d.cause), Some(Cause::NewConversation));
    // The same model and first message from another tenant (or the
    // anonymous one): a conversation of its own, no excerpt of alice's.
    for other in [bob, TenantId::Anonymous] {
        let d = breaks
            .finish(body("bob's", &["hi"]), None, other, &ok)
            .unwrap();
        assert_eq!(d.cause, Cause::NewConversation, "{other:?}");
        assert_eq!(d.old_excerpt, None);
    }
    // Each tenant's own next turn finds its own previous one.
    let d = breaks.finish(body("secret of alice", &["hi", "more"]), None, alice, &ok);
    assert_eq!(
        d.map(|d| d.cause),
        Some(Cause::Unknown),
        "alice's turn extends hers"
    );
    let d = breaks
        .finish(body("bob's v2", &["hi"]), None, bob, &ok)
        .unwrap();
    assert_eq!(d.cause, Cause::SystemChanged);
    assert!(d.old_excerpt.is_some_and(|e| !e.contains("alice")));
    // A session names a conversation within its tenant only.
    let s = |t| {
        breaks
            .finish(body("s", &["x"]), Some(9), t, &ok)
            .map(|d| d.cause)
    };
    assert_eq!(s(alice), Some(Cause::NewConversation));
    assert_eq!(s(bob), Some(Cause::NewConversation));
}
