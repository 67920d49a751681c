//! Weight storage formats: the ggml block formats and plain floats.
//!
//! A row of `n` values in a block format is `n / block_size` blocks of
//! `type_size` bytes each; rows are stored back to back. Ids are ggml's
//! (`enum ggml_type`), which GGUF stores in its tensor index.

use std::fmt;

/// How the values of a weight tensor are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WeightFormat {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
}

/// Super-block size of the k-quants.
pub const QK_K: usize = 256;

impl WeightFormat {
    pub const ALL: [WeightFormat; 15] = [
        Self::F32,
        Self::F16,
        Self::BF16,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q8_0,
        Self::Q8_1,
        Self::Q2K,
        Self::Q3K,
        Self::Q4K,
        Self::Q5K,
        Self::Q6K,
        Self::Q8K,
    ];

    /// The format of a ggml type id, or `None` for ids we cannot read.
    pub fn from_ggml_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            9 => Self::Q8_1,
            10 => Self::Q2K,
            11 => Self::Q3K,
            12 => Self::Q4K,
            13 => Self::Q5K,
            14 => Self::Q6K,
            15 => Self::Q8K,
            30 => Self::BF16,
            _ => return None,
        })
    }

    pub fn ggml_id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q8_1 => 9,
            Self::Q2K => 10,
            Self::Q3K => 11,
            Self::Q4K => 12,
            Self::Q5K => 13,
            Self::Q6K => 14,
            Self::Q8K => 15,
            Self::BF16 => 30,
        }
    }

    /// Values per block.
    pub fn block_size(self) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => 1,
            Self::Q4_0 | Self::Q4_1 | Self::Q5_0 | Self::Q5_1 | Self::Q8_0 | Self::Q8_1 => 32,
            Self::Q2K | Self::Q3K | Self::Q4K | Self::Q5K | Self::Q6K | Self::Q8K => QK_K,
        }
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
            Self::Q4_0 => 2 + 16,
            Self::Q4_1 => 2 + 2 + 16,
            Self::Q5_0 => 2 + 4 + 16,
            Self::Q5_1 => 2 + 2 + 4 + 16,
            Self::Q8_0 => 2 + 32,
            Self::Q8_1 => 4 + 4 + 32,
            Self::Q2K => QK_K / 16 + QK_K / 4 + 2 + 2,
            Self::Q3K => QK_K / 8 + QK_K / 4 + 12 + 2,
            Self::Q4K => 2 + 2 + 12 + QK_K / 2,
            Self::Q5K => 2 + 2 + 12 + QK_K / 8 + QK_K / 2,
            Self::Q6K => QK_K / 2 + QK_K / 4 + QK_K / 16 + 2,
            Self::Q8K => 4 + QK_K + QK_K / 16 * 2,
        }
    }

    /// Bytes taken by `n` values, or `None` when `n` is not a whole number of blocks
    /// (or the size overflows).
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        let bs = self.block_size() as u64;
        if !n.is_multiple_of(bs) {
            return None;
        }
        (n / bs).checked_mul(self.type_size() as u64)
    }

    pub fn is_quantized(self) -> bool {
        !matches!(self, Self::F32 | Self::F16 | Self::BF16)
    }

    /// The name ggml and Hugging Face use ("Q4_K", "BF16", …).
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::BF16 => "BF16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q8_1 => "Q8_1",
            Self::Q2K => "Q2_K",
            Self::Q3K => "Q3_K",
            Self::Q4K => "Q4_K",
            Self::Q5K => "Q5_K",
            Self::Q6K => "Q6_K",
            Self::Q8K => "Q8_K",
        }
    }
}

impl fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_sizes_match_ggml() {
        for f in WeightFormat::ALL {
            assert_eq!(WeightFormat::from_ggml_id(f.ggml_id()), Some(f));
        }
        // Sizes from ggml.c's type_traits.
        assert_eq!(WeightFormat::Q4_0.type_size(), 18);
        assert_eq!(WeightFormat::Q4_1.type_size(), 20);
        assert_eq!(WeightFormat::Q5_0.type_size(), 22);
        assert_eq!(WeightFormat::Q5_1.type_size(), 24);
        assert_eq!(WeightFormat::Q8_0.type_size(), 34);
        assert_eq!(WeightFormat::Q2K.type_size(), 84);
        assert_eq!(WeightFormat::Q3K.type_size(), 110);
        assert_eq!(WeightFormat::Q4K.type_size(), 144);
        assert_eq!(WeightFormat::Q5K.type_size(), 176);
        assert_eq!(WeightFormat::Q6K.type_size(), 210);
        assert_eq!(WeightFormat::Q8K.type_size(), 292);
        assert_eq!(WeightFormat::Q4_1.bytes_for(64), Some(40));
        assert_eq!(WeightFormat::Q4_1.bytes_for(33), None);
        assert_eq!(WeightFormat::from_ggml_id(4), None);
    }
}
