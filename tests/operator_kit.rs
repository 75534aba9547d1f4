//! The operator kit is consistent with itself, without a Docker engine:
//! docker-compose.yml, the Dockerfile and .dockerignore, the Prometheus config,
//! Grafana's provisioning files and the dashboards agree on service names,
//! ports, paths and data source uids; every dashboard query uses only metrics
//! llamatap documents; the dashboards follow the house rules (uid, a data
//! source variable, a model variable, Jaeger links, no overlapping panels);
//! every published port and every panel is documented in the manual (README.md and docs/).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_yaml::Value as Yaml;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn yaml(rel: &str) -> Yaml {
    serde_yaml::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn compose() -> Yaml {
    yaml("docker-compose.yml")
}

fn service<'a>(c: &'a Yaml, name: &str) -> &'a Yaml {
    let s = &c["services"][name];
    assert!(s.is_mapping(), "docker-compose.yml has no service {name}");
    s
}

/// A service's command as a list of strings.
fn command(s: &Yaml) -> Vec<String> {
    s["command"]
        .as_sequence()
        .expect("command is a list")
        .iter()
        .map(|v| match v {
            Yaml::String(s) => s.clone(),
            Yaml::Number(n) => n.to_string(),
            other => panic!("odd command item {other:?}"),
        })
        .collect()
}

/// Every value of a repeatable `flag` in a command.
fn flags(cmd: &[String], flag: &str) -> Vec<String> {
    let prefix = format!("{flag}=");
    let mut out = Vec::new();
    let mut args = cmd.iter();
    while let Some(a) = args.next() {
        if a == flag {
            out.extend(args.next().cloned());
        } else if let Some(v) = a.strip_prefix(&prefix) {
            out.push(v.to_string());
        }
    }
    out
}

/// The llama-server replicas: the services named `llama-server-*`.
fn replicas(c: &Yaml) -> Vec<String> {
    c["services"]
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap().to_string())
        .filter(|k| k.starts_with("llama-server-"))
        .collect()
}

/// A replica's container port, from its `--port` flag.
fn replica_port(c: &Yaml, name: &str) -> u16 {
    common::flag(&command(service(c, name)), "--port")
        .unwrap()
        .parse()
        .unwrap()
}

/// Published ports of a service: (host port, container port).
fn ports(s: &Yaml) -> Vec<(u16, u16)> {
    s["ports"]
        .as_sequence()
        .into_iter()
        .flatten()
        .map(|p| {
            let p = p
                .as_str()
                .expect("ports as \"[ip:]host:container\" strings");
            let parts: Vec<&str> = p.split(':').collect();
            assert!(
                parts.len() >= 2,
                "port {p} must name host and container ports"
            );
            let container = parts[parts.len() - 1].split('/').next().unwrap();
            (
                parts[parts.len() - 2].parse().unwrap(),
                container.parse().unwrap(),
            )
        })
        .collect()
}

/// Bind mounts of a service: (source relative to the repo, target, read-only).
fn mounts(s: &Yaml) -> Vec<(String, String)> {
    s["volumes"]
        .as_sequence()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str())
        .filter(|v| v.starts_with("./"))
        .map(|v| {
            let parts: Vec<&str> = v.split(':').collect();
            (
                parts[0]
                    .trim_start_matches("./")
                    .trim_end_matches('/')
                    .to_string(),
                parts[1].trim_end_matches('/').to_string(),
            )
        })
        .collect()
}

/// Maps a path inside a container to the repo file it comes from, via the
/// service's bind mounts.
fn host_path(s: &Yaml, container_path: &str) -> Option<String> {
    mounts(s).into_iter().find_map(|(src, target)| {
        if container_path == target {
            Some(src)
        } else {
            container_path
                .strip_prefix(&format!("{target}/"))
                .map(|rest| format!("{src}/{rest}"))
        }
    })
}

/// `http://host:port...` -> (host, port).
fn host_port(url: &str) -> (String, u16) {
    let rest = url.split("://").nth(1).unwrap_or(url);
    let authority = rest.split('/').next().unwrap();
    let (h, p) = authority
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("no port in {url}"));
    (h.to_string(), p.parse().unwrap())
}

/// The healthcheck test of a service, joined into one string.
fn healthcheck(s: &Yaml) -> String {
    let t = &s["healthcheck"]["test"];
    match t {
        Yaml::Sequence(items) => items
            .iter()
            .map(|v| v.as_str().unwrap_or_default().to_string())
            .collect::<Vec<_>>()
            .join(" "),
        Yaml::String(s) => s.clone(),
        _ => String::new(),
    }
}

fn container_ports(c: &Yaml) -> BTreeMap<String, BTreeSet<u16>> {
    let mut out = BTreeMap::new();
    for (name, s) in c["services"].as_mapping().unwrap() {
        let name = name.as_str().unwrap().to_string();
        let set: BTreeSet<u16> = ports(s).into_iter().map(|(_, c)| c).collect();
        out.insert(name, set);
    }
    out
}

