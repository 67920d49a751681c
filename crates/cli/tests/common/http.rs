//! The harness of the `peregrine serve` tests: a server child process on a free
//! port (killed on drop, its log printed when a test fails), HTTP requests and
//! server-sent events through ureq, raw sockets, and readers for errors and metrics.
#![allow(dead_code)]

use peregrine_model::testing::default_model_path;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub const PROMPT: &str = "Once upon a time, there was a";
/// transformers' greedy continuation of PROMPT (the CLI tests check the same model).
pub const CONTINUATION: &str = " small town nestled in the heart of a";
/// SmolLM2's chat template applied to one user message, as `/tokenize` + `/detokenize`
/// render it; greedy, the model answers and ends with `<|im_end|>`.
pub const CHAT_PROMPT: &str = concat!(
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n",
    "<|im_start|>assistant\n",
);

// ---------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------

pub const ENV_SETTINGS: &[&str] = &[
    "PEREGRINE_API_KEY",
    "MAX_CONCURRENT_REQUESTS",
    "PAYLOAD_LIMIT",
    "MAX_INPUT_TOKENS",
    "MAX_TOTAL_TOKENS",
    "MAX_BATCH_TOTAL_TOKENS",
    "PEREGRINE_MAX_QUEUE_REQUESTS",
    "PEREGRINE_MAX_QUEUE_TOKENS",
    "JSON_OUTPUT",
    "OTLP_ENDPOINT",
];

/// A `peregrine serve` child process, killed on drop.
pub struct Server {
    pub child: Child,
    pub port: u16,
    /// Everything the server wrote to stderr so far.
    pub log: Arc<Mutex<String>>,
    pub drain: Option<JoinHandle<()>>,
    pub agent: ureq::Agent,
    /// The `--model` argument.
    pub model: String,
}

/// One HTTP answer, read to its end.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub text: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("status {}: body is not JSON ({e}): {:?}", self.status, self.text))
    }
}

pub fn new_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

impl Server {
    /// Starts a server on the default model and waits until `/health` answers 200.
    pub fn start(extra: &[&str]) -> Server {
        let s = Server::spawn(extra);
        s.wait_ready();
        s
    }

