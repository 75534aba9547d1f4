//! Bounded strings: cutting a string a client or the upstream controls to a
//! documented number of bytes, on a character boundary, with a visible mark.
//!
//! Deliberately not here: which bound applies to which field (each format and
//! the request record say theirs).

#[cfg(test)]
mod tests;

/// Ends a string that was cut.
pub const CUT_MARKER: &str = "…";

/// Cuts `s` to at most `max` bytes, [`CUT_MARKER`] included, on a character
/// boundary, and frees the rest. A string that fits is left alone.
pub fn truncate(s: &mut String, max: usize) {
    if s.len() <= max {
        return;
    }
    let (end, marker) = cut(s, max);
    s.truncate(end);
    s.push_str(marker);
    s.shrink_to_fit();
}

/// `s` cut as by [`truncate`], copying at most `max` bytes.
pub fn bounded(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let (end, marker) = cut(s, max);
    let mut out = String::with_capacity(end + marker.len());
    out.push_str(s.get(..end).unwrap_or_default());
    out.push_str(marker);
    out
}

/// Where to cut `s` (longer than `max`) so that it and the marker fit in
/// `max` bytes, and the marker (none when even it does not fit).
fn cut(s: &str, max: usize) -> (usize, &'static str) {
    let marker = if max >= CUT_MARKER.len() {
        CUT_MARKER
    } else {
        ""
    };
    let mut end = max - marker.len();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (end, marker)
}
