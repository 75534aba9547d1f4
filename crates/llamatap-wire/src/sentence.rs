//! The first-sentence rule: finds the moment the first sentence of an answer
//! is complete, so that text-to-speech could start speaking it.
//!
//! [`SentenceRule`] is fed the visible answer text as it streams (token
//! deltas cut anywhere, even mid-word), scans each character once, and reports
//! the first sentence once, the first time it is known complete. It does not
//! split the rest of the answer, strip markdown, read reasoning text or
//! `<think>` blocks (the caller feeds only visible answer text), or know any
//! clock: [`SentenceClock`] pairs it with the moments pieces arrived and
//! dates a sentence that ends at a plain word's period to that period.
//!
//! # Rules
//!
//! | text (`␠` is a space, `\n` a newline) | first sentence         | why |
//! | ------------------------------------- | ---------------------- | --- |
//! | `Hi there.␠How`                       | `Hi there.`            | `.` `!` `?` `…` end a sentence once whitespace and a character that is not a lowercase letter follow |
//! | `"Help!" he cried.␠` / `Hmm... maybe later.␠` | whole          | a lowercase word after a terminator (and its closers) continues the sentence |
//! | `Pi is 3.14.␠` / `See example.com.␠`  | whole                  | a `.` inside a token (`3.14`, `v1.2.3`, `a.m`) is no end |
//! | `Wow!!!␠Yes` / `Really?!␠Yes` / `Well...␠Let` | `Wow!!!` …     | runs of terminators end together |
//! | `He said "Stop."␠Then`                | `He said "Stop."`      | closers after the run are kept: `" ' ” ’ ) ] } » › 」 』 ） ］ 】 》 〉 〕 * _` |
//! | `**Note.**␠Then`                      | `**Note.**`            | `*` and `_` close markdown emphasis |
//! | `Dr. Smith came.␠`                    | whole                  | titles and connectives never end one: Mr. Mrs. Dr. Prof. St. vs. e.g. i.e. approx. z.B. Sr. т.е. … |
//! | `J. R. R. Tolkien wrote it.␠`         | whole                  | a single capital letter is an initial |
//! | `1. Boil water.␠` / `a. Stir.␠`       | whole                  | a number or letter opening the sentence is a list marker (`2)` has no period) |
//! | `No. 5 is best.␠` / `No. I won't.␠`   | whole / `No.`          | after `No.` `Nr.` `Jan.` … a digit continues too |
//! | `Pears, etc. Then` / `at 5 p.m. now.␠`| `Pears, etc.` / whole  | `etc.` `Jr.` `Inc.` `U.S.` `a.m.` `usw.` end like any word |
//! | `你好。我`                             | `你好。`               | `。` `！` `？` `｡` need no space: the sentence ends at the next character |
//! | `她说：“好的。”然后`                    | `她说：“好的。”`         | that next character is kept when it is a closing quote or bracket |
//! | `你好.我` / `手法を示す．次に`          | `你好.` / `手法を示す．` | `.` `!` `?` … followed by CJK text end without a space |
//! | `नमस्ते। आप` / `كيف حالك؟ أنا`          | `नमस्ते।` / `كيف حالك؟`  | `।` `॥` `؟` `۔` `።` `။` `‼` `⁉` `．` wait like `.` |
//! | `# Heading\nText` / `- item\n`        | `# Heading` / `- item` | a newline ends a line that has a letter or digit |
//! | `---\n👍\nOK.␠`                        | `OK.`                  | a line with no letter or digit is dropped, never a sentence |
//! | ```` ```py\nx = 1.\n```\nDone.␠ ````  | `Done.`                | fenced code blocks are skipped: TTS does not read code |
//! | `␠␠\n Hi`, then end of stream         | `Hi`                   | leading whitespace is ignored; at the end the rest is the sentence |
//! | 2,000 chars with no end               | those 2,000 chars      | [`MAX_SENTENCE_CHARS`]: TTS must start eventually, memory stays bounded |
//!
//! More decisions, each with a test:
//! - Only a letter or digit makes text speakable: a sentence needs one, so a
//!   stream of only emoji, markdown rules or code gives no sentence at all.
//! - Every terminator (`.` `!` `?` an ellipsis, any run of them, with the
//!   closers after it) ends a sentence only if the next visible character is
//!   not a lowercase letter: `"Help!" he cried.` and `Hmm... maybe later.`
//!   are one sentence each, as are `etc. and` and `p.m. now`. The rule waits
//!   for the first letter of the next word: BPE tokens carry the space with
//!   the next word (`␠How`), so that is the token after the period, one
//!   inter-token gap later. Where the word before the period settles the end,
//!   [`SentenceClock`] dates the sentence to its period instead. Scripts
//!   without case (Chinese, Hindi, Arabic, Korean) end at the first
//!   character after the space.
//! - CJK `。！？｡` end without a space, as TTS front ends do. The rule waits
//!   for one more character: a closing quote or bracket there belongs to the
//!   sentence (`她说：“好的。”`, `「はい。」`), anything else does not
//!   (`本当？！` gives `本当？`), and the result never depends on how the
//!   stream was cut. Latency cost: the sentence is reported when the token
//!   after `。` arrives, one inter-token gap later; at the end of the stream
//!   it costs nothing.
//! - `．` (full-width full stop) waits like `.`: in `３．１４` it is a decimal
//!   point, in Japanese technical prose (`…示す．次に`) a full stop.
//! - A newline always ends a speakable line at once, even after `Dr.`:
//!   headings, list items and table rows are each a sentence for TTS.
//! - The text is returned raw (markdown included); `chars` counts Unicode
//!   scalars of the whitespace-trimmed text, so a Hindi matra counts as one.
//! - Known misses, accepted: `vitamin C.␠It` (an initial), German ordinals
//!   `am 3.␠Oktober` (ends), a lettered list on one line (`a. One. b. Two`
//!   runs on to `b.`), a sentence that starts lowercase (`Done. iOS 18 …`
//!   runs on), a closer after a space (`« Non ! » dit-il.` gives `« Non !`,
//!   since `»` opens a quote in German), Thai (no terminator: newline, cap or
//!   end only), Greek `;` (not a terminator), indented code blocks (read as
//!   prose).
//!
//! Cost: every character is scanned once; a period followed by whitespace
//! looks back over at most 16 characters of its word, so a stream costs
//! O(total length), and the buffer holds at most the first sentence.

