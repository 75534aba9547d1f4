//! Fuzzes `llamatap_wire::sentence::SentenceRule`.
//!
//! Input layout: `[n, len_1 .. len_n, text ..]`
//! - `n % 16` delta lengths follow, in chars (used cyclically, 0 = an empty
//!   delta); `n % 16 == 0` feeds the text one char at a time;
//! - the text is the longest valid UTF-8 prefix of the rest.
//!
//! Invariants:
//! - never panics;
//! - the sentence is the same whatever the deltas (compared with one `push`
//!   of the whole text), and is reported once: every `push` after it and
//!   `finish()` give `None`, and `is_done()` is then true;
//! - `chars == text.chars().count()`, `text` is non-empty, trimmed, at most
//!   `MAX_SENTENCE_CHARS` chars, has a letter or digit, and is a substring
//!   of the input (it is returned as written).
#![no_main]

use libfuzzer_sys::fuzz_target;
use llamatap_wire::sentence::{Sentence, SentenceRule, MAX_SENTENCE_CHARS};

fn decode(data: &[u8]) -> Option<(&[u8], &str)> {
    let (&n, rest) = data.split_first()?;
    let n = usize::from(n % 16).min(rest.len());
    let (lens, text) = rest.split_at(n);
    let text = match std::str::from_utf8(text) {
        Ok(t) => t,
        Err(e) => std::str::from_utf8(&text[..e.valid_up_to()]).ok()?,
    };
    Some((lens, text))
}

/// Cuts `text` into deltas of the char counts in `lens` (cyclically).
fn deltas<'a>(text: &'a str, lens: &[u8]) -> Vec<&'a str> {
    let bounds: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain([text.len()])
        .collect();
    let chars = bounds.len() - 1;
    let lens: Vec<usize> = if lens.is_empty() {
        vec![1]
    } else {
        lens.iter().map(|&l| usize::from(l)).collect()
    };
    if lens.iter().all(|&l| l == 0) {
        return vec![""; lens.len()].into_iter().chain([text]).collect();
    }
    let mut out = Vec::new();
    let mut at = 0;
    for len in lens.iter().cycle() {
        if at >= chars {
            break;
        }
        let end = (at + len).min(chars);
        out.push(&text[bounds[at]..bounds[end]]);
        at = end;
    }
    out
}

/// Feeds `deltas`, checking the sentence is reported at most once.
fn run(deltas: &[&str]) -> Option<Sentence> {
    let mut rule = SentenceRule::new();
    let mut found = None;
    for delta in deltas {
        let got = rule.push(delta);
        if found.is_some() {
            assert_eq!(got, None, "a second sentence was reported");
        } else {
            found = got;
        }
        assert_eq!(rule.is_done(), found.is_some(), "is_done() disagrees");
    }
    let last = rule.finish();
    assert!(rule.is_done(), "not done after finish()");
    if found.is_some() {
        assert_eq!(last, None, "finish() reported a second sentence");
        found
    } else {
        last
    }
}

fn check(s: &Sentence, input: &str) {
    assert_eq!(
        s.chars,
        s.text.chars().count(),
        "chars is not the char count"
    );
    assert!(!s.text.is_empty(), "empty sentence");
    assert_eq!(s.text, s.text.trim(), "sentence not trimmed");
    assert!(
        s.chars <= MAX_SENTENCE_CHARS,
        "sentence of {} chars",
        s.chars
    );
    assert!(
        s.text.chars().any(char::is_alphanumeric),
        "sentence without a letter or digit"
    );
    assert!(
        input.contains(&s.text),
        "sentence is not a part of the input"
    );
}

fuzz_target!(|data: &[u8]| {
    let Some((lens, text)) = decode(data) else {
        return;
    };
    let whole = run(&[text]);
    if let Some(s) = &whole {
        check(s, text);
    }
    let cut = run(&deltas(text, lens));
    assert_eq!(
        cut, whole,
        "deltas give another sentence than the whole text"
    );
});
