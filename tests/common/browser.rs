//! Headless Chromium (Debian's `chromium`) driven through Playwright, for
//! the web UI tests: `tests/fixtures/webui/driver.cjs` runs under `node` with
//! the `playwright-core` that `scripts/install-webui.sh` installed among the
//! UI's own packages, and takes one JSON command a line.
//!
//! * `LLAMATAP_WEBUI`: the built UI (`scripts/ensure-deps.sh` prints it;
//!   default: its place in the cache); the packages are in its sibling
//!   `ui/node_modules`.
//!
//! A missing UI, `node` or `chromium` is a test failure that says what to run.

#![allow(dead_code, clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

/// The built web UI to give `llama-server --path`: `LLAMATAP_WEBUI`, else
/// where `scripts/install-webui.sh` puts it in the cache (the version is
/// llama-server's, from `scripts/install-llama-server.sh`).
pub fn webui_dir() -> PathBuf {
    let dir = std::env::var_os("LLAMATAP_WEBUI")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let script =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-llama-server.sh");
            let text = std::fs::read_to_string(&script).unwrap();
            let version = text
                .lines()
                .find_map(|l| l.strip_prefix("SDIST_VERSION=\""))
                .and_then(|v| v.strip_suffix('"'))
                .expect("SDIST_VERSION in install-llama-server.sh");
            super::llama::cache_dir().join(format!("webui/{version}/public"))
        });
    if !dir.join("index.html").is_file() {
        panic!(
            "llama.cpp's web UI is not built at {} (set LLAMATAP_WEBUI, or run \
             scripts/ensure-deps.sh, which builds it with scripts/install-webui.sh)",
            dir.display()
        );
    }
    dir
}

fn found(name: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    dirs.extend(["/usr/bin", "/usr/local/bin"].map(PathBuf::from));
    dirs.into_iter()
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`{name}` not found: install {package} (scripts/ensure-deps.sh installs \
                 Debian's chromium and needs Node.js 20.19 or newer)"
            )
        })
}

