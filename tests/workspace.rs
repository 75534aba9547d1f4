//! The workspace keeps its dependency rule: the pure crates
//! (`llamatap-wire`, `llamatap-policy`) depend on no runtime, framework or
//! telemetry SDK, by any edge (normal, build or dev), as `cargo tree` sees
//! the locked dependency graph. A manifest that gained one fails here, before
//! any import of it could be reviewed. The telemetry crate
//! (`llamatap-telemetry`) has its SDKs and a runtime for export, but no
//! proxy framework, no Redis and no DNS: it is handed finished facts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

/// Crates a pure crate must not reach: the proxy framework, the runtime and
/// everything that would let a module do I/O or emit telemetry itself.
const FORBIDDEN: &[&str] = &[
    "pingora",
    "tokio",
    "tracing",
    "opentelemetry",
    "prometheus",
    "prometheus-client",
    "hyper",
    "reqwest",
    "redis",
    "hickory-resolver",
];

/// The names of every package in `package`'s dependency tree.
fn tree(package: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .args(["tree", "--locked", "-p", package, "-e", "normal,build,dev"])
        .args(["--prefix", "none", "--format", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// What the telemetry crate must not reach: the proxy and its I/O.
const NOT_IN_TELEMETRY: &[&str] = &["pingora", "redis", "hickory-resolver"];

fn assert_pure(package: &str, expected: &[&str]) {
    assert_reaches_none(package, expected, FORBIDDEN);
}

fn assert_reaches_none(package: &str, expected: &[&str], forbidden: &[&str]) {
    let names = tree(package);
    // The tree is the real one: the crate itself and what it does use.
    for name in [package].iter().chain(expected) {
        assert!(
            names.iter().any(|n| n == name),
            "{package}'s tree lacks {name}: {names:?}"
        );
    }
    let reached: Vec<&String> = names
        .iter()
        .filter(|n| {
            forbidden
                .iter()
                .any(|f| n.as_str() == *f || n.starts_with(&format!("{f}-")))
        })
        .collect();
    assert!(
        reached.is_empty(),
        "{package} depends on {reached:?}, which its layer must not reach"
    );
}

#[test]
fn the_wire_crate_depends_on_no_runtime_or_framework() {
    assert_pure("llamatap-wire", &["serde_json", "memchr"]);
}

#[test]
fn the_policy_crate_depends_on_no_runtime_or_framework() {
    assert_pure(
        "llamatap-policy",
        &["llamatap-wire", "subtle", "xxhash-rust"],
    );
}

#[test]
fn the_telemetry_crate_depends_on_no_proxy_framework() {
    assert_reaches_none(
        "llamatap-telemetry",
        &[
            "llamatap-wire",
            "llamatap-policy",
            "opentelemetry",
            "prometheus-client",
        ],
        NOT_IN_TELEMETRY,
    );
}

#[test]
fn the_binary_crate_is_where_the_framework_is() {
    // The check can fail: the same walk over the binary crate finds Pingora.
    let names = tree("llamatap");
    assert!(names.iter().any(|n| n == "pingora-proxy"), "{names:?}");
    assert!(names.iter().any(|n| n == "tokio"), "{names:?}");
}
