use super::*;

#[test]
fn distance_counts_edits() {
    assert_eq!(distance("upstrem", "upstream"), 1);
    assert_eq!(distance("", "abc"), 3);
    assert_eq!(distance("kitten", "sitting"), 3);
    assert_eq!(distance("same", "same"), 0);
}

#[test]
fn a_typo_gets_the_closest_key_and_nothing_far_is_suggested() {
    let keys = ["listen", "upstream", "upstreams", "continuation"];
    assert_eq!(closest("upstrem", &keys), Some("upstream"));
    assert_eq!(closest("Listen", &keys), Some("listen"));
    assert_eq!(closest("continuaton", &keys), Some("continuation"));
    assert_eq!(closest("zz_not_a_key", &keys), None);
    assert_eq!(closest("x", &keys), None);
}

#[test]
fn the_message_names_the_key_suggests_one_and_lists_all_whole() {
    let m = unknown(
        "unknown field `upstrem`, expected one of `listen`, `upstream`, `continuation`, `queue`",
        true,
    )
    .unwrap();
    assert_eq!(
        m,
        "unknown key `upstrem`; did you mean `upstream`? expected one of: listen, upstream, continuation, queue"
    );
    let m = unknown("unknown field `zzz`, expected `a` or `b`", false).unwrap();
    assert_eq!(m, "unknown key; expected one of: a, b");
    assert_eq!(
        unknown("invalid type: string \"x\", expected u64", true),
        None
    );
}
