//! The binary's module graph read from its source: no two modules import
//! each other, directly or through others, and no production file grows
//! past 400 lines.
//!
//! Each `crate::`, `super::` and `self::` path (in `use` trees and in
//! code), and each relative `use` of a child module, is resolved to the
//! module it names, following `pub use` re-exports; a reference from
//! module `a::b::x` to `a::c::y` is an edge between the siblings `a::b`
//! and `a::c` (a child using its ancestor's own items is not an edge). The
//! circles of that graph must be exactly [`KNOWN_CIRCLES`]: a new one
//! fails, and so does one that was untangled but is still listed.
//!
//! Test code (`tests.rs`, `tests/` folders, a trailing `#[cfg(test)] mod
//! tests { … }`) is left out.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Circles left to untangle, each sorted; the list sorted. None is left:
/// keep it so.
const KNOWN_CIRCLES: &[&[&str]] = &[];

/// Production files allowed past [`MAX_LINES`] for now.
const KNOWN_LONG_FILES: &[&str] = &[];

/// Longest production file, lines.
const MAX_LINES: usize = 400;

type ModPath = Vec<String>;

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "tests") {
                collect(&p, out);
            }
        } else if p.extension().is_some_and(|e| e == "rs")
            && p.file_name()
                .is_some_and(|n| n != "tests.rs" && n != "main.rs")
        {
            out.push(p);
        }
    }
}

fn module_path(root: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(root).unwrap().with_extension("");
    let mut path: ModPath = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if path.last().is_some_and(|l| l == "lib" || l == "mod") {
        path.pop();
    }
    path
}

/// The source without comments, string literals and trailing test module.
fn code(src: &str) -> String {
    let src = match src.find("#[cfg(test)]\nmod tests {") {
        Some(i) => &src[..i],
        None => src,
    };
    let mut out = String::with_capacity(src.len());
    for line in src.lines() {
        let line = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        // String literals: their text is not code (a path in a message).
        let mut in_str = false;
        let mut prev = ' ';
        for c in line.chars() {
            if c == '"' && prev != '\\' && prev != '\'' {
                in_str = !in_str;
                out.push(' ');
            } else if !in_str {
                out.push(c);
            }
            prev = c;
        }
        out.push('\n');
    }
    out
}

/// Splits `s` at top-level commas (outside braces).
fn split_top(s: &str) -> Vec<&str> {
    let (mut depth, mut start, mut parts) = (0i32, 0usize, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

/// The paths of a `use` tree, each with the name it binds.
fn expand(prefix: &[String], tree: &str, out: &mut Vec<(ModPath, String)>) {
    let tree = tree.trim();
    if tree.is_empty() {
        return;
    }
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = tree[..open]
            .split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let mut p = prefix.to_vec();
        p.extend(head);
        for part in split_top(inner) {
            expand(&p, part, out);
        }
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((p, a)) => (p, Some(a.trim().to_string())),
        None => (tree, None),
    };
    let mut p = prefix.to_vec();
    p.extend(
        path.split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from),
    );
    if p.last().is_some_and(|l| l == "self") {
        p.pop();
    }
    let name = alias.unwrap_or_else(|| p.last().cloned().unwrap_or_default());
    out.push((p, name));
}

/// Each `use` statement of `code`: (public, its paths).
fn uses(code: &str) -> Vec<(bool, Vec<(ModPath, String)>)> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let before = &rest[..i];
        let at_start = before
            .chars()
            .last()
            .is_none_or(|c| c.is_whitespace() || c == ';' || c == '{' || c == ')');
        let Some(end) = rest[i..].find(';') else {
            break;
        };
        if at_start {
            let line_start = before.rfind('\n').map_or(0, |n| n + 1);
            let public = before[line_start..].contains("pub");
            let mut paths = Vec::new();
            expand(&[], &rest[i + 4..i + end], &mut paths);
            found.push((public, paths));
        }
        rest = &rest[i + end + 1..];
    }
    found
}

/// Every `crate::`, `super::`, `self::` path in code outside `use`.
fn code_paths(code: &str) -> Vec<ModPath> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            let prev = at.checked_sub(1).map(|p| bytes[p] as char);
            if prev.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut end = at;
            while end < bytes.len()
                && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_' || bytes[end] == b':')
            {
                end += 1;
            }
            let p: ModPath = code[at..end]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            out.push(p);
        }
    }
    out
}

struct Graph {
    modules: BTreeSet<ModPath>,
    /// (module, name) → the module the name is re-exported from.
    reexports: BTreeMap<(ModPath, String), ModPath>,
}

impl Graph {
    /// The module `path` names from `at`; `None` for another crate.
    fn resolve(&self, at: &ModPath, path: &ModPath, depth: usize) -> Option<ModPath> {
        let mut segs = path.iter().peekable();
        let mut base: ModPath = match segs.peek().map(|s| s.as_str()) {
            Some("crate") => {
                segs.next();
                Vec::new()
            }
            Some("super") => {
                let mut b = at.clone();
                while segs.peek().is_some_and(|s| *s == "super") {
                    segs.next();
                    b.pop();
                }
                b
            }
            Some("self") => {
                segs.next();
                at.clone()
            }
            Some(first) => {
                let mut child = at.clone();
                child.push(first.to_string());
                if !self.modules.contains(&child) {
                    return None;
                }
                at.clone()
            }
            None => return None,
        };
        while let Some(s) = segs.next() {
            let mut next = base.clone();
            next.push(s.clone());
            if self.modules.contains(&next) {
                base = next;
                continue;
            }
            if depth < 8 {
                if let Some(src) = self.reexports.get(&(base.clone(), s.clone())) {
                    let mut rest: ModPath = vec!["crate".into()];
                    rest.extend(src.iter().cloned());
                    rest.extend(segs.cloned());
                    return self.resolve(&base, &rest, depth + 1);
                }
            }
            break;
        }
        Some(base)
    }
}

