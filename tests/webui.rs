//! llama.cpp's own web UI, in headless Chromium, through llamatap in front
//! of a fleet of two real llama-servers that serve the UI's files
//! (`--path`, the UI built by `scripts/install-webui.sh` from the pinned
//! sources). What a user of the UI does, checked on both sides: in the page
//! (its text, the requests it makes) and in llamatap's access log, the
//! members' slots and token counts.
//!
//! * a chat streams, and the page's token count is the one llamatap logged;
//! * a reload in the middle of an answer resumes it (the UI's
//!   `X-Conversation-Id`, `POST /v1/streams/lookup`, `GET /v1/stream`);
//! * the stop button stops the answer at llama-server (`DELETE /v1/stream`);
//! * with named keys, the page and its files load without a key, the UI
//!   shows the refusal of its API calls, and its API-key setting makes a
//!   chat stream.
//!
//! The members serve the slow model (about 10 tokens/s on one thread), with
//! `--ignore-eos` and a token budget, so an answer lasts long enough to be
//! reloaded and stopped mid-answer. The first test's screenshot is
//! `target/webui.png`; with `LLAMATAP_UPDATE_SCREENSHOT=1` it also replaces
//! docs/webui.png, the one the manual shows (docs/webui.md).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::browser::{webui_dir, Browser};
use common::fleet::{serial, start_servers, upstream_name};
use common::llama::LlamaServer;
use common::proxy::Llamatap;
use common::{temp_config, wait_until};
use serde_json::Value;

/// Members of the fleet, as the web UI's issue demands.
const MEMBERS: usize = 2;
/// The chat box.
const INPUT: &str = "Type a message...";
/// Generous bounds for a loaded 2-core machine; each is a wait on a
/// condition that ends as soon as it holds.
const PAGE: Duration = Duration::from_secs(60);
const FIRST_TOKENS: Duration = Duration::from_secs(120);
const WHOLE_ANSWER: Duration = Duration::from_secs(300);

/// A fleet of real llama-servers serving the UI, and llamatap in front of it
/// writing its access log.
struct Fleet {
    members: Vec<LlamaServer>,
    proxy: Llamatap,
    access_log: PathBuf,
}

