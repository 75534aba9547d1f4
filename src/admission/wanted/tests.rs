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

#[test]
fn ahead_counts_the_same_or_more_urgent_classes_and_the_models_that_compete() {
    let w = Wanted::default();
    assert_eq!(w.ahead(2, None), 0);
    let _a = w.hold(0, Some("qwen"));
    let _b = w.hold(1, Some("llama"));
    let _c = w.hold(1, None);
    let _d = w.hold(2, Some("qwen"));
    // Any model: everything at its class or above.
    assert_eq!(w.ahead(0, None), 1);
    assert_eq!(w.ahead(1, None), 3);
    assert_eq!(w.ahead(2, None), 4);
    // A named model: the same model, or a request naming none.
    assert_eq!(w.ahead(1, Some("qwen")), 2);
    assert_eq!(w.ahead(2, Some("qwen")), 3);
    assert_eq!(w.ahead(2, Some("llama")), 2);
    assert_eq!(w.ahead(0, Some("llama")), 0);
}
