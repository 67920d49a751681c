//! The incremental detokenizer on real tokenizers: deltas concatenate to what the
//! tokenizer decodes, never split a character, and stop strings split across
//! tokens end the text before them.

use std::sync::Arc;

use peregrine_engine::detokenizer::Detokenizer;
use peregrine_model::gguf::GgufFile;
use peregrine_model::testing::{default_model_path, reference_dir};
use peregrine_model::tokenizer::Tokenizer;

const TEXTS: [&str; 6] = [
    "Hello, world! Ça va très bien, merci.",
    "日本語のテキストと中文文本",
    "Emoji: 👩‍👩‍👧 🇫🇷 🦀✨",
    "fn main() {\n\tprintln!(\"hi\");\n}",
    "Zoë's naïve café — ½ Ⅻ",
    "  leading spaces and\n\nnewlines  ",
];

fn smollm2() -> Arc<Tokenizer> {
    Arc::new(Tokenizer::from_gguf(&GgufFile::open(&default_model_path()).unwrap()).unwrap())
}

fn spm() -> Arc<Tokenizer> {
    let dir = reference_dir("tiny-spm-gguf");
    let file = GgufFile::open(&dir.join("tiny-spm.gguf")).expect("run scripts/reference.py");
    Arc::new(Tokenizer::from_gguf(&file).unwrap())
}

/// Feeds tokens one at a time; every delta is whole UTF-8 (it is a String) and the
/// concatenation is returned.
fn stream(tok: &Arc<Tokenizer>, ids: &[u32], stop: &[&str]) -> (String, Option<usize>, usize) {
    let mut d = Detokenizer::new(tok.clone(), stop.iter().map(|s| s.to_string()).collect(), true);
    let (mut out, mut stopped, mut n_deltas) = (String::new(), None, 0);
    for &id in ids {
        let delta = d.push(id);
        n_deltas += !delta.text.is_empty() as usize;
        out.push_str(&delta.text);
        if delta.stopped_by.is_some() {
            stopped = delta.stopped_by;
            break;
        }
    }
    out.push_str(&d.finish());
    assert_eq!(d.output(), out);
    (out, stopped, n_deltas)
}

#[test]
fn byte_level_deltas_rebuild_the_text() {
    let tok = smollm2();
    for text in TEXTS {
        let ids = tok.encode(text, false).unwrap();
        let (out, stopped, _) = stream(&tok, &ids, &[]);
        assert_eq!(out, tok.decode(&ids, true).unwrap());
        assert_eq!(out, text);
        assert_eq!(stopped, None);
    }
}

#[test]
fn an_emoji_split_over_byte_tokens_is_emitted_whole() {
    let tok = smollm2();
    let ids = tok.encode("🦀", false).unwrap();
    assert!(ids.len() > 1, "the crab is several byte-level tokens: {ids:?}");
    let mut d = Detokenizer::new(tok.clone(), vec![], true);
    let deltas: Vec<String> = ids.iter().map(|&i| d.push(i).text).collect();
    assert!(deltas[..ids.len() - 1].iter().all(String::is_empty), "{deltas:?}");
    assert_eq!(deltas.last().unwrap(), "🦀");
}

#[test]
fn sentencepiece_byte_fallback_and_spaces() {
    let tok = spm();
    for text in TEXTS {
        let ids = tok.encode(text, false).unwrap();
        let (out, _, _) = stream(&tok, &ids, &[]);
        // decode() strips the one leading space SentencePiece adds; a continuation keeps it.
        let decoded = tok.decode(&ids, true).unwrap();
        let want = if tok.decode_strips_leading_space() { format!(" {decoded}") } else { decoded };
        assert_eq!(out, want, "{text:?}");
    }
}

#[test]
fn special_tokens_are_skipped() {
    let tok = smollm2();
    let ids = tok.encode("<|im_start|>assistant\nHi<|im_end|>", false).unwrap();
    assert_eq!(stream(&tok, &ids, &[]).0, "assistant\nHi");
}

#[test]
fn stop_strings_across_tokens_end_the_text_before_them() {
    let tok = smollm2();
    let text = "The answer is 42. Next question: why?";
    let ids = tok.encode(text, false).unwrap();
    // ". Next" spans several tokens; nothing of it may leak before the match.
    let (out, stopped, _) = stream(&tok, &ids, &["zzz", ". Next"]);
    assert_eq!((out.as_str(), stopped), ("The answer is 42", Some(1)));
    // The earliest stop string wins, whatever its index.
    let (out, stopped, _) = stream(&tok, &ids, &["question", "answer"]);
    assert_eq!((out.as_str(), stopped), ("The ", Some(1)));
    // A partial match that never completes is released at the end.
    let (out, stopped, _) = stream(&tok, &ids, &["why?!"]);
    assert_eq!((out.as_str(), stopped), (text, None));
    // Stop strings of multi-byte characters.
    let ids = tok.encode("日本語のテキスト", false).unwrap();
    assert_eq!(stream(&tok, &ids, &["テキ"]).0, "日本語の");
}
