use super::*;

fn load(toml: &str) -> Result<Config, ConfigError> {
    let raw = RawConfig::from_toml(toml).map_err(|message| ConfigError::Parse {
        path: "test.toml".into(),
        message,
    })?;
    Config::from_raw(raw, &Overrides::default())
}

#[test]
fn defaults_are_documented_values() {
    let c = load("").unwrap();
    assert_eq!(c.listen.to_string(), DEFAULT_LISTEN);
    assert_eq!(c.admin_listen.to_string(), DEFAULT_ADMIN_LISTEN);
    assert!(c.admin_listen.ip().is_loopback());
    assert_eq!(c.upstreams[0].address, "127.0.0.1:8081");
    assert_eq!(c.grace_period, Duration::from_secs(10));
    assert_eq!(c.read_timeout, Duration::from_secs(600));
    assert!(
        c.pool_idle_timeout < Duration::from_secs(5),
        "below llama-server's keep-alive"
    );
    assert!(c.telemetry.otlp_endpoint.is_none());
    assert!(!c.telemetry.capture_content);
}

#[test]
fn flags_beat_file() {
    let raw = RawConfig::from_toml("listen = \"127.0.0.1:1\"\nupstream = \"http://a:1\"").unwrap();
    let o = Overrides {
        listen: Some("127.0.0.1:2".into()),
        ..Overrides::default()
    };
    let c = Config::from_raw(raw, &o).unwrap();
    assert_eq!(c.listen.port(), 2);
    assert_eq!(c.upstreams[0].host, "a");
}

#[test]
fn unknown_keys_and_bad_values_are_one_line_errors() {
    for bad in [
        "lisen = \"x\"",
        "listen = \"nope\"",
        "upstream = \"https://x:1\"",
        "upstream = \"http://x:0\"",
        "threads = 0",
        "[telemetry]\nsample_ratio = 2.0",
        "[telemetry]\notlp_protocol = \"udp\"",
        "[telemetry]\notlp_endpoint = \"localhost:4317\"",
        "[upstream_timeouts]\nread_seconds = 0",
        "listen = [",
    ] {
        let e = load(bad).unwrap_err().to_string();
        assert!(!e.contains('\n'), "{bad:?} gave a multi-line error: {e}");
    }
}

#[test]
fn upstream_urls() {
    let u = parse_upstream("http://127.0.0.1:8081").unwrap();
    assert_eq!(
        (u.address.as_str(), u.port, u.base_path.as_str()),
        ("127.0.0.1:8081", 8081, "")
    );
    let u = parse_upstream("http://llama:9000/base/").unwrap();
    assert_eq!((u.host.as_str(), u.base_path.as_str()), ("llama", "/base"));
    let u = parse_upstream("http://[::1]:8081").unwrap();
    assert_eq!(u.host, "::1");
    let u = parse_upstream("http://llama").unwrap();
    assert_eq!(u.port, 80);
    assert!(parse_upstream("http://").is_err());
    assert!(parse_upstream("http://u@h:1").is_err());
    for bad in [
        "http://[]",
        "http://[",
        "http://a]:1",
        "http://[::1",
        "http://h:1:2",
        "http://h:x",
    ] {
        assert!(parse_upstream(bad).is_err(), "{bad}");
    }
}

#[test]
fn shipped_config_files_load() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("conf");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "toml") {
            Config::load(Some(&p), &Overrides::default())
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            n += 1;
        }
    }
    assert!(n >= 1, "no config files under conf/");
}

#[test]
fn one_upstream_by_default_named_by_address() {
    let c = load("").unwrap();
    assert_eq!(c.upstreams.len(), 1);
    assert_eq!(c.upstreams[0].name, "127.0.0.1:8081");
    assert_eq!(c.upstreams[0].weight, 1);
    assert_eq!(
        c.routing.policy,
        llamatap_policy::router::Policy::PrefixAffinity
    );
    assert_eq!(c.routing.session_header, None);
    assert_eq!(c.routing.ttft_steer_percent, None);
}

#[test]
fn ttft_steering_is_a_percentage_over_110_or_off() {
    let steer = |v: &str| load(&format!("[routing]\nttft_steer_percent = {v}"));
    assert_eq!(steer("0").unwrap().routing.ttft_steer_percent, None);
    assert_eq!(steer("150").unwrap().routing.ttft_steer_percent, Some(150));
    assert_eq!(steer("110").unwrap().routing.ttft_steer_percent, Some(110));
    assert_eq!(
        steer("10000").unwrap().routing.ttft_steer_percent,
        Some(10_000)
    );
    for bad in ["1", "100", "109", "10001"] {
        let e = steer(bad).unwrap_err().to_string();
        assert!(e.contains("routing.ttft_steer_percent"), "{bad}: {e}");
        assert!(!e.contains('\n'), "{bad}: {e}");
    }
    assert!(steer("-1").is_err());
}

