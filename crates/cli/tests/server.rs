//! `peregrine serve` over HTTP: every route, streaming against non-streaming, typed
//! errors, fail-fast admission (429), aborts on disconnect, graceful shutdown, the
//! loading state (503) and the Prometheus metrics.
//!
//! Each test starts its own server on a free port (`--port 0`), so tests run in
//! parallel; the server's log is printed when a test fails.

#[path = "common/http.rs"]
mod http;

use std::io::Read;
use std::net::TcpStream;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use http::*;

#[test]
fn every_route_answers() {
    let s = Server::start(&[]);

    let r = s.get("/");
    assert_eq!(r.status, 200);
    assert!(r.content_type.starts_with("text/html"), "{}", r.content_type);
    assert!(r.text.contains("Peregrine"));

    assert_eq!(s.get("/health").status, 200);
    let r = s.get("/liveness");
    assert_eq!((r.status, r.json()), (200, json!({"alive": "ok"})));
    let r = s.get("/readiness");
    assert_eq!((r.status, r.json()), (200, json!({"ready": "ok"})));
    let r = s.get("/version");
    assert_eq!(r.status, 200);
    assert!(r.json()["version"].is_string());

    for path in ["/metrics", "/metrics/"] {
        let r = s.get(path);
        assert_eq!(r.status, 200, "{path}");
        assert!(r.content_type.starts_with("text/plain"), "{path}: {}", r.content_type);
        assert!(r.text.contains("vllm:num_requests_running"), "{path}: {}", r.text);
    }

    let info = s.get("/info").json();
    assert_eq!(info["model_id"], s.model.as_str(), "{info}");
    let max_total = info["max_total_tokens"].as_u64().unwrap_or_else(|| panic!("{info}"));
    assert!(max_total > 100, "{info}");
    assert_eq!(info["max_input_tokens"].as_u64(), Some(max_total - 1), "{info}");

    let v1info = s.get("/v1/info").json();
    assert_eq!(v1info["application"], "peregrine", "{v1info}");
    assert_eq!(v1info["model_name"], s.model.as_str(), "{v1info}");
    assert_eq!(v1info["max_length"].as_u64(), Some(max_total), "{v1info}");
    assert_eq!(v1info["model"]["architecture"], "llama", "{v1info}");

    let args = s.get("/v1/launch_arguments").json();
    assert_eq!(args["model"], s.model.as_str(), "{args}");
    assert_eq!(args["port"], "0", "{args}");
    assert_eq!(args["kv_cache_memory"], "256MiB", "{args}");

    let models = s.get("/v1/models").json();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], s.model.as_str(), "{models}");
    assert_eq!(models["data"][0]["max_model_len"].as_u64(), Some(max_total), "{models}");

    // Generation routes.
    let r = s.post("/v1/completions", &completion(8));
    assert_eq!(r.status, 200, "{r:?}");
    let c = r.json();
    assert_eq!(c["object"], "text_completion");
    assert!(c["id"].as_str().unwrap().starts_with("cmpl-"), "{c}");
    assert!(CONTINUATION.starts_with(c["choices"][0]["text"].as_str().unwrap()), "{c}");
    assert_eq!(c["choices"][0]["finish_reason"], "length");
    assert_eq!(c["usage"]["completion_tokens"], 8);
    assert_eq!(c["usage"]["prompt_tokens"], 8);
    assert_eq!(c["usage"]["total_tokens"], 16);

    let r = s.post(
        "/v1/chat/completions",
        &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let c = r.json();
    assert_eq!(c["object"], "chat.completion");
    assert_eq!(c["choices"][0]["message"]["role"], "assistant");
    assert!(!c["choices"][0]["message"]["content"].as_str().unwrap().is_empty(), "{c}");
    assert_eq!(c["usage"]["completion_tokens"], 4, "{c}");

    let tgi = json!({"inputs": PROMPT, "parameters": {"max_new_tokens": 5}});
    let r = s.post("/generate", &tgi);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json(), json!({"generated_text": " small town nestled in the"}));

    let (status, sse) = s.stream("/generate_stream", &tgi);
    assert_eq!(status, 200);
    let events = sse.all_lines();
    assert_eq!(events.len(), 5, "{events:?}");
    assert_eq!(payload(&events[4])["generated_text"], " small town nestled in the");

    // POST /: TGI's compatibility route answers a one-element list.
    let r = s.post("/", &tgi);
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json(), json!([{"generated_text": " small town nestled in the"}]));

    // /tokenize in both dialects, /detokenize back.
    let r = s.post("/tokenize", &json!({"inputs": "Hello world"}));
    assert_eq!(r.status, 200, "{r:?}");
    let list = r.json();
    let list = list.as_array().unwrap_or_else(|| panic!("a list: {}", r.text));
    assert_eq!(list.len(), 2, "{}", r.text);
    assert_eq!(list[0]["text"], "Hello");
    assert_eq!((list[0]["start"].as_u64(), list[0]["stop"].as_u64()), (Some(0), Some(5)));
    assert_eq!(list[1]["text"], " world");
    assert_eq!((list[1]["start"].as_u64(), list[1]["stop"].as_u64()), (Some(5), Some(11)));

    let v = s.post("/tokenize", &json!({"prompt": "Hello world"})).json();
    assert_eq!(v["count"], 2, "{v}");
    let ids: Vec<u64> = v["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
    assert_eq!(ids, vec![list[0]["id"].as_u64().unwrap(), list[1]["id"].as_u64().unwrap()]);
    assert_eq!(v["max_model_len"].as_u64(), Some(max_total));

    let r = s.post("/detokenize", &json!({"tokens": ids}));
    assert_eq!((r.status, r.json()), (200, json!({"prompt": "Hello world"})));

    // happy_vllm's text routes.
    let r = s.post("/v1/metadata_text", &json!({"text": "Hello world. How are you?"}));
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json(), json!({"tokens_nb": 7, "truncated_text": ""}));
    let r = s.post("/v1/metadata_text", &json!({"text": "Hello world", "max_length": 1}));
    assert_eq!(
        r.json(),
        json!({"tokens_nb": 2, "truncated_text": "Hello"}),
        "left truncation cuts the start"
    );

    let r = s.post(
        "/v1/split_text",
        &json!({"text": "Hello world. How are you? Fine.", "num_tokens_in_chunk": 2}),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.json(), json!({"split_text": ["Hello world.", " How are you?", " Fine."]}));
}

