//! What the server is told at start-up (the CLI fills it from flags and environment).

use std::time::Duration;

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub host: String,
    pub port: u16,
    /// Names clients may use in `model`; the first is what `/v1/models` lists.
    pub served_model_names: Vec<String>,
    /// Bearer token required on every route but health, metrics and the chat page.
    pub api_key: Option<String>,
    /// Origins allowed by CORS (`*`: any); empty: no CORS headers.
    pub cors_allow_origins: Vec<String>,
    pub limits: Limits,
    pub max_body_bytes: usize,
    /// How long SIGTERM waits for in-flight requests before exiting anyway.
    pub shutdown_timeout: Duration,
    /// Log lines as JSON objects instead of text.
    pub json_output: bool,
    /// OTLP/HTTP endpoint for traces (e.g. http://127.0.0.1:4318).
    pub otlp_endpoint: Option<String>,
    pub otlp_service_name: String,
    /// Every launch argument, for `/v1/launch_arguments` (happy_vllm).
    pub launch_arguments: serde_json::Map<String, serde_json::Value>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 8000,
            served_model_names: vec!["default".into()],
            api_key: None,
            cors_allow_origins: Vec::new(),
            limits: Limits::default(),
            max_body_bytes: 2 << 20,
            shutdown_timeout: Duration::from_secs(30),
            json_output: false,
            otlp_endpoint: None,
            otlp_service_name: "peregrine".into(),
            launch_arguments: serde_json::Map::new(),
        }
    }
}

/// Admission limits, named as in TGI's launcher. `None`: derived from the model or unlimited.
#[derive(Clone, Debug)]
pub struct Limits {
    /// HTTP requests in flight at once; one more is answered 429 at once.
    pub max_concurrent_requests: usize,
    /// Prompt tokens per request (default: max_total_tokens − 1).
    pub max_input_tokens: Option<usize>,
    /// Prompt + generated tokens per request (default: the engine's max_model_len).
    pub max_total_tokens: Option<usize>,
    pub max_stop_sequences: usize,
    /// `best_of` (samples ranked, only the best returned) per request.
    pub max_best_of: usize,
    /// TGI's `top_n_tokens` (alternatives per token) at most.
    pub max_top_n_tokens: usize,
    /// Requests admitted but not yet scheduled; one more is answered 429.
    pub max_queue_requests: Option<usize>,
    /// Prompt tokens of requests admitted but not yet scheduled.
    pub max_queue_tokens: Option<usize>,
    /// Prompts in one `/v1/completions` request (a list of prompts).
    pub max_client_batch_size: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            // TGI's default is 128; a paged cache with continuous batching queues
            // cheaply, so ours is higher (the queue caps are the fail-fast knobs).
            max_concurrent_requests: 1024,
            max_input_tokens: None,
            max_total_tokens: None,
            max_stop_sequences: 4,
            max_best_of: 2,
            max_top_n_tokens: 5,
            max_queue_requests: None,
            max_queue_tokens: None,
            max_client_batch_size: 32,
        }
    }
}
