#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The manual as a reader meets it: README.md and every page under docs/.
//!
//! - every table row has as many cells as its header (a row spliced from
//!   another table, or one that lost its cells, shows here);
//! - every relative link names a file that exists, and every `#anchor` (in
//!   the same page or another) names a heading of that page, as GitHub
//!   forms heading anchors.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and docs/*.md, relative to the repository.
fn pages() -> Vec<PathBuf> {
    let mut v = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| p.strip_prefix(root()).unwrap().to_path_buf())
        .collect();
    docs.sort();
    v.extend(docs);
    v
}

/// The lines outside fenced code blocks, with their numbers.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            if l.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .map(|(i, l)| (i + 1, l))
        .collect()
}

/// The cells of a table row: split on `|` outside code spans, `\|` kept.
fn cells(row: &str) -> usize {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    let (mut n, mut code, mut prev) = (1, false, ' ');
    for c in inner.chars() {
        match c {
            '`' => code = !code,
            '|' if !code && prev != '\\' => n += 1,
            _ => {}
        }
        prev = c;
    }
    n
}

#[test]
fn every_table_row_has_its_headers_cells() {
    let mut bad = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(root().join(&page)).unwrap();
        let lines = prose(&text);
        let mut header: Option<usize> = None;
        for (i, (n, l)) in lines.iter().enumerate() {
            if !l.trim_start().starts_with('|') {
                header = None;
                continue;
            }
            match header {
                None => {
                    let separator = lines
                        .get(i + 1)
                        .is_some_and(|(_, s)| s.trim_start().starts_with("| ---"));
                    if separator {
                        header = Some(cells(l));
                    }
                }
                Some(h) if cells(l) != h => bad.push(format!(
                    "{}:{n}: {} cells in a table of {h}: {}",
                    page.display(),
                    cells(l),
                    &l[..l.len().min(100)]
                )),
                Some(_) => {}
            }
        }
    }
    assert!(bad.is_empty(), "malformed table rows:\n{}", bad.join("\n"));
}

/// GitHub's anchor of a heading: lower case, punctuation but `-` and `_`
/// dropped, spaces to `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings (a repeated heading gets `-1`, `-2`).
fn anchors(path: &Path) -> HashSet<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut seen = HashSet::new();
    for (_, l) in prose(&text) {
        let Some(h) = l.strip_prefix('#') else {
            continue;
        };
        let h = h.trim_start_matches('#');
        let base = anchor(&h.replace('`', ""));
        let mut a = base.clone();
        let mut k = 0;
        while seen.contains(&a) {
            k += 1;
            a = format!("{base}-{k}");
        }
        seen.insert(a);
    }
    seen
}

/// The targets of the inline links `](target)` of a line.
fn links(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        out.push(&after[..end]);
        rest = &after[end..];
    }
    out
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut bad = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let path = root().join(&page);
        let text = std::fs::read_to_string(&path).unwrap();
        let dir = path.parent().unwrap().to_path_buf();
        for (n, l) in prose(&text) {
            for target in links(l) {
                let target = target.split_whitespace().next().unwrap_or("");
                if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (file, frag) = match target.split_once('#') {
                    Some((f, a)) => (f, Some(a)),
                    None => (target, None),
                };
                let file_path = if file.is_empty() {
                    path.clone()
                } else {
                    dir.join(file)
                };
                if !file_path.exists() {
                    bad.push(format!("{}:{n}: no file {target}", page.display()));
                    continue;
                }
                if let Some(a) = frag {
                    let is_md = file_path.extension().is_some_and(|x| x == "md");
                    if is_md && !anchors(&file_path).contains(a) {
                        bad.push(format!(
                            "{}:{n}: no heading for #{a} ({target})",
                            page.display()
                        ));
                    }
                }
            }
        }
    }
    assert!(checked > 50, "only {checked} relative links found");
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
}

/// A page has at most one level-1 heading, its title (a generated
/// fragment such as docs/benchmarks.tables.md has none): sections inside
/// it are level 2 or deeper (a second `#` heading reads as a new page).
#[test]
fn each_page_has_one_title() {
    let mut bad = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(root().join(&page)).unwrap();
        let titles: Vec<String> = prose(&text)
            .into_iter()
            .filter(|(_, l)| l.starts_with("# "))
            .map(|(n, l)| format!("{}:{n}: {l}", page.display()))
            .collect();
        if titles.len() > 1 {
            bad.push(titles.join("\n"));
        }
    }
    assert!(
        bad.is_empty(),
        "pages with more than one level-1 heading:\n{}",
        bad.join("\n")
    );
}

/// A page never links to itself by its file name (a reader following it
/// lands at the top of the page they are on); within a page, `#anchor`.
#[test]
fn no_page_links_to_itself() {
    let mut bad = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(root().join(&page)).unwrap();
        let name = page.file_name().unwrap().to_str().unwrap();
        for (n, l) in prose(&text) {
            for target in links(l) {
                let file = target.split('#').next().unwrap_or("");
                if file == name {
                    bad.push(format!("{}:{n}: {target}", page.display()));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "pages linking to themselves:\n{}",
        bad.join("\n")
    );
}
