//! Dequantization of ggml's k-quant super-blocks (256 values each).
//!
//! Transcriptions of `dequantize_row_q{2..8}_K` from ggml-quants.c, keeping its
//! operation order (`d * sc` first, then `* q`, then `- m`, unfused) so results
//! are bit-identical. Layouts are ggml-common.h's `block_q*_K` (QK_K = 256).

use super::dequant::{f16_at, f32_at};
use super::QK_K;

pub(crate) const Q2_K_BYTES: usize = QK_K / 16 + QK_K / 4 + 2 + 2;
pub(crate) const Q3_K_BYTES: usize = QK_K / 8 + QK_K / 4 + 12 + 2;
pub(crate) const Q4_K_BYTES: usize = 2 + 2 + 12 + QK_K / 2;
pub(crate) const Q5_K_BYTES: usize = 2 + 2 + 12 + QK_K / 8 + QK_K / 2;
pub(crate) const Q6_K_BYTES: usize = QK_K / 2 + QK_K / 4 + QK_K / 16 + 2;
pub(crate) const Q8_K_BYTES: usize = 4 + QK_K + QK_K / 16 * 2;

/// `{ u8 scales[16]; u8 qs[64]; f16 d; f16 dmin }`, 16 sub-blocks of 16.
/// Each scale byte is (min << 4 | scale); value = d*scale * q2 - dmin*min.
/// `qs` holds 2-bit quants: byte l of each 32-byte half carries values
/// l, l+32, l+64, l+96 of that half's 128 in bits 0-1, 2-3, 4-5, 6-7.
#[inline(always)]
pub(crate) fn block_q2_k(b: &[u8; Q2_K_BYTES], y: &mut [f32; QK_K]) {
    let d = f16_at(b, 80);
    let min = f16_at(b, 82);
    // Sub-block s = 8 * half + 2 * k + part covers values 16 * s .. 16 * s + 16.
    for half in 0..2 {
        let q = &b[16 + 32 * half..16 + 32 * half + 32];
        for k in 0..4 {
            let shift = 2 * k as u32;
            for part in 0..2 {
                let s = 8 * half + 2 * k + part;
                let sc = b[s];
                let dl = d * (sc & 0x0F) as f32;
                let ml = min * (sc >> 4) as f32;
                let y = &mut y[16 * s..16 * s + 16];
                for (y, &ql) in y.iter_mut().zip(&q[16 * part..16 * part + 16]) {
                    *y = dl * ((ql >> shift) & 3) as f32 - ml;
                }
            }
        }
    }
}

/// Unpacks Q3_K's sixteen 6-bit scales from 12 bytes (bytes 0-7: low nibbles
/// of scales 0-15; bytes 8-11: their top 2 bits), as ggml does with u32 masks.
/// Returns them still biased by 32.
#[inline(always)]
pub(crate) fn q3_k_scales(s: &[u8]) -> [i8; 16] {
    let w = |i: usize| u32::from_le_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
    const KMASK1: u32 = 0x0303_0303;
    const KMASK2: u32 = 0x0f0f_0f0f;
    let (a0, a1, tmp) = (w(0), w(1), w(2));
    let aux = [
        (a0 & KMASK2) | ((tmp & KMASK1) << 4),
        (a1 & KMASK2) | (((tmp >> 2) & KMASK1) << 4),
        ((a0 >> 4) & KMASK2) | (((tmp >> 4) & KMASK1) << 4),
        ((a1 >> 4) & KMASK2) | (((tmp >> 6) & KMASK1) << 4),
    ];
    let mut out = [0i8; 16];
    for (i, a) in aux.iter().enumerate() {
        for (k, byte) in a.to_le_bytes().iter().enumerate() {
            out[4 * i + k] = *byte as i8;
        }
    }
    out
}

/// `{ u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d }`, 16 sub-blocks of 16.
/// value = d*(scale - 32) * (q2 - (hbit ? 0 : 4)); q2 packed as in Q2_K, the
/// high bit of value l + 32k (within each 128) is bit k of hmask[l] for the
/// first 128, bit 4+k for the second.
#[inline(always)]
pub(crate) fn block_q3_k(b: &[u8; Q3_K_BYTES], y: &mut [f32; QK_K]) {
    let d_all = f16_at(b, 108);
    let hm = &b[0..32];
    let scales = q3_k_scales(&b[96..108]);
    // Sub-block s = 8 * half + 2 * k + part covers values 16 * s .. 16 * s + 16;
    // its high bits are bit 4 * half + k of hmask.
    for half in 0..2 {
        let q = &b[32 + 32 * half..32 + 32 * half + 32];
        for k in 0..4 {
            let shift = 2 * k as u32;
            let m = 1u8 << (4 * half + k);
            for part in 0..2 {
                let s = 8 * half + 2 * k + part;
                let dl = d_all * (scales[s] as i32 - 32) as f32;
                let y = &mut y[16 * s..16 * s + 16];
                let q = &q[16 * part..16 * part + 16];
                let hm = &hm[16 * part..16 * part + 16];
                for l in 0..16 {
                    let v = ((q[l] >> shift) & 3) as i32 - if hm[l] & m != 0 { 0 } else { 4 };
                    y[l] = dl * v as f32;
                }
            }
        }
    }
}

