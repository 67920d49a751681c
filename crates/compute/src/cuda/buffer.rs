//! Device memory: a typed buffer that hands out its raw address, since every
//! kernel takes plain pointers (and CUDA graphs replay fixed addresses).

use cudarc::driver::{CudaSlice, DevicePtr, DeviceRepr, ValidAsZeroBits};

use super::{CudaError, Gpu};

pub struct DeviceBuffer<T> {
    slice: CudaSlice<T>,
    ptr: u64,
}

impl<T: DeviceRepr + ValidAsZeroBits> DeviceBuffer<T> {
    /// `len` zeroed elements.
    pub fn zeros(gpu: &Gpu, len: usize) -> Result<Self, CudaError> {
        let slice = gpu.stream.alloc_zeros::<T>(len.max(1))?;
        Ok(Self::wrap(gpu, slice))
    }

    /// A copy of `host`.
    pub fn from_host(gpu: &Gpu, host: &[T]) -> Result<Self, CudaError> {
        if host.is_empty() {
            return Self::zeros(gpu, 0);
        }
        let slice = gpu.stream.clone_htod(host)?;
        Ok(Self::wrap(gpu, slice))
    }

    fn wrap(gpu: &Gpu, slice: CudaSlice<T>) -> Self {
        let ptr = {
            let (ptr, _sync) = slice.device_ptr(&gpu.stream);
            ptr
        };
        Self { slice, ptr }
    }

    pub fn len(&self) -> usize {
        self.slice.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slice.is_empty()
    }

    /// The device address of element 0.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// The device address of element `i`.
    pub fn ptr_at(&self, i: usize) -> u64 {
        self.ptr + (i * std::mem::size_of::<T>()) as u64
    }

    /// Overwrites the first `host.len()` elements (queued on the stream).
    pub fn upload(&mut self, gpu: &Gpu, host: &[T]) -> Result<(), CudaError> {
        if host.len() > self.len() {
            return Err(CudaError::Shape(format!(
                "upload of {} into a buffer of {}",
                host.len(),
                self.len()
            )));
        }
        if host.is_empty() {
            return Ok(());
        }
        let mut view = self.slice.slice_mut(0..host.len());
        gpu.stream.memcpy_htod(host, &mut view)?;
        Ok(())
    }

    /// The first `n` elements, copied to the host (waits for the stream).
    pub fn download(&self, gpu: &Gpu, n: usize) -> Result<Vec<T>, CudaError> {
        if n > self.len() {
            return Err(CudaError::Shape(format!("download of {n} from a buffer of {}", self.len())));
        }
        if n == 0 {
            return Ok(Vec::new());
        }
        Ok(gpu.stream.clone_dtoh(&self.slice.slice(0..n))?)
    }

    /// Sets every byte to `byte` (tests poison outputs with 0xff: NaN in f32 and bf16).
    pub fn fill_bytes(&mut self, gpu: &Gpu, byte: u8) -> Result<(), CudaError> {
        let bytes = self.len() * std::mem::size_of::<T>();
        unsafe { cudarc::driver::result::memset_d8_async(self.ptr, byte, bytes, gpu.stream.cu_stream()) }?;
        Ok(())
    }
}
