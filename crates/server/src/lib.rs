//! The HTTP server: OpenAI-, TGI- and happy_vllm-compatible routes over the engine.
//! It never touches a tensor: requests become `GenerateRequest`s for the engine
//! handle, events become JSON or server-sent events. See docs/server.md.

pub mod admission;
pub mod body;
pub mod config;
pub mod error;
pub mod generation;
pub mod happy;
pub mod logging;
pub mod metrics;
pub mod openai;
pub mod routes;
pub mod serve;
pub mod sse;
pub mod state;
pub mod tgi;
pub mod tokenize;
pub mod tracing;
pub mod validate;

pub use config::{Limits, ServerConfig};
pub use serve::{run, serve, Loaded};
pub use state::ModelInfo;
