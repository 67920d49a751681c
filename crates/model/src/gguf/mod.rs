//! GGUF v2/v3 reader: header, metadata, tensor index, aligned tensor data.
//!
//! Layout (all little-endian):
//! ```text
//! magic "GGUF" | version u32 | tensor_count u64 | kv_count u64
//! kv_count × { key: string, type: u32, value }
//! tensor_count × { name: string, n_dims: u32, dims: n_dims × u64, ggml_type: u32, offset: u64 }
//! padding to `general.alignment` (default 32)
//! tensor data; each tensor at data_start + offset (offset aligned)
//! ```
//! Parsing works on a byte slice so the fuzzer drives the same code as `open`.

mod cursor;
mod value;
pub mod writer;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use cursor::Cursor;
use peregrine_compute::quant::WeightFormat;
pub use value::{type_id, MetaArray, MetaValue};

use crate::storage::Storage;

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// Nesting of arrays within arrays; the spec allows it, real files use one level.
const MAX_ARRAY_DEPTH: usize = 4;
const MAX_DIMS: u32 = 4;

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("GGUF: truncated at byte {offset}: {what} needs {needed} bytes, {available} left")]
    Truncated { offset: u64, what: String, needed: u64, available: u64 },
    #[error("GGUF: invalid data at byte {offset}: {what}")]
    Invalid { offset: u64, what: String },
    #[error("GGUF: cannot read {path}: {source}")]
    Io { path: String, source: std::io::Error },
}

/// One entry of the tensor index.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the contiguous (row) dimension.
    pub dims: Vec<u64>,
    pub format: WeightFormat,
    /// Absolute byte offset of the data in the file.
    pub offset: u64,
    pub n_bytes: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// A parsed GGUF file; tensor bytes stay in the (usually mmapped) storage.
pub struct GgufFile {
    pub version: u32,
    pub alignment: u64,
    /// Metadata in file order.
    pub metadata: Vec<(String, MetaValue)>,
    pub tensors: Vec<TensorInfo>,
    pub data_offset: u64,
    storage: Arc<Storage>,
    meta_index: HashMap<String, usize>,
    tensor_index: HashMap<String, usize>,
}

impl GgufFile {
    /// Memory-maps and parses `path`.
    pub fn open(path: &Path) -> Result<Self, GgufError> {
        let storage = Storage::mmap(path)
            .map_err(|source| GgufError::Io { path: path.display().to_string(), source })?;
        Self::parse(Arc::new(storage))
    }

    /// Parses a whole file held in `storage`.
    pub fn parse(storage: Arc<Storage>) -> Result<Self, GgufError> {
        let bytes = storage.bytes();
        let mut c = Cursor::new(bytes);
        let magic = c.take(4, "magic")?;
        if magic != MAGIC {
            return Err(GgufError::Invalid {
                offset: 0,
                what: format!("magic is {magic:02x?}, expected \"GGUF\" (not a GGUF file)"),
            });
        }
        let version = c.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::Invalid {
                offset: 4,
                what: format!("version {version} is not supported (2 or 3)"),
            });
        }
        // Each tensor entry takes at least 8+4+8+4+8 bytes, each kv at least 8+4+1.
        let tensor_count = c.count("tensor count", 32)?;
        let kv_count = c.count("metadata count", 13)?;

        let mut metadata = Vec::with_capacity(kv_count);
        let mut meta_index = HashMap::with_capacity(kv_count);
        for i in 0..kv_count {
            let at = c.pos() as u64;
            let key = c.string(&format!("metadata key #{i}"))?;
            let ty = c.u32(&format!("type of metadata {key:?}"))?;
            let value = read_value(&mut c, ty, &key, 0)?;
            if meta_index.insert(key.clone(), metadata.len()).is_some() {
                return Err(GgufError::Invalid {
                    offset: at,
                    what: format!("metadata key {key:?} appears twice"),
                });
            }
            metadata.push((key, value));
        }

        let alignment = match meta_index.get("general.alignment").map(|&i| &metadata[i].1) {
            None => DEFAULT_ALIGNMENT,
            Some(MetaValue::U32(a)) if *a > 0 && a.is_power_of_two() => *a as u64,
            Some(v) => {
                return Err(GgufError::Invalid {
                    offset: 0,
                    what: format!(
                        "general.alignment must be a power-of-two u32, found {v} ({})",
                        v.type_name()
                    ),
                })
            }
        };

        let mut raw = Vec::with_capacity(tensor_count);
        for i in 0..tensor_count {
            let entry_at = c.pos() as u64;
            let name = c.string(&format!("name of tensor #{i}"))?;
            let n_dims = c.u32(&format!("dimension count of tensor {name:?}"))?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(GgufError::Invalid {
                    offset: entry_at,
                    what: format!("tensor {name:?} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)"),
                });
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for d in 0..n_dims {
                dims.push(c.u64(&format!("dimension {d} of tensor {name:?}"))?);
            }
            let type_at = c.pos() as u64;
            let ty = c.u32(&format!("type of tensor {name:?}"))?;
            let format = WeightFormat::from_ggml_id(ty).ok_or_else(|| GgufError::Invalid {
                offset: type_at,
                what: format!("tensor {name:?} has ggml type {ty}, which Peregrine cannot read yet"),
            })?;
            let offset = c.u64(&format!("data offset of tensor {name:?}"))?;
            raw.push((entry_at, name, dims, format, offset));
        }

        let data_offset = (c.pos() as u64).div_ceil(alignment) * alignment;
        let file_len = bytes.len() as u64;
        let mut tensors = Vec::with_capacity(tensor_count);
        let mut tensor_index = HashMap::with_capacity(tensor_count);
        for (entry_at, name, dims, format, rel) in raw {
            let bad = |what: String| GgufError::Invalid { offset: entry_at, what };
            let n_elements = dims
                .iter()
                .try_fold(1u64, |acc, &d| acc.checked_mul(d))
                .ok_or_else(|| bad(format!("tensor {name:?}: dimensions {dims:?} overflow")))?;
            if dims[0] % format.block_size() as u64 != 0 {
                return Err(bad(format!(
                    "tensor {name:?}: row length {} is not a multiple of the {format} block size {}",
                    dims[0],
                    format.block_size()
                )));
            }
            let n_bytes = format
                .bytes_for(n_elements)
                .ok_or_else(|| bad(format!("tensor {name:?}: size overflows")))?;
            if rel % alignment != 0 {
                return Err(bad(format!("tensor {name:?}: data offset {rel} is not aligned to {alignment}")));
            }
            let offset = data_offset
                .checked_add(rel)
                .filter(|o| o.checked_add(n_bytes).is_some_and(|end| end <= file_len))
                .ok_or_else(|| {
                    bad(format!(
                        "tensor {name:?}: data at {}+{rel} with {n_bytes} bytes runs past the end of the file ({file_len} bytes)",
                        data_offset
                    ))
                })?;
            if tensor_index.insert(name.clone(), tensors.len()).is_some() {
                return Err(bad(format!("tensor {name:?} appears twice")));
            }
            tensors.push(TensorInfo { name, dims, format, offset, n_bytes });
        }

        Ok(Self { version, alignment, metadata, tensors, data_offset, storage, meta_index, tensor_index })
    }

    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.meta_index.get(key).map(|&i| &self.metadata[i].1)
    }

    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(MetaValue::as_str)
    }

    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key).and_then(MetaValue::as_u64)
    }

    pub fn get_f64(&self, key: &str) -> Option<f64> {
        self.get(key).and_then(MetaValue::as_f64)
    }

    pub fn get_bool(&self, key: &str) -> Option<bool> {
        self.get(key).and_then(MetaValue::as_bool)
    }

    /// A string array (e.g. `tokenizer.ggml.tokens`).
    pub fn get_strings(&self, key: &str) -> Option<Vec<&str>> {
        self.get(key)?.as_array()?.iter().map(MetaValue::as_str).collect()
    }

    /// `general.architecture`, needed to find the other keys.
    pub fn architecture(&self) -> Option<&str> {
        self.get_str("general.architecture")
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The bytes of a tensor (bounds were checked at parse time).
    pub fn tensor_bytes(&self, t: &TensorInfo) -> &[u8] {
        &self.storage.bytes()[t.offset as usize..(t.offset + t.n_bytes) as usize]
    }

    pub fn storage(&self) -> &Arc<Storage> {
        &self.storage
    }
}

