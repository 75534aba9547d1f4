//! Watches a response body as it passes: the moments of the first token, the
//! first sentence and the last token, plus what the final events report.
//!
//! Pure: no I/O, no framework. The caller passes each chunk exactly as it is
//! forwarded and the time it saw it; this module never touches the bytes the
//! client receives. Per event it does one targeted parse and cheap arithmetic;
//! once the first sentence is known it stops feeding the sentence rule.
//!
//! The text left in the sentence rule becomes the first sentence only when
//! the answer ended properly: at its format's terminal event (no in-band
//! error before it), or at the end of a body whose terminal event may have
//! been skipped for size. A stream cut by a hang-up or a dying upstream has
//! a first sentence only if one was complete before the cut; the moment of
//! a cut is never a stage.

use std::time::{Duration, Instant};

use crate::record;
use llamatap_wire::continuation::{event_token_ids, Shape};
use llamatap_wire::llama::{self, StreamFormat, Timings, Usage};
use llamatap_wire::sentence::{Sentence, SentenceClock};
use llamatap_wire::sse::SseReader;

#[cfg(test)]
mod tests;

/// What an observed response body reported, and when.
#[derive(Clone, Debug, Default)]
pub struct StreamFacts {
    /// First event carrying a token on any channel.
    pub first_token_any: Option<Instant>,
    /// First event carrying non-empty visible content.
    pub first_token: Option<Instant>,
    /// First sentence complete: the arrival of its period where the text
    /// before it settles the end, else of the text that showed the end (see
    /// [`SentenceClock`]).
    pub first_sentence: Option<Instant>,
    /// Length of that sentence, Unicode scalar values.
    pub sentence_chars: Option<usize>,
    /// Its text, only when capture is on.
    pub sentence_text: Option<String>,
    /// Last event carrying a token.
    pub last_token: Option<Instant>,
    /// Token-carrying events.
    pub token_events: u64,
    /// Longest gap between two token-carrying events.
    pub max_token_gap: Option<Duration>,
    /// Finish reasons seen: the first [`record::MAX_FINISH_REASONS`], each
    /// cut to [`record::MAX_NAME_BYTES`].
    pub finish_reasons: Vec<String>,
    /// Final timings.
    pub timings: Option<Timings>,
    /// Usage, merged over the events that reported part of it.
    pub usage: Option<Usage>,
    /// First model name reported.
    pub model: Option<String>,
    /// First response id reported.
    pub response_id: Option<String>,
    /// In-band error message.
    pub error: Option<String>,
    /// `[DONE]` or the format's terminal event arrived.
    pub done: bool,
    /// Events skipped for size.
    pub skipped_events: u64,
}

impl StreamFacts {
    /// The body ended without its format's terminal event
    /// ([`StreamFormat::terminal_event`]): llama-server stopped writing
    /// before the answer was complete. A stream with an event skipped for
    /// size is not judged, since the skipped event may have been the
    /// terminal one.
    pub fn truncated(&self) -> bool {
        !self.done && self.skipped_events == 0
    }
}

/// How an observed body ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamEnd {
    /// The body ended at the HTTP level (its last byte arrived).
    Complete,
    /// The body was cut: the client hung up or the upstream failed before
    /// its end.
    Cut,
}

/// What a continuation needs of the answer so far (kept only when asked,
/// see [`StreamObserver::keep_transcript`]).
#[derive(Clone, Debug, Default)]
pub struct Transcript {
    /// The visible text sent so far, in order.
    pub text: String,
    /// The first event's data, as sent (the stream's id, `created`, model).
    pub first_event: Option<Vec<u8>>,
    /// A token on another channel (reasoning, tool calls) was sent: the
    /// text alone does not say what the client has.
    pub hidden: bool,
    /// The text outgrew the limit and is no longer kept.
    pub overflow: bool,
    /// The token ids of that text, while every event carried them (kept
    /// when asked for; `None` once an event with text carried none).
    pub ids: Option<Vec<u32>>,
    /// The shape whose events are read for ids, when they are kept.
    id_shape: Option<Shape>,
    limit: usize,
}

/// Observes one event-stream body.
#[derive(Debug)]
pub struct StreamObserver {
    reader: SseReader,
    format: StreamFormat,
    sentence: SentenceClock<Instant>,
    capture: bool,
    facts: StreamFacts,
    transcript: Option<Box<Transcript>>,
}

impl StreamObserver {
    /// A new observer for `format`; events above `max_event_bytes` are skipped.
    /// `capture` keeps the first sentence's text.
    pub fn new(format: StreamFormat, max_event_bytes: usize, capture: bool) -> Self {
        StreamObserver {
            reader: SseReader::new(max_event_bytes),
            format,
            sentence: SentenceClock::new(),
            capture,
            facts: StreamFacts::default(),
            transcript: None,
        }
    }

    /// From now on, keeps the visible text (up to `limit` bytes) and the
    /// first event, for a continuation.
    pub fn keep_transcript(&mut self, limit: usize, ids: Option<Shape>) {
        self.transcript = Some(Box::new(Transcript {
            limit,
            ids: ids.map(|_| Vec::new()),
            id_shape: ids,
            ..Transcript::default()
        }));
    }

    /// The transcript, when kept.
    pub fn transcript(&self) -> Option<&Transcript> {
        self.transcript.as_deref()
    }

