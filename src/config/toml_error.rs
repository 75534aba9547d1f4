//! TOML and serde errors in the operator's words: which line and key, and
//! what was expected in plain terms (`a non-negative whole number`, not
//! `usize`), on one line.
//!
//! `invalid type: string "two", expected usize` at `threads = "two"` becomes
//! `line 3: threads: expected a non-negative whole number, got "two"`.

/// One line describing `e`, a parse error of the TOML `text`.
pub fn describe(e: &toml::de::Error, text: &str) -> String {
    let Some(span) = e.span() else {
        return super::suggest::unknown(e.message(), true)
            .unwrap_or_else(|| clean(&humanize(e.message()), 240));
    };
    let (line, key) = locate(text, span.start);
    // An unknown key lists every accepted one, whole: never cut. Its name
    // is shown once, as the located key when there is one.
    let message = super::suggest::unknown(e.message(), key.is_none())
        .unwrap_or_else(|| clean(&humanize(e.message()), 240));
    if let Some(table) = single_bracket_list(text, span.start, e.message()) {
        let table = clean(&table, 64);
        return format!(
            "line {line}: {table}: a list of tables: write [[{table}]] (double brackets) above each entry"
        );
    }
    match key.map(|k| clean(&k, 64)) {
        Some(key) => format!("line {line}: {key}: {message}"),
        None => format!("line {line}: {message}"),
    }
}

/// Rewrites serde's `invalid type: X, expected Y` (and `invalid value`) as
/// `expected Y', got X'` in plain words; any other message is kept.
pub fn humanize(message: &str) -> String {
    let rest = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "));
    let Some((got, expected)) = rest.and_then(|r| r.rsplit_once(", expected ")) else {
        return message.to_string();
    };
    format!(
        "expected {}, got {}",
        expected_words(expected),
        got_words(got)
    )
}

/// serde's name for the wanted type, in plain words.
fn expected_words(expected: &str) -> String {
    let plain = match expected {
        "usize" | "u64" | "u32" | "u128" => "a non-negative whole number",
        "u16" => "a whole number from 0 to 65535",
        "u8" => "a whole number from 0 to 255",
        "isize" | "i64" | "i32" | "i16" | "i8" | "i128" => "a whole number",
        "f64" | "f32" => "a number",
        "a boolean" => "true or false",
        "a string" => "a string in quotes",
        "a sequence" => "a list in brackets, e.g. [\"a\", \"b\"]",
        "a map" => "a table",
        other if other.starts_with("struct ") => "a table",
        other => return other.to_string(),
    };
    plain.to_string()
}

/// serde's description of the value found: `string "two"`, `integer `-1``.
fn got_words(got: &str) -> String {
    for prefix in ["string ", "integer ", "floating point ", "boolean "] {
        if let Some(v) = got.strip_prefix(prefix) {
            return v.trim_matches('`').to_string();
        }
    }
    match got {
        "sequence" => "a list".to_string(),
        "map" => "a table".to_string(),
        other => other.to_string(),
    }
}

/// The 1-based line of byte `offset` in `text`, and the dotted key written
/// on that line (`telemetry.sample_ratio`), when the line is `key = value`.
fn locate(text: &str, offset: usize) -> (usize, Option<String>) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line_no = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = text[start..].lines().next().unwrap_or("");
    let key = line
        .split_once('=')
        .map(|(k, _)| unquote(k.trim()))
        .filter(|k| !k.is_empty() && !k.starts_with('['));
    let Some(key) = key else {
        return (line_no, None);
    };
    // The table the line belongs to: the last `[table]` or `[[table]]` above.
    let table = before[..start].lines().rev().find_map(|l| {
        let l = l.trim();
        let inner = l.strip_prefix("[[").and_then(|r| r.split_once("]]"));
        let inner = inner.or_else(|| l.strip_prefix('[').and_then(|r| r.split_once(']')));
        inner.map(|(name, _)| unquote(name.trim()))
    });
    match table {
        Some(t) if !t.is_empty() => (line_no, Some(format!("{t}.{key}"))),
        _ => (line_no, Some(key)),
    }
}

/// The table of a `[table]` header at `offset` where a list was expected
/// (a list of tables written with single brackets).
fn single_bracket_list(text: &str, offset: usize, message: &str) -> Option<String> {
    if !(message.contains("expected a sequence") && message.contains("map")) {
        return None;
    }
    let offset = offset.min(text.len());
    let start = text.get(..offset)?.rfind('\n').map_or(0, |i| i + 1);
    let line = text.get(start..)?.lines().next()?.trim();
    let name = line.strip_prefix('[')?.strip_suffix(']')?;
    (!name.starts_with('[')).then(|| unquote(name.trim()))
}

fn unquote(s: &str) -> String {
    s.trim_matches(|c| c == '"' || c == '\'').to_string()
}

/// Text from the file as it may be echoed (a key, or serde's message that
/// quotes one): one line, no control characters, at most `max` characters.
fn clean(text: &str, max: usize) -> String {
    let flat = one_line(text);
    let mut out: String = flat
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .take(max)
        .collect();
    if flat.chars().count() > max {
        out.push('…');
    }
    out
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}
