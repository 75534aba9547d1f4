//! The fleet's background service: at start, one health loop and one info
//! loop per configured member ([`super::watch`]) and one loop per
//! discovered name ([`super::discovery`]), all ended at shutdown; before
//! the listeners open, every configured URL resolved once
//! ([`UpstreamWatch::resolve_now`]).
//!
//! Deliberately not here: what each loop does.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::task::JoinSet;

use super::discovery::Discovered;
use super::watch::watch_member;
use super::Fleet;
use crate::config::discovery::Discovery;
use llamatap_telemetry::Telemetry;

/// The first address `host:port` resolves to (a blocking lookup).
fn resolve(address: &str) -> Option<SocketAddr> {
    address.to_socket_addrs().ok().and_then(|mut a| a.next())
}

/// The background service.
pub struct UpstreamWatch {
    fleet: Arc<Fleet>,
    telemetry: Arc<Telemetry>,
    model_refresh: Duration,
    discovery: Discovery,
}

impl UpstreamWatch {
    /// A watcher updating `fleet` and the model labels in `telemetry`,
    /// looking discovered names up as `discovery` says.
    pub fn new(
        fleet: Arc<Fleet>,
        telemetry: Arc<Telemetry>,
        model_refresh: Duration,
        discovery: Discovery,
    ) -> Self {
        UpstreamWatch {
            fleet,
            telemetry,
            model_refresh,
            discovery,
        }
    }

    /// Resolves every configured URL once, before the listeners open, so
    /// that a name that resolves is usable from the first request (a
    /// discovered name is looked up by its own loop, at once). `Err` names
    /// two upstreams that are one server (the same address and base path).
    pub fn resolve_now(fleet: &Fleet) -> Result<(), String> {
        for m in fleet.members() {
            if let Some(a) = resolve(&m.upstream.address) {
                m.set_address(a);
            }
        }
        let members = fleet.members();
        for (i, a) in members.iter().enumerate() {
            for b in members.iter().skip(i + 1) {
                if let (Some(x), Some(y)) = (a.address(), b.address()) {
                    if x == y && a.upstream.base_path == b.upstream.base_path {
                        return Err(format!(
                            "upstreams {} and {} are the same server ({x}{}); list it once",
                            a.upstream.name, b.upstream.name, a.upstream.base_path
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

#[async_trait]
impl BackgroundService for UpstreamWatch {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut loops = JoinSet::new();
        for m in self.fleet.members() {
            watch_member(
                &mut loops,
                &self.fleet,
                &self.telemetry,
                m,
                self.model_refresh,
            );
        }
        for (entry, u) in self.fleet.entries().iter().enumerate() {
            if u.discover {
                let found = Discovered::new(
                    self.fleet.clone(),
                    self.telemetry.clone(),
                    entry,
                    self.discovery.clone(),
                    self.model_refresh,
                );
                loops.spawn(found.run());
            }
        }
        let _ = shutdown.changed().await;
        loops.abort_all();
    }
}
