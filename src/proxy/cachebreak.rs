//! The cache-break diagnosis in the proxy hooks: the prompt's digest is
//! built from the body the proxy parses anyway (in `request_body_filter`
//! with one upstream, in the fleet's pre-read with several), and judged in
//! `logging` against the conversation's previous turn
//! ([`llamatap_policy::cachebreak`]).
//!
//! Only a chat request that succeeded, or at least got llama-server's
//! `timings`, is judged (a failed one reports no `timings` and teaches
//! nothing). The book of conversations is one per
//! process, behind a mutex held for one comparison and one insertion; each
//! tenant's conversations are its own there (the anonymous tenant's
//! included), so one tenant's turn is never compared with another's, nor
//! its text shown in another's excerpts.

use std::sync::Mutex;

use llamatap_policy::cachebreak::{Book, Diagnosis, Observed, PromptDigest, DEFAULT_BUDGET_BYTES};
use llamatap_policy::router::SEED;
use llamatap_policy::tenant::TenantId;
use llamatap_telemetry::record::{Outcome, RequestRecord};
use llamatap_wire::request::{RequestFacts, Route};

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
                .map(|u| llamatap_policy::router::upstream_id(&u.name)),
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
/// digest of its prompt ([`llamatap_policy::cachebreak::inspect`]).
pub fn inspect(route: Route, body: &[u8], capture: bool) -> (RequestFacts, Option<PromptDigest>) {
    llamatap_policy::cachebreak::inspect(route, body, capture)
}

#[cfg(test)]
mod tests;