impl Fleet {
    /// `tokens`: each answer's budget (`-n`); `extra`: llamatap's flags.
    fn start(tag: &str, tokens: u32, extra: &[&str]) -> Fleet {
        let webui = webui_dir();
        let n = tokens.to_string();
        let members = start_servers(
            MEMBERS,
            "slow",
            &["--path", webui.to_str().unwrap(), "-n", &n, "--ignore-eos"],
        );
        let access_log = std::env::temp_dir().join(format!(
            "llamatap-webui-{tag}-{}.access.log",
            std::process::id()
        ));
        let _ = std::fs::remove_file(&access_log);
        let urls: Vec<&str> = members.iter().map(|m| m.base_url.as_str()).collect();
        let mut args = vec!["--access-log", access_log.to_str().unwrap()];
        args.extend_from_slice(extra);
        let proxy = Llamatap::start_fleet(&urls, &args);
        Fleet {
            members,
            proxy,
            access_log,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/", self.proxy.addr())
    }

    /// The access log's lines so far.
    fn access(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.access_log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Waits for an access-log line that `pred` accepts.
    fn wait_access(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let mut found = None;
        wait_until(PAGE, || {
            found = self.access().into_iter().find(&pred);
            found.is_some()
        });
        found.unwrap_or_else(|| {
            panic!(
                "no access-log line {what}; the log:\n{}",
                std::fs::read_to_string(&self.access_log).unwrap_or_default()
            )
        })
    }

    /// The member llamatap sent the chat to (its access-log `upstream`).
    fn member_of(&self, chat: &Value) -> &LlamaServer {
        let name = chat["upstream"].as_str().unwrap();
        self.members
            .iter()
            .find(|m| upstream_name(m) == name)
            .unwrap_or_else(|| panic!("no member is {name}"))
    }

    /// Tokens the members generated, finished and stopped answers alike
    /// (llama-server's `llamacpp:tokens_predicted_total`).
    fn tokens_predicted(&self) -> f64 {
        self.members
            .iter()
            .map(|m| m.metric("llamacpp:tokens_predicted_total"))
            .sum()
    }

    /// Where each of the stream routes went, from the access log, for
    /// failure messages: `METHOD path -> upstream (status)`.
    fn stream_routes(&self) -> String {
        self.access()
            .iter()
            .filter(|l| {
                let p = l["path"].as_str().unwrap_or_default();
                p.starts_with("/v1/stream") || p == "/v1/chat/completions"
            })
            .map(|l| {
                format!(
                    "{} {} -> {} ({})",
                    l["method"].as_str().unwrap_or_default(),
                    l["path"].as_str().unwrap_or_default(),
                    l["upstream"].as_str().unwrap_or("none"),
                    l["status"]
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The streamed chat's access-log line (route `chat_completions`, 200).
fn is_chat(l: &Value) -> bool {
    l["route"] == "chat_completions" && l["status"] == 200
}

/// Sends `message` from the chat box.
fn send(browser: &mut Browser, message: &str) {
    browser.fill(INPUT, message, PAGE);
    browser.press("Enter");
}

/// The UI's statistics of the answer being generated: `N tokens`, its
/// duration (`0.4s`; past a minute `1min 50s`, `2min`, `1h 3s`), `t/s`
/// (those of the prompt say `tokens/s`).
const GENERATED: &str = r"\b(\d+) tokens\n[^\n]+\n[\d.]+ t/s";

/// The token count the page shows under the answer, once it is `min` or
/// more.
fn wait_tokens(browser: &mut Browser, min: u32, timeout: Duration) -> u32 {
    browser.wait_count(GENERATED, u64::from(min), timeout) as u32
}

fn screenshot(browser: &mut Browser) {
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/webui.png");
    browser.screenshot(&target);
    if std::env::var_os("LLAMATAP_UPDATE_SCREENSHOT").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/webui.png");
        std::fs::copy(&target, &docs).unwrap();
    }
}

#[test]
fn a_chat_streams_through_llamatap() {
    let _serial = serial();
    let fleet = Fleet::start("chat", 48, &[]);
    let mut browser = Browser::start();
    browser.open(&fleet.url(), PAGE);
    send(&mut browser, "Tell me about llamas");

    // Text arrives while the answer is generated: the live count grows.
    let early = wait_tokens(&mut browser, 1, FIRST_TOKENS);
    let shown = wait_tokens(&mut browser, 48, WHOLE_ANSWER);
    assert!(
        early < shown,
        "the page showed {early} tokens, then all {shown} at once"
    );
    screenshot(&mut browser);

    let chat = fleet.wait_access("for the chat", is_chat);
    assert_eq!(chat["outcome"], "ok", "{chat}");
    assert_eq!(
        chat["completion_tokens"].as_u64(),
        Some(u64::from(shown)),
        "llamatap counted another number of tokens than the page shows: {chat}"
    );
    assert!(chat["ttft_ms"].as_f64().unwrap() > 0.0, "{chat}");
    let metrics = fleet.proxy.metrics();
    let streamed = common::proxy::metric_sum(
        &metrics,
        "llamatap_requests_total{",
        &["route=\"chat_completions\"", "outcome=\"ok\""],
    );
    assert_eq!(streamed, 1.0, "llamatap_requests_total:\n{metrics}");
    // The UI's page and files came through llamatap too.
    let ui = fleet
        .access()
        .into_iter()
        .filter(|l| l["route"] == "ui" && l["status"] == 200)
        .count();
    assert!(ui >= 3, "the page and its files: {}", ui);
}

#[test]
fn a_reload_in_the_middle_of_an_answer_resumes_it() {
    let _serial = serial();
    let budget = 400;
    let fleet = Fleet::start("reload", budget, &[]);
    let mut browser = Browser::start();
    browser.open(&fleet.url(), PAGE);
    send(&mut browser, "Tell me a long story about llamas");
    let before = wait_tokens(&mut browser, 20, FIRST_TOKENS);
    let chat = browser.wait_request("POST", "/v1/chat/completions$", 0, PAGE);
    let conv = chat["conversation_id"]
        .as_str()
        .expect("the UI sends X-Conversation-Id")
        .to_string();
    let answer_before = answer_text(&mut browser);

    let mark = browser.request_count();
    browser.reload(PAGE);
    // The UI asks which of its conversations still stream, then replays.
    browser.wait_request("POST", "/v1/streams/lookup$", mark, PAGE);
    // Until the whole answer is in the page; a replay that found no answer
    // (a 404) ends the UI's attempt: then fail at once.
    let replays = format!("/v1/stream?conv_id={conv}");
    let deadline = Instant::now() + WHOLE_ANSWER;
    let resumed = loop {
        let step = browser.try_cmd(serde_json::json!({
            "op": "wait_count", "pattern": GENERATED, "min": budget, "timeout_ms": 2000,
        }));
        if step.is_ok() {
            break Ok(());
        }
        let missed = browser.requests(mark).into_iter().find(|r| {
            r["method"] == "GET"
                && r["url"].as_str().unwrap().contains(&replays)
                && !matches!(r["status"].as_u64(), None | Some(200))
        });
        if let Some(r) = missed {
            break Err(format!(
                "the replay {} was answered {}",
                r["url"], r["status"]
            ));
        }
        if Instant::now() > deadline {
            break Err(format!("{step:?}"));
        }
    };
    if let Err(e) = resumed {
        let page = browser.text();
        panic!(
            "the answer did not resume to its {budget} tokens after the reload \
             ({before} tokens before it): {e}\n\
             --- where the stream routes went ---\n{}\n--- page ---\n{page}",
            fleet.stream_routes()
        );
    }
    // The page holds the answer from before the reload, grown.
    let answer_after = answer_text(&mut browser);
    assert!(
        answer_after.starts_with(&answer_before) && answer_after.len() > answer_before.len(),
        "before the reload: {answer_before:?}\nafter: {answer_after:?}"
    );
    // One answer was generated: the replay started none.
    let holder = fleet.member_of(&fleet.wait_access("for the chat", is_chat));
    assert!(holder.wait_slots_idle(PAGE));
    assert_eq!(fleet.tokens_predicted(), f64::from(budget));
}

/// The last answer's text: the longest paragraph of the UI's last
/// assistant message (the others are the model's name and statistics).
fn answer_text(browser: &mut Browser) -> String {
    let messages = browser.texts(r#"[aria-label="Assistant message with actions"]"#);
    let last = messages.last().expect("an assistant message in the page");
    last.split("\n\n")
        .max_by_key(|p| p.len())
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[test]
fn the_stop_button_stops_the_answer_at_llama_server() {
    let _serial = serial();
    let budget = 400;
    let fleet = Fleet::start("stop", budget, &[]);
    let mut browser = Browser::start();
    browser.open(&fleet.url(), PAGE);
    send(&mut browser, "Tell me a long story about llamas");
    wait_tokens(&mut browser, 20, FIRST_TOKENS);
    assert!(
        fleet.members.iter().any(|m| !m.slots_idle()),
        "no member is generating"
    );

    let mark = browser.request_count();
    browser.click("Stop generation", PAGE);
    browser.wait_request("DELETE", "/v1/stream\\?conv_id=", mark, PAGE);
    let idle = wait_until(WHOLE_ANSWER, || {
        fleet.members.iter().all(|m| m.slots_idle())
    });
    assert!(idle, "a slot still generates after the stop");
    let generated = fleet.tokens_predicted();
    assert!(
        generated < f64::from(budget),
        "the answer ran to its end ({generated} of {budget} tokens): the stop did not reach \
         the member generating it\n--- where the stream routes went ---\n{}",
        fleet.stream_routes()
    );
}

#[test]
fn with_named_keys_the_ui_api_key_setting_works() {
    let _serial = serial();
    let config = temp_config(
        "webui-keys",
        "[[auth.keys]]\nname = \"alice\"\nkey = \"alice-webui-key\"\n",
    );
    let fleet = Fleet::start("keys", 24, &["--config", config.to_str().unwrap()]);
    let mut browser = Browser::start();
    browser.open(&fleet.url(), PAGE);
    // The page loads without a key; its API calls are refused, and the UI
    // says so and offers the key setting.
    browser.wait_text("Access denied", PAGE);
    let refused = browser.wait_request("GET", "/props", 0, PAGE);
    assert_eq!(refused["status"], 401, "{refused}");
    assert!(fleet
        .access()
        .iter()
        .any(|l| l["route"] == "ui" && l["status"] == 200 && l["tenant"] == "anonymous"));

    browser.click("Enter API Key", PAGE);
    browser.fill_selector("#api-key-input", "alice-webui-key", PAGE);
    browser.click("Save & Retry", PAGE);
    send(&mut browser, "Tell me about llamas");
    let shown = wait_tokens(&mut browser, 24, WHOLE_ANSWER);
    let chat = fleet.wait_access("for the chat", is_chat);
    assert_eq!(chat["tenant"], "alice", "{chat}");
    assert_eq!(chat["outcome"], "ok", "{chat}");
    assert_eq!(
        chat["completion_tokens"].as_u64(),
        Some(u64::from(shown)),
        "{chat}\n--- page ---\n{}",
        browser.text()
    );
}
