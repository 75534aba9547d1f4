//! A real OTLP receiver for tests: OTLP/HTTP (protobuf) on a raw socket and
//! OTLP/gRPC with tonic, both collecting every exported span; and an
//! OTLP/gRPC metrics receiver collecting every export request.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::metrics::v1::Metric;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

use super::upstream::{json, read_request};

/// Spans received, with the resource's service.name.
#[derive(Clone, Default)]
pub struct Received {
    pub spans: Arc<Mutex<Vec<(String, Span)>>>,
}

impl Received {
    fn add(&self, req: ExportTraceServiceRequest) {
        let mut g = self.spans.lock().unwrap();
        for rs in req.resource_spans {
            let service = service_name(rs.resource.as_ref());
            for ss in rs.scope_spans {
                for s in ss.spans {
                    g.push((service.clone(), s));
                }
            }
        }
    }

    /// Waits until at least `n` spans arrived.
    pub fn wait(&self, n: usize, timeout: Duration) -> Vec<Span> {
        let start = Instant::now();
        loop {
            let g = self.spans.lock().unwrap();
            if g.len() >= n || start.elapsed() > timeout {
                return g.iter().map(|(_, s)| s.clone()).collect();
            }
            drop(g);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// OTLP/HTTP receiver; returns its base URL.
pub fn http_receiver() -> (String, Received) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let rec = Received::default();
    let r = rec.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { continue };
            let r = r.clone();
            std::thread::spawn(move || {
                while let Some(req) = read_request(&mut s) {
                    assert_eq!(req.path, "/v1/traces");
                    if let Ok(m) = ExportTraceServiceRequest::decode(req.body.as_slice()) {
                        r.add(m);
                    }
                    let body = ExportTraceServiceResponse::default().encode_to_vec();
                    let _ = std::io::Write::write_all(
                        &mut s,
                        format!("HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes(),
                    );
                    let _ = std::io::Write::write_all(&mut s, &body);
                }
            });
        }
        let _ = json;
    });
    (url, rec)
}

struct Collector(Received);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.0.add(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// OTLP/gRPC receiver; returns its URL.
pub fn grpc_receiver() -> (String, Received) {
    let rec = Received::default();
    let r = rec.clone();
    let addr = serve_grpc(move || {
        tonic::transport::Server::builder().add_service(TraceServiceServer::new(Collector(r)))
    });
    (format!("http://{addr}"), rec)
}

/// Runs the tonic router `router` makes on a loopback port, on a thread
/// of its own; the port's address.
fn serve_grpc(
    router: impl FnOnce() -> tonic::transport::server::Router + Send + 'static,
) -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(listener).unwrap();
            router()
                .serve_with_incoming(tokio_stream_from(l))
                .await
                .unwrap();
        });
    });
    addr
}

fn tokio_stream_from(
    l: tokio::net::TcpListener,
) -> impl futures_core::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    futures_util::stream::unfold(l, |l| async move {
        let r = l.accept().await.map(|(s, _)| s);
        Some((r, l))
    })
}

/// Hex of an id.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A string attribute.
pub fn attr_str(s: &Span, key: &str) -> Option<String> {
    s.attributes.iter().find(|a| a.key == key).and_then(|a| {
        match a.value.as_ref()?.value.as_ref()? {
            Value::StringValue(v) => Some(v.clone()),
            _ => None,
        }
    })
}

/// An integer attribute.
pub fn attr_int(s: &Span, key: &str) -> Option<i64> {
    s.attributes.iter().find(|a| a.key == key).and_then(|a| {
        match a.value.as_ref()?.value.as_ref()? {
            Value::IntValue(v) => Some(*v),
            _ => None,
        }
    })
}

/// A double attribute.
pub fn attr_double(s: &Span, key: &str) -> Option<f64> {
    s.attributes.iter().find(|a| a.key == key).and_then(|a| {
        match a.value.as_ref()?.value.as_ref()? {
            Value::DoubleValue(v) => Some(*v),
            _ => None,
        }
    })
}

/// A collector that accepts connections and never answers (nor closes them);
/// returns its URL and the number of connections it accepted so far.
pub fn black_hole() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let n = accepted.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming().flatten() {
            held.push(c);
            n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    (url, accepted)
}

/// Metric export requests received, in order.
#[derive(Clone, Default)]
pub struct ReceivedMetrics {
    pub requests: Arc<Mutex<Vec<ExportMetricsServiceRequest>>>,
}

impl ReceivedMetrics {
    /// Every metric received so far, with its resource's `service.name`.
    pub fn metrics(&self) -> Vec<(String, Metric)> {
        let g = self.requests.lock().unwrap();
        let mut out = Vec::new();
        for req in g.iter() {
            for rm in &req.resource_metrics {
                let service = service_name(rm.resource.as_ref());
                for sm in &rm.scope_metrics {
                    for m in &sm.metrics {
                        out.push((service.clone(), m.clone()));
                    }
                }
            }
        }
        out
    }
}

/// A resource's `service.name`, empty when it has none.
fn service_name(resource: Option<&Resource>) -> String {
    resource
        .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name"))
        .and_then(|a| a.value.as_ref())
        .and_then(|v| match &v.value {
            Some(Value::StringValue(s)) => Some(s.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

struct MetricsCollector(ReceivedMetrics);

#[tonic::async_trait]
impl MetricsService for MetricsCollector {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.0.requests.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

/// OTLP/gRPC metrics receiver; returns its `127.0.0.1:port`.
pub fn metrics_grpc_receiver() -> (String, ReceivedMetrics) {
    let rec = ReceivedMetrics::default();
    let r = rec.clone();
    let addr = serve_grpc(move || {
        tonic::transport::Server::builder()
            .add_service(MetricsServiceServer::new(MetricsCollector(r)))
    });
    (addr.to_string(), rec)
}