mod abbreviation;
mod class;
mod clock;
mod opener;
#[cfg(test)]
mod tests;

use abbreviation::{classify, NextTest, Verdict, ANY_TERMINATOR};
use class::{is_cjk_text, is_closer, is_immediate, is_newline, is_terminator};
use opener::Openers;

pub use clock::SentenceClock;

/// Unicode scalars buffered before the first sentence is declared without an end.
///
/// A model that writes 2,000 characters without a sentence end (a long list
/// item, a run-on) would otherwise never give TTS anything to say; 2,000 also
/// bounds the memory the rule holds per request.
pub const MAX_SENTENCE_CHARS: usize = 2000;

/// Bytes reserved at the first character: most first sentences fit.
const INITIAL_CAPACITY: usize = 256;

/// The first sentence of an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sentence {
    /// Unicode scalar count of `text`.
    pub chars: usize,
    /// The sentence as written (markdown included), trimmed of whitespace.
    pub text: String,
}

/// Streaming detector of the first sentence; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct SentenceRule {
    /// The sentence so far, from its first non-whitespace character.
    buf: String,
    /// Unicode scalars in `buf`.
    buf_chars: usize,
    /// Byte offset in `buf` of its first letter or digit.
    first_alnum: Option<usize>,
    /// The run of fence characters (`` ` `` or `~`) opening `buf`.
    fence: Fence,
    /// Quotes, brackets and emphasis open in `buf`.
    openers: Openers,
    /// `buf`'s length when the text pushed so far ended at a period that
    /// ends the sentence by the text before it (see [`SentenceClock`]).
    pending: Option<usize>,
    /// The sentence reported ended at that period.
    ended_at_pending: bool,
    state: State,
}

