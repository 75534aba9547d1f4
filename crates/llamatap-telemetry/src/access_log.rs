//! The access-log writer: finished requests' lines ([`crate::access_line::line`])
//! go into a bounded queue (never blocking the proxy: a full queue drops the
//! line and counts it) and one background thread appends them to the file
//! or stdout, flushing whenever the queue runs empty. A slow disk or a
//! stalled stdout pipe costs the proxy nothing but dropped lines.
//!
//! It does not rotate files: the file is opened once, for appending, so
//! `logrotate`'s `copytruncate` works (or send the lines to stdout, `-`,
//! and let the service manager keep them).

use std::io::{BufWriter, Write};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

use super::metrics::{ResultLabels, SpanCounts};
use crate::settings::AccessLogTarget;

#[cfg(test)]
mod tests;

/// Lines waiting to be written before new ones are dropped. A line is at
/// most about 1.5 KiB (the path is bounded to 1 KiB), a few hundred bytes
/// usually, so a full queue holds a few MiB at most.
pub const QUEUE_LINES: usize = 8192;

/// `llamatap_access_log_lines_total{result}` (same shape as the span counts).
pub type LineCounts = SpanCounts;

/// The results of `llamatap_access_log_lines_total`.
pub const RESULTS: &[&str] = &["written", "dropped_queue_full", "dropped_write_failed"];

/// The running writer.
pub struct AccessLog {
    tx: Mutex<Option<SyncSender<String>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
    /// Disconnected when the writer thread has ended.
    ended: Mutex<Option<Receiver<()>>>,
    counts: LineCounts,
}

impl AccessLog {
    /// Opens `target` (a file is created if missing and appended to) and
    /// starts the writer thread.
    pub fn open(target: &AccessLogTarget, counts: LineCounts) -> std::io::Result<AccessLog> {
        let out: Box<dyn Write + Send> = match target {
            AccessLogTarget::Stdout => Box::new(std::io::stdout()),
            AccessLogTarget::File(path) => Box::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)?,
            ),
        };
        AccessLog::start(out, QUEUE_LINES, counts)
    }

    /// Starts the writer thread on `out` with a queue of `capacity` lines.
    pub fn start(
        out: Box<dyn Write + Send>,
        capacity: usize,
        counts: LineCounts,
    ) -> std::io::Result<AccessLog> {
        let (tx, rx) = sync_channel::<String>(capacity);
        let (alive, ended) = sync_channel::<()>(0);
        let c = counts.clone();
        let worker = std::thread::Builder::new()
            .name("llamatap-access-log".into())
            .spawn(move || {
                run(out, rx, &c);
                drop(alive);
            })?;
        Ok(AccessLog {
            tx: Mutex::new(Some(tx)),
            worker: Mutex::new(Some(worker)),
            ended: Mutex::new(Some(ended)),
            counts,
        })
    }

    /// Queues a line; never waits. A full queue (or a stopped writer) drops
    /// it and counts it.
    pub fn submit(&self, line: String) {
        let sent = match self.tx.lock() {
            Ok(g) => match g.as_ref() {
                Some(tx) => tx.try_send(line),
                None => Err(TrySendError::Disconnected(line)),
            },
            Err(_) => return,
        };
        if sent.is_err() {
            count(&self.counts, "dropped_queue_full", 1);
        }
    }

    /// Closes the queue: the thread writes what is queued, flushes, and
    /// stops. Returns once it has, or after `within`.
    pub fn shutdown(&self, within: Duration) {
        if let Ok(mut g) = self.tx.lock() {
            g.take();
        }
        let Some(ended) = self.ended.lock().ok().and_then(|mut g| g.take()) else {
            return;
        };
        if let Err(RecvTimeoutError::Disconnected) = ended.recv_timeout(within) {
            if let Some(w) = self.worker.lock().ok().and_then(|mut g| g.take()) {
                let _ = w.join();
            }
        }
    }
}

fn count(counts: &LineCounts, result: &'static str, n: u64) {
    counts.get_or_create(&ResultLabels { result }).inc_by(n);
}

/// The writer thread: writes lines as they come, flushes when the queue is
/// empty; a failed write or flush counts the lines it lost.
fn run(out: Box<dyn Write + Send>, rx: Receiver<String>, counts: &LineCounts) {
    let mut w = BufWriter::with_capacity(64 * 1024, out);
    let mut pending: u64 = 0;
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(line) = next.take() {
            if w.write_all(line.as_bytes()).is_ok() {
                pending += 1;
            } else {
                count(counts, "dropped_write_failed", 1);
            }
            next = rx.try_recv().ok();
        }
        let result = if w.flush().is_ok() {
            "written"
        } else {
            "dropped_write_failed"
        };
        count(counts, result, pending);
        pending = 0;
    }
    let _ = w.flush();
}
