//! What a finished request is charged against its tenant's
//! `tokens_per_minute`, and the one request refused so that it can be
//! charged at all.
//!
//! The charge is what was generated, whatever the client asked to see:
//! - prompt tokens: llama-server's count (`timings` or `usage`); for a
//!   continued answer, the prompt of the last continuation's target less
//!   the tokens it was handed back; when nothing reports them and an
//!   answer came (tokens were streamed, or a route that runs on a slot
//!   answered 2xx), the request body's size at [`BYTES_PER_TOKEN`];
//! - generated tokens: the largest of llama-server's count, the token
//!   events the observer counted in the stream, and for a continued
//!   answer the tokens the client had before the last cut plus what that
//!   continuation generated;
//! - a replay that generated the rest of a cut copy (its member died or
//!   drained): only what its continuations generated. The copy's tokens
//!   and the prompt were charged to the generation that made them.
//!
//! Deliberately not here: the windows and the store the charge goes to
//! ([`super::tenant`]), and reading the counts from the bytes (the
//! observer, [`llamatap_wire::llama`]).

use llamatap_policy::answer::ContinuationResult;
use llamatap_policy::conversation::Use;
use llamatap_telemetry::record::RequestRecord;
use llamatap_wire::llama::StreamFormat;

use super::answer::End;
use super::context::RequestCtx;

/// Request bytes counted as one prompt token when no prompt count is
/// reported: few enough that a prompt is not undercharged (English text
/// runs near 4 bytes a token; the JSON around it adds bytes, not tokens).
pub const BYTES_PER_TOKEN: u64 = 4;

/// Tokens to charge for `rec`, which ended as `end`, whose request body
/// was `request_bytes`.
pub fn tokens(rec: &RequestRecord, end: &End, request_bytes: u64) -> u64 {
    if rec
        .conversation
        .is_some_and(|c| c.usage == Use::Replay && c.from_copy)
    {
        return rest_of_copy(rec);
    }
    let continued = rec
        .continuations
        .iter()
        .rev()
        .find(|c| c.result == ContinuationResult::Continued && c.generated.is_some());
    let (mut input, mut output) = (rec.input_tokens(), rec.output_tokens().unwrap_or(0));
    if let Some(c) = continued {
        let target_prompt = c
            .reprefilled
            .unwrap_or(0)
            .saturating_add(c.cached.unwrap_or(0));
        if target_prompt > 0 {
            input = Some(target_prompt.saturating_sub(c.tokens_before));
        }
        output = output.max(c.tokens_before.saturating_add(c.generated.unwrap_or(0)));
    }
    output = output.max(rec.token_events);
    let answered = rec.route.uses_slot() && end.answered(rec.status);
    let input = match input {
        Some(n) => n,
        None if output > 0 || answered => request_bytes.div_ceil(BYTES_PER_TOKEN),
        None => 0,
    };
    input.saturating_add(output)
}

/// A replay's rest: what its continuations generated (the target's
/// counts, or the token events past the copy's when a target reported
/// none).
fn rest_of_copy(rec: &RequestRecord) -> u64 {
    let continued = || {
        rec.continuations
            .iter()
            .filter(|c| c.result == ContinuationResult::Continued)
    };
    let reported: u64 = continued().map(|c| c.generated.unwrap_or(0)).sum();
    let copied = continued()
        .next()
        .map_or(rec.token_events, |c| c.tokens_before);
    reported.max(rec.token_events.saturating_sub(copied))
}

/// The request is refused (400) because its answer could not be charged:
/// a tenant with `tokens_per_minute` sent a native request whose
/// `response_fields` hide llama-server's token counts.
pub fn refuses(ctx: &RequestCtx) -> bool {
    ctx.who.quota.tokens.is_some()
        && ctx.asked.request.hides_counts
        && ctx.asked.route.stream_format() == Some(StreamFormat::Native)
}

#[cfg(test)]
mod tests;
