//! Downloading models from the Hugging Face hub into the standard cache, laid out exactly
//! as `huggingface_hub` does so that Python tools and Peregrine share one cache:
//!
//! ```text
//! models--{org}--{name}/blobs/{etag}                     file contents, named by ETag
//! models--{org}--{name}/refs/{revision}                  commit hash (for branches and tags)
//! models--{org}--{name}/snapshots/{commit}/{filename} -> ../../blobs/{etag}  (relative link)
//! ```
//!
//! `GET {endpoint}/api/models/{repo}/revision/{revision}` gives the commit and the file
//! list; `GET {endpoint}/{repo}/resolve/{commit}/{filename}` gives each file, for large
//! files as a redirect to a CDN whose `X-Linked-Etag` (the sha256) names the blob.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ureq::http::Response;
use ureq::Body;

use crate::source::ModelSource;
use crate::ModelError;

/// Where the hub is, where the cache is, and whether the network may be used.
#[derive(Clone, PartialEq, Eq)]
pub struct HubConfig {
    /// `HF_ENDPOINT`, default `https://huggingface.co`, without a trailing slash.
    pub endpoint: String,
    /// `HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`.
    pub cache_dir: PathBuf,
    /// `HF_TOKEN`, else `HUGGING_FACE_HUB_TOKEN`, else the file `$HF_HOME/token`; sent as
    /// `Authorization: Bearer` to the endpoint only (never to the CDN it redirects to).
    pub token: Option<String>,
    /// `HF_HUB_OFFLINE` or `TRANSFORMERS_OFFLINE` truthy: never touch the network.
    pub offline: bool,
}

impl std::fmt::Debug for HubConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubConfig")
            .field("endpoint", &self.endpoint)
            .field("cache_dir", &self.cache_dir)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("offline", &self.offline)
            .finish()
    }
}

impl HubConfig {
    /// The configuration from the environment, as huggingface_hub reads it.
    pub fn from_env() -> Self {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// The configuration from a variable lookup (`from_env` with `std::env::var`).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let endpoint = get("HF_ENDPOINT").unwrap_or_else(|| "https://huggingface.co".into());
        let hf_home = get("HF_HOME").map(PathBuf::from).unwrap_or_else(|| {
            get("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| get("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .unwrap_or_else(|| PathBuf::from(".cache"))
                .join("huggingface")
        });
        let cache_dir = get("HF_HUB_CACHE")
            .or_else(|| get("HUGGINGFACE_HUB_CACHE"))
            .map(PathBuf::from)
            .unwrap_or_else(|| hf_home.join("hub"));
        let token_file = get("HF_TOKEN_PATH").map(PathBuf::from).unwrap_or_else(|| hf_home.join("token"));
        let token = get("HF_TOKEN")
            .or_else(|| get("HUGGING_FACE_HUB_TOKEN"))
            .or_else(|| std::fs::read_to_string(token_file).ok())
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty());
        let truthy = |k: &str| {
            get(k).is_some_and(|v| {
                matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on")
            })
        };
        let offline = truthy("HF_HUB_OFFLINE") || truthy("TRANSFORMERS_OFFLINE");
        Self { endpoint: endpoint.trim_end_matches('/').to_string(), cache_dir, token, offline }
    }

    /// `models--{org}--{name}` in the cache.
    pub fn repo_dir(&self, repo: &str) -> PathBuf {
        self.cache_dir.join(format!("models--{}", repo.replace('/', "--")))
    }
}

/// A hub model id: `org/name`, optionally followed by `:QUANT` and then `@revision`, as in
/// `org/name:Q4_K_M@main`. `QUANT` picks one `.gguf` file of a GGUF repository
/// (llama.cpp's `-hf` convention: a case-insensitive match within the file name); the
/// revision (a branch, tag or commit, default `main`) selects the snapshot. The other order,
/// `org/name@revision:QUANT`, is read the same (git revisions cannot contain `:`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HubSpec {
    pub repo: String,
    pub revision: String,
    pub quant: Option<String>,
}

