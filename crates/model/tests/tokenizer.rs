//! The tokenizer against transformers (fixtures of `scripts/reference.py`), and on small
//! hand-made vocabularies and damaged metadata.

use std::path::Path;
use std::sync::Arc;

use peregrine_model::gguf::writer::GgufWriter;
use peregrine_model::gguf::{type_id, GgufFile, MetaArray, MetaValue};
use peregrine_model::storage::Storage;
use peregrine_model::testing::{load_reference, reference_dir, tokenizers_for};
use peregrine_model::tokenizer::byte_map::{byte_to_char, char_to_byte, parse_byte_token};
use peregrine_model::tokenizer::gguf_spm::generate_merges;
use peregrine_model::tokenizer::{ByteEncoding, Tokenizer, TokenizerError};
use serde_json::Value;

const REFERENCE_MODELS: [&str; 5] =
    ["smollm2-q4_1", "tiny-llama", "tiny-qwen2", "tiny-mistral", "tiny-spm-gguf"];

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// `generation_config.json`'s `eos_token_id` (a number or a list), as the engine passes it in.
fn generation_eos(dir: &Path) -> Vec<u32> {
    let Ok(text) = std::fs::read_to_string(dir.join("generation_config.json")) else { return vec![] };
    let v: Value = serde_json::from_str(&text).expect("generation_config.json");
    match &v["eos_token_id"] {
        Value::Number(n) => vec![n.as_u64().unwrap() as u32],
        Value::Array(a) => a.iter().map(|x| x.as_u64().unwrap() as u32).collect(),
        _ => vec![],
    }
}

fn ids_of(v: &Value) -> Vec<u32> {
    v.as_array().expect("ids").iter().map(|x| x.as_u64().expect("id") as u32).collect()
}

fn check_tokenize(name: &str) {
    let (dir, reference) = load_reference(name);
    let entries = reference["tokenize"].as_array().expect("tokenize entries");
    assert!(!entries.is_empty());
    for (label, mut tok) in tokenizers_for(&dir, &reference) {
        let mut failures = Vec::new();
        for e in entries {
            let text = e["text"].as_str().unwrap();
            let add = e["add_special_tokens"].as_bool().unwrap();
            let want = ids_of(&e["ids"]);
            let got = tok.encode(text, add).unwrap();
            if got != want {
                failures.push(format!(
                    "  {text:?} (add_special_tokens={add}):\n    want {want:?}\n    got  {got:?}"
                ));
                continue;
            }
            let has_special = want.iter().any(|&id| tok.is_special(id));
            // Decoding gives the text back: byte-level BPE is lossless; SentencePiece is too,
            // except next to special tokens, where its prefix space ends up in the text.
            if !(has_special && tok.decode_strips_leading_space()) {
                let back = tok.decode(&want, false).unwrap();
                let expect_back = if add && has_special { None } else { Some(text) };
                if let Some(t) = expect_back {
                    if back != t {
                        failures.push(format!("  decode(encode({text:?})) = {back:?}"));
                    }
                }
            }
            if !has_special || !add {
                let skipped = tok.decode(&want, true).unwrap();
                let plain: Vec<u32> = want.iter().copied().filter(|&id| !tok.is_special(id)).collect();
                assert_eq!(
                    skipped,
                    tok.decode(&plain, false).unwrap(),
                    "{label}: skip_special_tokens on {text:?}"
                );
            }
            // The raw bytes of the tokens spell the text (plus SentencePiece's prefix space).
            if !has_special {
                let bytes: Vec<u8> = want.iter().flat_map(|&id| tok.token_bytes(id)).collect();
                let mut expect = Vec::new();
                if tok.decode_strips_leading_space() && !want.is_empty() {
                    expect.push(b' ');
                }
                expect.extend_from_slice(text.as_bytes());
                if bytes != expect {
                    failures.push(format!(
                        "  token_bytes of {text:?} spell {:?}",
                        String::from_utf8_lossy(&bytes)
                    ));
                }
            }
        }
        assert!(
            failures.is_empty(),
            "{name} / {label}: {} mismatches with transformers:\n{}",
            failures.len(),
            failures.join("\n")
        );

        // BOS is added exactly when transformers adds it.
        let first =
            |add: bool| entries.iter().find(|e| e["add_special_tokens"] == add).map(|e| ids_of(&e["ids"]));
        let (with, without) = (first(true).unwrap(), first(false).unwrap());
        let adds_bos = with.len() > without.len() && with.first().copied() == tok.bos_token_id();
        assert_eq!(tok.add_bos_token(), adds_bos, "{label}: add_bos_token");

        let vocab = reference["vocab_size"].as_u64().unwrap() as usize;
        assert_eq!(tok.vocab_size(), vocab, "{label}: vocab_size");
        tok.set_extra_eos_token_ids(&generation_eos(&dir));
        let mut got_eos = tok.eos_token_ids();
        let mut want_eos = ids_of(&reference["eos_token_ids"]);
        got_eos.sort_unstable();
        want_eos.sort_unstable();
        assert_eq!(got_eos, want_eos, "{label}: eos_token_ids");
    }
}

