//! Starting and stopping the processes under test: the scripted upstream,
//! llamatap, nginx (Debian's package) and LiteLLM's proxy (PyPI), each on a
//! free loopback port, with its files in the run's temporary directory.

use std::fs;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// LiteLLM's master key in the generated config (LiteLLM refuses to start
/// without one); the client sends it as a bearer token.
pub const LITELLM_KEY: &str = "sk-llamatap-bench-0123456789abcdef0123456789abcdef";

/// A free loopback port (bound, then released).
pub fn free_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr")
}

/// What kind of thing a variant is.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// Straight to the upstream.
    Direct,
    /// llamatap with `threads` workers; `full`: OTLP to the sink and metrics on,
    /// else tracing off and `[telemetry] metrics = false`.
    Llamatap {
        /// `--threads`.
        threads: usize,
        /// Full telemetry.
        full: bool,
        /// Use the `--llamatap-alt` binary (a candidate change, side by side).
        alt: bool,
    },
    /// nginx with `worker_processes`.
    Nginx {
        /// Worker processes.
        workers: usize,
    },
    /// LiteLLM's proxy with `--num_workers`.
    Litellm {
        /// Worker processes.
        workers: usize,
    },
}

impl Kind {
    /// Parses `direct`, `llamatap-full-t2`, `llamatap-off-t1`, `nginx-w2`, `litellm-w1`,
    /// and `alt-llamatap-…` (the same with the `--llamatap-alt` binary).
    pub fn parse(name: &str) -> Option<Kind> {
        let num = |s: &str| s.parse::<usize>().ok().filter(|n| *n > 0);
        if name == "direct" {
            return Some(Kind::Direct);
        }
        let (alt, name) = match name.strip_prefix("alt-") {
            Some(n) => (true, n),
            None => (false, name),
        };
        if let Some(rest) = name.strip_prefix("llamatap-") {
            let (mode, t) = rest.split_once("-t")?;
            let full = match mode {
                "full" => true,
                "off" => false,
                _ => return None,
            };
            return Some(Kind::Llamatap {
                threads: num(t)?,
                full,
                alt,
            });
        }
        if alt {
            return None;
        }
        if let Some(w) = name.strip_prefix("nginx-w") {
            return Some(Kind::Nginx { workers: num(w)? });
        }
        if let Some(w) = name.strip_prefix("litellm-w") {
            return Some(Kind::Litellm { workers: num(w)? });
        }
        None
    }
}

/// A started process under test.
pub struct Running {
    /// The child (None for `direct`).
    pub child: Option<Child>,
    /// Where clients connect.
    pub addr: SocketAddr,
    /// llamatap's admin listener.
    pub admin: Option<SocketAddr>,
    /// Its log file.
    pub log: Option<PathBuf>,
}

impl Running {
    /// Root pid of the process tree, if any.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stops the process tree: SIGTERM, then SIGKILL after 3 s.
    pub fn stop(&mut self) {
        let Some(c) = self.child.as_mut() else { return };
        let pids = crate::procs::tree(c.id());
        for p in &pids {
            // SAFETY: signalling processes this run started.
            unsafe {
                libc::kill(*p as i32, libc::SIGTERM);
            }
        }
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(3) {
            if let Ok(Some(_)) = c.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for p in pids {
            if Path::new(&format!("/proc/{p}")).exists() {
                // SAFETY: as above.
                unsafe {
                    libc::kill(p as i32, libc::SIGKILL);
                }
            }
        }
        let _ = c.wait();
    }

    /// The child exited already.
    pub fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
    }
}

fn log_files(dir: &Path, name: &str) -> (PathBuf, Stdio, Stdio) {
    let path = dir.join(format!("{name}.log"));
    let f = fs::File::create(&path).expect("log file");
    let g = f.try_clone().expect("log file");
    (path, Stdio::from(f), Stdio::from(g))
}

/// Starts the scripted upstream; returns it once it listens.
/// With `keepalive_after_stream` it keeps a connection open after a streamed
/// answer; by default it closes it, as llama-server does.
pub fn start_upstream(bin: &Path, dir: &Path, keepalive_after_stream: bool) -> Running {
    let (path, _, err) = log_files(dir, "sse-upstream");
    let mut child = Command::new(bin)
        .args(["--listen", "127.0.0.1:0"])
        .args(keepalive_after_stream.then_some("--keepalive-after-stream"))
        .stdout(Stdio::piped())
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    let out = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(out)
        .read_line(&mut line)
        .expect("upstream address");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("unexpected upstream output: {line}"));
    Running {
        child: Some(child),
        addr,
        admin: None,
        log: Some(path),
    }
}

