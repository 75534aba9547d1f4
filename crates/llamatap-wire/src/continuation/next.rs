//! The next attempt at an answer that was cut: from the request's body and
//! what its client was sent, whether the answer can go on in meaning, ends
//! where it is (its text was whole, or every token asked for was sent), or
//! is generated on by a target (with what to send it and how to rewrite
//! what it sends back).
//!
//! Pure: a decision over bytes and facts. Deliberately not here: hearing
//! what the client was sent (the observer), choosing the target, sending
//! anything (the proxy's forwarding loop).

use super::rest::Target;
use super::rewrap::{native_end, stream_ids};
use super::{plan_for, Plan, Sent, Shape};

/// What the client was sent of the answer, as its observer heard it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Heard<'a> {
    /// The visible text, in order.
    pub text: &'a str,
    /// The token ids of that text, when every event carried them.
    pub ids: Option<&'a [u32]>,
    /// Token events counted.
    pub token_events: u64,
    /// The first event's data (the stream's id, `created`, model).
    pub first_event: Option<&'a [u8]>,
    /// A token on another channel (reasoning, tool calls) was sent.
    pub hidden: bool,
    /// The text outgrew what was kept.
    pub overflow: bool,
    /// The cut fell inside an event.
    pub mid_event: bool,
    /// An in-band error event was sent.
    pub error: bool,
    /// An event too large to read was sent unread.
    pub skipped_events: bool,
    /// The answer's finish (a finish reason or the terminal event) was sent.
    pub finished: bool,
}

/// The next attempt.
#[derive(Debug)]
pub enum Next {
    /// The answer cannot go on in meaning: a fixed word for telemetry.
    Refused(&'static str),
    /// Nothing is left to generate: the client's stream ends with `tail`
    /// (`why`: `finished`, the text was whole; `limit_reached`, every token
    /// asked for was sent).
    End {
        /// The bytes that end the client's stream (may be empty).
        tail: Vec<u8>,
        /// A fixed word for telemetry.
        why: &'static str,
    },
    /// A target generates the rest.
    Generate(Box<Rest>),
}

/// How the rest is generated.
#[derive(Debug)]
pub struct Rest {
    /// The request's continuation plan.
    pub plan: Plan,
    /// How the target's events are rewritten for the client.
    pub target: Target,
    /// The text the client has.
    pub text: String,
    /// Its token ids, when every event carried them.
    pub token_ids: Option<Vec<u32>>,
}

impl Rest {
    /// What the client has, for [`Plan::completion_body`].
    pub fn sent(&self) -> Sent<'_> {
        Sent {
            text: &self.text,
            ids: self.token_ids.as_deref(),
            tokens: self.target.tokens_before,
        }
    }

    /// The target's `POST /completion` body, after `rendered` (the
    /// conversation from its `/apply-template`, when
    /// [`Plan::needs_template`]).
    pub fn completion_body(&self, rendered: Option<&str>) -> Vec<u8> {
        self.plan.completion_body(rendered, &self.sent())
    }
}

/// Plans the next attempt of a `shape` request with `body`, whose client
/// was sent what `heard` says. Refusals are checked first, in order: the
/// request's own ([`plan_for`]), a cut inside an event, an error event, a
/// skipped event, hidden tokens, text not kept whole, no stream ids.
pub fn next(shape: Shape, body: &[u8], heard: &Heard<'_>) -> Next {
    let plan = match plan_for(shape, body) {
        Ok(p) => p,
        Err(r) => return Next::Refused(r.as_str()),
    };
    let refusal = [
        (heard.mid_event, "cut_mid_event"),
        (heard.error, "upstream_error_event"),
        (heard.skipped_events, "event_skipped"),
        (heard.hidden, "hidden_tokens"),
        (heard.overflow, "text_too_long"),
    ]
    .into_iter()
    .find_map(|(hit, why)| hit.then_some(why));
    if let Some(why) = refusal {
        return Next::Refused(why);
    }
    let ids = match shape {
        Shape::Native => None,
        _ => match heard.first_event.and_then(stream_ids) {
            Some(ids) => Some(ids),
            None => return Next::Refused("no_stream_ids"),
        },
    };
    let token_ids = heard
        .ids
        .filter(|i| !i.is_empty() || heard.text.is_empty())
        .map(<[u32]>::to_vec);
    let tokens = token_ids.as_ref().map_or(heard.token_events, |i| {
        u64::try_from(i.len()).unwrap_or(u64::MAX)
    });
    if heard.finished {
        // Only the end was lost (`[DONE]`, and the usage chunk when asked
        // for, whose prompt count is not known here): the text is whole.
        let tail = match ids {
            Some(_) => b"data: [DONE]\n\n".to_vec(),
            None => Vec::new(),
        };
        return Next::End {
            tail,
            why: "finished",
        };
    }
    if plan.remaining(tokens) == Some(0) {
        // Every token asked for was sent (no usage chunk: its prompt count
        // is not known here).
        let tail = match &ids {
            Some(ids) => ids.finish_events("length", None),
            None => native_end(tokens),
        };
        return Next::End {
            tail,
            why: "limit_reached",
        };
    }
    let target = Target {
        ids,
        tokens_before: tokens,
        logprobs: plan.wants_logprobs(),
        include_usage: plan.include_usage(),
    };
    Next::Generate(Box::new(Rest {
        plan,
        target,
        text: heard.text.to_string(),
        token_ids,
    }))
}

#[cfg(test)]
mod tests;
