//! Errors as HTTP responses, in the shape each API's clients parse.
//!
//! OpenAI routes answer `{"error": {"message", "type", "param", "code"}}` (the openai
//! SDK maps the status to its typed exceptions); TGI routes answer
//! `{"error": "...", "error_type": "validation"}` with TGI's statuses (422 for
//! validation). Which shape a route gets is decided by its path (`Flavor::of`).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// Which API's error shape a route answers in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    OpenAi,
    Tgi,
}

impl Flavor {
    /// TGI's own routes (`/generate`, `/generate_stream`, and `POST /`) answer TGI's shape;
    /// everything else OpenAI's.
    pub fn of(path: &str) -> Flavor {
        match path {
            "/" | "/generate" | "/generate_stream" => Flavor::Tgi,
            _ => Flavor::OpenAi,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A field is missing, of the wrong type or out of range.
    Invalid,
    /// Unknown model, route or resource.
    NotFound,
    Unauthorized,
    /// Body over the size limit.
    TooLarge,
    /// Over --max-concurrent-requests or a queue cap: refused at once, nothing queued.
    Overloaded,
    /// Loading, or shutting down.
    Unavailable,
    MethodNotAllowed,
    /// A request the engine failed while generating.
    Generation,
}

impl ErrorKind {
    /// The label of `peregrine:requests_rejected_total`.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Invalid => "invalid",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::MethodNotAllowed => "method_not_allowed",
            ErrorKind::Generation => "generation",
        }
    }

    fn status(self, flavor: Flavor) -> StatusCode {
        match self {
            // TGI answers validation errors with 422; OpenAI and vLLM with 400.
            ErrorKind::Invalid if flavor == Flavor::Tgi => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorKind::Invalid => StatusCode::BAD_REQUEST,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::Overloaded => StatusCode::TOO_MANY_REQUESTS,
            ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            // TGI's "generation" errors are 424 (failed dependency).
            ErrorKind::Generation if flavor == Flavor::Tgi => StatusCode::FAILED_DEPENDENCY,
            ErrorKind::Generation => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// OpenAI's `type`.
    fn openai_type(self) -> &'static str {
        match self {
            ErrorKind::Invalid | ErrorKind::TooLarge | ErrorKind::NotFound | ErrorKind::MethodNotAllowed => {
                "invalid_request_error"
            }
            ErrorKind::Unauthorized => "authentication_error",
            ErrorKind::Overloaded => "rate_limit_error",
            ErrorKind::Unavailable => "service_unavailable",
            ErrorKind::Generation => "server_error",
        }
    }

    /// TGI's `error_type`.
    fn tgi_type(self) -> &'static str {
        match self {
            ErrorKind::Invalid | ErrorKind::TooLarge => "validation",
            ErrorKind::NotFound | ErrorKind::MethodNotAllowed => "not_found",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::Unavailable => "unhealthy",
            ErrorKind::Generation => "generation",
        }
    }
}

/// An error answer: what went wrong, and which request field it concerns.
#[derive(Clone, Debug)]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
    /// The request field at fault (OpenAI's `param`), e.g. `temperature` or `messages[1].role`.
    pub param: Option<String>,
    /// A machine-readable code (OpenAI's `code`), e.g. `model_not_found`.
    pub code: Option<&'static str>,
    pub flavor: Flavor,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), param: None, code: None, flavor: Flavor::OpenAi }
    }

    /// An invalid field: 400 (OpenAI) / 422 (TGI), naming it.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        let mut e = Self::new(ErrorKind::Invalid, message);
        e.param = Some(param.into());
        e
    }

    pub fn not_supported(param: &str, what: &str) -> Self {
        Self::invalid(param, format!("{what} is not supported yet"))
    }

    pub fn model_not_found(name: &str) -> Self {
        let mut e = Self::new(ErrorKind::NotFound, format!("The model `{name}` does not exist."));
        e.param = Some("model".into());
        e.code = Some("model_not_found");
        e
    }

    pub fn overloaded(message: impl Into<String>) -> Self {
        let mut e = Self::new(ErrorKind::Overloaded, message);
        e.code = Some("server_overloaded");
        e
    }

    pub fn loading() -> Self {
        Self::new(ErrorKind::Unavailable, "the model is still loading")
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    pub fn flavor(mut self, flavor: Flavor) -> Self {
        self.flavor = flavor;
        self
    }

    pub fn status(&self) -> StatusCode {
        self.kind.status(self.flavor)
    }

    /// The JSON body in this error's flavor.
    pub fn body(&self) -> serde_json::Value {
        match self.flavor {
            Flavor::OpenAi => json!({"error": {
                "message": self.message,
                "type": self.kind.openai_type(),
                "param": self.param,
                "code": self.code,
            }}),
            Flavor::Tgi => {
                // TGI's messages carry no separate field; name it in the text.
                let message = match &self.param {
                    Some(p) if !self.message.contains(p.as_str()) => format!("`{p}`: {}", self.message),
                    _ => self.message.clone(),
                };
                json!({"error": message, "error_type": self.kind.tgi_type()})
            }
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.param {
            Some(p) => write!(f, "{} (param {p})", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status(), Json(self.body())).into_response();
        // Lets the access log and metrics tell refusals apart without parsing the body.
        r.extensions_mut().insert(self.kind);
        r
    }
}
