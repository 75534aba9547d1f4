use super::*;

#[test]
fn bearer_tokens() {
    assert_eq!(bearer("Bearer abc"), Some("abc"));
    assert_eq!(bearer("bearer  abc "), Some("abc"));
    assert_eq!(bearer("Basic abc"), None);
    assert_eq!(bearer("Bearer"), None);
}

fn config(toml: &str) -> Config {
    let raw = crate::config::RawConfig::from_toml(toml).unwrap();
    Config::from_raw(raw, &crate::config::Overrides::default()).unwrap()
}

fn request(method: &str, target: &str, key: Option<&str>) -> (RequestHeader, Route) {
    let mut req = RequestHeader::build(method, target.as_bytes(), None).unwrap();
    if let Some(k) = key {
        req.insert_header("Authorization", format!("Bearer {k}"))
            .unwrap();
    }
    let route = Route::from_target(req.raw_path());
    (req, route)
}

fn status(config: &Config, method: &str, target: &str, key: Option<&str>) -> u16 {
    let (req, route) = request(method, target, key);
    match check(&req, route, config) {
        Ok(_) => 200,
        Err(r) => r.status,
    }
}

const NAMED: &str = r#"
[auth]
api_keys = ["flat-key-0001"]
[[auth.keys]]
name = "alice"
key = "alice-key-0001"
[[auth.keys]]
name = "ops"
key = "ops-key-00001"
admin = true
"#;

#[test]
fn with_named_keys_only_an_admin_key_reaches_administrative_routes() {
    let c = config(NAMED);
    for (method, target) in [
        ("POST", "/slots/0?action=erase"),
        ("GET", "/slots"),
        ("POST", "/lora-adapters"),
        ("GET", "/metrics"),
        ("POST", "/props"),
        ("POST", "/models/load"),
        ("DELETE", "/models?model=x"),
        ("GET", "/models?reload=1"),
    ] {
        assert_eq!(
            status(&c, method, target, Some("alice-key-0001")),
            403,
            "{method} {target}"
        );
        assert_eq!(
            status(&c, method, target, Some("flat-key-0001")),
            403,
            "{method} {target}"
        );
        assert_eq!(
            status(&c, method, target, Some("ops-key-00001")),
            200,
            "{method} {target}"
        );
        assert_eq!(status(&c, method, target, None), 401, "{method} {target}");
    }
    let (req, route) = request("POST", "/slots/0?action=erase", Some("alice-key-0001"));
    let r = check(&req, route, &c).unwrap_err();
    assert_eq!((r.kind, r.code), ("permission_error", "admin_route"));
    for (method, target) in [
        ("POST", "/v1/chat/completions"),
        ("GET", "/lora-adapters"),
        ("GET", "/props"),
        ("GET", "/v1/models"),
    ] {
        assert_eq!(
            status(&c, method, target, Some("alice-key-0001")),
            200,
            "{method} {target}"
        );
    }
    assert_eq!(status(&c, "GET", "/v1/models", None), 200);
    assert_eq!(status(&c, "OPTIONS", "/slots/0", None), 200);
}

#[test]
fn without_named_keys_any_key_reaches_them_as_before() {
    let flat = config("[auth]\napi_keys = [\"flat-key-0001\"]\n");
    let open = config("");
    for (method, target) in [
        ("POST", "/slots/0?action=erase"),
        ("GET", "/slots"),
        ("POST", "/lora-adapters"),
        ("POST", "/models/load"),
    ] {
        assert_eq!(status(&flat, method, target, Some("flat-key-0001")), 200);
        assert_eq!(status(&flat, method, target, None), 401);
        assert_eq!(status(&open, method, target, None), 200);
    }
    // Public only as a read: a stranger cannot remove a model.
    assert_eq!(status(&flat, "GET", "/models", None), 200);
    assert_eq!(status(&flat, "DELETE", "/models?model=x", None), 401);
    assert_eq!(status(&open, "DELETE", "/models?model=x", None), 200);
}

#[test]
fn the_web_ui_loads_without_a_key_and_its_api_calls_need_one() {
    // The page and every file it loads come before the user can type a key
    // into the UI's settings; what the UI then asks of the API needs it.
    let c = config(NAMED);
    for target in [
        "/",
        "/index.html",
        "/_app/immutable/bundle.BKi_2hnG.js",
        "/_app/immutable/assets/bundle.BHySb6NS.css",
        "/manifest.webmanifest",
        "/sw.js",
        "/favicon.svg",
        "/_app/version.json",
        "/build.json",
    ] {
        assert_eq!(status(&c, "GET", target, None), 200, "{target}");
    }
    assert_eq!(status(&c, "HEAD", "/favicon.svg", None), 200);
    for (method, target) in [
        // Only reads of the page and its files are public.
        ("POST", "/"),
        ("PUT", "/favicon.svg"),
        ("DELETE", "/_app/version.json"),
        ("GET", "/props"),
        ("POST", "/v1/chat/completions"),
        ("GET", "/v1/stream?conv_id=c.js&from=0"),
        ("POST", "/v1/streams/lookup"),
        ("DELETE", "/v1/stream?conv_id=c"),
    ] {
        assert_eq!(status(&c, method, target, None), 401, "{method} {target}");
        assert_eq!(
            status(&c, method, target, Some("alice-key-0001")),
            200,
            "{method} {target}"
        );
    }
}
