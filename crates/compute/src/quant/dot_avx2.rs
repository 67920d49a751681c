//! AVX2 + FMA (+ F16C) kernels for `dot_row`, x86-64 only.
//!
//! Each kernel rebuilds the weights bit-exactly as `dequantize_row` does and
//! accumulates `w * x` with FMA into four 8-lane accumulators, so it differs
//! from the scalar path only in summation order. Where a weight is `q * d + m`
//! the kernels use an FMA: `q * d` is exact in f32 (an f16 scale times a small
//! integer), so the fused and unfused forms round identically.
//!
//! The hand-written kernels cover the formats models ship in (Q4_1, Q8_0,
//! Q4_0, F32, F16, BF16, Q4_K, Q5_K, Q6_K); the rest dequantize a block into a
//! stack buffer (the scalar block code, compiled here with AVX2) and take its
//! dot product with FMA.
//!
//! Memory safety: every kernel walks `row` and `x` with `chunks_exact` (or an
//! explicit `min` of both lengths), and each load stays inside its chunk;
//! offsets are given next to the loads.

use std::arch::x86_64::*;

use super::dequant::{self, Q4_0_BYTES, Q4_1_BYTES, Q8_0_BYTES};
use super::dequant_k::{self, scale_min_k4, Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES};
use super::{WeightFormat, QK_K};

/// [`super::dot_row`] for CPUs with AVX2, FMA and F16C.
///
/// # Safety
/// The CPU must support `avx2`, `fma` and `f16c`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_row(format: WeightFormat, row: &[u8], x: &[f32]) -> f32 {
    use WeightFormat as W;
    match format {
        W::F32 => dot_float::<F32>(row, x),
        W::F16 => dot_float::<F16>(row, x),
        W::BF16 => dot_float::<BF16>(row, x),
        W::Q4_0 => dot_legacy::<Q40>(row, Q4_0_BYTES, x),
        W::Q4_1 => dot_legacy::<Q41>(row, Q4_1_BYTES, x),
        W::Q8_0 => dot_legacy::<Q80>(row, Q8_0_BYTES, x),
        W::Q4K => dot_q4_k(row, x),
        W::Q5K => dot_q5_k(row, x),
        W::Q6K => dot_q6_k(row, x),
        W::Q5_0 => via_buffer(row, x, dequant::block_q5_0),
        W::Q5_1 => via_buffer(row, x, dequant::block_q5_1),
        W::Q8_1 => via_buffer(row, x, dequant::block_q8_1),
        W::Q2K => via_buffer(row, x, dequant_k::block_q2_k),
        W::Q3K => via_buffer(row, x, dequant_k::block_q3_k),
        W::Q8K => via_buffer(row, x, dequant_k::block_q8_k),
    }
}

/// [`super::dot_row_multi`] for CPUs with AVX2, FMA and F16C: `out[t]` is the dot of
/// `row` with `xs[t·cols..]`, each exactly as `dot_row` computes it.
///
/// # Safety
/// The CPU must support `avx2`, `fma` and `f16c`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn dot_row_multi(
    format: WeightFormat,
    row: &[u8],
    xs: &[f32],
    cols: usize,
    out: &mut [f32],
) {
    use WeightFormat as W;
    let (kind, bytes) = match format {
        W::Q4_0 => (Q40, Q4_0_BYTES),
        W::Q4_1 => (Q41, Q4_1_BYTES),
        W::Q8_0 => (Q80, Q8_0_BYTES),
        _ => {
            for (o, x) in out.iter_mut().zip(xs.chunks_exact(cols)) {
                *o = dot_row(format, row, x);
            }
            return;
        }
    };
    // Up to 4 tokens share each decoded block (16 accumulators + 4 weights: a few
    // spill to L1, still far cheaper than decoding the block again).
    let mut t0 = 0;
    while t0 < out.len() {
        let n = (out.len() - t0).min(4);
        let (x, o) = (&xs[t0 * cols..], &mut out[t0..t0 + n]);
        match (kind, n) {
            (Q40, 4) => multi::<Q40, 4>(row, bytes, x, cols, o),
            (Q40, 3) => multi::<Q40, 3>(row, bytes, x, cols, o),
            (Q40, 2) => multi::<Q40, 2>(row, bytes, x, cols, o),
            (Q41, 4) => multi::<Q41, 4>(row, bytes, x, cols, o),
            (Q41, 3) => multi::<Q41, 3>(row, bytes, x, cols, o),
            (Q41, 2) => multi::<Q41, 2>(row, bytes, x, cols, o),
            (Q80, 4) => multi::<Q80, 4>(row, bytes, x, cols, o),
            (Q80, 3) => multi::<Q80, 3>(row, bytes, x, cols, o),
            (Q80, 2) => multi::<Q80, 2>(row, bytes, x, cols, o),
            _ => o[0] = dot_row(format, row, &x[..cols]),
        }
        t0 += n;
    }
}

