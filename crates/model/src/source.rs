//! Finding a model: a GGUF file, a Hugging Face directory, or a hub id
//! (`org/name[@revision]`) looked up in the standard Hugging Face cache.
//!
//! Cache layout (huggingface_hub): `$HF_HUB_CACHE` or `$HF_HOME/hub` or
//! `~/.cache/huggingface/hub`, then `models--{org}--{name}/refs/{revision}` holding a
//! commit hash and `snapshots/{commit}/` holding the files (links into `blobs/`).
//! Machines without access to the hub must point at a local path; the error says so.

use std::path::{Path, PathBuf};

use crate::ModelError;

/// What kind of model a path holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelSource {
    /// A single `.gguf` file.
    Gguf(PathBuf),
    /// A directory with `config.json` and safetensors weights.
    HfDir(PathBuf),
}

impl ModelSource {
    pub fn path(&self) -> &Path {
        match self {
            Self::Gguf(p) | Self::HfDir(p) => p,
        }
    }
}

/// Resolves a model argument: a path to a file or directory, else a hub id in the cache.
pub fn resolve(spec: &str) -> Result<ModelSource, ModelError> {
    let path = Path::new(spec);
    if path.exists() {
        return classify(path);
    }
    if let Some((repo, revision)) = parse_hub_id(spec) {
        let cache = hub_cache_dir();
        return match snapshot_dir(&cache, repo, revision) {
            Some(dir) => classify(&dir),
            None => Err(ModelError::NotFound(not_cached_message(spec, repo, revision, &cache))),
        };
    }
    Err(ModelError::NotFound(format!(
        "{spec}: no such file or directory (give a .gguf file, a Hugging Face model directory, or a hub id org/name)"
    )))
}

fn classify(path: &Path) -> Result<ModelSource, ModelError> {
    if path.is_file() {
        if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) || is_gguf(path) {
            return Ok(ModelSource::Gguf(path.to_path_buf()));
        }
        return Err(ModelError::NotFound(format!(
            "{}: not a GGUF file (a safetensors model is given by its directory)",
            path.display()
        )));
    }
    if path.join("config.json").is_file() {
        return Ok(ModelSource::HfDir(path.to_path_buf()));
    }
    let ggufs: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| ModelError::io(path, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")))
        .collect();
    match ggufs.as_slice() {
        [one] => Ok(ModelSource::Gguf(one.clone())),
        [] => Err(ModelError::NotFound(format!("{}: no config.json and no .gguf file", path.display()))),
        many => Err(ModelError::NotFound(format!(
            "{}: {} .gguf files, name one: {}",
            path.display(),
            many.len(),
            many.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
        ))),
    }
}

fn is_gguf(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && &magic == b"GGUF"
}

/// `org/name` or `org/name@revision` (revision defaults to `main`).
pub fn parse_hub_id(spec: &str) -> Option<(&str, &str)> {
    let (repo, revision) = spec.split_once('@').unwrap_or((spec, "main"));
    let (org, name) = repo.split_once('/')?;
    let ok = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    (ok(org) && ok(name) && !revision.is_empty() && !spec.starts_with('.')).then_some((repo, revision))
}

/// The hub cache directory, as huggingface_hub computes it.
pub fn hub_cache_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("HF_HUB_CACHE").or_else(|| std::env::var_os("HUGGINGFACE_HUB_CACHE")) {
        return PathBuf::from(p);
    }
    if let Some(home) = std::env::var_os("HF_HOME") {
        return PathBuf::from(home).join("hub");
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    base.join("huggingface").join("hub")
}

/// Whether the user asked for no network (`HF_HUB_OFFLINE` / `TRANSFORMERS_OFFLINE`).
pub fn hub_offline() -> bool {
    ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"].iter().any(|k| {
        std::env::var(k).is_ok_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
    })
}

/// The snapshot folder of `repo` at `revision` (a branch or tag under `refs/`, or a
/// commit hash), if it is in the cache.
pub fn snapshot_dir(cache: &Path, repo: &str, revision: &str) -> Option<PathBuf> {
    let root = cache.join(format!("models--{}", repo.replace('/', "--")));
    let commit = match std::fs::read_to_string(root.join("refs").join(revision)) {
        Ok(c) => c.trim().to_string(),
        Err(_) => revision.to_string(),
    };
    let dir = root.join("snapshots").join(commit);
    dir.is_dir().then_some(dir)
}

fn not_cached_message(spec: &str, repo: &str, revision: &str, cache: &Path) -> String {
    let why = if hub_offline() {
        "offline mode is on (HF_HUB_OFFLINE), so it cannot be downloaded".to_string()
    } else {
        "downloading from the Hugging Face hub is not available in this build of Peregrine \
         (and the hub may not be reachable from this machine)"
            .to_string()
    };
    format!(
        "model {spec}: {repo} at revision {revision} is not in the Hugging Face cache at {} and {why}. \
         Download it on a machine with access (e.g. `huggingface-cli download {repo}`) and copy the cache, \
         or pass a local path: a .gguf file or a directory with config.json and *.safetensors.",
        cache.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hub_ids() {
        assert_eq!(
            parse_hub_id("HuggingFaceTB/SmolLM2-135M-Instruct"),
            Some(("HuggingFaceTB/SmolLM2-135M-Instruct", "main"))
        );
        assert_eq!(parse_hub_id("meta-llama/Llama-3.1-8B@v1.0"), Some(("meta-llama/Llama-3.1-8B", "v1.0")));
        assert_eq!(parse_hub_id("models/x/y"), None);
        assert_eq!(parse_hub_id("./a/b"), None);
        assert_eq!(parse_hub_id("noslash"), None);
    }

    #[test]
    fn finds_a_snapshot_through_refs_and_by_commit() {
        let tmp = std::env::temp_dir().join(format!("peregrine-hub-{}", std::process::id()));
        let root = tmp.join("models--org--tiny");
        let snap = root.join("snapshots").join("abc123");
        std::fs::create_dir_all(&snap).unwrap();
        std::fs::create_dir_all(root.join("refs")).unwrap();
        std::fs::write(root.join("refs").join("main"), "abc123\n").unwrap();
        std::fs::write(snap.join("config.json"), "{}").unwrap();
        assert_eq!(snapshot_dir(&tmp, "org/tiny", "main"), Some(snap.clone()));
        assert_eq!(snapshot_dir(&tmp, "org/tiny", "abc123"), Some(snap.clone()));
        assert_eq!(snapshot_dir(&tmp, "org/tiny", "dev"), None);
        assert_eq!(classify(&snap).unwrap(), ModelSource::HfDir(snap));
        let msg = not_cached_message("org/other", "org/other", "main", &tmp);
        assert!(msg.contains("local path") && msg.contains("not in the Hugging Face cache"), "{msg}");
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
