//! Finding the line of a key an error names.

use super::*;

const FILE: &str = r#"# llamatap
threads = 2

[queue]
enabled = true
[queue.classes.batch]
max_wait_ms = 0

[[auth.keys]]
name = "a"
key = "0123456789"
weight = 3

[[auth.keys]]
name = "b"
key = "0123456789b"
weight = 0
priority = "urgent"
"#;

fn at(key: &str, message: &str) -> Option<usize> {
    line_of(FILE, key, message).map(|(n, _)| n)
}

#[test]
fn a_plain_key_its_class_and_a_tenants_field() {
    assert_eq!(at("threads", "must be between 1 and 256"), Some(2));
    assert_eq!(at("queue.enabled", "x"), Some(5));
    assert_eq!(
        at(
            "queue.classes.max_wait_ms",
            "batch: must be between 1 and 3600000"
        ),
        Some(7)
    );
    assert_eq!(
        at(
            "auth.keys",
            "tenant \"b\": weight 0 is not between 1 and 1000"
        ),
        Some(17)
    );
    assert_eq!(
        at(
            "auth.keys",
            "tenant \"b\": priority \"urgent\" is not one of interactive, default, batch"
        ),
        Some(18)
    );
    // The field the message names, else the entry's name line.
    assert_eq!(
        at(
            "auth.keys",
            "tenant \"a\": set exactly one of key and key_env"
        ),
        Some(11)
    );
    assert_eq!(
        at("auth.keys", "tenant \"a\": has the same key as b"),
        Some(11)
    );
    assert_eq!(at("auth.keys", "tenant name \"a\" is used twice"), Some(10));
    // No tenant named: the first entry's header.
    assert_eq!(
        at("auth.keys", "300 tenants is too many: at most 256"),
        Some(9)
    );
    let (_, key) = line_of(
        FILE,
        "auth.keys",
        "tenant \"b\": weight 0 is not between 1 and 1000",
    )
    .unwrap();
    assert_eq!(key, "auth.keys.weight");
    // Not in the file: none.
    assert_eq!(at("listen", "x"), None);
    assert_eq!(at("auth.keys", "tenant \"zz\": weight 0"), None);
}

/// A misspelt class is found at its header (or its first dotted key), and
/// a missing `key_env` variable at the `key_env` line, not the `name` line.
#[test]
fn a_misspelt_class_and_a_missing_key_env_variable() {
    let text = "[queue]\nenabled = true\n\n[queue.classes.interactiv]\nmax_wait_ms = 50\n";
    let message = "\"interactiv\" is not one of interactive, default, batch";
    assert_eq!(
        line_of(text, "queue.classes", message),
        Some((4, "queue.classes.interactiv".to_string()))
    );
    let dotted = "[queue]\nenabled = true\nclasses.batchh.max_depth = 3\n";
    assert_eq!(
        line_of(dotted, "queue.classes", "\"batchh\" is not one of x").map(|(n, _)| n),
        Some(3)
    );
    let text = "[[auth.keys]]\nname = \"a\"\npriority = \"batch\"\nkey_env = \"NO_SUCH\"\n";
    assert_eq!(
        line_of(
            text,
            "auth.keys",
            "tenant \"a\": environment variable NO_SUCH is not set"
        ),
        Some((4, "auth.keys.key_env".to_string()))
    );
}