const Q40: u8 = 0;
const Q41: u8 = 1;
const Q80: u8 = 2;

/// One legacy block's 32 weights as four vectors of 8 f32:
/// Q4_0 `{ f16 d; u8 qs[16] }`, w = (q - 8)·d (low nibbles are values 0-15; q·d and
/// -8·d are exact, so the fma is (q - 8)·d exactly);
/// Q4_1 `{ f16 d; f16 m; u8 qs[16] }`, w = q·d + m (q·d exact: one rounding);
/// Q8_0 `{ f16 d; i8 qs[32] }`, w = q·d.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn decode_block<const K: u8>(b: &[u8]) -> [__m256; 4] {
    let m4 = _mm_set1_epi8(0x0F);
    match K {
        Q40 => {
            let d = f16x8_at(b, 0);
            let off = _mm256_mul_ps(d, _mm256_set1_ps(-8.0));
            let qs = _mm_loadu_si128(b.as_ptr().add(2) as *const __m128i);
            let (q0, q1) = u8x16_to_f32(_mm_and_si128(qs, m4));
            let (q2, q3) = u8x16_to_f32(_mm_and_si128(_mm_srli_epi16(qs, 4), m4));
            let mut w = [q0, q1, q2, q3];
            for w in &mut w {
                *w = _mm256_fmadd_ps(*w, d, off);
            }
            w
        }
        Q41 => {
            let d = f16x8_at(b, 0);
            let m = f16x8_at(b, 2);
            let qs = _mm_loadu_si128(b.as_ptr().add(4) as *const __m128i);
            let (q0, q1) = u8x16_to_f32(_mm_and_si128(qs, m4));
            let (q2, q3) = u8x16_to_f32(_mm_and_si128(_mm_srli_epi16(qs, 4), m4));
            let mut w = [q0, q1, q2, q3];
            for w in &mut w {
                *w = _mm256_fmadd_ps(*w, d, m);
            }
            w
        }
        _ => {
            let d = f16x8_at(b, 0);
            let qs = _mm256_loadu_si256(b.as_ptr().add(2) as *const __m256i);
            let mut w = i8x32_to_f32(qs);
            for w in &mut w {
                *w = _mm256_mul_ps(*w, d);
            }
            w
        }
    }
}

