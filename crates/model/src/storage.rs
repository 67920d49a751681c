//! Bytes that weights are read from: a read-only memory map of a model file,
//! or an owned buffer (random weights, tests, fuzzing).

use std::fs::File;
use std::path::Path;

pub enum Storage {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    pub fn mmap(path: &Path) -> std::io::Result<Self> {
        let file = File::open(path)?;
        // SAFETY: the map is read-only; a model file changed by another process
        // while we serve it is outside what we can defend against (as for llama.cpp).
        let map = unsafe { memmap2::Mmap::map(&file)? };
        Ok(Self::Mmap(map))
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            Self::Mmap(m) => m,
            Self::Owned(v) => v,
        }
    }
}