#[derive(Clone, Copy, Debug, Default)]
struct Fence {
    ch: char,
    len: usize,
    /// Something other than `ch` followed the run.
    closed: bool,
    /// A backtick after a backtick run: inline code, not a fence.
    inline: bool,
}

#[derive(Clone, Copy, Debug)]
enum State {
    /// Ordinary text.
    Prose,
    /// After a terminator run (the end of `buf`), waiting for what follows.
    /// `period` is the offset of the terminator when the run is one `.` or `．`.
    Terminated { period: Option<usize> },
    /// The whitespace after a terminator run; the sentence ends at `end`
    /// unless the next visible character passes `test`.
    AwaitNext { end: usize, test: NextTest },
    /// Right after `。` `！` `？` `｡` (the end of `buf`): a closer next is
    /// kept in the sentence, anything else ends it at `end`.
    Closing { end: usize },
    /// Inside a fenced code block, skipped.
    Code(CodeBlock),
    /// The first sentence was reported or the stream finished.
    Done,
}

/// A fenced code block being skipped: `len` × `fence` opening a line closes it.
#[derive(Clone, Copy, Debug)]
struct CodeBlock {
    fence: char,
    len: usize,
    /// Fence characters so far on this line, if it started with them.
    run: usize,
    line_start: bool,
    /// This line is a closing fence so far.
    closing: bool,
}

impl Default for SentenceRule {
    fn default() -> Self {
        Self::new()
    }
}

impl SentenceRule {
    /// A rule that has seen no text.
    pub fn new() -> Self {
        Self {
            buf: String::new(),
            buf_chars: 0,
            first_alnum: None,
            fence: Fence::default(),
            openers: Openers::default(),
            pending: None,
            ended_at_pending: false,
            state: State::Prose,
        }
    }

    /// Feeds the next piece of visible text; returns the first sentence the
    /// first time it is known complete (after that always `None`).
    pub fn push(&mut self, text: &str) -> Option<Sentence> {
        for c in text.chars() {
            let found = match self.state {
                State::Done => return None,
                State::Prose => self.prose(c),
                State::Terminated { period } => self.terminated(c, period),
                State::AwaitNext { end, test } => self.await_next(c, end, test),
                State::Closing { end } => self.closing(c, end),
                State::Code(block) => {
                    self.code(c, block);
                    None
                }
            };
            if found.is_some() {
                return found;
            }
            if self.buf_chars >= MAX_SENTENCE_CHARS {
                if self.first_alnum.is_some() {
                    return self.emit(self.buf.len());
                }
                self.restart();
            }
        }
        self.note_pending();
        None
    }

    /// End of stream: if no sentence ended yet and some speakable text (a
    /// letter or digit outside code) was seen, the whole trimmed text is the
    /// first sentence (less any dropped lines and code blocks before it).
    pub fn finish(&mut self) -> Option<Sentence> {
        let found = match self.state {
            State::Done | State::Code(_) => None,
            _ if self.first_alnum.is_none() || self.in_fence_line() => None,
            _ => self.emit(self.buf.len()),
        };
        self.state = State::Done;
        self.buf = String::new();
        found
    }

