//! `peregrine serve`: the OpenAI- and TGI-compatible HTTP server.
//!
//! Limits carry TGI's launcher names and environment variables; engine options are
//! shared with `generate` (vLLM's names). The socket is bound before the model loads,
//! so `/health` answers 503 until it is ready.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Result};
use clap::{ArgMatches, Args};
use peregrine_engine::handle::EngineHandle;
use peregrine_model::load::Model;
use peregrine_server::{Limits, Loaded, ModelInfo, ServerConfig};
use serde_json::{Map, Value};

use crate::engine_args::{parse_bytes, EngineArgs};
use crate::{Device, ModelArgs};

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Address to bind (0.0.0.0 exposes the server beyond this machine).
    #[arg(long, default_value = "127.0.0.1", env = "PEREGRINE_HOST")]
    pub host: String,
    /// Port (0: any free port; the log says which).
    #[arg(long, short = 'p', default_value_t = 8000, env = "PEREGRINE_PORT")]
    pub port: u16,
    /// Names clients may use as `model` (repeatable; default: the --model argument).
    #[arg(long)]
    pub served_model_name: Vec<String>,
    /// Require `Authorization: Bearer <key>` on every route but health and metrics.
    #[arg(long, env = "PEREGRINE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Origins allowed by CORS (repeatable; `*` for any).
    #[arg(long, env = "CORS_ALLOW_ORIGIN", value_delimiter = ',')]
    pub cors_allow_origin: Vec<String>,
    /// HTTP requests in flight at once; one more is refused with 429 (nothing queued).
    #[arg(long, default_value_t = 1024, env = "MAX_CONCURRENT_REQUESTS")]
    pub max_concurrent_requests: usize,
    /// Prompt tokens per request (default: --max-total-tokens − 1).
    #[arg(long, alias = "max-input-length", env = "MAX_INPUT_TOKENS")]
    pub max_input_tokens: Option<usize>,
    /// Prompt + generated tokens per request (default: the engine's max model len).
    #[arg(long, env = "MAX_TOTAL_TOKENS")]
    pub max_total_tokens: Option<usize>,
    #[arg(long, default_value_t = 4, env = "MAX_STOP_SEQUENCES")]
    pub max_stop_sequences: usize,
    #[arg(long, default_value_t = 2, env = "MAX_BEST_OF")]
    pub max_best_of: usize,
    /// TGI's `top_n_tokens` at most.
    #[arg(long, default_value_t = 5, env = "MAX_TOP_N_TOKENS")]
    pub max_top_n_tokens: usize,
    /// Prompts in one /v1/completions request.
    #[arg(long, default_value_t = 32, env = "MAX_CLIENT_BATCH_SIZE")]
    pub max_client_batch_size: usize,
    /// Tokens the KV cache holds over all sequences (sets the number of KV blocks).
    #[arg(long, env = "MAX_BATCH_TOTAL_TOKENS")]
    pub max_batch_total_tokens: Option<usize>,
    /// Requests admitted but not yet scheduled; one more is refused with 429.
    #[arg(long, env = "PEREGRINE_MAX_QUEUE_REQUESTS")]
    pub max_queue_requests: Option<usize>,
    /// Prompt tokens of requests admitted but not yet scheduled; more is refused with 429.
    #[arg(long, env = "PEREGRINE_MAX_QUEUE_TOKENS")]
    pub max_queue_tokens: Option<usize>,
    /// Largest request body (bytes; K/M/KiB/MiB suffixes); larger is refused with 413.
    #[arg(long, default_value = "2000000", value_parser = parse_bytes, env = "PAYLOAD_LIMIT")]
    pub payload_limit: usize,
    /// Seconds SIGTERM waits for in-flight requests before exiting anyway.
    #[arg(long, default_value_t = 30.0)]
    pub shutdown_timeout: f64,
    /// Log one JSON object per line.
    #[arg(long, env = "JSON_OUTPUT")]
    pub json_output: bool,
    /// OTLP/HTTP endpoint for OpenTelemetry traces (e.g. http://127.0.0.1:4318).
    #[arg(long, env = "OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    #[arg(long, default_value = "peregrine", env = "OTLP_SERVICE_NAME")]
    pub otlp_service_name: String,
}

