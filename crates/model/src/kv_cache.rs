//! The per-sequence KV cache of this stage: one contiguous K and V buffer per
//! layer, grown as the sequence grows. The engine issue replaces it with paged blocks.

/// Keys and values of one sequence. Per layer: [len, n_kv_heads · head_dim].
pub struct SequenceCache {
    pub(crate) k: Vec<Vec<f32>>,
    pub(crate) v: Vec<Vec<f32>>,
    kv_dim: usize,
}

impl SequenceCache {
    pub fn new(num_layers: usize, kv_dim: usize) -> Self {
        Self { k: vec![Vec::new(); num_layers], v: vec![Vec::new(); num_layers], kv_dim }
    }

    /// Positions cached so far.
    pub fn len(&self) -> usize {
        self.k.first().map_or(0, |k| k.len() / self.kv_dim)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets everything from position `len` on.
    pub fn truncate(&mut self, len: usize) {
        for (k, v) in self.k.iter_mut().zip(&mut self.v) {
            k.truncate(len * self.kv_dim);
            v.truncate(len * self.kv_dim);
        }
    }

    /// Stores one position's key and value of `layer`.
    pub(crate) fn write(&mut self, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let d = self.kv_dim;
        let need = (pos + 1) * d;
        if self.k[layer].len() < need {
            self.k[layer].resize(need, 0.0);
            self.v[layer].resize(need, 0.0);
        }
        self.k[layer][pos * d..need].copy_from_slice(k);
        self.v[layer][pos * d..need].copy_from_slice(v);
    }
}
