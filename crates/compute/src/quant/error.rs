//! Errors of the checked quant routines.

use super::WeightFormat;

/// Why a row could not be dequantized. Lengths are the caller's; nothing was written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantError {
    /// The output length is not a whole number of blocks of the format.
    #[error("{format}: {n} values is not a whole number of {block_size}-value blocks")]
    PartialBlock { format: WeightFormat, n: usize, block_size: usize },
    /// The stored bytes do not hold exactly the blocks the output needs.
    #[error("{format}: {n} values are stored in {expected} bytes, got {got}")]
    SourceLength { format: WeightFormat, n: usize, expected: usize, got: usize },
    /// The byte size of `n` values does not fit in `usize`.
    #[error("{format}: the byte size of {n} values overflows")]
    TooLarge { format: WeightFormat, n: usize },
}
