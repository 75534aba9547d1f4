use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;

use super::standin::{Answer, StandIn, Step};
use super::*;
use crate::config::{OnError, Secret};

fn config(url: &str, timeout_ms: u64) -> StoreConfig {
    StoreConfig {
        url: Secret::new(url.to_string()),
        address: url.trim_start_matches("redis://").to_string(),
        timeout: Duration::from_millis(timeout_ms),
        on_error: OnError::Deny,
        password: None,
    }
}

fn store(s: &StandIn, timeout_ms: u64) -> (Arc<Store>, Gauge) {
    let gauge = Gauge::default();
    gauge.set(1);
    (
        Arc::new(Store::new(config(&s.url(), timeout_ms), gauge.clone())),
        gauge,
    )
}

/// Polls `done` every 5 ms until it holds or `timeout` has passed.
async fn wait_for(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    true
}

/// Log lines written while `f` runs (this thread's, at every level).
async fn logged<T>(f: impl std::future::Future<Output = T>) -> (T, String) {
    #[derive(Clone, Default)]
    struct Buf(Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf::default();
    let writer = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    let out = f.await;
    drop(guard);
    let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
    (out, text)
}

#[test]
fn keys_keep_a_tenant_in_one_cluster_slot() {
    assert_eq!(key("alice", 7, "req"), "llamatap:{alice}:7:req");
}

#[tokio::test]
async fn counts_round_trip_through_the_store() {
    let s = StandIn::normal().await;
    let (store, _) = store(&s, 2000);
    assert_eq!(store.admit("a", 9).await.unwrap(), (1, 0));
    store.add("a", 9, "tok", 40).await.unwrap();
    assert_eq!(store.admit("a", 9).await.unwrap(), (2, 40));
    store.add("a", 9, "req", -1).await.unwrap();
    assert_eq!(store.admit("a", 9).await.unwrap(), (2, 40));
    assert_eq!(s.count("llamatap:{a}:9:req"), 2);
    // One connection, reused.
    assert_eq!(s.accepted(), 1);
}

#[tokio::test]
async fn a_connection_the_server_closed_is_replaced_and_the_call_sent_again() {
    let s = StandIn::normal().await;
    let (store, gauge) = store(&s, 2000);
    let ((), logs) = logged(async {
        for i in 1..=4 {
            assert_eq!(store.admit("a", 1).await.unwrap(), (i, 0));
            // As Redis's `timeout` does to an idle client.
            s.close_all();
            assert!(wait_for(Duration::from_secs(5), || s.open() == 0).await);
        }
        store.add("a", 1, "tok", 3).await.unwrap();
    })
    .await;
    assert!(store.is_up());
    assert_eq!(gauge.get(), 1);
    assert!(!logs.contains("unreachable"), "{logs}");
    assert_eq!(s.count("llamatap:{a}:1:req"), 4);
    assert_eq!(s.count("llamatap:{a}:1:tok"), 3);
}

#[tokio::test]
async fn a_slow_charge_fails_alone_and_admissions_go_on() {
    // A store that never answers INCRBY (token charges) and answers the rest.
    let s = StandIn::start(|st: &Step<'_>| match st.args[0].as_str() {
        "INCRBY" => Answer::Silence,
        _ => Answer::Normal,
    })
    .await;
    // A timeout long enough that the admissions below are all over while
    // the first charges still hang, however loaded the machine.
    let (store, _) = store(&s, 5_000);
    // More hanging charges than connections there are.
    let charges: Vec<_> = (0..2 * MAX_CONNECTIONS)
        .map(|_| {
            let st = store.clone();
            tokio::spawn(async move { st.add("a", 1, "tok", 10).await })
        })
        .collect();
    assert!(wait_for(Duration::from_secs(10), || s.seen("INCRBY") >= MAX_CHARGING).await);
    for i in 1..=25 {
        assert_eq!(store.admit("b", 1).await.unwrap(), (i, 0), "admission {i}");
    }
    // Meanwhile, charges held at most their share of the connections, and
    // admissions one.
    assert_eq!(s.seen("INCRBY"), MAX_CHARGING);
    assert_eq!(s.accepted(), MAX_CHARGING + 1);
    for c in charges {
        let r = c.await.unwrap();
        assert!(matches!(r, Err(StoreError::Timeout(_))), "{r:?}");
    }
    // Once they have failed: no backoff, the next admission is tried.
    for i in 26..=30 {
        assert_eq!(store.admit("b", 1).await.unwrap(), (i, 0), "admission {i}");
    }
}

