//! Dequantization of one stored row to f32: the checked entry point, the float
//! formats and ggml's legacy 32-value blocks (Q4_0 … Q8_1).
//!
//! Every routine computes the same float operations in the same order as
//! ggml's `dequantize_row_*` (ggml-quants.c), so the output is bit-identical
//! to the reference (gguf-py's numpy port, which the tests use). In every
//! format the scale products are exact in f32 (an f16 scale has 11 significant
//! bits, the integer factors at most 13 more), so only the final `+ m` / `- m`
//! rounds, and a ggml build that contracts `d * q + m` into an FMA gives the
//! same bits too. (Q8_1 and Q8_K, whose `d` is a full f32, have one rounding,
//! the product.)
//!
//! The k-quants live in `dequant_k.rs`.

use half::{bf16, f16};

use super::dequant_k;
use super::{QuantError, WeightFormat};

/// Dequantizes one row: `src` holds `dst.len()` values stored in `format`.
///
/// `dst.len()` must be a whole number of blocks and `src.len()` exactly
/// `format.bytes_for(dst.len())`; otherwise an error is returned and `dst` is
/// left untouched. Bit-exact with ggml's `dequantize_row_*` (for F16/BF16 NaN
/// inputs the NaN payload may differ; every NaN stays a NaN).
pub fn dequantize_row(format: WeightFormat, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    check_lengths(format, src.len(), dst.len())?;
    dequantize_unchecked_len(format, src, dst);
    Ok(())
}

/// The length rules of [`dequantize_row`], shared with tests.
pub(crate) fn check_lengths(format: WeightFormat, src_len: usize, n: usize) -> Result<(), QuantError> {
    let block_size = format.block_size();
    // `is_multiple_of` needs Rust 1.87; the workspace's MSRV is 1.85.
    #[allow(clippy::manual_is_multiple_of)]
    if n % block_size != 0 {
        return Err(QuantError::PartialBlock { format, n, block_size });
    }
    let expected = format
        .bytes_for(n as u64)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or(QuantError::TooLarge { format, n })?;
    if src_len != expected {
        return Err(QuantError::SourceLength { format, n, expected, got: src_len });
    }
    Ok(())
}

/// Dequantizes the whole blocks that both `src` and `dst` hold. Never reads or
/// writes out of bounds, whatever the lengths.
pub(crate) fn dequantize_unchecked_len(format: WeightFormat, src: &[u8], dst: &mut [f32]) {
    use WeightFormat as W;
    match format {
        W::F32 => {
            for (b, y) in src.chunks_exact(4).zip(dst.iter_mut()) {
                *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        W::F16 => {
            for (b, y) in src.chunks_exact(2).zip(dst.iter_mut()) {
                *y = f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
            }
        }
        W::BF16 => {
            for (b, y) in src.chunks_exact(2).zip(dst.iter_mut()) {
                *y = bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32();
            }
        }
        W::Q4_0 => for_blocks(src, dst, block_q4_0),
        W::Q4_1 => for_blocks(src, dst, block_q4_1),
        W::Q5_0 => for_blocks(src, dst, block_q5_0),
        W::Q5_1 => for_blocks(src, dst, block_q5_1),
        W::Q8_0 => for_blocks(src, dst, block_q8_0),
        W::Q8_1 => for_blocks(src, dst, block_q8_1),
        W::Q2K => for_blocks(src, dst, dequant_k::block_q2_k),
        W::Q3K => for_blocks(src, dst, dequant_k::block_q3_k),
        W::Q4K => for_blocks(src, dst, dequant_k::block_q4_k),
        W::Q5K => for_blocks(src, dst, dequant_k::block_q5_k),
        W::Q6K => for_blocks(src, dst, dequant_k::block_q6_k),
        W::Q8K => for_blocks(src, dst, dequant_k::block_q8_k),
    }
}

/// Applies a block routine to each (stored block, output block) pair. The
/// fixed-size array types let the compiler drop the bounds checks inside.
#[inline(always)]
pub(crate) fn for_blocks<const TS: usize, const BS: usize>(
    src: &[u8],
    dst: &mut [f32],
    f: impl Fn(&[u8; TS], &mut [f32; BS]),
) {
    for (b, y) in src.chunks_exact(TS).zip(dst.chunks_exact_mut(BS)) {
        // Both conversions always succeed: chunks_exact gives exactly TS / BS items.
        if let (Ok(b), Ok(y)) = (b.try_into(), y.try_into()) {
            f(b, y);
        }
    }
}

/// The little-endian f16 at `b[off..off + 2]`, widened (exactly) to f32.
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], off: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([b[off], b[off + 1]])).to_f32()
}

