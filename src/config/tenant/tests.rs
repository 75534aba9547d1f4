use super::*;
use crate::config::{Config, Overrides, RawConfig};

fn load(toml: &str) -> Result<Config, String> {
    let raw = RawConfig::from_toml(toml)?;
    Config::from_raw(raw, &Overrides::default()).map_err(|e| e.to_string())
}

fn env(var: &str) -> Option<String> {
    (var == "ALICE_KEY").then(|| "alice-from-env".to_string())
}

fn key(name: &str, key: &str) -> RawKey {
    RawKey {
        name: name.into(),
        key: Some(key.into()),
        ..RawKey::default()
    }
}

#[test]
fn named_keys_with_defaults_and_limits() {
    let c = load(
        r#"
[auth]
api_keys = ["flat-key-0001"]
[[auth.keys]]
name = "alice"
key = "alice-key-0001"
priority = "interactive"
weight = 10
requests_per_minute = 3
tokens_per_minute = 1000
max_concurrent = 2
[[auth.keys]]
name = "batch-jobs"
key = "batch-key-0001"
admin = true
"#,
    )
    .unwrap();
    let list = c.tenants.list();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0].name, "alice");
    assert_eq!(list[0].priority, Priority::Interactive);
    assert_eq!(list[0].weight, 10);
    assert_eq!(list[0].limits.requests_per_minute, Some(3));
    assert_eq!(list[0].limits.tokens_per_minute, Some(1000));
    assert_eq!(list[0].limits.max_concurrent, Some(2));
    assert_eq!(list[1].priority, Priority::Default);
    assert_eq!(list[1].weight, 1);
    assert_eq!(list[1].limits, Limits::default());
    assert!(!list[0].admin, "a key is not administrative unless marked");
    assert!(list[1].admin);
    assert!(c.store.is_none());
    assert_eq!(c.api_keys.len(), 1);
}

#[test]
fn a_key_can_come_from_the_environment() {
    let raw = RawKey {
        name: "alice".into(),
        key_env: Some("ALICE_KEY".into()),
        ..RawKey::default()
    };
    let t = tenants(vec![], Some(vec![raw]), &env).unwrap();
    assert_eq!(t.list()[0].key.expose(), "alice-from-env");
}

#[test]
fn each_mistake_is_one_line_naming_the_tenant_never_the_key() {
    let cases: Vec<(Vec<Secret>, Vec<RawKey>, &str)> = vec![
        (
            vec![],
            vec![key("alice", "same-key-0001"), key("alice", "other-key-001")],
            "tenant name \"alice\" is used twice",
        ),
        (
            vec![],
            vec![key("alice", "same-key-0001"), key("bob", "same-key-0001")],
            "tenants \"alice\" and \"bob\" have the same key",
        ),
        (
            vec![Secret::new("same-key-0001".into())],
            vec![key("bob", "same-key-0001")],
            "tenant \"bob\" has the same key as an entry of auth.api_keys",
        ),
        (
            vec![],
            vec![RawKey {
                name: "carol".into(),
                key_env: Some("CAROL_KEY".into()),
                ..RawKey::default()
            }],
            "tenant \"carol\": environment variable CAROL_KEY is not set",
        ),
        (
            vec![],
            vec![RawKey {
                name: "dave".into(),
                ..RawKey::default()
            }],
            "tenant \"dave\": set exactly one of key and key_env",
        ),
        (
            vec![],
            vec![key("anonymous", "some-key-0001")],
            "tenant name \"anonymous\"",
        ),
        (
            vec![],
            vec![key("a b", "some-key-0001")],
            "tenant name \"a b\"",
        ),
        (vec![], vec![key("short", "short")], "at least 8 printable"),
        (
            vec![],
            vec![RawKey {
                weight: Some(0),
                ..key("w", "some-key-0001")
            }],
            "weight 0 is not between 1 and 1000",
        ),
        (
            vec![],
            vec![RawKey {
                weight: Some(1001),
                ..key("w", "some-key-0001")
            }],
            "weight 1001",
        ),
        (
            vec![],
            vec![RawKey {
                priority: Some("urgent".into()),
                ..key("p", "some-key-0001")
            }],
            "priority \"urgent\" is not one of interactive, default, batch",
        ),
        (
            vec![],
            vec![RawKey {
                requests_per_minute: Some(0),
                ..key("r", "some-key-0001")
            }],
            "requests_per_minute must be at least 1",
        ),
        (
            vec![
                Secret::new("flat-key-0001".into()),
                Secret::new("flat-key-0001".into()),
            ],
            vec![],
            "the same key is listed twice",
        ),
    ];
    for (flat, keys, want) in cases {
        let e = tenants(flat, Some(keys), &env).unwrap_err().to_string();
        assert!(e.contains(want), "{e:?} lacks {want:?}");
        assert!(!e.contains('\n'));
        assert!(!e.contains("key-0001") && !e.contains("other-key"), "{e}");
    }
}

