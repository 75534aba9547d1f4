//! The shared store of per-minute counts: Redis through the `redis` crate,
//! so that several llamatap replicas enforce one limit.
//!
//! Keys are `llamatap:{tenant}:{window}:req` and `…:tok` (the window is the
//! minute since the epoch, [`llamatap_policy::tenant::window`]); each lives two
//! minutes. A request's admission is one round trip (`INCR` the request
//! count, set its expiry, `GET` the token count, pipelined); a token charge
//! is `INCRBY` plus expiry, sent from a task of its own. Every exchange ends
//! with `ECHO` of a number of its own: a reply out of step (one extra or one
//! missing) fails that call and closes its connection, so it never shifts a
//! later exchange.
//!
//! At most [`MAX_CONNECTIONS`] connections are open at once, each carrying
//! one call at a time, so a slow answer delays only its own call; token
//! charges hold at most [`MAX_CHARGING`] of them, so they never starve
//! admissions. A connection goes back to the pool only after a complete,
//! well-formed exchange, and is reused for at most [`MAX_IDLE`]; one found
//! dead when reused (closed by Redis's `timeout`, a load balancer, a
//! restart) is replaced and the call sent once more on a fresh connection.
//! Every call, waiting for a connection and connecting included, is bounded
//! by `auth.store.timeout_ms`; a failure is that call's alone (no backoff:
//! the next call tries again). Changes of state (unreachable, reachable
//! again) are logged once each, with `host:port`, never the URL's
//! credentials. Deliberately not here: Sentinel and Cluster redirections;
//! what a failure means for a request (`on_error`) is [`crate::proxy::tenant`]'s;
//! the shared slots' scripts and channel are the admission queue's
//! ([`crate::admission::shared::store`]), sent through its generic `call`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};
use tokio::sync::Semaphore;

use crate::config::Store as StoreConfig;

/// Most connections open at once to the store, per replica.
pub const MAX_CONNECTIONS: usize = 16;
/// Most of them carrying count changes sent off the request's path (token
/// charges, counts taken back) at once.
pub const MAX_CHARGING: usize = MAX_CONNECTIONS / 2;
/// Longest an idle connection is kept for reuse.
pub const MAX_IDLE: Duration = Duration::from_secs(30);
/// Seconds a window's counters live in Redis (two windows).
const KEY_TTL_SECONDS: u64 = 120;
/// Longest reply text kept in an error.
const MAX_REPLY_TEXT: usize = 80;

/// Why a store call failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No answer within the timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// Connect, read or write failed, or Redis refused the connection's setup.
    #[error("{0}")]
    Redis(#[from] redis::RedisError),
    /// Redis answered an error, something unexpected or out of step.
    #[error("unexpected reply: {0}")]
    Reply(String),
}

impl StoreError {
    /// Whether the connection itself failed (worth one more try on a fresh one).
    fn is_dead_connection(&self) -> bool {
        matches!(self, StoreError::Redis(e) if e.is_connection_dropped() || e.is_io_error())
    }
}

/// An idle connection and since when.
struct Idle {
    conn: MultiplexedConnection,
    since: Instant,
}

/// The store client.
pub struct Store {
    cfg: StoreConfig,
    client: Result<redis::Client, String>,
    idle: Mutex<Vec<Idle>>,
    calls: Semaphore,
    charging: Semaphore,
    nonce: AtomicU64,
    up: AtomicBool,
    gauge: prometheus_client::metrics::gauge::Gauge,
    /// Per-minute limits are kept here: its changes of state are logged
    /// as the rate limits' (the shared slots log their own).
    limits: bool,
}

impl Store {
    /// A client for `cfg`; nothing is connected until the first call.
    /// `gauge` is set to 1 or 0 with the state.
    pub fn new(cfg: StoreConfig, gauge: prometheus_client::metrics::gauge::Gauge) -> Self {
        // `rediss://` needs a TLS provider; the first one installed stays.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = redis::IntoConnectionInfo::into_connection_info(cfg.url.expose())
            .map(|info| match &cfg.password {
                Some(p) => {
                    let settings = info.redis_settings().clone().set_password(p.expose());
                    info.set_redis_settings(settings)
                }
                None => info,
            })
            .and_then(redis::Client::open)
            .map_err(|_| "the store URL does not parse".to_string());
        Store {
            cfg,
            client,
            idle: Mutex::new(Vec::new()),
            calls: Semaphore::new(MAX_CONNECTIONS),
            charging: Semaphore::new(MAX_CHARGING),
            nonce: AtomicU64::new(0),
            up: AtomicBool::new(true),
            gauge,
            limits: true,
        }
    }

