//! The resumable streams' families: requests by what they did with a
//! conversation, the bytes replays sent, and the bytes of answers read
//! after their client hung up (generated once, sent to nobody).
//! `use` takes its values from a fixed list
//! ([`llamatap_policy::conversation::Use`]), seeded at zero.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::record::RequestRecord;
use llamatap_policy::conversation::Use;

/// `{use}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UseLabels {
    /// [`Use::as_str`].
    pub r#use: &'static str,
}

/// The conversation families.
#[derive(Clone, Default)]
pub struct ConversationMetrics {
    /// `llamatap_conversation_requests_total{use}`.
    pub requests: Family<UseLabels, Counter>,
    /// `llamatap_conversation_replayed_bytes_total`.
    pub replayed_bytes: Counter,
    /// `llamatap_conversation_unsent_bytes_total`.
    pub unsent_bytes: Counter,
}

impl ConversationMetrics {
    /// Creates the families, registers them in `r`, seeds every `use`.
    pub fn register(r: &mut Registry) -> Self {
        let m = ConversationMetrics::default();
        r.register(
            "llamatap_conversation_requests",
            "Requests naming a resumable stream, by what they did: generate (X-Conversation-Id), replay (GET /v1/stream), stop (DELETE /v1/stream), lookup (one member's part of POST /v1/streams/lookup is not counted; the client's request is not either)",
            m.requests.clone(),
        );
        r.register(
            "llamatap_conversation_replayed_bytes",
            "Bytes of buffered answers sent to clients by replays (GET /v1/stream); generated, and charged, once by the generation",
            m.replayed_bytes.clone(),
        );
        r.register(
            "llamatap_conversation_unsent_bytes",
            "Bytes of answers with X-Conversation-Id that llama-server went on generating after the client hung up, read by llamatap and sent to nobody (counted and charged with their generation)",
            m.unsent_bytes.clone(),
        );
        for u in [Use::Generate, Use::Replay, Use::Stop] {
            let _ = m.requests.get_or_create(&UseLabels { r#use: u.as_str() });
        }
        m
    }

    /// Counts a finished request's conversation facts.
    pub fn record(&self, rec: &RequestRecord) {
        let Some(c) = &rec.conversation else {
            return;
        };
        self.requests
            .get_or_create(&UseLabels {
                r#use: c.usage.as_str(),
            })
            .inc();
        self.replayed_bytes.inc_by(c.replayed_bytes);
        self.unsent_bytes.inc_by(c.unsent_bytes);
    }
}