#[test]
fn upstream_list_with_names_weights_and_routing() {
    let c = load(
        "[[upstreams]]\nurl = \"http://10.0.0.1:8081\"\nname = \"gpu-a\"\nweight = 3\n\
         [[upstreams]]\nurl = \"http://10.0.0.2:8081/base\"\n\
         [routing]\npolicy = \"least_busy\"\nsession_header = \"X-Session-Id\"\n",
    )
    .unwrap();
    let names: Vec<_> = c.upstreams.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(names, ["gpu-a", "10.0.0.2:8081"]);
    assert_eq!((c.upstreams[0].weight, c.upstreams[1].weight), (3, 1));
    assert_eq!(c.upstreams[1].base_path, "/base");
    assert_eq!(c.routing.policy, llamatap_policy::router::Policy::LeastBusy);
    assert_eq!(c.routing.session_header.as_deref(), Some("x-session-id"));
}

#[test]
fn repeated_upstream_flags_replace_the_file() {
    let raw = RawConfig::from_toml("upstream = \"http://a:1\"").unwrap();
    let o = Overrides {
        upstreams: vec!["http://b:2".into(), "http://c:3".into()],
        routing_policy: Some("round_robin".into()),
        ..Overrides::default()
    };
    let c = Config::from_raw(raw, &o).unwrap();
    let names: Vec<_> = c.upstreams.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(names, ["b:2", "c:3"]);
    assert_eq!(
        c.routing.policy,
        llamatap_policy::router::Policy::RoundRobin
    );
}

#[test]
fn fleet_errors_are_one_line() {
    let many: String = (0..=MAX_UPSTREAMS)
        .map(|i| format!("[[upstreams]]\nurl = \"http://h{i}:1\"\n"))
        .collect();
    for (bad, key) in [
        (
            "upstream = \"http://a:1\"\n[[upstreams]]\nurl = \"http://b:1\"".to_string(),
            "upstreams",
        ),
        (
            "[[upstreams]]\nurl = \"http://a:1\"\n[[upstreams]]\nurl = \"http://a:1\"".into(),
            "upstreams",
        ),
        (
            "[[upstreams]]\nurl = \"http://a:1\"\nname = \"x y\"".into(),
            "upstreams.name",
        ),
        (
            "[[upstreams]]\nurl = \"http://a:1\"\nweight = 0".into(),
            "upstreams.weight",
        ),
        ("[routing]\npolicy = \"random\"".into(), "routing.policy"),
        (
            "[routing]\nsession_header = \"x session\"".into(),
            "routing.session_header",
        ),
        (many, "upstreams"),
    ] {
        let e = load(&bad).unwrap_err().to_string();
        assert!(!e.contains('\n'), "{bad:?} gave a multi-line error: {e}");
        assert!(e.contains(key), "{bad:?}: {e} does not name {key}");
    }
    assert!(load("upstreams = []").is_err());
}

#[test]
fn ring_and_queue_sizes_have_upper_bounds() {
    let c =
        load("[admin]\nrecent_requests = 10000\n[telemetry]\nexport_queue_size = 16384").unwrap();
    assert_eq!(
        (c.recent_requests, c.telemetry.export_queue_size),
        (10_000, 16_384)
    );
    for (bad, key) in [
        ("[admin]\nrecent_requests = 10001", "admin.recent_requests"),
        (
            "[admin]\nrecent_requests = 1000000000000",
            "admin.recent_requests",
        ),
        (
            "[telemetry]\nexport_queue_size = 16385",
            "telemetry.export_queue_size",
        ),
        (
            "[telemetry]\nexport_queue_size = 1000000000000",
            "telemetry.export_queue_size",
        ),
    ] {
        let e = load(bad).unwrap_err().to_string();
        assert!(e.contains(key), "{bad:?}: {e}");
        assert!(e.contains("at most"), "{bad:?} does not say the bound: {e}");
        assert!(!e.contains('\n'), "{bad:?} gave a multi-line error: {e}");
    }
}

