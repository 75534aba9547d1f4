//! The dnslib DNS server of `tests/fixtures/dns_server.py` (run by the
//! project venv's python, see [`super::python`]) on a free loopback port,
//! answering from a zone file the test rewrites. The server reads the zone
//! at every query and the file is replaced atomically, so each lookup sees
//! the zone last written: no waiting.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The server, killed (and its zone removed) when dropped.
pub struct DnsServer {
    pub addr: SocketAddr,
    zone: PathBuf,
    child: Child,
}

impl DnsServer {
    /// Starts it answering from `zone` (`{"ttl": .., "names": {name: [ip, ..]}}`);
    /// `label` names its temporary directory.
    pub fn start(label: &str, zone: &serde_json::Value) -> Self {
        let dir =
            std::env::temp_dir().join(format!("llamatap-test-{}-dns-{label}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let zone_path = dir.join("zone.json");
        write_atomically(&zone_path, zone);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dns_server.py");
        let python = super::python();
        let mut child = Command::new(&python)
            .arg(&script)
            .arg("--zone")
            .arg(&zone_path)
            .args(["--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run {} {}: {e}; run scripts/ensure-deps.sh",
                    python.display(),
                    script.display()
                )
            });
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let Some(port) = line.trim().strip_prefix("READY ") else {
            let _ = child.kill();
            panic!(
                "dns_server.py did not start (got {line:?}); is dnslib in {}? run scripts/ensure-deps.sh",
                python.display()
            );
        };
        let port: u16 = port.parse().unwrap();
        DnsServer {
            addr: ([127, 0, 0, 1], port).into(),
            zone: zone_path,
            child,
        }
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Answers from `zone` from now on.
    pub fn set_zone(&self, zone: &serde_json::Value) {
        write_atomically(&self.zone, zone);
    }

    /// The zone it answers from now (the server replaces a zone with
    /// `"then"` once it has answered it `"after"` times).
    pub fn zone_now(&self) -> serde_json::Value {
        std::fs::read(&self.zone)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = self.zone.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Writes a temporary file beside `path`, then renames it over `path`, so
/// that a query never reads half a zone.
fn write_atomically(path: &Path, zone: &serde_json::Value) {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, zone.to_string()).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}
