use super::*;

#[test]
fn short_strings_are_left_alone() {
    let mut s = "é".repeat(4);
    truncate(&mut s, 8);
    assert_eq!(s, "éééé");
}

#[test]
fn long_strings_are_cut_on_a_char_boundary_with_the_marker() {
    for max in 3..40 {
        let original = "aé€😀".repeat(20);
        let mut s = original.clone();
        truncate(&mut s, max);
        assert!(s.len() <= max, "{max}: {} bytes", s.len());
        assert!(s.ends_with(CUT_MARKER), "{max}: {s}");
        let kept = &s[..s.len() - CUT_MARKER.len()];
        assert!(original.starts_with(kept));
        assert!(
            max - s.len() < 4,
            "{max}: cut more than one character too many"
        );
    }
    let mut s = "abcdef".to_string();
    truncate(&mut s, 2);
    assert!(
        s.len() <= 2,
        "a bound below the marker's size still holds: {s:?}"
    );
}