/// N tokens (`xs`: [N, cols]) against one row of legacy blocks of kind K. Only the
/// whole blocks both the row and a token's `cols` values hold are used, so
/// mismatched lengths never read out of bounds.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn multi<const K: u8, const N: usize>(
    row: &[u8],
    bytes: usize,
    xs: &[f32],
    cols: usize,
    out: &mut [f32],
) {
    assert!(xs.len() >= N * cols, "xs holds fewer than {N} tokens of {cols} values");
    let blocks = (row.len() / bytes).min(cols / 32);
    let mut acc = [zero(); N];
    for (bi, b) in row.chunks_exact(bytes).take(blocks).enumerate() {
        let w = decode_block::<K>(b);
        for (t, a) in acc.iter_mut().enumerate() {
            fma32(a, w, xs.as_ptr().add(t * cols + bi * 32));
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        *o = hsum(a);
    }
}

type Acc = [__m256; 4];

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn zero() -> Acc {
    [_mm256_setzero_ps(); 4]
}

/// acc[k] += w[k] * x[8k..8k + 8] for k in 0..4. `xp` must have 32 floats.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn fma32(acc: &mut Acc, w: [__m256; 4], xp: *const f32) {
    for k in 0..4 {
        acc[k] = _mm256_fmadd_ps(w[k], _mm256_loadu_ps(xp.add(8 * k)), acc[k]);
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn hsum(acc: Acc) -> f32 {
    let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// The little-endian f16 at `b[off..off + 2]` as f32 (F16C; exact).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16_at(b: &[u8], off: usize) -> f32 {
    _mm256_cvtss_f32(f16x8_at(b, off))
}

/// The little-endian f16 at `b[off..off + 2]`, as f32 in all 8 lanes.
///
/// Broadcasting before converting matters: `_mm_cvtsi32_si128` compiles to a
/// `vpinsrw` that merges into whatever register LLVM picks, which can be an
/// accumulator, making each block's scale wait for the previous block's FMA
/// (a 20-cycle chain that made Q8_0 4x slower). A broadcast writes the whole
/// register.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn f16x8_at(b: &[u8], off: usize) -> __m256 {
    let bits = u16::from_le_bytes([b[off], b[off + 1]]);
    _mm256_cvtph_ps(_mm_set1_epi16(bits as i16))
}

/// 16 unsigned bytes to two vectors of 8 f32 (bytes 0-7, 8-15).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn u8x16_to_f32(v: __m128i) -> (__m256, __m256) {
    (
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)),
        _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8))),
    )
}

/// 32 unsigned bytes to four vectors of 8 f32, in order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn u8x32_to_f32(v: __m256i) -> [__m256; 4] {
    let (a, b) = u8x16_to_f32(_mm256_castsi256_si128(v));
    let (c, d) = u8x16_to_f32(_mm256_extracti128_si256(v, 1));
    [a, b, c, d]
}

/// 32 signed bytes to four vectors of 8 f32, in order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn i8x32_to_f32(v: __m256i) -> [__m256; 4] {
    let lo = _mm256_castsi256_si128(v);
    let hi = _mm256_extracti128_si256(v, 1);
    [
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)),
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))),
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)),
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))),
    ]
}

// ---- plain floats -------------------------------------------------------

const F32: u8 = 0;
const F16: u8 = 1;
const BF16: u8 = 2;

/// Loads 8 values of kind `K` from `p` (32 bytes for F32, 16 otherwise) as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load8<const K: u8>(p: *const u8) -> __m256 {
    match K {
        F32 => _mm256_loadu_ps(p as *const f32),
        F16 => _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)),
        // bf16 is the top half of an f32: widen to u32 and shift into place.
        _ => _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i)),
            16,
        )),
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_float<const K: u8>(row: &[u8], x: &[f32]) -> f32 {
    let es = if K == F32 { 4 } else { 2 };
    // Whole values both slices hold; all loads below stay under `n`.
    let n = (row.len() / es).min(x.len());
    let (rp, xp) = (row.as_ptr(), x.as_ptr());
    let mut acc = zero();
    let mut i = 0;
    while i + 32 <= n {
        let w = [
            load8::<K>(rp.add(es * i)),
            load8::<K>(rp.add(es * (i + 8))),
            load8::<K>(rp.add(es * (i + 16))),
            load8::<K>(rp.add(es * (i + 24))),
        ];
        fma32(&mut acc, w, xp.add(i));
        i += 32;
    }
    while i + 8 <= n {
        acc[0] = _mm256_fmadd_ps(load8::<K>(rp.add(es * i)), _mm256_loadu_ps(xp.add(i)), acc[0]);
        i += 8;
    }
    let mut tail = 0f32;
    if i < n {
        let mut w = [0f32; 8];
        let fmt = match K {
            F32 => WeightFormat::F32,
            F16 => WeightFormat::F16,
            _ => WeightFormat::BF16,
        };
        dequant::dequantize_unchecked_len(fmt, &row[es * i..es * n], &mut w[..n - i]);
        for (w, x) in w.iter().zip(&x[i..n]) {
            tail += w * x;
        }
    }
    hsum(acc) + tail
}

