//! The GGUF reader on the real default model and on damaged files.

use std::sync::Arc;

use peregrine_compute::quant::WeightFormat;
use peregrine_model::gguf::writer::GgufWriter;
use peregrine_model::gguf::{type_id, GgufError, GgufFile, MetaArray, MetaValue};
use peregrine_model::storage::Storage;

fn small_file() -> Vec<u8> {
    let mut w = GgufWriter::default();
    w.meta("general.architecture", MetaValue::String("llama".into()))
        .meta("u8", MetaValue::U8(7))
        .meta("i8", MetaValue::I8(-7))
        .meta("u16", MetaValue::U16(700))
        .meta("i16", MetaValue::I16(-700))
        .meta("u32", MetaValue::U32(70000))
        .meta("i32", MetaValue::I32(-70000))
        .meta("f32", MetaValue::F32(0.5))
        .meta("bool", MetaValue::Bool(true))
        .meta("u64", MetaValue::U64(1 << 40))
        .meta("i64", MetaValue::I64(-(1 << 40)))
        .meta("f64", MetaValue::F64(0.25))
        .meta(
            "arr",
            MetaValue::Array(MetaArray {
                elem_type: type_id::STRING,
                values: vec![MetaValue::String("a".into()), MetaValue::String("é".into())],
            }),
        );
    let f32s: Vec<u8> = (0..8).flat_map(|i| (i as f32).to_le_bytes()).collect();
    w.tensor("t.f32", &[4, 2], WeightFormat::F32, f32s);
    w.tensor("t.q8", &[32], WeightFormat::Q8_0, vec![1u8; 34]);
    w.to_bytes()
}

fn parse(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
    GgufFile::parse(Arc::new(Storage::Owned(bytes)))
}

#[test]
fn round_trips_every_value_type() {
    let f = parse(small_file()).unwrap();
    assert_eq!(f.version, 3);
    assert_eq!(f.get("u8"), Some(&MetaValue::U8(7)));
    assert_eq!(f.get("i8"), Some(&MetaValue::I8(-7)));
    assert_eq!(f.get("u16"), Some(&MetaValue::U16(700)));
    assert_eq!(f.get("i16"), Some(&MetaValue::I16(-700)));
    assert_eq!(f.get("i32"), Some(&MetaValue::I32(-70000)));
    assert_eq!(f.get_u64("u32"), Some(70000));
    assert_eq!(f.get_f64("f32"), Some(0.5));
    assert_eq!(f.get_bool("bool"), Some(true));
    assert_eq!(f.get_u64("u64"), Some(1 << 40));
    assert_eq!(f.get("i64").and_then(MetaValue::as_i64), Some(-(1 << 40)));
    assert_eq!(f.get_f64("f64"), Some(0.25));
    assert_eq!(f.get_strings("arr"), Some(vec!["a", "é"]));
    let t = f.tensor("t.f32").unwrap();
    assert_eq!(t.dims, vec![4, 2]);
    assert_eq!(t.offset % 32, 0);
    let data = f.tensor_bytes(t);
    assert_eq!(f32::from_le_bytes(data[28..32].try_into().unwrap()), 7.0);
    assert_eq!(f.tensor("t.q8").unwrap().n_bytes, 34);
}

#[test]
fn every_truncation_is_an_error_naming_an_offset() {
    let full = small_file();
    // The last tensor ends exactly at the end of the file, so every shorter prefix is invalid.
    for len in 0..full.len() {
        let err = parse(full[..len].to_vec()).err().unwrap_or_else(|| panic!("prefix of {len} bytes parsed"));
        let msg = err.to_string();
        assert!(msg.contains("byte"), "{msg}");
    }
}

#[test]
fn corrupt_fields_are_named() {
    let full = small_file();
    let mut bad_magic = full.clone();
    bad_magic[0] = b'X';
    assert!(parse(bad_magic).err().unwrap().to_string().contains("not a GGUF file"));

    let mut bad_version = full.clone();
    bad_version[4] = 9;
    assert!(parse(bad_version).err().unwrap().to_string().contains("version 9"));

    // A tensor count far beyond the file size must not allocate, just fail.
    let mut huge = full.clone();
    huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    let msg = parse(huge).err().unwrap().to_string();
    assert!(msg.contains("tensor count") && msg.contains("byte 8"), "{msg}");

    // Flip every byte in turn: never a panic.
    for i in 0..full.len() {
        let mut b = full.clone();
        b[i] ^= 0xA5;
        let _ = parse(b);
    }
}

#[test]
fn reads_the_default_model() {
    let path = peregrine_model::testing::default_model_path();
    let f = GgufFile::open(&path).expect("default model: run scripts/fetch_default_model.sh");
    assert_eq!(f.architecture(), Some("llama"));
    assert_eq!(f.get_u64("llama.block_count"), Some(30));
    assert_eq!(f.get_u64("llama.embedding_length"), Some(576));
    assert_eq!(f.tensors.len(), 272);
    assert_eq!(f.get_strings("tokenizer.ggml.tokens").unwrap().len(), 49152);
    let emb = f.tensor("token_embd.weight").unwrap();
    assert_eq!(emb.format, WeightFormat::Q8_0);
    assert_eq!(emb.dims, vec![576, 49152]);
    assert_eq!(f.tensor("blk.0.attn_q.weight").unwrap().format, WeightFormat::Q4_1);
    assert!(f.get_str("tokenizer.chat_template").unwrap().contains("<|im_start|>"));
}

/// Files written by the `gguf` Python package (the fuzzer's seeds) parse, with
/// every value and the tokenizer readable.
#[test]
fn reads_files_written_by_gguf_py() {
    let seeds = peregrine_model::testing::workspace_root().join("fuzz/seeds");
    let f = GgufFile::open(&seeds.join("llama_gpt2.seed")).unwrap();
    assert_eq!(f.get("t.i8"), Some(&MetaValue::I8(-1)));
    assert_eq!(f.get("t.i64").and_then(MetaValue::as_i64), Some(-3));
    assert_eq!(f.get_bool("t.b"), Some(true));
    assert_eq!(f.tensor("blk.0.attn_q.weight").unwrap().format, WeightFormat::Q8_0);
    assert_eq!(f.tensor("blk.0.attn_q.weight").unwrap().dims, vec![64, 4]);
    assert_eq!(f.tensor("blk.0.attn_k.weight").unwrap().format, WeightFormat::F16);
    let tok = peregrine_model::tokenizer::Tokenizer::from_gguf(&f).unwrap();
    assert_eq!(tok.encode("ab a", false).unwrap(), vec![3, 5]);
    let spm = GgufFile::open(&seeds.join("spm.seed")).unwrap();
    assert_eq!(spm.get_strings("tokenizer.ggml.tokens").unwrap().len(), 7);
}

/// Every fuzz seed, including inputs that once crashed, loads or fails cleanly.
#[test]
fn fuzz_seeds_and_regressions_never_panic() {
    let seeds = peregrine_model::testing::workspace_root().join("fuzz/seeds");
    let mut n = 0;
    for entry in std::fs::read_dir(&seeds).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        if let Ok(f) = parse(bytes) {
            let _ = peregrine_model::config::ModelConfig::from_gguf(&f);
            let _ = peregrine_model::tokenizer::Tokenizer::from_gguf(&f);
        }
        n += 1;
    }
    assert!(n >= 3, "expected the seed corpus in {}", seeds.display());
}
