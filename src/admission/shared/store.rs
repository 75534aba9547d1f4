//! Slot leases in the shared store: what lets several llamatap replicas
//! grant an upstream's slots as one queue would.
//!
//! Keys (all under the `{llamatap-slots}` hash tag, so one script may touch
//! them together):
//! - `llamatap:{llamatap-slots}:lease:<address>`: a sorted set per upstream,
//!   a lease id per granted slot, scored by its expiry (ms, Redis's clock);
//! - `llamatap:{llamatap-slots}:replicas`: each replica's id, scored by
//!   its expiry (the heartbeat);
//! - `llamatap:{llamatap-slots}:waiting`: a hash, per replica the requests
//!   waiting in its queue by class (`interactive,default,batch`), then a
//!   line `<class>:<model>` per model they wait for.
//!
//! A grant is one script ([`ACQUIRE`]): expired leases are dropped, and a
//! lease is added only while the set holds fewer than the upstream's slots,
//! so no two replicas ever grant the same slot. Only leases a replica could
//! have written count, in a grant and in the view alike: a lease (or a
//! heartbeat) whose expiry lies more than two lease lives ahead, or a lease
//! of a replica not registered, is removed by the script that meets it, so
//! entries written by something else cannot hold slots. Leases are renewed while
//! their streams run and removed when they end; a replica that dies leaves
//! leases that expire on their own. Times come from Redis (`TIME`), never
//! from a replica's clock.
//!
//! Deliberately not here: when to lease, renew or fall back (the shared
//! slots' `Shared`), and the connections, timeouts and the
//! store's state (the generic client, [`crate::store`]).

use std::sync::Arc;

use redis::Value;

use crate::store::{text, Store, StoreError};

mod waiting;

use waiting::{read_waiting, waiting_field};
pub use waiting::{Models, MAX_MODELS, MAX_MODEL_NAME};

/// What every script starts with: `now` (ms, Redis's clock), and the
/// rules of what counts. An entry (lease or heartbeat) counts only while
/// its expiry lies in `(now, now + 2 × ttl]`: one life ahead, plus one
/// life of margin for renewal and for replicas whose `lease_ms` differs
/// during a roll-out; one further ahead was never written by a replica (a
/// forged or corrupted entry) and is removed. A lease counts only while its
/// replica (its id up to the last `:`) is registered, and is removed
/// otherwise.
macro_rules! prelude {
    () => {
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function alive(score, latest)
  if not score then return false end
  score = tonumber(score)
  return score > now and score <= latest
end
local function drop_unbounded(key, latest)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  redis.call('ZREMRANGEBYSCORE', key, string.format('(%d', latest), '+inf')
end
local function count_leases(key, replicas, latest)
  drop_unbounded(key, latest)
  local known = {}
  for _, id in ipairs(redis.call('ZRANGE', key, 0, -1)) do
    local r = string.match(id, '^(.*):[^:]*$') or id
    if known[r] == nil then
      known[r] = alive(redis.call('ZSCORE', replicas, r), latest)
    end
    if not known[r] then redis.call('ZREM', key, id) end
  end
  return redis.call('ZCARD', key)
end
"
    };
}

/// Adds a lease when the upstream has a slot free: `{1, leases}` or
/// `{0, leases}` (the count after the call). `KEYS`: the upstream's
/// leases, the replicas; `ARGV`: lease id, slots, ttl, replica id. The
/// replica is registered if it is not (a grant before its first
/// heartbeat, or after its heartbeat lapsed).
const ACQUIRE: &str = concat!(
    prelude!(),
    r"
local ttl = tonumber(ARGV[3])
local latest = now + 2 * ttl
if not alive(redis.call('ZSCORE', KEYS[2], ARGV[4]), latest) then
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[4])
end
local n = count_leases(KEYS[1], KEYS[2], latest)
if n < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ttl * 2)
  return {1, n + 1}
end
return {0, n}
"
);