    /// Whether the first sentence was reported or the stream finished.
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }

    // === the states ===

    fn prose(&mut self, c: char) -> Option<Sentence> {
        if is_newline(c) {
            return self.newline();
        }
        if self.buf.is_empty() && c.is_whitespace() {
            return None;
        }
        let at = self.append(c);
        if self.first_alnum.is_none() {
            if c.is_alphanumeric() {
                self.first_alnum = Some(at);
            }
            return None;
        }
        if self.in_fence_line() {
            return None;
        }
        if is_immediate(c) {
            self.state = State::Closing {
                end: self.buf.len(),
            };
            return None;
        }
        if is_terminator(c) {
            let period = matches!(c, '.' | '．').then_some(at);
            self.state = State::Terminated { period };
        }
        None
    }

    fn terminated(&mut self, c: char, period: Option<usize>) -> Option<Sentence> {
        if is_terminator(c) || is_closer(c) {
            self.append(c);
            let period = if is_terminator(c) { None } else { period };
            self.state = State::Terminated { period };
            return None;
        }
        if is_newline(c) {
            return self.emit(self.buf.len());
        }
        if !c.is_whitespace() && !is_cjk_text(c) {
            self.state = State::Prose;
            return self.prose(c);
        }
        let end = self.buf.len();
        let verdict = match period {
            None => ANY_TERMINATOR,
            Some(at) => classify(&self.buf, at, self.first_alnum),
        };
        match verdict {
            Verdict::NotEnd => {
                self.state = State::Prose;
                self.prose(c)
            }
            Verdict::EndUnless(test) => {
                self.state = State::AwaitNext { end, test };
                self.await_next(c, end, test)
            }
        }
    }

    fn await_next(&mut self, c: char, end: usize, test: NextTest) -> Option<Sentence> {
        if is_newline(c) {
            return self.emit(end);
        }
        if c.is_whitespace() {
            self.append(c);
            return None;
        }
        if test.continues(c) {
            self.state = State::Prose;
            self.prose(c)
        } else {
            self.emit(end)
        }
    }

    fn closing(&mut self, c: char, end: usize) -> Option<Sentence> {
        if is_closer(c) {
            self.append(c);
            return self.emit(self.buf.len());
        }
        self.emit(end)
    }

    fn code(&mut self, c: char, mut block: CodeBlock) {
        if is_newline(c) {
            if block.closing {
                self.restart();
                return;
            }
            (block.run, block.line_start, block.closing) = (0, true, false);
        } else if block.line_start && c == block.fence {
            block.run += 1;
            block.closing = block.run >= block.len;
        } else if !(block.line_start && block.run == 0 && matches!(c, ' ' | '\t')) {
            block.line_start = false;
            block.closing &= c.is_whitespace();
        }
        self.state = State::Code(block);
    }

    // === helpers ===

    /// A newline in prose: ends a speakable line, opens a code block after a
    /// fence line, and drops a line with nothing to speak.
    fn newline(&mut self) -> Option<Sentence> {
        if self.in_fence_line() {
            let block = CodeBlock {
                fence: self.fence.ch,
                len: self.fence.len,
                run: 0,
                line_start: true,
                closing: false,
            };
            self.restart();
            self.state = State::Code(block);
            return None;
        }
        if self.first_alnum.is_some() {
            return self.emit(self.buf.len());
        }
        self.restart();
        None
    }

    /// Appends `c` to the sentence; returns its byte offset.
    fn append(&mut self, c: char) -> usize {
        let at = self.buf.len();
        let fence = &mut self.fence;
        if !fence.closed {
            if matches!(c, '`' | '~') && (fence.len == 0 || c == fence.ch) {
                fence.ch = c;
                fence.len += 1;
            } else {
                fence.closed = true;
            }
        } else if c == '`' && fence.ch == '`' {
            fence.inline = true;
        }
        self.openers.push(c);
        if self.buf.capacity() == 0 {
            self.buf.reserve(INITIAL_CAPACITY);
        }
        self.buf.push(c);
        self.buf_chars += 1;
        at
    }

    /// Whether `buf` is the opening line of a fenced code block.
    fn in_fence_line(&self) -> bool {
        self.fence.len >= 3 && !self.fence.inline
    }

    /// Reports `buf[..end]`, trimmed, and stops.
    fn emit(&mut self, end: usize) -> Option<Sentence> {
        self.ended_at_pending = self.pending == Some(end);
        self.pending = None;
        let mut text = std::mem::take(&mut self.buf);
        text.truncate(end);
        text.truncate(text.trim_end().len());
        self.state = State::Done;
        Some(Sentence {
            chars: text.chars().count(),
            text,
        })
    }

    /// Forgets the sentence so far: the next text starts a new one.
    fn restart(&mut self) {
        self.buf.clear();
        self.buf_chars = 0;
        self.first_alnum = None;
        self.fence = Fence::default();
        self.openers = Openers::default();
        self.pending = None;
        self.state = State::Prose;
    }
}