// ---- legacy blocks ------------------------------------------------------

/// Q4_0 / Q4_1 / Q8_0: the one-token case of `multi`, so a token's dot is the same
/// whether it runs alone or beside others (block layouts in `decode_block`).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_legacy<const K: u8>(row: &[u8], bytes: usize, x: &[f32]) -> f32 {
    let mut out = [0f32];
    multi::<K, 1>(row, bytes, x, x.len(), &mut out);
    out[0]
}

// ---- k-quants (layouts in dequant_k.rs) ---------------------------------

/// Q4_K: per 64 values j, 32 bytes of qs: low nibbles with (d1, m1), high with (d2, m2).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q4_k(row: &[u8], x: &[f32]) -> f32 {
    let m4 = _mm256_set1_epi8(0x0F);
    let mut acc = zero();
    for (b, x) in row.chunks_exact(Q4_K_BYTES).zip(x.chunks_exact(QK_K)) {
        let d = f16_at(b, 0);
        let min = f16_at(b, 2);
        let scales = &b[4..16];
        for j in 0..4 {
            let (sc1, mn1) = scale_min_k4(2 * j, scales);
            let (sc2, mn2) = scale_min_k4(2 * j + 1, scales);
            let q = _mm256_loadu_si256(b.as_ptr().add(16 + 32 * j) as *const __m256i); // ..144
            let lo = _mm256_and_si256(q, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            sub_block(&mut acc, lo, d * sc1 as f32, min * mn1 as f32, x.as_ptr().add(64 * j));
            sub_block(&mut acc, hi, d * sc2 as f32, min * mn2 as f32, x.as_ptr().add(64 * j + 32));
        }
    }
    hsum(acc)
}

/// 32 quants (unsigned bytes) of one Q4_K/Q5_K sub-block: w = d1 * q - m1.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn sub_block(acc: &mut Acc, q: __m256i, d1: f32, m1: f32, xp: *const f32) {
    let (d1, m1) = (_mm256_set1_ps(d1), _mm256_set1_ps(m1));
    let mut w = u8x32_to_f32(q);
    for w in &mut w {
        // q * d1 is exact: one rounding, like the unfused d1 * q - m1.
        *w = _mm256_fmsub_ps(*w, d1, m1);
    }
    fma32(acc, w, xp);
}

/// Q5_K: Q4_K's nibbles plus bit 2j (low half) / 2j+1 (high half) of qh[l] as bit 4.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q5_k(row: &[u8], x: &[f32]) -> f32 {
    let m4 = _mm256_set1_epi8(0x0F);
    let one = _mm256_set1_epi8(1);
    let mut acc = zero();
    for (b, x) in row.chunks_exact(Q5_K_BYTES).zip(x.chunks_exact(QK_K)) {
        let d = f16_at(b, 0);
        let min = f16_at(b, 2);
        let scales = &b[4..16];
        let qh = _mm256_loadu_si256(b.as_ptr().add(16) as *const __m256i); // bytes 16..48
        for j in 0..4 {
            let (sc1, mn1) = scale_min_k4(2 * j, scales);
            let (sc2, mn2) = scale_min_k4(2 * j + 1, scales);
            let q = _mm256_loadu_si256(b.as_ptr().add(48 + 32 * j) as *const __m256i); // ..176
                                                                                       // A 16-bit shift then `& 1` per byte picks bit s of every byte.
            let h1 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j as i32)), one);
            let h2 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j as i32 + 1)), one);
            let lo = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_slli_epi16(h1, 4));
            let hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), _mm256_slli_epi16(h2, 4));
            sub_block(&mut acc, lo, d * sc1 as f32, min * mn1 as f32, x.as_ptr().add(64 * j));
            sub_block(&mut acc, hi, d * sc2 as f32, min * mn2 as f32, x.as_ptr().add(64 * j + 32));
        }
    }
    hsum(acc)
}