#[test]

fn launch_arguments_name_only_arguments() {
    let s = Server::start(&[]);
    let args = s.get("/v1/launch_arguments").json();
    let keys: Vec<&String> = args.as_object().unwrap().keys().collect();
    // Every key is an argument id (snake_case); `EngineArgs` / `ModelArgs` are the
    // flattened structs' group ids, whose "value" is the name of an argument given.
    let odd: Vec<&&String> = keys.iter().filter(|k| k.chars().any(|c| c.is_ascii_uppercase())).collect();
    assert!(odd.is_empty(), "not arguments: {odd:?} in {args}");
}

#[test]
fn tgi_stream_token_texts_add_up_to_the_generated_text_for_multibyte_characters() {
    let s = Server::start(&[]);
    // Greedy, the model answers " 🐥 🐥 🐥 🐥": each emoji is three byte-level tokens.
    let body = json!({"inputs": "Emoji list: 🦀 🐍 🐘 🦊", "parameters": {"max_new_tokens": 12}});
    let generated = s.post("/generate", &body).json()["generated_text"].as_str().unwrap().to_string();
    assert!(generated.contains('🐥'), "{generated:?}");
    // The OpenAI stream holds incomplete characters back and gets this right.
    let openai =
        json!({"prompt": "Emoji list: 🦀 🐍 🐘 🦊", "max_tokens": 12, "temperature": 0, "stream": true});
    let lines = s.stream("/v1/completions", &openai).1.all_lines();
    let streamed: String = lines[..lines.len() - 1]
        .iter()
        .filter_map(|l| payload(l)["choices"][0]["text"].as_str().map(String::from))
        .collect();
    assert_eq!(streamed, generated);
    // TGI's stream: clients (huggingface_hub's text_generation(stream=True)) print
    // each token's text; TGI decodes incrementally ("" until a character is whole).
    let lines = s.stream("/generate_stream", &body).1.all_lines();
    let events: Vec<Value> = lines.iter().map(|l| payload(l)).collect();
    let texts: Vec<&str> = events.iter().map(|e| e["token"]["text"].as_str().unwrap()).collect();
    assert_eq!(events.last().unwrap()["generated_text"], generated.as_str());
    assert!(!texts.iter().any(|t| t.contains('\u{FFFD}')), "replacement characters streamed: {texts:?}");
    assert_eq!(texts.concat(), generated, "{texts:?}");
}