const SERVICES: &[&str] = &[
    "llama-server-a",
    "llama-server-b",
    "llamatap",
    "jaeger",
    "prometheus",
    "grafana",
];

#[test]
fn compose_has_every_service_with_a_healthcheck_on_its_own_port() {
    let c = compose();
    let names: BTreeSet<&str> = c["services"]
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert_eq!(names, SERVICES.iter().copied().collect());
    for name in SERVICES {
        let s = service(&c, name);
        let hc = healthcheck(s);
        assert!(
            hc.starts_with("CMD"),
            "{name}: healthcheck.test must be an exec-form list: {hc:?}"
        );
        for key in ["interval", "timeout", "retries"] {
            assert!(
                !s["healthcheck"][key].is_null(),
                "{name}: healthcheck.{key}"
            );
        }
        // The healthcheck asks the service's own (container) port.
        let own: Vec<u16> = match *name {
            // llama-server's port comes from its --port flag.
            n if n.starts_with("llama-server-") => vec![replica_port(&c, n)],
            // Jaeger v2's health-check extension (13133) is not published.
            "jaeger" => vec![13133],
            _ => ports(s).into_iter().map(|(_, c)| c).collect(),
        };
        assert!(
            own.iter().any(|p| hc.contains(&format!("127.0.0.1:{p}/"))
                || hc.contains(&format!("127.0.0.1/{p} "))),
            "{name}: healthcheck {hc:?} does not ask any of its ports {own:?}"
        );
        // Published on loopback only.
        for p in s["ports"].as_sequence().into_iter().flatten() {
            assert!(
                p.as_str().unwrap().starts_with("127.0.0.1:"),
                "{name}: port {p:?} should be published on 127.0.0.1"
            );
        }
    }
}

#[test]
fn llama_server_replicas_are_the_official_image_with_one_small_model_it_downloads() {
    let c = compose();
    let names = replicas(&c);
    assert!(names.len() >= 2, "two llama-server replicas: {names:?}");
    let first = command(service(&c, &names[0]));
    let mut host_ports = BTreeSet::new();
    for name in &names {
        let s = service(&c, name);
        let image = s["image"].as_str().unwrap();
        assert!(
            image.starts_with("ghcr.io/ggml-org/llama.cpp:server"),
            "{name}: official server image: {image}"
        );
        let cmd = command(s);
        // Replicas: the same model and flags.
        assert_eq!(cmd, first, "{name} differs from {}", names[0]);
        assert_eq!(common::flag(&cmd, "--cache-ram").as_deref(), Some("0"));
        let repo = common::flag(&cmd, "--hf-repo")
            .or_else(|| common::flag(&cmd, "-hf"))
            .unwrap();
        assert!(repo.contains("Instruct") && repo.contains("GGUF"), "{repo}");
        assert!(common::flag(&cmd, "--host").as_deref() == Some("0.0.0.0"));
        assert!(
            cmd.iter().any(|a| a == "--metrics"),
            "--metrics for Prometheus"
        );
        // The model download lands in a named volume that LLAMA_CACHE points at.
        let cache = s["environment"]["LLAMA_CACHE"].as_str().unwrap();
        assert!(
            s["volumes"]
                .as_sequence()
                .unwrap()
                .iter()
                .any(|v| v.as_str().unwrap().ends_with(&format!(":{cache}"))),
            "{name}: LLAMA_CACHE {cache} is not a volume"
        );
        for (host, _) in ports(s) {
            assert!(host_ports.insert(host), "{name}: host port {host} twice");
        }
    }
    // They share the volume, so only the first downloads the model: the
    // others start once it is healthy.
    for name in &names[1..] {
        assert_eq!(
            service(&c, name)["depends_on"][names[0].as_str()]["condition"].as_str(),
            Some("service_healthy"),
            "{name} must wait for {} (shared model volume)",
            names[0]
        );
    }
}

/// llamatap's upstreams in compose: its `--upstream` flags, else its config
/// file's `upstream` or `[[upstreams]]`, as (url, name).
fn compose_upstreams(c: &Yaml, config: &toml::Value) -> Vec<(String, Option<String>)> {
    let from_flags = flags(&command(service(c, "llamatap")), "--upstream");
    if !from_flags.is_empty() {
        return from_flags.into_iter().map(|u| (u, None)).collect();
    }
    if let Some(list) = config.get("upstreams").and_then(|v| v.as_array()) {
        return list
            .iter()
            .map(|u| {
                (
                    u["url"].as_str().unwrap().to_string(),
                    u.get("name").and_then(|n| n.as_str()).map(str::to_string),
                )
            })
            .collect();
    }
    let single = config
        .get("upstream")
        .and_then(|v| v.as_str())
        .expect("llamatap has no upstream in compose");
    vec![(single.to_string(), None)]
}

