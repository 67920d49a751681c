//! A minimal GGUF writer: used by tests, the fuzzer's seed corpus and tools that
//! emit small models. Writes v3 with the given alignment.

use super::{type_id, MetaValue};
use peregrine_compute::quant::WeightFormat;

pub struct GgufWriter {
    alignment: u64,
    metadata: Vec<(String, MetaValue)>,
    tensors: Vec<(String, Vec<u64>, WeightFormat, Vec<u8>)>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        Self { alignment: 32, metadata: Vec::new(), tensors: Vec::new() }
    }
}

impl GgufWriter {
    pub fn meta(&mut self, key: &str, value: MetaValue) -> &mut Self {
        if key == "general.alignment" {
            if let MetaValue::U32(a) = value {
                self.alignment = a as u64;
            }
        }
        self.metadata.push((key.to_string(), value));
        self
    }

    /// Adds a tensor; `dims` in ggml order (row length first), `data` already encoded.
    pub fn tensor(&mut self, name: &str, dims: &[u64], format: WeightFormat, data: Vec<u8>) -> &mut Self {
        self.tensors.push((name.to_string(), dims.to_vec(), format, data));
        self
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_str(&mut out, k);
            out.extend_from_slice(&value_type(v).to_le_bytes());
            put_value(&mut out, v);
        }
        let mut rel = 0u64;
        let mut offsets = Vec::new();
        for (name, dims, format, data) in &self.tensors {
            put_str(&mut out, name);
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&format.ggml_id().to_le_bytes());
            out.extend_from_slice(&rel.to_le_bytes());
            offsets.push(rel);
            rel = (rel + data.len() as u64).div_ceil(self.alignment) * self.alignment;
        }
        let pad = |out: &mut Vec<u8>, a: u64| {
            while !(out.len() as u64).is_multiple_of(a) {
                out.push(0);
            }
        };
        pad(&mut out, self.alignment);
        let start = out.len() as u64;
        for ((_, _, _, data), off) in self.tensors.iter().zip(offsets) {
            out.resize((start + off) as usize, 0);
            out.extend_from_slice(data);
        }
        out
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn value_type(v: &MetaValue) -> u32 {
    match v {
        MetaValue::U8(_) => type_id::U8,
        MetaValue::I8(_) => type_id::I8,
        MetaValue::U16(_) => type_id::U16,
        MetaValue::I16(_) => type_id::I16,
        MetaValue::U32(_) => type_id::U32,
        MetaValue::I32(_) => type_id::I32,
        MetaValue::F32(_) => type_id::F32,
        MetaValue::Bool(_) => type_id::BOOL,
        MetaValue::String(_) => type_id::STRING,
        MetaValue::Array(_) => type_id::ARRAY,
        MetaValue::U64(_) => type_id::U64,
        MetaValue::I64(_) => type_id::I64,
        MetaValue::F64(_) => type_id::F64,
    }
}

fn put_value(out: &mut Vec<u8>, v: &MetaValue) {
    match v {
        MetaValue::U8(x) => out.push(*x),
        MetaValue::I8(x) => out.push(*x as u8),
        MetaValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Bool(x) => out.push(*x as u8),
        MetaValue::String(s) => put_str(out, s),
        MetaValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        MetaValue::Array(a) => {
            out.extend_from_slice(&a.elem_type.to_le_bytes());
            out.extend_from_slice(&(a.values.len() as u64).to_le_bytes());
            for x in &a.values {
                put_value(out, x);
            }
        }
    }
}
