#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_name_no_longer_served_is_let_go() {
    let m = ModelNames::new(names(&["alias"]));
    let c = m.replace(names(&["a", "b"]));
    assert_eq!(c.added, names(&["a", "b"]));
    assert!(c.removed.is_empty());
    let c = m.replace(names(&["b", "c"]));
    assert_eq!(c.added, names(&["c"]));
    assert_eq!(c.removed, names(&["a"]));
    assert_eq!(m.label(Some("a")), OTHER);
    assert_eq!(m.label(Some("alias")), "alias", "aliases stay");
    assert_eq!(m.list(), names(&["alias", "b", "c"]));
}

#[test]
fn at_most_max_models_names_are_held_and_held_ones_are_kept_first() {
    let m = ModelNames::new(Vec::new());
    let first: Vec<String> = (0..MAX_MODELS).map(|i| format!("z{i:03}")).collect();
    m.replace(first.clone());
    // Many new names that sort before the held ones: the held ones stay.
    let mut more: Vec<String> = (0..1000).map(|i| format!("a{i:04}")).collect();
    more.extend(first.iter().cloned());
    let c = m.replace(more);
    assert!(c.added.is_empty() && c.removed.is_empty(), "{c:?}");
    assert_eq!(m.list(), first);
    assert_eq!(m.label(Some("a0000")), OTHER);
    // Over many changes of name, the set never grows past the cap.
    for round in 0..100 {
        m.replace(vec![format!("swap-{round}")]);
        assert!(m.list().len() <= MAX_MODELS);
        assert_eq!(m.list(), vec![format!("swap-{round}")]);
    }
}

#[test]
fn reserved_empty_and_long_names_are_never_labels() {
    let m = ModelNames::new(names(&["", OTHER]));
    m.replace(vec![NONE.into(), "x".repeat(300), "ok".into()]);
    assert_eq!(m.list(), names(&["ok"]));
}