#[test]
fn streaming_equals_non_streaming_at_temperature_zero() {
    let s = Server::start(&[]);

    // /v1/completions
    let plain = s.post("/v1/completions", &completion(12)).json();
    let text = plain["choices"][0]["text"].as_str().unwrap().to_string();
    assert!(text.starts_with(CONTINUATION), "{text:?}");
    let mut body = completion(12);
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let (status, sse) = s.stream("/v1/completions", &body);
    assert_eq!(status, 200);
    let lines = sse.all_lines();
    assert_eq!(lines.last().map(String::as_str), Some("data: [DONE]"), "{lines:?}");
    let chunks: Vec<Value> = lines[..lines.len() - 1].iter().map(|l| payload(l)).collect();
    assert!(lines[..lines.len() - 1].iter().all(|l| l.starts_with("data: {")), "{lines:?}");
    let streamed: String =
        chunks.iter().filter_map(|c| c["choices"][0]["text"].as_str()).collect::<Vec<_>>().concat();
    assert_eq!(streamed, text);
    let finishes: Vec<&Value> =
        chunks.iter().map(|c| &c["choices"][0]["finish_reason"]).filter(|f| !f.is_null()).collect();
    assert_eq!(finishes, vec![&json!("length")], "one chunk carries the finish reason");
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(usage["completion_tokens"], 12, "{usage}");
    assert_eq!(chunks.last().unwrap()["choices"], json!([]));
    assert!(chunks.iter().all(|c| c["object"] == "text_completion" && c["id"] == chunks[0]["id"]));

    // /v1/chat/completions
    let chat = json!({
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "max_tokens": 24, "temperature": 0,
    });
    let plain = s.post("/v1/chat/completions", &chat).json();
    let content = plain["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    assert!(content.contains("Paris"), "{plain}");
    assert_eq!(plain["choices"][0]["finish_reason"], "stop", "ends at eos: {plain}");
    let mut body = chat.clone();
    body["stream"] = json!(true);
    let (status, sse) = s.stream("/v1/chat/completions", &body);
    assert_eq!(status, 200);
    let lines = sse.all_lines();
    assert_eq!(lines.last().map(String::as_str), Some("data: [DONE]"), "{lines:?}");
    let chunks: Vec<Value> = lines[..lines.len() - 1].iter().map(|l| payload(l)).collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect::<Vec<_>>()
        .concat();
    assert_eq!(streamed, content);
    assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "stop");
    assert!(!streamed.contains("<|im_end|>"));

    // TGI: /generate_stream against /generate, ending at eos.
    let tgi = json!({"inputs": CHAT_PROMPT, "parameters": {"max_new_tokens": 24, "details": true}});
    let plain = s.post("/generate", &tgi).json();
    let generated = plain["generated_text"].as_str().unwrap().to_string();
    assert!(generated.contains("Paris"), "{plain}");
    let details = &plain["details"];
    assert_eq!(details["finish_reason"], "eos_token", "{plain}");
    let tokens = details["tokens"].as_array().unwrap();
    assert_eq!(details["generated_tokens"].as_u64(), Some(tokens.len() as u64));
    let last = tokens.last().unwrap();
    assert_eq!((&last["text"], &last["special"]), (&json!("<|im_end|>"), &json!(true)), "{plain}");

    let (status, sse) = s.stream("/generate_stream", &tgi);
    assert_eq!(status, 200);
    let lines = sse.all_lines();
    assert!(lines.iter().all(|l| l.starts_with("data:{")), "TGI writes `data:{{`: {lines:?}");
    assert!(!lines.iter().any(|l| l.contains("[DONE]")), "{lines:?}");
    let events: Vec<Value> = lines.iter().map(|l| payload(l)).collect();
    let texts: String = events
        .iter()
        .filter(|e| e["token"]["special"] != true)
        .map(|e| e["token"]["text"].as_str().unwrap())
        .collect::<Vec<_>>()
        .concat();
    assert_eq!(texts, generated);
    let ids: Vec<&Value> = events.iter().map(|e| &e["token"]["id"]).collect();
    let plain_ids: Vec<&Value> = tokens.iter().map(|t| &t["id"]).collect();
    assert_eq!(ids, plain_ids);
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["index"].as_u64(), Some(i as u64 + 1), "{e}");
    }
    let (end, rest) = events.split_last().unwrap();
    assert!(rest.iter().all(|e| e["generated_text"].is_null() && e["details"].is_null()), "{lines:?}");
    assert_eq!(end["generated_text"], generated.as_str(), "{end}");
    assert_eq!(end["token"]["special"], true, "{end}");
    assert_eq!(end["details"]["finish_reason"], "eos_token", "{end}");
    assert_eq!(end["details"]["generated_tokens"].as_u64(), Some(events.len() as u64), "{end}");
    assert!(end["details"]["input_length"].as_u64().is_some_and(|n| n > 20), "{end}");

    // POST / with stream: true is the stream too.
    let mut body = tgi.clone();
    body["stream"] = json!(true);
    let (status, sse) = s.stream("/", &body);
    assert_eq!(status, 200);
    let compat = sse.all_lines();
    assert_eq!(payload(compat.last().unwrap())["generated_text"], generated.as_str(), "{compat:?}");
}

