//! y = x · Wᵀ against a weight stored in any `WeightFormat`.
//!
//! x: [n_tokens, cols] f32, W: [rows, cols] stored row by row, y: [n_tokens, rows].
//! Rows of W are split among the threads. For one token each row is read once by
//! `dot_row` straight from its stored format. For several tokens a tile of rows is
//! dequantized once into f32 and reused for every token, so prefill pays the
//! dequantization once per row rather than once per token.

use rayon::prelude::*;

use super::{dot_f32, Cpu};
use crate::quant::{dequantize_row, dot_row, WeightFormat};

/// A read-only view of a 2-D weight: `rows` rows of `cols` values each.
#[derive(Clone, Copy, Debug)]
pub struct QMatrix<'a> {
    pub format: WeightFormat,
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [u8],
}

impl<'a> QMatrix<'a> {
    /// Checks that `data` holds exactly `rows × cols` values.
    pub fn new(format: WeightFormat, rows: usize, cols: usize, data: &'a [u8]) -> Option<Self> {
        let row_bytes = format.bytes_for(cols as u64)? as usize;
        (row_bytes.checked_mul(rows)? == data.len()).then_some(Self { format, rows, cols, data })
    }

    pub fn row_bytes(&self) -> usize {
        self.data.len() / self.rows.max(1)
    }

    pub fn row(&self, r: usize) -> &'a [u8] {
        let rb = self.row_bytes();
        &self.data[r * rb..(r + 1) * rb]
    }

    /// Row `r` as f32 into `out` (`cols` long).
    pub fn dequantize_row_into(&self, r: usize, out: &mut [f32]) {
        dequantize_row(self.format, self.row(r), out).expect("QMatrix shape was checked at construction");
    }
}

/// Rows per work item: large enough to amortize scheduling, small enough to balance.
const ROWS_PER_TASK: usize = 16;

impl Cpu {
    /// out[t, r] = Σ_c x[t, c] · W[r, c]
    pub fn matmul(&self, w: &QMatrix<'_>, x: &[f32], out: &mut [f32]) {
        let n_tok = x.len() / w.cols;
        assert_eq!(x.len(), n_tok * w.cols, "x is not [n, {}]", w.cols);
        assert_eq!(out.len(), n_tok * w.rows, "out is not [{n_tok}, {}]", w.rows);
        if n_tok == 0 {
            return;
        }
        // Work is split over row tiles; each task writes a [n_tok, tile] block of a
        // transposed scratch, then rows are scattered into `out`'s row-major layout.
        let tiles = w.rows.div_ceil(ROWS_PER_TASK);
        if n_tok == 1 {
            self.install(|| {
                out.par_chunks_mut(ROWS_PER_TASK).enumerate().for_each(|(tile, y)| {
                    let r0 = tile * ROWS_PER_TASK;
                    for (i, yi) in y.iter_mut().enumerate() {
                        *yi = dot_row(w.format, w.row(r0 + i), x);
                    }
                });
            });
            return;
        }
        let mut scratch = vec![0f32; tiles * ROWS_PER_TASK * n_tok];
        self.install(|| {
            scratch.par_chunks_mut(ROWS_PER_TASK * n_tok).enumerate().for_each(|(tile, block)| {
                let r0 = tile * ROWS_PER_TASK;
                let nr = ROWS_PER_TASK.min(w.rows - r0);
                let mut wrow = vec![0f32; w.cols];
                for i in 0..nr {
                    w.dequantize_row_into(r0 + i, &mut wrow);
                    for t in 0..n_tok {
                        block[i * n_tok + t] = dot_f32(&wrow, &x[t * w.cols..(t + 1) * w.cols]);
                    }
                }
            });
        });
        for (t, y) in out.chunks_mut(w.rows).enumerate() {
            for (r, yr) in y.iter_mut().enumerate() {
                let (tile, i) = (r / ROWS_PER_TASK, r % ROWS_PER_TASK);
                *yr = scratch[tile * ROWS_PER_TASK * n_tok + i * n_tok + t];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_matmul_matches_naive_for_one_and_many_tokens() {
        let cpu = Cpu::new(2);
        let (rows, cols) = (37, 24);
        let w: Vec<f32> = (0..rows * cols).map(|i| ((i * 31 % 17) as f32 - 8.0) * 0.1).collect();
        let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        let m = QMatrix::new(WeightFormat::F32, rows, cols, &bytes).unwrap();
        for n_tok in [1, 3] {
            let x: Vec<f32> = (0..n_tok * cols).map(|i| ((i * 7 % 5) as f32 - 2.0) * 0.3).collect();
            let mut y = vec![0f32; n_tok * rows];
            cpu.matmul(&m, &x, &mut y);
            for t in 0..n_tok {
                for r in 0..rows {
                    let want: f32 = (0..cols).map(|c| x[t * cols + c] * w[r * cols + c]).sum();
                    assert!((y[t * rows + r] - want).abs() < 1e-4, "t={t} r={r}");
                }
            }
        }
        assert!(QMatrix::new(WeightFormat::F32, rows, cols, &bytes[4..]).is_none());
    }
}
