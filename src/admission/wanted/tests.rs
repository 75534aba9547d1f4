use super::*;

#[test]
fn a_model_is_wanted_while_a_request_naming_it_waits() {
    let w = Wanted::default();
    let a = w.hold(0, Some("qwen"));
    let b = w.hold(0, Some("qwen"));
    let any = w.hold(2, None);
    let m = w.models();
    assert!(m[0].names.contains("qwen") && !m[0].any);
    assert_eq!(m[1], Models::default(), "nothing waits at default");
    assert!(m[2].any);
    drop(a);
    assert!(w.models()[0].names.contains("qwen"), "one still waits");
    drop(b);
    drop(any);
    assert_eq!(w.models(), <[Models; 3]>::default());
}
