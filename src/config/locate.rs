//! Where a value that parsed but failed validation is written in the file:
//! the 1-based line of the key an error names, so that the error reads
//! like a parse error (`line 14: auth.keys.weight: ...`).
//!
//! The file is read line by line as TOML tables go (`[table]`,
//! `[[array.of.tables]]`, `key = value`, dotted keys); a key the error
//! names is found by its full dotted name, by the class or tenant the
//! message names (`queue.classes.batch.max_wait_ms` for
//! `queue.classes.max_wait_ms` and "batch: ..."; the `[[auth.keys]]` entry
//! whose `name` is the tenant of `tenant "a": ...`), and within an entry by
//! the field the message names (`weight 0 ...`).
//!
//! Deliberately not here: the error's wording, and keys given by flags or
//! environment variables (the caller leaves those unlocated).

/// One `key = value` line, or one table header.
struct Line {
    no: usize,
    /// The full dotted key (`auth.keys.weight`), or the table (`auth.keys`)
    /// of a header.
    key: String,
    header: bool,
    /// Which `[[...]]` entry of its table the line is in (0 when none).
    entry: usize,
}

/// The 1-based line where `key` (as an error names it) is written, when it
/// is found in `text`.
pub fn line_of(text: &str, key: &str, message: &str) -> Option<(usize, String)> {
    let lines = read(text);
    let tenant = quoted_after(message, "tenant ");
    let class = message
        .split_once(':')
        .map(|(c, _)| c.trim())
        .filter(|c| matches!(*c, "interactive" | "default" | "batch"));
    // The key itself, or with the class inserted before its last segment.
    let wanted: Vec<String> = match (class, key.rsplit_once('.')) {
        (Some(c), Some((table, field))) => vec![format!("{table}.{c}.{field}"), key.to_string()],
        _ => vec![key.to_string()],
    };
    for w in &wanted {
        if let Some(l) = lines.iter().find(|l| !l.header && l.key == *w) {
            return Some((l.no, l.key.clone()));
        }
    }
    // A table keyed by names (`[queue.classes.<name>]`) whose name the
    // message quotes first: that name's header or first key.
    if let Some(name) = message
        .strip_prefix('"')
        .and_then(|r| r.split_once('"'))
        .map(|(n, _)| n)
    {
        let table = format!("{key}.{}", dotted(name));
        let inside = format!("{table}.");
        if let Some(l) = lines
            .iter()
            .find(|l| l.key == table || l.key.starts_with(&inside))
        {
            return Some((l.no, l.key.clone()));
        }
    }
    // A table of entries: the one naming the tenant, then the field the
    // message names in it, else its `name` line, else its header.
    let headers: Vec<&Line> = lines.iter().filter(|l| l.header && l.key == key).collect();
    let prefix = format!("{key}.");
    let entry_of = |h: &Line| -> Vec<&Line> {
        lines
            .iter()
            .filter(|l| {
                !l.header && l.entry == h.entry && l.no > h.no && l.key.starts_with(&prefix)
            })
            .collect()
    };
    let header = match tenant.as_deref() {
        Some(t) => headers.iter().copied().find(|h| {
            entry_of(h)
                .iter()
                .any(|l| l.key == format!("{key}.name") && value_is(text, l.no, t))
        }),
        None => return headers.first().map(|h| (h.no, h.key.clone())),
    }?;
    let fields: Vec<&Line> = entry_of(header);
    let named = fields.iter().find(|l| {
        let field = l.key.rsplit('.').next().unwrap_or("");
        field != "name" && (mentions(message, field) || described(message, field))
    });
    let line = named
        .or_else(|| fields.iter().find(|l| l.key == format!("{key}.name")))
        .copied()
        .unwrap_or(header);
    Some((line.no, line.key.clone()))
}

fn read(text: &str) -> Vec<Line> {
    let mut out = Vec::new();
    let mut table = String::new();
    let mut entries: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut entry = 0;
    for (i, raw) in text.lines().enumerate() {
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        if let Some(name) = l.strip_prefix("[[").and_then(|r| r.split_once("]]")) {
            table = dotted(name.0);
            let n = entries.entry(table.clone()).or_default();
            *n += 1;
            entry = *n;
            out.push(Line {
                no: i + 1,
                key: table.clone(),
                header: true,
                entry,
            });
        } else if let Some(name) = l.strip_prefix('[').and_then(|r| r.split_once(']')) {
            table = dotted(name.0);
            entry = 0;
            out.push(Line {
                no: i + 1,
                key: table.clone(),
                header: true,
                entry,
            });
        } else if let Some((k, _)) = l.split_once('=') {
            let k = dotted(k);
            let key = if table.is_empty() {
                k
            } else {
                format!("{table}.{k}")
            };
            out.push(Line {
                no: i + 1,
                key,
                header: false,
                entry,
            });
        }
    }
    out
}

/// A dotted key as written (`a . "b"`) in plain form (`a.b`).
fn dotted(k: &str) -> String {
    k.split('.')
        .map(|p| p.trim().trim_matches(|c| c == '"' || c == '\''))
        .collect::<Vec<_>>()
        .join(".")
}

/// The text in quotes right after `prefix` (and an optional `name `) in
/// `message`.
fn quoted_after(message: &str, prefix: &str) -> Option<String> {
    let rest = &message[message.find(prefix)? + prefix.len()..];
    let rest = rest.strip_prefix("name ").unwrap_or(rest);
    let rest = rest.strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_string())
}

/// Line `no` of `text` sets its key to the string `value`.
fn value_is(text: &str, no: usize, value: &str) -> bool {
    text.lines()
        .nth(no - 1)
        .and_then(|l| l.split_once('='))
        .is_some_and(|(_, v)| v.trim().trim_matches(|c| c == '"' || c == '\'') == value)
}

/// Fields an error describes rather than names: (field, words).
const DESCRIBED: &[(&str, &str)] = &[("key_env", "environment variable")];

/// `message` speaks of `field` in the words [`DESCRIBED`] gives it.
fn described(message: &str, field: &str) -> bool {
    DESCRIBED
        .iter()
        .any(|(f, words)| *f == field && message.contains(words))
}

/// `message` names `field` as a word.
fn mentions(message: &str, field: &str) -> bool {
    !field.is_empty()
        && message
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|w| w == field)
}

#[cfg(test)]
mod tests;
