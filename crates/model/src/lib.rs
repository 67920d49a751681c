//! Models: weights (GGUF, safetensors, dummy), configs, tokenizer, chat template,
//! and the architectures' forward passes. See docs/architecture.md.

pub mod gguf;
pub mod storage;
pub mod testing;
