use super::*;

fn of(method: &str, target: &str) -> Option<AdminRoute> {
    AdminRoute::of(Route::from_path(target), method, target.as_bytes())
}

#[test]
fn slot_actions_and_the_slot_list_are_administrative_with_any_method() {
    for target in [
        "/slots",
        "/slots/0?action=save",
        "/slots/1?action=restore",
        "/slots/0?action=erase",
        "/slots/0/",
        "/%73lots/0?action=erase",
        "/slots?fail_on_no_slot=1",
    ] {
        for method in ["GET", "POST", "HEAD", "DELETE", "PUT"] {
            assert_eq!(
                of(method, target),
                Some(AdminRoute::Slots),
                "{method} {target}"
            );
        }
    }
}

#[test]
fn setting_state_is_administrative_and_reading_it_is_not() {
    assert_eq!(of("POST", "/lora-adapters"), Some(AdminRoute::LoraAdapters));
    assert_eq!(
        of("POST", "/lora-%61dapters"),
        Some(AdminRoute::LoraAdapters)
    );
    assert_eq!(of("GET", "/lora-adapters"), None);
    assert_eq!(of("POST", "/props"), Some(AdminRoute::Props));
    assert_eq!(of("GET", "/props"), None);
    assert_eq!(of("GET", "/props?model=x"), None);
    assert_eq!(of("GET", "/metrics"), Some(AdminRoute::Metrics));
}

#[test]
fn the_routers_model_management_is_administrative() {
    for (method, target) in [
        ("POST", "/models/load"),
        ("POST", "/models/unload"),
        ("GET", "/models/load"),
        ("POST", "/models"),
        ("DELETE", "/models?model=x"),
        ("GET", "/models?reload=1"),
        ("GET", "/v1/models?reload"),
        ("GET", "/models?a=b&rel%6fad=1"),
        ("POST", "/predict"),
    ] {
        assert!(of(method, target).is_some(), "{method} {target}");
    }
    for (method, target) in [
        ("GET", "/models"),
        ("GET", "/v1/models"),
        ("GET", "/models/sse"),
        ("GET", "/models#?reload=1"),
        ("GET", "/models?reloaded=1"),
    ] {
        assert_eq!(of(method, target), None, "{method} {target}");
    }
}

#[test]
fn answers_preflights_and_unknown_paths_are_not_administrative() {
    for (method, target) in [
        ("POST", "/v1/chat/completions"),
        ("POST", "/completion"),
        ("GET", "/health"),
        ("GET", "/v1/stream?conv_id=x"),
        ("POST", "/v1/chat/completions/control"),
        ("OPTIONS", "/slots/0"),
        ("OPTIONS", "/lora-adapters"),
        ("POST", "/lora-adapters/"),
        ("POST", "/slots/0/x"),
    ] {
        assert_eq!(of(method, target), None, "{method} {target}");
    }
}