#[test]
fn llamatap_service_matches_its_image_upstream_and_jaeger() {
    let c = compose();
    let s = service(&c, "llamatap");
    assert_eq!(s["build"]["context"].as_str(), Some("."));
    let dockerfile = s["build"]["dockerfile"].as_str().unwrap_or("Dockerfile");
    assert!(repo().join(dockerfile).is_file(), "{dockerfile}");
    let cmd = command(s);

    // Listeners on all interfaces, on the published container ports.
    let published: BTreeSet<u16> = ports(s).into_iter().map(|(_, c)| c).collect();
    for f in ["--listen", "--admin-listen"] {
        let addr = common::flag(&cmd, f).unwrap_or_else(|| panic!("llamatap needs {f}"));
        let (host, port) = addr.rsplit_once(':').unwrap();
        assert_eq!(
            host, "0.0.0.0",
            "{f} must listen on all interfaces in a container"
        );
        assert!(
            published.contains(&port.parse().unwrap()),
            "{f} {addr} not published"
        );
    }

    // OTLP to the jaeger service, protocol matching the port.
    let otlp = common::flag(&cmd, "--otlp-endpoint").unwrap();
    let (host, port) = host_port(&otlp);
    assert_eq!(host, "jaeger");
    let protocol = common::flag(&cmd, "--otlp-protocol").unwrap_or_else(|| "grpc".into());
    assert_eq!(
        (protocol.as_str(), port),
        if protocol == "grpc" {
            ("grpc", 4317)
        } else {
            ("http", 4318)
        }
    );

    // Its config file comes from the compose `configs:` and passes --check-config;
    // its Jaeger URL is the Jaeger UI as the browser reaches it.
    let config_path = common::flag(&cmd, "--config").unwrap();
    let attached = s["configs"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["target"].as_str() == Some(config_path.as_str()))
        .unwrap_or_else(|| panic!("no config mounted at {config_path}"));
    let content = c["configs"][attached["source"].as_str().unwrap()]["content"]
        .as_str()
        .unwrap();
    let file = common::temp_config("compose", content);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_llamatap"))
        .arg("--check-config")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "compose's llamatap config fails --check-config: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let parsed: toml::Value = toml::from_str(content).unwrap();

    // Upstreams: every llama-server replica on its --port, once each, named
    // after its service (the `upstream` label of the Fleet panels).
    let upstreams = compose_upstreams(&c, &parsed);
    let wired: BTreeSet<(String, u16)> = upstreams.iter().map(|(u, _)| host_port(u)).collect();
    assert_eq!(
        wired.len(),
        upstreams.len(),
        "an upstream twice: {upstreams:?}"
    );
    let expected: BTreeSet<(String, u16)> = replicas(&c)
        .into_iter()
        .map(|r| {
            let port = replica_port(&c, &r);
            (r, port)
        })
        .collect();
    assert_eq!(wired, expected, "llamatap's upstreams are the replicas");
    for (url, name) in &upstreams {
        if let Some(name) = name {
            assert_eq!(*name, host_port(url).0, "{url}: name it after its service");
        }
    }
    // llamatap does not wait for every replica (it routes to the ready
    // ones), but each dependency it names is a replica or Jaeger.
    for dep in s["depends_on"].as_mapping().unwrap().keys() {
        let dep = dep.as_str().unwrap();
        assert!(
            dep == "jaeger" || expected.iter().any(|(r, _)| r == dep),
            "llamatap depends on {dep}"
        );
    }

    let jaeger_url = parsed["admin"]["jaeger_url"].as_str().unwrap();
    let ui_host_port = ports(service(&c, "jaeger"))
        .into_iter()
        .find(|(_, c)| *c == 16686)
        .expect("Jaeger UI published")
        .0;
    assert_eq!(jaeger_url, format!("http://localhost:{ui_host_port}"));
}