    /// Starts a server and returns as soon as it listens (the model may still load).
    pub fn spawn(extra: &[&str]) -> Server {
        let model = match extra.iter().position(|&a| a == "-m" || a == "--model") {
            Some(i) => extra[i + 1].to_string(),
            None => default_model_path().to_str().expect("utf-8 path").to_string(),
        };
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_peregrine"));
        cmd.args(["serve", "--host", "127.0.0.1", "--port", "0", "--kv-cache-memory", "256MiB"]);
        // Settings the environment could give that would change what the tests expect.
        for var in ENV_SETTINGS {
            cmd.env_remove(var);
        }
        if !extra.iter().any(|&a| a == "-m" || a == "--model") {
            cmd.args(["-m", &model]);
        }
        let mut child = cmd
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn peregrine serve");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel::<u16>();
        let sink = log.clone();
        let drain = std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.split("listening on http://127.0.0.1:").nth(1) {
                    let port: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    if let (Some(tx), Ok(port)) = (tx.take(), port.parse()) {
                        let _ = tx.send(port);
                    }
                }
                let mut l = sink.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let port = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(p) => p,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = drain.join();
                panic!("the server did not say where it listens ({e}):\n{}", log.lock().unwrap());
            }
        };
        Server { child, port, log, drain: Some(drain), agent: new_agent(), model }
    }

    pub fn wait_ready(&self) {
        let t0 = Instant::now();
        loop {
            if let Ok(r) = self.agent.get(self.url("/health")).call() {
                if r.status().as_u16() == 200 {
                    return;
                }
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "not healthy after 60 s:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn get(&self, path: &str) -> Reply {
        self.request("GET", path, None, &[])
    }

    pub fn post(&self, path: &str, body: &Value) -> Reply {
        self.request("POST", path, Some(&body.to_string()), &[])
    }

    pub fn request(&self, method: &str, path: &str, body: Option<&str>, headers: &[(&str, &str)]) -> Reply {
        request(&self.agent, &self.url(path), method, body, headers)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}\n{}", self.log()))
    }

    /// A streaming POST: the status and a reader of its `data:` lines.
    pub fn stream(&self, path: &str, body: &Value) -> (u16, Sse) {
        stream(&self.agent, &self.url(path), body)
            .unwrap_or_else(|e| panic!("POST {path}: {e}\n{}", self.log()))
    }

    pub fn metrics(&self) -> Metrics {
        let r = self.get("/metrics");
        assert_eq!(r.status, 200);
        Metrics(r.text)
    }

    /// Polls `/metrics` until `ok` holds; panics with the last scrape after `timeout`.
    pub fn wait_metrics(&self, timeout: Duration, what: &str, ok: impl Fn(&Metrics) -> bool) -> Metrics {
        let t0 = Instant::now();
        loop {
            let m = self.metrics();
            if ok(&m) {
                return m;
            }
            assert!(
                t0.elapsed() < timeout,
                "{what}: not within {timeout:?}; last scrape:\n{}\n{}",
                m.0,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the process to exit (the stderr drain then ends too).
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                if let Some(d) = self.drain.take() {
                    let _ = d.join();
                }
                return status;
            }
            assert!(t0.elapsed() < timeout, "still running after {timeout:?}:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(d) = self.drain.take() {
            let _ = d.join();
        }
        if std::thread::panicking() {
            eprintln!("--- server log (port {}) ---\n{}", self.port, self.log());
        }
    }
}

pub fn request(
    agent: &ureq::Agent,
    url: &str,
    method: &str,
    body: Option<&str>,
    headers: &[(&str, &str)],
) -> Result<Reply, ureq::Error> {
    let mut response = match (method, body) {
        ("GET", None) => {
            let mut r = agent.get(url);
            for (k, v) in headers {
                r = r.header(*k, *v);
            }
            r.call()?
        }
        ("POST", body) => {
            let mut r = agent.post(url).header("Content-Type", "application/json");
            for (k, v) in headers {
                r = r.header(*k, *v);
            }
            r.send(body.unwrap_or(""))?
        }
        other => panic!("unsupported request {other:?}"),
    };
    let content_type =
        response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string()?;
    Ok(Reply { status, content_type, text })
}

pub fn stream(agent: &ureq::Agent, url: &str, body: &Value) -> Result<(u16, Sse), ureq::Error> {
    let response = agent.post(url).header("Content-Type", "application/json").send(body.to_string())?;
    let status = response.status().as_u16();
    let ct = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
    if status == 200 {
        assert_eq!(ct, "text/event-stream", "a stream's content type");
    }
    Ok((status, Sse(BufReader::new(response.into_body().into_reader()))))
}

/// The `data:` lines of a server-sent-event stream.
pub struct Sse(pub BufReader<ureq::BodyReader<'static>>);

impl Sse {
    /// The next `data:` line, whole (`data: {...}` or `data:{...}`); `None` at the end.
    pub fn next_line(&mut self) -> Option<String> {
        loop {
            let mut line = String::new();
            if self.0.read_line(&mut line).expect("read the stream") == 0 {
                return None;
            }
            let line = line.trim_end_matches(['\r', '\n']);
            if line.starts_with("data:") {
                return Some(line.to_string());
            }
            assert!(line.is_empty() || line.starts_with(':'), "not an SSE line: {line:?}");
        }
    }

    /// Every remaining `data:` line.
    pub fn all_lines(mut self) -> Vec<String> {
        std::iter::from_fn(|| self.next_line()).collect()
    }
}

/// The JSON of a `data:` line.
pub fn payload(line: &str) -> Value {
    let data = line.strip_prefix("data:").expect("a data line").trim_start();
    serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {line:?}"))
}

/// A `/metrics` scrape.
pub struct Metrics(pub String);

impl Metrics {
    /// (name, labels, value) of every sample.
    pub fn samples(&self) -> Vec<(&str, &str, f64)> {
        self.0
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| {
                let (series, value) = l.rsplit_once(' ').unwrap_or_else(|| panic!("sample line {l:?}"));
                let value = match value {
                    "+Inf" => f64::INFINITY,
                    "-Inf" => f64::NEG_INFINITY,
                    v => v.parse().unwrap_or_else(|_| panic!("value of {l:?}")),
                };
                let (name, labels) = match series.split_once('{') {
                    Some((n, rest)) => (n, rest.strip_suffix('}').expect("closing brace")),
                    None => (series, ""),
                };
                (name, labels, value)
            })
            .collect()
    }

    /// The one sample of `name` whose labels include every `key="value"` of `labels`.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let found: Vec<f64> = self
            .samples()
            .into_iter()
            .filter(|(n, l, _)| {
                *n == name && labels.iter().all(|(k, v)| l.split(',').any(|kv| kv == format!("{k}=\"{v}\"")))
            })
            .map(|(_, _, v)| v)
            .collect();
        assert_eq!(found.len(), 1, "{name} {labels:?}: {} samples in\n{}", found.len(), self.0);
        found[0]
    }

    pub fn running(&self) -> f64 {
        self.get("vllm:num_requests_running", &[])
    }

    pub fn kv_usage(&self) -> f64 {
        self.get("vllm:kv_cache_usage_perc", &[])
    }

    pub fn aborted(&self) -> f64 {
        self.get("vllm:request_success_total", &[("finished_reason", "abort")])
    }
}

/// Checks an OpenAI-shaped error: status, JSON, all four fields, and `param`.
pub fn openai_error(r: &Reply, status: u16, param: Option<&str>) -> Value {
    assert_eq!(r.status, status, "{r:?}");
    assert!(r.content_type.starts_with("application/json"), "{r:?}");
    let body = r.json();
    let e = &body["error"];
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    assert!(e["type"].is_string(), "{body}");
    for k in ["param", "code"] {
        assert!(e.as_object().is_some_and(|o| o.contains_key(k)), "no error.{k}: {body}");
    }
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{body}");
    }
    e.clone()
}

/// Checks a TGI-shaped error: `{"error": "...", "error_type": ...}`.
pub fn tgi_error(r: &Reply, status: u16, error_type: &str) -> String {
    assert_eq!(r.status, status, "{r:?}");
    assert!(r.content_type.starts_with("application/json"), "{r:?}");
    let body = r.json();
    assert_eq!(body["error_type"], error_type, "{body}");
    body["error"].as_str().unwrap_or_else(|| panic!("error is a string: {body}")).to_string()
}

pub fn completion(max_tokens: usize) -> Value {
    json!({"prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0})
}

/// A POST written by hand on a raw socket (so the test decides when it goes away).
pub fn raw_post(port: u16, path: &str, body: &Value) -> TcpStream {
    let body = body.to_string();
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("send the request");
    s
}

// ---------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------
