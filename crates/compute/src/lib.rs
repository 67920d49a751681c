//! The device layer: weight formats, the CPU kernels and (with feature `cuda`) the GPU.
//! `compute` knows nothing of tokens or models; see docs/architecture.md.

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod quant;