/// Q6_K: per half h of 128 values, ql[64h..64h+64], qh[32h..32h+32], scales[8h..8h+8];
/// value 32k + l (k = 0..3, l = 0..31) = nibble of ql | 2 bits of qh << 4, minus 32,
/// times d * scales[8h + 2k + l/16].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_q6_k(row: &[u8], x: &[f32]) -> f32 {
    let m4 = _mm256_set1_epi8(0x0F);
    let m2 = _mm256_set1_epi8(3);
    let bias = _mm256_set1_epi8(32);
    let mut acc = zero();
    for (b, x) in row.chunks_exact(Q6_K_BYTES).zip(x.chunks_exact(QK_K)) {
        let d = f16_at(b, 208);
        let p = b.as_ptr();
        for h in 0..2 {
            let ql_a = _mm256_loadu_si256(p.add(64 * h) as *const __m256i); // ..128
            let ql_b = _mm256_loadu_si256(p.add(64 * h + 32) as *const __m256i); // ..128
            let qh = _mm256_loadu_si256(p.add(128 + 32 * h) as *const __m256i); // ..192
            let q = [
                _mm256_or_si256(_mm256_and_si256(ql_a, m4), q6_high(qh, 0, m2)),
                _mm256_or_si256(_mm256_and_si256(ql_b, m4), q6_high(qh, 2, m2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql_a, 4), m4), q6_high(qh, 4, m2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql_b, 4), m4), q6_high(qh, 6, m2)),
            ];
            for (k, q) in q.into_iter().enumerate() {
                let f = i8x32_to_f32(_mm256_sub_epi8(q, bias));
                let s0 = _mm256_set1_ps(d * (b[192 + 8 * h + 2 * k] as i8) as f32);
                let s1 = _mm256_set1_ps(d * (b[192 + 8 * h + 2 * k + 1] as i8) as f32);
                let w = [
                    _mm256_mul_ps(f[0], s0),
                    _mm256_mul_ps(f[1], s0),
                    _mm256_mul_ps(f[2], s1),
                    _mm256_mul_ps(f[3], s1),
                ];
                fma32(&mut acc, w, x.as_ptr().add(128 * h + 32 * k));
            }
        }
    }
    hsum(acc)
}

/// Bits s..s+1 of every byte of `qh`, moved to bits 4-5.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6_high(qh: __m256i, s: i32, m2: __m256i) -> __m256i {
    // A 16-bit shift then a per-byte mask keeps each byte's own bits.
    let v = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(s)), m2);
    _mm256_slli_epi16(v, 4)
}

// ---- everything else ----------------------------------------------------

/// Dequantizes each block with the scalar routine (inlined here, so compiled
/// for AVX2) into a stack buffer, then accumulates with FMA.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn via_buffer<const TS: usize, const BS: usize>(
    row: &[u8],
    x: &[f32],
    f: impl Fn(&[u8; TS], &mut [f32; BS]),
) -> f32 {
    debug_assert_eq!(BS % 32, 0);
    let mut buf = [0f32; BS];
    let mut acc = zero();
    for (b, x) in row.chunks_exact(TS).zip(x.chunks_exact(BS)) {
        // Always Ok: chunks_exact gives exactly TS bytes.
        if let Ok(b) = b.try_into() {
            f(b, &mut buf);
            for k in (0..BS).step_by(32) {
                let w = [
                    _mm256_loadu_ps(buf.as_ptr().add(k)),
                    _mm256_loadu_ps(buf.as_ptr().add(k + 8)),
                    _mm256_loadu_ps(buf.as_ptr().add(k + 16)),
                    _mm256_loadu_ps(buf.as_ptr().add(k + 24)),
                ];
                fma32(&mut acc, w, x.as_ptr().add(k));
            }
        }
    }
    hsum(acc)
}