#[test]
fn dockerfile_is_multi_stage_and_copies_what_cargo_needs() {
    let df = read("Dockerfile");
    let froms: Vec<&str> = df
        .lines()
        .filter(|l| l.trim_start().to_ascii_uppercase().starts_with("FROM "))
        .collect();
    assert!(froms.len() >= 2, "multi-stage: {froms:?}");
    assert!(
        froms[0].contains("rust:${RUST_VERSION}-bookworm"),
        "{}",
        froms[0]
    );
    assert!(froms.last().unwrap().contains("debian:bookworm-slim"));
    // The builder's Rust is the pinned toolchain.
    let toolchain: toml::Value = toml::from_str(&read("rust-toolchain.toml")).unwrap();
    let channel = toolchain["toolchain"]["channel"].as_str().unwrap();
    assert!(
        df.contains(&format!("ARG RUST_VERSION={channel}")),
        "Dockerfile RUST_VERSION must be rust-toolchain.toml's {channel}"
    );
    for pkg in ["cmake", "build-essential"] {
        assert!(df.contains(pkg), "builder needs {pkg}");
    }
    assert!(df.contains("--locked"), "build from Cargo.lock");

    // EXPOSE matches the llamatap service's container ports.
    let exposed: BTreeSet<u16> = df
        .lines()
        .filter_map(|l| l.trim().strip_prefix("EXPOSE "))
        .flat_map(|l| l.split_whitespace().map(|p| p.parse::<u16>().unwrap()))
        .collect();
    let c = compose();
    assert_eq!(exposed, container_ports(&c)["llamatap"]);

    // Every COPY source (outside --from stages) exists and survives .dockerignore.
    let ignore = read(".dockerignore");
    let mut copied = Vec::new();
    for line in df.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("COPY ") else {
            continue;
        };
        if rest.starts_with("--from") {
            continue;
        }
        let parts: Vec<&str> = rest.split_whitespace().collect();
        for src in &parts[..parts.len() - 1] {
            assert!(repo().join(src).exists(), "COPY source {src} missing");
            assert!(
                included(&ignore, src),
                "COPY source {src} excluded by .dockerignore"
            );
            copied.push(src.trim_end_matches('/').to_string());
        }
    }
    // Cargo needs the manifest, the lock file, src/, every declared target's
    // file, and every workspace member's manifest and library.
    let manifest: toml::Value = toml::from_str(&read("Cargo.toml")).unwrap();
    let mut needed = vec![
        "Cargo.toml".to_string(),
        "Cargo.lock".into(),
        "src/lib.rs".into(),
    ];
    let members = manifest["workspace"]["members"].as_array().unwrap();
    assert!(
        members.len() > 1,
        "the workspace lists its crates: {members:?}"
    );
    for m in members
        .iter()
        .filter_map(|m| m.as_str())
        .filter(|m| *m != ".")
    {
        needed.push(format!("{m}/Cargo.toml"));
        needed.push(format!("{m}/src/lib.rs"));
    }
    for kind in ["bin", "bench", "example", "test"] {
        for t in manifest
            .get(kind)
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
        {
            let path = match t.get("path").and_then(|p| p.as_str()) {
                Some(p) => p.to_string(),
                None if kind == "bench" => format!("benches/{}.rs", t["name"].as_str().unwrap()),
                None => continue,
            };
            needed.push(path);
        }
    }
    for path in needed {
        assert!(
            copied
                .iter()
                .any(|c| path == *c || path.starts_with(&format!("{c}/"))),
            "the Dockerfile does not COPY {path}, which Cargo.toml needs"
        );
    }
}

/// Whether `path` is in the build context under a `.dockerignore` of the
/// "ignore everything, then re-include" kind (or a plain exclusion list).
fn included(ignore: &str, path: &str) -> bool {
    let path = path.trim_end_matches('/');
    let mut keep = true;
    for pat in ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (negate, pat) = match pat.strip_prefix('!') {
            Some(p) => (true, p.trim_end_matches('/')),
            None => (false, pat.trim_end_matches('/')),
        };
        let hit = pat == "*" || pat == "**" || path == pat || path.starts_with(&format!("{pat}/"));
        if hit {
            keep = negate;
        }
    }
    keep
}

#[test]
fn prometheus_config_scrapes_llamatap_and_loads_the_rules_in_compose() {
    let c = compose();
    let prom = service(&c, "prometheus");
    let config_in_container = common::flag(&command(prom), "--config.file").unwrap();
    assert_eq!(
        host_path(prom, &config_in_container).as_deref(),
        Some("conf/prometheus.yml"),
        "the prometheus service must mount conf/prometheus.yml at {config_in_container}"
    );
    let cfg = yaml("conf/prometheus.yml");
    // Rule files resolve both in the repo and in the container.
    let dir_in_container = Path::new(&config_in_container).parent().unwrap();
    for rf in cfg["rule_files"].as_sequence().unwrap() {
        let rf = rf.as_str().unwrap();
        assert!(repo().join("conf").join(rf).is_file(), "conf/{rf} missing");
        let in_container = dir_in_container.join(rf);
        assert_eq!(
            host_path(prom, in_container.to_str().unwrap()),
            Some(format!("conf/{rf}")),
            "rule file {rf} is not mounted at {}",
            in_container.display()
        );
    }
    // The llamatap job scrapes the llamatap service's admin port; the other
    // targets are services too.
    let admin_port: u16 = common::flag(&command(service(&c, "llamatap")), "--admin-listen")
        .unwrap()
        .rsplit_once(':')
        .unwrap()
        .1
        .parse()
        .unwrap();
    let mut jobs = BTreeMap::new();
    for job in cfg["scrape_configs"].as_sequence().unwrap() {
        let name = job["job_name"].as_str().unwrap().to_string();
        let targets: Vec<String> = job["static_configs"]
            .as_sequence()
            .unwrap()
            .iter()
            .flat_map(|sc| sc["targets"].as_sequence().unwrap().iter())
            .map(|t| t.as_str().unwrap().to_string())
            .collect();
        jobs.insert(name, (job.clone(), targets));
    }
    let (job, targets) = jobs.get("llamatap").expect("a llamatap scrape job");
    assert_eq!(targets, &vec![format!("llamatap:{admin_port}")]);
    assert_eq!(
        job["metrics_path"].as_str().unwrap_or("/metrics"),
        "/metrics"
    );
    let (_, llama_targets) = jobs.get("llama-server").expect("a llama-server job");
    let replica_targets: Vec<String> = replicas(&c)
        .iter()
        .map(|r| format!("{r}:{}", replica_port(&c, r)))
        .collect();
    assert_eq!(llama_targets, &replica_targets);

    // Grafana's Prometheus data source knows the scrape interval.
    let interval = job["scrape_interval"]
        .as_str()
        .or_else(|| cfg["global"]["scrape_interval"].as_str())
        .unwrap();
    let ds = yaml("conf/grafana/provisioning/datasources/llamatap.yml");
    let prom_ds = ds["datasources"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|d| d["type"] == "prometheus")
        .unwrap();
    assert_eq!(prom_ds["jsonData"]["timeInterval"].as_str(), Some(interval));
}