/// Sets every lease named (`ARGV[2..]`) to expire `ARGV[1]` ms from now,
/// adding those that expired meanwhile (their streams still run).
const RENEW: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[i])
end
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return #ARGV - 1
";

/// The heartbeat and the view: registers this replica (`ARGV[1]`) for
/// `ARGV[2]` ms with its waiting counts (`ARGV[3]`), drops replicas whose
/// heartbeat expired or lies too far ahead (and their waiting counts, and
/// waiting counts of replicas not registered), and returns `{replicas,
/// {others' waiting}, {leases per upstream key}}`.
const SYNC: &str = concat!(
    prelude!(),
    r"
local ttl = tonumber(ARGV[2])
local latest = now + 2 * ttl
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for _, r in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], string.format('(%d', latest), '+inf')) do
  table.insert(gone, r)
end
for _, r in ipairs(gone) do
  redis.call('ZREM', KEYS[1], r)
  redis.call('HDEL', KEYS[2], r)
end
redis.call('PEXPIRE', KEYS[1], ttl * 2)
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ttl * 2)
local waiting = {}
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all, 2 do
  if all[i] ~= ARGV[1] then
    if alive(redis.call('ZSCORE', KEYS[1], all[i]), latest) then
      table.insert(waiting, all[i + 1])
    else
      redis.call('HDEL', KEYS[2], all[i])
    end
  end
end
local leases = {}
for i = 3, #KEYS do
  table.insert(leases, count_leases(KEYS[i], KEYS[1], latest))
end
return {redis.call('ZCARD', KEYS[1]), waiting, leases}
"
);

/// What the store holds of every replica: how many there are, what waits
/// in the others' queues, and the leases on each upstream asked about.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotView {
    /// Replicas whose heartbeat has not expired, this one included.
    pub replicas: u32,
    /// Per class (most urgent first), requests waiting in other replicas.
    pub waiting: [u32; 3],
    /// Per class, the models those requests name.
    pub models: [Models; 3],
    /// Leases per upstream, in the order asked.
    pub leases: Vec<u32>,
}

/// The key of `upstream`'s leases.
pub fn lease_key(upstream: &str) -> String {
    format!("llamatap:{{llamatap-slots}}:lease:{upstream}")
}

/// The channel on which a replica tells the others to read the view now
/// (a request queued there, or a slot freed while requests wait
/// elsewhere); the message is the sender's replica id.
pub const CHANGED: &str = "llamatap:{llamatap-slots}:changed";
const REPLICAS_KEY: &str = "llamatap:{llamatap-slots}:replicas";
const WAITING_KEY: &str = "llamatap:{llamatap-slots}:waiting";

/// The store as the shared slots use it: leases, the heartbeat and view,
/// and the channel between replicas, over the store's connections.
pub struct SlotStore {
    store: Arc<Store>,
}

impl SlotStore {
    /// The slots' calls on `store`.
    pub fn new(store: Arc<Store>) -> Self {
        SlotStore { store }
    }

    /// Leases one of `upstream`'s `capacity` slots as `lease` for `ttl_ms`:
    /// whether it was granted, and the leases held after the call.
    pub async fn acquire(
        &self,
        upstream: &str,
        lease: &str,
        capacity: u32,
        ttl_ms: u64,
    ) -> Result<(bool, u32), StoreError> {
        let mut pipe = redis::pipe();
        pipe.cmd("EVAL")
            .arg(ACQUIRE)
            .arg(2)
            .arg(lease_key(upstream))
            .arg(REPLICAS_KEY)
            .arg(lease)
            .arg(capacity)
            .arg(ttl_ms)
            .arg(replica_of(lease));
        self.store
            .call(pipe, false, |v| match v {
                [Value::Array(r)] => match r.as_slice() {
                    [Value::Int(granted), Value::Int(n)] => {
                        Ok((*granted == 1, u32::try_from(*n).unwrap_or(u32::MAX)))
                    }
                    other => Err(text(other)),
                },
                other => Err(text(other)),
            })
            .await
    }

