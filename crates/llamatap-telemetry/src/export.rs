//! A bounded span export queue: finished spans go into a fixed-size channel
//! (never blocking the proxy; a full queue drops the span and counts it) and
//! one background thread batches them to the OTLP exporter with a timeout, so
//! a dead, black-holing or slow collector costs the proxy nothing but drops.
//!
//! Shutdown closes the queue (the thread exports what is left, then stops)
//! and returns by its deadline whether or not the collector answered.
//!
//! The SDK hands a span to [`ExportQueue::on_end`] on the thread that ends
//! it, so that thread can ask [`take_accepted`] right after whether the queue
//! took the span: what an exemplar needs before it may name the trace.

use std::cell::Cell;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::metrics::{ResultLabels, SpanCounts};
use opentelemetry::trace::SpanId;
use opentelemetry::Context;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};

/// Largest batch sent in one export call.
const MAX_BATCH: usize = 512;
/// A partial batch waits at most this long.
const BATCH_DELAY: Duration = Duration::from_millis(500);
/// One export call may take this long before its spans count as dropped.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

thread_local! {
    /// The id of the last span this thread ended that the queue took.
    static ACCEPTED: Cell<Option<SpanId>> = const { Cell::new(None) };
}

/// The id of the last span this thread ended that the export queue took,
/// cleared by the call. Call it before ending a span (to clear it) and after
/// (to learn whether that span was queued).
pub fn take_accepted() -> Option<SpanId> {
    ACCEPTED.with(Cell::take)
}

enum Msg {
    Span(Box<SpanData>),
    Flush(SyncSender<()>),
}

/// The span processor: bounded queue plus export thread.
pub struct ExportQueue {
    tx: Mutex<Option<SyncSender<Msg>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
    /// Disconnected when the export thread has ended.
    ended: Mutex<Option<Receiver<()>>>,
    counts: SpanCounts,
}

impl std::fmt::Debug for ExportQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ExportQueue")
    }
}

impl ExportQueue {
    /// Starts the export thread. `counts` is `llamatap_otel_spans_total{result}`.
    pub fn start<E: SpanExporter + 'static>(
        exporter: E,
        runtime: tokio::runtime::Runtime,
        capacity: usize,
        counts: SpanCounts,
    ) -> std::io::Result<ExportQueue> {
        let (tx, rx) = sync_channel(capacity);
        let (alive, ended) = sync_channel::<()>(0);
        let c = counts.clone();
        let worker = std::thread::Builder::new()
            .name("llamatap-otlp".into())
            .spawn(move || {
                run(exporter, runtime, rx, c);
                drop(alive);
            })?;
        Ok(ExportQueue {
            tx: Mutex::new(Some(tx)),
            worker: Mutex::new(Some(worker)),
            ended: Mutex::new(Some(ended)),
            counts,
        })
    }

    fn sender(&self) -> Option<SyncSender<Msg>> {
        self.tx.lock().ok().and_then(|g| g.clone())
    }
}

fn run<E: SpanExporter>(
    exporter: E,
    runtime: tokio::runtime::Runtime,
    rx: Receiver<Msg>,
    counts: SpanCounts,
) {
    let mut batch: Vec<SpanData> = Vec::with_capacity(MAX_BATCH);
    let mut flushes: Vec<SyncSender<()>> = Vec::new();
    let mut deadline = Instant::now() + BATCH_DELAY;
    loop {
        let wait = deadline.saturating_duration_since(Instant::now());
        let closed = match rx.recv_timeout(wait) {
            Ok(Msg::Span(s)) => {
                batch.push(*s);
                false
            }
            Ok(Msg::Flush(done)) => {
                flushes.push(done);
                false
            }
            Err(RecvTimeoutError::Timeout) => false,
            Err(RecvTimeoutError::Disconnected) => true,
        };
        let due = Instant::now() >= deadline;
        if batch.len() >= MAX_BATCH || ((due || closed || !flushes.is_empty()) && !batch.is_empty())
        {
            let n = batch.len() as u64;
            let spans = std::mem::replace(&mut batch, Vec::with_capacity(MAX_BATCH));
            let res = runtime.block_on(async {
                tokio::time::timeout(EXPORT_TIMEOUT, exporter.export(spans)).await
            });
            let label = match res {
                Ok(Ok(())) => "exported",
                _ => "dropped_export_failed",
            };
            counts
                .get_or_create(&ResultLabels { result: label })
                .inc_by(n);
        }
        if due || batch.is_empty() {
            deadline = Instant::now() + BATCH_DELAY;
        }
        for f in flushes.drain(..) {
            let _ = f.try_send(());
        }
        if closed {
            let _ = exporter.shutdown_with_timeout(Duration::from_secs(2));
            return;
        }
    }
}

impl SpanProcessor for ExportQueue {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        let Some(tx) = self.sender() else { return };
        let id = span.span_context.span_id();
        match tx.try_send(Msg::Span(Box::new(span))) {
            Ok(()) => ACCEPTED.with(|a| a.set(Some(id))),
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.counts
                    .get_or_create(&ResultLabels {
                        result: "dropped_queue_full",
                    })
                    .inc();
            }
        }
    }

    /// Waits until everything queued before the call was exported (or failed).
    /// A full queue cannot take the request: that is an error, not a wait.
    fn force_flush(&self) -> OTelSdkResult {
        let Some(tx) = self.sender() else {
            return Ok(());
        };
        let (done_tx, done_rx) = sync_channel(1);
        tx.try_send(Msg::Flush(done_tx))
            .map_err(|e| OTelSdkError::InternalFailure(e.to_string()))?;
        done_rx
            .recv_timeout(EXPORT_TIMEOUT + BATCH_DELAY)
            .map_err(|e| OTelSdkError::InternalFailure(e.to_string()))
    }

    /// Closes the queue: the export thread sends what is queued, then stops.
    /// Returns once it has, or after `timeout`, whichever comes first.
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        if let Ok(mut g) = self.tx.lock() {
            g.take();
        }
        let Some(ended) = self.ended.lock().ok().and_then(|mut g| g.take()) else {
            return Ok(());
        };
        match ended.recv_timeout(timeout) {
            Err(RecvTimeoutError::Disconnected) | Ok(()) => {
                if let Some(w) = self.worker.lock().ok().and_then(|mut g| g.take()) {
                    let _ = w.join();
                }
                Ok(())
            }
            Err(RecvTimeoutError::Timeout) => Err(OTelSdkError::Timeout(timeout)),
        }
    }
}
