//! Why a tokenizer could not be built or used.

use super::chat_template::ChatTemplateError;

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("tokenizer: cannot read {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("tokenizer: {path} is not valid JSON: {source}")]
    Json { path: String, source: serde_json::Error },
    #[error("tokenizer: {path}: {reason}")]
    Config { path: String, reason: String },
    /// GGUF tokenizer metadata that is missing or malformed; `key` names the metadata key.
    #[error("tokenizer: GGUF metadata {key:?}: {reason}")]
    Metadata { key: String, reason: String },
    #[error("tokenizer: not supported: {0}")]
    Unsupported(String),
    /// An error of the `tokenizers` library while building, encoding or decoding.
    #[error("tokenizer: {context}: {message}")]
    Backend { context: String, message: String },
    #[error(transparent)]
    ChatTemplate(#[from] ChatTemplateError),
}

impl TokenizerError {
    pub(crate) fn metadata(key: &str, reason: impl Into<String>) -> Self {
        Self::Metadata { key: key.to_string(), reason: reason.into() }
    }

    pub(crate) fn backend(context: &str, e: impl std::fmt::Display) -> Self {
        Self::Backend { context: context.to_string(), message: e.to_string() }
    }
}
