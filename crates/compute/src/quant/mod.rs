//! Weight formats and the CPU routines that read them: dequantization to f32
//! and dot products of a stored row against f32 activations.

mod dequant;
mod dequant_k;
mod dot;
#[cfg(target_arch = "x86_64")]
mod dot_avx2;
mod error;
mod format;

pub use dequant::dequantize_row;
pub use dot::{dot_row, dot_row_multi, dot_row_scalar, simd_level, FORCE_SCALAR_ENV};
pub use error::QuantError;
pub use format::{WeightFormat, QK_K};
