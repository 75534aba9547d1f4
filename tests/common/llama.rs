//! A real llama.cpp `llama-server` for integration tests.
//!
//! The binary and the random-weight models come from `scripts/ensure-deps.sh`
//! (which `scripts/test.sh` runs first). Paths come from the environment:
//!
//! * `LLAMATAP_LLAMA_SERVER`: the binary (default `~/.cache/llamatap/bin/llama-server`)
//! * `LLAMATAP_TINY_MODEL`: `tiny.gguf`, fast (hundreds of tokens/s)
//! * `LLAMATAP_SLOW_MODEL`: `slow.gguf`, a 1,600-token prompt takes seconds to prefill
//! * `LLAMATAP_MEDIUM_MODEL`: `medium.gguf`, a 1,000-token prompt prefills in
//!   0.3-0.5 s and decoding runs at 200+ tokens/s: prefill is a visible part of
//!   TTFT, so a cached prefix shows
//! * `LLAMATAP_REAL_MODEL`: a real instruct model (SmolLM2-135M-Instruct Q4_1,
//!   `scripts/install-real-model.sh`), served with its own chat template; no
//!   default path: unset is a failure
//!
//! (defaults under `$LLAMATAP_CACHE`, else `~/.cache/llamatap`). A missing binary
//! or model is a test failure with a message saying what to run, never a skip.
//!
//! Only std and serde_json: the blocking calls work from plain `#[test]`s and,
//! though they block a worker thread, from `#[tokio::test]`s too.

// Test helper: panicking with a clear message is the error handling here, and
// each test binary uses only part of the API.
#![allow(dead_code, clippy::panic, clippy::expect_used, clippy::unwrap_used)]

use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::{free_port, wait_until};

/// How long `start` waits for `/health` to say ok.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// A running `llama-server`, killed when dropped.
pub struct LlamaServer {
    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub base_url: String,
    pub port: u16,
    /// The model file it serves.
    pub model: PathBuf,
    /// The model id llama-server reports (`/v1/models`, and `"model"` in every
    /// response and stream event): the `-m` argument verbatim, i.e. the full
    /// path here, e.g. `/root/.cache/llamatap/models/tiny.gguf`.
    pub model_id: String,
    log_path: PathBuf,
    child: Child,
}

impl LlamaServer {
    /// Starts the real llama-server with the given model (`"tiny"`, `"slow"`,
    /// `"medium"`, `"real"`, or a path to a `.gguf` file) and extra arguments, on a free loopback
    /// port, and waits until `/health` says ok (at most 120 s).
    ///
    /// Always passed: `-m MODEL --host 127.0.0.1 --port P --chat-template chatml
    /// --cache-ram 0 -t 1 --metrics --slots`, except `--chat-template chatml`
    /// for `"real"`, which keeps the model's own template. Later flags win, so
    /// `extra_args` can override them (e.g. `&["-np", "1"]`, `&["-t", "2"]`).
    ///
    /// Why `-t 1`: on 2 cores shared with cargo, llamatap and other tests,
    /// ggml's two spinning worker threads keep waiting for each other; one
    /// thread decodes 10x faster (tiny: ~550 vs ~60 tokens/s; slow: ~10 vs
    /// ~1 token/s) and even prefills faster (slow, 1,600 tokens: ~11 s vs
    /// ~15 s). `--poll 0` does not help.
    ///
    /// Defaults of this build: 4 slots (`-np` auto) sharing one unified
    /// 2,048-token KV cache (the models' training context).
    ///
    /// Panics with instructions when the binary or the model is missing, or
    /// with the server's log when it does not come up.
    pub fn start(model: &str, extra_args: &[&str]) -> LlamaServer {
        Self::start_with(model, extra_args, None, "127.0.0.1")
    }

    /// As [`LlamaServer::start`], on a given port (to bring a server back
    /// where a proxy expects it).
    pub fn start_on_port(model: &str, extra_args: &[&str], port: u16) -> LlamaServer {
        Self::start_with(model, extra_args, Some(port), "127.0.0.1")
    }

