//! The cache-break diagnosis in the proxy hooks: the prompt's digest is
//! built from the body the proxy parses anyway (in `request_body_filter`
//! with one upstream, in the fleet's pre-read with several), and judged in
//! `logging` against the conversation's previous turn
//! ([`crate::cachebreak`]).
//!
//! Only a chat request that succeeded, or at least got llama-server's
//! `timings`, is judged (a failed one reports no `timings` and teaches
//! nothing). The book of conversations is one per
//! process, behind a mutex held for one comparison and one insertion; each
//! tenant's conversations are its own there (the anonymous tenant's
//! included), so one tenant's turn is never compared with another's, nor
//! its text shown in another's excerpts.

use std::sync::Mutex;

use crate::cachebreak::{Book, Diagnosis, Observed, PromptDigest, DEFAULT_BUDGET_BYTES};
use crate::record::{Outcome, RequestRecord};
use crate::request::{RequestFacts, Route};
use crate::router::SEED;
use crate::tenant::TenantId;

/// The process's record of recent conversations.
#[derive(Debug)]
pub struct Breaks {
    book: Mutex<Book>,
    capture: bool,
}

impl Breaks {
    /// An empty record; with `capture` (`telemetry.capture_content`) each
    /// message's start is kept for exact offsets and excerpts.
    pub fn new(capture: bool) -> Self {
        Breaks {
            book: Mutex::new(Book::new(DEFAULT_BUDGET_BYTES)),
            capture,
        }
    }

    /// Whether message text is kept.
    pub fn capture(&self) -> bool {
        self.capture
    }

    /// Judges a finished request of `tenant`; `None` when it is not a
    /// judged chat turn.
    pub fn finish(
        &self,
        digest: Option<PromptDigest>,
        session: Option<u64>,
        tenant: TenantId,
        rec: &RequestRecord,
    ) -> Option<Diagnosis> {
        let mut digest = digest?;
        // A client that closes as soon as it read the last event can be a
        // hang-up with the whole answer, timings included: those count.
        if rec.outcome != Outcome::Ok && rec.timings.is_none() {
            return None;
        }
        if let Some(s) = session {
            // The session names the conversation: no need to find it again
            // by a later user message.
            digest.key = Some(xxhash_rust::xxh3::xxh3_64_with_seed(
                &s.to_le_bytes(),
                SEED ^ 1,
            ));
            digest.user_keys = Box::new([]);
        }
        digest.in_tenant(tenant_key(tenant));
        let t = rec.timings.as_ref();
        let observed = Observed {
            cache_n: rec.cached_input_tokens(),
            prompt_n: t.and_then(|t| t.prompt_n),
            prompt_ms: t.and_then(|t| t.prompt_ms),
            upstream: rec
                .upstream
                .as_ref()
                .map(|u| crate::router::upstream_id(&u.name)),
        };
        let mut book = self.book.lock().ok()?;
        book.diagnose(digest, observed)
    }
}

/// The book's plain key of a tenant: 0 for the anonymous one.
fn tenant_key(tenant: TenantId) -> u64 {
    match tenant {
        TenantId::Anonymous => 0,
        TenantId::Named(i) => (i as u64).wrapping_add(1),
    }
}

/// Reads a complete request body once: its facts and, on a chat route, the
/// digest of its prompt ([`crate::cachebreak::inspect`]).
pub fn inspect(route: Route, body: &[u8], capture: bool) -> (RequestFacts, Option<PromptDigest>) {
    crate::cachebreak::inspect(route, body, capture)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cachebreak::Cause;
    use crate::llama::Timings;

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
}