/// The little-endian f32 at `b[off..off + 4]`.
#[inline(always)]
pub(crate) fn f32_at(b: &[u8], off: usize) -> f32 {
    f32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

// Legacy blocks: 32 values each. In the 4-bit formats byte j of `qs` holds
// value j in its low nibble and value j + 16 in its high nibble; the 5-bit
// formats add bit j of the little-endian u32 `qh` as bit 4 of value j.

pub(crate) const Q4_0_BYTES: usize = 18;
pub(crate) const Q4_1_BYTES: usize = 20;
pub(crate) const Q5_0_BYTES: usize = 22;
pub(crate) const Q5_1_BYTES: usize = 24;
pub(crate) const Q8_0_BYTES: usize = 34;
/// block_q8_1 as `WeightFormat::Q8_1.type_size()` sizes it: `{ f32 d; f32 s; i8 qs[32] }`
/// (ggml's layout before 2024, still what gguf-py lists). Current ggml stores
/// `d` and `s` as f16 (36 bytes); Q8_1 is only ever an activation format there
/// and ggml has no `dequantize_row_q8_1`, so no model file holds it.
pub(crate) const Q8_1_BYTES: usize = 40;

/// `{ f16 d; u8 qs[16] }`: value = (q - 8) * d.
#[inline(always)]
pub(crate) fn block_q4_0(b: &[u8; Q4_0_BYTES], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        let x0 = (qs[j] & 0x0F) as i32 - 8;
        let x1 = (qs[j] >> 4) as i32 - 8;
        y[j] = x0 as f32 * d;
        y[j + 16] = x1 as f32 * d;
    }
}

/// `{ f16 d; f16 m; u8 qs[16] }`: value = q * d + m.
#[inline(always)]
pub(crate) fn block_q4_1(b: &[u8; Q4_1_BYTES], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qs = &b[4..20];
    for j in 0..16 {
        y[j] = (qs[j] & 0x0F) as f32 * d + m;
        y[j + 16] = (qs[j] >> 4) as f32 * d + m;
    }
}

/// `{ f16 d; u32 qh; u8 qs[16] }`: value = (q5 - 16) * d.
#[inline(always)]
pub(crate) fn block_q5_0(b: &[u8; Q5_0_BYTES], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..22];
    for j in 0..16 {
        let h0 = (((qh >> j) << 4) & 0x10) as i32;
        let h1 = ((qh >> (j + 12)) & 0x10) as i32;
        let x0 = ((qs[j] & 0x0F) as i32 | h0) - 16;
        let x1 = ((qs[j] >> 4) as i32 | h1) - 16;
        y[j] = x0 as f32 * d;
        y[j + 16] = x1 as f32 * d;
    }
}

/// `{ f16 d; f16 m; u32 qh; u8 qs[16] }`: value = q5 * d + m.
#[inline(always)]
pub(crate) fn block_q5_1(b: &[u8; Q5_1_BYTES], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    let m = f16_at(b, 2);
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let qs = &b[8..24];
    for j in 0..16 {
        let h0 = (((qh >> j) << 4) & 0x10) as u8;
        let h1 = ((qh >> (j + 12)) & 0x10) as u8;
        let x0 = (qs[j] & 0x0F) | h0;
        let x1 = (qs[j] >> 4) | h1;
        y[j] = x0 as f32 * d + m;
        y[j + 16] = x1 as f32 * d + m;
    }
}

/// `{ f16 d; i8 qs[32] }`: value = q * d.
#[inline(always)]
pub(crate) fn block_q8_0(b: &[u8; Q8_0_BYTES], y: &mut [f32; 32]) {
    let d = f16_at(b, 0);
    for (y, &q) in y.iter_mut().zip(&b[2..34]) {
        *y = q as i8 as f32 * d;
    }
}

/// `{ f32 d; f32 s; i8 qs[32] }` (s = d * Σ qs, unused here): value = q * d.
#[inline(always)]
pub(crate) fn block_q8_1(b: &[u8; Q8_1_BYTES], y: &mut [f32; 32]) {
    let d = f32_at(b, 0);
    for (y, &q) in y.iter_mut().zip(&b[8..40]) {
        *y = q as i8 as f32 * d;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::dequant_k;

    /// The block routines hard-code their sizes; format.rs is the source of truth.
    #[test]
    fn block_constants_match_format_sizes() {
        use WeightFormat as W;
        let pairs = [
            (W::Q4_0, Q4_0_BYTES),
            (W::Q4_1, Q4_1_BYTES),
            (W::Q5_0, Q5_0_BYTES),
            (W::Q5_1, Q5_1_BYTES),
            (W::Q8_0, Q8_0_BYTES),
            (W::Q8_1, Q8_1_BYTES),
            (W::Q2K, dequant_k::Q2_K_BYTES),
            (W::Q3K, dequant_k::Q3_K_BYTES),
            (W::Q4K, dequant_k::Q4_K_BYTES),
            (W::Q5K, dequant_k::Q5_K_BYTES),
            (W::Q6K, dequant_k::Q6_K_BYTES),
            (W::Q8K, dequant_k::Q8_K_BYTES),
        ];
        for (f, bytes) in pairs {
            assert_eq!(f.type_size(), bytes, "{f}");
        }
    }

    #[test]
    fn q4_0_nibble_order() {
        // d = 1.0; byte j = (j+16 value) << 4 | (j value).
        let mut b = [0u8; Q4_0_BYTES];
        b[..2].copy_from_slice(&f16::from_f32(1.0).to_bits().to_le_bytes());
        for j in 0..16 {
            b[2 + j] = (j as u8) | (((15 - j) as u8) << 4);
        }
        let mut y = [0f32; 32];
        block_q4_0(&b, &mut y);
        for j in 0..16 {
            assert_eq!(y[j], j as f32 - 8.0);
            assert_eq!(y[j + 16], (15 - j) as f32 - 8.0);
        }
    }
}
