//! The moment of the first sentence: the first-sentence rule fed pieces of
//! text (token deltas) with the moment each arrived.
//!
//! The sentence is the rule's, always: [`SentenceRule`] still waits for what
//! follows a terminator. Its moment is the arrival of the piece that ended
//! it when that piece ended with a period that ends the sentence by the
//! text before it: `.` or `．` after a plain word or a closed bracket, with
//! no abbreviation, initial, number or ellipsis (`Dr.` `U.S.` `3.14` `e.g.`
//! `...`) possible and no quote, bracket or emphasis open that a closer
//! could end. Only the next piece can then change the end: the word going
//! on without a space (`example.` then `com`) or a lowercase word (`Hi
//! there.` then ` how`). When it does not, the sentence was complete when
//! its period arrived, one token before the rule could see the next one;
//! when it does, the sentence ends later and takes that later moment. Every
//! other end (an abbreviation, `!` `?`, a CJK stop, a newline) keeps the
//! moment the rule decides.
//!
//! Generic over the moment (`Instant` for the proxy, a piece index in
//! tests); it reads no clock.

use super::abbreviation::plain_end;
use super::{Sentence, SentenceRule, State};

/// [`SentenceRule`] with the moments pieces arrived; see the
/// [module docs](self).
#[derive(Clone, Debug)]
pub struct SentenceClock<T> {
    rule: SentenceRule,
    /// When the pending period (the rule's `pending` length) arrived.
    period: Option<(usize, T)>,
}

impl<T: Copy> Default for SentenceClock<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy> SentenceClock<T> {
    /// A clock that has seen no text.
    pub fn new() -> Self {
        Self {
            rule: SentenceRule::new(),
            period: None,
        }
    }

    /// Feeds the piece of visible text that arrived at `at`; returns the
    /// first sentence and the moment it was complete, the first time the
    /// rule knows it (after that always `None`).
    pub fn push(&mut self, text: &str, at: T) -> Option<(Sentence, T)> {
        let found = self.rule.push(text);
        if found.is_none() {
            self.period = match (self.rule.pending, self.period) {
                (Some(len), Some((seen, when))) if seen == len => Some((seen, when)),
                (Some(len), _) => Some((len, at)),
                (None, _) => None,
            };
        }
        found.map(|s| (s, self.moment(at)))
    }

    /// End of stream at `at`: the rest of the text, if speakable, as
    /// [`SentenceRule::finish`] says, with its moment.
    pub fn finish(&mut self, at: T) -> Option<(Sentence, T)> {
        let found = self.rule.finish();
        found.map(|s| (s, self.moment(at)))
    }

    /// Whether the first sentence was reported or the stream finished.
    pub fn is_done(&self) -> bool {
        self.rule.is_done()
    }

    /// The moment of the sentence the rule just reported.
    fn moment(&self, now: T) -> T {
        match self.period {
            Some((_, when)) if self.rule.ended_at_pending => when,
            _ => now,
        }
    }
}

// === impl SentenceRule: the period pending ===

impl SentenceRule {
    /// At the end of a piece: notes whether the text so far ends with a
    /// period that ends the sentence by the text before it, or with such a
    /// period and whitespace (`.␠` in one piece, or over several).
    pub(super) fn note_pending(&mut self) {
        self.pending = match self.state {
            State::Terminated { period: Some(at) } => self.certain(at, self.buf.len()),
            State::AwaitNext { end, .. } if self.pending == Some(end) => Some(end),
            State::AwaitNext { end, .. } => {
                let last = self
                    .buf
                    .get(..end)
                    .and_then(|b| b.char_indices().next_back());
                last.and_then(|(at, c)| matches!(c, '.' | '．').then_some(at))
                    .and_then(|at| self.certain(at, end))
            }
            _ => None,
        };
    }

    /// `Some(end)` when the period at `at` is all of `buf[at..end]`, ends the
    /// sentence by the word before it, and nothing is open that a closer
    /// could end.
    fn certain(&self, at: usize, end: usize) -> Option<usize> {
        let alone = self
            .buf
            .get(at..end)
            .is_some_and(|p| p.chars().nth(1).is_none());
        let plain = plain_end(&self.buf, at, self.first_alnum);
        (alone && plain && !self.openers.any_open()).then_some(end)
    }
}
