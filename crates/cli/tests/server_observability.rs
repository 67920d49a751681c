//! `peregrine serve --otlp-endpoint … --json-output`: traces reach a real OTLP/HTTP
//! receiver (a listener on loopback that records what is posted) with a span per
//! request (and its queue / prefill / decode children) and per engine step; every
//! log line is a JSON object.

#[path = "common/http.rs"]
mod http;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use http::*;

/// What the receiver recorded: (path, JSON body) per post.
type Posts = Arc<Mutex<Vec<(String, Value)>>>;

/// Accepts OTLP/HTTP posts on a free port; returns the port and the posts.
fn otlp_receiver() -> (u16, Posts) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    let posts = Arc::new(Mutex::new(Vec::new()));
    let sink = posts.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { return };
            let sink = sink.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().expect("clone"));
                let mut conn = conn;
                // Keep-alive: one request after another on the same connection.
                loop {
                    let mut request_line = String::new();
                    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut length = 0;
                    loop {
                        let mut h = String::new();
                        reader.read_line(&mut h).expect("header");
                        if h.trim().is_empty() {
                            break;
                        }
                        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().expect("length");
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).expect("body");
                    let path = request_line.split_whitespace().nth(1).unwrap_or("").to_string();
                    let value = serde_json::from_slice(&body).expect("OTLP body is JSON");
                    sink.lock().unwrap().push((path, value));
                    let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}");
                }
            });
        }
    });
    (port, posts)
}

fn spans(posts: &[(String, Value)]) -> Vec<Value> {
    let mut out = Vec::new();
    for (path, body) in posts {
        assert_eq!(path, "/v1/traces");
        for rs in body["resourceSpans"].as_array().expect("resourceSpans") {
            let service = &rs["resource"]["attributes"][0];
            assert_eq!(service["key"], "service.name");
            assert_eq!(service["value"]["stringValue"], "peregrine-test");
            for ss in rs["scopeSpans"].as_array().expect("scopeSpans") {
                out.extend(ss["spans"].as_array().expect("spans").iter().cloned());
            }
        }
    }
    out
}

#[test]
fn traces_reach_the_collector_and_logs_are_json() {
    let (otlp_port, posts) = otlp_receiver();
    let endpoint = format!("http://127.0.0.1:{otlp_port}");
    let mut s = Server::start(&[
        "--otlp-endpoint",
        &endpoint,
        "--otlp-service-name",
        "peregrine-test",
        "--json-output",
    ]);
    let r = s.post("/v1/completions", &json!({"prompt": "Hello", "max_tokens": 4, "temperature": 0}));
    assert_eq!(r.status, 200, "{}", r.text);
    // SIGTERM flushes what is pending.
    let ok = Command::new("kill").args(["-TERM", &s.child.id().to_string()]).status().expect("run kill");
    assert!(ok.success());
    assert!(s.wait_exit(Duration::from_secs(30)).success());

    let spans = spans(&posts.lock().unwrap());
    let root = spans.iter().find(|s| s["name"] == "generate /v1/completions").expect("request span");
    let attr = |span: &Value, key: &str| -> Value {
        let a = span["attributes"].as_array().unwrap().iter().find(|a| a["key"] == key);
        a.map(|a| a["value"].clone()).unwrap_or(Value::Null)
    };
    assert_eq!(attr(root, "peregrine.completion_tokens")["intValue"], "4");
    assert_eq!(attr(root, "peregrine.finish_reason")["stringValue"], "length");
    let trace = root["traceId"].as_str().unwrap();
    assert_eq!(trace.len(), 32);
    for child in ["queue", "prefill", "decode"] {
        let c = spans.iter().find(|s| s["name"] == child && s["traceId"] == trace).expect(child);
        assert_eq!(c["parentSpanId"], root["spanId"]);
        let (start, end): (u128, u128) = (
            c["startTimeUnixNano"].as_str().unwrap().parse().unwrap(),
            c["endTimeUnixNano"].as_str().unwrap().parse().unwrap(),
        );
        assert!(start <= end, "{child}: {start} > {end}");
    }
    // One span per engine step: a 1-token prompt chunk and 3 more decodes at least.
    let steps: Vec<&Value> = spans.iter().filter(|s| s["name"] == "engine step").collect();
    assert!(steps.len() >= 4, "{} step spans", steps.len());
    assert!(steps.iter().all(|s| attr(s, "peregrine.step.tokens")["intValue"].as_str().is_some()));

    let log = s.log();
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 4, "{log}");
    for line in &lines {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(v["timestamp"].is_string() && v["level"].is_string() && v["message"].is_string(), "{line}");
    }
    assert!(lines.iter().any(|l| l.contains("\"path\":\"/v1/completions\"") && l.contains("\"status\":200")));
}
