//! The OTLP metrics exporter: one background thread that, every export
//! interval and once more at shutdown, encodes the GenAI metrics' snapshot
//! ([`super::genai`]) and sends it over OTLP/gRPC (`MetricsService/Export`)
//! or OTLP/HTTP (`POST …/v1/metrics`, `application/x-protobuf`), each send
//! bounded by the export timeout.
//!
//! A failed export is logged when the collector stops being reachable and
//! again when it is back, not at every interval; it never touches a
//! request (recording only takes the aggregation's short lock).
//! Deliberately not here: the aggregation and its encoding.

use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use prost::Message;
use tokio::sync::oneshot;

use super::genai::{encode, unix_nanos, GenAiMetrics};
use crate::settings::{MetricsExport, OtlpProtocol};

#[cfg(test)]
mod tests;

/// Failure to start the exporter.
#[derive(Debug, thiserror::Error)]
#[error("cannot start OTLP metrics export: {0}")]
pub struct MetricExportError(String);

/// The running exporter.
pub struct MetricExporter {
    stop: Mutex<Option<oneshot::Sender<()>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
    /// Disconnected when the export thread has ended.
    ended: Mutex<Option<Receiver<()>>>,
}

impl std::fmt::Debug for MetricExporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricExporter")
    }
}

enum Client {
    Grpc(MetricsServiceClient<tonic::transport::Channel>),
    Http {
        client: reqwest::Client,
        url: String,
    },
}

impl Client {
    async fn send(&mut self, req: ExportMetricsServiceRequest) -> Result<(), String> {
        match self {
            Client::Grpc(c) => {
                let answer = c
                    .export(req)
                    .await
                    .map_err(|s| format!("{:?}: {}", s.code(), s.message()))?;
                match answer.into_inner().partial_success {
                    Some(p) if p.rejected_data_points > 0 => Err(format!(
                        "the collector rejected {} data points: {}",
                        p.rejected_data_points, p.error_message
                    )),
                    _ => Ok(()),
                }
            }
            Client::Http { client, url } => {
                let answer = client
                    .post(url.as_str())
                    .header("content-type", "application/x-protobuf")
                    .body(req.encode_to_vec())
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                let status = answer.status();
                if status.is_success() {
                    Ok(())
                } else {
                    Err(format!("the collector answered {status}"))
                }
            }
        }
    }
}

/// Whether the last export reached the collector, so that a change is
/// logged once.
#[derive(Debug, Default)]
struct Reach(Option<bool>);

impl Reach {
    /// Takes one export's result; true when it changed the state and was
    /// logged (the first failure, the first success after failures).
    fn update(&mut self, result: &Result<(), String>, endpoint: &str) -> bool {
        let ok = result.is_ok();
        let changed = match (self.0, ok) {
            (Some(false), true) => {
                tracing::info!(endpoint, "OTLP metrics export works again");
                true
            }
            (None | Some(true), false) => {
                let error = result.as_ref().err().map_or("", String::as_str);
                tracing::warn!(
                    endpoint,
                    error,
                    "OTLP metrics export failed (logged again only once it works again)"
                );
                true
            }
            _ => false,
        };
        self.0 = Some(ok);
        changed
    }
}

/// The full OTLP/HTTP URL: a bare base URL gets `/v1/metrics`.
pub fn http_metrics_url(endpoint: &str) -> String {
    let trimmed = endpoint.trim_end_matches('/');
    if trimmed.ends_with("/v1/metrics") {
        trimmed.to_string()
    } else {
        format!("{trimmed}/v1/metrics")
    }
}

impl MetricExporter {
    /// Starts the export thread for `metrics`.
    pub fn start(
        cfg: &MetricsExport,
        service_name: &str,
        metrics: Arc<GenAiMetrics>,
    ) -> Result<MetricExporter, MetricExportError> {
        let err = |e: &dyn std::fmt::Display| MetricExportError(e.to_string());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| err(&e))?;
        let client = {
            let _guard = runtime.enter();
            match cfg.protocol {
                OtlpProtocol::Grpc => {
                    let channel = tonic::transport::Channel::from_shared(cfg.endpoint.clone())
                        .map_err(|e| err(&e))?
                        .connect_timeout(cfg.timeout)
                        .timeout(cfg.timeout)
                        .connect_lazy();
                    Client::Grpc(MetricsServiceClient::new(channel))
                }
                OtlpProtocol::HttpProtobuf => Client::Http {
                    client: reqwest::Client::builder()
                        .timeout(cfg.timeout)
                        .build()
                        .map_err(|e| err(&e))?,
                    url: cfg.endpoint.clone(),
                },
            }
        };
        let (stop, stopped) = oneshot::channel();
        let (alive, ended) = sync_channel::<()>(0);
        let job = Job {
            client,
            metrics,
            service_name: service_name.to_string(),
            endpoint: cfg.endpoint.clone(),
            interval: cfg.interval,
            timeout: cfg.timeout,
        };
        let worker = std::thread::Builder::new()
            .name("llamatap-otlp-metrics".into())
            .spawn(move || {
                runtime.block_on(job.run(stopped));
                drop(alive);
            })
            .map_err(|e| err(&e))?;
        Ok(MetricExporter {
            stop: Mutex::new(Some(stop)),
            worker: Mutex::new(Some(worker)),
            ended: Mutex::new(Some(ended)),
        })
    }

    /// Exports once more and stops; returns once that is done or after
    /// `within`, whichever comes first.
    pub fn shutdown(&self, within: Duration) {
        if let Some(stop) = self.stop.lock().ok().and_then(|mut g| g.take()) {
            let _ = stop.send(());
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

struct Job {
    client: Client,
    metrics: Arc<GenAiMetrics>,
    service_name: String,
    endpoint: String,
    interval: Duration,
    timeout: Duration,
}

impl Job {
    async fn run(mut self, mut stopped: oneshot::Receiver<()>) {
        let mut reach = Reach::default();
        let mut next = tokio::time::Instant::now() + self.interval;
        loop {
            let last = tokio::time::timeout_at(next, &mut stopped).await.is_ok();
            let result = self.export().await;
            reach.update(&result, &self.endpoint);
            if last {
                return;
            }
            // The next export is an interval after this one ended: a slow
            // collector spaces them out instead of queueing them up.
            next = tokio::time::Instant::now() + self.interval;
        }
    }

    async fn export(&mut self) -> Result<(), String> {
        let series = self.metrics.snapshot();
        if series.is_empty() {
            return Ok(());
        }
        let req = encode::request(&series, &self.service_name, unix_nanos(SystemTime::now()));
        match tokio::time::timeout(self.timeout, self.client.send(req)).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer within {:?}", self.timeout)),
        }
    }
}