    /// Tells the other replicas (on [`CHANGED`]) to read the view now.
    pub async fn announce(&self, replica: &str) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        pipe.cmd("PUBLISH").arg(CHANGED).arg(replica);
        self.store
            .call(pipe, true, |v| match v {
                [Value::Int(_)] => Ok(()),
                other => Err(text(other)),
            })
            .await
    }

    /// A subscription to [`CHANGED`], on a connection of its own; each
    /// message's payload (the sender's replica id).
    pub async fn changes(&self) -> Result<redis::aio::PubSubStream, StoreError> {
        self.store.subscribe(CHANGED).await
    }

    /// Removes `lease` from `upstream`'s leases (its stream ended).
    pub async fn release(&self, upstream: &str, lease: &str) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        pipe.cmd("ZREM").arg(lease_key(upstream)).arg(lease);
        self.store
            .call(pipe, true, |v| match v {
                [Value::Int(_)] => Ok(()),
                other => Err(text(other)),
            })
            .await
    }

    /// Renews (or adds again) every lease of `leases`, `(upstream, ids)`,
    /// for `ttl_ms`, in one round trip.
    pub async fn renew(
        &self,
        leases: &[(String, Vec<String>)],
        ttl_ms: u64,
    ) -> Result<(), StoreError> {
        if leases.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (upstream, ids) in leases {
            pipe.cmd("EVAL")
                .arg(RENEW)
                .arg(1)
                .arg(lease_key(upstream))
                .arg(ttl_ms)
                .arg(ids);
        }
        let n = leases.len();
        self.store
            .call(pipe, false, move |v| {
                if v.len() == n && v.iter().all(|r| matches!(r, Value::Int(_))) {
                    Ok(())
                } else {
                    Err(text(v))
                }
            })
            .await
    }

    /// The heartbeat of replica `replica` (expiring in `ttl_ms`), with its
    /// `waiting` counts per class and the `models` they wait for; the view
    /// of `upstreams`' leases.
    pub async fn sync(
        &self,
        replica: &str,
        ttl_ms: u64,
        waiting: [u32; 3],
        models: &[Models; 3],
        upstreams: &[String],
    ) -> Result<SlotView, StoreError> {
        let mut pipe = redis::pipe();
        let cmd = pipe.cmd("EVAL");
        cmd.arg(SYNC)
            .arg(2 + upstreams.len())
            .arg(REPLICAS_KEY)
            .arg(WAITING_KEY);
        for u in upstreams {
            cmd.arg(lease_key(u));
        }
        cmd.arg(replica)
            .arg(ttl_ms)
            .arg(waiting_field(waiting, models));
        self.store
            .call(pipe, false, |v| match v {
                [Value::Array(r)] => view(r),
                other => Err(text(other)),
            })
            .await
    }
}

/// The replica a lease id (`<replica>:<n>`) belongs to.
fn replica_of(lease: &str) -> &str {
    lease.rsplit_once(':').map_or(lease, |(r, _)| r)
}

/// Reads [`SYNC`]'s reply.
fn view(r: &[Value]) -> Result<SlotView, String> {
    let [Value::Int(replicas), Value::Array(waiting), Value::Array(leases)] = r else {
        return Err(text(r));
    };
    let mut out = SlotView {
        replicas: u32::try_from(*replicas).unwrap_or(0),
        ..SlotView::default()
    };
    for w in waiting {
        let Value::BulkString(b) = w else {
            return Err(text(std::slice::from_ref(w)));
        };
        read_waiting(
            &String::from_utf8_lossy(b),
            &mut out.waiting,
            &mut out.models,
        );
    }
    for l in leases {
        match l {
            Value::Int(n) => out.leases.push(u32::try_from(*n).unwrap_or(0)),
            other => return Err(text(std::slice::from_ref(other))),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
