use super::*;

#[test]
fn a_bare_base_url_gets_the_signal_path() {
    assert_eq!(
        http_metrics_url("http://c:4318"),
        "http://c:4318/v1/metrics"
    );
    assert_eq!(
        http_metrics_url("http://c:4318/"),
        "http://c:4318/v1/metrics"
    );
    assert_eq!(
        http_metrics_url("http://c:4318/v1/metrics"),
        "http://c:4318/v1/metrics"
    );
}

#[test]
fn failures_are_logged_once_per_change_of_state() {
    let mut reach = Reach::default();
    let fail = Err("refused".to_string());
    let ok = Ok(());
    let logged: Vec<bool> = [&fail, &fail, &fail, &ok, &ok, &fail, &ok]
        .into_iter()
        .map(|r| reach.update(r, "http://c:4317"))
        .collect();
    assert_eq!(logged, [true, false, false, true, false, true, true]);
    // A first export that works says nothing.
    assert!(!Reach::default().update(&ok, "http://c:4317"));
}
