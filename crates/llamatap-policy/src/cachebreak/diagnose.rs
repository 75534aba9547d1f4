//! The comparison of one turn with the previous one: where the prompt first
//! differs, the cause, and the cost.

use super::book::Turn;
use super::digest::{MessageDigest, PromptDigest};
use super::{
    Cause, Diagnosis, Field, Observed, Position, CHUNK_CHARS, EXCERPT_BEFORE, EXCERPT_CHARS,
};

/// Tokens of the previous prompt that may go unreused without calling it a
/// break: at least this many...
const SLACK_TOKENS: u64 = 8;
/// ...or this fraction of the previous prompt (1/`SLACK_DIVISOR`): template
/// and tokenizer boundaries, and llama-server re-evaluating a prompt's last
/// token.
const SLACK_DIVISOR: u64 = 10;

/// Diagnoses `cur` against the previous turn of its conversation (`None`:
/// none known) with the answer's facts.
pub fn diagnose(prev: Option<&Turn>, cur: &PromptDigest, obs: Observed) -> Diagnosis {
    let Some(prev) = prev else {
        return verdict(Cause::NewConversation, None, 0, 0.0);
    };
    let (recomputed, ms) = cost(prev.tokens, obs);
    if let Some((cause, position)) = first_difference(&prev.digest, cur) {
        let mut d = verdict(cause, Some(position.clone()), recomputed, ms);
        if let Some((old, new)) = excerpts(&prev.digest, cur, &position) {
            d.old_excerpt = Some(old);
            d.new_excerpt = Some(new);
        }
        return d;
    }
    let (Some(cached), Some(covered)) = (obs.cache_n, covered(prev.tokens, obs)) else {
        return verdict(Cause::Unknown, None, recomputed, ms);
    };
    let slack = SLACK_TOKENS.max(covered / SLACK_DIVISOR);
    let cause = if cached.saturating_add(slack) >= covered {
        Cause::Reused
    } else if prev.upstream.is_some() && obs.upstream.is_some() && prev.upstream != obs.upstream {
        Cause::OtherUpstream
    } else {
        Cause::Evicted
    };
    verdict(cause, None, recomputed, ms)
}

fn verdict(cause: Cause, position: Option<Position>, tokens: u64, ms: f64) -> Diagnosis {
    Diagnosis {
        cause,
        position,
        recomputed_tokens: tokens,
        recomputed_ms: ms,
        old_excerpt: None,
        new_excerpt: None,
    }
}

/// Prompt tokens both turns could share: `min(previous, this one)`.
fn covered(prev_tokens: Option<u64>, obs: Observed) -> Option<u64> {
    Some(prev_tokens?.min(obs.prompt_tokens()?))
}

/// Tokens the previous prompt covered but llama-server recomputed, and
/// their prefill milliseconds.
fn cost(prev_tokens: Option<u64>, obs: Observed) -> (u64, f64) {
    let (Some(covered), Some(cached)) = (covered(prev_tokens, obs), obs.cache_n) else {
        return (0, 0.0);
    };
    let tokens = covered.saturating_sub(cached);
    let ms = match (obs.prompt_ms, obs.prompt_n) {
        (Some(ms), Some(n)) if n > 0 && ms.is_finite() && ms >= 0.0 => {
            tokens.min(n) as f64 * ms / n as f64
        }
        _ => 0.0,
    };
    (tokens, ms)
}

