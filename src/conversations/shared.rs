//! The conversation book shared by replicas (`queue.shared`): one Redis key
//! per conversation, `llamatap:conv:{id}`, holding the member's name and
//! expiring when llama-server drops the buffer. Written off the request's
//! path; read when the local book does not know an id. A store that fails
//! only costs the replica what it alone has not seen (the call's error is
//! the store's to record and log).

use std::time::Duration;

use redis::Value;

use crate::store::Store;

fn key(id: &str) -> String {
    format!("llamatap:conv:{id}")
}

/// Records that `member` holds `id` for `seconds`.
pub async fn put(store: &Store, id: &str, member: &str, seconds: u64) {
    let mut pipe = redis::pipe();
    pipe.cmd("SET")
        .arg(key(id))
        .arg(member)
        .arg("EX")
        .arg(seconds.max(1));
    let _ = store
        .call(pipe, true, |v| match v {
            [_] => Ok(()),
            other => Err(crate::store::text(other)),
        })
        .await;
}

/// Forgets `id` (a stop).
pub async fn forget(store: &Store, id: &str) {
    let mut pipe = redis::pipe();
    pipe.cmd("DEL").arg(key(id));
    let _ = store
        .call(pipe, true, |v| match v {
            [_] => Ok(()),
            other => Err(crate::store::text(other)),
        })
        .await;
}

/// The member holding `id` and how long the store keeps it, if it does.
pub async fn get(store: &Store, id: &str) -> Option<(String, Duration)> {
    let k = key(id);
    let mut pipe = redis::pipe();
    pipe.cmd("GET").arg(&k);
    pipe.cmd("PTTL").arg(&k);
    store
        .call(pipe, false, |v| match v {
            [Value::BulkString(b), Value::Int(ms)] if *ms > 0 => Ok(Some((
                String::from_utf8_lossy(b).into_owned(),
                Duration::from_millis(u64::try_from(*ms).unwrap_or(0)),
            ))),
            [Value::Nil, _] | [_, Value::Int(_)] => Ok(None),
            other => Err(crate::store::text(other)),
        })
        .await
        .ok()
        .flatten()
}
