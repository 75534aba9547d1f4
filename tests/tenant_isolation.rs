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

/// A router-mode llama-server (`--models-dir` with the tiny model, no
/// autoload), killed when dropped.
struct Router {
    child: std::process::Child,
    addr: String,
    dir: std::path::PathBuf,
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start_router() -> Router {
    let dir = std::env::temp_dir().join(format!("llamatap-router-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = dir.join("tiny.gguf");
    let _ = std::fs::remove_file(&model);
    std::os::unix::fs::symlink(common::llama::model_path("tiny"), &model).unwrap();
    let port = common::free_port().to_string();
    let log = std::fs::File::create(dir.join("router.log")).unwrap();
    let child = std::process::Command::new(common::llama::llama_server_binary())
        .args([
            "--models-dir",
            dir.to_str().unwrap(),
            "--no-models-autoload",
        ])
        .args(["--host", "127.0.0.1", "--port", &port, "-t", "1"])
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let router = Router {
        child,
        addr: format!("127.0.0.1:{port}"),
        dir,
    };
    let up = common::wait_until(std::time::Duration::from_secs(60), || {
        http::get(&router.addr, "/health").is_ok_and(|(s, _)| s == 200)
    });
    assert!(up, "the router never became healthy");
    router
}

/// The router's state of the tiny model, read through `addr`.
fn model_state(addr: &str, key: &str) -> String {
    let (s, b) = call(addr, "GET", "/models", Some(key), &[], "");
    assert_eq!(s, 200);
    let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
    v["data"][0]["status"]["value"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[test]
fn only_an_admin_key_loads_and_unloads_a_routers_models() {
    let router = start_router();
    let config = temp_config("admin-router", &named_keys());
    let upstream = format!("http://{}", router.addr);
    let proxy = Llamatap::start(&upstream, &["--config", config.to_str().unwrap()]);
    let addr = proxy.addr();
    let tiny = r#"{"model":"tiny"}"#;
    for (method, target, body) in [
        ("POST", "/models/load", tiny),
        ("POST", "/models/unload", tiny),
        ("GET", "/models?reload=1", ""),
        ("DELETE", "/models?model=tiny", ""),
    ] {
        let (s, b) = call(&addr, method, target, Some(ALICE), &[], body);
        assert_eq!(s, 403, "{method} {target}: {}", String::from_utf8_lossy(&b));
        assert_eq!(error_code(&b).as_deref(), Some("admin_route"));
    }
    assert_eq!(model_state(&addr, ALICE), "unloaded");
    let (s, b) = call(&addr, "POST", "/models/load", Some(OPS), &[], tiny);
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
    let loaded = common::wait_until(std::time::Duration::from_secs(60), || {
        model_state(&addr, BOB) == "loaded"
    });
    assert!(loaded, "{}", model_state(&addr, BOB));
    let (s, _) = call(&addr, "POST", "/models/unload", Some(BOB), &[], tiny);
    assert_eq!(s, 403);
    assert_eq!(model_state(&addr, BOB), "loaded");
    let (s, b) = call(&addr, "POST", "/models/unload", Some(OPS), &[], tiny);
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
    let unloaded = common::wait_until(std::time::Duration::from_secs(60), || {
        model_state(&addr, BOB) == "unloaded"
    });
    assert!(unloaded, "{}", model_state(&addr, BOB));
}

// === resumable streams ===

const CONV: &str = "conv-a1";

fn stream_chat() -> String {
    serde_json::json!({
        "messages": [{"role": "user", "content": "Count from one to forty in words."}],
        "stream": true, "max_tokens": 48, "temperature": 0.0, "seed": 7,
    })
    .to_string()
}

/// Starts a streamed chat under `conv` and hangs up after two whole
/// events: those two events' bytes.
fn start_and_hang_up(addr: &str, key: Option<&str>, conv: &str) -> Vec<u8> {
    let auth = key.map(|k| format!("Bearer {k}"));
    let mut h: Vec<(&str, &str)> = vec![("X-Conversation-Id", conv)];
    if let Some(a) = &auth {
        h.push(("Authorization", a));
    }
    let body = stream_chat();
    let mut r = http::send(addr, "POST", "/v1/chat/completions", &h, body.as_bytes()).unwrap();
    assert_eq!(r.head.status, 200);
    let mut got = Vec::new();
    let ends = |b: &[u8]| -> Vec<usize> {
        (0..b.len().saturating_sub(1))
            .filter(|&i| &b[i..i + 2] == b"\n\n")
            .collect()
    };
    while ends(&got).len() < 2 {
        got.extend_from_slice(&r.next_piece().unwrap().expect("the stream ended early"));
    }
    drop(r);
    got.truncate(ends(&got)[1] + 2);
    got
}

/// The lookup's answer: status and the entries.
fn lookup(addr: &str, key: Option<&str>, ids: &[&str]) -> (u16, Vec<serde_json::Value>) {
    let body = serde_json::json!({ "conversation_ids": ids }).to_string();
    let (s, b) = call(addr, "POST", "/v1/streams/lookup", key, &[], &body);
    let v: serde_json::Value = serde_json::from_slice(&b)
        .unwrap_or_else(|_| panic!("{s}: {}", String::from_utf8_lossy(&b)));
    match v {
        serde_json::Value::Array(a) => (s, a),
        other => (s, vec![other]),
    }
}

/// Waits until the conversation's buffered answer is complete.
fn wait_done(addr: &str, key: Option<&str>, conv: &str) {
    let done = common::wait_until(std::time::Duration::from_secs(120), || {
        let (_, entries) = lookup(addr, key, &[conv]);
        entries.iter().any(|e| e["is_done"] == true)
    });
    assert!(done, "the buffered answer never completed");
}

fn replay(addr: &str, key: Option<&str>, conv: &str) -> (u16, Vec<u8>) {
    call(
        addr,
        "GET",
        &format!("/v1/stream?conv_id={conv}&from=0"),
        key,
        &[],
        "",
    )
}

#[test]
fn a_tenant_reaches_only_its_own_resumable_streams() {
    let llama = LlamaServer::start("tiny", &["-np", "2"]);
    let config = temp_config("conversations", &named_keys());
    let proxy = Llamatap::start(&llama.base_url, &["--config", config.to_str().unwrap()]);
    let addr = proxy.addr();
    let seen = start_and_hang_up(&addr, Some(ALICE), CONV);
    wait_done(&addr, Some(ALICE), CONV);

    // Bob, by Alice's id, and by Alice's scoped id spelled out: nothing.
    let forged = format!(
        "{}{CONV}",
        llamatap_wire::conversation::Scope::of_tenant("alice").prefix()
    );
    for id in [CONV, forged.as_str()] {
        let (s, b) = replay(&addr, Some(BOB), id);
        assert_eq!(s, 404, "{id}: {}", String::from_utf8_lossy(&b));
        assert_eq!(lookup(&addr, Some(BOB), &[id]), (200, vec![]), "{id}");
        let target = format!("/v1/stream?conv_id={id}");
        let (s, _) = call(&addr, "DELETE", &target, Some(BOB), &[], "");
        assert_eq!(s, 204);
    }
    // llama-server itself holds the id only in Alice's scope.
    let direct = serde_json::json!({ "conversation_ids": [CONV] }).to_string();
    let v = llama.json("POST", "/v1/streams/lookup", Some(&direct));
    assert_eq!(v, serde_json::json!([]), "the id went upstream unscoped");

    // Alice's answer is untouched: her lookup lists it as she named it,
    // and her replay is the whole answer, starting with what she saw.
    let (s, entries) = lookup(&addr, Some(ALICE), &[CONV]);
    assert_eq!(s, 200);
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["conversation_id"], CONV);
    assert_eq!(entries[0]["is_done"], true);
    let (s, all) = replay(&addr, Some(ALICE), CONV);
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&all));
    let first = http::sse_data(&seen);
    let replayed = http::sse_data(&all);
    assert_eq!(first.len(), 2, "{first:?}");
    assert!(replayed.len() > 2, "{replayed:?}");
    assert_eq!(replayed[..2], first[..]);
    assert_eq!(replayed.last().map(String::as_str), Some("[DONE]"));

    // Her own stop works.
    let (s, _) = call(
        &addr,
        "DELETE",
        &format!("/v1/stream?conv_id={CONV}"),
        Some(ALICE),
        &[],
        "",
    );
    assert_eq!(s, 204);
    assert_eq!(replay(&addr, Some(ALICE), CONV).0, 404);
    assert_eq!(lookup(&addr, Some(ALICE), &[CONV]), (200, vec![]));
}

#[test]
fn the_web_uis_id_with_a_model_keeps_working_in_a_tenants_scope() {
    let llama = LlamaServer::start("tiny", &["-np", "2"]);
    let config = temp_config("conversations-model", &named_keys());
    let proxy = Llamatap::start(&llama.base_url, &["--config", config.to_str().unwrap()]);
    let addr = proxy.addr();
    let conv = "c-77::org/tiny-model";
    start_and_hang_up(&addr, Some(ALICE), conv);
    // The web UI looks its conversations up by the id before `::`.
    let done = common::wait_until(std::time::Duration::from_secs(120), || {
        let (_, e) = lookup(&addr, Some(ALICE), &["c-77"]);
        e.len() == 1 && e[0]["conversation_id"] == conv && e[0]["is_done"] == true
    });
    assert!(done, "{:?}", lookup(&addr, Some(ALICE), &["c-77"]));
    assert_eq!(lookup(&addr, Some(BOB), &["c-77"]), (200, vec![]));
    let encoded = "c-77%3A%3Aorg%2Ftiny-model";
    let (s, all) = replay(&addr, Some(ALICE), encoded);
    assert_eq!(s, 200);
    assert!(http::sse_data(&all).last().is_some_and(|d| d == "[DONE]"));
    assert_eq!(replay(&addr, Some(BOB), encoded).0, 404);
}

#[test]
fn a_lookup_body_that_is_too_large_or_malformed_is_refused() {
    let llama = LlamaServer::start("tiny", &["-np", "1"]);
    let config = temp_config("conversations-bad", &named_keys());
    let proxy = Llamatap::start(&llama.base_url, &["--config", config.to_str().unwrap()]);
    let addr = proxy.addr();
    let big = format!(r#"{{"conversation_ids":["{}"]}}"#, "x".repeat(70 * 1024));
    for body in [
        big.as_str(),
        "not json",
        r#"{"conversation_ids":"c1"}"#,
        r#"{"conversation_ids":[1]}"#,
        "[]",
    ] {
        let (s, b) = call(&addr, "POST", "/v1/streams/lookup", Some(ALICE), &[], body);
        assert_eq!(s, 400, "{}", String::from_utf8_lossy(&b));
        assert_eq!(error_code(&b).as_deref(), Some("invalid_stream_lookup"));
    }
    assert_eq!(lookup(&addr, Some(ALICE), &[]), (200, vec![]));
}

#[test]
fn without_named_keys_conversation_ids_go_upstream_as_they_are() {
    let llama = LlamaServer::start("tiny", &["-np", "2"]);
    let flat = temp_config(
        "conversations-flat",
        "[auth]\napi_keys = [\"flat-key-a4b8c2\"]\n",
    );
    let flat = Llamatap::start(&llama.base_url, &["--config", flat.to_str().unwrap()]);
    let open = Llamatap::start(&llama.base_url, &[]);
    let key = Some("flat-key-a4b8c2");
    start_and_hang_up(&flat.addr(), key, "shared-1");
    wait_done(&open.addr(), None, "shared-1");
    // The same id, unscoped, through either proxy and at llama-server.
    let direct = serde_json::json!({ "conversation_ids": ["shared-1"] }).to_string();
    let v = llama.json("POST", "/v1/streams/lookup", Some(&direct));
    assert_eq!(v[0]["conversation_id"], "shared-1");
    let (s, e) = lookup(&flat.addr(), key, &["shared-1"]);
    assert_eq!((s, e.len()), (200, 1));
    assert_eq!(replay(&open.addr(), None, "shared-1").0, 200);
    assert_eq!(replay(&flat.addr(), key, "shared-1").0, 200);
}
