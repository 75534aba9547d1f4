//! Assembles the Pingora server: the proxy service, the admin service and the
//! upstream watcher, with llamatap's own signal handling ([`crate::shutdown`]).
//!
//! Startup failures (a port in use, telemetry that cannot start) come back as
//! one-line [`StartError`]s; nothing here panics.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use pingora::apps::http_app::HttpServer;
use pingora::listeners::{L4BufferSettings, ListenerConfig};
use pingora::server::configuration::{Opt, ServerConf};
use pingora::server::{RunArgs, Server};
use pingora::services::background::background_service;
use pingora::services::listening::Service;

use crate::admin::AdminApp;
use crate::cli::{Cli, Listener};
use crate::config::Config;
use crate::fleet::service::UpstreamWatch;
use crate::fleet::Fleet;
use crate::pidfile::{PidFile, PidFileError};
use crate::proxy::moves::DrainWatch;
use crate::proxy::LlamaProxy;
use crate::shutdown::Signals;
use llamatap_telemetry::{Telemetry, TelemetryError};

/// A startup failure.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listener address cannot be bound.
    #[error("cannot listen on {addr} ({what}, set by {set_by}): {source}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// Which listener.
        what: &'static str,
        /// The flag, variable or config key that gave the address.
        set_by: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Two configured upstreams are one server.
    #[error("{0}")]
    Upstreams(String),
    /// Telemetry failed to start.
    #[error(transparent)]
    Telemetry(#[from] TelemetryError),
    /// The PID file cannot be written, or belongs to another llamatap.
    #[error(transparent)]
    PidFile(#[from] PidFileError),
}

/// Runs llamatap until shutdown.
pub fn run(config: Config, cli: &Cli) -> Result<(), StartError> {
    if !cli.upgrade {
        check_bind(config.listen, "proxy", cli, Listener::Proxy)?;
        check_bind(config.admin_listen, "admin", cli, Listener::Admin)?;
    }
    let pid_file = match cli
        .pid_file
        .as_deref()
        .filter(|p| !p.as_os_str().is_empty())
    {
        Some(path) => Some(Arc::new(PidFile::create(path, cli.upgrade)?)),
        None => None,
    };
    let config = Arc::new(config);
    let first = &config.upstreams[0];
    let telemetry = Telemetry::start(&llamatap_telemetry::Start {
        settings: &config.telemetry,
        upstreams: config
            .upstreams
            .iter()
            .filter(|u| !u.discover)
            .map(|u| u.name.as_str())
            .collect(),
        default_server: (first.host.as_str(), first.port),
        tenants: config.tenants.label_values(),
        model_aliases: &config.model_aliases,
        recent_requests: config.recent_requests,
    })?;
    let fleet = Arc::new(Fleet::new(&config));
    UpstreamWatch::resolve_now(&fleet).map_err(StartError::Upstreams)?;

    let conf = ServerConf {
        threads: config.threads,
        grace_period_seconds: Some(config.grace_period.as_secs()),
        graceful_shutdown_timeout_seconds: Some(1),
        // Pingora writes its pid_file only when it daemonizes, which
        // llamatap never does: the PID file is llamatap's ([`PidFile`]).
        pid_file: String::new(),
        upgrade_sock: cli.upgrade_sock.clone(),
        // Pingora's fast timeouts keep every timer (one per 10 ms deadline per
        // thread) until its deadline, even after the read it guarded finished
        // or the request was dropped: with a 600 s read timeout that retained
        // ten minutes of timers (~160 B each). Longer timeouts use Tokio's,
        // which are freed on cancel.
        fast_timeout_to_tokio_threshold_seconds: Some(1),
        ..ServerConf::default()
    };
    let opt = Opt {
        upgrade: cli.upgrade,
        ..Opt::default()
    };
    let mut server = Server::new_with_opt_and_conf(opt, conf);
    server.bootstrap();

    let proxy = LlamaProxy::new(config.clone(), telemetry.clone(), fleet.clone());
    // With `queue.shared`, the view of the other replicas is read in the
    // background.
    let admission = proxy.admission();
    let slots = admission.shared_slots();
    let slot_sync = admission
        .slot_sync()
        .map(|sync| background_service("llamatap shared slots", sync));
    // Answers on a member that drains move to another after
    // `continuation.drain_after_ms` (fleets only).
    let drains = (fleet.is_fleet() && config.continuation.enabled).then(|| {
        background_service(
            "llamatap drain watch",
            DrainWatch {
                moves: proxy.moves(),
                fleet: fleet.clone(),
                after: config.continuation.drain_after,
            },
        )
    });
    let mut proxy_service = pingora::proxy::http_proxy_service_with_name(
        &server.configuration,
        proxy,
        "llamatap proxy",
    );
    // No L4 read buffer on client connections: Pingora's default gives each
    // accepted connection a zeroed 64 KiB buffer, which only pays off for TLS's
    // small record reads. Plain HTTP reads go straight into the header and
    // body buffers: one copy fewer, and 64 KiB less heap per connection (of
    // which only the pages touched were resident).
    proxy_service.add_listener(
        ListenerConfig::tcp(config.listen.to_string())
            .l4_buffer(L4BufferSettings::default().read(0)),
    );

    let admin = AdminApp::new(telemetry.clone(), fleet.clone(), config.jaeger_url.clone())
        .with_slots(slots);
    let mut admin_service = Service::new("llamatap admin".to_string(), HttpServer::new_app(admin));
    admin_service.add_tcp(&config.admin_listen.to_string());
    admin_service.threads = Some(1);

    let watch = background_service(
        "llamatap upstream watch",
        UpstreamWatch::new(
            fleet,
            telemetry.clone(),
            config.model_refresh,
            config.discovery.clone(),
        ),
    );

    server.add_service(proxy_service);
    server.add_service(admin_service);
    server.add_service(watch);
    if let Some(d) = drains {
        server.add_service(d);
    }
    if let Some(s) = slot_sync {
        server.add_service(s);
    }
    // One line for the start, with what an operator checks first.
    let fleet = config.upstreams.len() > 1;
    let tenants: Vec<&str> = config
        .tenants
        .list()
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    let tenants = tenants.join(",");
    tracing::info!(
        admin = %config.admin_listen,
        upstreams = %join(&config, |u| u.name.clone()),
        upstream_urls = %join(&config, |u| format!("http://{}{}", u.address, u.base_path)),
        routing = fleet.then(|| config.routing.policy.as_str()),
        queue = if config.queue.enabled { "on" } else { "off" },
        tenants = (!tenants.is_empty()).then(|| tracing::field::display(&tenants)),
        pid_file = pid_file.as_ref().map(|p| tracing::field::display(p.path().display())),
        "llamatap listening on {}",
        config.listen,
    );
    let phases = server.watch_execution_phase();
    server.run(RunArgs {
        shutdown_signal: Box::new(Signals::new(
            telemetry.clone(),
            config.grace_period,
            phases,
            pid_file.clone(),
        )),
    });
    // Only reached when the drain thread could not start: the grace period
    // has passed already, so no time is left to flush.
    telemetry.shutdown(Duration::ZERO);
    if let Some(p) = &pid_file {
        p.remove();
    }
    Ok(())
}

/// `f` of each upstream, comma-separated, in configuration order.
fn join(config: &Config, f: impl Fn(&crate::config::UpstreamConfig) -> String) -> String {
    config.upstreams.iter().map(f).collect::<Vec<_>>().join(",")
}

/// Binds `addr` once, so that a taken address fails now, in one line
/// naming the flag or key that set it.
fn check_bind(
    addr: std::net::SocketAddr,
    what: &'static str,
    cli: &Cli,
    which: Listener,
) -> Result<(), StartError> {
    TcpListener::bind(addr)
        .map(drop)
        .map_err(|source| StartError::Bind {
            addr,
            what,
            set_by: cli.listener_source(which),
            source,
        })
}