    /// Observes one forwarded chunk, seen at `now`.
    pub fn on_chunk(&mut self, chunk: &[u8], now: Instant) {
        let StreamObserver {
            reader,
            format,
            sentence,
            capture,
            facts,
            transcript,
        } = self;
        reader.feed(chunk, |event| {
            let delta = llama::parse_event(*format, event);
            if let Some(t) = transcript.as_deref_mut() {
                keep(t, event.data, &delta);
            }
            apply(facts, sentence, *capture, delta, now);
        });
        facts.skipped_events = reader.skipped_events();
    }

    /// True while an event has started but not ended (a cut here would leave
    /// the client holding half an event).
    pub fn mid_event(&self) -> bool {
        self.reader.has_pending()
    }

    /// The body ended at `now`, as `end` says. The text left in the sentence
    /// rule already became the first sentence at the terminal event; a
    /// complete body that may have lost its terminal event to the size limit
    /// (an event skipped, none seen) gets it now. A cut body gets none: its
    /// text so far is not a sentence known complete. Returns the facts.
    pub fn finish(mut self, now: Instant, end: StreamEnd) -> StreamFacts {
        self.facts.skipped_events = self.reader.skipped_events();
        let unjudged = !self.facts.done && self.facts.skipped_events > 0;
        if end == StreamEnd::Complete && unjudged && self.facts.error.is_none() {
            flush_sentence(&mut self.facts, &mut self.sentence, self.capture, now);
        }
        self.facts
    }

    /// The facts so far.
    pub fn facts(&self) -> &StreamFacts {
        &self.facts
    }
}

/// Adds one event to the transcript.
fn keep(t: &mut Transcript, data: &[u8], delta: &llama::Delta<'_>) {
    if t.first_event.is_none() && !delta.done && data.len() <= t.limit {
        t.first_event = Some(data.to_vec());
    }
    t.hidden |= delta.hidden_token;
    if let (Some(shape), Some(ids)) = (t.id_shape, t.ids.as_mut()) {
        let carried = event_token_ids(shape, data, ids);
        let text = delta.visible.as_deref().is_some_and(|v| !v.is_empty());
        if (text && !carried) || ids.len().saturating_mul(4) > t.limit {
            t.ids = None;
        }
    }
    if let Some(text) = delta.visible.as_deref() {
        if t.overflow || t.text.len() + text.len() > t.limit {
            t.overflow = true;
            t.text = String::new();
        } else {
            t.text.push_str(text);
        }
    }
}

fn apply(
    facts: &mut StreamFacts,
    sentence: &mut SentenceClock<Instant>,
    capture: bool,
    delta: llama::Delta<'_>,
    now: Instant,
) {
    let has_token = delta.visible.is_some() || delta.hidden_token;
    if has_token {
        facts.token_events += 1;
        if facts.first_token_any.is_none() {
            facts.first_token_any = Some(now);
        }
        if let Some(prev) = facts.last_token {
            let gap = now.saturating_duration_since(prev);
            if facts.max_token_gap.is_none_or(|m| gap > m) {
                facts.max_token_gap = Some(gap);
            }
        }
        facts.last_token = Some(now);
    }
    if let Some(text) = delta.visible.as_deref() {
        if facts.first_token.is_none() {
            facts.first_token = Some(now);
        }
        if facts.first_sentence.is_none() {
            if let Some((s, at)) = sentence.push(text, now) {
                record_sentence(facts, s, capture, at);
            }
        }
    }
    if let Some(r) = delta.finish_reason {
        // A stream may send one on every event: keep the first few, bounded.
        if facts.finish_reasons.len() < record::MAX_FINISH_REASONS {
            let r = record::bounded(&r, record::MAX_NAME_BYTES);
            facts.finish_reasons.push(r);
        }
    }
    if delta.timings.is_some() {
        facts.timings = delta.timings;
    }
    if let Some(u) = delta.usage {
        // Formats split usage across events (Anthropic: input tokens on
        // `message_start`, output tokens on `message_delta`): merge, never replace.
        facts.usage = Some(facts.usage.map_or(u, |seen| seen.merge(u)));
    }
    if facts.model.is_none() {
        facts.model = delta.model.map(Into::into);
    }
    if facts.response_id.is_none() {
        facts.response_id = delta.response_id.map(Into::into);
    }
    if let Some(e) = delta.error {
        facts.error.get_or_insert_with(|| e.into());
    }
    if delta.done && !facts.done && facts.error.is_none() {
        // The answer is complete: the rest of its text is the sentence.
        flush_sentence(facts, sentence, capture, now);
    }
    facts.done |= delta.done;
}

/// The text left in the rule becomes the first sentence, if none was found.
fn flush_sentence(
    facts: &mut StreamFacts,
    sentence: &mut SentenceClock<Instant>,
    capture: bool,
    now: Instant,
) {
    if facts.first_sentence.is_none() {
        if let Some((s, at)) = sentence.finish(now) {
            record_sentence(facts, s, capture, at);
        }
    }
}

/// Notes the first sentence, complete at `at` (see [`SentenceClock`]).
fn record_sentence(facts: &mut StreamFacts, s: Sentence, capture: bool, at: Instant) {
    facts.first_sentence = Some(at);
    facts.sentence_chars = Some(s.chars);
    if capture {
        facts.sentence_text = Some(s.text);
    }
}