impl HubSpec {
    /// `None` when `spec` is not of that form.
    pub fn parse(spec: &str) -> Option<Self> {
        let (head, rev) = spec.split_once('@').map_or((spec, None), |(h, r)| (h, Some(r)));
        fn split_quant(s: &str) -> (String, Option<&str>) {
            s.split_once(':').map_or((s.to_string(), None), |(a, q)| (a.into(), Some(q)))
        }
        let (repo, q1) = split_quant(head);
        let (revision, q2) = rev.map_or(("main".to_string(), None), split_quant);
        let quant = match (q1, q2) {
            (Some(_), Some(_)) => return None,
            (q, None) | (None, q) => q.map(str::to_string),
        };
        let (org, name) = repo.split_once('/')?;
        let word =
            |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        // A name ending like a model file is a mistyped local path, not a repository.
        let file_like =
            [".gguf", ".safetensors", ".json", ".bin"].iter().any(|e| name.to_ascii_lowercase().ends_with(e));
        let ok = word(org)
            && word(name)
            && !file_like
            && !org.starts_with('.')
            && !revision.split('/').any(|p| p.is_empty() || p == "." || p == "..")
            && revision.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
            && quant.as_deref().is_none_or(word);
        ok.then_some(Self { repo, revision, quant })
    }
}

impl std::fmt::Display for HubSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.repo)?;
        if let Some(q) = &self.quant {
            write!(f, ":{q}")?;
        }
        if self.revision != "main" {
            write!(f, "@{}", self.revision)?;
        }
        Ok(())
    }
}

/// The GGUF file `quant` selects among `ggufs` (relative names): `Ok(None)` when none
/// matches (or there are none), `Err(candidates)` when several do. Without `quant`, a
/// single file is taken. Whole-word matches win: `Q4_0` picks `m-Q4_0.gguf` over
/// `m-Q4_0_4_4.gguf`.
pub fn pick_gguf<'a>(ggufs: &[&'a str], quant: Option<&str>) -> Result<Option<&'a str>, Vec<&'a str>> {
    let Some(q) = quant else {
        return match ggufs {
            [] => Ok(None),
            [one] => Ok(Some(one)),
            many => Err(many.to_vec()),
        };
    };
    let q = q.to_ascii_lowercase();
    let hits: Vec<&str> = ggufs.iter().copied().filter(|n| n.to_ascii_lowercase().contains(&q)).collect();
    let edge = |c: Option<u8>| c.is_none_or(|c| !c.is_ascii_alphanumeric() && c != b'_');
    let whole: Vec<&str> = hits
        .iter()
        .copied()
        .filter(|n| {
            let l = n.to_ascii_lowercase();
            l.match_indices(&q).any(|(i, _)| {
                edge(i.checked_sub(1).map(|j| l.as_bytes()[j]))
                    && edge(l.as_bytes().get(i + q.len()).copied())
            })
        })
        .collect();
    match if whole.len() == 1 { whole } else { hits }.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        many => Err(many.to_vec()),
    }
}

/// The files of a Hugging Face model directory that Peregrine fetches (plus every
/// top-level `*.safetensors`, restricted to the index's shards when there is one).
pub const HF_FILES: [&str; 6] = [
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "model.safetensors.index.json",
];
const INDEX: &str = "model.safetensors.index.json";

#[derive(serde::Deserialize)]
struct RepoInfo {
    sha: String,
    #[serde(default)]
    siblings: Vec<Sibling>,
}

#[derive(serde::Deserialize)]
struct Sibling {
    rfilename: String,
}

