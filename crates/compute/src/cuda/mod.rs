//! The CUDA backend (feature `cuda`): the same operations as `cpu`, on an NVIDIA GPU.
//!
//! cudarc loads libcuda / libnvrtc / libcublas at run time, so this compiles with no
//! CUDA installed; `Gpu::new` checks the libraries first and returns a typed error
//! (never a panic) when one is missing. Kernels are `.cu` sources compiled by NVRTC
//! for the device's architecture at start-up (cached on disk); GEMMs go to cuBLAS in
//! bf16 with f32 accumulation. Activations: the residual stream and GEMM outputs in
//! f32, GEMM inputs (normed activations, attention output) and the KV cache in bf16.

mod buffer;
mod gemm;
mod kernels;
mod libs;
mod ops;

use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaStream};

pub use buffer::DeviceBuffer;
pub use half::bf16;
pub use kernels::{compile_ptx, kernel_source, KernelCache};
pub use libs::{missing_libraries, CudaLibrary};
pub use ops::AttentionArgs;

/// What can go wrong on the GPU. Every entry point returns this instead of panicking.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("CUDA is not available: {0}")]
    Unavailable(String),
    #[error("CUDA driver: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    #[error("cuBLAS: {0}")]
    Blas(#[from] cudarc::cublas::result::CublasError),
    #[error("NVRTC could not compile the kernels: {0}")]
    Compile(String),
    #[error("{0}")]
    Shape(String),
}

/// One GPU: its context, the stream every operation is queued on, a cuBLAS handle
/// bound to that stream, and the compiled kernels.
pub struct Gpu {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) blas: CudaBlas,
    pub(crate) kernels: kernels::Kernels,
    pub name: String,
    /// Compute capability (9, 0) on H100 / H200.
    pub capability: (i32, i32),
}

impl Gpu {
    /// Opens device `ordinal`: checks the libraries, creates the context and stream,
    /// and compiles (or loads from the disk cache) the kernels.
    pub fn new(ordinal: usize) -> Result<Self, CudaError> {
        let missing = missing_libraries();
        if let Some(lib) = missing.first() {
            return Err(CudaError::Unavailable(lib.explain()));
        }
        let count = CudaContext::device_count()?;
        if ordinal as i32 >= count {
            return Err(CudaError::Unavailable(format!("device {ordinal} asked for, {count} present")));
        }
        let ctx = CudaContext::new(ordinal)?;
        // One stream, used in order: cudarc's per-buffer event tracking buys nothing.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream()?;
        let blas = CudaBlas::new(stream.clone())?;
        let capability = ctx.compute_capability()?;
        let name = ctx.name()?;
        let kernels = kernels::Kernels::load(&ctx, capability, &KernelCache::default_dir())?;
        Ok(Self { ctx, stream, blas, kernels, name, capability })
    }

    /// (free, total) device memory in bytes.
    pub fn memory(&self) -> Result<(usize, usize), CudaError> {
        Ok(self.ctx.mem_get_info()?)
    }

    /// Waits for every queued operation.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        Ok(self.stream.synchronize()?)
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

/// Number of CUDA devices, or why there are none (for `--device auto`).
pub fn device_count() -> Result<usize, CudaError> {
    let missing = missing_libraries();
    if let Some(lib) = missing.iter().find(|l| **l == CudaLibrary::Driver) {
        return Err(CudaError::Unavailable(lib.explain()));
    }
    Ok(CudaContext::device_count()? as usize)
}

/// For tests and checks: GPU 0, or `None` after printing `SKIPPED:` and the reason.
/// Panics if a GPU is present but the backend cannot start on it (that is a failure).
pub fn gpu_or_skip() -> Option<Gpu> {
    match device_count() {
        Ok(n) if n > 0 => Some(Gpu::new(0).expect("a GPU is present, so the backend must start")),
        Ok(_) => {
            eprintln!("SKIPPED: no CUDA device");
            None
        }
        Err(e) => {
            eprintln!("SKIPPED: {e}");
            None
        }
    }
}