#[test]
fn errors_are_json_with_the_right_status_and_field() {
    let s = Server::start(&[]);
    let raw = |path: &str, body: &str| s.request("POST", path, Some(body), &[]);

    let e = openai_error(&raw("/v1/completions", "{\"prompt\": "), 400, None);
    assert_eq!(e["type"], "invalid_request_error");
    assert!(e["message"].as_str().unwrap().contains("JSON"), "{e}");
    openai_error(&raw("/v1/completions", ""), 400, None);
    openai_error(&raw("/v1/completions", "[1, 2]"), 400, None);

    let e = openai_error(
        &s.post("/v1/completions", &json!({"prompt": "hi", "temperature": "hot"})),
        400,
        Some("temperature"),
    );
    assert!(e["message"].as_str().unwrap().contains("temperature"), "{e}");
    let e = openai_error(
        &s.post("/v1/completions", &json!({"prompt": "hi", "max_tokens": -1})),
        400,
        Some("max_tokens"),
    );
    assert!(e["message"].as_str().unwrap().contains("max_tokens"), "{e}");
    openai_error(
        &s.post("/v1/completions", &json!({"prompt": "hi", "max_tokens": 0})),
        400,
        Some("max_tokens"),
    );
    openai_error(&s.post("/v1/completions", &json!({"max_tokens": 3})), 400, Some("prompt"));
    openai_error(
        &s.post("/v1/completions", &json!({"prompt": "hi", "temperature": -1})),
        400,
        Some("temperature"),
    );
    openai_error(
        &s.post("/v1/chat/completions", &json!({"messages": [{"content": "hi"}]})),
        400,
        Some("messages[0].role"),
    );
    openai_error(
        &s.post(
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "hi"}, {"role": "wizard", "content": "x"}]}),
        ),
        400,
        Some("messages[1].role"),
    );
    let e = openai_error(
        &s.post("/v1/completions", &json!({"prompt": "hi", "model": "nope"})),
        404,
        Some("model"),
    );
    assert_eq!(e["code"], "model_not_found", "{e}");

    let max_total = s.get("/info").json()["max_total_tokens"].as_u64().unwrap();
    let e = openai_error(
        &s.post("/v1/completions", &json!({"prompt": PROMPT, "max_tokens": max_total})),
        400,
        Some("max_tokens"),
    );
    assert!(e["message"].as_str().unwrap().contains("maximum context length"), "{e}");
    // One token over: 8 prompt tokens (as ids) + max_total - 7.
    let e = openai_error(
        &s.post("/v1/completions", &json!({"prompt": vec![504u32; 8], "max_tokens": max_total - 7})),
        400,
        Some("max_tokens"),
    );
    assert!(e["message"].as_str().unwrap().contains(&format!("you requested {}", max_total + 1)), "{e}");
    // A prompt over the input limit names the prompt.
    let long: Vec<u32> = vec![504; max_total as usize];
    openai_error(&s.post("/v1/completions", &json!({"prompt": long, "max_tokens": 1})), 400, Some("prompt"));

    // TGI's routes answer TGI's shape, validation errors with 422.
    let msg = tgi_error(
        &s.post("/generate", &json!({"inputs": "hi", "parameters": {"temperature": 0}})),
        422,
        "validation",
    );
    assert!(msg.contains("temperature"), "{msg}");
    tgi_error(
        &s.post("/generate_stream", &json!({"inputs": "hi", "parameters": {"top_p": 1.0}})),
        422,
        "validation",
    );
    tgi_error(&s.post("/generate", &json!({"parameters": {}})), 422, "validation");
    tgi_error(&raw("/generate", "nope"), 422, "validation");
    tgi_error(&s.post("/", &json!({"inputs": ""})), 422, "validation");

    // Unknown routes and methods.
    let e = openai_error(&s.get("/no/such/route"), 404, None);
    assert!(e["message"].as_str().unwrap().contains("/no/such/route"), "{e}");
    openai_error(&s.post("/v1/nothing", &json!({})), 404, None);
    let e = openai_error(&s.get("/v1/completions"), 405, None);
    assert!(e["message"].as_str().unwrap().contains("GET"), "{e}");
    openai_error(&s.post("/v1/models", &json!({})), 405, None);
    tgi_error(&s.get("/generate"), 405, "not_found");

    // Refusals are counted by reason.
    let m = s.metrics();
    assert!(m.get("peregrine:requests_rejected_total", &[("reason", "invalid")]) >= 10.0, "{}", m.0);
    assert!(m.get("peregrine:requests_rejected_total", &[("reason", "not_found")]) >= 3.0, "{}", m.0);
}

#[test]
fn bodies_over_the_payload_limit_are_413() {
    let s = Server::start(&["--payload-limit", "1000"]);
    let big = "a ".repeat(600);
    let e = openai_error(&s.post("/v1/completions", &json!({"prompt": big, "max_tokens": 1})), 413, None);
    assert!(e["message"].as_str().unwrap().contains("1000"), "{e}");
    tgi_error(&s.post("/generate", &json!({"inputs": big})), 413, "validation");
    // Under the limit is fine.
    let r = s.post("/v1/completions", &completion(2));
    assert_eq!(r.status, 200, "{r:?}");
}

