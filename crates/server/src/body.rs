//! Request bodies: size-limited, parsed as JSON, then typed with the failing field named.
//!
//! A body is parsed once into a `serde_json::Value`; each part of a route's request
//! (the route's own fields, the shared sampling fields) is then read from that value
//! with `serde_path_to_error`, so a wrong type reports `param: "temperature"` or
//! `param: "messages[1].content"` rather than a line and column.

use std::sync::Arc;

use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{ApiError, ErrorKind, Flavor};
use crate::state::AppState;

/// A JSON object body, with the flavor its errors answer in.
pub struct JsonBody {
    pub value: Value,
    pub flavor: Flavor,
}

impl FromRequest<Arc<AppState>> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, ApiError> {
        let flavor = Flavor::of(req.uri().path());
        let limit = state.config.max_body_bytes;
        let bytes = axum::body::to_bytes(req.into_body(), limit).await.map_err(|_| {
            ApiError::new(ErrorKind::TooLarge, format!("request body is over the limit of {limit} bytes"))
                .flavor(flavor)
        })?;
        let value = parse_json(&bytes).map_err(|e| e.flavor(flavor))?;
        Ok(JsonBody { value, flavor })
    }
}

impl JsonBody {
    /// Reads `T` from the body; unknown fields are ignored (clients send extras).
    pub fn typed<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        typed(&self.value).map_err(|e| e.flavor(self.flavor))
    }
}

fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::new(ErrorKind::Invalid, "the request body is empty; expected a JSON object"));
    }
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::new(ErrorKind::Invalid, format!("the request body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::new(ErrorKind::Invalid, "the request body must be a JSON object"));
    }
    Ok(value)
}

/// `T` from a JSON value; a type error names the field's path.
pub fn typed<T: DeserializeOwned>(value: &Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        // "missing field `prompt`" is reported at the parent's path.
        let missing = inner.strip_prefix("missing field `").and_then(|r| r.split('`').next());
        let param = match (missing, path.as_str()) {
            (Some(f), "." | "") => f.to_string(),
            (Some(f), p) => format!("{p}.{f}"),
            (None, p) => p.to_string(),
        };
        let message = if missing.is_some() {
            format!("`{param}` is required")
        } else {
            format!("invalid `{param}`: {inner}")
        };
        ApiError::invalid(param, message)
    })
}
