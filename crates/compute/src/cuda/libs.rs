//! Finding the CUDA libraries before cudarc does: cudarc panics when a library it
//! needs cannot be opened, so `Gpu::new` asks here first and turns a missing one
//! into an error that says what to install.

/// A shared library the backend loads at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CudaLibrary {
    /// libcuda.so.1, from the NVIDIA driver.
    Driver,
    /// libnvrtc.so.13, the run-time compiler for our kernels.
    Nvrtc,
    /// libcublas.so.13 (and libcublasLt), for the GEMMs.
    Cublas,
}

impl CudaLibrary {
    pub const ALL: [CudaLibrary; 3] = [CudaLibrary::Driver, CudaLibrary::Nvrtc, CudaLibrary::Cublas];

    /// cudarc's name for it (libNAME.so…).
    pub fn stem(self) -> &'static str {
        match self {
            CudaLibrary::Driver => "cuda",
            CudaLibrary::Nvrtc => "nvrtc",
            CudaLibrary::Cublas => "cublas",
        }
    }

    /// Whether the dynamic loader can open it (any of the names cudarc would try).
    pub fn is_present(self) -> bool {
        cudarc::get_lib_name_candidates(self.stem())
            .iter()
            .any(|name| unsafe { libloading::Library::new(name) }.is_ok())
    }

    pub fn explain(self) -> String {
        match self {
            CudaLibrary::Driver => {
                "libcuda.so.1 was not found: no NVIDIA driver on this machine (use --device cpu)".into()
            }
            CudaLibrary::Nvrtc => "libnvrtc.so.13 was not found: install the CUDA 13 toolkit or \
                 `pip install nvidia-cuda-nvrtc` and add its lib folder to LD_LIBRARY_PATH"
                .into(),
            CudaLibrary::Cublas => "libcublas.so.13 was not found: install the CUDA 13 toolkit or \
                 `pip install nvidia-cublas` and add its lib folder to LD_LIBRARY_PATH"
                .into(),
        }
    }
}

/// The libraries the backend needs that cannot be opened, in `ALL`'s order.
pub fn missing_libraries() -> Vec<CudaLibrary> {
    CudaLibrary::ALL.into_iter().filter(|l| !l.is_present()).collect()
}