    /// Whether per-minute limits are kept here (default true): without,
    /// its changes of state are not logged as the rate limits'.
    pub fn with_limits(mut self, limits: bool) -> Self {
        self.limits = limits;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &StoreConfig {
        &self.cfg
    }

    /// Whether the last call succeeded.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Counts one request of `tenant` in `window`; the requests counted
    /// (this one included) and the tokens charged in that window.
    pub async fn admit(&self, tenant: &str, window: u64) -> Result<(u64, u64), StoreError> {
        let req = key(tenant, window, "req");
        let mut pipe = redis::pipe();
        pipe.cmd("INCR").arg(&req);
        pipe.cmd("EXPIRE").arg(&req).arg(KEY_TTL_SECONDS);
        pipe.cmd("GET").arg(key(tenant, window, "tok"));
        self.call(pipe, false, |v| match v {
            [Value::Int(requests), Value::Int(_), tokens] => {
                Ok((u64::try_from(*requests).unwrap_or(0), count(tokens)?))
            }
            other => Err(text(other)),
        })
        .await
    }

    /// Adds `delta` to `tenant`'s `kind` (`req` or `tok`) count of `window`.
    pub async fn add(
        &self,
        tenant: &str,
        window: u64,
        kind: &str,
        delta: i64,
    ) -> Result<(), StoreError> {
        let k = key(tenant, window, kind);
        let mut pipe = redis::pipe();
        pipe.cmd("INCRBY").arg(&k).arg(delta);
        pipe.cmd("EXPIRE").arg(&k).arg(KEY_TTL_SECONDS);
        self.call(pipe, true, |v| match v {
            [Value::Int(_), Value::Int(_)] => Ok(()),
            other => Err(text(other)),
        })
        .await
    }

    /// A subscription to `channel`, on a connection of its own (outside
    /// the pool), set up within the call timeout (at least a second).
    pub(crate) async fn subscribe(
        &self,
        channel: &str,
    ) -> Result<redis::aio::PubSubStream, StoreError> {
        let client = self
            .client
            .as_ref()
            .map_err(|e| StoreError::Reply(e.clone()))?;
        let bound = self.cfg.timeout.max(Duration::from_secs(1));
        let subscribe = async {
            let mut ps = client.get_async_pubsub().await?;
            ps.subscribe(channel).await?;
            Ok::<_, StoreError>(ps.into_on_message())
        };
        tokio::time::timeout(bound, subscribe)
            .await
            .map_err(|_| StoreError::Timeout(bound))?
    }

    /// Sends `pipe` and reads its replies with `read`, within the timeout;
    /// records the store's state. `background`: a count change sent off the
    /// request's path (a token charge, a count taken back).
    pub(crate) async fn call<T>(
        &self,
        pipe: redis::Pipeline,
        background: bool,
        read: impl Fn(&[Value]) -> Result<T, String>,
    ) -> Result<T, StoreError> {
        let timeout = self.cfg.timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        let attempt = self.attempt(pipe, background, deadline, read);
        let result = match tokio::time::timeout_at(deadline, attempt).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Timeout(timeout)),
        };
        self.record(&result);
        result
    }

    /// One call: on an idle connection or a new one, and once more on a new
    /// one if the idle one was dead. A cancelled call drops its connection;
    /// one that got its turn only at `deadline` connects to nothing.
    async fn attempt<T>(
        &self,
        mut pipe: redis::Pipeline,
        background: bool,
        deadline: tokio::time::Instant,
        read: impl Fn(&[Value]) -> Result<T, String>,
    ) -> Result<T, StoreError> {
        let closed = || StoreError::Reply("the client is shutting down".into());
        let _charging = match background {
            true => Some(self.charging.acquire().await.map_err(|_| closed())?),
            false => None,
        };
        let _permit = self.calls.acquire().await.map_err(|_| closed())?;
        if tokio::time::Instant::now() >= deadline {
            return Err(StoreError::Timeout(self.cfg.timeout));
        }
        let nonce = self.nonce.fetch_add(1, Ordering::Relaxed).to_string();
        pipe.cmd("ECHO").arg(&nonce);
        let reused = self.take_idle();
        let was_reused = reused.is_some();
        let conn = match reused {
            Some(c) => c,
            None => self.connect().await?,
        };
        let (conn, value) = match exchange(conn, &pipe, &nonce, &read).await {
            Err(e) if was_reused && e.is_dead_connection() => {
                exchange(self.connect().await?, &pipe, &nonce, &read).await?
            }
            other => other?,
        };
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(Idle {
                conn,
                since: Instant::now(),
            });
        }
        Ok(value)
    }

    /// The most recently used idle connection not older than [`MAX_IDLE`];
    /// older ones are closed.
    fn take_idle(&self) -> Option<MultiplexedConnection> {
        let mut idle = self.idle.lock().ok()?;
        idle.retain(|i| i.since.elapsed() < MAX_IDLE);
        idle.pop().map(|i| i.conn)
    }

    /// A new connection (its own timeouts off: the call's bounds it).
    async fn connect(&self) -> Result<MultiplexedConnection, StoreError> {
        let client = self
            .client
            .as_ref()
            .map_err(|e| StoreError::Reply(e.clone()))?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(None)
            .set_response_timeout(None);
        Ok(client
            .get_multiplexed_async_connection_with_config(&config)
            .await?)
    }

    /// Records a call's outcome: the gauge, and one log line per change.
    fn record<T>(&self, result: &Result<T, StoreError>) {
        match result {
            Ok(_) => {
                if !self.up.swap(true, Ordering::Relaxed) {
                    self.gauge.set(1);
                    if !self.limits {
                        return;
                    }
                    tracing::info!(
                        store = self.cfg.address.as_str(),
                        "rate-limit store reachable again; limits are shared across replicas"
                    );
                }
            }
            Err(e) => {
                if self.up.swap(false, Ordering::Relaxed) {
                    self.gauge.set(0);
                    if !self.limits {
                        return;
                    }
                    let fallback = match self.cfg.on_error {
                        crate::config::OnError::Allow => {
                            "each replica now enforces the limits on its own (on_error = allow)"
                        }
                        crate::config::OnError::Deny => {
                            "limited tenants are refused with 503 until it is back (on_error = deny)"
                        }
                    };
                    tracing::warn!(
                        store = self.cfg.address.as_str(),
                        "rate-limit store unreachable ({e}); {fallback}"
                    );
                }
            }
        }
    }
}