#[test]
fn tokenize_smollm2_q4_1() {
    check_tokenize("smollm2-q4_1");
}

#[test]
fn tokenize_tiny_llama() {
    check_tokenize("tiny-llama");
}

#[test]
fn tokenize_tiny_qwen2() {
    check_tokenize("tiny-qwen2");
}

#[test]
fn tokenize_tiny_mistral() {
    check_tokenize("tiny-mistral");
}

#[test]
fn tokenize_tiny_spm_gguf() {
    check_tokenize("tiny-spm-gguf");
}

#[test]
fn every_reference_model_is_covered() {
    let root = reference_dir("x");
    let root = root.parent().unwrap();
    let Ok(entries) = std::fs::read_dir(root) else {
        panic!("{} is missing: run `python3 scripts/reference.py`", root.display())
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if e.path().join("reference.json").is_file() {
            assert!(REFERENCE_MODELS.contains(&name.as_str()), "fixture {name} has no tokenizer test here");
        }
    }
}

/// The real SmolLM2 GGUF: its special tokens and the bytes of a few tokens.
#[test]
fn smollm2_special_tokens() {
    let (dir, reference) = load_reference("smollm2-q4_1");
    let gguf = GgufFile::open(&dir.join(reference["model_path"].as_str().unwrap())).unwrap();
    let tok = Tokenizer::from_gguf(&gguf).unwrap();
    assert_eq!(tok.byte_encoding(), ByteEncoding::ByteLevel);
    assert_eq!(tok.bos_token_id(), Some(1));
    assert_eq!(tok.token_to_id("<|im_end|>"), Some(2));
    assert_eq!(tok.id_to_token(1).as_deref(), Some("<|im_start|>"));
    assert!(!tok.add_bos_token());
    assert!(tok.is_special(0) && tok.is_special(2));
    assert_eq!(tok.encode("<|im_start|>", true).unwrap(), vec![1]);
    let space_the = tok.token_to_id("Ġthe").unwrap();
    assert_eq!(tok.token_bytes(space_the), b" the");
    let newline = tok.token_to_id("Ċ").unwrap();
    assert_eq!(tok.token_bytes(newline), b"\n");
    assert_eq!(tok.token_bytes(2), b"<|im_end|>");
    assert_eq!(tok.token_bytes(u32::MAX), b"");
    // Unknown ids are skipped, not an error.
    assert_eq!(tok.decode(&[space_the, 4_000_000], false).unwrap(), " the");
    let template = tok.chat_template().expect("SmolLM2 has a chat template");
    assert!(template.source().contains("<|im_start|>"));
}

// ---------------------------------------------------------------------------------------------
// No fixtures needed
// ---------------------------------------------------------------------------------------------

#[test]
fn gpt2_byte_map_round_trips() {
    let mut seen = std::collections::HashSet::new();
    for b in 0..=255u8 {
        let c = byte_to_char(b);
        assert!(seen.insert(c), "byte {b} shares its character");
        assert_eq!(char_to_byte(c), Some(b));
    }
    // GPT-2's table: printable Latin-1 is itself, the rest counts up from U+0100.
    assert_eq!(byte_to_char(b'A'), 'A');
    assert_eq!(byte_to_char(0), '\u{100}');
    assert_eq!(byte_to_char(b' '), 'Ġ');
    assert_eq!(byte_to_char(b'\n'), 'Ċ');
    assert_eq!(byte_to_char(0xAD), 'Ń');
    assert_eq!(char_to_byte('€'), None);
    assert_eq!(parse_byte_token("<0x0A>"), Some(b'\n'));
    assert_eq!(parse_byte_token("<0xfF>"), Some(0xFF));
    assert_eq!(parse_byte_token("<0x0A"), None);
    assert_eq!(parse_byte_token("<0x123>"), None);
}