#[test]
fn type_errors_name_line_and_key_in_plain_words() {
    for (toml, wanted) in [
        (
            "threads = \"two\"",
            "line 1: threads: expected a non-negative whole number, got \"two\"",
        ),
        (
            "\n[telemetry]\n# a comment = [x]\nsample_ratio = true",
            "line 4: telemetry.sample_ratio: expected a number, got true",
        ),
        (
            "[[upstreams]]\nurl = \"http://a:1\"\n[[upstreams]]\nurl = 5",
            "line 4: upstreams.url: expected a string in quotes, got 5",
        ),
        ("[auth]\napi_keys = \"k\"", "auth.api_keys: expected a list"),
    ] {
        let e = RawConfig::from_toml(toml).unwrap_err();
        assert!(e.contains(wanted), "{toml:?}: {e}");
        assert!(!e.contains('\n'), "{toml:?}: {e}");
    }
}

#[test]
fn an_echoed_key_is_one_bounded_line_whatever_the_file_holds() {
    let long = "k".repeat(500);
    for toml in [
        "#\u{c}\u{c}\u{c}`= 1".to_string(),
        format!("{long} = 1"),
        "a\u{1}b = \"x\"".to_string(),
    ] {
        let e = RawConfig::from_toml(&toml).unwrap_err();
        assert!(!e.chars().any(char::is_control), "{toml:?}: {e:?}");
        assert!(e.chars().count() < 340, "{toml:?}: {e:?}");
    }
}

#[test]
fn upstream_ending_in_v1_and_https_are_refused_with_the_fix() {
    let e = parse_upstream("http://h:8081/v1/").unwrap_err().to_string();
    assert!(
        e.contains("give llama-server's base URL (http://h:8081)"),
        "{e}"
    );
    let e = parse_upstream("https://h:8081").unwrap_err().to_string();
    assert!(e.contains("no TLS"), "{e}");
    assert!(parse_upstream("http://h:8081/v1x").is_ok());
    let e = load("[telemetry]\notlp_endpoint = \"https://c:4318\"")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("local OpenTelemetry Collector over http://"),
        "{e}"
    );
}

#[test]
fn a_discovered_name_is_a_template() {
    let c = load(
        "[[upstreams]]\nurl = \"http://llama-server:8080\"\ndiscover = \"dns\"\nweight = 2\n\
         [discovery]\nresolver = \"10.96.0.10\"\nmin_refresh_ms = 500\nmax_refresh_ms = 5000\n",
    )
    .unwrap();
    assert!(c.upstreams[0].discover);
    assert_eq!(c.upstreams[0].weight, 2);
    assert_eq!(
        c.discovery.resolver,
        Some("10.96.0.10:53".parse().unwrap()),
        "a bare address means port 53"
    );
    assert_eq!(c.discovery.min_refresh, Duration::from_millis(500));
    // TTLs within the bounds; none known: the lower bound.
    let d = &c.discovery;
    assert_eq!(d.next_refresh(None), Duration::from_millis(500));
    assert_eq!(
        d.next_refresh(Some(Duration::ZERO)),
        Duration::from_millis(500)
    );
    assert_eq!(
        d.next_refresh(Some(Duration::from_secs(2))),
        Duration::from_secs(2)
    );
    assert_eq!(
        d.next_refresh(Some(Duration::from_secs(3600))),
        Duration::from_secs(5)
    );
    let d = load("").unwrap().discovery;
    assert_eq!(
        (d.resolver, d.min_refresh, d.max_refresh),
        (None, Duration::from_secs(1), Duration::from_secs(30))
    );
}

#[test]
fn a_discovered_flag_uses_the_dns_prefix() {
    let o = Overrides {
        upstreams: vec!["dns+http://llama-server:8080".into(), "http://b:1".into()],
        ..Overrides::default()
    };
    let c = Config::from_raw(RawConfig::default(), &o).unwrap();
    assert!(c.upstreams[0].discover);
    assert_eq!(c.upstreams[0].address, "llama-server:8080");
    assert!(!c.upstreams[1].discover);
}

#[test]
fn discovery_mistakes_are_named() {
    for (toml, needle) in [
        (
            "[[upstreams]]\nurl = \"http://10.0.0.1:8080\"\ndiscover = \"dns\"\n",
            "is an address, not a name to discover",
        ),
        (
            "[[upstreams]]\nurl = \"http://a:8080\"\ndiscover = \"dns\"\nname = \"a\"\n",
            "named by their addresses",
        ),
        (
            "[[upstreams]]\nurl = \"http://a:8080\"\ndiscover = \"srv\"\n",
            "is not one of dns, none",
        ),
        ("[discovery]\nresolver = \"dns.local\"\n", "is not ip:port"),
        (
            "[discovery]\nmin_refresh_ms = 10\n",
            "between 100 and 3600000",
        ),
        (
            "[discovery]\nmin_refresh_ms = 5000\nmax_refresh_ms = 1000\n",
            "must not be below discovery.min_refresh_ms",
        ),
    ] {
        let e = load(toml).unwrap_err().to_string();
        assert!(e.contains(needle), "{toml}: {e}");
    }
}

