//! A local OTLP logs receiver (the collector side of `cordond --audit-otlp`), built from the
//! OTLP protos cordon-proto compiles: on 127.0.0.1, stoppable and restartable on the same port
//! (an outage), keeping every record it is sent, in arrival order.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cordon_proto::otlp::collector::logs::v1::logs_service_server::{LogsService, LogsServiceServer};
use cordon_proto::otlp::collector::logs::v1::{ExportLogsServiceRequest, ExportLogsServiceResponse};
use cordon_proto::otlp::common::v1::{AnyValue, KeyValue, any_value};
use tokio::sync::oneshot;

/// One record as received.
#[derive(Debug, Clone)]
pub struct Received {
    pub seq: u64,
    /// The body: the audit line.
    pub body: String,
    pub attributes: Vec<(String, String)>,
    /// The resource attributes of its request.
    pub resource: Vec<(String, String)>,
    pub severity: i32,
    pub time_unix_nano: u64,
}

impl Received {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    pub fn resource_attribute(&self, key: &str) -> Option<&str> {
        self.resource.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

fn text(v: &Option<AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn pairs(kvs: &[KeyValue]) -> Vec<(String, String)> {
    kvs.iter().map(|kv| (kv.key.clone(), text(&kv.value))).collect()
}

#[derive(Debug, Clone, Default)]
struct Store {
    records: Arc<Mutex<Vec<Received>>>,
    /// gRPC metadata of the last request (to check --audit-otlp-headers-file).
    metadata: Arc<Mutex<Vec<(String, String)>>>,
    requests: Arc<Mutex<u64>>,
}

#[tonic::async_trait]
impl LogsService for Store {
    async fn export(
        &self,
        request: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
        let metadata: Vec<(String, String)> = request
            .metadata()
            .iter()
            .filter_map(|kv| match kv {
                tonic::metadata::KeyAndValueRef::Ascii(k, v) => {
                    Some((k.as_str().to_string(), v.to_str().unwrap_or_default().to_string()))
                }
                tonic::metadata::KeyAndValueRef::Binary(..) => None,
            })
            .collect();
        *self.metadata.lock().unwrap() = metadata;
        let mut got = Vec::new();
        for rl in request.into_inner().resource_logs {
            let resource = rl.resource.map(|r| pairs(&r.attributes)).unwrap_or_default();
            for sl in rl.scope_logs {
                for r in sl.log_records {
                    let attributes = pairs(&r.attributes);
                    let seq = attributes.iter().find(|(k, _)| k == "cordon.seq").and_then(|(_, v)| v.parse().ok());
                    got.push(Received {
                        seq: seq.unwrap_or(0),
                        body: text(&r.body),
                        attributes,
                        resource: resource.clone(),
                        severity: r.severity_number,
                        time_unix_nano: r.time_unix_nano,
                    });
                }
            }
        }
        self.records.lock().unwrap().extend(got);
        *self.requests.lock().unwrap() += 1;
        Ok(tonic::Response::new(ExportLogsServiceResponse { partial_success: None }))
    }
}

/// The receiver; serves on its own runtime until dropped.
#[derive(Debug)]
pub struct Receiver {
    runtime: tokio::runtime::Runtime,
    store: Store,
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
}

impl Receiver {
    /// Listens on 127.0.0.1, any free port.
    pub fn start() -> Receiver {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut r = Receiver { runtime, store: Store::default(), addr, stop: None };
        r.serve(listener);
        r
    }

    /// `http://127.0.0.1:PORT`, for `--audit-otlp`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let (tx, rx) = oneshot::channel::<()>();
        let service = LogsServiceServer::new(self.store.clone()).max_decoding_message_size(16 * 1024 * 1024);
        self.runtime.spawn(async move {
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = rx.await;
                })
                .await;
        });
        self.stop = Some(tx);
    }

    /// An outage: the port stops listening and open connections close.
    pub fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        // Until the port refuses connections.
        for _ in 0..200 {
            if std::net::TcpStream::connect(self.addr).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the receiver still listens on {}", self.addr);
    }

    /// Back, on the same port.
    pub fn restart(&mut self) {
        let addr = self.addr;
        let listener = self.runtime.block_on(async move {
            for _ in 0..200 {
                match tokio::net::TcpListener::bind(addr).await {
                    Ok(l) => return l,
                    Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
            panic!("cannot listen on {addr} again");
        });
        self.serve(listener);
    }

    /// Everything received so far, in arrival order (duplicates included).
    pub fn records(&self) -> Vec<Received> {
        self.store.records.lock().unwrap().clone()
    }

    /// Export requests answered.
    pub fn requests(&self) -> u64 {
        *self.store.requests.lock().unwrap()
    }

    /// The gRPC metadata of the last request.
    pub fn last_metadata(&self) -> Vec<(String, String)> {
        self.store.metadata.lock().unwrap().clone()
    }

    /// Forgets what it received.
    pub fn clear(&self) {
        self.store.records.lock().unwrap().clear();
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}
