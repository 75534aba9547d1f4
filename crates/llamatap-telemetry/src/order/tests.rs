#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

#[test]
fn series_are_sorted_within_each_family_and_histograms_stay_whole() {
    let text = "# HELP a A.\n# TYPE a counter\n\
a_total{model=\"z\",route=\"r\"} 1\n\
a_total{model=\"a\",route=\"r\"} 2\n\
# HELP h H.\n# TYPE h histogram\n\
h_sum{model=\"z\"} 0\nh_count{model=\"z\"} 0\nh_bucket{model=\"z\",le=\"1\"} 0\nh_bucket{model=\"z\",le=\"+Inf\"} 0\n\
h_sum{model=\"a\"} 0\nh_count{model=\"a\"} 0\nh_bucket{model=\"a\",le=\"1\"} 0\nh_bucket{model=\"a\",le=\"+Inf\"} 0\n\
# EOF\n";
    let want = "# HELP a A.\n# TYPE a counter\n\
a_total{model=\"a\",route=\"r\"} 2\n\
a_total{model=\"z\",route=\"r\"} 1\n\
# HELP h H.\n# TYPE h histogram\n\
h_sum{model=\"a\"} 0\nh_count{model=\"a\"} 0\nh_bucket{model=\"a\",le=\"1\"} 0\nh_bucket{model=\"a\",le=\"+Inf\"} 0\n\
h_sum{model=\"z\"} 0\nh_count{model=\"z\"} 0\nh_bucket{model=\"z\",le=\"1\"} 0\nh_bucket{model=\"z\",le=\"+Inf\"} 0\n\
# EOF\n";
    assert_eq!(sorted(text), want);
}

#[test]
fn quoted_commas_braces_and_exemplars_do_not_confuse_the_key() {
    assert_eq!(key("x{a=\"1,}\\\"\",b=\"2\"} 3\n"), "a=\"1,}\\\"\",b=\"2\"");
    assert_eq!(
        key("x_bucket{m=\"a\",le=\"0.1\"} 1 # {trace_id=\"ab\"} 0.05 1.0\n"),
        "m=\"a\""
    );
    assert_eq!(key("x 1\n"), "");
    assert_eq!(key("garbage"), "");
}

#[test]
fn every_line_is_kept() {
    let text = "b 1\na 2\n# c\nz{q=\"1\"} 1\ny{q=\"0\"} 1";
    let out = sorted(text);
    let mut a: Vec<&str> = text.lines().collect();
    let mut b: Vec<&str> = out.lines().collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
}