/// A headless Chromium under the driver script; closed when dropped.
pub struct Browser {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Browser {
    /// Starts the driver (Chromium itself starts with the first `open`).
    pub fn start() -> Browser {
        let playwright = webui_dir()
            .parent()
            .expect("LLAMATAP_WEBUI has a parent")
            .join("ui/node_modules/playwright-core");
        if !playwright.is_dir() {
            panic!(
                "{} is missing (scripts/install-webui.sh installs it)",
                playwright.display()
            );
        }
        let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/webui/driver.cjs");
        let mut child = Command::new(found("node", "Node.js"))
            .arg(&driver)
            .arg(&playwright)
            .arg(found("chromium", "Debian's chromium package"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run node");
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Browser {
            stdin: child.stdin.take(),
            child,
            stdout,
        }
    }

    /// Runs one command; its answer, or the driver's error.
    pub fn try_cmd(&mut self, cmd: Value) -> Result<Value, String> {
        let stdin = self.stdin.as_mut().expect("driver is open");
        writeln!(stdin, "{cmd}").map_err(|e| format!("write to driver: {e}"))?;
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .map_err(|e| format!("read from driver: {e}"))?;
        let answer: Value =
            serde_json::from_str(&line).map_err(|e| format!("driver answered {line:?}: {e}"))?;
        if answer["ok"] == true {
            Ok(answer)
        } else {
            Err(format!("{cmd} failed: {}", answer["error"]))
        }
    }

    /// Runs one command; panics, with the page's text, on an error.
    pub fn cmd(&mut self, cmd: Value) -> Value {
        match self.try_cmd(cmd) {
            Ok(v) => v,
            Err(e) => {
                let page = self
                    .try_cmd(json!({"op": "text"}))
                    .map(|v| v["text"].as_str().unwrap_or_default().to_string())
                    .unwrap_or_default();
                panic!("{e}\n--- page text ---\n{page}");
            }
        }
    }

    /// A fresh browser context (no stored settings or conversations) at `url`.
    pub fn open(&mut self, url: &str, timeout: Duration) {
        self.cmd(json!({"op": "open", "url": url, "timeout_ms": ms(timeout)}));
    }

    /// Types `text` into the field whose placeholder is `placeholder`.
    pub fn fill(&mut self, placeholder: &str, text: &str, timeout: Duration) {
        self.cmd(json!({"op": "fill", "placeholder": placeholder, "text": text, "timeout_ms": ms(timeout)}));
    }

    /// Types `text` into the element `selector` (CSS).
    pub fn fill_selector(&mut self, selector: &str, text: &str, timeout: Duration) {
        self.cmd(json!({"op": "fill_selector", "selector": selector, "text": text, "timeout_ms": ms(timeout)}));
    }

    /// Clicks the button whose accessible name is `name`.
    pub fn click(&mut self, name: &str, timeout: Duration) {
        self.cmd(json!({"op": "click", "name": name, "timeout_ms": ms(timeout)}));
    }

    /// Presses a key (`Enter`).
    pub fn press(&mut self, key: &str) {
        self.cmd(json!({"op": "press", "key": key}));
    }

    /// Waits until the page's text matches the regular expression `pattern`
    /// (JavaScript syntax); the match and its groups.
    pub fn wait_text(&mut self, pattern: &str, timeout: Duration) -> Vec<String> {
        let v = self.cmd(json!({"op": "wait_text", "pattern": pattern, "timeout_ms": ms(timeout)}));
        v["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// Waits until a number that the first group of `pattern` captures in
    /// the page's text is at least `min`; the largest such number.
    pub fn wait_count(&mut self, pattern: &str, min: u64, timeout: Duration) -> u64 {
        let v = self.cmd(json!({"op": "wait_count", "pattern": pattern, "min": min,
                                "timeout_ms": ms(timeout)}));
        v["count"].as_u64().unwrap()
    }

    /// The page's visible text.
    pub fn text(&mut self) -> String {
        self.cmd(json!({"op": "text"}))["text"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// The visible text of each element `selector` (CSS) matches.
    pub fn texts(&mut self, selector: &str) -> Vec<String> {
        self.cmd(json!({"op": "texts", "selector": selector}))["texts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_string())
            .collect()
    }

    /// Reloads the page.
    pub fn reload(&mut self, timeout: Duration) {
        self.cmd(json!({"op": "reload", "timeout_ms": ms(timeout)}));
    }

    /// How many requests the page has made so far.
    pub fn request_count(&mut self) -> usize {
        self.cmd(json!({"op": "request_count"}))["count"]
            .as_u64()
            .unwrap() as usize
    }

    /// Waits for a `method` request whose URL matches `pattern`, among those
    /// made after the first `since`: `{method, url, conversation_id,
    /// authorization, status}` (`status` is `null` until its response came;
    /// the driver's `answered` option waits for one that got it).
    pub fn wait_request(
        &mut self,
        method: &str,
        pattern: &str,
        since: usize,
        timeout: Duration,
    ) -> Value {
        self.cmd(
            json!({"op": "wait_request", "method": method, "pattern": pattern,
                        "since": since, "timeout_ms": ms(timeout)}),
        )["request"]
            .clone()
    }

    /// The requests the page made after the first `since`, in order (as
    /// [`Browser::wait_request`] gives them).
    pub fn requests(&mut self, since: usize) -> Vec<Value> {
        self.cmd(json!({"op": "requests", "since": since}))["requests"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// A PNG of the page.
    pub fn screenshot(&mut self, path: &Path) {
        self.cmd(json!({"op": "screenshot", "path": path}));
    }
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Closing stdin makes the driver close Chromium and exit.
        drop(self.stdin.take());
        let closed = super::wait_until(Duration::from_secs(20), || {
            matches!(self.child.try_wait(), Ok(Some(_)))
        });
        if !closed {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
