//! The forwarding loop's connector, and one connected, never-used upstream
//! connection kept ready per upstream, so that a request does not wait for
//! a TCP connect (and for llama-server to accept) before its bytes go out.
//!
//! A spare is made in the background each time one is taken (or a request
//! had to connect itself), so under traffic every request finds one; an idle
//! proxy makes none. A spare older than `upstream_timeouts.pool_idle_ms`
//! (below llama-server's 5 s keep-alive, which closes a connection that sent
//! nothing) is dropped, and one the upstream already closed is never used.
//! A spare never carried a request, so it cannot be one llama-server is about
//! to close after a streamed answer (the reason connections are not pooled).
//!
//! Deliberately not: a pool. One per upstream bounds what a spare holds on
//! llama-server's side (an HTTP thread waiting for a request).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pingora::connectors::TransportConnector;
use pingora::protocols::l4::socket::SocketAddr;
use pingora::protocols::Stream;
use pingora::upstreams::peer::{HttpPeer, Peer};
use tokio::io::AsyncReadExt;

/// The spares of every upstream.
pub struct Spares {
    connector: TransportConnector,
    slots: Vec<Slot>,
    max_age: Duration,
}

#[derive(Default)]
struct Slot {
    spare: Mutex<Option<Spare>>,
    filling: AtomicBool,
}

struct Spare {
    address: SocketAddr,
    stream: Stream,
    made: Instant,
}

impl Spares {
    /// Room for `upstreams` spares, each usable for `max_age`.
    pub fn new(upstreams: usize, max_age: Duration) -> Self {
        Spares {
            connector: TransportConnector::new(None),
            slots: (0..upstreams).map(|_| Slot::default()).collect(),
            max_age,
        }
    }

    /// A new connection to `peer`, made now (the one connector of the
    /// direct path, spares included).
    pub async fn connect(&self, peer: &HttpPeer) -> pingora::Result<Stream> {
        self.connector.new_stream(peer).await
    }

    /// The spare of upstream `member`, if one is ready for `peer`, young
    /// enough and still open.
    pub async fn take(&self, member: usize, peer: &HttpPeer) -> Option<Stream> {
        let spare = self.slots.get(member)?.spare.lock().ok()?.take()?;
        if &spare.address != peer.address() || spare.made.elapsed() >= self.max_age {
            return None;
        }
        let mut stream = spare.stream;
        open(&mut stream).await.then_some(stream)
    }

    /// Connects a spare for upstream `member` in the background, unless one
    /// is there or on its way.
    pub fn refill(self: &Arc<Self>, member: usize, peer: &HttpPeer) {
        let Some(slot) = self.slots.get(member) else {
            return;
        };
        let ready = slot
            .spare
            .lock()
            .map(|g| g.as_ref().is_some_and(|s| s.made.elapsed() < self.max_age))
            .unwrap_or(true);
        if ready || slot.filling.swap(true, Ordering::AcqRel) {
            return;
        }
        let spares = self.clone();
        let peer = peer.clone();
        tokio::spawn(async move {
            let made = spares.connector.new_stream(&peer).await;
            if let Some(slot) = spares.slots.get(member) {
                if let (Ok(stream), Ok(mut g)) = (made, slot.spare.lock()) {
                    *g = Some(Spare {
                        address: peer.address().clone(),
                        stream,
                        made: Instant::now(),
                    });
                }
                slot.filling.store(false, Ordering::Release);
            }
        });
    }
}

/// Whether the upstream left the connection as it was: nothing to read, no
/// end of stream, no error (a read that would block).
async fn open(stream: &mut Stream) -> bool {
    let mut byte = [0u8; 1];
    tokio::select! {
        biased;
        _ = stream.read(&mut byte) => false,
        () = std::future::ready(()) => true,
    }
}
