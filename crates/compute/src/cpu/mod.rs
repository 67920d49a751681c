//! The CPU backend: f32 activations, weights read in their stored format,
//! work split over a fixed-size thread pool.

mod attention;
mod gemm;
mod kv_pool;
mod matmul;
mod ops;
mod simd;

pub use attention::{attention_head, AttentionShape};
pub use kv_pool::{KvDtype, KvPool};
pub use matmul::QMatrix;
pub use ops::{add_in_place, rms_norm, rope_in_place, silu_mul, softmax_in_place, RopeStyle, RopeTable};
pub use simd::{axpy, dot_f32};

/// A thread pool and the kernels that use it.
pub struct Cpu {
    pool: rayon::ThreadPool,
    threads: usize,
}

impl Cpu {
    /// `threads = 0` means one per core.
    pub fn new(threads: usize) -> Self {
        let threads = if threads == 0 {
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        } else {
            threads
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("peregrine-cpu-{i}"))
            .build()
            .expect("building the CPU thread pool");
        Self { pool, threads }
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `f` inside the pool so nested rayon calls use its threads.
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.pool.install(f)
    }
}
