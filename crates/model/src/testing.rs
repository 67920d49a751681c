//! Paths shared by the tests of every crate: the default model and the
//! reference fixtures written by `scripts/reference.py`.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::gguf::GgufFile;
use crate::tokenizer::Tokenizer;

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

/// The folder and parsed `reference.json` of a reference model; panics with the
/// command to run when the fixtures are missing.
pub fn load_reference(name: &str) -> (PathBuf, Value) {
    let dir = reference_dir(name);
    let path = dir.join("reference.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "missing fixture {} ({e}): run `python3 scripts/reference.py` to write models/reference/",
            path.display()
        )
    });
    (dir, serde_json::from_str(&text).expect("reference.json is valid JSON"))
}

/// Every tokenizer the fixture folder describes: the GGUF's, and the HF files' where present.
pub fn tokenizers_for(dir: &Path, reference: &Value) -> Vec<(String, Tokenizer)> {
    let mut out = Vec::new();
    if reference["format"] == "gguf" {
        let model_path = dir.join(reference["model_path"].as_str().expect("model_path"));
        let gguf = GgufFile::open(&model_path).unwrap_or_else(|e| panic!("{}: {e}", model_path.display()));
        out.push((format!("GGUF {}", model_path.display()), Tokenizer::from_gguf(&gguf).expect("from_gguf")));
    }
    let json = dir.join("tokenizer.json");
    if json.is_file() {
        let config = dir.join("tokenizer_config.json");
        let config = config.is_file().then_some(config);
        let tok = Tokenizer::from_file(&json, config.as_deref()).expect("from_file");
        out.push((format!("HF {}", json.display()), tok));
    }
    assert!(!out.is_empty(), "{}: no tokenizer (no GGUF, no tokenizer.json)", dir.display());
    out
}
