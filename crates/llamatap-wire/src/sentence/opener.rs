//! Quotes, brackets and markdown emphasis opened in a sentence and not yet
//! closed: while one is open, a period may still be followed by its closer
//! (`"Stop."` `(See above.)` `**Note.**`), so the sentence's end is not known
//! at the period. Only the decision at the period reads this; the sentence's
//! text never depends on it.
//!
//! Conservative by design: a single quote that opens a word (`'fine` `‘fine`)
//! counts as open until the sentence ends, since a closing `'` `’` cannot be
//! told from an apostrophe; a closing quote with nothing open (German `»Ja«`,
//! `„Ja“`) makes the quoting unknown, which counts as open too.

/// Bracket and quote pairs, each counted on its own.
const PAIRS: [(char, char); 13] = [
    ('(', ')'),
    ('[', ']'),
    ('{', '}'),
    ('“', '”'),
    ('«', '»'),
    ('‹', '›'),
    ('「', '」'),
    ('『', '』'),
    ('（', '）'),
    ('［', '］'),
    ('【', '】'),
    ('《', '》'),
    ('〔', '〕'),
];

/// What is open in the sentence so far; fed every character appended to it.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Openers {
    /// Per pair of [`PAIRS`], opened minus closed.
    depth: [u16; PAIRS.len()],
    /// An odd number of `"`.
    double: bool,
    /// A single quote opened a word, or a quote closed what was not open.
    unknown: bool,
    /// `*` or `_` runs that opened emphasis, minus those that closed one.
    emphasis: u16,
    /// The run of `*` or `_` just appended: its char and whether whitespace
    /// (or the sentence's start) came before it.
    run: Option<(char, bool)>,
    /// The character before the current one, if any.
    prev: Option<char>,
}

impl Openers {
    /// Notes `c`, appended to the sentence.
    pub(super) fn push(&mut self, c: char) {
        if let Some((ch, after_space)) = self.run {
            if c != ch {
                self.run = None;
                // Left-flanking (`␠**Note`) opens, right-flanking (`Note**`) closes;
                // `␠*␠` (a bullet, a product) is neither.
                if !after_space {
                    self.emphasis = self.emphasis.saturating_sub(1);
                } else if !c.is_whitespace() {
                    self.emphasis = self.emphasis.saturating_add(1);
                }
            }
        } else if matches!(c, '*' | '_') {
            self.run = Some((c, self.prev.is_none_or(char::is_whitespace)));
        }
        match c {
            '"' => self.double = !self.double,
            '„' | '‚' => self.unknown = true,
            '\'' | '‘' if self.prev.is_none_or(|p| p.is_whitespace() || is_opener(p)) => {
                self.unknown = true;
            }
            _ => {
                for (i, (open, close)) in PAIRS.iter().enumerate() {
                    if c == *open {
                        self.depth[i] = self.depth[i].saturating_add(1);
                    } else if c == *close {
                        match self.depth[i].checked_sub(1) {
                            Some(d) => self.depth[i] = d,
                            // A stray `)` is a list marker (`2)`); a stray quote is
                            // another quoting style.
                            None => self.unknown |= i >= 3,
                        }
                    }
                }
            }
        }
        self.prev = Some(c);
    }

    /// Whether a closer may still follow: something is open, or the
    /// quoting is not understood.
    pub(super) fn any_open(&self) -> bool {
        self.double
            || self.unknown
            || self.emphasis > 0
            || self.run.is_some()
            || self.depth.iter().any(|&d| d > 0)
    }
}

/// Opens a pair or a quote.
fn is_opener(c: char) -> bool {
    matches!(c, '"' | '„' | '‚') || PAIRS.iter().any(|(open, _)| *open == c)
}
