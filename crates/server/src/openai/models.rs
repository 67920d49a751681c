//! `GET /v1/models`: the served model names, as vLLM's model cards.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use crate::state::AppState;

pub async fn list_models(State(state): State<Arc<AppState>>) -> Json<Value> {
    let loaded = state.loaded();
    let data: Vec<Value> = state
        .config
        .served_model_names
        .iter()
        .map(|name| {
            json!({
                "id": name,
                "object": "model",
                "created": state.started_unix,
                "owned_by": "peregrine",
                "root": loaded.map(|b| b.model.source.clone()),
                "parent": null,
                "max_model_len": loaded.map(|b| b.max_total_tokens),
            })
        })
        .collect();
    Json(json!({"object": "list", "data": data}))
}