fn strings(v: &[&str]) -> MetaValue {
    MetaValue::Array(MetaArray {
        elem_type: type_id::STRING,
        values: v.iter().map(|s| MetaValue::String(s.to_string())).collect(),
    })
}

fn array(elem_type: u32, values: Vec<MetaValue>) -> MetaValue {
    MetaValue::Array(MetaArray { elem_type, values })
}

/// A SentencePiece vocabulary: `<unk>`, `<s>`, `</s>`, the 256 byte tokens, then pieces with
/// descending scores, then a control and a user-defined token.
fn spm_tokens() -> (Vec<String>, Vec<f32>, Vec<i32>) {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2, 3, 3];
    tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    types.extend(std::iter::repeat_n(6, 256));
    let mut scores = vec![0.0f32; tokens.len()];
    let pieces = [
        "▁", "▁t", "he", "▁the", "▁a", "in", "▁w", "or", "ld", "▁wor", "▁world", "He", "ll", "o", "▁He",
        "llo", "▁Hello", "e", "h", "t", "a", "w", "r", "l", "d", "H", "i", "n",
    ];
    for (i, p) in pieces.iter().enumerate() {
        tokens.push(p.to_string());
        scores.push(-(i as f32));
        types.push(1);
    }
    for (t, ty) in [("<|im_start|>", 3), ("<think>", 4)] {
        tokens.push(t.into());
        scores.push(0.0);
        types.push(ty);
    }
    (tokens, scores, types)
}

