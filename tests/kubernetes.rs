//! deploy/kubernetes/ is valid Kubernetes and agrees with llamatap, without a
//! cluster: every manifest passes the schemas of pinned Kubernetes versions
//! (kubernetes-validate, offline, strict); the kustomizations list every file;
//! Services, the StatefulSet and the disruption budget select the pods and
//! ports they mean; and the manifests agree with the code: the ports llamatap
//! listens on given its flags, environment, image and config file, its admin
//! paths, its flags and environment variables, its config keys (the real
//! loader, `--check-config`), the headless Service as its upstream, and a
//! termination grace period that covers its SIGTERM drain. llama-server runs
//! as in docker-compose.yml, with `--metrics` and `/health` probes.
//!
//! Needs `LLAMATAP_PYTHON` (scripts/ensure-deps.sh) with kubernetes-validate;
//! without it, the schema test fails and says so.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Deserialize;
use serde_yaml::Value as Yaml;

/// Kubernetes versions whose schemas every manifest passes: the oldest one
/// the manifests are for (a `preStop` `sleep` action needs 1.30 or later) and
/// the newest one the pinned kubernetes-validate bundles.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.31.0", "1.37.0"];
/// The kubernetes-validate release scripts/ensure-deps.sh installs.
const KUBERNETES_VALIDATE: &str = "1.37.0";
/// Kinds that come with a CRD: kubernetes-validate has no schema for them
/// (it warns and passes), so this file checks them field by field.
const CRD_KINDS: [&str; 1] = ["ServiceMonitor"];
/// The folder under test.
const DIR: &str = "deploy/kubernetes";
/// Seconds the kubelet gets beyond the preStop sleep and llamatap's own grace
/// period, before it kills the container.
const KILL_MARGIN_SECONDS: u64 = 5;

// === files ===

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every file under deploy/kubernetes/, relative to it, sorted.
fn files() -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).unwrap();
                out.push(rel.to_str().unwrap().to_string());
            }
        }
    }
    let root = repo().join(DIR);
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out.sort();
    out
}

fn is_kustomization(rel: &str) -> bool {
    Path::new(rel).file_name().and_then(|n| n.to_str()) == Some("kustomization.yaml")
}

/// The YAML documents of a file under deploy/kubernetes/ (`---` separates
/// them); empty ones are skipped, as kubectl does.
fn documents(rel: &str) -> Vec<Yaml> {
    let text = read(&format!("{DIR}/{rel}"));
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Yaml::deserialize(d).unwrap_or_else(|e| panic!("{rel}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

/// The manifest files: every YAML file but the kustomizations.
fn manifest_files() -> Vec<String> {
    files()
        .into_iter()
        .filter(|f| f.ends_with(".yaml") && !is_kustomization(f))
        .collect()
}

/// Every object of every manifest file, with its file.
fn objects() -> Vec<(String, Yaml)> {
    manifest_files()
        .into_iter()
        .flat_map(|f| documents(&f).into_iter().map(move |d| (f.clone(), d)))
        .collect()
}

fn kind(o: &Yaml) -> &str {
    o["kind"].as_str().expect("every object has a kind")
}

fn name(o: &Yaml) -> &str {
    o["metadata"]["name"]
        .as_str()
        .expect("every object has a name")
}

/// The one object of `kind` named `name`.
fn object<'a>(all: &'a [(String, Yaml)], k: &str, n: &str) -> &'a Yaml {
    let found: Vec<&Yaml> = all
        .iter()
        .map(|(_, o)| o)
        .filter(|o| kind(o) == k && name(o) == n)
        .collect();
    assert_eq!(found.len(), 1, "{DIR}: expected one {k} {n}");
    found[0]
}

/// A scalar as a string (YAML numbers too).
fn scalar(v: &Yaml) -> String {
    match v {
        Yaml::String(s) => s.clone(),
        Yaml::Number(n) => n.to_string(),
        Yaml::Bool(b) => b.to_string(),
        other => panic!("not a scalar: {other:?}"),
    }
}

/// A list of scalars as strings; absent is empty.
fn strings(v: &Yaml) -> Vec<String> {
    v.as_sequence().into_iter().flatten().map(scalar).collect()
}

/// A mapping of string to scalar (labels, selectors, annotations).
fn string_map(v: &Yaml) -> BTreeMap<String, String> {
    v.as_mapping()
        .into_iter()
        .flatten()
        .map(|(k, v)| (scalar(k), scalar(v)))
        .collect()
}

/// Whether `labels` carry every pair of `selector`.
fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// `a/b/../c` as `a/c`.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                assert!(out.pop(), "{} leaves {DIR}", p.display());
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

// === pods and containers ===

/// The Deployments and StatefulSets: (name, pod template).
fn workloads(all: &[(String, Yaml)]) -> Vec<(String, &Yaml)> {
    all.iter()
        .map(|(_, o)| o)
        .filter(|o| matches!(kind(o), "Deployment" | "StatefulSet"))
        .map(|o| (name(o).to_string(), &o["spec"]["template"]))
        .collect()
}

/// The container named `n` of a pod template.
fn container<'a>(template: &'a Yaml, n: &str) -> &'a Yaml {
    template["spec"]["containers"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|c| c["name"].as_str() == Some(n))
        .unwrap_or_else(|| panic!("no container {n}"))
}

/// A container's ports by name.
fn container_ports(c: &Yaml) -> BTreeMap<String, u16> {
    c["ports"]
        .as_sequence()
        .into_iter()
        .flatten()
        .map(|p| {
            let n = p["name"].as_str().expect("every container port is named");
            (n.to_string(), p["containerPort"].as_u64().unwrap() as u16)
        })
        .collect()
}

/// The entry of Service `host`'s ports whose `port` is `port`.
fn service_port<'a>(svc: &'a Yaml, host: &str, port: u16) -> &'a Yaml {
    svc["spec"]["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|p| p["port"].as_u64() == Some(port.into()))
        .unwrap_or_else(|| panic!("Service {host} has no port {port}"))
}