/// Downloads what `id` needs into the cache (skipping files already there) and returns it:
/// the snapshot directory of a safetensors repository, or the chosen `.gguf` file.
pub fn download(id: &HubSpec, cfg: &HubConfig) -> Result<ModelSource, ModelError> {
    if cfg.offline {
        return Err(ModelError::NotFound(format!(
            "model {id}: offline mode is on (HF_HUB_OFFLINE), so it cannot be downloaded"
        )));
    }
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_connect(Some(Duration::from_secs(20)))
        .timeout_recv_response(Some(Duration::from_secs(60)))
        .user_agent(format!("peregrine/{}", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let hub = Hub { agent, cfg, id };
    let url = format!("{}/api/models/{}/revision/{}", cfg.endpoint, id.repo, quote(&id.revision, false));
    let what = format!("repository {} at revision {}", id.repo, id.revision);
    let (resp, _) = hub.get(&url, &what)?;
    let body = resp.into_body().read_to_string().map_err(|e| hub.interrupted(&url, e))?;
    let info: RepoInfo = serde_json::from_str(&body)
        .map_err(|e| ModelError::NotFound(format!("model {id}: unexpected answer from {url}: {e}")))?;
    if info.sha.is_empty() || !info.sha.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(ModelError::NotFound(format!("model {id}: {url} gave no valid commit: {:?}", info.sha)));
    }
    let names: Vec<&str> =
        info.siblings.iter().map(|s| s.rfilename.as_str()).filter(|n| safe_name(n)).collect();
    let snapshot = cfg.repo_dir(&id.repo).join("snapshots").join(&info.sha);
    let source = match plan(id, &names)? {
        Plan::Gguf(name) => {
            hub.fetch(&info.sha, name)?;
            ModelSource::Gguf(snapshot.join(name))
        }
        Plan::Hf(mut files) => {
            if files.contains(&INDEX) {
                hub.fetch(&info.sha, INDEX)?;
                let shards = crate::weights::safetensors_files(&snapshot)?;
                files.retain(|f| !f.ends_with(".safetensors") || shards.contains(&snapshot.join(f)));
            }
            // config.json last: a snapshot without it is an interrupted download.
            files.sort_by_key(|f| *f == "config.json");
            for f in files {
                hub.fetch(&info.sha, f)?;
            }
            ModelSource::HfDir(snapshot)
        }
    };
    if id.revision != info.sha {
        let r = cfg.repo_dir(&id.repo).join("refs").join(&id.revision);
        let parent = r.parent().unwrap_or(&r);
        std::fs::create_dir_all(parent).map_err(|e| ModelError::io(parent, e))?;
        std::fs::write(&r, &info.sha).map_err(|e| ModelError::io(&r, e))?;
    }
    Ok(source)
}

enum Plan<'a> {
    Hf(Vec<&'a str>),
    Gguf(&'a str),
}

/// Which files to fetch: GGUF when a quant is asked for or there are no safetensors.
fn plan<'a>(id: &HubSpec, names: &[&'a str]) -> Result<Plan<'a>, ModelError> {
    let ggufs: Vec<&str> =
        names.iter().copied().filter(|n| n.to_ascii_lowercase().ends_with(".gguf")).collect();
    let is_st = |n: &str| !n.contains('/') && n.ends_with(".safetensors");
    let has_st = names.iter().any(|n| is_st(n));
    let err = |m: String| Err(ModelError::NotFound(format!("model {id}: {m}")));
    if id.quant.is_none() && has_st {
        return Ok(Plan::Hf(names.iter().copied().filter(|n| is_st(n) || HF_FILES.contains(n)).collect()));
    }
    if ggufs.is_empty() {
        return err(format!(
            "{} at {} has {}",
            id.repo,
            id.revision,
            if has_st {
                "no .gguf files; drop the :QUANT suffix"
            } else {
                "neither *.safetensors nor .gguf files"
            }
        ));
    }
    match (pick_gguf(&ggufs, id.quant.as_deref()), &id.quant) {
        (Ok(Some(name)), _) => Ok(Plan::Gguf(name)),
        (Ok(None), q) => err(format!(
            "no .gguf file matches {}; available: {}",
            q.as_deref().unwrap_or_default(),
            ggufs.join(", ")
        )),
        (Err(c), Some(q)) => {
            err(format!("{q} matches several .gguf files, be more specific: {}", c.join(", ")))
        }
        (Err(c), None) => err(format!(
            "{} .gguf files, pick one with a suffix such as {}:Q4_K_M: {}",
            c.len(),
            id.repo,
            c.join(", ")
        )),
    }
}

/// A relative path with no `..`, `.` or empty parts.
fn safe_name(n: &str) -> bool {
    !n.contains('\\') && n.split('/').all(|p| !p.is_empty() && p != "." && p != "..")
}

/// Percent-encoding as Python's `urllib.parse.quote` (keeping `/` or not).
fn quote(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) || (keep_slash && b == b'/') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// `1.2 kB`, `3.4 MB`, `5.6 GB`.
fn human(b: u64) -> String {
    match b {
        0..1_000 => format!("{b} B"),
        1_000..1_000_000 => format!("{:.1} kB", b as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1} MB", b as f64 / 1e6),
        _ => format!("{:.2} GB", b as f64 / 1e9),
    }
}

/// `scheme://host[:port]` of a URL.
fn origin(url: &str) -> &str {
    let start = url.find("://").map_or(0, |i| i + 3);
    url[start..].find('/').map_or(url, |i| &url[..start + i])
}

fn header<'a>(resp: &'a Response<Body>, name: &str) -> Option<&'a str> {
    resp.headers().get(name).and_then(|v| v.to_str().ok())
}

