//! Paths shared by the tests of every crate: the default model and the
//! reference fixtures written by `scripts/reference.py`.

use std::path::PathBuf;

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `models/` or `$PEREGRINE_MODELS_DIR`.
pub fn models_dir() -> PathBuf {
    std::env::var_os("PEREGRINE_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("models"))
}

pub fn default_model_path() -> PathBuf {
    models_dir().join("SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// `models/reference/<name>`: fixtures of `scripts/reference.py`.
pub fn reference_dir(name: &str) -> PathBuf {
    models_dir().join("reference").join(name)
}
