//! Our kernels: `.cu` sources in `kernels/`, compiled by NVRTC into one module for
//! the device's architecture at start-up. The PTX is cached on disk under a hash of
//! (source, architecture, NVRTC version), so only the first start pays for NVRTC.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction};
use cudarc::nvrtc::{CompileOptions, Ptx};

use super::CudaError;

const SOURCES: [(&str, &str); 4] = [
    ("common.cuh", include_str!("kernels/common.cuh")),
    ("elementwise.cu", include_str!("kernels/elementwise.cu")),
    ("rope_kv.cu", include_str!("kernels/rope_kv.cu")),
    ("attention.cu", include_str!("kernels/attention.cu")),
];

/// Every `extern "C" __global__` entry point in the sources.
pub const KERNEL_NAMES: [&str; 8] = [
    "embedding_bf16",
    "add_rms_norm",
    "silu_mul",
    "gather_rows_bf16",
    "fill_uniform_bf16",
    "argmax_rows",
    "rope_kv_write",
    "paged_attention",
];

/// All sources as one translation unit (NVRTC has no file system of its own).
pub fn kernel_source() -> String {
    let mut s = String::new();
    for (name, text) in SOURCES {
        s.push_str(&format!("// ---- {name}\n{text}\n"));
    }
    s
}

/// Compiles the kernels to PTX for `arch` (e.g. "compute_90").
pub fn compile_ptx(arch: &'static str) -> Result<String, CudaError> {
    let opts = CompileOptions {
        arch: Some(arch),
        // Full-precision division and sqrt: the CPU backend is the reference.
        use_fast_math: Some(false),
        options: vec!["--std=c++17".into()],
        ..Default::default()
    };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(kernel_source(), opts)
        .map_err(|e| CudaError::Compile(format!("{e:?}")))?;
    Ok(ptx.to_src())
}

/// Where compiled kernels are kept: $PEREGRINE_KERNEL_CACHE, else ~/.cache/peregrine/kernels.
pub struct KernelCache;

impl KernelCache {
    pub fn default_dir() -> PathBuf {
        if let Some(dir) = std::env::var_os("PEREGRINE_KERNEL_CACHE") {
            return PathBuf::from(dir);
        }
        let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
        home.join(".cache/peregrine/kernels")
    }
}

fn arch_name(capability: (i32, i32)) -> &'static str {
    // NVRTC wants a &'static str; the set of architectures we target is small.
    match capability {
        (9, 0) => "compute_90",
        (8, 9) => "compute_89",
        (8, 6) => "compute_86",
        (8, 0) => "compute_80",
        (10, 0) => "compute_100",
        (12, 0) => "compute_120",
        (major, _) if major >= 9 => "compute_90",
        _ => "compute_80",
    }
}

pub(crate) struct Kernels {
    functions: HashMap<&'static str, CudaFunction>,
}

impl Kernels {
    pub(crate) fn load(
        ctx: &Arc<CudaContext>,
        capability: (i32, i32),
        cache_dir: &Path,
    ) -> Result<Self, CudaError> {
        let arch = arch_name(capability);
        let (mut major, mut minor) = (0, 0);
        unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (kernel_source(), arch, major, minor).hash(&mut h);
        let path = cache_dir.join(format!("{:016x}-{arch}.ptx", h.finish()));
        let ptx = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(_) => {
                let text = compile_ptx(arch)?;
                // A cache that cannot be written only costs the next start a compile.
                let _ = std::fs::create_dir_all(cache_dir).and_then(|_| std::fs::write(&path, &text));
                text
            }
        };
        let module = ctx.load_module(Ptx::from_src(ptx))?;
        let mut functions = HashMap::new();
        for name in KERNEL_NAMES {
            functions.insert(name, module.load_function(name)?);
        }
        Ok(Self { functions })
    }

    pub(crate) fn get(&self, name: &str) -> &CudaFunction {
        // Every name in KERNEL_NAMES was loaded in `load`; callers use those names only.
        &self.functions[name]
    }
}