/// The blob name: `X-Linked-Etag` else `ETag`, without `W/` and quotes.
fn etag(resp: &Response<Body>) -> Option<String> {
    let e = header(resp, "x-linked-etag").or_else(|| header(resp, "etag"))?;
    let e = e.trim().trim_start_matches("W/").trim_matches('"');
    (!e.is_empty() && e.chars().all(|c| c.is_ascii_alphanumeric() || "-_".contains(c))).then(|| e.to_string())
}

struct Hub<'a> {
    agent: ureq::Agent,
    cfg: &'a HubConfig,
    id: &'a HubSpec,
}

impl Hub<'_> {
    /// GETs `url`, following redirects by hand. Returns the final 2xx response and the
    /// ETag of the hub's own answer: the first one that is not a relative redirect (a
    /// relative redirect is a renamed repository; an absolute one is the CDN).
    /// `skip` says whether a blob is already there, so the CDN need not be asked.
    fn get_with(
        &self,
        url: &str,
        what: &str,
        skip: &dyn Fn(&str) -> bool,
    ) -> Result<(Option<Response<Body>>, Option<String>), ModelError> {
        let (mut url, mut hub_etag) = (url.to_string(), None);
        for _ in 0..10 {
            let mut req = self.agent.get(&url);
            if let Some(t) = self.cfg.token.as_ref().filter(|_| origin(&url) == origin(&self.cfg.endpoint)) {
                req = req.header("Authorization", format!("Bearer {t}"));
            }
            let resp = req.call().map_err(|e| self.unreachable(e))?;
            let status = resp.status().as_u16();
            if (300..400).contains(&status) {
                let loc = header(&resp, "location").unwrap_or_default().to_string();
                if loc.is_empty() {
                    return Err(ModelError::NotFound(format!("{url}: HTTP {status} without a Location")));
                }
                if !loc.contains("://") {
                    let sep = if loc.starts_with('/') { "" } else { "/" };
                    url = format!("{}{sep}{loc}", origin(&url));
                } else {
                    if hub_etag.is_none() {
                        hub_etag = etag(&resp);
                        if hub_etag.as_deref().is_some_and(skip) {
                            return Ok((None, hub_etag));
                        }
                    }
                    url = loc;
                }
                continue;
            }
            if !(200..300).contains(&status) {
                return Err(self.status_error(status, &resp, what));
            }
            let etag = hub_etag.or_else(|| etag(&resp));
            return Ok((Some(resp), etag));
        }
        Err(ModelError::NotFound(format!("model {}: too many redirects for {what}", self.id)))
    }

    fn get(&self, url: &str, what: &str) -> Result<(Response<Body>, Option<String>), ModelError> {
        let (resp, etag) = self.get_with(url, what, &|_| false)?;
        let resp = resp.ok_or_else(|| ModelError::NotFound(format!("{url}: no answer")))?;
        Ok((resp, etag))
    }

    /// Puts `name` at `snapshots/{commit}/{name}`, a link to its blob, unless it is there.
    fn fetch(&self, commit: &str, name: &str) -> Result<(), ModelError> {
        let root = self.cfg.repo_dir(&self.id.repo);
        let (blobs, link) = (root.join("blobs"), root.join("snapshots").join(commit).join(name));
        if link.exists() {
            return Ok(());
        }
        let url = format!("{}/{}/resolve/{commit}/{}", self.cfg.endpoint, self.id.repo, quote(name, true));
        let what = format!("file {name} of {} at commit {commit}", self.id.repo);
        let (resp, etag) = self.get_with(&url, &what, &|e| blobs.join(e).is_file())?;
        let etag = etag.ok_or_else(|| ModelError::NotFound(format!("{url}: no ETag to name the file by")))?;
        let blob = blobs.join(&etag);
        if let (Some(resp), false) = (resp, blob.is_file()) {
            std::fs::create_dir_all(&blobs).map_err(|e| ModelError::io(&blobs, e))?;
            self.save(resp, &blob, name, &url)?;
        }
        let dir = link.parent().unwrap_or(&link);
        std::fs::create_dir_all(dir).map_err(|e| ModelError::io(dir, e))?;
        let _ = std::fs::remove_file(&link); // a dangling link
        #[cfg(unix)]
        let linked = {
            let target = format!("{}../../blobs/{etag}", "../".repeat(name.matches('/').count()));
            std::os::unix::fs::symlink(target, &link)
        };
        #[cfg(not(unix))]
        let linked = std::fs::copy(&blob, &link).map(|_| ());
        linked.map_err(|e| ModelError::io(&link, e))
    }

    /// Streams the body to `{blob}.incomplete`, then renames it into place.
    fn save(&self, resp: Response<Body>, blob: &Path, name: &str, url: &str) -> Result<(), ModelError> {
        let total: Option<u64> = header(&resp, "content-length").and_then(|v| v.parse().ok());
        let size = total.map_or("size unknown".into(), human);
        if total.is_none_or(|t| t >= 50_000_000) {
            eprintln!("peregrine: downloading {}/{name} ({size})", self.id.repo);
        }
        let tmp = blob.with_extension("incomplete");
        let mut file = std::fs::File::create(&tmp).map_err(|e| ModelError::io(&tmp, e))?;
        let mut reader = resp.into_body().into_reader();
        let mut buf = vec![0u8; 1 << 20];
        let (start, mut last, mut done) = (Instant::now(), Instant::now(), 0u64);
        loop {
            let n = reader.read(&mut buf).map_err(|e| self.interrupted(url, e))?;
            if n == 0 {
                break;
            }
            file.write_all(&buf[..n]).map_err(|e| ModelError::io(&tmp, e))?;
            done += n as u64;
            if last.elapsed() >= Duration::from_secs(5) {
                last = Instant::now();
                let rate = done as f64 / 1e6 / start.elapsed().as_secs_f64();
                eprintln!("peregrine:   {name}: {} of {size}, {rate:.1} MB/s", human(done));
            }
        }
        file.sync_all().map_err(|e| ModelError::io(&tmp, e))?;
        if total.is_some_and(|t| t != done) {
            return Err(self.interrupted(url, format!("got {done} of {} bytes", total.unwrap_or(0))));
        }
        std::fs::rename(&tmp, blob).map_err(|e| ModelError::io(blob, e))?;
        let secs = start.elapsed().as_secs_f64();
        let rate = done as f64 / 1e6 / secs.max(1e-6);
        eprintln!(
            "peregrine: downloaded {}/{name} ({}) in {secs:.1} s, {rate:.1} MB/s",
            self.id.repo,
            human(done)
        );
        Ok(())
    }

    fn unreachable(&self, e: ureq::Error) -> ModelError {
        ModelError::NotFound(format!(
            "model {}: the Hugging Face hub could not be reached at {} ({e}). Pass a local path instead \
             (a .gguf file or a directory with config.json and *.safetensors), or set HF_HUB_OFFLINE=1 \
             with a pre-filled cache at {}.",
            self.id,
            self.cfg.endpoint,
            self.cfg.cache_dir.display()
        ))
    }

    fn interrupted(&self, url: &str, e: impl std::fmt::Display) -> ModelError {
        ModelError::NotFound(format!("model {}: download from {url} failed: {e}", self.id))
    }

    fn status_error(&self, status: u16, resp: &Response<Body>, what: &str) -> ModelError {
        let detail = header(resp, "x-error-message").map(|m| format!(": {m}")).unwrap_or_default();
        let endpoint = &self.cfg.endpoint;
        let repo_not_found = header(resp, "x-error-code") == Some("RepoNotFound");
        ModelError::NotFound(match status {
            401 | 403 if !repo_not_found => format!(
                "model {}: {endpoint} refused access to {what} (HTTP {status}{detail}). The model is gated or \
                 private: {}",
                self.id,
                if self.cfg.token.is_none() {
                    "set HF_TOKEN to an access token of an account that may read it \
                     (https://huggingface.co/settings/tokens)"
                } else {
                    "check that the token in HF_TOKEN may read it (for a gated model, accept its terms on the \
                     model page)"
                }
            ),
            401 | 404 => format!(
                "model {}: {what} does not exist on {endpoint} (HTTP {status}{detail}); check the repository \
                 id, revision and file name (a private repository also needs HF_TOKEN){}",
                self.id,
                if what.starts_with("repository") { "; nor is it a local path" } else { "" }
            ),
            _ => format!("model {}: {endpoint} answered HTTP {status} for {what}{detail}", self.id),
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn encodes_and_checks_names() {
        assert_eq!(super::quote("refs/pr/1", false), "refs%2Fpr%2F1");
        assert_eq!(super::quote("a b/c.gguf", true), "a%20b/c.gguf");
        assert_eq!(super::origin("http://127.0.0.1:9/a/b"), "http://127.0.0.1:9");
        assert!(super::safe_name("Q8_0/m.gguf") && !super::safe_name("../x") && !super::safe_name("/x"));
    }
}