/// The first place `cur` differs from `prev`, with its cause; `None` when
/// one is a prefix of the other (the turn extends, or repeats a prefix).
fn first_difference(prev: &PromptDigest, cur: &PromptDigest) -> Option<(Cause, Position)> {
    if prev.tools != cur.tools {
        let i = prev
            .tools
            .iter()
            .zip(cur.tools.iter())
            .take_while(|(a, b)| a == b)
            .count();
        return Some((
            Cause::ToolsChanged,
            Position {
                message_index: i,
                field: Field::Tools,
                offset: 0,
            },
        ));
    }
    let (old, new) = (&prev.messages, &cur.messages);
    let i = common_prefix(old, new);
    let (a, b) = (old.get(i)?, new.get(i)?);
    if !a.system && !b.system && truncated(old, new, i) {
        return Some((
            Cause::HistoryTruncated,
            Position {
                message_index: i,
                field: Field::Message,
                offset: 0,
            },
        ));
    }
    let (field, offset) = if a.role != b.role {
        (Field::Role, 0)
    } else if a.content != b.content {
        let field = if a.system {
            Field::System
        } else {
            Field::Content
        };
        (field, offset(a, b))
    } else if a.name != b.name {
        (Field::Name, 0)
    } else if a.tool_calls != b.tool_calls {
        (Field::ToolCalls, 0)
    } else {
        (Field::Other, 0)
    };
    let cause = if a.system || b.system {
        Cause::SystemChanged
    } else {
        Cause::HistoryEdited
    };
    Some((
        cause,
        Position {
            message_index: i,
            field,
            offset,
        },
    ))
}

/// Whether `new` from `i` on is `old` from `i + k` on, for some `k >= 1`:
/// `k` messages dropped at `i` (the oldest turns after the system prompt).
fn truncated(old: &[MessageDigest], new: &[MessageDigest], i: usize) -> bool {
    let Some(first) = new.get(i) else {
        return false;
    };
    (i + 1..old.len()).any(|j| {
        old.get(j) == Some(first)
            && old
                .iter()
                .skip(j)
                .zip(new.iter().skip(i))
                .all(|(a, b)| a == b)
    })
}

/// Characters into the content where `a` and `b` first differ: exact when
/// both texts are kept, else the start of the first differing chunk (or the
/// end of the chunks compared when they all agree).
fn offset(a: &MessageDigest, b: &MessageDigest) -> usize {
    if let (Some(x), Some(y)) = (&a.text, &b.text) {
        return x.chars().zip(y.chars()).take_while(|(p, q)| p == q).count();
    }
    let same = a
        .chunks
        .iter()
        .zip(b.chunks.iter())
        .take_while(|(p, q)| p == q)
        .count();
    same * CHUNK_CHARS
}

/// The old and new text around a content break, when both are kept.
fn excerpts(prev: &PromptDigest, cur: &PromptDigest, at: &Position) -> Option<(String, String)> {
    if !matches!(at.field, Field::Content | Field::System) {
        return None;
    }
    let old = prev.messages.get(at.message_index)?.text.as_deref()?;
    let new = cur.messages.get(at.message_index)?.text.as_deref()?;
    let start = at.offset.saturating_sub(EXCERPT_BEFORE);
    let cut = |s: &str| {
        s.chars()
            .skip(start)
            .take(EXCERPT_CHARS)
            .collect::<String>()
    };
    Some((cut(old), cut(new)))
}

/// Whether `cur` is `prev` with one message replaced in place, every later
/// one kept, and a turn added: the first difference is a message's content
/// (not the system prompt), from the next message on `cur` repeats `prev`,
/// and `cur` is longer (two conversations of one template, alike after
/// their first message, are not one edited).
pub fn edited_in_place(prev: &PromptDigest, cur: &PromptDigest) -> bool {
    if prev.tools != cur.tools {
        return false;
    }
    let (old, new) = (&prev.messages, &cur.messages);
    let i = common_prefix(old, new);
    let (Some(a), Some(b)) = (old.get(i), new.get(i)) else {
        return false;
    };
    let later_kept = i + 1 < old.len()
        && new.len() > old.len()
        && old
            .iter()
            .skip(i + 1)
            .zip(new.iter().skip(i + 1))
            .all(|(x, y)| x == y);
    !a.system && !b.system && a.role == b.role && a.content != b.content && later_kept
}

/// How many messages `old` and `new` share from their start.
fn common_prefix(old: &[MessageDigest], new: &[MessageDigest]) -> usize {
    old.iter()
        .zip(new.iter())
        .take_while(|(a, b)| a == b)
        .count()
}
