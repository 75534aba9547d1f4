//! Signals and exit, with deadlines that hold whatever the trace collector does:
//!
//! - `SIGINT`: exit at once. No drain, no span flush.
//! - `SIGTERM`: stop accepting, let in-flight requests finish, flush spans,
//!   all within `grace_period_seconds` of the signal; exit as soon as both are
//!   done, and at the end of the grace period at the latest.
//! - `SIGQUIT`: hand the listening sockets to a new process (`--upgrade`);
//!   once Pingora has sent them and stopped accepting (it accepts alongside
//!   the new process for 5 s first), drain and flush as for `SIGTERM`. The
//!   process never exits before that, in flight or not: an exit before the
//!   sockets were sent would close them, and refuse every connection until
//!   the new process bound its own.
//!
//! Pingora itself would sleep the whole grace period after `SIGTERM` and flush
//! nothing; the exit here happens on a thread of its own, which watches the
//! in-flight count. It deliberately does not wait for idle keep-alive
//! connections: Pingora closes them when the listeners stop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pingora::server::{ExecutionPhase, ShutdownSignal, ShutdownSignalWatch};
use tokio::sync::broadcast::{self, error::RecvError};

use crate::pidfile::PidFile;
use llamatap_telemetry::Telemetry;

/// Time Pingora's listeners get to stop before the in-flight count is trusted:
/// a connection accepted just before holds no request yet.
const LISTENERS_STOP: Duration = Duration::from_millis(50);
/// How often the in-flight count is checked while draining.
const DRAIN_POLL: Duration = Duration::from_millis(20);

/// llamatap's signal handling, given to Pingora's `Server::run`.
pub struct Signals {
    telemetry: Arc<Telemetry>,
    grace: Duration,
    /// The server's execution phases (`Server::watch_execution_phase`).
    phases: std::sync::Mutex<Option<broadcast::Receiver<ExecutionPhase>>>,
    /// The PID file, removed on every way out (if still this process's).
    pid_file: Option<Arc<PidFile>>,
}

impl Signals {
    /// Signal handling that drains `telemetry`'s in-flight requests for at
    /// most `grace`; `phases` tells when a hand-over is done; `pid_file`
    /// is removed at exit.
    pub fn new(
        telemetry: Arc<Telemetry>,
        grace: Duration,
        phases: broadcast::Receiver<ExecutionPhase>,
        pid_file: Option<Arc<PidFile>>,
    ) -> Self {
        Signals {
            telemetry,
            grace,
            phases: std::sync::Mutex::new(Some(phases)),
            pid_file,
        }
    }
}

#[async_trait]
impl ShutdownSignalWatch for Signals {
    async fn recv(&self) -> ShutdownSignal {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int), Ok(mut quit)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::quit()),
        ) else {
            tracing::error!("cannot install signal handlers; llamatap stops only when killed");
            std::future::pending::<()>().await;
            return ShutdownSignal::FastShutdown;
        };
        let pid_file = self.pid_file.clone();
        let shutdown = tokio::select! {
            _ = int.recv() => exit_now(pid_file.as_deref()),
            _ = term.recv() => {
                tracing::info!(
                    inflight = self.telemetry.inflight(),
                    grace_seconds = self.grace.as_secs(),
                    "SIGTERM: draining in-flight requests"
                );
                let (telemetry, deadline) = (self.telemetry.clone(), Instant::now() + self.grace);
                let pid_file = pid_file.clone();
                on_own_thread(move || drain_and_exit(&telemetry, deadline, pid_file.as_deref()));
                ShutdownSignal::GracefulTerminate
            }
            _ = quit.recv() => {
                tracing::info!("SIGQUIT: handing the listeners over");
                let (telemetry, grace) = (self.telemetry.clone(), self.grace);
                let phases = self.phases.lock().ok().and_then(|mut p| p.take());
                let pid_file = pid_file.clone();
                on_own_thread(move || {
                    if let Some(phases) = phases {
                        wait_handed_over(phases);
                    }
                    tracing::info!(
                        inflight = telemetry.inflight(),
                        grace_seconds = grace.as_secs(),
                        "listeners handed over: draining in-flight requests"
                    );
                    drain_and_exit(&telemetry, Instant::now() + grace, pid_file.as_deref())
                });
                ShutdownSignal::GracefulUpgrade
            }
        };
        // A SIGINT during the drain still exits at once.
        tokio::spawn(async move {
            if int.recv().await.is_some() {
                exit_now(pid_file.as_deref());
            }
        });
        shutdown
    }
}

/// Exits the process now: requests in flight are cut, queued spans are lost.
fn exit_now(pid_file: Option<&PidFile>) -> ! {
    tracing::info!("SIGINT: exiting now, without draining or flushing spans");
    exit(pid_file)
}

/// Removes the PID file (if still this process's) and exits with 0.
fn exit(pid_file: Option<&PidFile>) -> ! {
    if let Some(p) = pid_file {
        p.remove();
    }
    std::process::exit(0)
}

/// Runs `f` on a thread of its own.
fn on_own_thread(f: impl FnOnce() + Send + 'static) {
    let spawned = std::thread::Builder::new()
        .name("llamatap-drain".into())
        .spawn(f);
    if spawned.is_err() {
        tracing::error!("cannot start the drain thread; waiting the full grace period");
    }
}

/// Waits until Pingora, after `SIGQUIT`, has sent the listening sockets and
/// stopped accepting on them: the hand-over is done, only a drain is left.
fn wait_handed_over(mut phases: broadcast::Receiver<ExecutionPhase>) {
    loop {
        match phases.blocking_recv() {
            Ok(ExecutionPhase::ShutdownStarted) | Err(RecvError::Closed) => return,
            Ok(_) | Err(RecvError::Lagged(_)) => {}
        }
    }
}

/// Waits until no request is in flight, flushes spans with the time left,
/// and exits; `deadline` bounds all of it.
fn drain_and_exit(telemetry: &Telemetry, deadline: Instant, pid_file: Option<&PidFile>) -> ! {
    let left = || deadline.saturating_duration_since(Instant::now());
    std::thread::sleep(LISTENERS_STOP.min(left()));
    while telemetry.inflight() > 0 && !left().is_zero() {
        std::thread::sleep(DRAIN_POLL.min(left()));
    }
    telemetry.shutdown(left());
    let cut = telemetry.inflight();
    if cut > 0 {
        tracing::warn!(
            inflight = cut,
            "grace period over: exiting with requests still in flight"
        );
    } else {
        tracing::info!("drained: exiting");
    }
    exit(pid_file)
}
