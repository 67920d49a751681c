//! The paged KV cache's storage on the CPU: per layer, one K and one V pool of
//! `num_blocks × block_size` slots of `kv_dim` values, stored as f32, f16 or bf16
//! (`KvDtype`, vLLM's `--kv-cache-dtype`). Which blocks a sequence uses is the
//! engine's block manager's business; here a slot is just
//! `block · block_size + offset`, and attention reads a sequence's keys through its
//! block table, converting f16/bf16 rows to f32 as it reads them.

use std::fmt;
use std::str::FromStr;

use half::slice::HalfFloatSliceExt;
use half::vec::HalfBitsVecExt;
use half::{bf16, f16};

use super::attention::attention_rows;
use super::AttentionShape;

/// The type K/V values are stored in. Writes round to nearest (ties to even);
/// attention computes in f32 either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvDtype {
    F32,
    F16,
    Bf16,
}

impl KvDtype {
    /// Bytes one stored value takes.
    pub fn elem_bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::Bf16 => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
        }
    }
}

impl fmt::Display for KvDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for KvDtype {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "float32" | "fp32" => Ok(Self::F32),
            "f16" | "float16" | "fp16" | "half" => Ok(Self::F16),
            "bf16" | "bfloat16" => Ok(Self::Bf16),
            _ => Err(format!(
                "unknown KV cache dtype {s:?}: expected f32 (float32, fp32), f16 (float16, fp16, half) \
                 or bf16 (bfloat16)"
            )),
        }
    }
}

/// A stored element type: converts from f32 on write.
trait Elem: Copy + 'static {
    /// `n` zeros, from zeroed (lazily committed) memory as `vec![0f32; n]` is.
    fn zeros(n: usize) -> Vec<Self>;
    fn store(dst: &mut [Self], src: &[f32]);
}

impl Elem for f32 {
    fn zeros(n: usize) -> Vec<Self> {
        vec![0.0; n]
    }

    fn store(dst: &mut [Self], src: &[f32]) {
        dst.copy_from_slice(src);
    }
}

impl Elem for f16 {
    fn zeros(n: usize) -> Vec<Self> {
        vec![0u16; n].reinterpret_into() // +0.0 is all zero bits
    }

    fn store(dst: &mut [Self], src: &[f32]) {
        dst.convert_from_f32_slice(src);
    }
}

impl Elem for bf16 {
    fn zeros(n: usize) -> Vec<Self> {
        vec![0u16; n].reinterpret_into()
    }

    fn store(dst: &mut [Self], src: &[f32]) {
        dst.convert_from_f32_slice(src);
    }
}

/// Per layer: K and V, each [num_blocks · block_size, kv_dim].
struct Planes<T> {
    k: Vec<Vec<T>>,
    v: Vec<Vec<T>>,
}

impl<T: Elem> Planes<T> {
    fn new(num_layers: usize, len: usize) -> Self {
        Self {
            k: (0..num_layers).map(|_| T::zeros(len)).collect(),
            v: (0..num_layers).map(|_| T::zeros(len)).collect(),
        }
    }

    /// Writes one element per 4 KiB page, so the OS commits every page now.
    fn touch(&mut self) {
        let step = (4096 / std::mem::size_of::<T>()).max(1);
        for plane in self.k.iter_mut().chain(&mut self.v) {
            for i in (0..plane.len()).step_by(step) {
                let x = plane[i];
                // Volatile: the store must happen although it writes the value already there.
                unsafe { std::ptr::write_volatile(&mut plane[i], x) };
            }
        }
    }

    fn write(&mut self, layer: usize, slot: usize, d: usize, k: &[f32], v: &[f32]) {
        T::store(&mut self.k[layer][slot * d..(slot + 1) * d], k);
        T::store(&mut self.v[layer][slot * d..(slot + 1) * d], v);
    }

    fn copy_block(&mut self, src: usize, dst: usize, n: usize) {
        for (k, v) in self.k.iter_mut().zip(&mut self.v) {
            k.copy_within(src * n..(src + 1) * n, dst * n);
            v.copy_within(src * n..(src + 1) * n, dst * n);
        }
    }