fn circles(root: &Path) -> Vec<Vec<String>> {
    let mut files = Vec::new();
    collect(root, &mut files);
    let sources: Vec<(ModPath, String)> = files
        .iter()
        .map(|f| (module_path(root, f), code(&fs::read_to_string(f).unwrap())))
        .collect();
    let mut graph = Graph {
        modules: sources.iter().map(|(m, _)| m.clone()).collect(),
        reexports: BTreeMap::new(),
    };
    for _ in 0..3 {
        for (m, code) in &sources {
            for (public, paths) in uses(code) {
                if !public {
                    continue;
                }
                for (p, name) in paths {
                    let mut parent = p.clone();
                    parent.pop();
                    let Some(src) = graph.resolve(m, &parent, 0) else {
                        continue;
                    };
                    let mut whole = src.clone();
                    whole.push(p.last().cloned().unwrap_or_default());
                    let target = if graph.modules.contains(&whole) {
                        whole
                    } else {
                        graph
                            .reexports
                            .get(&(src.clone(), p.last().cloned().unwrap_or_default()))
                            .cloned()
                            .unwrap_or(src)
                    };
                    if &target != m {
                        graph.reexports.insert((m.clone(), name), target);
                    }
                }
            }
        }
    }
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, code) in &sources {
        let mut paths: Vec<ModPath> = uses(code)
            .into_iter()
            .flat_map(|(_, p)| p.into_iter().map(|(p, _)| p))
            .collect();
        paths.extend(code_paths(code));
        for p in paths {
            let Some(t) = graph.resolve(m, &p, 0) else {
                continue;
            };
            let k = m.iter().zip(&t).take_while(|(a, b)| a == b).count();
            if k < m.len() && k < t.len() {
                edges
                    .entry(m[..=k].join("::"))
                    .or_default()
                    .insert(t[..=k].join("::"));
            }
        }
    }
    strongly_connected(&edges)
}

/// The strongly connected components of more than one node, each sorted.
fn strongly_connected(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let nodes: BTreeSet<&String> = edges
        .keys()
        .chain(edges.values().flat_map(|v| v.iter()))
        .collect();
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(n) = stack.pop() {
            for t in edges.get(&n).into_iter().flatten() {
                if seen.insert(t.clone()) {
                    stack.push(t.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut out: BTreeSet<Vec<String>> = BTreeSet::new();
    for n in &nodes {
        let mut comp: Vec<String> = nodes
            .iter()
            .filter(|m| reaches[*n].contains(**m) && reaches[*m].contains(*n))
            .map(|m| (*m).clone())
            .collect();
        if comp.len() > 1 {
            comp.sort();
            out.insert(comp);
        }
    }
    out.into_iter().collect()
}

fn src_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn no_two_modules_of_the_binary_import_each_other() {
    let found = circles(&src_root());
    let known: Vec<Vec<String>> = KNOWN_CIRCLES
        .iter()
        .map(|c| c.iter().map(|s| s.to_string()).collect())
        .collect();
    assert_eq!(
        found, known,
        "the module graph's circles changed: untangle a new one; drop one untangled from KNOWN_CIRCLES"
    );
}

#[test]
fn no_production_file_is_longer_than_400_lines() {
    let root = src_root();
    let mut files = Vec::new();
    collect(&root, &mut files);
    let mut long: Vec<String> = files
        .iter()
        .filter(|f| fs::read_to_string(f).unwrap().lines().count() > MAX_LINES)
        .map(|f| f.strip_prefix(&root).unwrap().display().to_string())
        .collect();
    long.sort();
    assert_eq!(
        long, KNOWN_LONG_FILES,
        "production files over {MAX_LINES} lines"
    );
}

#[test]
fn the_reader_sees_a_circle_and_follows_re_exports() {
    let dir = std::env::temp_dir().join(format!("llamatap-modules-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("p")).unwrap();
    fs::write(dir.join("lib.rs"), "pub mod p;\npub mod q;\n").unwrap();
    fs::write(dir.join("p.rs"), "mod a;\nmod b;\npub use b::Thing;\n").unwrap();
    fs::write(dir.join("p/a.rs"), "use super::Thing;\n// crate::q\n").unwrap();
    fs::write(
        dir.join("p/b.rs"),
        "pub struct Thing;\nfn f() { let _ = \"crate::q\"; crate::p::a::g(); }\n",
    )
    .unwrap();
    fs::write(dir.join("q.rs"), "use crate::p;\n").unwrap();
    let found = circles(&dir);
    assert_eq!(found, vec![vec!["p::a".to_string(), "p::b".to_string()]]);
    // Untangled: no circle.
    fs::write(dir.join("p/b.rs"), "pub struct Thing;\n").unwrap();
    assert!(circles(&dir).is_empty());
    // Across the top level.
    fs::write(dir.join("p/b.rs"), "pub struct Thing;\nuse crate::q::X;\n").unwrap();
    fs::write(dir.join("q.rs"), "pub struct X;\nuse crate::p::Thing;\n").unwrap();
    assert_eq!(circles(&dir), vec![vec!["p".to_string(), "q".to_string()]]);
    let _ = fs::remove_dir_all(&dir);
}
