//! Models: weights (GGUF, safetensors, dummy), configs, tokenizer, chat template,
//! and the architectures' forward passes. See docs/architecture.md.

pub mod config;
mod error;
pub mod gguf;
pub mod hub;
pub mod llama;
#[cfg(feature = "cuda")]
pub mod llama_cuda;
pub mod load;
pub mod source;
pub mod storage;
pub mod testing;
pub mod tokenizer;
pub mod weights;

pub use error::ModelError;