fn spm_writer(edit: impl FnOnce(&mut Vec<(&'static str, MetaValue)>)) -> GgufFile {
    let (tokens, scores, types) = spm_tokens();
    let tokens: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let mut meta: Vec<(&'static str, MetaValue)> = vec![
        ("general.architecture", MetaValue::String("llama".into())),
        ("tokenizer.ggml.model", MetaValue::String("llama".into())),
        ("tokenizer.ggml.tokens", strings(&tokens)),
        ("tokenizer.ggml.scores", array(type_id::F32, scores.into_iter().map(MetaValue::F32).collect())),
        ("tokenizer.ggml.token_type", array(type_id::I32, types.into_iter().map(MetaValue::I32).collect())),
        ("tokenizer.ggml.bos_token_id", MetaValue::U32(1)),
        ("tokenizer.ggml.eos_token_id", MetaValue::U32(2)),
        ("tokenizer.ggml.unknown_token_id", MetaValue::U32(0)),
        (
            "tokenizer.chat_template",
            MetaValue::String(
                "{{ bos_token }}{% for m in messages %}{{ m['content'].strip() }}{% endfor %}".into(),
            ),
        ),
    ];
    edit(&mut meta);
    let mut w = GgufWriter::default();
    for (k, v) in meta {
        w.meta(k, v);
    }
    GgufFile::parse(Arc::new(Storage::Owned(w.to_bytes()))).expect("valid GGUF")
}

/// Expected ids as transformers' GGUF loader gives them for this vocabulary
/// (`AutoTokenizer.from_pretrained(dir, gguf_file=...)` on the same metadata).
#[test]
fn sentencepiece_gguf_matches_transformers() {
    let tok = Tokenizer::from_gguf(&spm_writer(|_| {})).unwrap();
    assert_eq!(tok.byte_encoding(), ByteEncoding::SentencePiece);
    assert!(tok.add_bos_token(), "SentencePiece vocabularies add BOS unless told not to");
    assert!(tok.decode_strips_leading_space());
    assert_eq!(tok.vocab_size(), 3 + 256 + 28 + 2);
    assert_eq!(tok.encode("Hello world", true).unwrap(), vec![1, 275, 269]);
    assert_eq!(tok.encode("Hello world", false).unwrap(), vec![275, 269]);
    // é and 😀 are not pieces: byte fallback.
    assert_eq!(
        tok.encode("héllo 😀", true).unwrap(),
        vec![1, 259, 277, 198, 172, 274, 259, 243, 162, 155, 131]
    );
    assert_eq!(tok.encode("", true).unwrap(), vec![1]);
    assert_eq!(tok.encode("\n", true).unwrap(), vec![1, 259, 13]);
    assert_eq!(tok.decode(&[1, 275, 269], true).unwrap(), "Hello world");
    assert_eq!(tok.decode(&[1, 275, 269], false).unwrap(), "<s> Hello world");
    assert_eq!(tok.decode(&[1, 259, 277, 198, 172, 274, 259, 243, 162, 155, 131], true).unwrap(), "héllo 😀");
    // Control and user-defined tokens stay whole; only control tokens are special.
    let im_start = tok.token_to_id("<|im_start|>").unwrap();
    let think = tok.token_to_id("<think>").unwrap();
    let ids = tok.encode("<|im_start|><think>", false).unwrap();
    assert_eq!(ids, vec![im_start, think]);
    assert!(tok.is_special(im_start) && !tok.is_special(think));
    assert_eq!(tok.decode(&ids, true).unwrap(), "<think>");
    // Raw bytes: byte tokens are their byte, ▁ is a space.
    assert_eq!(tok.token_bytes(3 + 0xC3), vec![0xC3]);
    assert_eq!(tok.token_bytes(3 + 0x0A), b"\n");
    assert_eq!(tok.token_bytes(275), " Hello".as_bytes());
    assert_eq!(tok.token_bytes(259), b" ");
    assert_eq!(tok.eos_token_ids(), vec![2]);
    let rendered = tok
        .chat_template()
        .unwrap()
        .render(&serde_json::json!([{"role": "user", "content": "  hi  "}]), false, None)
        .unwrap();
    assert_eq!(rendered, "<s>hi");
}

#[test]
fn gguf_flags_are_honoured() {
    let tok = Tokenizer::from_gguf(&spm_writer(|m| {
        m.push(("tokenizer.ggml.add_bos_token", MetaValue::Bool(false)));
        m.push(("tokenizer.ggml.add_eos_token", MetaValue::Bool(true)));
        m.push(("tokenizer.ggml.add_space_prefix", MetaValue::Bool(false)));
        m.push(("tokenizer.ggml.eot_token_id", MetaValue::U32(3 + 256 + 28)));
    }))
    .unwrap();
    assert!(!tok.add_bos_token() && tok.add_eos_token());
    assert!(!tok.decode_strips_leading_space());
    // No prefix space: "Hello" is not "▁Hello".
    assert_eq!(tok.encode("Hello", true).unwrap(), vec![270, 274, 2]);
    assert_eq!(tok.decode(&[270, 274], false).unwrap(), "Hello");
    assert_eq!(tok.eos_token_ids(), vec![2, 3 + 256 + 28]);
}

fn build_err(edit: impl FnOnce(&mut Vec<(&'static str, MetaValue)>)) -> TokenizerError {
    match Tokenizer::from_gguf(&spm_writer(edit)) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    }
}

fn assert_names_key(e: TokenizerError, key: &str) {
    match &e {
        TokenizerError::Metadata { key: k, .. } => assert_eq!(k, key, "{e}"),
        other => panic!("expected an error naming {key}, got {other}"),
    }
    assert!(e.to_string().contains(key));
}

fn set(m: &mut [(&'static str, MetaValue)], key: &str, v: MetaValue) {
    m.iter_mut().find(|(k, _)| *k == key).expect("key").1 = v;
}

#[test]
fn bad_metadata_is_an_error_naming_the_key() {
    assert_names_key(build_err(|m| m.retain(|(k, _)| *k != "tokenizer.ggml.model")), "tokenizer.ggml.model");
    assert_names_key(
        build_err(|m| m.retain(|(k, _)| *k != "tokenizer.ggml.tokens")),
        "tokenizer.ggml.tokens",
    );
    assert_names_key(
        build_err(|m| set(m, "tokenizer.ggml.tokens", MetaValue::U32(3))),
        "tokenizer.ggml.tokens",
    );
    assert_names_key(
        build_err(|m| set(m, "tokenizer.ggml.scores", array(type_id::F32, vec![MetaValue::F32(0.0)]))),
        "tokenizer.ggml.scores",
    );
    assert_names_key(
        build_err(|m| set(m, "tokenizer.ggml.token_type", array(type_id::STRING, vec![]))),
        "tokenizer.ggml.token_type",
    );
    assert_names_key(
        build_err(|m| set(m, "tokenizer.ggml.bos_token_id", MetaValue::U32(100_000))),
        "tokenizer.ggml.bos_token_id",
    );
    assert_names_key(
        build_err(|m| set(m, "tokenizer.ggml.eos_token_id", MetaValue::String("2".into()))),
        "tokenizer.ggml.eos_token_id",
    );
    assert_names_key(
        build_err(|m| m.push(("tokenizer.ggml.merges", strings(&["▁ t", "nospace"])))),
        "tokenizer.ggml.merges",
    );
    assert_names_key(
        build_err(|m| m.push(("tokenizer.ggml.merges", strings(&["▁ zzz"])))),
        "tokenizer.ggml.merges",
    );
    assert_names_key(
        build_err(|m| m.retain(|(k, _)| *k != "tokenizer.ggml.scores")),
        "tokenizer.ggml.scores",
    );
    assert_names_key(
        build_err(|m| m.push(("tokenizer.ggml.add_space_prefix", MetaValue::String("yes".into())))),
        "tokenizer.ggml.add_space_prefix",
    );
    match build_err(|m| set(m, "tokenizer.ggml.model", MetaValue::String("rwkv".into()))) {
        TokenizerError::Unsupported(msg) => assert!(msg.contains("rwkv")),
        other => panic!("{other}"),
    }
    // A negative id is llama.cpp's "none", not an error.
    let tok =
        Tokenizer::from_gguf(&spm_writer(|m| set(m, "tokenizer.ggml.bos_token_id", MetaValue::I32(-1))))
            .unwrap();
    assert_eq!(tok.bos_token_id(), None);
    assert!(!tok.add_bos_token());
}

#[test]
fn broken_chat_template_does_not_stop_loading() {
    let tok = Tokenizer::from_gguf(&spm_writer(|m| {
        set(m, "tokenizer.chat_template", MetaValue::String("{% for m in messages %}".into()))
    }))
    .unwrap();
    assert!(tok.chat_template().is_none());
    assert!(tok.chat_template_error().is_some());
}

/// A byte-level vocabulary: the 256 byte characters, a few merges, a control token.
fn bpe_gguf(pre: &str, extra_tokens: &[&str], merges: &[&str]) -> GgufFile {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_to_char(b).to_string()).collect();
    tokens.extend(["Ġt", "he", "Ġthe", "12", "Ġ1"].map(String::from));
    tokens.extend(extra_tokens.iter().map(|s| s.to_string()));
    tokens.push("<|endoftext|>".into());
    let n = tokens.len();
    let mut types = vec![1; n];
    types[n - 1] = 3;
    let tokens: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let mut all_merges = vec!["Ġ t", "h e", "Ġt he", "Ġ 1", "1 2"];
    all_merges.extend_from_slice(merges);
    let mut w = GgufWriter::default();
    w.meta("tokenizer.ggml.model", MetaValue::String("gpt2".into()))
        .meta("tokenizer.ggml.pre", MetaValue::String(pre.into()))
        .meta("tokenizer.ggml.tokens", strings(&tokens))
        .meta(
            "tokenizer.ggml.token_type",
            array(type_id::I32, types.into_iter().map(MetaValue::I32).collect()),
        )
        .meta("tokenizer.ggml.merges", strings(&all_merges))
        .meta("tokenizer.ggml.eos_token_id", MetaValue::U32(n as u32 - 1));
    GgufFile::parse(Arc::new(Storage::Owned(w.to_bytes()))).unwrap()
}

#[test]
fn byte_level_pre_tokenizers_follow_llama_cpp() {
    let id = |tok: &Tokenizer, t: &str| tok.token_to_id(t).unwrap();
    // GPT-2 keeps " 12" together, and the merge "Ġ 1" outranks "1 2"; starcoder/smollm and
    // Qwen2 split every digit off first; Llama 3 keeps up to three digits but not the space.
    let gpt2 = Tokenizer::from_gguf(&bpe_gguf("gpt-2", &[], &[])).unwrap();
    let smollm = Tokenizer::from_gguf(&bpe_gguf("smollm", &[], &[])).unwrap();
    let llama3 = Tokenizer::from_gguf(&bpe_gguf("llama-bpe", &[], &[])).unwrap();
    let qwen2 = Tokenizer::from_gguf(&bpe_gguf("qwen2", &[], &[])).unwrap();
    let unknown = Tokenizer::from_gguf(&bpe_gguf("no-such-pre", &[], &[])).unwrap();
    let g = |b: u8| id(&gpt2, &byte_to_char(b).to_string());
    assert_eq!(gpt2.encode(" the 12", false).unwrap(), vec![id(&gpt2, "Ġthe"), id(&gpt2, "Ġ1"), g(b'2')]);
    assert_eq!(unknown.encode(" the 12", false).unwrap(), gpt2.encode(" the 12", false).unwrap());
    assert_eq!(smollm.encode(" the 12", false).unwrap(), vec![id(&gpt2, "Ġthe"), g(b' '), g(b'1'), g(b'2')]);
    // Llama 3 splits digits in groups of up to three, so "12" stays whole; the space goes alone.
    assert_eq!(llama3.encode(" the 12", false).unwrap(), vec![id(&gpt2, "Ġthe"), g(b' '), id(&gpt2, "12")]);
    assert_eq!(qwen2.encode(" the 12", false).unwrap(), vec![id(&gpt2, "Ġthe"), g(b' '), g(b'1'), g(b'2')]);
    assert_eq!(gpt2.encode("x<|endoftext|>", false).unwrap(), vec![g(b'x'), id(&gpt2, "<|endoftext|>")]);
    assert_eq!(gpt2.eos_token_ids(), vec![id(&gpt2, "<|endoftext|>")]);
    assert!(!gpt2.add_bos_token());
    // Every byte decodes, invalid UTF-8 lossily; token_bytes keeps the raw byte.
    assert_eq!(gpt2.token_bytes(g(0xFF)), vec![0xFF]);
    assert_eq!(gpt2.decode(&[g(0xE2), g(0x82), g(0xAC)], false).unwrap(), "€");
    assert_eq!(gpt2.decode(&[g(0xE2)], false).unwrap(), "\u{FFFD}");
}

/// transformers' `generate_merges` order: best score first, ties by longer left piece.
#[test]
fn merges_from_scores_follow_transformers() {
    let tokens: Vec<String> = ["a", "b", "c", "ab", "bc", "abc"].map(String::from).to_vec();
    let scores = [0.0, 0.0, 0.0, -1.0, -2.0, -0.5];
    let merges = generate_merges(&tokens, Some(&scores));
    let merges: Vec<(&str, &str)> = merges.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    // Python: generate_merges({t: i}, dict(zip(tokens, scores)))
    assert_eq!(merges, vec![("ab", "c"), ("a", "bc"), ("a", "b"), ("b", "c")]);
    let by_id = generate_merges(&tokens, None);
    let by_id: Vec<(&str, &str)> = by_id.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    assert_eq!(by_id, vec![("a", "b"), ("b", "c"), ("a", "bc"), ("ab", "c")]);
}

/// Arbitrary text and ids never panic.
#[test]
fn arbitrary_input_does_not_panic() {
    let spm = Tokenizer::from_gguf(&spm_writer(|_| {})).unwrap();
    let bpe = Tokenizer::from_gguf(&bpe_gguf("llama-bpe", &[], &[])).unwrap();
    let mut state = 0x2545F4914F6CDD1Du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let alphabet: Vec<char> = " \n\t\r▁aé😀<>|_0123456789\u{0}\u{301}\u{FFFD}東".chars().collect();
    for _ in 0..300 {
        let len = (next() % 40) as usize;
        let text: String = (0..len).map(|_| alphabet[(next() % alphabet.len() as u64) as usize]).collect();
        for tok in [&spm, &bpe] {
            let ids = tok.encode(&text, true).unwrap();
            let _ = tok.decode(&ids, false).unwrap();
            let random: Vec<u32> = (0..8).map(|_| (next() % 400) as u32).collect();
            let _ = tok.decode(&random, true).unwrap();
            let bytes: usize = random.iter().map(|&id| tok.token_bytes(id).len()).sum();
            assert!(bytes <= 8 * 32);
        }
    }
}

/// The engine shares one tokenizer (and its chat template) between threads.
#[test]
fn tokenizer_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<Tokenizer>();
    assert_send_sync::<peregrine_model::tokenizer::ChatTemplate>();
}
