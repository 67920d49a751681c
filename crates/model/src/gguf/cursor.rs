//! A bounds-checked little-endian reader over the bytes of a GGUF file.
//! Every failure names the byte offset where it happened.

use super::GgufError;

pub(super) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    pub fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                offset: self.pos as u64,
                what: what.to_string(),
                needed: n as u64,
                available: self.remaining() as u64,
            });
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub fn u8(&mut self, what: &str) -> Result<u8, GgufError> {
        Ok(self.array::<1>(what)?[0])
    }
    pub fn u16(&mut self, what: &str) -> Result<u16, GgufError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    pub fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    pub fn f32(&mut self, what: &str) -> Result<f32, GgufError> {
        Ok(f32::from_le_bytes(self.array(what)?))
    }
    pub fn f64(&mut self, what: &str) -> Result<f64, GgufError> {
        Ok(f64::from_le_bytes(self.array(what)?))
    }

    /// A count that announces `min_elem_bytes`-sized elements: rejected when the
    /// rest of the file could not hold them, so a corrupt count cannot make us
    /// allocate gigabytes.
    pub fn count(&mut self, what: &str, min_elem_bytes: usize) -> Result<usize, GgufError> {
        let at = self.pos as u64;
        let n = self.u64(what)?;
        let fits = n.checked_mul(min_elem_bytes.max(1) as u64).is_some_and(|b| b <= self.remaining() as u64);
        if !fits {
            return Err(GgufError::Invalid {
                offset: at,
                what: format!("{what} is {n}, more than the {} bytes left can hold", self.remaining()),
            });
        }
        Ok(n as usize)
    }

    /// A GGUF string: u64 length then UTF-8 bytes.
    pub fn string(&mut self, what: &str) -> Result<String, GgufError> {
        let len = self.count(what, 1)?;
        let at = self.pos as u64;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|e| GgufError::Invalid {
            offset: at + e.utf8_error().valid_up_to() as u64,
            what: format!("{what} is not valid UTF-8"),
        })
    }
}