    /// As [`LlamaServer::start`], listening on loopback address `host`
    /// (`127.0.0.2`, ...) and `port`: several servers on one port, told
    /// apart by address, as DNS discovery sees pods.
    pub fn start_at(model: &str, extra_args: &[&str], host: &str, port: u16) -> LlamaServer {
        Self::start_with(model, extra_args, Some(port), host)
    }

    /// The server's process id (for SIGSTOP and SIGCONT).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the process now (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn start_with(
        model: &str,
        extra_args: &[&str],
        fixed_port: Option<u16>,
        host: &str,
    ) -> LlamaServer {
        let binary = llama_server_binary();
        let own_template = model == "real";
        let model = model_path(model);
        if !binary.is_file() {
            panic!(
                "llama-server binary not found at {} \
                 (set LLAMATAP_LLAMA_SERVER, or run scripts/ensure-deps.sh, which builds it)",
                binary.display()
            );
        }
        if !model.is_file() {
            panic!(
                "model not found at {} (set LLAMATAP_TINY_MODEL / LLAMATAP_SLOW_MODEL / \
                 LLAMATAP_MEDIUM_MODEL / LLAMATAP_REAL_MODEL, or run scripts/ensure-deps.sh, \
                 which generates or fetches them)",
                model.display()
            );
        }

        // free_port() can race with another process grabbing the port before
        // llama-server binds it; try again on a bind failure.
        let mut last_log = String::new();
        for _attempt in 0..5 {
            let port = fixed_port.unwrap_or_else(free_port);
            let log_path = new_log_path(port);
            let log_file = File::create(&log_path)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", log_path.display()));
            let log_err = log_file.try_clone().expect("clone log file handle");
            let port_s = port.to_string();
            let mut args: Vec<&str> = vec![
                "-m",
                model.to_str().expect("model path is UTF-8"),
                "--host",
                host,
                "--port",
                &port_s,
                "--chat-template",
                "chatml",
                "--cache-ram",
                "0",
                "-t",
                "1",
                "--metrics",
                "--slots",
            ];
            if own_template {
                args.retain(|a| !matches!(*a, "--chat-template" | "chatml"));
            }
            args.extend_from_slice(extra_args);
            let child = Command::new(&binary)
                .args(&args)
                .stdin(Stdio::null())
                .stdout(Stdio::from(log_file))
                .stderr(Stdio::from(log_err))
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
            let mut server = LlamaServer {
                base_url: format!("http://{host}:{port}"),
                port,
                model: model.clone(),
                model_id: String::new(),
                log_path,
                child,
            };
            match server.wait_healthy(START_TIMEOUT) {
                Ok(()) => {
                    server.model_id = server.fetch_model_id();
                    return server;
                }
                Err(e) => {
                    last_log = server.log();
                    let bind_failed = last_log.contains("couldn't bind")
                        || last_log.contains("Address already in use");
                    if !bind_failed {
                        panic!(
                            "llama-server ({} {}) did not become healthy: {e}\n--- log {} ---\n{}",
                            binary.display(),
                            args.join(" "),
                            server.log_path.display(),
                            tail(&last_log, 60)
                        );
                    }
                    // Dropping `server` kills it; pick another port.
                }
            }
        }
        panic!(
            "llama-server could not bind a free port in 5 tries\n{}",
            tail(&last_log, 30)
        );
    }

    fn wait_healthy(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                return Err(format!("llama-server exited early ({status})"));
            }
            if let Ok((200, body)) = self.request("GET", "/health", None, Duration::from_secs(2)) {
                if body.contains("\"ok\"") {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err(format!("/health not ok after {timeout:?}"));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    fn fetch_model_id(&self) -> String {
        let v = self.json("GET", "/v1/models", None);
        v["data"][0]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("GET /v1/models: no data[0].id: {v}"))
            .to_string()
    }

    /// One HTTP/1.1 request over a fresh connection (`Connection: close`):
    /// `(status, body)`. Plain std I/O, so it also works inside
    /// `#[tokio::test]` (where `reqwest::blocking` panics).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        json_body: Option<&str>,
        timeout: Duration,
    ) -> Result<(u16, String), String> {
        http_request(&self.addr(), method, path, json_body, timeout)
    }

    /// `request` with a 60 s timeout, expecting a 2xx JSON answer; panics otherwise.
    pub fn json(&self, method: &str, path: &str, json_body: Option<&str>) -> serde_json::Value {
        let (status, body) = self
            .request(method, path, json_body, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        if !(200..300).contains(&status) {
            panic!("{method} {path}: HTTP {status}: {body}");
        }
        serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("{method} {path}: bad JSON ({e}): {body}"))
    }

    /// The value of its own unlabelled metric `name` (`llamacpp:...`, with
    /// `--metrics`), NaN when absent.
    pub fn metric(&self, name: &str) -> f64 {
        let (_, text) = self
            .request("GET", "/metrics", None, Duration::from_secs(10))
            .unwrap();
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    }

    /// `base_url` + `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url, path)
    }

    /// `HOST:PORT` (`127.0.0.1` unless started elsewhere), for raw-socket
    /// clients.
    pub fn addr(&self) -> String {
        self.base_url.trim_start_matches("http://").to_string()
    }

    /// Where stdout and stderr go.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Full stdout+stderr so far. llama-server logs e.g.
    /// `srv stop: cancel task, id_task = N` when a client goes away.
    pub fn log(&self) -> String {
        std::fs::read(&self.log_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// How many times `needle` occurs in the log so far (to wait for the
    /// *next* occurrence: note the count, act, then wait for count + 1).
    pub fn log_count(&self, needle: &str) -> usize {
        self.log().matches(needle).count()
    }

    /// Polls the log until it contains `needle`; false on timeout.
    pub fn wait_log_contains(&self, needle: &str, timeout: Duration) -> bool {
        self.wait_log_count(needle, 1, timeout)
    }

    /// Polls the log until `needle` occurs at least `count` times.
    pub fn wait_log_count(&self, needle: &str, count: usize, timeout: Duration) -> bool {
        wait_until(timeout, || self.log_count(needle) >= count)
    }

    /// `GET /slots` as JSON (an array with `id`, `is_processing`, ...).
    pub fn slots(&self) -> serde_json::Value {
        self.try_slots(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("GET /slots: {e}"))
    }

    fn try_slots(&self, timeout: Duration) -> Result<serde_json::Value, String> {
        let (status, body) = self.request("GET", "/slots", None, timeout)?;
        if status != 200 {
            return Err(format!("HTTP {status}: {body}"));
        }
        serde_json::from_str(&body).map_err(|e| format!("bad JSON ({e}): {body}"))
    }

    /// True when no slot is processing (`/slots`: every `is_processing` false).
    pub fn slots_idle(&self) -> bool {
        all_idle(&self.slots())
    }

    /// Polls `/slots` until every slot is idle; false on timeout.
    pub fn wait_slots_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        wait_until(timeout, || {
            let left = deadline.saturating_duration_since(Instant::now());
            self.try_slots(left.max(Duration::from_millis(100)))
                .map(|v| all_idle(&v))
                .unwrap_or(false)
        })
    }

    /// Number of tokens `text` becomes (`POST /tokenize`; no BOS or other
    /// special tokens added, so a chat request's prompt is somewhat longer).
    pub fn prompt_tokens(&self, text: &str) -> usize {
        let body = serde_json::json!({ "content": text }).to_string();
        let v = self.json("POST", "/tokenize", Some(&body));
        v["tokens"]
            .as_array()
            .unwrap_or_else(|| panic!("POST /tokenize: no tokens array: {v}"))
            .len()
    }

    /// A prompt of about `tokens` tokens (within a few), made of words like
    /// `word123`, measured with `/tokenize`.
    pub fn prompt_of_tokens(&self, tokens: usize) -> String {
        self.prompt_of_tokens_from("word", tokens)
    }

    /// As [`LlamaServer::prompt_of_tokens`], with words `<stem><number>`: two
    /// different stems give texts that differ from their first token on.
    pub fn prompt_of_tokens_from(&self, stem: &str, tokens: usize) -> String {
        let mut words: Vec<String> = Vec::new();
        let mut n = 0;
        // Grow by estimate, then trim/extend word by word with exact counts.
        while n < tokens {
            let missing = tokens - n;
            for _ in 0..missing.div_ceil(5).max(1) {
                words.push(format!("{stem}{}", words.len() * 7 + 100));
            }
            n = self.prompt_tokens(&words.join(" "));
        }
        while words.len() > 1 && n > tokens {
            words.pop();
            n = self.prompt_tokens(&words.join(" "));
        }
        words.join(" ")
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            eprintln!(
                "--- llama-server log ({}), last lines ---\n{}",
                self.log_path.display(),
                tail(&self.log(), 40)
            );
        } else {
            let _ = std::fs::remove_file(&self.log_path);
        }
    }
}

