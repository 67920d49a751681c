//! Finding a model: a GGUF file, a Hugging Face directory, or a hub id
//! (`org/name[:QUANT][@revision]`, see [`HubSpec`]) looked up in the standard Hugging Face
//! cache and, when it is not there, downloaded into it (see [`crate::hub`]).
//!
//! Cache layout (huggingface_hub): `$HF_HUB_CACHE` or `$HF_HOME/hub` or
//! `~/.cache/huggingface/hub`, then `models--{org}--{name}/refs/{revision}` holding a
//! commit hash and `snapshots/{commit}/` holding the files (links into `blobs/`).
//! A complete cached snapshot is used without touching the network. Offline
//! (`HF_HUB_OFFLINE=1`) nothing is downloaded and the error says how to get the model.

use std::path::{Path, PathBuf};

use crate::hub::{self, HubConfig, HubSpec};
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

/// Resolves a model argument: a path to a file or directory, else a hub id, from the
/// cache or downloaded into it, with the hub configuration of the environment.
pub fn resolve(spec: &str) -> Result<ModelSource, ModelError> {
    resolve_with(spec, &HubConfig::from_env())
}

/// [`resolve`] with an explicit hub configuration.
pub fn resolve_with(spec: &str, hub: &HubConfig) -> Result<ModelSource, ModelError> {
    let path = Path::new(spec);
    if path.exists() {
        return classify(path);
    }
    if let Some(id) = HubSpec::parse(spec) {
        if let Some(found) = cached(&hub.cache_dir, &id)? {
            return Ok(found);
        }
        if hub.offline {
            return Err(ModelError::NotFound(not_cached_message(
                spec,
                &id.repo,
                &id.revision,
                &hub.cache_dir,
            )));
        }
        return hub::download(&id, hub);
    }
    Err(ModelError::NotFound(format!(
        "{spec}: no such file or directory (give a .gguf file, a Hugging Face model directory, or a hub id org/name)"
    )))
}

/// The model `id` names in the cache, if its snapshot is there and complete: for a
/// safetensors model `config.json` (written last by [`hub::download`]) and every shard of
/// the index; for a GGUF model the file `:QUANT` picks, or the only one.
fn cached(cache: &Path, id: &HubSpec) -> Result<Option<ModelSource>, ModelError> {
    let Some(dir) = snapshot_dir(cache, &id.repo, &id.revision) else { return Ok(None) };
    if id.quant.is_none() && dir.join("config.json").exists() {
        let index = dir.join("model.safetensors.index.json");
        let complete = !index.exists()
            || crate::weights::safetensors_files(&dir).is_ok_and(|f| f.iter().all(|f| f.exists()));
        return Ok(complete.then_some(ModelSource::HfDir(dir)));
    }
    let mut ggufs = Vec::new();
    gguf_files(&dir, "", &mut ggufs);
    let names: Vec<&str> = ggufs.iter().map(String::as_str).collect();
    match hub::pick_gguf(&names, id.quant.as_deref()) {
        Ok(Some(name)) => Ok(Some(ModelSource::Gguf(dir.join(name)))),
        Ok(None) => Ok(None),
        Err(many) => Err(ModelError::NotFound(format!(
            "model {id}: {} .gguf files in {}, {}: {}",
            many.len(),
            dir.display(),
            if id.quant.is_some() { "be more specific" } else { "pick one with a suffix such as :Q4_K_M" },
            many.join(", ")
        ))),
    }
}

/// The `.gguf` files (that exist, through their links) under `dir`, as relative names.
fn gguf_files(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let (path, name) = (e.path(), e.file_name().to_string_lossy().into_owned());
        if path.is_dir() && prefix.matches('/').count() < 4 {
            gguf_files(&path, &format!("{prefix}{name}/"), out);
        } else if path.is_file() && name.to_ascii_lowercase().ends_with(".gguf") {
            out.push(format!("{prefix}{name}"));
        }
    }
    out.sort();
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

/// `org/name[:QUANT][@revision]` as `(repo, revision)` (revision defaults to `main`).
pub fn parse_hub_id(spec: &str) -> Option<(String, String)> {
    HubSpec::parse(spec).map(|id| (id.repo, id.revision))
}

/// The hub cache directory, as huggingface_hub computes it.
pub fn hub_cache_dir() -> PathBuf {
    HubConfig::from_env().cache_dir
}

/// Whether the user asked for no network (`HF_HUB_OFFLINE` / `TRANSFORMERS_OFFLINE`).
pub fn hub_offline() -> bool {
    HubConfig::from_env().offline
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
    format!(
        "model {spec}: {repo} at revision {revision} is not in the Hugging Face cache at {} and offline mode \
         is on (HF_HUB_OFFLINE), so it cannot be downloaded. Unset HF_HUB_OFFLINE, or download it on a machine \
         with access (e.g. `huggingface-cli download {repo}`) and copy the cache, or pass a local path: \
         a .gguf file or a directory with config.json and *.safetensors.",
        cache.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hub_ids() {
        let id = |r: &str, v: &str| Some((r.to_string(), v.to_string()));
        assert_eq!(
            parse_hub_id("HuggingFaceTB/SmolLM2-135M-Instruct"),
            id("HuggingFaceTB/SmolLM2-135M-Instruct", "main")
        );
        assert_eq!(parse_hub_id("meta-llama/Llama-3.1-8B@v1.0"), id("meta-llama/Llama-3.1-8B", "v1.0"));
        assert_eq!(parse_hub_id("org/m-GGUF:Q4_K_M"), id("org/m-GGUF", "main"));
        assert_eq!(parse_hub_id("models/x/y"), None);
        assert_eq!(parse_hub_id("./a/b"), None);
        assert_eq!(parse_hub_id("noslash"), None);
        // Mistyped local paths are not sent to the hub.
        assert_eq!(parse_hub_id("models/SmolLM2-135M-Instruct.Q4_1.gguf"), None);
        assert_eq!(parse_hub_id("dir/config.json"), None);
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
