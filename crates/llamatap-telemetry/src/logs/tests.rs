use super::*;

#[test]
fn pingora_server_lines_are_quiet_unless_asked_for() {
    for spec in [None, Some("info"), Some("debug,llamatap=trace")] {
        let f = filter(spec).to_string();
        assert!(f.contains(QUIET_PINGORA_SERVER), "{spec:?}: {f}");
    }
    let f = filter(Some("info,pingora_core::server=info")).to_string();
    assert!(!f.contains(QUIET_PINGORA_SERVER), "{f}");
    assert!(filter(None).to_string().contains("llamatap=info"));
}
