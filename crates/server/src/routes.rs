//! The router: every route, and the layers around them (CORS, access log, API key).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tower_http::cors::{AllowOrigin, Any, CorsLayer};

use crate::error::{ApiError, ErrorKind, Flavor};
use crate::state::AppState;
use crate::{happy, openai, tgi, tokenize};

const CHAT_PAGE: &str = include_str!("../static/index.html");

/// Routes that answer without the API key: probes, metrics and the chat page itself
/// (which then sends the key the user types).
fn is_open(method: &Method, path: &str) -> bool {
    matches!(path, "/health" | "/metrics" | "/metrics/" | "/liveness" | "/readiness" | "/version")
        || (method == Method::GET && path == "/")
        || method == Method::OPTIONS
}

pub fn router(state: Arc<AppState>) -> Router {
    let api = Router::new()
        .route("/", get(chat_page).post(tgi::compat))
        .route("/health", get(health))
        .route("/liveness", get(happy::liveness))
        .route("/readiness", get(happy::readiness))
        .route("/metrics", get(metrics))
        .route("/metrics/", get(metrics))
        .route("/version", get(version))
        .route("/info", get(tgi::info))
        .route("/generate", post(tgi::generate))
        .route("/generate_stream", post(tgi::generate_stream))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/v1/models", get(openai::models::list_models))
        .route("/v1/completions", post(openai::completions::completions))
        .route("/v1/chat/completions", post(openai::chat::chat_completions))
        .route("/v1/info", get(happy::info))
        .route("/v1/launch_arguments", get(happy::launch_arguments))
        .route("/v1/metadata_text", post(happy::metadata_text))
        .route("/v1/split_text", post(happy::split_text))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), authorize))
        .layer(middleware::from_fn_with_state(state.clone(), access_log))
        .with_state(state.clone());
    match cors(&state.config.cors_allow_origins) {
        Some(layer) => api.layer(layer),
        None => api,
    }
}

fn cors(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::from(Any)
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::POST])
            .allow_headers([header::CONTENT_TYPE, header::AUTHORIZATION]),
    )
}

/// `Authorization: Bearer <key>` on every route but the open ones.
async fn authorize(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let Some(key) = &state.config.api_key else { return next.run(req).await };
    if is_open(req.method(), req.uri().path()) {
        return next.run(req).await;
    }
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    if given.is_some_and(|g| constant_time_eq(g.as_bytes(), key.as_bytes())) {
        return next.run(req).await;
    }
    let flavor = Flavor::of(req.uri().path());
    ApiError::new(ErrorKind::Unauthorized, "missing or invalid API key (send `Authorization: Bearer <key>`)")
        .with_code("invalid_api_key")
        .flavor(flavor)
        .into_response()
}

/// Compares without an early exit, so timing does not reveal a matching prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// One log line per request (probes and metrics scrapes excepted); refusals counted.
async fn access_log(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let t0 = Instant::now();
    let response = next.run(req).await;
    let status = response.status();
    if let Some(kind) = response.extensions().get::<ErrorKind>() {
        state.metrics.rejected(kind.name());
    }
    let quiet = matches!(path.as_str(), "/health" | "/metrics" | "/metrics/" | "/liveness" | "/readiness");
    if !quiet || !status.is_success() {
        let fields = [
            ("method", method.as_str().into()),
            ("path", path.into()),
            ("status", status.as_u16().into()),
            // Streams: time to the response headers, not to the last event.
            ("ms", ((t0.elapsed().as_secs_f64() * 1e4).round() / 10.0).into()),
        ];
        state.log.info("request", &fields);
    }
    response
}

async fn chat_page() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], Html(CHAT_PAGE)).into_response()
}

/// TGI's health check: 200 with an empty body once ready, 503 while loading or
/// shutting down.
async fn health(State(state): State<Arc<AppState>>) -> Response {
    if state.is_ready() {
        StatusCode::OK.into_response()
    } else {
        let body = json!({"error": "unhealthy", "error_type": "healthcheck"});
        (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
    }
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    let stats = state.loaded().map(|b| b.engine.stats());
    let text = state.metrics.render(stats.as_ref(), state.admission.counts());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

async fn version() -> Json<serde_json::Value> {
    Json(json!({"version": env!("CARGO_PKG_VERSION")}))
}

async fn not_found(req: Request) -> ApiError {
    let path = req.uri().path().to_string();
    ApiError::new(ErrorKind::NotFound, format!("no route {} {path}", req.method())).flavor(Flavor::of(&path))
}

async fn method_not_allowed(req: Request) -> ApiError {
    let path = req.uri().path().to_string();
    ApiError::new(ErrorKind::MethodNotAllowed, format!("{} is not allowed on {path}", req.method()))
        .flavor(Flavor::of(&path))
}