#[test]
fn the_api_key_guards_every_route_but_probes_and_metrics() {
    let s = Server::start(&["--api-key", "k"]);
    let body = completion(2).to_string();

    let e = openai_error(&s.request("POST", "/v1/completions", Some(&body), &[]), 401, None);
    assert_eq!((&e["type"], &e["code"]), (&json!("authentication_error"), &json!("invalid_api_key")), "{e}");
    openai_error(
        &s.request("POST", "/v1/completions", Some(&body), &[("Authorization", "Bearer nope")]),
        401,
        None,
    );
    openai_error(&s.request("POST", "/v1/completions", Some(&body), &[("Authorization", "k")]), 401, None);
    openai_error(&s.get("/v1/models"), 401, None);
    openai_error(&s.get("/info"), 401, None);
    tgi_error(&s.post("/generate", &json!({"inputs": "hi"})), 401, "unauthorized");

    let ok = s.request("POST", "/v1/completions", Some(&body), &[("Authorization", "Bearer k")]);
    assert_eq!(ok.status, 200, "{ok:?}");
    assert_eq!(ok.json()["usage"]["completion_tokens"], 2);
    let r = s.request("GET", "/v1/models", None, &[("Authorization", "Bearer k")]);
    assert_eq!(r.status, 200, "{r:?}");

    // Open without the key.
    for path in ["/health", "/metrics", "/metrics/", "/liveness", "/readiness", "/version", "/"] {
        assert_eq!(s.get(path).status, 200, "{path}");
    }
    // The key itself is not shown.
    let args = s.request("GET", "/v1/launch_arguments", None, &[("Authorization", "Bearer k")]).json();
    assert_eq!(args["api_key"], "<redacted>", "{args}");
}