/// ggml's `get_scale_min_k4`: the j-th 6-bit (scale, min) pair of Q4_K/Q5_K's
/// 12 packed bytes. Bytes 0-3 / 4-7 hold scales / mins 0-3 in their low 6
/// bits and the top 2 bits of 4-7 in their high bits; bytes 8-11 hold the low
/// nibbles of scales 4-7 (low half) and mins 4-7 (high half).
#[inline(always)]
pub(crate) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// `{ f16 d; f16 dmin; u8 scales[12]; u8 qs[128] }`, 8 sub-blocks of 32.
/// Each 32-byte chunk of `qs` holds two sub-blocks: low nibbles first, then high.
/// value = d*sc * q4 - dmin*m.
#[inline(always)]
pub(crate) fn block_q4_k(b: &[u8; Q4_K_BYTES], y: &mut [f32; QK_K]) {
    let d = f16_at(b, 0);
    let min = f16_at(b, 2);
    let scales = &b[4..16];
    for j in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * j, scales);
        let (sc2, m2) = scale_min_k4(2 * j + 1, scales);
        let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
        let q = &b[16 + 32 * j..16 + 32 * j + 32];
        for l in 0..32 {
            y[64 * j + l] = d1 * (q[l] & 0x0F) as f32 - m1;
            y[64 * j + 32 + l] = d2 * (q[l] >> 4) as f32 - m2;
        }
    }
}

/// `{ f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128] }`: Q4_K plus a
/// fifth bit; bit 2j of qh[l] tops value 64j + l, bit 2j+1 value 64j + 32 + l.
#[inline(always)]
pub(crate) fn block_q5_k(b: &[u8; Q5_K_BYTES], y: &mut [f32; QK_K]) {
    let d = f16_at(b, 0);
    let min = f16_at(b, 2);
    let scales = &b[4..16];
    let qh = &b[16..48];
    for j in 0..4 {
        let (sc1, m1) = scale_min_k4(2 * j, scales);
        let (sc2, m2) = scale_min_k4(2 * j + 1, scales);
        let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
        let (u1, u2) = (1u8 << (2 * j), 2u8 << (2 * j));
        let ql = &b[48 + 32 * j..48 + 32 * j + 32];
        for l in 0..32 {
            let h1 = if qh[l] & u1 != 0 { 16 } else { 0 };
            let h2 = if qh[l] & u2 != 0 { 16 } else { 0 };
            y[64 * j + l] = d1 * ((ql[l] & 0x0F) + h1) as f32 - m1;
            y[64 * j + 32 + l] = d2 * ((ql[l] >> 4) + h2) as f32 - m2;
        }
    }
}

/// `{ u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d }`, 16 sub-blocks of 16.
/// Per half of 128 values (ql 64 bytes, qh 32, scales 8): value l + 32k takes
/// its low nibble from ql[l] (k = 0, 2: low/high nibble) or ql[l + 32] (k = 1,
/// 3) and bits 2k..2k+1 of qh[l] as bits 4-5; value = d*sc * (q6 - 32).
#[inline(always)]
pub(crate) fn block_q6_k(b: &[u8; Q6_K_BYTES], y: &mut [f32; QK_K]) {
    let d = f16_at(b, 208);
    for half in 0..2 {
        let ql = &b[64 * half..64 * half + 64];
        let qh = &b[128 + 32 * half..128 + 32 * half + 32];
        let sc = &b[192 + 8 * half..192 + 8 * half + 8];
        let y = &mut y[128 * half..128 * half + 128];
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32;
            let q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
            y[l] = d * (sc[is] as i8) as f32 * q1 as f32;
            y[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
            y[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
            y[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
        }
    }
}

/// `{ f32 d; i8 qs[256]; i16 bsums[16] }` (bsums unused): value = d * q.
#[inline(always)]
pub(crate) fn block_q8_k(b: &[u8; Q8_K_BYTES], y: &mut [f32; QK_K]) {
    let d = f32_at(b, 0);
    for (y, &q) in y.iter_mut().zip(&b[4..4 + QK_K]) {
        *y = d * q as i8 as f32;
    }
}