#[test]
fn grafana_provisioning_points_at_the_services_and_the_dashboards() {
    let c = compose();
    let g = service(&c, "grafana");
    assert_eq!(
        host_path(g, "/etc/grafana/provisioning").as_deref(),
        Some("conf/grafana/provisioning")
    );
    let ports = container_ports(&c);
    // Data sources reach compose services on their container ports.
    let ds = yaml("conf/grafana/provisioning/datasources/llamatap.yml");
    let mut uids = BTreeMap::new();
    for d in ds["datasources"].as_sequence().unwrap() {
        let url = d["url"].as_str().unwrap();
        let (host, port) = host_port(url);
        assert!(
            ports.get(&host).is_some_and(|p| p.contains(&port)),
            "data source {url}: no service {host} with container port {port}"
        );
        uids.insert(
            d["uid"].as_str().unwrap().to_string(),
            d["type"].as_str().unwrap().to_string(),
        );
    }
    assert_eq!(
        uids.get("prometheus").map(String::as_str),
        Some("prometheus")
    );
    assert_eq!(uids.get("jaeger").map(String::as_str), Some("jaeger"));
    // The dashboard provider's path is where compose mounts dashboards/.
    let prov = yaml("conf/grafana/provisioning/dashboards/llamatap.yml");
    let path = prov["providers"][0]["options"]["path"].as_str().unwrap();
    assert_eq!(host_path(g, path).as_deref(), Some("dashboards"));
    let home = g["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
        .as_str()
        .unwrap();
    let home_file = host_path(g, home).unwrap();
    assert!(
        repo().join(&home_file).is_file(),
        "home dashboard {home_file}"
    );
    // Every data source a dashboard names is the variable or a provisioned uid.
    for (file, dash) in dashboards() {
        let mut seen = Vec::new();
        collect_datasources(&dash, &mut seen);
        for (ty, uid) in seen {
            if uid.starts_with("${") || uid.starts_with("-- ") || ty == "grafana" {
                continue;
            }
            assert_eq!(
                uids.get(&uid),
                Some(&ty),
                "{file}: data source {ty}/{uid} is not provisioned"
            );
        }
    }
}

#[test]
fn exemplars_are_stored_shown_and_linked_to_jaeger() {
    // Compose's Prometheus keeps exemplars.
    let c = compose();
    let cmd = command(service(&c, "prometheus"));
    assert!(
        cmd.iter().any(|a| a == "--enable-feature=exemplar-storage"),
        "prometheus runs without exemplar storage: {cmd:?}"
    );
    // The Prometheus data source links an exemplar's trace_id to Jaeger.
    let ds = yaml("conf/grafana/provisioning/datasources/llamatap.yml");
    let sources = ds["datasources"].as_sequence().unwrap();
    let prometheus = sources.iter().find(|d| d["type"] == "prometheus").unwrap();
    let jaeger = sources.iter().find(|d| d["type"] == "jaeger").unwrap();
    let dest = prometheus["jsonData"]["exemplarTraceIdDestinations"]
        .as_sequence()
        .expect("exemplarTraceIdDestinations");
    assert!(
        dest.iter()
            .any(|d| d["name"] == "trace_id" && d["datasourceUid"] == jaeger["uid"]),
        "{dest:?}"
    );
    // The TTFT and first-sentence panels ask for exemplars on every query;
    // their queries read the histograms that carry them.
    let (_, latency) = dashboards()
        .into_iter()
        .find(|(_, d)| d["uid"] == "llamatap-latency")
        .unwrap();
    for title in [
        "Time to first token (TTFT) p50 / p95 / p99",
        "Time to first sentence p50 / p95 / p99",
    ] {
        let panel = all_panels(&latency)
            .into_iter()
            .find(|p| p["title"] == title)
            .unwrap_or_else(|| panic!("no panel {title:?}"));
        for t in panel["targets"].as_array().unwrap() {
            assert_eq!(t["exemplar"], true, "{title}: {t}");
            assert!(
                t["expr"]
                    .as_str()
                    .unwrap()
                    .contains("llamatap_stage_duration_seconds_bucket"),
                "{title}: {t}"
            );
        }
    }
}

fn collect_datasources(v: &serde_json::Value, out: &mut Vec<(String, String)>) {
    match v {
        serde_json::Value::Object(m) => {
            if let Some(ds) = m.get("datasource").and_then(|d| d.as_object()) {
                out.push((
                    ds.get("type").and_then(|t| t.as_str()).unwrap_or("").into(),
                    ds.get("uid").and_then(|t| t.as_str()).unwrap_or("").into(),
                ));
            }
            m.values().for_each(|x| collect_datasources(x, out));
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| collect_datasources(x, out)),
        _ => {}
    }
}

fn dashboards() -> Vec<(String, serde_json::Value)> {
    let mut out: Vec<_> = std::fs::read_dir(repo().join("dashboards"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let name = format!("dashboards/{}", p.file_name().unwrap().to_string_lossy());
            let v = serde_json::from_slice(&std::fs::read(&p).unwrap())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, v)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 2, "dashboards/ should hold the dashboards");
    out
}

/// Every panel, rows' nested panels included.
fn all_panels(dash: &serde_json::Value) -> Vec<&serde_json::Value> {
    fn walk<'a>(v: &'a serde_json::Value, out: &mut Vec<&'a serde_json::Value>) {
        for p in v.as_array().into_iter().flatten() {
            out.push(p);
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dash["panels"], &mut out);
    out
}

/// Metric families documented in the manual's metrics tables: llamatap's
/// own, and the llama-server series it re-exports (`llamacpp:`).
fn documented_metrics() -> BTreeSet<String> {
    let readme = common::manual();
    let mut out = BTreeSet::new();
    for prefix in ["llamatap_", "llamacpp:"] {
        let row = format!("| `{prefix}");
        out.extend(
            readme
                .lines()
                .filter_map(|l| l.strip_prefix(row.as_str()))
                .map(|l| format!("{prefix}{}", l.split('`').next().unwrap())),
        );
    }
    out
}

/// `llamatap_*` names and re-exported `llamacpp:*` names in a PromQL
/// expression, with histogram suffixes removed.
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = llamatap_names(expr);
    let mut rest = expr;
    while let Some(pos) = rest.find("llamacpp:") {
        let tail = &rest[pos..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(tail.len());
        out.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

/// `llamatap_*` names in a PromQL expression, with histogram suffixes removed.
fn llamatap_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(pos) = expr[i..].find("llamatap_") {
        let start = i + pos;
        // Not part of a longer identifier or a recording rule name (llamatap:...).
        let before_ok = start == 0
            || !(bytes[start - 1].is_ascii_alphanumeric()
                || bytes[start - 1] == b'_'
                || bytes[start - 1] == b':');
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        if before_ok {
            let name = &expr[start..end];
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .filter(|b| b.ends_with("_seconds"))
                .unwrap_or(name);
            out.push(base.to_string());
        }
        i = end;
    }
    out
}

#[test]
fn dashboards_follow_the_house_rules() {
    let documented = documented_metrics();
    assert!(
        documented.contains("llamatap_stage_duration_seconds"),
        "{documented:?}"
    );
    let c = compose();
    let jaeger_ui = ports(service(&c, "jaeger"))
        .into_iter()
        .find(|(_, c)| *c == 16686)
        .unwrap()
        .0;
    let observe = common::manual();
    let mut uids = BTreeSet::new();
    for (file, dash) in dashboards() {
        let text = serde_json::to_string(&dash).unwrap();
        let uid = dash["uid"]
            .as_str()
            .unwrap_or_else(|| panic!("{file}: no uid"));
        assert!(uids.insert(uid.to_string()), "{file}: duplicate uid {uid}");
        assert!(
            dash["title"].as_str().is_some_and(|t| !t.is_empty()),
            "{file}: title"
        );
        assert!(
            !text.to_ascii_lowercase().contains("traceql"),
            "{file}: TraceQL queries answer \"No data\" on Jaeger"
        );

        // Variables: a Prometheus data source, the model, Jaeger's URL.
        let vars = dash["templating"]["list"].as_array().unwrap();
        let var = |name: &str| {
            vars.iter()
                .find(|v| v["name"] == name)
                .unwrap_or_else(|| panic!("{file}: no ${name} variable"))
        };
        let ds = var("datasource");
        assert_eq!(ds["type"], "datasource");
        assert_eq!(ds["query"], "prometheus");
        let model = var("model");
        assert_eq!(model["type"], "query");
        let q = model["query"]
            .as_str()
            .or_else(|| model["query"]["query"].as_str())
            .unwrap();
        assert_eq!(q, "label_values(llamatap_requests_total, model)");
        assert_eq!(model["includeAll"], true);
        assert_eq!(
            model["allValue"], ".*",
            "{file}: All must be a regex for =~"
        );
        assert_eq!(model["datasource"]["uid"], "${datasource}");
        let jaeger = var("jaeger_url");
        assert_eq!(
            jaeger["query"].as_str().unwrap(),
            format!("http://localhost:{jaeger_ui}"),
            "{file}: $jaeger_url default is compose's Jaeger UI"
        );

        // Links to Jaeger: on the dashboard and on panels; the URL variable is
        // used raw (data links URI-encode variables by default).
        let links = dash["links"].as_array().unwrap();
        assert!(
            links.iter().any(|l| l["url"]
                .as_str()
                .is_some_and(|u| u.starts_with("${jaeger_url:raw}/search?service="))),
            "{file}: no dashboard link to a Jaeger search"
        );
        assert!(
            !text.contains("${jaeger_url}"),
            "{file}: use ${{jaeger_url:raw}}"
        );
        for needle in ["start=${__from}000", "end=${__to}000"] {
            assert!(
                text.contains(needle),
                "{file}: Jaeger links need {needle} (microseconds)"
            );
        }

        // Panels: unique ids, the data source variable, documented metrics,
        // the model filter, a description, inside the 24-column grid without
        // overlaps, and a mention in the manual.
        let mut ids = BTreeSet::new();
        let mut cells: BTreeSet<(i64, i64)> = BTreeSet::new();
        let mut jaeger_panel_links = 0;
        for p in all_panels(&dash) {
            let title = p["title"].as_str().unwrap_or_default();
            assert!(
                ids.insert(p["id"].as_i64().unwrap()),
                "{file}: duplicate panel id"
            );
            let g = &p["gridPos"];
            let (x, y, w, h) = (
                g["x"].as_i64().unwrap(),
                g["y"].as_i64().unwrap(),
                g["w"].as_i64().unwrap(),
                g["h"].as_i64().unwrap(),
            );
            assert!(
                x >= 0 && w > 0 && x + w <= 24 && h > 0,
                "{file}: {title}: gridPos {g}"
            );
            for cx in x..x + w {
                for cy in y..y + h {
                    assert!(
                        cells.insert((cx, cy)),
                        "{file}: {title} overlaps another panel"
                    );
                }
            }
            if p["type"] == "row" {
                continue;
            }
            assert!(
                p["description"].as_str().is_some_and(|d| d.len() > 20),
                "{file}: {title}: say what the panel answers in its description"
            );
            assert!(
                observe.contains(title),
                "{file}: panel {title:?} is not described in the manual"
            );
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{file}: {title}");
            let targets = p["targets"].as_array().unwrap();
            assert!(!targets.is_empty(), "{file}: {title}: no query");
            for t in targets {
                assert_eq!(t["datasource"]["uid"], "${datasource}", "{file}: {title}");
                let expr = t["expr"].as_str().unwrap();
                let names = metric_names(expr);
                assert!(
                    !names.is_empty(),
                    "{file}: {title}: no llamatap (or re-exported llama-server) metric in {expr}"
                );
                for n in &names {
                    assert!(
                        documented.contains(n),
                        "{file}: {title}: {n} is not a metric llamatap exports (README)"
                    );
                }
                let per_model = names.iter().any(|n| {
                    [
                        "llamatap_stage_duration_seconds",
                        "llamatap_requests_total",
                        "llamatap_tokens_total",
                        "llamatap_time_per_output_token_seconds",
                        "llamatap_max_token_gap_seconds",
                        "llamatap_cancellations_total",
                        "llamatap_hangup_elapsed_seconds_total",
                    ]
                    .contains(&n.as_str())
                });
                if per_model {
                    assert!(
                        expr.contains("model=~\"$model\""),
                        "{file}: {title}: filter by model=~\"$model\": {expr}"
                    );
                }
            }
            let plinks = serde_json::to_string(&p["fieldConfig"]).unwrap();
            if plinks.contains("${jaeger_url:raw}/search") {
                jaeger_panel_links += 1;
            }
        }
        assert!(
            jaeger_panel_links >= 3,
            "{file}: panels should link to Jaeger searches ({jaeger_panel_links})"
        );
    }
}

/// The fleet's families that carry an `upstream` label.
const PER_UPSTREAM: &[&str] = &[
    "llamatap_upstream_up",
    "llamatap_upstream_inflight_requests",
    "llamatap_upstream_requests_total",
    "llamatap_upstream_ttft_seconds",
    "llamatap_upstream_tokens_total",
    "llamatap_routing_predicted_cached_tokens_total",
];

#[test]
fn dashboards_show_the_fleet_per_upstream_and_the_routing() {
    // Every query of every dashboard: (file, panel title, expr).
    let mut exprs = Vec::new();
    for (file, dash) in dashboards() {
        for p in all_panels(&dash) {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    exprs.push((
                        file.clone(),
                        p["title"].as_str().unwrap_or_default().to_string(),
                        e.to_string(),
                        t["legendFormat"].as_str().unwrap_or_default().to_string(),
                    ));
                }
            }
        }
    }
    // Each per-upstream family is shown per upstream somewhere: grouped by
    // the label, and the legend names the upstream.
    for family in PER_UPSTREAM {
        assert!(
            exprs.iter().any(|(_, _, e, legend)| {
                metric_names(e).iter().any(|n| n == family)
                    && (e.contains("by (upstream)") || e.contains("by (le, upstream)"))
                    && legend.contains("{{upstream}}")
            }),
            "no dashboard panel shows {family} per upstream"
        );
    }
    // The routing families by their one label.
    for (family, label) in [
        ("llamatap_routing_decisions_total", "reason"),
        ("llamatap_routing_predictions_total", "result"),
    ] {
        assert!(
            exprs.iter().any(|(_, _, e, legend)| {
                metric_names(e).iter().any(|n| n == family)
                    && e.contains(&format!("by ({label})"))
                    && legend.contains(&format!("{{{{{label}}}}}"))
            }),
            "no dashboard panel shows {family} by {label}"
        );
    }
    // TTFT p95 and cache reuse per upstream.
    assert!(
        exprs
            .iter()
            .any(|(_, _, e, _)| e.starts_with("histogram_quantile(0.95")
                && e.contains("llamatap_upstream_ttft_seconds_bucket")
                && e.contains("by (le, upstream)")),
        "no TTFT p95 per upstream"
    );
    assert!(
        exprs.iter().any(|(_, _, e, _)| {
            let (num, den) = e.split_once(" / ").unwrap_or_default();
            num.contains("llamatap_upstream_tokens_total{kind=\"cached\"")
                && den.contains("llamatap_upstream_tokens_total{kind=\"prompt\"")
        }),
        "no prompt-cache reuse per upstream"
    );
    // A panel that folds the upstreams into one series says so.
    for (file, title, e, _) in &exprs {
        if metric_names(e).iter().any(|n| n == "llamatap_upstream_up") && !e.contains("upstream)") {
            let dash = dashboards().into_iter().find(|(f, _)| f == file).unwrap().1;
            let panel = all_panels(&dash)
                .into_iter()
                .find(|p| p["title"] == title.as_str())
                .unwrap();
            assert!(
                panel["description"]
                    .as_str()
                    .is_some_and(|d| d.contains("every upstream")),
                "{file}: {title}: {e} folds the upstreams into one value; its description must say so"
            );
        }
    }
}