#[test]
fn the_admin_listener_needs_a_port_of_its_own() {
    for (listen, admin) in [
        ("127.0.0.1:8080", "127.0.0.1:8080"),
        ("0.0.0.0:8080", "127.0.0.1:8080"),
        ("127.0.0.1:8080", "0.0.0.0:8080"),
        ("[::]:8080", "127.0.0.1:8080"),
    ] {
        let e = load(&format!(
            "listen = \"{listen}\"\nadmin_listen = \"{admin}\""
        ))
        .unwrap_err();
        assert!(
            e.to_string().contains("admin_listen") && e.to_string().contains("overlaps"),
            "{listen} / {admin}: {e}"
        );
    }
    for (listen, admin) in [
        ("127.0.0.1:8080", "127.0.0.1:9090"),
        ("127.0.0.2:8080", "127.0.0.1:8080"),
        ("0.0.0.0:8080", "127.0.0.1:9090"),
    ] {
        let c = load(&format!(
            "listen = \"{listen}\"\nadmin_listen = \"{admin}\""
        ))
        .unwrap();
        assert_eq!(c.admin_listen.to_string(), admin);
    }
}

#[test]
fn a_single_bracket_list_of_tables_is_named_with_its_fix() {
    let e = RawConfig::from_toml("threads = 1\n[auth.keys]\nname = \"a\"\nkey = \"0123456789\"\n")
        .unwrap_err();
    assert!(e.contains("line 2"), "{e}");
    assert!(e.contains("auth.keys"), "{e}");
    assert!(e.contains("[[auth.keys]]"), "{e}");
}

