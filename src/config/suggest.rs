//! The parser's refusal of an unknown key or value (`unknown field `upstrem`,
//! expected one of ...`) in the operator's words: the name written, the
//! closest accepted one (`did you mean `upstream`?`) and every accepted
//! name, whole (never cut mid-word).
//!
//! Only rewords serde's message; where the line is, is
//! [`super::toml_error`]'s job.

/// Longest unknown name echoed back, characters (it comes from the file).
const MAX_ECHO: usize = 64;

/// serde's `unknown field` / `unknown variant` message reworded, or `None`
/// for any other message. `named`: the message names the unknown key
/// (`false` when the caller already shows it before the message).
pub fn unknown(message: &str, named: bool) -> Option<String> {
    let (what, rest) = if let Some(r) = message.strip_prefix("unknown field `") {
        ("key", r)
    } else if let Some(r) = message.strip_prefix("unknown variant `") {
        ("value", r)
    } else {
        return None;
    };
    let (name, expected) = rest.split_once("`, ")?;
    let accepted: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    let hint = closest(name, &accepted)
        .map(|c| format!("did you mean `{c}`? "))
        .unwrap_or_default();
    let head = match named {
        true => format!("unknown {what} `{}`", echo(name)),
        false => format!("unknown {what}"),
    };
    if accepted.is_empty() {
        return Some(format!("{head}: this table takes none"));
    }
    Some(format!(
        "{head}; {hint}expected one of: {}",
        accepted.join(", ")
    ))
}

/// The accepted name nearest to `name` (edit distance, case ignored), when
/// it is near enough to be a typo: at most a third of its length away (at
/// least 1, at most 3 edits).
pub fn closest<'a>(name: &str, accepted: &[&'a str]) -> Option<&'a str> {
    let lower = name.to_ascii_lowercase();
    let limit = (name.chars().count() / 3).clamp(1, 3);
    accepted
        .iter()
        .map(|a| (distance(&lower, &a.to_ascii_lowercase()), *a))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, a)| a)
}

/// Levenshtein distance between `a` and `b`, in characters.
pub fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut row = Vec::with_capacity(b.len() + 1);
        row.push(i + 1);
        for (j, cb) in b.iter().enumerate() {
            let substitute = prev[j] + usize::from(ca != *cb);
            let insert = row[j] + 1;
            let delete = prev[j + 1] + 1;
            row.push(substitute.min(insert).min(delete));
        }
        prev = row;
    }
    prev.last().copied().unwrap_or(0)
}

/// A name from the file as it may be echoed: one line, no control
/// characters, at most [`MAX_ECHO`] characters.
fn echo(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .take(MAX_ECHO)
        .collect();
    if name.chars().count() > MAX_ECHO {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests;
