//! Matrix products through cuBLAS: bf16 operands, f32 accumulation and f32 output.

use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};

use super::{CudaError, Gpu};

impl Gpu {
    /// y[n, out] (f32) = x[n, inp] (bf16) · W[out, inp]ᵀ (bf16), all row-major.
    ///
    /// cuBLAS is column-major: row-major W[out, inp] is column-major Wc[inp, out] and
    /// x[n, inp] is xc[inp, n], so y as column-major [out, n] is Wcᵀ · xc.
    pub fn matmul_bf16(
        &self,
        x: u64,
        w: u64,
        y: u64,
        n: usize,
        out: usize,
        inp: usize,
    ) -> Result<(), CudaError> {
        if n == 0 {
            return Ok(());
        }
        let (alpha, beta) = (1f32, 0f32);
        unsafe {
            cudarc::cublas::result::gemm_ex(
                *self.blas.handle(),
                cublasOperation_t::CUBLAS_OP_T,
                cublasOperation_t::CUBLAS_OP_N,
                out as i32,
                n as i32,
                inp as i32,
                &alpha as *const f32 as *const _,
                w as *const _,
                cudaDataType::CUDA_R_16BF,
                inp as i32,
                x as *const _,
                cudaDataType::CUDA_R_16BF,
                inp as i32,
                &beta as *const f32 as *const _,
                y as *mut _,
                cudaDataType::CUDA_R_32F,
                out as i32,
                cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )?;
        }
        Ok(())
    }
}