pub fn run(mut args: ServeArgs, matches: &ArgMatches) -> Result<()> {
    if let Some(total) = args.max_batch_total_tokens {
        args.engine.num_kv_blocks = Some(total.div_ceil(args.engine.block_size.max(1)));
    }
    let names = if args.served_model_name.is_empty() {
        vec![args.model.model.clone()]
    } else {
        args.served_model_name.clone()
    };
    let config = ServerConfig {
        host: args.host.clone(),
        port: args.port,
        served_model_names: names,
        api_key: args.api_key.clone().filter(|k| !k.is_empty()),
        cors_allow_origins: args.cors_allow_origin.clone(),
        limits: Limits {
            max_concurrent_requests: args.max_concurrent_requests,
            max_input_tokens: args.max_input_tokens,
            max_total_tokens: args.max_total_tokens,
            max_stop_sequences: args.max_stop_sequences,
            max_best_of: args.max_best_of,
            max_top_n_tokens: args.max_top_n_tokens,
            max_queue_requests: args.max_queue_requests,
            max_queue_tokens: args.max_queue_tokens,
            max_client_batch_size: args.max_client_batch_size,
        },
        max_body_bytes: args.payload_limit,
        shutdown_timeout: Duration::from_secs_f64(args.shutdown_timeout.max(0.0)),
        json_output: args.json_output,
        otlp_endpoint: args.otlp_endpoint.clone(),
        otlp_service_name: args.otlp_service_name.clone(),
        launch_arguments: launch_arguments(matches),
    };
    let (model_args, engine_args) = (args.model.clone(), args.engine.clone());
    peregrine_server::run(config, move || load(&model_args, &engine_args).map_err(|e| format!("{e:#}")))
        .map_err(|e| anyhow!(e))
}

fn load(model_args: &ModelArgs, engine_args: &EngineArgs) -> Result<Loaded> {
    let device = model_args.device()?;
    let model = Arc::new(Model::load(&model_args.model, model_args.load_format_for(device))?);
    let tokenizer = model
        .tokenizer
        .clone()
        .ok_or_else(|| anyhow!("the model has no tokenizer; the server needs one to read text"))?;
    let mut formats: BTreeMap<&str, u64> = BTreeMap::new();
    for t in model.weights.iter() {
        *formats.entry(t.format.name()).or_default() += t.bytes().len() as u64;
    }
    // The formats holding most of the bytes, largest first ("Q4_1+Q8_0").
    let mut by_size: Vec<_> = formats.into_iter().collect();
    by_size.sort_by_key(|&(_, bytes)| std::cmp::Reverse(bytes));
    let dtype = by_size.iter().take(2).map(|(f, _)| *f).collect::<Vec<_>>().join("+");
    let info = ModelInfo {
        source: model.source.path().display().to_string(),
        architecture: model.config.architecture.name().to_string(),
        device: match device {
            Device::Cpu => "cpu".into(),
            Device::Cuda(i) => format!("cuda:{i}"),
        },
        dtype,
        // The engine accepts ids below the logits' width.
        vocab_size: model.config.vocab_size,
        context_length: model.config.max_position_embeddings,
        num_layers: model.config.num_layers,
    };
    let (engine, plan) = engine_args.build_on(model.clone(), device, model_args.threads, true)?;
    Ok(Loaded { engine: EngineHandle::spawn(engine), tokenizer, model: info, description: plan })
}

/// Every argument of the serve command as given or defaulted (happy_vllm's
/// `/v1/launch_arguments`), with the API key redacted.
fn launch_arguments(matches: &ArgMatches) -> Map<String, Value> {
    // The arguments themselves, not the ids of flattened groups (`EngineArgs`, …).
    let command = <ServeArgs as clap::Args>::augment_args(clap::Command::new("serve"));
    let mut out = Map::new();
    for arg in command.get_arguments() {
        let name = arg.get_id().as_str();
        let Ok(Some(raw)) = matches.try_get_raw(name) else { continue };
        let values: Vec<Value> = raw.map(|v| Value::from(v.to_string_lossy().into_owned())).collect();
        let value = match (name, values.len()) {
            ("api_key", _) => Value::from("<redacted>"),
            (_, 1) => values.into_iter().next().unwrap_or(Value::Null),
            _ => Value::Array(values),
        };
        out.insert(name.to_string(), value);
    }
    out
}
