//! OpenTelemetry traces over OTLP/HTTP with the JSON encoding (`--otlp-endpoint`).
//!
//! Spans are finished records (name, ids, start/end, attributes) sent to a background
//! thread that posts them in batches to `{endpoint}/v1/traces` about once a second.
//! OTLP/HTTP JSON is part of the OTLP spec and every collector accepts it, so no
//! OpenTelemetry SDK (and no gRPC stack) is needed. A collector that is down costs
//! dropped spans and one warning, never a stalled request.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::logging::Logger;

/// A finished span.
#[derive(Clone, Debug)]
pub struct Span {
    pub name: String,
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent: Option<[u8; 8]>,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<(&'static str, Value)>,
    /// Whether the span ended in an error.
    pub error: bool,
}

enum Message {
    Span(Span),
    /// Export what is pending now, then acknowledge.
    Flush(Sender<()>),
}

#[derive(Clone)]
pub struct Tracer {
    spans: Sender<Message>,
}

impl Tracer {
    /// Starts the exporter thread for `endpoint` (e.g. `http://127.0.0.1:4318`).
    pub fn new(endpoint: &str, service_name: &str, log: Logger) -> Self {
        let (tx, rx) = mpsc::channel();
        let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
        let service = service_name.to_string();
        std::thread::Builder::new()
            .name("peregrine-otlp".into())
            .spawn(move || export_loop(rx, &url, &service, log))
            .expect("spawning the OTLP exporter thread");
        Self { spans: tx }
    }

    pub fn record(&self, span: Span) {
        let _ = self.spans.send(Message::Span(span));
    }

    /// Exports pending spans (at shutdown), waiting at most `timeout`.
    pub fn flush(&self, timeout: Duration) {
        let (tx, rx) = mpsc::channel();
        if self.spans.send(Message::Flush(tx)).is_ok() {
            let _ = rx.recv_timeout(timeout);
        }
    }
}

/// Random ids (trace and span ids must be non-zero).
pub fn new_trace_id() -> [u8; 16] {
    rand::random::<std::num::NonZeroU128>().get().to_le_bytes()
}

pub fn new_span_id() -> [u8; 8] {
    rand::random::<std::num::NonZeroU64>().get().to_le_bytes()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn nanos(t: SystemTime) -> String {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos().to_string()
}

fn attribute(key: &str, v: &Value) -> Value {
    let value = match v {
        Value::Bool(b) => json!({"boolValue": b}),
        Value::Number(n) if n.is_i64() || n.is_u64() => json!({"intValue": n.to_string()}),
        Value::Number(n) => json!({"doubleValue": n.as_f64()}),
        Value::String(s) => json!({"stringValue": s}),
        other => json!({"stringValue": other.to_string()}),
    };
    json!({"key": key, "value": value})
}

/// The OTLP/HTTP JSON body for a batch of spans.
pub fn export_body(service_name: &str, spans: &[Span]) -> Value {
    let spans: Vec<Value> = spans
        .iter()
        .map(|s| {
            json!({
                "traceId": hex(&s.trace_id),
                "spanId": hex(&s.span_id),
                "parentSpanId": s.parent.map(|p| hex(&p)).unwrap_or_default(),
                "name": s.name,
                "kind": if s.parent.is_none() { 2 } else { 1 }, // SERVER for the root, INTERNAL below
                "startTimeUnixNano": nanos(s.start),
                "endTimeUnixNano": nanos(s.end),
                "attributes": s.attributes.iter().map(|(k, v)| attribute(k, v)).collect::<Vec<_>>(),
                "status": {"code": if s.error { 2 } else { 1 }},
            })
        })
        .collect();
    json!({"resourceSpans": [{
        "resource": {"attributes": [attribute("service.name", &Value::from(service_name))]},
        "scopeSpans": [{"scope": {"name": "peregrine", "version": env!("CARGO_PKG_VERSION")}, "spans": spans}],
    }]})
}

fn export_loop(rx: Receiver<Message>, url: &str, service: &str, log: Logger) {
    let agent: ureq::Agent =
        ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(5))).build().into();
    let mut batch = Vec::new();
    let mut last_flush = Instant::now();
    let mut warned = false;
    loop {
        let (flush_now, ack, disconnected) = match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(Message::Span(span)) => {
                batch.push(span);
                (false, None, false)
            }
            Ok(Message::Flush(ack)) => (true, Some(ack), false),
            Err(RecvTimeoutError::Timeout) => (false, None, false),
            Err(RecvTimeoutError::Disconnected) => (true, None, true),
        };
        let due = batch.len() >= 512 || last_flush.elapsed() >= Duration::from_secs(1);
        if !batch.is_empty() && (flush_now || due) {
            let body = export_body(service, &batch).to_string();
            match agent.post(url).header("Content-Type", "application/json").send(body.as_bytes()) {
                Ok(_) => warned = false,
                Err(e) if !warned => {
                    warned = true;
                    let fields = [("endpoint", url.into()), ("error", e.to_string().into())];
                    log.warn("OTLP export failed; spans dropped", &fields);
                }
                Err(_) => {}
            }
            batch.clear();
            last_flush = Instant::now();
        }
        if let Some(ack) = ack {
            let _ = ack.send(());
        }
        if disconnected {
            return;
        }
    }
}