/// A port given by name or number, as a number of one of `ports`.
fn resolve_port(ports: &BTreeMap<String, u16>, port: &Yaml) -> Option<u16> {
    match port {
        Yaml::Number(n) => {
            let n = n.as_u64().unwrap() as u16;
            ports.values().any(|p| *p == n).then_some(n)
        }
        Yaml::String(s) => ports.get(s).copied(),
        _ => None,
    }
}

/// A probe's HTTP path and port number.
fn http_probe(c: &Yaml, probe: &str) -> (String, u16) {
    let get = &c[probe]["httpGet"];
    assert!(
        get.is_mapping(),
        "{}: {probe} is no httpGet",
        scalar(&c["name"])
    );
    let port = resolve_port(&container_ports(c), &get["port"])
        .unwrap_or_else(|| panic!("{probe}: port {:?} is none of the container's", get["port"]));
    (get["path"].as_str().unwrap().to_string(), port)
}

/// A container's environment: name to its entry (`value` or `valueFrom`), in order.
fn env(c: &Yaml) -> Vec<(String, Yaml)> {
    c["env"]
        .as_sequence()
        .into_iter()
        .flatten()
        .map(|e| (e["name"].as_str().unwrap().to_string(), e.clone()))
        .collect()
}

fn env_value(c: &Yaml, var: &str) -> Option<String> {
    env(c)
        .into_iter()
        .find(|(n, _)| n == var)
        .and_then(|(_, e)| e["value"].as_str().map(str::to_string))
}

/// `host:port` of a listen address.
fn split_addr(addr: &str) -> (String, u16) {
    let (host, port) = addr
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("{addr}: no port"));
    (host.to_string(), port.parse().unwrap())
}

/// `http://host:port` of a URL (port defaults to 80), and its path.
fn url_parts(url: &str) -> (String, u16, String) {
    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("{url}: http:// only (this build has no TLS)"));
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (h, p.parse().unwrap()),
        None => (authority, 80),
    };
    (host.to_string(), port, path.to_string())
}

// === the Dockerfile and the code ===

/// The `ENV` of the Dockerfile's last stage (what the image runs with).
fn image_env() -> BTreeMap<String, String> {
    let text = read("Dockerfile").replace("\\\n", " ");
    let last_stage = text.rsplit("\nFROM ").next().unwrap();
    let mut out = BTreeMap::new();
    for line in last_stage.lines() {
        if let Some(rest) = line.trim().strip_prefix("ENV ") {
            for pair in rest.split_whitespace() {
                let (k, v) = pair.split_once('=').expect("ENV K=V");
                out.insert(k.to_string(), v.to_string());
            }
        }
    }
    out
}

/// The argument of the Dockerfile's last `instruction` line (`USER`, `STOPSIGNAL`).
fn dockerfile_instruction(instruction: &str) -> Option<String> {
    read("Dockerfile")
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{instruction} ")))
        .next_back()
        .map(|v| v.trim().to_string())
}

/// A `pub const NAME: &str = "value";` of src/config.rs.
fn config_default(constant: &str) -> String {
    let src = read("src/config.rs");
    let prefix = format!("pub const {constant}: &str = \"");
    let line = src
        .lines()
        .find_map(|l| l.trim().strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("src/config.rs has no {constant}"));
    line.split('"').next().unwrap().to_string()
}

/// The long flags `llamatap --help` lists.
fn known_flags() -> BTreeSet<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_llamatap"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .filter(|w| w.starts_with("--"))
        .map(|w| {
            w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
                .split(['=', '<', '['])
                .next()
                .unwrap()
                .to_string()
        })
        .collect()
}

/// `llamatap --check-config` on `content`: (success, stderr).
fn check_config(name: &str, content: &str) -> (bool, String) {
    check_config_with(name, content, &[])
}

