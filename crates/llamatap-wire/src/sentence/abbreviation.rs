//! Whether a period after a word ends a sentence: list markers, initials and
//! abbreviations, in the languages llamatap's users speak most. Where it may
//! end one, the caller still waits for the next word (see [`NextTest`]);
//! after a plain word ([`plain_end`]) that wait is all that is left.

/// What a period followed by whitespace means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The period belongs to the word: the sentence goes on.
    NotEnd,
    /// The sentence ends at the period unless the next visible character
    /// continues it.
    EndUnless(NextTest),
}

/// Which next visible character continues a sentence after its terminator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NextTest {
    /// A lowercase letter (`etc. and`, `"Help!" he cried`); anything else
    /// ends it.
    Lowercase,
    /// A lowercase letter or a digit (`No. 5`); anything else ends it
    /// (`No. I won't`).
    LowercaseOrDigit,
}

impl NextTest {
    /// Whether `c`, the first visible character after the terminator,
    /// continues the sentence.
    pub(super) fn continues(self, c: char) -> bool {
        match self {
            NextTest::Lowercase => c.is_lowercase(),
            NextTest::LowercaseOrDigit => c.is_lowercase() || c.is_numeric(),
        }
    }
}

/// A terminator that is not a period after a word: `!`, `?`, `…`, a run.
pub(super) const ANY_TERMINATOR: Verdict = Verdict::EndUnless(NextTest::Lowercase);

/// Longest word (in chars) looked at; longer words are never abbreviations.
const MAX_WORD_CHARS: usize = 16;

/// Never end a sentence: titles and connectives that precede more words.
/// Lowercase, without the final period.
const NEVER: &[&str] = &[
    // English
    "mr", "mrs", "ms", "mx", "dr", "prof", "st", "mt", "rev", "hon", "gen", "col", "capt", "lt",
    "sgt", "sen", "rep", "gov", "pres", "vs", "e.g", "i.e", "cf", "approx", "appx", "fig", "figs",
    "eq", "eqs", "ref", "refs", "vol", "vols", "pp", "ch", "viz", "incl", "esp", "resp",
    // German
    "z.b", "d.h", "u.a", "bzw", "ca", "ggf", "evtl", "vgl", "inkl", "zzgl", "bspw", "sog", "hr",
    "fr", // French, Spanish
    "mme", "mlle", "env", "ex", "sr", "sra", "srta", "dra", "ud", "uds", "pág", "aprox",
    // Russian
    "т.е", "т.к", "т.н", "ул", "проф", "акад", "напр",
];

/// End unless a number (or, as after any word, a lowercase word) follows
/// (`No. 5`, `Jan. 3`).
const BEFORE_NUMBER: &[&str] = &[
    "no", "nos", "nr", "núm", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept",
    "oct", "nov", "dec",
];

/// Classifies the period at byte `period` of `sentence`, given the offset of
/// the sentence's first letter or digit.
pub(super) fn classify(sentence: &str, period: usize, first_alnum: Option<usize>) -> Verdict {
    let Some(head) = sentence.get(..period) else {
        return ANY_TERMINATOR;
    };
    let mut start = period;
    for (count, (at, c)) in head.char_indices().rev().enumerate() {
        if !(c.is_alphanumeric() || c == '.') {
            break;
        }
        if count == MAX_WORD_CHARS {
            return ANY_TERMINATOR;
        }
        start = at;
    }
    let word = head[start..].trim_start_matches('.');
    let start = period - word.len();
    let mut chars = word.chars();
    let Some(first) = chars.next() else {
        return ANY_TERMINATOR;
    };
    let opens_sentence = first_alnum == Some(start);
    let single = chars.next().is_none();
    if opens_sentence && (single || word.chars().all(|c| c.is_numeric() || c == '.')) {
        return Verdict::NotEnd; // list marker: `1.` `2.3.` `a.`
    }
    if single && first.is_uppercase() {
        return Verdict::NotEnd; // initial: `J. Smith`
    }
    let lower: String = word.chars().flat_map(char::to_lowercase).collect();
    let is = |list: &[&str]| list.contains(&lower.as_str());
    if is(NEVER) {
        Verdict::NotEnd
    } else if is(BEFORE_NUMBER) {
        Verdict::EndUnless(NextTest::LowercaseOrDigit)
    } else {
        // Any other word, `etc.` `Inc.` `U.S.` `a.m.` included: a lowercase
        // word after it continues the sentence.
        ANY_TERMINATOR
    }
}