/// Starts a variant in front of `upstream`.
#[allow(clippy::too_many_arguments)]
pub fn start(
    name: &str,
    kind: &Kind,
    upstream: SocketAddr,
    sink: SocketAddr,
    dir: &Path,
    llamatap: &Path,
    llamatap_alt: &Path,
    venv: &Path,
) -> std::io::Result<Running> {
    let addr = free_addr();
    match kind {
        Kind::Direct => Ok(Running {
            child: None,
            addr: upstream,
            admin: None,
            log: None,
        }),
        Kind::Llamatap { threads, full, alt } => {
            let admin = free_addr();
            let (log, out, err) = log_files(dir, name);
            let mut cmd = Command::new(if *alt { llamatap_alt } else { llamatap });
            cmd.arg("--listen")
                .arg(addr.to_string())
                .arg("--upstream")
                .arg(format!("http://{upstream}"))
                .arg("--admin-listen")
                .arg(admin.to_string())
                .arg("--threads")
                .arg(threads.to_string())
                .arg("--pid-file")
                .arg(dir.join(format!("{name}.pid")))
                .arg("--upgrade-sock")
                .arg(dir.join(format!("{name}.sock")));
            for k in [
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "OTEL_EXPORTER_OTLP_PROTOCOL",
                "LLAMATAP_CONFIG",
                "LLAMATAP_THREADS",
                "RUST_LOG",
            ] {
                cmd.env_remove(k);
            }
            if *full {
                cmd.arg("--otlp-endpoint")
                    .arg(format!("http://{sink}"))
                    .arg("--otlp-protocol")
                    .arg("http");
            } else {
                let cfg = dir.join(format!("{name}.toml"));
                fs::write(&cfg, "[telemetry]\nmetrics = false\n")?;
                cmd.arg("--config").arg(cfg);
            }
            let child = cmd.stdout(out).stderr(err).spawn()?;
            Ok(Running {
                child: Some(child),
                addr,
                admin: Some(admin),
                log: Some(log),
            })
        }
        Kind::Nginx { workers } => {
            let root = dir.join(name);
            fs::create_dir_all(root.join("tmp"))?;
            let conf = format!(
                r#"# nginx as a plain streaming proxy (generated by llamatap-bench)
daemon off;
master_process on;
worker_processes {workers};
worker_rlimit_nofile 20000;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{
    worker_connections 20000;
}}
http {{
    access_log off;
    client_body_temp_path {root}/tmp/body;
    proxy_temp_path {root}/tmp/proxy;
    fastcgi_temp_path {root}/tmp/fastcgi;
    uwsgi_temp_path {root}/tmp/uwsgi;
    scgi_temp_path {root}/tmp/scgi;
    keepalive_requests 1000000;
    upstream llama {{
        server {upstream};
        keepalive 1024;
        keepalive_requests 1000000;
        keepalive_timeout 4s;
    }}
    server {{
        listen {addr} backlog=4096;
        location / {{
            proxy_pass http://llama;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_read_timeout 600s;
            proxy_send_timeout 60s;
        }}
    }}
}}
"#,
                root = root.display()
            );
            let cf = root.join("nginx.conf");
            fs::write(&cf, conf)?;
            let (log, out, err) = log_files(dir, name);
            let child = Command::new("nginx")
                .arg("-p")
                .arg(&root)
                .arg("-c")
                .arg(&cf)
                .arg("-e")
                .arg(root.join("error.log"))
                .stdout(out)
                .stderr(err)
                .spawn()?;
            Ok(Running {
                child: Some(child),
                addr,
                admin: None,
                log: Some(log),
            })
        }
        Kind::Litellm { workers } => {
            let root = dir.join(name);
            fs::create_dir_all(&root)?;
            let cfg = root.join("config.yaml");
            fs::write(
                &cfg,
                format!(
                    r#"# LiteLLM's proxy in front of the scripted upstream (generated by llamatap-bench)
model_list:
  - model_name: tiny.gguf
    litellm_params:
      model: openai/tiny.gguf
      api_base: http://{upstream}/v1
      api_key: none
litellm_settings:
  telemetry: false
  request_timeout: 600
general_settings:
  master_key: {LITELLM_KEY}
"#
                ),
            )?;
            let bin = venv.join("bin/litellm");
            if !bin.exists() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!(
                        "{} not found (pip install 'litellm[proxy]' into {})",
                        bin.display(),
                        venv.display()
                    ),
                ));
            }
            let (log, out, err) = log_files(dir, name);
            let child = Command::new(bin)
                .arg("--config")
                .arg(&cfg)
                .arg("--host")
                .arg("127.0.0.1")
                .arg("--port")
                .arg(addr.port().to_string())
                .arg("--num_workers")
                .arg(workers.to_string())
                .current_dir(&root)
                .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
                .env("LITELLM_LOG", "ERROR")
                .env("NO_DOCS", "True")
                .env("DISABLE_ADMIN_UI", "True")
                .stdout(out)
                .stderr(err)
                .spawn()?;
            Ok(Running {
                child: Some(child),
                addr,
                admin: None,
                log: Some(log),
            })
        }
    }
}

/// Starts llama-server with the tiny model; waits for `/health`.
pub fn start_llama_server(bin: &Path, model: &Path, dir: &Path) -> std::io::Result<Running> {
    let addr = free_addr();
    let (log, out, err) = log_files(dir, "llama-server");
    let mut cmd = Command::new(bin);
    // llama-server computes (CPU-bound threads): it runs under the normal
    // scheduler, so that under SCHED_RR it cannot hold off the proxy and the
    // client, which only wake for I/O (the normal scheduler favours them too).
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            let p = libc::sched_param { sched_priority: 0 };
            libc::sched_setscheduler(0, libc::SCHED_OTHER, &p);
            Ok(())
        });
    }
    let child = cmd
        .arg("-m")
        .arg(model)
        .args(["--host", "127.0.0.1", "--port"])
        .arg(addr.port().to_string())
        .args(["--chat-template", "chatml", "--cache-ram", "0", "-t", "1"])
        .stdout(out)
        .stderr(err)
        .spawn()?;
    Ok(Running {
        child: Some(child),
        addr,
        admin: None,
        log: Some(log),
    })
}