/// `llamatap --check-config` on `content`: (success, stderr).
fn check_config(name: &str, content: &str) -> (bool, String) {
    let file = common::temp_config(name, content);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_llamatap"))
        .arg("--check-config")
        .arg(&file)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn example_config_fleet_block_loads_once_uncommented_in_place_of_upstream() {
    let example = read("conf/llamatap.example.toml");
    // Uncomment the [[upstreams]] example: its entries and their keys.
    let uncommented: Vec<String> = example
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(rest)
                if rest == "[[upstreams]]"
                    || ["url = ", "name = ", "weight = "]
                        .iter()
                        .any(|k| rest.starts_with(k)) =>
            {
                rest.to_string()
            }
            _ => l.to_string(),
        })
        .collect();
    assert!(
        uncommented.iter().filter(|l| *l == "[[upstreams]]").count() >= 2,
        "the example shows at least two [[upstreams]]"
    );
    // With `upstream` still set, the file is refused.
    let (ok, err) = check_config("fleet-both", &uncommented.join("\n"));
    assert!(!ok && err.contains("not both"), "{err}");
    // In place of `upstream`, it loads, with a session header too.
    let fleet: Vec<String> = uncommented
        .into_iter()
        .filter(|l| !l.starts_with("upstream = "))
        .map(|l| {
            if l.starts_with("session_header = ") {
                "session_header = \"x-session-id\"".into()
            } else {
                l
            }
        })
        .collect();
    let (ok, err) = check_config("fleet", &fleet.join("\n"));
    assert!(ok, "the example's fleet fails --check-config: {err}");
    // The example as shipped names the defaults.
    let parsed: toml::Value = toml::from_str(&example).unwrap();
    assert_eq!(
        parsed["routing"]["policy"].as_str(),
        Some("prefix_affinity")
    );
    assert_eq!(parsed["routing"]["session_header"].as_str(), Some(""));
}

#[test]
fn every_published_port_is_documented() {
    let c = compose();
    let observe = common::manual();
    let header = read("docker-compose.yml");
    for name in SERVICES {
        for (host, _) in ports(service(&c, name)) {
            assert!(
                observe.contains(&format!("| {host} "))
                    || observe.contains(&format!("| `{host}` ")),
                "the manual: no row for port {host} ({name})"
            );
            assert!(
                header.contains(&format!("#   {host} ")) || header.contains(&format!(", {host} ")),
                "docker-compose.yml header: port {host} ({name}) not listed"
            );
        }
    }
    assert!(
        observe.contains("latency-page.png"),
        "the manual shows the latency page screenshot"
    );
}
