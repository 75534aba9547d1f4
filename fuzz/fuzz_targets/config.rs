//! Fuzzes configuration parsing: `RawConfig::from_toml` on the longest valid
//! UTF-8 prefix of the input, then `Config::from_raw` with no overrides.
//!
//! Invariants:
//! - never panics;
//! - every error (TOML or validation) is one line: no line terminator at all
//!   (LF, CR, VT, FF, NEL, LS, PS);
//! - an accepted config honours the documented ranges (threads 1..=256,
//!   sample ratio 0..=1, every size and period positive, API keys of 8+
//!   bytes, an upstream port > 0 and a non-empty upstream host without
//!   `[` or `]` left in it).
#![no_main]

use libfuzzer_sys::fuzz_target;
use llamatap::config::{Config, Overrides, RawConfig};

fn assert_one_line(what: &str, message: &str) {
    assert!(
        !message.contains(['\n', '\r', '\u{0b}', '\u{0c}', '\u{85}', '\u{2028}', '\u{2029}']),
        "{what} error is not one line: {message:?}"
    );
}

fuzz_target!(|data: &[u8]| {
    let text = match std::str::from_utf8(data) {
        Ok(t) => t,
        Err(e) => std::str::from_utf8(&data[..e.valid_up_to()]).unwrap_or_default(),
    };
    let raw = match RawConfig::from_toml(text) {
        Ok(raw) => raw,
        Err(message) => {
            assert_one_line("from_toml", &message);
            return;
        }
    };
    match Config::from_raw(raw, &Overrides::default()) {
        Err(e) => assert_one_line("from_raw", &e.to_string()),
        Ok(c) => {
            assert!((1..=256).contains(&c.threads), "threads {}", c.threads);
            let r = c.telemetry.sample_ratio;
            assert!((0.0..=1.0).contains(&r), "sample ratio {r}");
            assert!(c.telemetry.max_event_bytes > 0 && c.telemetry.max_inspect_bytes > 0);
            assert!(c.telemetry.export_queue_size > 0 && c.recent_requests > 0);
            assert!(c.max_body_bytes > 0 && c.max_header_bytes > 0);
            assert!(!c.connect_timeout.is_zero() && !c.read_timeout.is_zero());
            assert!(!c.write_timeout.is_zero() && !c.pool_idle_timeout.is_zero());
            assert!(!c.model_refresh.is_zero());
            let host = &c.upstreams[0].host;
            assert!(c.upstreams[0].port > 0, "upstream port 0");
            assert!(
                !host.is_empty() && !host.contains(['[', ']']),
                "upstream host {host:?} (address {:?}) accepted",
                c.upstreams[0].address
            );
            assert!(c.api_keys.iter().all(|k| k.expose().len() >= 8));
        }
    }
});
