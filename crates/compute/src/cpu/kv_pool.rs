//! The paged KV cache's storage on the CPU: per layer, one K and one V pool of
//! `num_blocks × block_size` slots of `kv_dim` f32 values. Which blocks a sequence
//! uses is the engine's block manager's business; here a slot is just
//! `block · block_size + offset`, and attention reads a sequence's keys through its
//! block table.

use super::attention::attention_rows;
use super::AttentionShape;

pub struct KvPool {
    pub num_layers: usize,
    pub num_blocks: usize,
    pub block_size: usize,
    /// n_kv_heads · head_dim
    pub kv_dim: usize,
    /// Per layer: [num_blocks · block_size, kv_dim]
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
}

impl KvPool {
    pub fn new(num_layers: usize, num_blocks: usize, block_size: usize, kv_dim: usize) -> Self {
        let slots = num_blocks * block_size * kv_dim;
        Self {
            num_layers,
            num_blocks,
            block_size,
            kv_dim,
            k: vec![vec![0.0; slots]; num_layers],
            v: vec![vec![0.0; slots]; num_layers],
        }
    }

    /// Bytes one block takes over all layers, K and V, at `elem_bytes` per value.
    pub fn block_bytes(num_layers: usize, block_size: usize, kv_dim: usize, elem_bytes: usize) -> usize {
        2 * num_layers * block_size * kv_dim * elem_bytes
    }

    /// How many blocks fit in `budget` bytes (f32 storage).
    pub fn blocks_for_budget(budget: usize, num_layers: usize, block_size: usize, kv_dim: usize) -> usize {
        budget / Self::block_bytes(num_layers, block_size, kv_dim, 4).max(1)
    }

    /// Stores one token's key and value at `slot`.
    pub fn write(&mut self, layer: usize, slot: usize, k: &[f32], v: &[f32]) {
        let d = self.kv_dim;
        self.k[layer][slot * d..(slot + 1) * d].copy_from_slice(k);
        self.v[layer][slot * d..(slot + 1) * d].copy_from_slice(v);
    }

    /// Copies a whole block in every layer (copy-on-write of a shared block).
    pub fn copy_block(&mut self, src: usize, dst: usize) {
        let n = self.block_size * self.kv_dim;
        for (k, v) in self.k.iter_mut().zip(&mut self.v) {
            k.copy_within(src * n..(src + 1) * n, dst * n);
            v.copy_within(src * n..(src + 1) * n, dst * n);
        }
    }

    /// The slot of position `pos` of a sequence with this block table.
    pub fn slot(&self, block_table: &[u32], pos: usize) -> usize {
        block_table[pos / self.block_size] as usize * self.block_size + pos % self.block_size
    }

    /// Query head `h` of one token attending to positions 0..n_ctx of a sequence,
    /// reading K/V through its block table (the paged form of `attention_head`).
    /// q, out: [head_dim]; `scores`: scratch of at least n_ctx.
    #[allow(clippy::too_many_arguments)] // the kernel's operands, each a distinct tensor
    pub fn attention_head(
        &self,
        shape: AttentionShape,
        layer: usize,
        h: usize,
        q: &[f32],
        block_table: &[u32],
        n_ctx: usize,
        scale: f32,
        scores: &mut [f32],
        out: &mut [f32],
    ) {
        debug_assert_eq!(shape.n_kv_heads * shape.head_dim, self.kv_dim);
        let (k, v) = (&self.k[layer], &self.v[layer]);
        attention_rows(shape, h, q, k, v, n_ctx, |j| self.slot(block_table, j), scale, scores, out);
    }
}

#[cfg(test)]
mod tests {
    use super::super::attention_head;
    use super::*;

    /// K/V scattered over non-contiguous, shuffled blocks give exactly the attention
    /// of the same K/V stored contiguously; a block copy moves all layers.
    #[test]
    fn paged_attention_equals_contiguous_attention() {
        let shape = AttentionShape { n_heads: 4, n_kv_heads: 2, head_dim: 8 };
        let (layers, bs, kv_dim, n_ctx) = (2, 4, 16, 11);
        let mut pool = KvPool::new(layers, 8, bs, kv_dim);
        let table = [6u32, 1, 3]; // 11 positions in 3 blocks, out of order
        let val = |i: usize| ((i * 37 % 23) as f32 - 11.0) * 0.07;
        let (mut k, mut v) = (vec![0f32; n_ctx * kv_dim], vec![0f32; n_ctx * kv_dim]);
        for pos in 0..n_ctx {
            for c in 0..kv_dim {
                k[pos * kv_dim + c] = val(pos * kv_dim + c);
                v[pos * kv_dim + c] = val(pos * kv_dim + c + 5);
            }
            let slot = pool.slot(&table, pos);
            pool.write(1, slot, &k[pos * kv_dim..][..kv_dim], &v[pos * kv_dim..][..kv_dim]);
        }
        let q: Vec<f32> = (0..8).map(|i| val(i + 3)).collect();
        let mut scores = vec![0f32; n_ctx];
        for h in 0..4 {
            let (mut want, mut got) = (vec![0f32; 8], vec![0f32; 8]);
            attention_head(shape, h, &q, &k, &v, n_ctx, 0.3, &mut scores, &mut want);
            pool.attention_head(shape, 1, h, &q, &table, n_ctx, 0.3, &mut scores, &mut got);
            assert_eq!(want, got, "head {h}");
        }
        pool.copy_block(3, 0);
        let moved = [6u32, 1, 0];
        let mut got = vec![0f32; 8];
        pool.attention_head(shape, 1, 2, &q, &moved, n_ctx, 0.3, &mut scores, &mut got);
        let mut want = vec![0f32; 8];
        attention_head(shape, 2, &q, &k, &v, n_ctx, 0.3, &mut scores, &mut want);
        assert_eq!(want, got);
        assert_eq!(KvPool::blocks_for_budget(1 << 20, 2, 4, 16), (1 << 20) / (2 * 2 * 4 * 16 * 4));
    }
}