#[test]
fn over_max_concurrent_requests_is_429_at_once() {
    let s = Server::start(&["--max-concurrent-requests", "1"]);
    let (first_tx, first_rx) = mpsc::channel::<()>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let (agent, url) = (s.agent.clone(), s.url("/v1/completions"));
    let long = std::thread::spawn(move || {
        let body = json!({"prompt": PROMPT, "max_tokens": 400, "ignore_eos": true, "stream": true});
        let (status, mut sse) = stream(&agent, &url, &body).expect("the first request");
        assert_eq!(status, 200);
        let first = sse.next_line().expect("a first event");
        assert!(first.starts_with("data: {"), "{first}");
        first_tx.send(()).unwrap();
        // Hold the stream open until told to let go; then drop it mid-way.
        let _ = release_rx.recv_timeout(Duration::from_secs(30));
    });
    first_rx.recv_timeout(Duration::from_secs(30)).expect("the first stream started");

    let t0 = Instant::now();
    let r = s.post("/v1/completions", &completion(2));
    let took = t0.elapsed();
    let e = openai_error(&r, 429, None);
    assert_eq!(e["type"], "rate_limit_error", "{e}");
    assert_eq!(e["code"], "server_overloaded", "{e}");
    assert!(took < Duration::from_secs(2), "refused at once, not queued: {took:?}");
    // TGI's routes too, in TGI's shape.
    tgi_error(
        &s.post("/generate", &json!({"inputs": "hi", "parameters": {"max_new_tokens": 2}})),
        429,
        "overloaded",
    );
    let m = s.metrics();
    assert!(m.get("peregrine:requests_rejected_total", &[("reason", "overloaded")]) >= 2.0, "{}", m.0);
    assert_eq!(m.get("peregrine:http_requests_in_flight", &[]), 1.0, "{}", m.0);

    release_tx.send(()).unwrap();
    long.join().expect("the first request's thread");
    let t0 = Instant::now();
    loop {
        let r = s.post("/v1/completions", &completion(2));
        if r.status == 200 {
            assert_eq!(r.json()["usage"]["completion_tokens"], 2);
            break;
        }
        assert_eq!(r.status, 429, "{r:?}");
        assert!(t0.elapsed() < Duration::from_secs(10), "the slot was not given back after the client left");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn queue_caps_refuse_with_429_while_requests_wait() {
    // One sequence runs at a time: everything after the first waits in the queue.
    let s = Server::start(&["--max-num-seqs", "1", "--max-queue-requests", "2", "--max-queue-tokens", "20"]);
    let long =
        |prompt: &str| json!({"prompt": prompt, "max_tokens": 1000, "ignore_eos": true, "stream": true});
    let mut running = raw_post(s.port, "/v1/completions", &long(PROMPT));
    read_first_event(&mut running);
    // 8 prompt tokens wait.
    let _waiting = raw_post(s.port, "/v1/completions", &long(PROMPT));
    s.wait_metrics(Duration::from_secs(10), "one request queued", |m| {
        m.get("peregrine:queue_requests", &[]) == 1.0 && m.get("peregrine:queue_tokens", &[]) == 8.0
    });
    // 16 more would make 24 > 20 queued prompt tokens.
    let r = s.post("/v1/completions", &json!({"prompt": format!("{PROMPT}{PROMPT}"), "max_tokens": 2}));
    let e = openai_error(&r, 429, None);
    assert!(e["message"].as_str().unwrap().contains("--max-queue-tokens"), "{e}");
    // 2 more fit the token cap; then the request cap (2) is full.
    let _also_waiting = raw_post(s.port, "/v1/completions", &long("Hi there"));
    s.wait_metrics(Duration::from_secs(10), "two requests queued", |m| {
        m.get("peregrine:queue_requests", &[]) == 2.0
    });
    let e = openai_error(&s.post("/v1/completions", &completion(2)), 429, None);
    assert!(e["message"].as_str().unwrap().contains("--max-queue-requests"), "{e}");
    // Clients leaving empty the queue; the server admits again.
    drop((running, _waiting, _also_waiting));
    s.wait_metrics(Duration::from_secs(10), "the queue empties", |m| {
        m.get("peregrine:queue_requests", &[]) == 0.0 && m.running() == 0.0
    });
    assert_eq!(s.post("/v1/completions", &completion(2)).json()["usage"]["completion_tokens"], 2);
}

/// Reads a raw streaming response up to its first `data:` event; checks the status.
fn read_first_event(sock: &mut TcpStream) {
    sock.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("data:") {
        let n = sock.read(&mut buf).expect("read the stream");
        assert!(n > 0, "closed before the first event: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(got.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&got));
}

#[test]
fn a_client_going_away_aborts_its_request_and_frees_its_blocks() {
    // One sequence at a time, so that a second request waits in the queue.
    let s = Server::start(&["--max-num-seqs", "1"]);
    let idle = s.metrics();
    assert_eq!((idle.running(), idle.kv_usage(), idle.aborted()), (0.0, 0.0, 0.0), "{}", idle.0);
    let in_flight = |m: &Metrics| m.get("peregrine:http_requests_in_flight", &[]);
    let long = json!({"prompt": PROMPT, "max_tokens": 2000, "ignore_eos": true, "stream": true});

    // Streaming: read up to the first event, then hang up.
    let mut sock = raw_post(s.port, "/v1/completions", &long);
    read_first_event(&mut sock);
    // The engine's gauges are published after each step: wait for the step's.
    s.wait_metrics(Duration::from_secs(10), "streaming request running", |m| {
        m.running() == 1.0 && m.kv_usage() > 0.0 && in_flight(m) == 1.0
    });
    drop(sock);
    let m = s.wait_metrics(Duration::from_secs(10), "streaming request aborted", |m| {
        m.running() == 0.0 && m.kv_usage() == 0.0
    });
    assert_eq!((m.aborted(), in_flight(&m)), (1.0, 0.0), "{}", m.0);

    // Not streaming: give up waiting for the answer after a second, then hang up.
    let mut body = long.clone();
    body["stream"] = json!(false);
    let mut sock = raw_post(s.port, "/v1/completions", &body);
    sock.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let err = sock.read(&mut [0u8; 256]).expect_err("no answer within a second");
    assert!(matches!(err.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut), "{err}");
    s.wait_metrics(Duration::from_secs(10), "non-streaming request running", |m| m.running() == 1.0);
    drop(sock);
    let m = s.wait_metrics(Duration::from_secs(10), "non-streaming request aborted", |m| {
        m.running() == 0.0 && m.kv_usage() == 0.0
    });
    assert_eq!((m.aborted(), in_flight(&m)), (2.0, 0.0), "{}", m.0);

    // Still queued: a stream waiting behind a running one, dropped before it starts.
    let mut running = raw_post(s.port, "/v1/completions", &long);
    read_first_event(&mut running);
    let queued = raw_post(s.port, "/v1/completions", &long);
    s.wait_metrics(Duration::from_secs(10), "second request queued", |m| {
        m.get("vllm:num_requests_waiting", &[]) == 1.0 && in_flight(m) == 2.0
    });
    drop(queued);
    let m = s.wait_metrics(Duration::from_secs(10), "queued request aborted", |m| {
        m.get("vllm:num_requests_waiting", &[]) == 0.0 && in_flight(m) == 1.0
    });
    assert_eq!((m.aborted(), m.running()), (3.0, 1.0), "{}", m.0);
    assert_eq!(m.get("peregrine:queue_requests", &[]), 0.0, "{}", m.0);
    drop(running);
    let m = s.wait_metrics(Duration::from_secs(10), "everything aborted", |m| {
        m.running() == 0.0 && m.kv_usage() == 0.0 && in_flight(m) == 0.0
    });
    assert_eq!(m.aborted(), 4.0, "{}", m.0);
    // Nothing was counted as a completed request.
    assert_eq!(m.get("vllm:request_success_total", &[("finished_reason", "length")]), 0.0, "{}", m.0);
}

#[test]
fn sigterm_finishes_in_flight_requests_then_exits() {
    let mut s = Server::start(&[]);
    let body = json!({"prompt": PROMPT, "max_tokens": 48, "ignore_eos": true, "temperature": 0});
    let mut plain = Vec::new();
    for _ in 0..3 {
        let (agent, url, body) = (s.agent.clone(), s.url("/v1/completions"), body.to_string());
        plain.push(std::thread::spawn(move || request(&agent, &url, "POST", Some(&body), &[])));
    }
    let (agent, url) = (s.agent.clone(), s.url("/v1/completions"));
    let mut streamed_body = body.clone();
    streamed_body["stream"] = json!(true);
    streamed_body["stream_options"] = json!({"include_usage": true});
    let streamed = std::thread::spawn(move || {
        stream(&agent, &url, &streamed_body).map(|(status, sse)| (status, sse.all_lines()))
    });
    // All four admitted (not merely sent) before the signal.
    s.wait_metrics(Duration::from_secs(20), "four requests in flight", |m| {
        m.get("peregrine:http_requests_in_flight", &[]) == 4.0 && m.running() >= 1.0
    });

    let ok = Command::new("kill").args(["-TERM", &s.child.id().to_string()]).status().expect("run kill");
    assert!(ok.success());
    let t0 = Instant::now();

    // A new request is refused: the listener is closed (connection refused) or, in
    // the moment before, the server answers 503.
    std::thread::sleep(Duration::from_millis(200));
    match request(&new_agent(), &s.url("/v1/completions"), "POST", Some(&completion(2).to_string()), &[]) {
        Ok(r) => {
            let e = openai_error(&r, 503, None);
            assert_eq!(e["type"], "service_unavailable", "{e}");
        }
        Err(e) => assert!(matches!(e, ureq::Error::Io(_) | ureq::Error::ConnectionFailed), "{e:?}"),
    }

    for t in plain {
        let r = t.join().unwrap().unwrap_or_else(|e| panic!("an in-flight request failed: {e}\n{}", s.log()));
        assert_eq!(r.status, 200, "{r:?}");
        let v = r.json();
        assert_eq!(v["usage"]["completion_tokens"], 48, "{v}");
        assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
        assert!(v["choices"][0]["text"].as_str().unwrap().starts_with(CONTINUATION), "{v}");
    }
    let (status, lines) =
        streamed.join().unwrap().unwrap_or_else(|e| panic!("the in-flight stream failed: {e}\n{}", s.log()));
    assert_eq!(status, 200);
    assert_eq!(lines.last().map(String::as_str), Some("data: [DONE]"), "{lines:?}");
    let usage = payload(&lines[lines.len() - 2]);
    assert_eq!(usage["usage"]["completion_tokens"], 48, "{usage}");

    let status = s.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{status}:\n{}", s.log());
    assert!(t0.elapsed() < Duration::from_secs(30));
    let log = s.log();
    assert!(log.contains("shutting down") && log.contains("stopped"), "{log}");
    assert!(!log.contains("shutdown timeout reached"), "{log}");
}

#[test]
fn while_loading_probes_answer_503_and_a_model_without_tokenizer_is_refused() {
    // Random weights for a ~150M-parameter llama take a second or two to make: long
    // enough to catch the server listening before the model is ready.
    let dir = std::env::temp_dir().join(format!("peregrine-serve-dummy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 10,
        "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32000,
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let t0 = Instant::now();
    let mut s = Server::spawn(&["-m", dir.to_str().unwrap(), "--load-format", "dummy"]);

    let r = s.get("/health");
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(r.json(), json!({"error": "unhealthy", "error_type": "healthcheck"}));
    let r = s.get("/readiness");
    assert_eq!((r.status, r.json()), (503, json!({"ready": "ko"})));
    let r = s.get("/liveness");
    assert_eq!(r.status, 200, "alive while loading: {r:?}");
    let e = openai_error(&s.post("/v1/completions", &completion(2)), 503, None);
    assert_eq!(e["type"], "service_unavailable", "{e}");
    assert!(e["message"].as_str().unwrap().contains("loading"), "{e}");
    tgi_error(&s.post("/generate", &json!({"inputs": "hi"})), 503, "unhealthy");
    openai_error(&s.get("/info"), 503, None);
    let m = s.metrics();
    assert_eq!(m.get("peregrine:model_loaded", &[]), 0.0, "{}", m.0);
    let models = s.get("/v1/models").json();
    assert!(models["data"][0]["max_model_len"].is_null(), "{models}");
    // All of that happened while loading.
    let r = s.get("/health");
    assert_eq!(r.status, 503, "still loading after {:?}", t0.elapsed());

    let status = s.wait_exit(Duration::from_secs(60));
    assert!(!status.success(), "{status}");
    let log = s.log();
    assert!(log.contains("loading the model failed") && log.contains("tokenizer"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn metrics_count_requests_tokens_and_latencies() {
    let s = Server::start(&[]);
    let before = s.metrics();
    assert_eq!(before.get("peregrine:model_loaded", &[]), 1.0, "{}", before.0);
    assert_eq!(before.get("vllm:generation_tokens_total", &[]), 0.0, "{}", before.0);

    for n in [3, 5] {
        let r = s.post("/v1/completions", &completion(n));
        assert_eq!(r.status, 200, "{r:?}");
    }
    let r = s.post("/generate", &json!({"inputs": PROMPT, "parameters": {"max_new_tokens": 4}}));
    assert_eq!(r.status, 200, "{r:?}");
    let mut body = completion(6);
    body["stream"] = json!(true);
    let (status, sse) = s.stream("/v1/completions", &body);
    assert_eq!(status, 200);
    assert_eq!(sse.all_lines().last().map(String::as_str), Some("data: [DONE]"));
    let requests = 4.0;
    let generated = 3.0 + 5.0 + 4.0 + 6.0;

    // The engine's counters and gauges are published after each step, so the last
    // step's may trail the last response by a moment; the request-level series
    // (histograms, finish reasons) are recorded before the response ends.
    let m = s.wait_metrics(Duration::from_secs(10), "the last step's statistics", |m| {
        m.get("vllm:generation_tokens_total", &[]) >= generated && m.running() == 0.0
    });
    let model = s.model.as_str();
    assert!(m.samples().iter().all(|(_, l, _)| l.contains(&format!("model_name=\"{model}\""))), "{}", m.0);
    assert_eq!(m.get("vllm:generation_tokens_total", &[]), generated, "{}", m.0);
    assert!(m.get("vllm:prompt_tokens_total", &[]) > 0.0, "{}", m.0);
    assert!(m.get("vllm:time_to_first_token_seconds_count", &[]) >= requests, "{}", m.0);
    assert_eq!(m.get("vllm:e2e_request_latency_seconds_count", &[]), requests, "{}", m.0);
    assert_eq!(m.get("vllm:request_generation_tokens_count", &[]), requests, "{}", m.0);
    assert_eq!(m.get("vllm:request_generation_tokens_sum", &[]), generated, "{}", m.0);
    assert_eq!(m.get("vllm:request_prompt_tokens_sum", &[]), requests * 8.0, "{}", m.0);
    assert_eq!(m.get("vllm:request_success_total", &[("finished_reason", "length")]), requests, "{}", m.0);
    assert_eq!(m.get("vllm:request_success_total", &[("finished_reason", "abort")]), 0.0, "{}", m.0);
    assert!(m.get("vllm:inter_token_latency_seconds_count", &[]) >= generated - requests, "{}", m.0);
    assert_eq!(m.running(), 0.0, "{}", m.0);
    assert_eq!(m.get("vllm:num_requests_waiting", &[]), 0.0, "{}", m.0);

    // Every histogram: buckets cumulative in order of `le`, +Inf equal to _count.
    let samples = m.samples();
    let mut families: Vec<&str> =
        samples.iter().filter_map(|(n, _, _)| n.strip_suffix("_bucket")).collect::<Vec<_>>();
    families.dedup();
    assert!(families.len() >= 6, "{families:?}");
    for family in families {
        let bucket = format!("{family}_bucket");
        let buckets: Vec<(f64, f64)> = samples
            .iter()
            .filter(|(n, _, _)| *n == bucket)
            .map(|(_, l, v)| {
                let le = l.split(',').find_map(|kv| kv.strip_prefix("le=\"")).expect("an le label");
                let le = le.trim_end_matches('"');
                (if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap() }, *v)
            })
            .collect();
        assert!(buckets.windows(2).all(|w| w[0].0 < w[1].0), "{family}: bounds increase: {buckets:?}");
        assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{family}: cumulative: {buckets:?}");
        let (last_le, last) = *buckets.last().unwrap();
        assert_eq!(last_le, f64::INFINITY, "{family}");
        assert_eq!(last, m.get(&format!("{family}_count"), &[]), "{family}: +Inf == _count");
        assert!(last >= requests, "{family}: {last}");
    }
    // HELP and TYPE precede every family.
    for family in
        ["vllm:time_to_first_token_seconds", "vllm:request_success_total", "vllm:num_requests_running"]
    {
        assert!(m.0.contains(&format!("# TYPE {family} ")), "{family}");
        assert!(m.0.contains(&format!("# HELP {family} ")), "{family}");
    }
}