/// A loopback port that was free a moment ago.
/// A chat request body with a system prompt, a user turn, fixed sampling
/// (temperature 0.7) and `seed`.
pub fn chat_with_system(
    system: &str,
    user: &str,
    stream: bool,
    max_tokens: u32,
    seed: u64,
) -> String {
    serde_json::json!({
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ],
        "stream": stream, "max_tokens": max_tokens, "temperature": 0.7, "seed": seed,
    })
    .to_string()
}

/// `$LLAMATAP_CACHE`, else `~/.cache/llamatap`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("LLAMATAP_CACHE").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache").join("llamatap")
}

/// `$LLAMATAP_LLAMA_SERVER`, else `<cache>/bin/llama-server`.
pub fn llama_server_binary() -> PathBuf {
    env_path("LLAMATAP_LLAMA_SERVER")
        .unwrap_or_else(|| cache_dir().join("bin").join("llama-server"))
}

/// `"tiny"` -> `$LLAMATAP_TINY_MODEL`, `"slow"` -> `$LLAMATAP_SLOW_MODEL`,
/// `"medium"` -> `$LLAMATAP_MEDIUM_MODEL`, else
/// `<cache>/models/<name>.gguf`; `"real"` -> `$LLAMATAP_REAL_MODEL`, which must
/// be set (a panic otherwise); a name containing `/` or ending in `.gguf` is
/// taken as a path.
pub fn model_path(name: &str) -> PathBuf {
    if name.contains('/') || name.ends_with(".gguf") {
        return PathBuf::from(name);
    }
    if name == "real" {
        return env_path("LLAMATAP_REAL_MODEL").unwrap_or_else(|| {
            panic!(
                "LLAMATAP_REAL_MODEL is not set (run scripts/install-real-model.sh, which \
                 prints the model's path, or scripts/ensure-deps.sh)"
            )
        });
    }
    let var = format!("LLAMATAP_{}_MODEL", name.to_ascii_uppercase());
    env_path(&var).unwrap_or_else(|| cache_dir().join("models").join(format!("{name}.gguf")))
}

