//! The server's life: bind first (so `/health` answers 503 while the model loads),
//! load in the background, serve, and on SIGTERM / Ctrl-C stop admitting, let
//! in-flight requests finish (bounded by `shutdown_timeout`), stop the engine, exit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use peregrine_engine::handle::{EngineHandle, StepObserver, StepRecord};
use peregrine_model::tokenizer::Tokenizer;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::config::ServerConfig;
use crate::logging::Logger;
use crate::routes::router;
use crate::state::{AppState, ModelInfo};
use crate::tracing::{new_span_id, new_trace_id, Span, Tracer};

/// What the loader hands over once the model is ready.
pub struct Loaded {
    pub engine: EngineHandle,
    pub tokenizer: Arc<Tokenizer>,
    pub model: ModelInfo,
    /// A line about the engine (KV-cache plan, threads) for the start-up log.
    pub description: String,
}

/// Runs the server on its own runtime until it is told to stop.
pub fn run<L>(config: ServerConfig, load: L) -> Result<(), String>
where
    L: FnOnce() -> Result<Loaded, String> + Send + 'static,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_name("peregrine-http")
        .enable_all()
        .build()
        .map_err(|e| format!("starting the async runtime: {e}"))?;
    runtime.block_on(serve(config, load))
}

pub async fn serve<L>(config: ServerConfig, load: L) -> Result<(), String>
where
    L: FnOnce() -> Result<Loaded, String> + Send + 'static,
{
    let log = Logger::new(config.json_output);
    let tracer = config.otlp_endpoint.as_deref().map(|e| Tracer::new(e, &config.otlp_service_name, log));
    let addr = format!("{}:{}", config.host, config.port);
    let listener = TcpListener::bind(&addr).await.map_err(|e| format!("binding {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let shutdown_timeout = config.shutdown_timeout;
    let state = Arc::new(AppState::new(config, tracer.clone()));
    log.info(&format!("listening on http://{local}"), &[("addr", local.to_string().into())]);

    let loading = state.clone();
    let t0 = Instant::now();
    tokio::spawn(async move {
        let outcome =
            tokio::task::spawn_blocking(load).await.unwrap_or_else(|e| Err(format!("loader panicked: {e}")));
        let installed = outcome.and_then(|l| {
            if let Some(t) = &loading.tracer {
                l.engine.observe_steps(step_spans(t.clone()));
            }
            loading.set_backend(l.engine, l.tokenizer, l.model).map(|()| l.description)
        });
        match installed {
            Ok(description) => loading.log.info(
                "model loaded; ready",
                &[
                    ("seconds", ((t0.elapsed().as_secs_f64() * 100.0).round() / 100.0).into()),
                    ("engine", description.into()),
                ],
            ),
            Err(e) => {
                loading.log.error(&format!("loading the model failed: {e}"), &[]);
                std::process::exit(1);
            }
        }
    });

    let (stopping_tx, stopping_rx) = oneshot::channel::<()>();
    let signalled = state.clone();
    let graceful = async move {
        wait_for_signal().await;
        signalled.begin_shutdown();
        signalled.log.info("shutting down: no new requests; finishing in-flight ones", &[]);
        let _ = stopping_tx.send(());
    };
    let server = axum::serve(listener, router(state.clone())).with_graceful_shutdown(graceful);
    let deadline = async move {
        if stopping_rx.await.is_ok() {
            tokio::time::sleep(shutdown_timeout).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        r = server => r.map_err(|e| format!("serving: {e}"))?,
        _ = deadline => log.warn(
            "shutdown timeout reached with requests in flight; exiting",
            &[("in_flight", state.admission.counts().active.into())],
        ),
    }

    if let Some(backend) = state.loaded() {
        let engine = backend.engine.clone();
        let stopped = tokio::task::spawn_blocking(move || engine.shutdown());
        if tokio::time::timeout(Duration::from_secs(5), stopped).await.is_err() {
            log.warn("the engine did not stop within 5 s", &[]);
        }
    }
    if let Some(t) = &tracer {
        t.flush(Duration::from_secs(2));
    }
    log.info("stopped", &[]);
    Ok(())
}

/// One span per engine step (its own trace: a step serves many requests).
fn step_spans(tracer: Tracer) -> StepObserver {
    Box::new(move |r: &StepRecord| {
        tracer.record(Span {
            name: "engine step".into(),
            trace_id: new_trace_id(),
            span_id: new_span_id(),
            parent: None,
            start: r.start,
            end: r.start + r.duration,
            attributes: vec![
                ("peregrine.step.tokens", r.tokens.into()),
                ("peregrine.step.running", r.running.into()),
                ("peregrine.step.waiting", r.waiting.into()),
                ("peregrine.kv_cache_usage", r.kv_usage.into()),
            ],
            error: false,
        })
    })
}

async fn wait_for_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