#[test]
fn a_value_that_fails_validation_names_its_line_and_key() {
    let dir = std::env::temp_dir().join(format!("llamatap-config-line-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("c.toml");
    std::fs::write(
        &path,
        "[[auth.keys]]\nname = \"a\"\nkey = \"0123456789\"\nweight = 0\n",
    )
    .unwrap();
    let e = Config::load(Some(&path), &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 4: auth.keys.weight:"), "{e}");
    assert!(e.contains("weight 0 is not between 1 and 1000"), "{e}");
    assert!(!e.contains('\n'), "{e}");
    // A value from a flag is not blamed on the file.
    std::fs::write(&path, "threads = 2\n").unwrap();
    let flags = Overrides {
        threads: Some(0),
        ..Overrides::default()
    };
    let e = Config::load(Some(&path), &flags).unwrap_err().to_string();
    assert!(e.starts_with("invalid value for threads"), "{e}");
    std::fs::write(&path, "threads = 0\n").unwrap();
    let e = Config::load(Some(&path), &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("line 1: threads: must be between 1 and 256"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The keys a table of the file accepts, read from the parser's own
/// refusal of an unknown one (`expected one of ...`): derived from the
/// config types, not listed by hand. `header` opens the table (`""`: the
/// top level).
fn accepted(header: &str) -> Vec<String> {
    let text = format!("{header}\nzz_not_a_key = 1\n");
    let Err(e) = toml::from_str::<RawConfig>(&text) else {
        return Vec::new();
    };
    let e = e.message().to_string();
    let Some((_, list)) = e.split_once("expected ") else {
        return Vec::new();
    };
    list.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Every key of the file, dotted (`queue.classes.<class>.reserve`), found by
/// walking the tables: a key that opens as a table with keys of its own is
/// a table; any other is a leaf.
fn every_key() -> Vec<String> {
    /// `shown`: the dotted name as documented; `real`: as written in a file.
    fn walk(shown: &str, real: &str, header: &str, out: &mut Vec<String>, depth: usize) {
        for k in accepted(header) {
            if depth > 4 || !k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                continue;
            }
            let join = |p: &str| {
                if p.is_empty() {
                    k.clone()
                } else {
                    format!("{p}.{k}")
                }
            };
            let (shown, real) = (join(shown), join(real));
            let (table, array) = (format!("[{real}]"), format!("[[{real}]]"));
            // Tables keyed by a name: the classes.
            let named = format!("[{real}.batch]");
            if !accepted(&table).is_empty() {
                walk(&shown, &real, &table, out, depth + 1);
            } else if !accepted(&array).is_empty() {
                walk(&shown, &real, &array, out, depth + 1);
            } else if !accepted(&named).is_empty() {
                let (s, r) = (format!("{shown}.<class>"), format!("{real}.batch"));
                walk(&s, &r, &named, out, depth + 1);
            } else {
                out.push(shown);
            }
        }
    }
    let mut out = Vec::new();
    walk("", "", "", &mut out, 0);
    out
}

#[test]
fn every_key_the_file_accepts_is_documented() {
    let keys = every_key();
    assert!(keys.len() > 60, "only {} keys found: {keys:?}", keys.len());
    for k in [
        "queue.classes.<class>.preemptible",
        "continuation.drain_after_ms",
        "auth.keys.weight",
    ] {
        assert!(keys.iter().any(|x| x == k), "{k} not found in {keys:?}");
    }
    let manual = include_str!("../../docs/configuration.md");
    // A key is documented when its dotted name is written, or its table's
    // name with the key beside it (`[[auth.keys]]` `weight`).
    let undocumented: Vec<&String> = keys
        .iter()
        .filter(|k| {
            let (table, leaf) = k.rsplit_once('.').unwrap_or(("", k.as_str()));
            let written = manual.contains(&format!("`{k}`"))
                || manual.contains(&format!("`{k},"))
                || manual.contains(&format!(", `{k}`"));
            let beside = !table.is_empty()
                && manual.lines().any(|l| {
                    l.starts_with("| `")
                        && (l.contains(&format!("`[[{table}]]`"))
                            || l.contains(&format!("`[{table}]`")))
                        && l.contains(&format!("`{leaf}`"))
                });
            !(written || beside)
        })
        .collect();
    assert!(
        undocumented.is_empty(),
        "keys the file accepts that the configuration reference does not name: {undocumented:?}"
    );
}

#[test]
fn shared_slots_need_the_store_and_the_queue() {
    let e = load("[queue]\nenabled = true\nshared = true\n").unwrap_err();
    assert!(e.to_string().contains("queue.shared"), "{e}");
    assert!(e.to_string().contains("[auth.store]"), "{e}");
    let store = "[auth.store]\nurl = \"redis://127.0.0.1:6379\"\n";
    let e = load(&format!("[queue]\nshared = true\n{store}")).unwrap_err();
    assert!(e.to_string().contains("queue.enabled"), "{e}");
    let c = load(&format!("[queue]\nenabled = true\nshared = true\n{store}")).unwrap();
    assert!(c.queue.shared && c.store.is_some());
}

#[test]
fn otlp_metrics_follow_the_traces_endpoint_and_need_the_recording() {
    let otlp = |toml: &str| {
        let raw = RawConfig::from_toml(toml).unwrap();
        let o = Overrides {
            metrics_export: RawMetricsExport {
                exporter: Some("otlp".into()),
                ..RawMetricsExport::default()
            },
            ..Overrides::default()
        };
        Config::from_raw(raw, &o)
    };
    let c =
        otlp("[telemetry]\notlp_endpoint = \"http://c:4318\"\notlp_protocol = \"http\"").unwrap();
    let m = c.telemetry.otlp_metrics.unwrap();
    assert_eq!(m.endpoint, "http://c:4318/v1/metrics");
    assert_eq!(m.protocol, OtlpProtocol::HttpProtobuf);
    assert!(load("").unwrap().telemetry.otlp_metrics.is_none());
    let e = otlp("[telemetry]\nmetrics = false")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("OTEL_METRICS_EXPORTER") && e.contains("telemetry.metrics"),
        "{e}"
    );
}

/// A mistyped key names the closest one and lists every accepted key
/// whole: no key cut mid-word.
#[test]
fn a_mistyped_key_suggests_the_closest_and_lists_whole_keys() {
    let e = load("upstrem = \"http://127.0.0.1:8081\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 1:"), "{e}");
    assert!(e.contains("line 1: upstrem: unknown key;"), "{e}");
    assert!(e.contains("did you mean `upstream`?"), "{e}");
    assert!(!e.contains('…'), "cut: {e}");
    for key in accepted("") {
        assert!(e.contains(&key), "{key} missing from {e}");
    }
    let e = load("[telemetry]\nsample_ratoi = 0.5\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("line 2:"), "{e}");
    assert!(e.contains("did you mean `sample_ratio`?"), "{e}");
    let e = load("zz_not_a_key = 1\n").unwrap_err().to_string();
    assert!(!e.contains("did you mean"), "{e}");
}
