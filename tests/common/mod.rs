//! Test helpers: the real llamatap binary, a raw HTTP client, a scripted
//! upstream, the real llama-server, a fleet of them with a chat workload, and
//! an OTLP receiver.
#![allow(dead_code)]

pub mod fleet;
pub mod http;
pub mod llama;
pub mod otlp;
pub mod prometheus;
pub mod proxy;
pub mod upstream;

/// A free loopback port (bound then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Writes a temporary config file and returns its path.
pub fn temp_config(name: &str, toml: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("llamatap-test-{}-{name}.toml", std::process::id()));
    std::fs::write(&p, toml).unwrap();
    p
}
