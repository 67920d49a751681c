//! The pre-tokenizer of a byte-level BPE vocabulary, from GGUF's `tokenizer.ggml.pre`.
//!
//! A byte-level BPE vocabulary only reproduces its training when text is split into words the
//! way it was at training time. GGUF records that choice as a name; llama.cpp
//! (`llama-vocab.cpp`) maps each name to a list of regexes applied one after the other, each to
//! the pieces the previous one produced (matches and the text between them both kept). In
//! `tokenizers` terms that is a `Sequence` of `Split(regex, Isolated)` followed by the byte
//! mapping (`ByteLevel` without its own regex). The GPT-2 regex is `ByteLevel`'s built-in one.
//!
//! Where llama.cpp rewrote a model's original regex to suit its own regex engine (e.g. `(?i:'s|…)`
//! spelled out as `'[sS]|…`) we use the original from the model's `tokenizer.json`, which
//! `fancy-regex` handles and which transformers uses too.

use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;

use super::TokenizerError;

/// GPT-2's word regex (what `ByteLevel(use_regex=true)` applies).
pub const GPT2_SPLIT: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";

/// Llama 3 (tiktoken cl100k-style), also DBRX, Smaug, Falcon 3, ChatGLM4/GLM4.
pub const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen2: as Llama 3 but single digits.
pub const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen3.5: Qwen2 with combining marks kept on their letters.
pub const QWEN35_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Mistral's Tekken (Nemo, Pixtral 12B).
pub const TEKKEN_SPLIT: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*",
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);

/// GPT-4o (o200k), Llama 4.
pub const GPT4O_SPLIT: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);

const DEEPSEEK_LLM_SPLITS: &[&str] = &[
    "[\r\n]",
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}+",
];

const DEEPSEEK_CODER_SPLITS: &[&str] =
    &["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"];

const FALCON_SPLITS: &[&str] = &["[\\p{P}\\$\\+<=>\\^~\\|`]+", GPT2_SPLIT, "[0-9][0-9][0-9]"];

const BLOOM_SPLITS: &[&str] = &[" ?[^(\\s|.,!?…。，、।۔،)]+"];

const VIKING_SPLITS: &[&str] = &[" ?[^(\\s|.,!?…。，、।۔،)]+", "\\p{N}"];

/// The word splitting of a `tokenizer.ggml.pre` name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PreSplit {
    /// GPT-2's regex (`ByteLevel(use_regex=true)`).
    Gpt2,
    /// Every digit on its own, then GPT-2's regex (StarCoder, SmolLM, Refact, Command-R, …).
    DigitsThenGpt2,
    /// Regexes applied in turn, then the byte mapping.
    Regexes(&'static [&'static str]),
}

/// llama.cpp's name → splitting; `None` for a name this table does not know.
pub fn lookup(pre: &str) -> Option<PreSplit> {
    use PreSplit::*;
    const fn one(r: &'static [&'static str]) -> PreSplit {
        Regexes(r)
    }
    Some(match pre {
        "default" | "gpt-2" | "gpt2" | "phi-2" | "mpt" | "olmo" | "jais" | "jina-es" | "jina-de"
        | "jina-v1-en" | "jina-v2-es" | "jina-v2-de" | "jina-v2-code" | "roberta-bpe" | "gigachat"
        | "trillion" | "granite-docling" | "mellum" | "modern-bert" | "a.x-4.0" | "exaone4" => Gpt2,
        "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone" | "minerva-7b"
        | "mellum2" => DigitsThenGpt2,
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0" | "lfm2"
        | "jina-v5-nano" | "dbrx" | "smaug-bpe" | "chatglm-bpe" | "glm4" | "glm5" => one(&[LLAMA3_SPLIT]),
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "megrez" | "stablelm2" | "hunyuan" => {
            one(&[QWEN2_SPLIT])
        }
        "qwen35" => one(&[QWEN35_SPLIT]),
        "tekken" | "mistral" => one(&[TEKKEN_SPLIT]),
        "gpt-4o" | "llama4" | "kanana2" | "minimax-m2" => one(&[GPT4O_SPLIT]),
        "deepseek-llm" => Regexes(DEEPSEEK_LLM_SPLITS),
        "deepseek-coder" => Regexes(DEEPSEEK_CODER_SPLITS),
        "falcon" => Regexes(FALCON_SPLITS),
        "poro-chat" | "bloom" | "gpt3-finnish" => Regexes(BLOOM_SPLITS),
        "viking" => Regexes(VIKING_SPLITS),
        _ => return None,
    })
}

/// The splitting for `pre` (absent: GPT-2's); an unknown name falls back to GPT-2's with a warning.
pub fn for_gguf_pre(pre: Option<&str>) -> PreSplit {
    match pre {
        None => PreSplit::Gpt2,
        Some(name) => lookup(name).unwrap_or_else(|| {
            log::warn!(
                "tokenizer.ggml.pre = {name:?} is not a pre-tokenizer Peregrine knows; \
                 splitting words with GPT-2's regex, which may tokenize differently from the model's training"
            );
            PreSplit::Gpt2
        }),
    }
}

/// The `tokenizers` pre-tokenizer doing `split` and then the byte mapping.
pub fn byte_level_pre_tokenizer(split: PreSplit) -> Result<PreTokenizerWrapper, TokenizerError> {
    Ok(match split {
        PreSplit::Gpt2 => ByteLevel::new(false, true, true).into(),
        PreSplit::DigitsThenGpt2 => {
            Sequence::new(vec![Digits::new(true).into(), ByteLevel::new(false, true, true).into()]).into()
        }
        PreSplit::Regexes(regexes) => {
            let mut steps = Vec::with_capacity(regexes.len() + 1);
            for r in regexes {
                let split = Split::new(
                    SplitPattern::Regex((*r).to_string()),
                    SplitDelimiterBehavior::Isolated,
                    false,
                )
                .map_err(|e| TokenizerError::backend(&format!("pre-tokenizer regex {r:?}"), e))?;
                steps.push(split.into());
            }
            steps.push(ByteLevel::new(false, true, false).into());
            Sequence::new(steps).into()
        }
    })
}
