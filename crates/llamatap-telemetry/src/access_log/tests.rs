use std::io::Write;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::*;

fn value(c: &LineCounts, result: &'static str) -> u64 {
    c.get_or_create(&ResultLabels { result }).get()
}

/// A sink that collects what is written, and blocks its first write until
/// released (saying when it started waiting).
struct Gate {
    release: Option<Receiver<()>>,
    entered: Sender<()>,
    out: Arc<Mutex<Vec<u8>>>,
}

impl Write for Gate {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        if let Some(r) = self.release.take() {
            let _ = self.entered.send(());
            let _ = r.recv();
        }
        self.out.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What the sink wrote.
type Written = Arc<Mutex<Vec<u8>>>;

/// A gate, its release, its "entered" signal, and what it wrote.
fn gate() -> (Gate, Sender<()>, Receiver<()>, Written) {
    let (tx, rx) = channel();
    let (entered_tx, entered) = channel();
    let out = Arc::new(Mutex::new(Vec::new()));
    (
        Gate {
            release: Some(rx),
            entered: entered_tx,
            out: out.clone(),
        },
        tx,
        entered,
        out,
    )
}

#[test]
fn lines_reach_the_sink_and_are_counted() {
    let (sink, release, _entered, out) = gate();
    release.send(()).unwrap();
    let counts = LineCounts::default();
    let log = AccessLog::start(Box::new(sink), 16, counts.clone()).unwrap();
    log.submit("a\n".into());
    log.submit("b\n".into());
    log.shutdown(Duration::from_secs(10));
    assert_eq!(&*out.lock().unwrap(), b"a\nb\n");
    assert_eq!(value(&counts, "written"), 2);
    assert_eq!(value(&counts, "dropped_queue_full"), 0);
}

#[test]
fn a_stalled_sink_never_blocks_submit_and_drops_are_counted() {
    let (sink, release, entered, out) = gate();
    let counts = LineCounts::default();
    let log = AccessLog::start(Box::new(sink), 4, counts.clone()).unwrap();
    // The writer takes the first line and blocks writing it out.
    log.submit("first\n".into());
    entered.recv_timeout(Duration::from_secs(10)).unwrap();
    let t = Instant::now();
    for i in 0..100 {
        log.submit(format!("{i}\n"));
    }
    assert!(t.elapsed() < Duration::from_secs(2), "submit waited");
    // The queue holds 4; the other 96 are dropped.
    assert_eq!(value(&counts, "dropped_queue_full"), 96);
    release.send(()).unwrap();
    log.shutdown(Duration::from_secs(10));
    assert_eq!(value(&counts, "written"), 5);
    assert_eq!(&*out.lock().unwrap(), b"first\n0\n1\n2\n3\n");
}

/// A sink whose every write fails.
struct Broken;

impl Write for Broken {
    fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
        Err(std::io::Error::other("disk full"))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Err(std::io::Error::other("disk full"))
    }
}

#[test]
fn failed_writes_are_counted_not_fatal() {
    let counts = LineCounts::default();
    let log = AccessLog::start(Box::new(Broken), 16, counts.clone()).unwrap();
    log.submit("a\n".into());
    log.submit("b\n".into());
    log.shutdown(Duration::from_secs(10));
    assert_eq!(value(&counts, "written"), 0);
    assert_eq!(value(&counts, "dropped_write_failed"), 2);
}

#[test]
fn after_shutdown_lines_are_dropped_and_counted() {
    let counts = LineCounts::default();
    let log = AccessLog::start(Box::new(std::io::sink()), 16, counts.clone()).unwrap();
    log.shutdown(Duration::from_secs(10));
    log.submit("late\n".into());
    assert_eq!(value(&counts, "dropped_queue_full"), 1);
}