#[tokio::test]
async fn no_reply_panics_each_is_a_failed_call() {
    let junk: &[&[u8]] = &[
        "é\r\n".as_bytes(),
        "€12\r\n".as_bytes(),
        b"\xff\xfe\r\n",
        b":12x\r\n",
        b":9223372036854775808\r\n",
        b"$99999999999999999999\r\n",
        b"$-7\r\n",
        b"*-7\r\n",
        b"%1\r\n",
        b"+OK\r\n",
        b"$-1\r\n",
        b"-ERR boom\r\n",
        b"\r\n",
        b"$3\r\nab",
    ];
    for bytes in junk {
        let reply = bytes.to_vec();
        let s = StandIn::start(move |st: &Step<'_>| match st.args[0].as_str() {
            "INCR" => Answer::Bytes(reply.clone()),
            _ => Answer::Normal,
        })
        .await;
        let (store, gauge) = store(&s, 300);
        let r = store.admit("a", 1).await;
        assert!(r.is_err(), "{:?}: {r:?}", String::from_utf8_lossy(bytes));
        assert_eq!(gauge.get(), 0);
    }
}

#[tokio::test]
async fn an_extra_reply_fails_one_call_and_shifts_no_later_one() {
    // The first connection's second INCR comes after one reply too many.
    let s = StandIn::start(
        |st: &Step<'_>| match (st.conn, st.args[0].as_str(), st.nth) {
            (0, "INCR", 1) => Answer::Before(b":999\r\n".to_vec()),
            _ => Answer::Normal,
        },
    )
    .await;
    let (store, gauge) = store(&s, 2000);
    let ((), logs) = logged(async {
        assert_eq!(store.admit("a", 1).await.unwrap(), (1, 0));
        store.add("a", 1, "tok", 7).await.unwrap();
        let e = store.admit("a", 1).await.unwrap_err();
        assert!(matches!(e, StoreError::Reply(_)), "{e}");
        assert!(!store.is_up());
        assert_eq!(gauge.get(), 0);
        for i in 3..=6 {
            assert_eq!(store.admit("a", 1).await.unwrap(), (i, 7 * (i - 2)));
            store.add("a", 1, "tok", 7).await.unwrap();
            assert_eq!(gauge.get(), 1);
        }
    })
    .await;
    assert_eq!(
        logs.matches("rate-limit store unreachable").count(),
        1,
        "{logs}"
    );
    assert_eq!(logs.matches("reachable again").count(), 1, "{logs}");
    // The connection out of step was closed; one fresh one took over.
    assert_eq!(s.accepted(), 2);
}

#[tokio::test]
async fn an_extra_reply_after_an_exchange_shifts_no_later_one() {
    let s = StandIn::start(
        |st: &Step<'_>| match (st.conn, st.args[0].as_str(), st.nth) {
            (0, "ECHO", 0) => Answer::After(b"$5\r\nextra\r\n".to_vec()),
            _ => Answer::Normal,
        },
    )
    .await;
    let (store, _) = store(&s, 2000);
    assert_eq!(store.admit("a", 1).await.unwrap(), (1, 0));
    for _ in 2..=5 {
        // Either the extra reply was dropped unread or it failed one call;
        // never is a count another exchange's.
        if let Ok(got) = store.admit("a", 1).await {
            assert_eq!(got, (s.count("llamatap:{a}:1:req") as u64, 0));
        }
    }
    assert_eq!(store.admit("a", 1).await.unwrap().0, 6);
}

#[tokio::test]
async fn a_burst_opens_at_most_max_connections() {
    // Every INCR waits 100 ms, so the burst's calls overlap.
    let s = StandIn::start(|st: &Step<'_>| match st.args[0].as_str() {
        "INCR" => Answer::Delay(Duration::from_millis(100)),
        _ => Answer::Normal,
    })
    .await;
    let (store, _) = store(&s, 10_000);
    let calls: Vec<_> = (0..200)
        .map(|_| {
            let st = store.clone();
            tokio::spawn(async move { st.admit("a", 1).await })
        })
        .collect();
    let mut counts = Vec::new();
    for c in calls {
        counts.push(c.await.unwrap().unwrap().0);
    }
    counts.sort_unstable();
    assert_eq!(counts, (1..=200).collect::<Vec<u64>>());
    assert!(s.most_open() <= MAX_CONNECTIONS, "{}", s.most_open());
    assert!(s.accepted() <= MAX_CONNECTIONS, "{}", s.accepted());
}

#[tokio::test]
async fn a_silent_store_fails_each_call_at_its_timeout_and_logs_once() {
    let s = StandIn::start(|_: &Step<'_>| Answer::Silence).await;
    let (store, gauge) = store(&s, 100);
    let ((), logs) = logged(async {
        for _ in 0..3 {
            let t = Instant::now();
            let r = store.admit("a", 1).await;
            assert!(matches!(r, Err(StoreError::Timeout(_))), "{r:?}");
            assert!(t.elapsed() >= Duration::from_millis(100));
        }
    })
    .await;
    assert_eq!(gauge.get(), 0);
    assert_eq!(
        logs.matches("rate-limit store unreachable (no answer within 100ms)")
            .count(),
        1,
        "{logs}"
    );
    // Each cancelled call dropped its connection.
    assert!(wait_for(Duration::from_secs(5), || s.open() == 0).await);
}