    fn bytes(&self) -> usize {
        self.k.iter().chain(&self.v).map(|p| std::mem::size_of_val(p.as_slice())).sum()
    }
}

enum Storage {
    F32(Planes<f32>),
    F16(Planes<f16>),
    Bf16(Planes<bf16>),
}

/// Scratch rows for converting f16/bf16 heads to f32: on the stack up to this
/// head_dim, on the heap beyond it.
const STACK_HEAD_DIM: usize = 256;

/// Runs `f` with a zeroed f32 scratch row of `len` (only the f16/bf16 paths need one).
fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    if len <= STACK_HEAD_DIM {
        f(&mut [0f32; STACK_HEAD_DIM][..len])
    } else {
        f(&mut vec![0f32; len])
    }
}

pub struct KvPool {
    pub num_layers: usize,
    pub num_blocks: usize,
    pub block_size: usize,
    /// n_kv_heads · head_dim
    pub kv_dim: usize,
    dtype: KvDtype,
    storage: Storage,
}

impl KvPool {
    pub fn new(
        num_layers: usize,
        num_blocks: usize,
        block_size: usize,
        kv_dim: usize,
        dtype: KvDtype,
    ) -> Self {
        let len = num_blocks * block_size * kv_dim;
        let storage = match dtype {
            KvDtype::F32 => Storage::F32(Planes::new(num_layers, len)),
            KvDtype::F16 => Storage::F16(Planes::new(num_layers, len)),
            KvDtype::Bf16 => Storage::Bf16(Planes::new(num_layers, len)),
        };
        Self { num_layers, num_blocks, block_size, kv_dim, dtype, storage }
    }

    pub fn dtype(&self) -> KvDtype {
        self.dtype
    }

    /// Commits the whole pool's memory now instead of page by page as blocks are first
    /// written: a server's memory is then flat from start-up on (as vLLM's and
    /// llama.cpp's, which clear their caches at start), and no page faults land in
    /// decode steps.
    pub fn prefault(&mut self) {
        match &mut self.storage {
            Storage::F32(p) => p.touch(),
            Storage::F16(p) => p.touch(),
            Storage::Bf16(p) => p.touch(),
        }
    }

    /// Bytes the K and V storage of all layers takes.
    pub fn total_bytes(&self) -> usize {
        match &self.storage {
            Storage::F32(p) => p.bytes(),
            Storage::F16(p) => p.bytes(),
            Storage::Bf16(p) => p.bytes(),
        }
    }

    /// Bytes one block takes over all layers, K and V, stored as `dtype`.
    pub fn block_bytes(num_layers: usize, block_size: usize, kv_dim: usize, dtype: KvDtype) -> usize {
        2 * num_layers * block_size * kv_dim * dtype.elem_bytes()
    }

    /// How many blocks stored as `dtype` fit in `budget_bytes`.
    pub fn blocks_for_budget(
        budget_bytes: usize,
        num_layers: usize,
        block_size: usize,
        kv_dim: usize,
        dtype: KvDtype,
    ) -> usize {
        budget_bytes / Self::block_bytes(num_layers, block_size, kv_dim, dtype).max(1)
    }

    /// Stores one token's key and value at `slot`, rounded to the pool's dtype.
    pub fn write(&mut self, layer: usize, slot: usize, k: &[f32], v: &[f32]) {
        let d = self.kv_dim;
        match &mut self.storage {
            Storage::F32(p) => p.write(layer, slot, d, k, v),
            Storage::F16(p) => p.write(layer, slot, d, k, v),
            Storage::Bf16(p) => p.write(layer, slot, d, k, v),
        }
    }