/// Sends `pipe` on `conn`; the connection back with `read`'s value only if
/// every reply came, the last is `nonce`'s echo and `read` accepts the rest.
async fn exchange<T>(
    mut conn: MultiplexedConnection,
    pipe: &redis::Pipeline,
    nonce: &str,
    read: &impl Fn(&[Value]) -> Result<T, String>,
) -> Result<(MultiplexedConnection, T), StoreError> {
    let replies = conn.send_packed_commands(pipe, 0, pipe.len()).await?;
    match replies.split_last() {
        Some((Value::BulkString(echo), rest)) if echo.as_slice() == nonce.as_bytes() => {
            let value = read(rest).map_err(StoreError::Reply)?;
            Ok((conn, value))
        }
        _ => Err(StoreError::Reply(format!(
            "out of step: {}",
            text(&replies)
        ))),
    }
}

/// A token count: nil (none yet) or a decimal integer.
fn count(v: &Value) -> Result<u64, String> {
    match v {
        Value::Nil => Ok(0),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
            .map(|n| u64::try_from(n).unwrap_or(0))
            .ok_or_else(|| format!("token count {}", text(std::slice::from_ref(v)))),
        other => Err(text(std::slice::from_ref(other))),
    }
}

/// Replies as text for an error, cut to [`MAX_REPLY_TEXT`] characters.
pub(crate) fn text(replies: &[Value]) -> String {
    let all = format!("{replies:?}");
    if all.chars().count() <= MAX_REPLY_TEXT {
        return all;
    }
    all.chars().take(MAX_REPLY_TEXT).chain(['…']).collect()
}

/// `llamatap:{tenant}:{window}:{kind}` (the braces keep a tenant's keys in
/// one Redis Cluster slot).
fn key(tenant: &str, window: u64, kind: &str) -> String {
    format!("llamatap:{{{tenant}}}:{window}:{kind}")
}

#[cfg(test)]
pub(crate) mod standin;
#[cfg(test)]
mod tests;
