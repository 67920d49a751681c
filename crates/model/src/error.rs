use crate::gguf::GgufError;

/// Why a model could not be found, read or run.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("{0}")]
    NotFound(String),
    #[error("invalid model config: {0}")]
    Config(String),
    #[error("not supported: {0}")]
    Unsupported(String),
    #[error("weights: {0}")]
    Weights(String),
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[cfg(feature = "cuda")]
    #[error(transparent)]
    Cuda(#[from] peregrine_compute::cuda::CudaError),
}

impl ModelError {
    pub fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        Self::Io { path: path.display().to_string(), source }
    }
}
