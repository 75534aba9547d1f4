//! Finding the holder of a conversation the book does not know (another
//! replica started it without a shared store, or this process restarted
//! since): each member in the fleet is asked `POST /v1/streams/lookup` for
//! the id, one after another, and the first that lists the id itself
//! holds it.
//!
//! Each ask is its own connection (`Connection: close`), bounded by the
//! connect timeout and [`ASK_TIMEOUT`] for the answer; a member that fails
//! is passed over. Only a replay or a stop asks, and only when the book
//! and the store know nothing of the id.
//!
//! Deliberately not here: the client's lookup (the proxy's `lookup`,
//! which merges every member's answer).

use std::time::Duration;

use pingora::upstreams::peer::HttpPeer;

use crate::config::Config;
use crate::fleet::Fleet;
use crate::upstream::client::Exchange;
use crate::upstream::spare::Spares;

/// Longest wait for one member's lookup answer.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest lookup answer read, bytes.
const MAX_ANSWER: usize = 1024 * 1024;

/// The name of the member whose buffer holds `id` (as llama-server sees
/// it), if one says so. `authorization`: the header llama-server gets
/// (the upstream key, or the client's own when llamatap checks none).
pub async fn holder(
    fleet: &Fleet,
    spares: &Spares,
    config: &Config,
    id: &str,
    authorization: Option<&str>,
) -> Option<String> {
    let body = serde_json::json!({ "conversation_ids": [id] }).to_string();
    for m in fleet.members() {
        let Some(address) = m.address().filter(|_| !m.gone()) else {
            continue;
        };
        let mut peer = HttpPeer::new(address, false, String::new());
        peer.options.connection_timeout = Some(config.connect_timeout);
        peer.options.total_connection_timeout = Some(config.connect_timeout);
        let request = head(
            &m.upstream.base_path,
            &m.upstream.host,
            authorization,
            &body,
        );
        let ask = ask(spares, &peer, &request);
        let Ok(Some(answer)) = tokio::time::timeout(ASK_TIMEOUT, ask).await else {
            continue;
        };
        if lists(&answer, id) {
            return Some(m.upstream.name.clone());
        }
    }
    None
}

/// The lookup request's bytes.
fn head(base: &str, host: &str, authorization: Option<&str>, body: &str) -> Vec<u8> {
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    format!(
        "POST {base}/v1/streams/lookup HTTP/1.1\r\nHost: {host}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// One member's `200` answer body, or `None`.
async fn ask(spares: &Spares, peer: &HttpPeer, request: &[u8]) -> Option<Vec<u8>> {
    let stream = spares.connect(peer).await.ok()?;
    let mut up = Exchange::new(stream);
    up.write(request, Some(ASK_TIMEOUT)).await.ok()?;
    let head = loop {
        let h = up.read_header(Some(ASK_TIMEOUT)).await.ok()?;
        if !h.status.is_informational() {
            break h;
        }
    };
    if head.status.as_u16() != 200 {
        return None;
    }
    let mut answer = Vec::new();
    while let Some(piece) = up.read_body().await.ok()? {
        answer.extend_from_slice(&piece);
        if answer.len() > MAX_ANSWER {
            return None;
        }
    }
    Some(answer)
}

/// Whether a lookup answer lists `id` itself (not only `id::model`).
fn lists(answer: &[u8], id: &str) -> bool {
    serde_json::from_slice::<Vec<serde_json::Value>>(answer)
        .is_ok_and(|entries| entries.iter().any(|e| e["conversation_id"] == id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_id_itself_is_a_hit() {
        let answer = br#"[{"conversation_id":"c1::m","is_done":true},{"conversation_id":"c2"}]"#;
        assert!(lists(answer, "c2"));
        assert!(!lists(answer, "c1"));
        assert!(lists(answer, "c1::m"));
        assert!(!lists(b"not json", "c1"));
    }

    #[test]
    fn the_request_names_the_base_path_and_the_key() {
        let r = head("/base", "llama", Some("Bearer k"), "{}");
        let r = String::from_utf8(r).unwrap();
        assert!(
            r.starts_with("POST /base/v1/streams/lookup HTTP/1.1\r\n"),
            "{r}"
        );
        assert!(r.contains("Authorization: Bearer k\r\n"));
        assert!(r.ends_with("Content-Length: 2\r\nConnection: close\r\n\r\n{}"));
    }
}
