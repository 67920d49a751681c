//! y = x · Wᵀ against a weight stored in any `WeightFormat`.
//!
//! x: [n_tokens, cols] f32, W: [rows, cols] stored row by row, y: [n_tokens, rows].
//! Rows of W are split among the threads. For one token each row is read once by
//! `dot_row` straight from its stored format. For several tokens a tile of rows is
//! dequantized once into f32 and reused for every token, so prefill pays the
//! dequantization once per row rather than once per token.

use rayon::prelude::*;

use super::gemm::tile_dots;
use super::Cpu;
use crate::quant::{dequantize_row, dot_row, dot_row_multi, WeightFormat};

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
/// Tokens per pass over a row tile: 32 × 1536 f32 is 192 KiB, within L2.
const TOKENS_PER_BLOCK: usize = 32;
/// Up to this many tokens (a decode step of a few sequences), rows are dotted with
/// every token straight from their stored format (`dot_row_multi`): decoding a tile
/// into f32 costs as much as a whole prefill's tile and would dominate.
const SMALL_BATCH: usize = 8;

impl Cpu {
    /// Several matmuls of the same input (Q/K/V, gate/up) as one parallel region:
    /// one dispatch to the pool instead of one per weight, which matters at batch 1
    /// where each matmul is only tens of microseconds.
    pub fn matmul_group(&self, x: &[f32], jobs: &mut [(QMatrix<'_>, &mut [f32])]) {
        let single_token = jobs.iter().all(|(w, _)| x.len() == w.cols);
        if !single_token {
            for (w, out) in jobs.iter_mut() {
                self.matmul(w, x, out);
            }
            return;
        }
        let mut tasks: Vec<(QMatrix<'_>, usize, &mut [f32])> = Vec::new();
        for (w, out) in jobs.iter_mut() {
            assert_eq!(out.len(), w.rows, "out is not [1, {}]", w.rows);
            for (tile, y) in out.chunks_mut(ROWS_PER_TASK).enumerate() {
                tasks.push((*w, tile * ROWS_PER_TASK, y));
            }
        }
        self.install(|| {
            tasks.into_par_iter().for_each(|(w, r0, y)| {
                for (i, yi) in y.iter_mut().enumerate() {
                    *yi = dot_row(w.format, w.row(r0 + i), x);
                }
            });
        });
    }

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
        if n_tok <= SMALL_BATCH {
            // block: [nr, n_tok] per tile, transposed below.
            self.install(|| {
                scratch.par_chunks_mut(ROWS_PER_TASK * n_tok).enumerate().for_each(|(tile, block)| {
                    let r0 = tile * ROWS_PER_TASK;
                    let nr = ROWS_PER_TASK.min(w.rows - r0);
                    let mut dots = [0f32; SMALL_BATCH];
                    for i in 0..nr {
                        dot_row_multi(w.format, w.row(r0 + i), x, &mut dots[..n_tok]);
                        for (t, &d) in dots[..n_tok].iter().enumerate() {
                            block[t * nr + i] = d;
                        }
                    }
                });
            });
        } else {
            self.matmul_tiles(w, x, n_tok, &mut scratch);
        }
        for (t, y) in out.chunks_mut(w.rows).enumerate() {
            for (tile, dst) in y.chunks_mut(ROWS_PER_TASK).enumerate() {
                let nr = dst.len();
                let src = &scratch[tile * ROWS_PER_TASK * n_tok + t * nr..][..nr];
                dst.copy_from_slice(src);
            }
        }
    }

    /// Each task owns a tile of rows: dequantize them once into f32, then run the
    /// register-tiled kernel over token blocks small enough to stay in L2.
    /// scratch: per tile, [n_tok, rows in tile].
    fn matmul_tiles(&self, w: &QMatrix<'_>, x: &[f32], n_tok: usize, scratch: &mut [f32]) {
        self.install(|| {
            scratch.par_chunks_mut(ROWS_PER_TASK * n_tok).enumerate().for_each(|(tile, block)| {
                let r0 = tile * ROWS_PER_TASK;
                let nr = ROWS_PER_TASK.min(w.rows - r0);
                let mut wtile = vec![0f32; nr * w.cols];
                for (i, wrow) in wtile.chunks_exact_mut(w.cols).enumerate() {
                    w.dequantize_row_into(r0 + i, wrow);
                }
                // block: [n_tok, nr] for this tile.
                for t0 in (0..n_tok).step_by(TOKENS_PER_BLOCK) {
                    let nt = TOKENS_PER_BLOCK.min(n_tok - t0);
                    let x_blk = &x[t0 * w.cols..(t0 + nt) * w.cols];
                    tile_dots(&wtile, nr, x_blk, nt, w.cols, &mut block[t0 * nr..], nr);
                }
            });
        });
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
        for n_tok in [1, 3, 9] {
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