fn read_value(c: &mut Cursor<'_>, ty: u32, key: &str, depth: usize) -> Result<MetaValue, GgufError> {
    let what = |t: &str| format!("{t} value of {key:?}");
    Ok(match ty {
        type_id::U8 => MetaValue::U8(c.u8(&what("u8"))?),
        type_id::I8 => MetaValue::I8(c.u8(&what("i8"))? as i8),
        type_id::U16 => MetaValue::U16(c.u16(&what("u16"))?),
        type_id::I16 => MetaValue::I16(c.u16(&what("i16"))? as i16),
        type_id::U32 => MetaValue::U32(c.u32(&what("u32"))?),
        type_id::I32 => MetaValue::I32(c.u32(&what("i32"))? as i32),
        type_id::F32 => MetaValue::F32(c.f32(&what("f32"))?),
        type_id::U64 => MetaValue::U64(c.u64(&what("u64"))?),
        type_id::I64 => MetaValue::I64(c.u64(&what("i64"))? as i64),
        type_id::F64 => MetaValue::F64(c.f64(&what("f64"))?),
        type_id::BOOL => {
            let at = c.pos() as u64;
            match c.u8(&what("bool"))? {
                0 => MetaValue::Bool(false),
                1 => MetaValue::Bool(true),
                b => {
                    return Err(GgufError::Invalid {
                        offset: at,
                        what: format!("bool value of {key:?} is {b}, not 0 or 1"),
                    })
                }
            }
        }
        type_id::STRING => MetaValue::String(c.string(&what("string"))?),
        type_id::ARRAY => {
            let at = c.pos() as u64;
            if depth >= MAX_ARRAY_DEPTH {
                return Err(GgufError::Invalid {
                    offset: at,
                    what: format!("arrays nested deeper than {MAX_ARRAY_DEPTH} in {key:?}"),
                });
            }
            let elem_type = c.u32(&what("array element type"))?;
            let min = match elem_type {
                type_id::U8 | type_id::I8 | type_id::BOOL => 1,
                type_id::U16 | type_id::I16 => 2,
                type_id::U32 | type_id::I32 | type_id::F32 | type_id::ARRAY => 4,
                _ => 8,
            };
            let n = c.count(&format!("length of array {key:?}"), min)?;
            let mut values = Vec::with_capacity(n);
            for _ in 0..n {
                values.push(read_value(c, elem_type, key, depth + 1)?);
            }
            MetaValue::Array(MetaArray { elem_type, values })
        }
        _ => {
            return Err(GgufError::Invalid {
                offset: c.pos() as u64 - 4,
                what: format!("metadata {key:?} has unknown value type {ty}"),
            })
        }
    })
}
