//! A stable order for the `/metrics` exposition: within each metric family,
//! series sorted by their label sets, so two scrapes list the same series in
//! the same order and a person can find one (prometheus-client writes a
//! family's series in hash-map order, different in every process).
//!
//! Pure text: it reorders the sample lines between two comment lines by
//! their labels with `le` left out, keeping the relative order of lines
//! with equal keys (a histogram's buckets, sum and count stay together and
//! in order). It does not parse values or exemplars, and does not reorder
//! families (they keep their registration order).

#[cfg(test)]
mod tests;

/// `text` with each family's series sorted by label set.
pub fn sorted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut block: Vec<(String, &str)> = Vec::new();
    for line in text.split_inclusive('\n') {
        if line.starts_with('#') {
            flush(&mut out, &mut block);
            out.push_str(line);
        } else {
            block.push((key(line), line));
        }
    }
    flush(&mut out, &mut block);
    out
}

fn flush(out: &mut String, block: &mut Vec<(String, &str)>) {
    block.sort_by(|a, b| a.0.cmp(&b.0));
    for (_, line) in block.drain(..) {
        out.push_str(line);
        if !line.ends_with('\n') {
            // Only a last line can lack its newline; moved, it needs one.
            out.push('\n');
        }
    }
}

/// The label pairs of a sample line, `le` left out, joined by commas.
fn key(line: &str) -> String {
    let Some(open) = line.find(['{', ' ']) else {
        return String::new();
    };
    if line.as_bytes().get(open) != Some(&b'{') {
        return String::new();
    }
    let mut pairs: Vec<&str> = Vec::new();
    let body = line.get(open + 1..).unwrap_or("");
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in body.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ',' | '}' if !quoted => {
                pairs.push(body.get(start..i).unwrap_or(""));
                start = i + 1;
                if c == '}' {
                    break;
                }
            }
            _ => {}
        }
    }
    pairs
        .into_iter()
        .filter(|p| !p.is_empty() && !p.starts_with("le="))
        .collect::<Vec<_>>()
        .join(",")
}
