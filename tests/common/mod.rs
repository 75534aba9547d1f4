//! Test helpers: the real llamatap binary, a raw HTTP client, a scripted
//! upstream, the real llama-server, a fleet of them with a chat workload, an
//! OTLP receiver and a DNS server.
#![allow(dead_code)]

pub mod browser;
pub mod dns;
pub mod fleet;
pub mod http;
pub mod jaeger;
pub mod llama;
pub mod load;
pub mod otlp;
pub mod prometheus;
pub mod proxy;
pub mod redis;
pub mod upstream;

/// A free loopback port (bound then released), never one this test binary
/// was given before: the kernel may hand a released port out again at the
/// next bind, and two listeners given the same number (a proxy and its own
/// admin listener, say) would have one answer for the other.
///
/// Taken below the kernel's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`), where neither a listener
/// bound to port 0 nor a connection's own end is put: a port released here
/// stays free until the program it is given to binds it. Each test binary
/// starts at its own place in that span (its pid), so that two running at
/// once rarely try the same ports.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    const LOW: u32 = 10_000;
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let span = ephemeral.saturating_sub(LOW);
    if span >= 1_000 {
        let start = std::process::id().wrapping_mul(7_919) % span;
        let mut given = GIVEN.lock().unwrap();
        for i in 0..span {
            let port = (LOW + (start + i) % span) as u16;
            if !given.contains(&port) && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                given.insert(port);
                return port;
            }
        }
    }
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if GIVEN.lock().unwrap().insert(port) {
            return port;
        }
    }
}

/// Writes a temporary config file and returns its path.
pub fn temp_config(name: &str, toml: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("llamatap-test-{}-{name}.toml", std::process::id()));
    std::fs::write(&p, toml).unwrap();
    p
}

/// An access log's lines so far, each parsed (lines that are not JSON are
/// left out; a missing file has none).
pub fn access_lines(path: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Polls `done` every 20 ms until it holds or `timeout` has passed; whether it
/// held. Wait on the condition a test needs, never on a fixed sleep: a loaded
/// machine is slow, a fast one is early, and a deadline costs only on failure.
pub fn wait_until(timeout: std::time::Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if done() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Milliseconds left in the current one-minute window of the tenants'
/// limits (fixed windows aligned to the wall clock).
pub fn left_in_minute() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    60_000 - now % 60_000
}

/// Waits (on the clock, a condition) until at least `ms` of the current
/// minute is left: a test whose charges and readings must share one
/// window of the tenants' limits starts here.
pub fn wait_for_minute_with(ms: u64) {
    assert!(wait_until(std::time::Duration::from_secs(61), || {
        left_in_minute() >= ms
    }));
}

/// The project venv's python (with the openai, dnslib and
/// kubernetes-validate packages): `LLAMATAP_PYTHON`, else the venv
/// scripts/ensure-deps.sh makes in the cache.
pub fn python() -> std::path::PathBuf {
    std::env::var_os("LLAMATAP_PYTHON")
        .filter(|p| !p.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| llama::cache_dir().join("venv/bin/python"))
}

/// The value after `flag` in a command line (or of `flag=value`).
pub fn flag(args: &[String], flag: &str) -> Option<String> {
    args.iter().enumerate().find_map(|(i, a)| {
        if a == flag {
            args.get(i + 1).cloned()
        } else {
            a.strip_prefix(&format!("{flag}=")).map(str::to_string)
        }
    })
}

/// The manual as one text: README.md, then every page under docs/ (sorted),
/// for tests that check the manual names something, wherever it now lives.
pub fn manual() -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages: Vec<std::path::PathBuf> = std::fs::read_dir(root.join("docs"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    pages.retain(|p| p.extension().is_some_and(|x| x == "md"));
    pages.sort();
    let mut text = std::fs::read_to_string(root.join("README.md")).unwrap_or_default();
    for p in pages {
        text.push('\n');
        text.push_str(&std::fs::read_to_string(p).unwrap_or_default());
    }
    text
}
