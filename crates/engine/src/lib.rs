//! The engine: requests, sampling, and (from the engine issue on) the scheduler,
//! paged KV cache and engine loop. See docs/architecture.md.

pub mod block_manager;
#[cfg(feature = "cuda")]
pub mod cuda_runner;
pub mod detokenizer;
pub mod engine;
pub mod handle;
pub mod logprobs;
pub mod model_runner;
pub mod request;
pub mod sampler;
pub mod scheduler;
pub mod sequence;
pub mod watermark;
