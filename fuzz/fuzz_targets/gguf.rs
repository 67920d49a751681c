//! Any bytes given to the GGUF reader: an error or a file whose every tensor can
//! be read and dequantized, never a panic or an out-of-bounds read.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use peregrine_compute::quant::dequantize_row;
use peregrine_model::gguf::GgufFile;
use peregrine_model::storage::Storage;

fuzz_target!(|data: &[u8]| {
    let Ok(f) = GgufFile::parse(Arc::new(Storage::Owned(data.to_vec()))) else { return };
    for t in &f.tensors {
        let bytes = f.tensor_bytes(t);
        let row = t.dims[0] as usize;
        if row == 0 || row > 1 << 16 {
            continue;
        }
        let row_bytes = t.format.bytes_for(row as u64).unwrap() as usize;
        let mut out = vec![0f32; row];
        if bytes.len() >= row_bytes {
            dequantize_row(t.format, &bytes[..row_bytes], &mut out).unwrap();
        }
    }
    let _ = peregrine_model::config::ModelConfig::from_gguf(&f);
    let _ = peregrine_model::tokenizer::Tokenizer::from_gguf(&f);
});