    /// Copies a whole block in every layer (copy-on-write of a shared block).
    pub fn copy_block(&mut self, src: usize, dst: usize) {
        let n = self.block_size * self.kv_dim;
        match &mut self.storage {
            Storage::F32(p) => p.copy_block(src, dst, n),
            Storage::F16(p) => p.copy_block(src, dst, n),
            Storage::Bf16(p) => p.copy_block(src, dst, n),
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
        let row_of = |j| self.slot(block_table, j);
        match &self.storage {
            Storage::F32(p) => {
                let (k, v) = (p.k[layer].as_slice(), p.v[layer].as_slice());
                attention_rows(shape, h, q, k, v, n_ctx, row_of, scale, scores, out, &mut [])
            }
            Storage::F16(p) => with_scratch(shape.head_dim, |scratch| {
                let (k, v) = (p.k[layer].as_slice(), p.v[layer].as_slice());
                attention_rows(shape, h, q, k, v, n_ctx, row_of, scale, scores, out, scratch)
            }),
            Storage::Bf16(p) => with_scratch(shape.head_dim, |scratch| {
                let (k, v) = (p.k[layer].as_slice(), p.v[layer].as_slice());
                attention_rows(shape, h, q, k, v, n_ctx, row_of, scale, scores, out, scratch)
            }),
        }
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
        let mut pool = KvPool::new(layers, 8, bs, kv_dim, KvDtype::F32);
        assert_eq!(pool.dtype(), KvDtype::F32);
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
        assert_eq!(
            KvPool::blocks_for_budget(1 << 20, 2, 4, 16, KvDtype::F32),
            (1 << 20) / (2 * 2 * 4 * 16 * 4)
        );
    }

    fn round(dtype: KvDtype, x: f32) -> f32 {
        match dtype {
            KvDtype::F32 => x,
            KvDtype::F16 => f16::from_f32(x).to_f32(),
            KvDtype::Bf16 => bf16::from_f32(x).to_f32(),
        }
    }

    /// For f16 and bf16 storage, paged attention is bit-identical to contiguous f32
    /// attention over K/V first rounded to that type, and close to attention over the
    /// unrounded K/V. head_dim 12 has a conversion tail, 264 takes the heap scratch.
    #[test]
    fn half_pools_equal_contiguous_attention_on_rounded_kv() {
        for dtype in [KvDtype::F16, KvDtype::Bf16] {
            for head_dim in [8, 12, 128, 264] {
                let shape = AttentionShape { n_heads: 6, n_kv_heads: 2, head_dim };
                let (layers, bs, kv_dim, n_ctx) = (3, 4, 2 * head_dim, 13);
                let mut pool = KvPool::new(layers, 9, bs, kv_dim, dtype);
                assert_eq!(pool.dtype(), dtype);
                let table = [7u32, 2, 5, 0]; // 13 positions in 4 blocks, out of order
                let val = |i: usize| (i as f32 * 0.7137).sin() * 1.3;
                let k: Vec<f32> = (0..n_ctx * kv_dim).map(val).collect();
                let v: Vec<f32> = (0..n_ctx * kv_dim).map(|i| val(i + 1000)).collect();
                let kr: Vec<f32> = k.iter().map(|&x| round(dtype, x)).collect();
                let vr: Vec<f32> = v.iter().map(|&x| round(dtype, x)).collect();
                assert!(k.iter().zip(&kr).any(|(a, b)| a != b), "{dtype}: rounding is a no-op");
                for pos in 0..n_ctx {
                    let slot = pool.slot(&table, pos);
                    pool.write(2, slot, &k[pos * kv_dim..][..kv_dim], &v[pos * kv_dim..][..kv_dim]);
                }
                let q: Vec<f32> = (0..head_dim).map(|i| val(i + 77)).collect();
                let mut scores = vec![0f32; n_ctx];
                let (mut want, mut exact, mut got) =
                    (vec![0f32; head_dim], vec![0f32; head_dim], vec![0f32; head_dim]);
                let scale = 1.0 / (head_dim as f32).sqrt();
                let check = |pool: &KvPool, table: &[u32], h: usize, scores: &mut [f32], got: &mut [f32]| {
                    pool.attention_head(shape, 2, h, &q, table, n_ctx, scale, scores, got);
                };
                for h in 0..6 {
                    attention_head(shape, h, &q, &kr, &vr, n_ctx, scale, &mut scores, &mut want);
                    attention_head(shape, h, &q, &k, &v, n_ctx, scale, &mut scores, &mut exact);
                    check(&pool, &table, h, &mut scores, &mut got);
                    assert_eq!(want, got, "{dtype} head_dim {head_dim} head {h}");
                    let norm = exact.iter().fold(0f32, |m, x| m.max(x.abs()));
                    for (g, e) in got.iter().zip(&exact) {
                        assert!((g - e).abs() <= 1e-2 * norm, "{dtype} head {h}: {g} vs {e}");
                    }
                }
                // Copy-on-write of a half-precision block moves its values unchanged.
                pool.copy_block(5, 8);
                check(&pool, &[7, 2, 8, 0], 4, &mut scores, &mut got);
                attention_head(shape, 4, &q, &kr, &vr, n_ctx, scale, &mut scores, &mut want);
                assert_eq!(want, got, "{dtype} head_dim {head_dim} after copy_block");
            }
        }
    }

    /// Sizes follow the dtype: an f16/bf16 pool really holds 2 bytes per value.
    #[test]
    fn sizes_scale_with_elem_bytes() {
        let (layers, blocks, bs, kv_dim) = (3, 10, 16, 64);
        for dtype in [KvDtype::F32, KvDtype::F16, KvDtype::Bf16] {
            let per_block = 2 * layers * bs * kv_dim * dtype.elem_bytes();
            assert_eq!(KvPool::block_bytes(layers, bs, kv_dim, dtype), per_block);
            assert_eq!(KvPool::blocks_for_budget(1 << 24, layers, bs, kv_dim, dtype), (1 << 24) / per_block);
            let pool = KvPool::new(layers, blocks, bs, kv_dim, dtype);
            assert_eq!(pool.total_bytes(), blocks * per_block, "{dtype}");
        }
        assert_eq!(KvDtype::F32.elem_bytes(), 4);
        assert_eq!(KvDtype::F16.elem_bytes(), 2);
        assert_eq!(KvDtype::Bf16.elem_bytes(), 2);
        let budget = 100 * KvPool::block_bytes(layers, bs, kv_dim, KvDtype::F32) + 7;
        assert_eq!(KvPool::blocks_for_budget(budget, layers, bs, kv_dim, KvDtype::F32), 100);
        assert_eq!(KvPool::blocks_for_budget(budget, layers, bs, kv_dim, KvDtype::F16), 200);
        assert_eq!(KvPool::blocks_for_budget(budget, layers, bs, kv_dim, KvDtype::Bf16), 200);
        let half = KvPool::new(layers, blocks, bs, kv_dim, KvDtype::F16);
        let full = KvPool::new(layers, blocks, bs, kv_dim, KvDtype::F32);
        assert_eq!(2 * half.total_bytes(), full.total_bytes());
    }

    #[test]
    fn kv_dtype_parses_aliases_and_rejects_others() {
        for (s, want) in [
            ("f32", KvDtype::F32),
            ("float32", KvDtype::F32),
            ("FP32", KvDtype::F32),
            ("f16", KvDtype::F16),
            ("Float16", KvDtype::F16),
            ("fp16", KvDtype::F16),
            ("half", KvDtype::F16),
            ("bf16", KvDtype::Bf16),
            ("BFloat16", KvDtype::Bf16),
        ] {
            assert_eq!(s.parse::<KvDtype>(), Ok(want), "{s}");
        }
        for d in [KvDtype::F32, KvDtype::F16, KvDtype::Bf16] {
            assert_eq!(d.name().parse::<KvDtype>(), Ok(d));
            assert_eq!(d.to_string(), d.name());
        }
        assert_eq!(KvDtype::Bf16.name(), "bf16");
        let err = "int8".parse::<KvDtype>().unwrap_err();
        for allowed in ["int8", "f32", "f16", "bf16"] {
            assert!(err.contains(allowed), "{err}");
        }
    }
}
