//! Tenants kept apart at llama-server: its administrative routes need a key
//! marked `admin = true`, and its resumable streams are scoped per tenant,
//! proven against the real llama-server.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::http;
use common::llama::LlamaServer;
use common::proxy::Llamatap;
use common::temp_config;

const ALICE: &str = "alice-secret-key-7f3a9c";
const BOB: &str = "bob-secret-key-5e1d20";
const OPS: &str = "ops-secret-key-91c0de";

/// Two tenants and an admin.
fn named_keys() -> String {
    format!(
        "[[auth.keys]]\nname = \"alice\"\nkey = \"{ALICE}\"\n\
         [[auth.keys]]\nname = \"bob\"\nkey = \"{BOB}\"\n\
         [[auth.keys]]\nname = \"ops\"\nkey = \"{OPS}\"\nadmin = true\n"
    )
}

/// One request with an optional bearer key: status and body.
fn call(
    addr: &str,
    method: &str,
    target: &str,
    key: Option<&str>,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<u8>) {
    let auth = key.map(|k| format!("Bearer {k}"));
    let mut h: Vec<(&str, &str)> = vec![("Connection", "close")];
    if let Some(a) = &auth {
        h.push(("Authorization", a));
    }
    h.extend_from_slice(headers);
    let mut r = http::send(addr, method, target, &h, body.as_bytes()).unwrap();
    let b = r.read_all().unwrap();
    (r.head.status, b)
}

fn error_code(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v["error"]["code"].as_str().map(str::to_string)
}

// === administrative routes ===

/// Each administrative route a single-model llama-server serves, with a
/// body it accepts, and the status it answers an allowed caller.
fn admin_requests() -> Vec<(&'static str, &'static str, &'static str, u16)> {
    vec![
        ("GET", "/slots", "", 200),
        (
            "POST",
            "/slots/0?action=save",
            r#"{"filename":"a.bin"}"#,
            200,
        ),
        (
            "POST",
            "/slots/0?action=restore",
            r#"{"filename":"a.bin"}"#,
            200,
        ),
        ("POST", "/slots/0?action=erase", "", 200),
        ("POST", "/lora-adapters", "[]", 200),
        ("GET", "/metrics", "", 200),
        // Single-model llama-server: not found there, but it got them.
        ("POST", "/models/load", r#"{"model":"x"}"#, 404),
        ("POST", "/models/unload", r#"{"model":"x"}"#, 404),
    ]
}

#[test]
fn only_an_admin_key_reaches_llama_servers_administrative_routes() {
    let dir = std::env::temp_dir().join(format!("llamatap-slots-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let save = format!("{}/", dir.display());
    let llama = LlamaServer::start("tiny", &["-np", "1", "--slot-save-path", &save]);
    let config = temp_config("admin-routes", &named_keys());
    let proxy = Llamatap::start(&llama.base_url, &["--config", config.to_str().unwrap()]);
    let addr = proxy.addr();
    // A slot with something in it, so that save has a cache to write.
    let chat = r#"{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2}"#;
    let (s, _) = call(
        &addr,
        "POST",
        "/v1/chat/completions",
        Some(ALICE),
        &[],
        chat,
    );
    assert_eq!(s, 200);
    for (method, target, body, _) in admin_requests() {
        let (s, b) = call(&addr, method, target, Some(ALICE), &[], body);
        assert_eq!(s, 403, "{method} {target}: {}", String::from_utf8_lossy(&b));
        assert_eq!(error_code(&b).as_deref(), Some("admin_route"));
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["error"]["type"], "permission_error");
    }
    assert!(
        !dir.join("a.bin").exists(),
        "a refused save wrote nothing on the server"
    );
    for (method, target, body, want) in admin_requests() {
        let (s, b) = call(&addr, method, target, Some(OPS), &[], body);
        assert_eq!(
            s,
            want,
            "{method} {target}: {}",
            String::from_utf8_lossy(&b)
        );
    }
    assert!(
        dir.join("a.bin").exists(),
        "the admin's save reached llama-server"
    );
    // Reading what every tenant shares and needs stays open.
    for target in ["/props", "/lora-adapters", "/v1/models"] {
        let (s, _) = call(&addr, "GET", target, Some(BOB), &[], "");
        assert_eq!(s, 200, "GET {target}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_named_keys_the_administrative_routes_are_unchanged() {
    let dir = std::env::temp_dir().join(format!("llamatap-slots-open-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let save = format!("{}/", dir.display());
    let llama = LlamaServer::start("tiny", &["-np", "1", "--slot-save-path", &save]);
    let open = Llamatap::start(&llama.base_url, &[]);
    let flat = temp_config(
        "admin-routes-flat",
        "[auth]\napi_keys = [\"flat-key-a4b8c2\"]\n",
    );
    let flat = Llamatap::start(&llama.base_url, &["--config", flat.to_str().unwrap()]);
    let chat = r#"{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2}"#;
    let (s, _) = call(
        &open.addr(),
        "POST",
        "/v1/chat/completions",
        None,
        &[],
        chat,
    );
    assert_eq!(s, 200);
    for (method, target, body, want) in admin_requests() {
        let (s, b) = call(&open.addr(), method, target, None, &[], body);
        assert_eq!(
            s,
            want,
            "{method} {target}: {}",
            String::from_utf8_lossy(&b)
        );
        let key = Some("flat-key-a4b8c2");
        let (s, b) = call(&flat.addr(), method, target, key, &[], body);
        assert_eq!(
            s,
            want,
            "{method} {target}: {}",
            String::from_utf8_lossy(&b)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