#[test]
fn the_store_is_optional_and_validated() {
    assert_eq!(store(None).unwrap(), None);
    assert_eq!(store(Some(RawStore::default())).unwrap(), None);
    let s = store(Some(RawStore {
        url: Some("redis://127.0.0.1:6380".into()),
        ..RawStore::default()
    }))
    .unwrap()
    .unwrap();
    assert_eq!(s.address, "127.0.0.1:6380");
    assert_eq!(s.url.expose(), "redis://127.0.0.1:6380");
    assert_eq!(s.timeout, Duration::from_millis(50));
    assert_eq!(s.on_error, OnError::Allow);
    let s = store(Some(RawStore {
        url: Some("redis://cache".into()),
        timeout_ms: Some(20),
        on_error: Some("deny".into()),
        ..RawStore::default()
    }))
    .unwrap()
    .unwrap();
    assert_eq!(s.address, "cache:6379");
    assert_eq!(s.on_error, OnError::Deny);
    // A user, a password and a database; TLS; the log address never holds them.
    for (url, address) in [
        ("redis://team:s3cret@cache:6380/2", "cache:6380"),
        ("redis://:s3cret@10.0.0.5", "10.0.0.5:6379"),
        (
            "rediss://team:s3cret@cache.internal:6380",
            "cache.internal:6380",
        ),
        ("redis://[::1]:6390", "[::1]:6390"),
    ] {
        let s = store(Some(RawStore {
            url: Some(url.into()),
            ..RawStore::default()
        }))
        .unwrap()
        .unwrap();
        assert_eq!(s.address, address);
        assert_eq!(s.url.expose(), url);
        assert!(!format!("{s:?}").contains("s3cret"), "{s:?}");
    }
    for bad in [
        "http://x:1",
        "redis://",
        "redis://x:1/zero",
        "redis://x:99999",
        "rediss://x:1/#insecure",
        "unix:///tmp/redis.sock",
        "redis+unix:///tmp/redis.sock",
        "redis://team:s3cret@x:1/zero",
        "redis://team:s3/cret@x:1",
    ] {
        let e = store(Some(RawStore {
            url: Some(bad.into()),
            ..RawStore::default()
        }))
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("invalid value for auth.store.url"), "{e}");
        assert!(!e.contains("s3cret") && !e.contains("cret@"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }
    let e = store(Some(RawStore {
        on_error: Some("maybe".into()),
        ..RawStore::default()
    }))
    .unwrap_err()
    .to_string();
    assert!(e.contains("not one of allow, deny"), "{e}");
}

#[test]
fn the_store_password_may_come_from_the_environment() {
    let env = |v: &str| (v == "STORE_PW").then(|| "s3cret".to_string());
    let raw = |url: &str, var: &str| {
        Some(RawStore {
            url: Some(url.into()),
            password_env: Some(var.into()),
            ..RawStore::default()
        })
    };
    let s = store_with(raw("redis://cache:6379", "STORE_PW"), &env)
        .unwrap()
        .unwrap();
    assert_eq!(s.password.as_ref().map(Secret::expose), Some("s3cret"));
    assert_eq!(s.url.expose(), "redis://cache:6379");
    assert!(!format!("{s:?}").contains("s3cret"), "{s:?}");
    // Unset, or a password in the URL too: one clear line, no secret.
    for (url, var, want) in [
        (
            "redis://cache",
            "NOT_SET",
            "\"NOT_SET\" is not set or empty",
        ),
        ("redis://:other@cache", "STORE_PW", "give it in one place"),
    ] {
        let e = store_with(raw(url, var), &env).unwrap_err().to_string();
        assert!(
            e.starts_with("invalid value for auth.store.password_env"),
            "{e}"
        );
        assert!(e.contains(want), "{e}");
        assert!(!e.contains("s3cret") && !e.contains("other"), "{e}");
    }
    // Without password_env, none.
    let s = store_with(
        Some(RawStore {
            url: Some("redis://cache".into()),
            ..RawStore::default()
        }),
        &env,
    )
    .unwrap()
    .unwrap();
    assert_eq!(s.password, None);
}
