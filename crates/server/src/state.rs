//! What every handler shares: the config, the engine once it has loaded, admission,
//! metrics and the lifecycle flags.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use peregrine_engine::handle::EngineHandle;
use peregrine_model::tokenizer::Tokenizer;

use crate::admission::Admission;
use crate::config::ServerConfig;
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::logging::Logger;
use crate::metrics::Metrics;
use crate::tracing::Tracer;

/// Facts about the loaded model, for `/info`, `/v1/models` and `/v1/info`.
#[derive(Clone, Debug, Default)]
pub struct ModelInfo {
    /// Where it was loaded from (file, directory or hub id).
    pub source: String,
    pub architecture: String,
    /// "cpu", or the accelerator's name.
    pub device: String,
    /// Storage of the weights ("Q4_1", "BF16", "Q4_K+Q6_K", …).
    pub dtype: String,
    pub vocab_size: usize,
    pub context_length: usize,
    pub num_layers: usize,
}

/// The engine and tokenizer, available once the model has loaded.
pub struct Backend {
    pub engine: EngineHandle,
    pub tokenizer: Arc<Tokenizer>,
    pub model: ModelInfo,
    /// Effective limits: the configured ones, or derived from the engine.
    pub max_input_tokens: usize,
    pub max_total_tokens: usize,
}

pub struct AppState {
    pub config: ServerConfig,
    backend: OnceLock<Backend>,
    pub admission: Arc<Admission>,
    pub metrics: Arc<Metrics>,
    shutting_down: AtomicBool,
    pub started: Instant,
    /// Unix seconds at start-up (OpenAI's `created` of the model).
    pub started_unix: u64,
    pub log: Logger,
    pub tracer: Option<Tracer>,
}

impl AppState {
    pub fn new(config: ServerConfig, tracer: Option<Tracer>) -> Self {
        let model_name = config.served_model_names.first().cloned().unwrap_or_default();
        Self {
            admission: Arc::new(Admission::new(&config.limits)),
            metrics: Arc::new(Metrics::new(&model_name)),
            log: Logger::new(config.json_output),
            config,
            backend: OnceLock::new(),
            shutting_down: AtomicBool::new(false),
            started: Instant::now(),
            started_unix: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
            tracer,
        }
    }

    /// Installs the loaded engine, checking the configured limits against it.
    pub fn set_backend(
        &self,
        engine: EngineHandle,
        tokenizer: Arc<Tokenizer>,
        model: ModelInfo,
    ) -> Result<(), String> {
        let limits = &self.config.limits;
        let max_model_len = engine.info.max_model_len;
        let max_total = limits.max_total_tokens.unwrap_or(max_model_len);
        if max_total > max_model_len {
            return Err(format!(
                "--max-total-tokens {max_total} is over the engine's max model len {max_model_len} \
                 (raise --max-model-len or the KV cache)"
            ));
        }
        let max_input = limits.max_input_tokens.unwrap_or(max_total - 1);
        if max_input >= max_total {
            return Err(format!(
                "--max-input-tokens ({max_input}) must be < --max-total-tokens ({max_total})"
            ));
        }
        let backend =
            Backend { engine, tokenizer, model, max_input_tokens: max_input, max_total_tokens: max_total };
        self.backend.set(backend).map_err(|_| "the model is already loaded".to_string())
    }

    /// The engine, or 503 while loading or shutting down.
    pub fn backend(&self) -> ApiResult<&Backend> {
        if self.is_shutting_down() {
            return Err(ApiError::new(ErrorKind::Unavailable, "the server is shutting down"));
        }
        self.backend.get().ok_or_else(ApiError::loading)
    }

    /// The engine whatever the lifecycle state (metrics, shutdown).
    pub fn loaded(&self) -> Option<&Backend> {
        self.backend.get()
    }

    pub fn is_ready(&self) -> bool {
        self.backend.get().is_some() && !self.is_shutting_down()
    }

    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// The served name a request's `model` refers to (absent: the first), or 404.
    pub fn resolve_model(&self, requested: Option<&str>) -> ApiResult<String> {
        let names = &self.config.served_model_names;
        match requested {
            None | Some("") => Ok(names[0].clone()),
            Some(m) if names.iter().any(|n| n == m) => Ok(m.to_string()),
            Some(m) => Err(ApiError::model_not_found(m)),
        }
    }

    pub fn model_name(&self) -> &str {
        &self.config.served_model_names[0]
    }
}
