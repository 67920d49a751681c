//! The engine: requests, sampling, and (from the engine issue on) the scheduler,
//! paged KV cache and engine loop. See docs/architecture.md.

pub mod block_manager;
pub mod detokenizer;
pub mod sampler;