fn env_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn new_log_path(port: u16) -> PathBuf {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join("llamatap-tests");
    let _ = std::fs::create_dir_all(&dir);
    dir.join(format!(
        "llama-server-{}-{}-{}.log",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed),
        port
    ))
}

fn http_request(
    addr: &str,
    method: &str,
    path: &str,
    json_body: Option<&str>,
    timeout: Duration,
) -> Result<(u16, String), String> {
    let sock: std::net::SocketAddr = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
    let mut stream = TcpStream::connect_timeout(&sock, timeout).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let body = json_body.unwrap_or("");
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if json_body.is_some() {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    req.push_str(body);
    stream
        .write_all(req.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(|e| e.to_string())?;

    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no HTTP head in {:?}", String::from_utf8_lossy(&raw)))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut payload = raw[split + 4..].to_vec();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line: {head}"))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if chunked {
        payload = dechunk(&payload);
    }
    Ok((status, String::from_utf8_lossy(&payload).into_owned()))
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = data.windows(2).position(|w| w == b"\r\n") {
        let size_line = String::from_utf8_lossy(&data[..eol]);
        let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16)
            .unwrap_or(0);
        data = &data[eol + 2..];
        if size == 0 || size > data.len() {
            break;
        }
        out.extend_from_slice(&data[..size]);
        data = data.get(size + 2..).unwrap_or(&[]);
    }
    out
}

fn all_idle(slots: &serde_json::Value) -> bool {
    let list = slots
        .as_array()
        .unwrap_or_else(|| panic!("GET /slots: expected an array, got {slots}"));
    list.iter()
        .all(|s| !s["is_processing"].as_bool().unwrap_or(false))
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
