//! The book keeps each tenant's conversations apart.

use serde_json::json;

use super::*;
use llamatap_wire::request::Route;

/// A turn of `tenant`: a system prompt and user messages, text kept.
fn turn(tenant: u64, system: &str, users: &[&str]) -> PromptDigest {
    let mut messages = vec![json!({"role": "system", "content": system})];
    for u in users {
        messages.push(json!({"role": "user", "content": u}));
    }
    let body = json!({"model": "m", "messages": messages});
    let mut d = PromptDigest::from_json(Route::ChatCompletions, &body, true).unwrap_or_default();
    d.in_tenant(tenant);
    d
}

fn observed(tokens: u64, cached: u64) -> Observed {
    Observed {
        cache_n: Some(cached),
        prompt_n: Some(tokens - cached),
        prompt_ms: Some(10.0),
        upstream: Some(1),
    }
}

#[test]
fn two_tenants_with_the_same_model_and_first_message_are_two_conversations() {
    let (alice, bob) = (1, 2);
    let mut book = Book::default();
    let d = book.diagnose(turn(alice, "alice's prompt", &["hi"]), observed(50, 0));
    assert_eq!(d.map(|d| d.cause), Some(Cause::NewConversation));
    // The same model and first message from another tenant: a conversation
    // of its own, and no excerpt of alice's text.
    let d = book
        .diagnose(turn(bob, "bob's prompt", &["hi"]), observed(50, 0))
        .unwrap();
    assert_eq!(d.cause, Cause::NewConversation);
    assert_eq!((d.position, d.old_excerpt), (None, None));
    assert_eq!(book.len(), 2);
    // Each one's next turn is judged against its own previous turn.
    let d = book
        .diagnose(
            turn(alice, "alice's prompt", &["hi", "more"]),
            observed(60, 50),
        )
        .unwrap();
    assert_eq!(d.cause, Cause::Reused);
    let d = book
        .diagnose(turn(bob, "bob's prompt, v2", &["hi"]), observed(50, 3))
        .unwrap();
    assert_eq!(d.cause, Cause::SystemChanged);
    let old = d.old_excerpt.unwrap_or_default();
    assert!(old.contains("bob's") && !old.contains("alice"), "{old}");
    // Nor is another tenant's conversation found by a later user message.
    let d = book
        .diagnose(
            turn(bob, "alice's prompt", &["more", "again"]),
            observed(40, 0),
        )
        .unwrap();
    assert_eq!(d.cause, Cause::NewConversation);
    // Within one tenant it is, as before.
    let d = book
        .diagnose(
            turn(alice, "alice's prompt", &["more", "again"]),
            observed(40, 0),
        )
        .unwrap();
    assert_eq!(d.cause, Cause::HistoryTruncated);
}