/// Whether the period at byte `period` of `sentence` ends it by the text
/// before it: [`classify`] lets it end, and it follows a plain word (see
/// [`is_plain`]) or a bracket or quote that closed (`(SI).` `"Luna".`
/// `**Note**.`), after which no abbreviation, number or initial can end.
/// Only what comes next can still continue the sentence: the word going on
/// without a space (`example.` then `com`) or a lowercase word.
pub(super) fn plain_end(sentence: &str, period: usize, first_alnum: Option<usize>) -> bool {
    if classify(sentence, period, first_alnum) != ANY_TERMINATOR {
        return false;
    }
    let before = sentence.get(..period).and_then(|h| h.chars().next_back());
    matches!(before, Some(')' | ']' | '}' | '"' | '”' | '»' | '*')) || is_plain(sentence, period)
}

/// End like any word, but a lowercase word often follows (`etc. and`,
/// `5 min. later`): never plain, so their end waits for the next word.
/// Lowercase, without the final period; words without a vowel (`lbs` `Ltd`
/// `Blvd` `млн`) need no entry.
#[rustfmt::skip]
const ABBREVIATIONS: &[&str] = &[
    // English
    "etc", "inc", "co", "corp", "jr", "bros", "al", "ibid", "op", "cit", "seq", "min", "max",
    "sec", "secs", "mo", "mos", "yr", "yrs", "oz", "est", "avg", "ave", "apt", "hwy", "pkwy",
    "univ", "intl", "natl", "assn", "dist", "div", "ed", "eds", "abbr", "adj", "adv", "anon",
    "dept", "govt", "misc", "art", "para", "sect", "chap", "tab", "mi", "gal", "cu", "cca",
    "temp", "tel", "ext", "attn", "encl", "orig", "lit", "dia", "ult", "inst",
    // German, French, Spanish
    "usw", "abs", "kap", "geb", "gest", "mio", "allg", "insb", "bes", "dgl", "av", "éd",
    "avda", "ej", "atte", "izq", "dcha",
    // Russian
    "тыс", "руб", "коп", "обл", "им", "ок", "тов", "доц", "зам", "вкл", "мин", "макс", "сек",
];

/// Characters that put a word inside an address, a path or an identifier
/// (`https://example.` `user@host.` `snake_case.`), never at a plain end.
const IN_ADDRESS: &[char] = &['/', '\\', '@', ':', '_', '~', '#', '=', '&'];

/// Whether the word before byte `period` of `sentence` is plain: two or more
/// letters (an apostrophe inside allowed: `don't.` `John's.`), no digit and
/// no period inside, not after `/` `@` `:` …, a vowel when written in Latin
/// or Cyrillic letters, and no entry in [`ABBREVIATIONS`].
fn is_plain(sentence: &str, period: usize) -> bool {
    let Some(head) = sentence.get(..period) else {
        return false;
    };
    let mut start = period;
    let mut before = None;
    for (count, (at, c)) in head.char_indices().rev().enumerate() {
        if !(c.is_alphabetic() || is_apostrophe(c)) {
            before = Some(c);
            break;
        }
        if count == MAX_WORD_CHARS {
            return false;
        }
        start = at;
    }
    let word = head[start..].trim_start_matches(is_apostrophe);
    if before.is_some_and(|c| IN_ADDRESS.contains(&c) || c == '.' || c.is_numeric()) {
        return false;
    }
    let letters = word.chars().filter(|c| c.is_alphabetic()).count();
    if letters < 2 || word.ends_with(is_apostrophe) || !has_vowel(word) {
        return false;
    }
    let lower: String = word.chars().flat_map(char::to_lowercase).collect();
    !ABBREVIATIONS.contains(&lower.as_str())
}

fn is_apostrophe(c: char) -> bool {
    matches!(c, '\'' | '’')
}

/// Whether `word` has a vowel, for words in Latin or Cyrillic letters (an
/// abbreviation such as `Ltd` `lbs` `млн` has none); other scripts pass.
fn has_vowel(word: &str) -> bool {
    const LATIN: &str = "aeiouyàáâãäåæèéêëìíîïòóôõöøùúûüýÿœāēīōūăĕĭŏŭąęįųőűůěė";
    const CYRILLIC: &str = "аеёиоуыэюяіїєў";
    let mut latin_or_cyrillic = false;
    for c in word.chars().filter(|c| c.is_alphabetic()) {
        let lower = c.to_lowercase().next().unwrap_or(c);
        if LATIN.contains(lower) || CYRILLIC.contains(lower) {
            return true;
        }
        latin_or_cyrillic |= matches!(u32::from(c), 0..=0x024F | 0x0400..=0x04FF);
    }
    !latin_or_cyrillic
}