/// The same with environment variables `vars` set.
fn check_config_with(name: &str, content: &str, vars: &[(&str, &str)]) -> (bool, String) {
    let file = common::temp_config(name, content);
    let out = Command::new(env!("CARGO_BIN_EXE_llamatap"))
        .arg("--check-config")
        .arg(&file)
        .envs(vars.iter().copied())
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// === llamatap's pod ===

/// llamatap as the Deployment runs it.
struct Llamatap {
    deployment: Yaml,
    container: Yaml,
    args: Vec<String>,
    config_text: String,
    config: toml::Value,
}

impl Llamatap {
    fn from(all: &[(String, Yaml)]) -> Llamatap {
        let deployment = object(all, "Deployment", "llamatap").clone();
        let container = container(&deployment["spec"]["template"], "llamatap").clone();
        assert!(
            container["command"].is_null(),
            "llamatap: keep the image's entrypoint; give flags as args"
        );
        let args = strings(&container["args"]);
        // The config file: --config (or LLAMATAP_CONFIG), a key of the
        // ConfigMap mounted on its folder.
        let path = common::flag(&args, "--config")
            .or_else(|| env_value(&container, "LLAMATAP_CONFIG"))
            .expect("llamatap is given its config file");
        let (dir, file) = path.rsplit_once('/').unwrap();
        let mount = container["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|m| m["mountPath"].as_str() == Some(dir))
            .unwrap_or_else(|| panic!("nothing mounted at {dir}"));
        let volume = deployment["spec"]["template"]["spec"]["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap();
        let map = volume["configMap"]["name"]
            .as_str()
            .expect("the config folder is a ConfigMap");
        let config_text = object(all, "ConfigMap", map)["data"][file]
            .as_str()
            .unwrap_or_else(|| panic!("ConfigMap {map} has no key {file}"))
            .to_string();
        let config =
            toml::from_str(&config_text).unwrap_or_else(|e| panic!("ConfigMap {map} {file}: {e}"));
        Llamatap {
            deployment,
            container,
            args,
            config_text,
            config,
        }
    }

    fn pod(&self) -> &Yaml {
        &self.deployment["spec"]["template"]["spec"]
    }

    /// What llamatap uses for a setting, by its precedence: the flag, else
    /// the variable in the pod, else in the image, else the config file's
    /// top-level key; `None` when none sets it (the built-in default).
    fn setting(&self, flag_name: &str, var: &str, key: &str) -> Option<String> {
        common::flag(&self.args, flag_name)
            .or_else(|| env_value(&self.container, var))
            .or_else(|| image_env().get(var).cloned())
            .or_else(|| {
                self.config.get(key).map(|v| match v {
                    toml::Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
            })
    }

    /// The variable `[auth.store] password_env` names, if any.
    fn store_password_env(&self) -> Option<String> {
        self.config
            .get("auth")
            .and_then(|a| a.get("store"))
            .and_then(|s| s.get("password_env"))
            .and_then(|v| v.as_str())
            .map(str::to_string)
    }

    fn listen(&self) -> String {
        self.setting("--listen", "LLAMATAP_LISTEN", "listen")
            .unwrap_or_else(|| config_default("DEFAULT_LISTEN"))
    }

    fn admin_listen(&self) -> String {
        self.setting("--admin-listen", "LLAMATAP_ADMIN_LISTEN", "admin_listen")
            .unwrap_or_else(|| config_default("DEFAULT_ADMIN_LISTEN"))
    }
}

// === the tests ===

#[test]
fn kustomizations_list_every_manifest_once_and_nothing_else() {
    let files = files();
    let all = objects();
    let namespace = all
        .iter()
        .find(|(_, o)| kind(o) == "Namespace")
        .map(|(_, o)| name(o).to_string())
        .expect("a Namespace manifest");
    let mut listed: BTreeMap<String, String> = BTreeMap::new();
    for k in files.iter().filter(|f| is_kustomization(f)) {
        let docs = documents(k);
        assert_eq!(docs.len(), 1, "{k}");
        let doc = &docs[0];
        assert_eq!(
            doc["apiVersion"].as_str(),
            Some("kustomize.config.k8s.io/v1beta1"),
            "{k}"
        );
        assert_eq!(doc["kind"].as_str(), Some("Kustomization"), "{k}");
        assert_eq!(
            doc["namespace"].as_str(),
            Some(namespace.as_str()),
            "{k}: everything goes to the Namespace manifest's namespace"
        );
        let base = Path::new(k).parent().unwrap();
        for r in strings(&doc["resources"]) {
            let target = normalize(&base.join(&r));
            let target = target.to_str().unwrap().to_string();
            let as_dir = if target.is_empty() {
                "kustomization.yaml".to_string()
            } else {
                format!("{target}/kustomization.yaml")
            };
            if files.contains(&as_dir) {
                // A base: the kustomization of another folder.
                assert_ne!(&as_dir, k, "{k} includes itself");
                continue;
            }
            assert!(files.contains(&target), "{k}: {r} does not exist");
            if let Some(other) = listed.insert(target.clone(), k.clone()) {
                panic!("{target} is listed by {other} and {k}: kustomize refuses duplicates");
            }
        }
    }
    let manifests: BTreeSet<String> = manifest_files().into_iter().collect();
    let listed_files: BTreeSet<String> = listed.keys().cloned().collect();
    assert_eq!(
        listed_files, manifests,
        "every manifest of {DIR} is listed by a kustomization, and only those"
    );
    // Nothing but manifests, kustomizations and the README.
    for f in &files {
        assert!(
            f.ends_with(".yaml") || f == "README.md",
            "{DIR}/{f}: unexpected file"
        );
    }
    // The top kustomization applies to a cluster without CRDs.
    for (f, o) in &all {
        if CRD_KINDS.contains(&kind(o)) {
            assert_ne!(
                listed[f],
                "kustomization.yaml",
                "{f}: a {} needs its CRD; keep it out of the top kustomization",
                kind(o)
            );
        }
        assert!(
            o["metadata"]["namespace"].is_null(),
            "{f}: {}: the kustomization sets the namespace",
            name(o)
        );
    }
    // Each object once.
    let mut seen = BTreeSet::new();
    for (f, o) in &all {
        assert!(
            seen.insert((kind(o).to_string(), name(o).to_string())),
            "{f}: {} {} twice",
            kind(o),
            name(o)
        );
    }
}

/// The interpreter with kubernetes-validate: `LLAMATAP_PYTHON`, else the
/// venv scripts/ensure-deps.sh makes. Fails loudly without it.
fn python() -> PathBuf {
    let py = common::python();
    let probe = Command::new(&py)
        .args([
            "-c",
            "import kubernetes_validate.version as v; print(v.__version__)",
        ])
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run scripts/ensure-deps.sh and set LLAMATAP_PYTHON",
                py.display()
            )
        });
    assert!(
        probe.status.success(),
        "{} has no kubernetes-validate; run scripts/ensure-deps.sh: {}",
        py.display(),
        String::from_utf8_lossy(&probe.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&probe.stdout).trim(),
        KUBERNETES_VALIDATE,
        "kubernetes-validate is not the release scripts/ensure-deps.sh pins"
    );
    py
}

/// `python -m kubernetes_validate --strict -k ...` on `files` (relative to
/// deploy/kubernetes/; `-` reads `stdin`): (success, stdout).
fn kubernetes_validate(files: &[String], stdin: Option<&str>) -> (bool, String) {
    let mut cmd = Command::new(python());
    cmd.args(["-m", "kubernetes_validate", "--strict"]);
    for v in KUBERNETES_VERSIONS {
        cmd.args(["-k", v]);
    }
    let mut child = cmd
        .args(files)
        .current_dir(repo().join(DIR))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `1.31.0` as kubernetes-validate reports it: `1.31`.
fn major_minor(v: &str) -> &str {
    v.rsplit_once('.').unwrap().0
}

#[test]
fn every_manifest_passes_the_pinned_kubernetes_schemas_strictly() {
    let files = manifest_files();
    let (ok, out) = kubernetes_validate(&files, None);
    assert!(ok, "kubernetes-validate failed:\n{out}");
    let lines: BTreeSet<&str> = out.lines().collect();
    let mut expected = BTreeSet::new();
    for (f, o) in objects() {
        for v in KUBERNETES_VERSIONS {
            let line = if CRD_KINDS.contains(&kind(&o)) {
                format!(
                    "WARN {f} Couldn't find schema for kind {} with api version {} for kubernetes version {}",
                    kind(&o),
                    scalar(&o["apiVersion"]),
                    major_minor(v)
                )
            } else {
                format!(
                    "INFO {f} passed for resource {}/{} against version {}",
                    kind(&o).to_lowercase(),
                    name(&o),
                    major_minor(v)
                )
            };
            assert!(lines.contains(line.as_str()), "missing `{line}` in:\n{out}");
            expected.insert(line);
        }
    }
    // Nothing else: no warning about a kind without a schema beyond the CRDs.
    let extra: Vec<&&str> = lines.iter().filter(|l| !expected.contains(**l)).collect();
    assert!(
        extra.is_empty(),
        "unexpected kubernetes-validate output: {extra:?}"
    );

    // Strict means strict: a misspelled field fails.
    let broken = read(&format!("{DIR}/llamatap-deployment.yaml")).replacen(
        "periodSeconds:",
        "periodSecond:",
        1,
    );
    let (ok, out) = kubernetes_validate(&["-".to_string()], Some(&broken));
    assert!(
        !ok && out.contains("'periodSecond' was unexpected"),
        "a misspelled field passed:\n{out}"
    );
}

#[test]
fn services_and_the_disruption_budget_select_the_pods_they_name() {
    let all = objects();
    let workloads = workloads(&all);
    for (n, template) in &workloads {
        let o = all
            .iter()
            .map(|(_, o)| o)
            .find(|o| matches!(kind(o), "Deployment" | "StatefulSet") && name(o) == n)
            .unwrap();
        let selector = string_map(&o["spec"]["selector"]["matchLabels"]);
        let labels = string_map(&template["metadata"]["labels"]);
        assert!(
            selects(&selector, &labels),
            "{n}: its selector does not match its pod labels"
        );
    }
    // Each Service selects the pods of exactly one workload, and its ports
    // target ports of their containers.
    for (f, svc) in all.iter().filter(|(_, o)| kind(o) == "Service") {
        let selector = string_map(&svc["spec"]["selector"]);
        let matched: Vec<&(String, &Yaml)> = workloads
            .iter()
            .filter(|(_, t)| selects(&selector, &string_map(&t["metadata"]["labels"])))
            .collect();
        assert_eq!(
            matched.len(),
            1,
            "{f}: Service {} selects {} workloads",
            name(svc),
            matched.len()
        );
        let template = matched[0].1;
        let mut ports = BTreeMap::new();
        for c in template["spec"]["containers"].as_sequence().unwrap() {
            ports.extend(container_ports(c));
        }
        for p in svc["spec"]["ports"].as_sequence().unwrap() {
            assert!(p["name"].is_string(), "{f}: name every Service port");
            let target = if p["targetPort"].is_null() {
                &p["port"]
            } else {
                &p["targetPort"]
            };
            assert!(
                resolve_port(&ports, target).is_some(),
                "{f}: port {:?} targets no container port of {}",
                p["name"],
                matched[0].0
            );
        }
    }
    // The disruption budget covers the llamatap pods, and lets one go.
    let pdbs: Vec<&Yaml> = all
        .iter()
        .map(|(_, o)| o)
        .filter(|o| kind(o) == "PodDisruptionBudget")
        .collect();
    assert_eq!(pdbs.len(), 1);
    let selector = string_map(&pdbs[0]["spec"]["selector"]["matchLabels"]);
    let covered: Vec<&str> = workloads
        .iter()
        .filter(|(_, t)| selects(&selector, &string_map(&t["metadata"]["labels"])))
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(covered, ["llamatap"]);
    let replicas = object(&all, "Deployment", "llamatap")["spec"]["replicas"]
        .as_u64()
        .unwrap();
    assert!(replicas >= 2, "llamatap runs at least two replicas");
    let min = pdbs[0]["spec"]["minAvailable"]
        .as_u64()
        .expect("minAvailable as a count");
    assert!(
        (1..replicas).contains(&min),
        "minAvailable {min} of {replicas}: keeps one, lets one go"
    );
}

#[test]
fn llamatap_pods_expose_the_ports_it_listens_on_and_probe_its_admin_paths() {
    let all = objects();
    let l = Llamatap::from(&all);
    let (listen_host, listen) = split_addr(&l.listen());
    let (admin_host, admin) = split_addr(&l.admin_listen());
    for (what, host) in [("listen", &listen_host), ("admin_listen", &admin_host)] {
        assert_eq!(
            host, "0.0.0.0",
            "{what}: all interfaces, or neither Service nor kubelet reaches it"
        );
    }
    let ports = container_ports(&l.container);
    let want: BTreeMap<String, u16> = [("http".to_string(), listen), ("admin".to_string(), admin)]
        .into_iter()
        .collect();
    assert_eq!(
        ports, want,
        "container ports are llamatap's listeners, named http and admin"
    );

    // The admin paths the probes and Prometheus use are ones it serves.
    let admin_src = read("src/admin.rs");
    for path in ["/healthz", "/readyz", "/metrics"] {
        assert!(
            admin_src.contains(&format!("\"{path}\" =>")),
            "src/admin.rs serves no {path}"
        );
    }
    assert_eq!(
        http_probe(&l.container, "livenessProbe"),
        ("/healthz".to_string(), admin)
    );
    assert_eq!(
        http_probe(&l.container, "readinessProbe"),
        ("/readyz".to_string(), admin)
    );

    let annotations = string_map(&l.deployment["spec"]["template"]["metadata"]["annotations"]);
    assert_eq!(
        annotations.get("prometheus.io/scrape").map(String::as_str),
        Some("true")
    );
    assert_eq!(
        annotations.get("prometheus.io/port"),
        Some(&admin.to_string())
    );
    assert_eq!(
        annotations.get("prometheus.io/path").map(String::as_str),
        Some("/metrics")
    );
}

#[test]
fn llamatap_is_given_only_flags_and_variables_it_reads() {
    let all = objects();
    let l = Llamatap::from(&all);
    let known = known_flags();
    for a in l.args.iter().filter(|a| a.starts_with("--")) {
        let f = a.split('=').next().unwrap();
        assert!(known.contains(f), "llamatap has no flag {f} (--help)");
    }

    // Each variable is one llamatap reads (src/cli.rs names it), or the
    // OpenTelemetry SDK reads (its resource detector; README lists it), or
    // a helper another variable expands with $(NAME), defined before it.
    let cli = read("src/cli.rs");
    let readme = common::manual();
    let spans = read("crates/llamatap-telemetry/src/spans.rs");
    let vars = env(&l.container);
    let mut defined = BTreeSet::new();
    for (i, (var, entry)) in vars.iter().enumerate() {
        let value = entry["value"].as_str().unwrap_or_default();
        for reference in value.split("$(").skip(1) {
            let r = reference.split(')').next().unwrap();
            assert!(
                defined.contains(r),
                "{var}: $({r}) is not defined before it"
            );
        }
        defined.insert(var.clone());
        let read_by_llamatap = cli.contains(&format!("\"{var}\""))
            || l.store_password_env().as_deref() == Some(var.as_str());
        let read_by_sdk = var == "OTEL_RESOURCE_ATTRIBUTES"
            && spans.contains("Resource::builder()")
            && readme.contains(&format!("`{var}`"));
        let helper = vars[i + 1..].iter().any(|(_, e)| {
            e["value"]
                .as_str()
                .is_some_and(|v| v.contains(&format!("$({var})")))
        });
        assert!(
            read_by_llamatap || read_by_sdk || helper,
            "{var}: llamatap reads no such variable"
        );
    }

    // OTLP through the standard variables: an http:// endpoint on the port
    // of its protocol; a sampler src/cli.rs knows.
    let endpoint = env_value(&l.container, "OTEL_EXPORTER_OTLP_ENDPOINT")
        .expect("OTEL_EXPORTER_OTLP_ENDPOINT");
    assert!(
        common::flag(&l.args, "--otlp-endpoint").is_none(),
        "the OTLP endpoint comes from OTEL_EXPORTER_OTLP_ENDPOINT"
    );
    let protocol = env_value(&l.container, "OTEL_EXPORTER_OTLP_PROTOCOL").unwrap_or("grpc".into());
    let (_, port, _) = url_parts(&endpoint);
    assert_eq!(
        (protocol.as_str(), port),
        if protocol == "grpc" {
            ("grpc", 4317)
        } else {
            ("http", 4318)
        }
    );
    if let Some(sampler) = env_value(&l.container, "OTEL_TRACES_SAMPLER") {
        assert!(
            cli.contains(&format!("\"{sampler}\"")),
            "OTEL_TRACES_SAMPLER={sampler}: src/cli.rs ignores it"
        );
    }
    assert_eq!(
        env_value(&l.container, "OTEL_SERVICE_NAME").as_deref(),
        Some("llamatap")
    );
}

#[test]
fn config_map_loads_with_the_real_config_loader() {
    let all = objects();
    let l = Llamatap::from(&all);

    // The file as shipped, through the real loader (unknown keys are
    // refused), with the variables of the pod that come from Secrets set.
    let secret_vars: Vec<String> = env(&l.container)
        .into_iter()
        .filter(|(_, e)| !e["valueFrom"]["secretKeyRef"].is_null())
        .map(|(n, _)| n)
        .collect();
    let vars: Vec<(&str, &str)> = secret_vars
        .iter()
        .map(|v| (v.as_str(), "a-password"))
        .collect();
    let (ok, err) = check_config_with("k8s-whole", &l.config_text, &vars);
    assert!(
        ok,
        "the ConfigMap's llamatap.toml fails --check-config: {err}"
    );
    // Without the Secret's variable it is refused, naming it.
    if let Some(var) = l.store_password_env() {
        let (ok, err) = check_config("k8s-no-secret", &l.config_text);
        assert!(!ok && err.contains(&var), "{err}");
    }
    // DNS discovery with a refresh range the loader accepts.
    let discovery = l.config["discovery"]
        .as_table()
        .expect("a [discovery] table");
    let min = discovery["min_refresh_ms"].as_integer().unwrap();
    let max = discovery["max_refresh_ms"].as_integer().unwrap();
    assert!(0 < min && min <= max, "refresh range {min}..{max} ms");
    for u in l.config["upstreams"].as_array().unwrap() {
        if let Some(d) = u.get("discover") {
            assert_eq!(d.as_str(), Some("dns"), "discover = \"dns\"");
        }
    }
}

#[test]
fn llamatap_upstream_is_the_headless_llama_server_service() {
    let all = objects();
    let l = Llamatap::from(&all);
    // The file's upstream, not one from a flag or variable.
    assert!(common::flag(&l.args, "--upstream").is_none());
    assert!(env_value(&l.container, "LLAMATAP_UPSTREAM").is_none());
    assert!(!image_env().contains_key("LLAMATAP_UPSTREAM"));
    assert!(l.config.get("upstream").is_none());
    let upstreams = l.config["upstreams"].as_array().unwrap();
    assert_eq!(upstreams.len(), 1, "one entry: the headless Service");
    let u = &upstreams[0];
    assert_eq!(
        u["discover"].as_str(),
        Some("dns"),
        "every pod behind the name"
    );
    let (host, port, path) = url_parts(u["url"].as_str().unwrap());
    assert_eq!(path, "", "llama-server's base URL, no path");

    // The host is a headless Service listing only ready pods, on that port.
    let svc = object(&all, "Service", &host);
    assert_eq!(svc["spec"]["clusterIP"].as_str(), Some("None"));
    assert_eq!(
        svc["spec"]["publishNotReadyAddresses"].as_bool(),
        Some(false),
        "DNS lists only pods whose /health says ready"
    );
    let svc_port = service_port(svc, &host, port);

    // A headless Service's DNS gives pod addresses: the URL's port is the
    // pods' own, where llama-server listens (--port).
    let sts = object(&all, "StatefulSet", "llama-server");
    assert_eq!(sts["spec"]["serviceName"].as_str(), Some(host.as_str()));
    let c = container(&sts["spec"]["template"], "llama-server");
    let target = resolve_port(&container_ports(c), &svc_port["targetPort"]).unwrap();
    assert_eq!(target, port, "a headless Service does not remap ports");
    let server_port: u16 = common::flag(&strings(&c["args"]), "--port")
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(server_port, port, "llama-server --port");
}

#[test]
fn the_queue_is_on_and_shared_through_the_redis_service() {
    let all = objects();
    let l = Llamatap::from(&all);
    let queue = l.config["queue"].as_table().expect("a [queue] table");
    assert_eq!(queue["enabled"].as_bool(), Some(true), "queue.enabled");
    assert_eq!(queue["shared"].as_bool(), Some(true), "queue.shared");
    // The store is the Redis Service, on the port its pods listen on.
    let url = l.config["auth"]["store"]["url"]
        .as_str()
        .expect("[auth.store] url");
    let rest = url.strip_prefix("redis://").expect("a redis:// URL");
    let (host, port) = split_addr(rest.trim_end_matches('/'));
    let svc = object(&all, "Service", &host);
    let svc_port = service_port(svc, &host, port);
    let selector = string_map(&svc["spec"]["selector"]);
    let redis = workloads(&all)
        .into_iter()
        .find(|(_, t)| selects(&selector, &string_map(&t["metadata"]["labels"])))
        .map(|(_, t)| t)
        .unwrap_or_else(|| panic!("Service {host} selects no workload"));
    let c = container(redis, "redis");
    let target = resolve_port(&container_ports(c), &svc_port["targetPort"]).unwrap();
    let args = strings(&c["args"]);
    let listens: u16 = common::flag(&args, "--port").unwrap().parse().unwrap();
    assert_eq!(target, listens, "the Service reaches redis-server's --port");
    // Nothing kept on disk: leases and minute counts are short-lived.
    assert_eq!(common::flag(&args, "--appendonly").as_deref(), Some("no"));
}

/// The Secret and key an environment entry reads, if it reads one.
fn secret_ref(entry: &Yaml) -> Option<(String, String)> {
    let r = &entry["valueFrom"]["secretKeyRef"];
    Some((
        r["name"].as_str()?.to_string(),
        r["key"].as_str()?.to_string(),
    ))
}

/// The pod template of the workload `Service host` selects.
fn served_by<'a>(all: &'a [(String, Yaml)], host: &str) -> &'a Yaml {
    let selector = string_map(&object(all, "Service", host)["spec"]["selector"]);
    workloads(all)
        .into_iter()
        .find(|(_, t)| selects(&selector, &string_map(&t["metadata"]["labels"])))
        .map(|(_, t)| t)
        .unwrap_or_else(|| panic!("Service {host} selects no workload"))
}

#[test]
fn redis_takes_a_password_from_a_secret_and_admits_only_llamatap_pods() {
    let all = objects();
    let l = Llamatap::from(&all);
    let url = l.config["auth"]["store"]["url"].as_str().unwrap();
    let rest = url.strip_prefix("redis://").unwrap();
    assert!(!rest.contains('@'), "no password in the ConfigMap's URL");
    let (host, _) = split_addr(rest.trim_end_matches('/'));
    let redis = served_by(&all, &host);
    let c = container(redis, "redis");
    let redis_env = env(c);

    // redis-server requires the password of a Secret's key...
    let args = strings(&c["args"]);
    let required = common::flag(&args, "--requirepass").expect("redis-server --requirepass");
    let var = required
        .strip_prefix("$(")
        .and_then(|v| v.strip_suffix(')'))
        .unwrap_or_else(|| panic!("--requirepass {required}: not a $(VARIABLE)"));
    let (secret, key) = redis_env
        .iter()
        .find(|(n, _)| n == var)
        .and_then(|(_, e)| secret_ref(e))
        .unwrap_or_else(|| panic!("{var} does not come from a Secret"));
    let s = object(&all, "Secret", &secret);
    assert!(
        !s["stringData"][key.as_str()].is_null() || !s["data"][key.as_str()].is_null(),
        "Secret {secret} has no key {key}"
    );
    // ...which its probes (redis-cli) log in with...
    for probe in ["readinessProbe", "livenessProbe"] {
        let cmd = strings(&c[probe]["exec"]["command"]);
        assert_eq!(
            cmd.first().map(String::as_str),
            Some("redis-cli"),
            "{probe}"
        );
    }
    let cli = redis_env
        .iter()
        .find(|(n, _)| n == "REDISCLI_AUTH")
        .and_then(|(_, e)| secret_ref(e));
    assert_eq!(cli, Some((secret.clone(), key.clone())), "REDISCLI_AUTH");
    // ...and llamatap gives: password_env names a variable of its pod that
    // reads the same Secret's key.
    let password_env = l.store_password_env().expect("[auth.store] password_env");
    let given = env(&l.container)
        .into_iter()
        .find(|(n, _)| *n == password_env)
        .and_then(|(_, e)| secret_ref(&e));
    assert_eq!(
        given,
        Some((secret, key)),
        "{password_env}: the Secret redis-server's password comes from"
    );

    // One NetworkPolicy selects the Redis pods; it admits, on redis-server's
    // port only, only pods of the llamatap Deployment.
    let redis_labels = string_map(&redis["metadata"]["labels"]);
    let policies: Vec<&Yaml> = all
        .iter()
        .map(|(_, o)| o)
        .filter(|o| kind(o) == "NetworkPolicy")
        .filter(|o| {
            selects(
                &string_map(&o["spec"]["podSelector"]["matchLabels"]),
                &redis_labels,
            )
        })
        .collect();
    assert_eq!(
        policies.len(),
        1,
        "one NetworkPolicy selects the Redis pods"
    );
    let spec = &policies[0]["spec"];
    assert!(
        strings(&spec["policyTypes"]).contains(&"Ingress".to_string()),
        "it restricts ingress"
    );
    assert!(spec["podSelector"]["matchExpressions"].is_null());
    let listens: u16 = common::flag(&args, "--port").unwrap().parse().unwrap();
    let ports = container_ports(c);
    let rules = spec["ingress"].as_sequence().expect("ingress rules");
    assert!(!rules.is_empty(), "an empty list would admit nobody");
    for rule in rules {
        let from = rule["from"]
            .as_sequence()
            .expect("every rule names its peers");
        assert!(!from.is_empty(), "a rule without peers admits everyone");
        for peer in from {
            assert!(
                peer["namespaceSelector"].is_null() && peer["ipBlock"].is_null(),
                "a peer beyond this namespace's pods: {peer:?}"
            );
            assert!(peer["podSelector"]["matchExpressions"].is_null());
            let selector = string_map(&peer["podSelector"]["matchLabels"]);
            let admitted: Vec<String> = workloads(&all)
                .into_iter()
                .filter(|(_, t)| selects(&selector, &string_map(&t["metadata"]["labels"])))
                .map(|(n, _)| n)
                .collect();
            assert_eq!(admitted, ["llamatap"], "the pods the rule admits");
        }
        let rule_ports = rule["ports"].as_sequence().expect("a rule names its ports");
        assert!(
            !rule_ports.is_empty(),
            "a rule without ports admits every port"
        );
        for p in rule_ports {
            assert_eq!(p["protocol"].as_str().unwrap_or("TCP"), "TCP");
            assert_eq!(resolve_port(&ports, &p["port"]), Some(listens), "{p:?}");
            assert!(p["endPort"].is_null());
        }
    }
}

#[test]
fn termination_grace_period_covers_the_prestop_sleep_and_the_sigterm_drain() {
    let all = objects();
    let l = Llamatap::from(&all);
    // SIGTERM drains (src/shutdown.rs); the image stops with SIGTERM.
    assert!(read("src/shutdown.rs").contains("SignalKind::terminate()"));
    assert_eq!(
        dockerfile_instruction("STOPSIGNAL").as_deref(),
        Some("SIGTERM")
    );
    let grace: u64 = l
        .setting(
            "--grace-period-seconds",
            "LLAMATAP_GRACE_PERIOD_SECONDS",
            "grace_period_seconds",
        )
        .expect("set grace_period_seconds, so the pod's grace period matches a visible number")
        .parse()
        .unwrap();
    let pre_stop = &l.container["lifecycle"]["preStop"];
    let sleep = pre_stop["sleep"]["seconds"]
        .as_u64()
        .expect("a preStop sleep, so endpoints drop the pod before SIGTERM");
    assert!(
        (3..=15).contains(&sleep),
        "preStop sleep {sleep} s: a few seconds"
    );
    let termination = l.pod()["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("terminationGracePeriodSeconds");
    assert!(
        termination >= sleep + grace + KILL_MARGIN_SECONDS,
        "terminationGracePeriodSeconds {termination} < preStop {sleep} + grace {grace} + margin {KILL_MARGIN_SECONDS}"
    );
}

#[test]
fn llamatap_runs_the_image_compose_builds_as_its_user() {
    let all = objects();
    let l = Llamatap::from(&all);
    let compose: Yaml = serde_yaml::from_str(&read("docker-compose.yml")).unwrap();
    let built = &compose["services"]["llamatap"];
    assert_eq!(built["build"]["dockerfile"].as_str(), Some("Dockerfile"));
    assert_eq!(
        l.container["image"].as_str(),
        built["image"].as_str(),
        "the image docker-compose.yml builds from the Dockerfile"
    );
    assert_eq!(
        l.container["imagePullPolicy"].as_str(),
        Some("IfNotPresent"),
        "a local build is in no registry"
    );
    let user = dockerfile_instruction("USER").unwrap();
    assert_eq!(
        l.pod()["securityContext"]["runAsUser"]
            .as_u64()
            .map(|u| u.to_string()),
        Some(user)
    );
    // A read-only root: the files the image writes (PID file, upgrade
    // socket) are on a writable emptyDir.
    if l.container["securityContext"]["readOnlyRootFilesystem"].as_bool() == Some(true) {
        let empty_dirs: BTreeSet<String> = l.pod()["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .filter(|v| v["emptyDir"].is_mapping())
            .map(|v| scalar(&v["name"]))
            .collect();
        let writable: Vec<String> = l.container["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .filter(|m| empty_dirs.contains(&scalar(&m["name"])))
            .map(|m| scalar(&m["mountPath"]))
            .collect();
        for var in ["LLAMATAP_PID_FILE", "LLAMATAP_UPGRADE_SOCK"] {
            let path = env_value(&l.container, var)
                .or_else(|| image_env().get(var).cloned())
                .unwrap();
            assert!(
                writable.iter().any(|w| path.starts_with(&format!("{w}/"))),
                "{var}={path} is on the read-only root"
            );
        }
    }
}

#[test]
fn llama_server_runs_as_in_compose_with_metrics_and_health_probes() {
    let all = objects();
    let sts = object(&all, "StatefulSet", "llama-server");
    let c = container(&sts["spec"]["template"], "llama-server");
    assert!(
        c["command"].is_null(),
        "the image's entrypoint is llama-server: give args"
    );
    let args = strings(&c["args"]);
    let compose: Yaml = serde_yaml::from_str(&read("docker-compose.yml")).unwrap();
    let replica = &compose["services"]["llama-server-a"];
    assert_eq!(c["image"], replica["image"]);
    let compose_args = strings(&replica["command"]);
    // The same model, label and serving flags as compose, so the dashboards
    // and docs apply; the port is the pod's own.
    for f in [
        "--hf-repo",
        "--hf-file",
        "--alias",
        "--ctx-size",
        "--parallel",
        "--cache-ram",
    ] {
        assert_eq!(
            common::flag(&args, f),
            common::flag(&compose_args, f),
            "llama-server {f}"
        );
    }
    for f in ["--metrics", "--jinja"] {
        assert!(args.iter().any(|a| a == f), "llama-server needs {f}");
    }
    assert_eq!(common::flag(&args, "--host").as_deref(), Some("0.0.0.0"));
    let ports = container_ports(c);
    let port: u16 = common::flag(&args, "--port").unwrap().parse().unwrap();
    assert_eq!(
        ports.get("http"),
        Some(&port),
        "containerPort http is --port"
    );

    // The model cache is the volume claim template's volume.
    let claims: BTreeSet<String> = sts["spec"]["volumeClaimTemplates"]
        .as_sequence()
        .expect("a volume claim template for the model")
        .iter()
        .map(|t| scalar(&t["metadata"]["name"]))
        .collect();
    let cache = env_value(c, "LLAMA_CACHE").expect("LLAMA_CACHE");
    assert!(
        c["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .any(|m| claims.contains(&scalar(&m["name"]))
                && m["mountPath"].as_str() == Some(cache.as_str())),
        "LLAMA_CACHE={cache} is on the claimed volume"
    );

    // /health (503 while loading) for every probe; a start long enough to
    // download the model, a liveness slow to give up.
    for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
        assert_eq!(
            http_probe(c, probe),
            ("/health".to_string(), port),
            "{probe}"
        );
    }
    let budget = |p: &str| {
        c[p]["periodSeconds"].as_u64().unwrap_or(10)
            * c[p]["failureThreshold"].as_u64().unwrap_or(3)
    };
    assert!(
        budget("startupProbe") >= 600,
        "startupProbe: at least 10 minutes to download and load the model"
    );
    assert!(
        budget("livenessProbe") >= 60,
        "livenessProbe: a minute of silence at least"
    );
}

/// ServiceMonitor fields of the Prometheus operator's monitoring.coreos.com/v1
/// API reference that these manifests may use.
const SERVICE_MONITOR_SPEC: [&str; 6] = [
    "selector",
    "endpoints",
    "namespaceSelector",
    "jobLabel",
    "targetLabels",
    "podTargetLabels",
];
const SERVICE_MONITOR_ENDPOINT: [&str; 8] = [
    "port",
    "path",
    "scheme",
    "interval",
    "scrapeTimeout",
    "honorLabels",
    "relabelings",
    "metricRelabelings",
];

/// A Prometheus duration such as `15s` or `1m30s`, in seconds.
fn duration_seconds(d: &str) -> u64 {
    let mut total = 0;
    let mut digits = String::new();
    for ch in d.chars() {
        if ch.is_ascii_digit() {
            digits.push(ch);
            continue;
        }
        let n: u64 = digits.parse().unwrap_or_else(|_| panic!("duration {d}"));
        digits.clear();
        total += n * match ch {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            _ => panic!("duration {d}: unit {ch}"),
        };
    }
    assert!(digits.is_empty(), "duration {d}: no unit");
    total
}

#[test]
fn service_monitor_scrapes_the_admin_port_of_the_metrics_service() {
    let all = objects();
    let l = Llamatap::from(&all);
    let (_, admin) = split_addr(&l.admin_listen());
    let monitors: Vec<&Yaml> = all
        .iter()
        .map(|(_, o)| o)
        .filter(|o| kind(o) == "ServiceMonitor")
        .collect();
    assert_eq!(monitors.len(), 1);
    let sm = monitors[0];
    assert_eq!(sm["apiVersion"].as_str(), Some("monitoring.coreos.com/v1"));
    for k in sm.as_mapping().unwrap().keys() {
        assert!(
            ["apiVersion", "kind", "metadata", "spec"].contains(&scalar(k).as_str()),
            "ServiceMonitor: {k:?}"
        );
    }
    for k in sm["spec"].as_mapping().unwrap().keys() {
        assert!(
            SERVICE_MONITOR_SPEC.contains(&scalar(k).as_str()),
            "ServiceMonitor spec: unknown field {k:?}"
        );
    }
    // It selects exactly one Service (same namespace), the one on llamatap's
    // admin port.
    let selector = string_map(&sm["spec"]["selector"]["matchLabels"]);
    let selected: Vec<&Yaml> = all
        .iter()
        .map(|(_, o)| o)
        .filter(|o| {
            kind(o) == "Service" && selects(&selector, &string_map(&o["metadata"]["labels"]))
        })
        .collect();
    assert_eq!(selected.len(), 1, "the ServiceMonitor selects one Service");
    let svc = selected[0];
    // The job label the alerting rules expect: the Service's `jobLabel`
    // label, else the Service's name.
    let job = match sm["spec"]["jobLabel"].as_str() {
        Some(label) => string_map(&svc["metadata"]["labels"])
            .get(label)
            .cloned()
            .unwrap_or_else(|| panic!("Service {} has no label {label}", name(svc))),
        None => name(svc).to_string(),
    };
    assert!(
        read("conf/prometheus/rules.yml").contains(&format!("up{{job=\"{job}\"}}")),
        "conf/prometheus/rules.yml does not watch job=\"{job}\""
    );
    let endpoints = sm["spec"]["endpoints"].as_sequence().unwrap();
    assert!(!endpoints.is_empty());
    let llamatap_ports = container_ports(&l.container);
    for e in endpoints {
        for k in e.as_mapping().unwrap().keys() {
            assert!(
                SERVICE_MONITOR_ENDPOINT.contains(&scalar(k).as_str()),
                "ServiceMonitor endpoint: unknown field {k:?}"
            );
        }
        let port_name = e["port"].as_str().expect("endpoints name a Service port");
        let p = svc["spec"]["ports"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|p| p["name"].as_str() == Some(port_name))
            .unwrap_or_else(|| panic!("Service {} has no port {port_name}", name(svc)));
        assert_eq!(
            resolve_port(&llamatap_ports, &p["targetPort"]),
            Some(admin),
            "the scraped port is llamatap's admin listener"
        );
        assert_eq!(e["path"].as_str(), Some("/metrics"));
        let interval = duration_seconds(e["interval"].as_str().unwrap());
        let timeout = duration_seconds(e["scrapeTimeout"].as_str().unwrap());
        assert!(
            0 < timeout && timeout <= interval,
            "scrapeTimeout within interval"
        );
    }
}

#[test]
fn readme_names_every_file_and_the_commands() {
    let readme = read(&format!("{DIR}/README.md"));
    for f in files().iter().filter(|f| *f != "README.md") {
        assert!(
            readme.contains(f.as_str()),
            "{DIR}/README.md: {f} not described"
        );
    }
    for command in [
        "kubectl apply -k deploy/kubernetes",
        "kubectl apply -k deploy/kubernetes/prometheus-operator",
        "statefulset/llama-server --replicas=3",
        "/readyz",
        "/metrics",
    ] {
        assert!(readme.contains(command), "{DIR}/README.md: no `{command}`");
    }
}
