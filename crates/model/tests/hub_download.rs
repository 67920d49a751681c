//! Hub downloads against a real HTTP/1.1 server on loopback that answers like the Hugging
//! Face hub: the model API, `resolve/` with plain files, LFS redirects to a CDN URL
//! (`X-Linked-Etag`), gated (401/403) and missing (404) repositories. Each test has its
//! own server and cache directory and passes an explicit `HubConfig` (no env vars).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use peregrine_model::hub::{download, pick_gguf, HubConfig, HubSpec};
use peregrine_model::load::{LoadFormat, Model};
use peregrine_model::source::{resolve_with, ModelSource};
use peregrine_model::testing::reference_dir;

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const TOKEN: &str = "hf_secret";

/// (repo, file name, contents, stored in LFS)
type File = (&'static str, String, Vec<u8>, bool);

/// The files of `repo`: a table, and for `ref/tiny-llama` the reference fixture on disk
/// (with files that are not part of a model: `*.f32`, `reference.json`).
fn files_of(repo: &str) -> Vec<File> {
    if repo == "ref/tiny-llama" {
        let dir = reference_dir("tiny-llama");
        let Ok(entries) = std::fs::read_dir(&dir) else { return Vec::new() };
        return entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .map(|n| {
                (
                    "ref/tiny-llama",
                    n.clone(),
                    std::fs::read(dir.join(&n)).unwrap(),
                    n.ends_with(".safetensors"),
                )
            })
            .collect();
    }
    table().into_iter().filter(|f| f.0 == repo).map(|(r, n, d, l)| (r, n.to_string(), d, l)).collect()
}

fn table() -> Vec<(&'static str, &'static str, Vec<u8>, bool)> {
    let big = |seed: u8, n: usize| (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
    let text = |s: &str| s.as_bytes().to_vec();
    vec![
        ("org/tiny", ".gitattributes", text("*.safetensors filter=lfs"), false),
        ("org/tiny", "README.md", text("# tiny"), false),
        ("org/tiny", "config.json", text(r#"{"model_type":"llama"}"#), false),
        ("org/tiny", "generation_config.json", text(r#"{"eos_token_id":2}"#), false),
        ("org/tiny", "tokenizer.json", text(r#"{"model":{}}"#), false),
        ("org/tiny", "model.safetensors", big(1, 300_000), true),
        ("org/tiny", "original/consolidated.safetensors", big(2, 1000), true),
        ("org/sharded", "config.json", text(r#"{"model_type":"qwen2"}"#), false),
        (
            "org/sharded",
            "model.safetensors.index.json",
            text(
                r#"{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}"#,
            ),
            false,
        ),
        ("org/sharded", "model-00001-of-00002.safetensors", big(3, 5000), true),
        ("org/sharded", "model-00002-of-00002.safetensors", big(4, 5000), true),
        ("org/sharded", "consolidated.safetensors", big(5, 10_000), true),
        ("org/tiny-GGUF", "README.md", text("# gguf"), false),
        ("org/tiny-GGUF", "tiny-Q4_K_M.gguf", big(6, 4000), true),
        ("org/tiny-GGUF", "tiny-Q4_K_S.gguf", big(7, 4000), true),
        ("org/tiny-GGUF", "Q8_0/tiny-Q8_0.gguf", big(8, 8000), true),
        ("org/gated", "config.json", text(r#"{"model_type":"mistral"}"#), false),
        ("org/gated", "model.safetensors", big(9, 2000), true),
    ]
}

/// The blob name the hub gives a file: a sha256-like hex for LFS, a sha1-like one else.
fn etag_of(data: &[u8], lfs: bool) -> String {
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in data {
        h = (h ^ b as u64).wrapping_mul(0x100000001b3);
    }
    let hex = format!("{h:016x}");
    hex.repeat(4)[..if lfs { 64 } else { 40 }].to_string()
}

#[derive(Clone, Debug)]
struct Req {
    path: String,
    auth: Option<String>,
}

struct Server {
    endpoint: String,
    log: Arc<Mutex<Vec<Req>>>,
}

impl Server {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = log.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let l = l.clone();
                std::thread::spawn(move || handle(stream, port, &l));
            }
        });
        Self { endpoint: format!("http://127.0.0.1:{port}"), log }
    }

    fn requests(&self) -> Vec<Req> {
        self.log.lock().unwrap().clone()
    }

    fn paths(&self) -> Vec<String> {
        self.requests().into_iter().map(|r| r.path).collect()
    }

    fn config(&self, cache: &Path) -> HubConfig {
        HubConfig {
            endpoint: self.endpoint.clone(),
            cache_dir: cache.to_path_buf(),
            token: None,
            offline: false,
        }
    }
}

fn handle(mut stream: TcpStream, port: u16, log: &Mutex<Vec<Req>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut auth = None;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("authorization") {
                auth = Some(v.trim().to_string());
            }
        }
    }
    log.lock().unwrap().push(Req { path: path.clone(), auth: auth.clone() });
    let (status, headers, body) = route(&path, auth.as_deref(), port);
    let mut head = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n", body.len());
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = stream.write_all(head.as_bytes()).and_then(|_| stream.write_all(&body));
}

type Answer = (&'static str, Vec<(&'static str, String)>, Vec<u8>);

fn route(path: &str, auth: Option<&str>, port: u16) -> Answer {
    let error = |status, code: &str, msg: &str| {
        (status, vec![("X-Error-Code", code.to_string()), ("X-Error-Message", msg.to_string())], Vec::new())
    };
    let repo_of = |p: &str| p.splitn(3, '/').take(2).collect::<Vec<_>>().join("/");
    if let Some(rest) = path.strip_prefix("/cdn/") {
        // The CDN: any ETag but the hub's, and no token needed.
        let (repo, name) = rest.split_once("/-/").unwrap();
        let name = name.split('?').next().unwrap();
        let f = files_of(repo).into_iter().find(|f| f.1 == name).unwrap();
        return ("200 OK", vec![("ETag", "\"cdn-etag-not-the-blob\"".into())], f.2.clone());
    }
    let (api, rest) = match path.strip_prefix("/api/models/") {
        Some(r) => (true, r),
        None => (false, &path[1..]),
    };
    let repo = repo_of(rest);
    let all = files_of(&repo);
    if all.is_empty() {
        return error("401 Unauthorized", "RepoNotFound", "Repository Not Found for url");
    }
    if repo == "org/gated" && auth != Some(&format!("Bearer {TOKEN}")) {
        let (status, msg) = match auth {
            None => {
                ("401 Unauthorized", "Access to model org/gated is restricted. You must be authenticated.")
            }
            Some(_) => {
                ("403 Forbidden", "Access to model org/gated is restricted and you are not in the list.")
            }
        };
        return error(status, "GatedRepo", msg);
    }
    let rest = &rest[repo.len() + 1..];
    if api {
        let rev = rest.strip_prefix("revision/").unwrap();
        if rev != "main" && rev != SHA && rev != "v1" {
            return error("404 Not Found", "RevisionNotFound", &format!("Invalid rev id: {rev}"));
        }
        let siblings: Vec<String> = all.iter().map(|f| format!(r#"{{"rfilename":"{}"}}"#, f.1)).collect();
        let json = format!(r#"{{"id":"{repo}","sha":"{SHA}","siblings":[{}]}}"#, siblings.join(","));
        return ("200 OK", vec![("Content-Type", "application/json".into())], json.into_bytes());
    }
    let name = rest.strip_prefix(&format!("resolve/{SHA}/")).unwrap();
    let Some(f) = all.iter().find(|f| f.1 == name) else {
        return error("404 Not Found", "EntryNotFound", &format!("{name} does not exist"));
    };
    let etag = etag_of(&f.2, f.3);
    if f.3 {
        // Like the hub's LFS answer: a redirect to a signed CDN URL (another host for the
        // gated repository, to check the token stays with the hub).
        let host = if repo == "org/gated" { "localhost" } else { "127.0.0.1" };
        let headers = vec![
            ("Location", format!("http://{host}:{port}/cdn/{repo}/-/{name}?X-Amz-Signature=abc")),
            ("X-Linked-Etag", format!("\"{etag}\"")),
            ("ETag", "\"hub-pointer-etag\"".into()),
            ("X-Repo-Commit", SHA.into()),
        ];
        return ("302 Found", headers, Vec::new());
    }
    // Plain git files: a weak ETag for one of them, to check the W/ prefix is dropped.
    let tag = if name == "tokenizer.json" { format!("W/\"{etag}\"") } else { format!("\"{etag}\"") };
    ("200 OK", vec![("ETag", tag), ("X-Repo-Commit", SHA.into())], f.2.clone())
}

fn temp_cache(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("peregrine-hub-dl-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn names_in(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// Checks `snapshots/{SHA}/{name}` is a relative link to the right blob with the right bytes.
fn check_link(root: &Path, name: &str) {
    let dir = root.file_name().unwrap().to_str().unwrap();
    let repo = dir.strip_prefix("models--").unwrap().replacen("--", "/", 1);
    let (_, _, data, lfs) = files_of(&repo).into_iter().find(|f| f.1 == name).unwrap();
    let link = root.join("snapshots").join(SHA).join(name);
    let up = "../".repeat(name.matches('/').count());
    let target = std::fs::read_link(&link).unwrap();
    assert_eq!(target, PathBuf::from(format!("{up}../../blobs/{}", etag_of(&data, lfs))), "{name}");
    assert_eq!(std::fs::read(&link).unwrap(), data, "{name}");
}

/// Asks Python's huggingface_hub whether it finds `name` in our cache, if it is installed.
fn python_finds(cache: &Path, repo: &str, name: &str) {
    let ok = std::process::Command::new("python3").args(["-c", "import huggingface_hub"]).output();
    if !ok.is_ok_and(|o| o.status.success()) {
        println!("skipping the huggingface_hub check: python3 or huggingface_hub is missing");
        return;
    }
    let script = "import sys; from huggingface_hub import try_to_load_from_cache as t; \
                  print(t(sys.argv[1], sys.argv[2], cache_dir=sys.argv[3]))";
    let out = std::process::Command::new("python3")
        .args(["-c", script, repo, name, cache.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let found = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let root = cache.join(format!("models--{}", repo.replace('/', "--")));
    assert_eq!(PathBuf::from(found), root.join("snapshots").join(SHA).join(name));
}

#[test]
fn downloads_into_the_huggingface_cache_layout_once() {
    let server = Server::start();
    let cache = temp_cache("layout");
    let cfg = server.config(&cache);
    let root = cache.join("models--org--tiny");
    let snap = root.join("snapshots").join(SHA);

    assert_eq!(resolve_with("org/tiny", &cfg).unwrap(), ModelSource::HfDir(snap.clone()));
    assert_eq!(names_in(&root), set(&["blobs", "refs", "snapshots"]));
    assert_eq!(std::fs::read_to_string(root.join("refs/main")).unwrap(), SHA);
    assert_eq!(names_in(&root.join("snapshots")), set(&[SHA]));
    let wanted = ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json"];
    assert_eq!(names_in(&snap), set(&wanted));
    for name in wanted {
        check_link(&root, name);
    }
    assert!(!names_in(&root.join("blobs")).iter().any(|b| b.contains("incomplete") || b.contains('"')));
    let paths = server.paths();
    assert_eq!(paths.len(), 6, "API, 3 plain files, one LFS redirect and its CDN: {paths:?}");
    assert_eq!(paths.iter().filter(|p| p.starts_with("/cdn/")).count(), 1);
    assert!(server.requests().iter().all(|r| r.auth.is_none()));

    // Cached: no request at all.
    assert_eq!(resolve_with("org/tiny", &cfg).unwrap(), ModelSource::HfDir(snap.clone()));
    assert_eq!(server.paths().len(), 6);

    // An interrupted download (config.json is linked last): only the missing links are
    // fetched, and a blob already there is not fetched again from the CDN.
    std::fs::remove_file(snap.join("config.json")).unwrap();
    std::fs::remove_file(snap.join("model.safetensors")).unwrap();
    assert_eq!(resolve_with("org/tiny", &cfg).unwrap(), ModelSource::HfDir(snap.clone()));
    let again = server.paths()[6..].to_vec();
    assert_eq!(again.len(), 3, "API, config.json, the LFS redirect only: {again:?}");
    assert!(!again.iter().any(|p| p.starts_with("/cdn/")));
    check_link(&root, "config.json");
    check_link(&root, "model.safetensors");

    python_finds(&cache, "org/tiny", "model.safetensors");
    python_finds(&cache, "org/tiny", "config.json");

    // A commit hash as the revision writes no ref; a tag does.
    let cache2 = temp_cache("by-commit");
    let cfg2 = server.config(&cache2);
    let got = resolve_with(&format!("org/tiny@{SHA}"), &cfg2).unwrap();
    assert_eq!(got, ModelSource::HfDir(cache2.join("models--org--tiny/snapshots").join(SHA)));
    assert!(!cache2.join("models--org--tiny/refs").exists());
    resolve_with("org/tiny@v1", &cfg2).unwrap();
    assert_eq!(std::fs::read_to_string(cache2.join("models--org--tiny/refs/v1")).unwrap(), SHA);
    std::fs::remove_dir_all(&cache).unwrap();
    std::fs::remove_dir_all(&cache2).unwrap();
}

#[test]
fn sharded_repos_fetch_the_shards_of_the_index() {
    let server = Server::start();
    let cache = temp_cache("sharded");
    let root = cache.join("models--org--sharded");
    resolve_with("org/sharded", &server.config(&cache)).unwrap();
    let snap = root.join("snapshots").join(SHA);
    let shards = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"];
    assert_eq!(names_in(&snap), set(&["config.json", "model.safetensors.index.json", shards[0], shards[1]]));
    for name in names_in(&snap) {
        check_link(&root, &name);
    }
    assert!(!server.paths().iter().any(|p| p.contains("consolidated")));
    std::fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn a_quant_suffix_picks_one_gguf() {
    let server = Server::start();
    let cache = temp_cache("gguf");
    let cfg = server.config(&cache);
    let root = cache.join("models--org--tiny-GGUF");
    let snap = root.join("snapshots").join(SHA);
    let err = |spec: &str| {
        let e = resolve_with(spec, &cfg).unwrap_err().to_string();
        println!("{spec}: {e}");
        e
    };

    let e = err("org/tiny-GGUF");
    assert!(e.contains("3 .gguf files") && e.contains("Q8_0/tiny-Q8_0.gguf") && e.contains(":Q4_K_M"), "{e}");
    let e = err("org/tiny-GGUF:Q4_K");
    assert!(e.contains("several") && e.contains("tiny-Q4_K_M.gguf") && e.contains("tiny-Q4_K_S.gguf"), "{e}");
    let e = err("org/tiny-GGUF:Q5_K_M");
    assert!(e.contains("no .gguf file matches") && e.contains("tiny-Q4_K_S.gguf"), "{e}");
    let e = err("org/tiny:Q4_K_M");
    assert!(e.contains("no .gguf files"), "{e}");
    assert!(!root.join("blobs").exists(), "nothing downloaded for errors");

    let got = resolve_with("org/tiny-GGUF:q4_k_m", &cfg).unwrap();
    assert_eq!(got, ModelSource::Gguf(snap.join("tiny-Q4_K_M.gguf")));
    let got = resolve_with("org/tiny-GGUF:Q8_0@main", &cfg).unwrap();
    assert_eq!(got, ModelSource::Gguf(snap.join("Q8_0/tiny-Q8_0.gguf")));
    assert_eq!(names_in(&snap), set(&["Q8_0", "tiny-Q4_K_M.gguf"]));
    check_link(&root, "tiny-Q4_K_M.gguf");
    check_link(&root, "Q8_0/tiny-Q8_0.gguf");
    assert_eq!(std::fs::read_to_string(root.join("refs/main")).unwrap(), SHA);

    let n = server.paths().len();
    let got = resolve_with("org/tiny-GGUF@main:Q4_K_M", &cfg).unwrap();
    assert_eq!(got, ModelSource::Gguf(snap.join("tiny-Q4_K_M.gguf")));
    assert_eq!(server.paths().len(), n, "cached: no request");
    python_finds(&cache, "org/tiny-GGUF", "Q8_0/tiny-Q8_0.gguf");
    std::fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn offline_mode_makes_no_request() {
    let server = Server::start();
    let cache = temp_cache("offline");
    let cfg = HubConfig { offline: true, ..server.config(&cache) };
    let e = resolve_with("org/tiny", &cfg).unwrap_err().to_string();
    println!("{e}");
    assert!(
        e.contains("offline") && e.contains("not in the Hugging Face cache") && e.contains("local path"),
        "{e}"
    );
    assert!(server.paths().is_empty());
    assert!(download(&HubSpec::parse("org/tiny").unwrap(), &cfg).is_err());
    assert!(server.paths().is_empty());
    std::fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn errors_say_what_to_do() {
    let server = Server::start();
    let cache = temp_cache("errors");
    let cfg = server.config(&cache);
    let err = |spec: &str, cfg: &HubConfig| {
        let e = resolve_with(spec, cfg).unwrap_err().to_string();
        println!("{spec}: {e}");
        e
    };

    let e = err("org/missing", &cfg);
    assert!(e.contains("does not exist") && e.contains("org/missing") && e.contains("401"), "{e}");
    let e = err("org/tiny@nope", &cfg);
    assert!(e.contains("does not exist") && e.contains("revision nope") && e.contains("404"), "{e}");
    let e = err("org/gated", &cfg);
    assert!(e.contains("set HF_TOKEN") && e.contains("401") && e.contains("restricted"), "{e}");
    let wrong = HubConfig { token: Some("hf_wrong".into()), ..cfg.clone() };
    let e = err("org/gated", &wrong);
    assert!(e.contains("403") && e.contains("token in HF_TOKEN"), "{e}");
    assert!(!cache.join("models--org--gated").exists());

    // With the token: sent to the hub as a bearer token, never to the CDN (another host).
    let n = server.paths().len();
    let with = HubConfig { token: Some(TOKEN.into()), ..cfg.clone() };
    let got = resolve_with("org/gated", &with).unwrap();
    assert_eq!(got, ModelSource::HfDir(cache.join("models--org--gated/snapshots").join(SHA)));
    check_link(&cache.join("models--org--gated"), "model.safetensors");
    let reqs = server.requests()[n..].to_vec();
    assert_eq!(reqs.len(), 4, "{reqs:?}");
    for r in &reqs {
        let cdn = r.path.starts_with("/cdn/");
        assert_eq!(r.auth.is_none(), cdn, "{r:?}");
        assert!(cdn || r.auth.as_deref() == Some("Bearer hf_secret"), "{r:?}");
    }
    std::fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn an_unreachable_hub_says_to_use_a_local_path() {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let cache = temp_cache("unreachable");
    let cfg = HubConfig {
        endpoint: format!("http://127.0.0.1:{port}"),
        cache_dir: cache.clone(),
        token: None,
        offline: false,
    };
    let e = resolve_with("org/tiny", &cfg).unwrap_err().to_string();
    println!("{e}");
    assert!(e.contains(&format!("could not be reached at http://127.0.0.1:{port}")), "{e}");
    assert!(e.contains("local path") && e.contains("config.json and *.safetensors"), "{e}");
    assert!(e.contains("HF_HUB_OFFLINE=1"), "{e}");
    std::fs::remove_dir_all(&cache).unwrap();
}

#[test]
fn a_downloaded_model_loads_like_the_original() {
    let local = reference_dir("tiny-llama");
    if !local.join("config.json").is_file() {
        println!("skipping: {} is missing (scripts/reference.py writes it)", local.display());
        return;
    }
    let server = Server::start();
    let cache = temp_cache("load");
    let got = resolve_with("ref/tiny-llama", &server.config(&cache)).unwrap();
    let root = cache.join("models--ref--tiny-llama");
    assert_eq!(got, ModelSource::HfDir(root.join("snapshots").join(SHA)));
    let wanted = [
        "config.json",
        "generation_config.json",
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
        "model.safetensors.index.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ];
    assert_eq!(names_in(got.path()), set(&wanted));
    for name in wanted {
        check_link(&root, name);
    }
    let ours = Model::load(got.path().to_str().unwrap(), LoadFormat::Auto).unwrap();
    let theirs = Model::load(local.to_str().unwrap(), LoadFormat::Auto).unwrap();
    assert_eq!(format!("{:?}", ours.config), format!("{:?}", theirs.config));
    assert_eq!(ours.eos_token_ids, theirs.eos_token_ids);
    let text = "Hello from the hub cache!";
    let encode = |m: &Model| m.tokenizer.as_ref().unwrap().encode(text, true).unwrap();
    assert_eq!(encode(&ours), encode(&theirs));
    python_finds(&cache, "ref/tiny-llama", "model-00002-of-00003.safetensors");
    std::fs::remove_dir_all(&cache).unwrap();
}

// Parsing and configuration: the pure parts of the API.

#[test]
fn parses_specs() {
    let s = |r: &str, v: &str, q: Option<&str>| {
        Some(HubSpec { repo: r.into(), revision: v.into(), quant: q.map(Into::into) })
    };
    assert_eq!(HubSpec::parse("org/m"), s("org/m", "main", None));
    assert_eq!(HubSpec::parse("org/m:Q4_K_M@v1"), s("org/m", "v1", Some("Q4_K_M")));
    assert_eq!(HubSpec::parse("org/m@refs/pr/1:q8_0"), s("org/m", "refs/pr/1", Some("q8_0")));
    for bad in ["org/m:a@b:c", "org/m@../x", "org/m@", "org/m:", "org/m@a//b", "C:/x/y", "a/b/c"] {
        assert_eq!(HubSpec::parse(bad), None, "{bad}");
    }
    assert_eq!(HubSpec::parse("org/m:Q8_0@dev").unwrap().to_string(), "org/m:Q8_0@dev");
}

#[test]
fn picks_ggufs() {
    let g = ["m-Q4_0.gguf", "m-Q4_0_4_4.gguf", "m-Q4_K_M.gguf", "m-Q4_K_S.gguf"];
    assert_eq!(pick_gguf(&g, Some("q4_k_m")), Ok(Some("m-Q4_K_M.gguf")));
    assert_eq!(pick_gguf(&g, Some("Q4_0")), Ok(Some("m-Q4_0.gguf")));
    assert_eq!(pick_gguf(&g, Some("Q4_K")), Err(vec!["m-Q4_K_M.gguf", "m-Q4_K_S.gguf"]));
    assert_eq!(pick_gguf(&g, Some("Q5_K_M")), Ok(None));
    assert_eq!(pick_gguf(&g[..1], None), Ok(Some("m-Q4_0.gguf")));
    assert_eq!(pick_gguf(&g[..2], None), Err(g[..2].to_vec()));
}

#[test]
fn reads_config_like_huggingface_hub() {
    let dir = temp_cache("config");
    std::fs::write(dir.join("token"), "hf_file\n").unwrap();
    let home = dir.to_str().unwrap().to_string();
    let env = |pairs: Vec<(&'static str, String)>| {
        HubConfig::from_lookup(move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()))
    };
    let c = env(vec![("HF_HOME", home.clone()), ("HF_ENDPOINT", "http://h:1/".into())]);
    assert_eq!((c.endpoint.as_str(), c.token.as_deref(), c.offline), ("http://h:1", Some("hf_file"), false));
    assert_eq!(c.cache_dir, dir.join("hub"));
    assert!(!format!("{c:?}").contains("hf_file"));
    let c = env(vec![("HF_HOME", home), ("HF_TOKEN", "hf_env".into()), ("HF_HUB_OFFLINE", "ON".into())]);
    assert_eq!((c.token.as_deref(), c.offline), (Some("hf_env"), true));
    let c = env(vec![("HOME", "/h".into()), ("HF_HUB_CACHE", "/c".into())]);
    assert_eq!((c.endpoint.as_str(), c.cache_dir, c.token), ("https://huggingface.co", "/c".into(), None));
    assert_eq!(env(vec![("HOME", "/h".into())]).cache_dir, PathBuf::from("/h/.cache/huggingface/hub"));
    std::fs::remove_dir_all(&dir).unwrap();
}
