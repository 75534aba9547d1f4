//! Whether a period after a word ends a sentence: list markers, initials and
//! abbreviations, in the languages llamatap's users speak most.

/// What a period followed by whitespace means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The sentence ends at the period.
    End,
    /// The period belongs to the word: the sentence goes on.
    NotEnd,
    /// It ends unless the next visible character passes the test.
    Await(NextTest),
}

/// Which next visible character keeps an abbreviation's sentence going.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NextTest {
    /// A digit continues it (`No. 5`); anything else ends it (`No. I won't`).
    NotDigit,
    /// A lowercase letter continues it (`etc. and`); anything else ends it.
    NotLowercase,
}

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

/// End unless a number follows (`No. 5`, `Jan. 3`).
const BEFORE_NUMBER: &[&str] = &[
    "no", "nos", "nr", "núm", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept",
    "oct", "nov", "dec",
];

/// End unless a lowercase word follows: at a true sentence end these are
/// common (`…, etc. Then`), and mid-sentence a lowercase word follows them.
const AMBIGUOUS: &[&str] = &[
    "etc", "usw", "jr", "inc", "ltd", "co", "corp", "bros", "al", "min", "max", "sec", "hrs", "ft",
    "lb", "lbs", "oz", "ph.d", "ee.uu", "др", "т.д", "т.п", "см", "им", "тыс", "млн", "млрд",
];

/// Classifies the period at byte `period` of `sentence`, given the offset of
/// the sentence's first letter or digit.
pub(super) fn classify(sentence: &str, period: usize, first_alnum: Option<usize>) -> Verdict {
    let Some(head) = sentence.get(..period) else {
        return Verdict::End;
    };
    let mut start = period;
    for (count, (at, c)) in head.char_indices().rev().enumerate() {
        if !(c.is_alphanumeric() || c == '.') {
            break;
        }
        if count == MAX_WORD_CHARS {
            return Verdict::End;
        }
        start = at;
    }
    let word = head[start..].trim_start_matches('.');
    let start = period - word.len();
    let mut chars = word.chars();
    let Some(first) = chars.next() else {
        return Verdict::End;
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
        Verdict::Await(NextTest::NotDigit)
    } else if is(AMBIGUOUS) || is_dotted_initials(word) {
        Verdict::Await(NextTest::NotLowercase)
    } else {
        Verdict::End
    }
}

/// Single letters joined by periods: `U.S`, `a.m`, `p.m`.
fn is_dotted_initials(word: &str) -> bool {
    word.contains('.')
        && word.split('.').all(|part| {
            let mut chars = part.chars();
            matches!((chars.next(), chars.next()), (Some(c), None) if c.is_alphabetic())
        })
}
