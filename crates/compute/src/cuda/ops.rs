//! Launchers for the kernels in `kernels/`: one method per operation of the forward
//! pass, each with the shapes it expects. Pointers are device addresses
//! (`DeviceBuffer::ptr`); lengths are checked by the caller that owns the buffers.

use cudarc::driver::{LaunchConfig, PushKernelArg};

use super::{CudaError, Gpu};

fn grid(blocks: usize, threads: u32) -> LaunchConfig {
    LaunchConfig { grid_dim: (blocks as u32, 1, 1), block_dim: (threads, 1, 1), shared_mem_bytes: 0 }
}

/// The paged-attention call's inputs; see `kernels/attention.cu`.
pub struct AttentionArgs {
    /// [n, q_stride] f32, rotated queries at column h·head_dim.
    pub q: u64,
    pub q_stride: usize,
    pub k_cache: u64,
    pub v_cache: u64,
    /// [num_seqs, max_blocks] u32.
    pub block_tables: u64,
    pub max_blocks: usize,
    /// [n] u32 index into block_tables.
    pub seq_of: u64,
    /// [n] i32.
    pub positions: u64,
    /// [n, nh·hd] bf16.
    pub out: u64,
    pub n: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub block_size: usize,
    pub scale: f32,
}

impl Gpu {
    /// x[i, :] = table[tokens[i], :].  tokens: [n] u32, table: [vocab, d] bf16, x: [n, d] f32.
    pub fn embedding(&self, tokens: u64, table: u64, x: u64, n: usize, d: usize) -> Result<(), CudaError> {
        let f = self.kernels.get("embedding_bf16");
        let d = d as i32;
        unsafe {
            self.stream.launch_builder(f).arg(&tokens).arg(&table).arg(&x).arg(&d).launch(grid(n, 256))
        }?;
        Ok(())
    }

    /// x += delta (if `delta` is Some), out = rms_norm(x) · w.
    /// x, delta: [n, d] f32; w: [d] f32; out: [n, d] bf16.
    #[allow(clippy::too_many_arguments)]
    pub fn add_rms_norm(
        &self,
        x: u64,
        delta: Option<u64>,
        w: u64,
        out: u64,
        n: usize,
        d: usize,
        eps: f32,
    ) -> Result<(), CudaError> {
        let f = self.kernels.get("add_rms_norm");
        let (delta, d) = (delta.unwrap_or(0), d as i32);
        unsafe {
            self.stream
                .launch_builder(f)
                .arg(&x)
                .arg(&delta)
                .arg(&w)
                .arg(&out)
                .arg(&d)
                .arg(&eps)
                .launch(grid(n, 512))
        }?;
        Ok(())
    }

    /// out = silu(gate) · up.  gate_up: [n, 2·ff] f32 ([gate | up] per row); out: [n, ff] bf16.
    pub fn silu_mul(&self, gate_up: u64, out: u64, n: usize, ff: usize) -> Result<(), CudaError> {
        let f = self.kernels.get("silu_mul");
        let ff = ff as i32;
        unsafe { self.stream.launch_builder(f).arg(&gate_up).arg(&out).arg(&ff).launch(grid(n, 256)) }?;
        Ok(())
    }

    /// dst[i, :] = src[rows[i], :].  src: [_, d] bf16; rows: [m] u32; dst: [m, d] bf16.
    pub fn gather_rows(&self, src: u64, rows: u64, dst: u64, m: usize, d: usize) -> Result<(), CudaError> {
        let f = self.kernels.get("gather_rows_bf16");
        let d = d as i32;
        unsafe { self.stream.launch_builder(f).arg(&src).arg(&rows).arg(&dst).arg(&d).launch(grid(m, 256)) }?;
        Ok(())
    }

    /// Fills `n` bf16 values with uniform random numbers in [lo, hi) (dummy weights).
    pub fn fill_uniform(&self, p: u64, n: usize, seed: u64, lo: f32, hi: f32) -> Result<(), CudaError> {
        let f = self.kernels.get("fill_uniform_bf16");
        let n = n as u64;
        let blocks = n.div_ceil(256).clamp(1, 65536) as usize;
        unsafe {
            self.stream
                .launch_builder(f)
                .arg(&p)
                .arg(&n)
                .arg(&seed)
                .arg(&lo)
                .arg(&hi)
                .launch(grid(blocks, 256))
        }?;
        Ok(())
    }

    /// out[i] = argmax of logits row i.  logits: [m, vocab] f32; out: [m] u32.
    pub fn argmax_rows(&self, logits: u64, out: u64, m: usize, vocab: usize) -> Result<(), CudaError> {
        let f = self.kernels.get("argmax_rows");
        let vocab = vocab as i32;
        unsafe { self.stream.launch_builder(f).arg(&logits).arg(&out).arg(&vocab).launch(grid(m, 1024)) }?;
        Ok(())
    }

    /// Adds `bias`, rotates q and k to each token's position and writes k, v into the
    /// cache rows `slots`.  qkv: [n, (nh + 2·nkv)·hd] f32 (q rotated in place);
    /// positions: [n] i32; slots: [n] i64; inv_freq: [hd/2] f32; caches: [rows, nkv·hd] bf16.
    #[allow(clippy::too_many_arguments)]
    pub fn rope_kv_write(
        &self,
        qkv: u64,
        bias: Option<u64>,
        positions: u64,
        slots: u64,
        inv_freq: u64,
        k_cache: u64,
        v_cache: u64,
        n: usize,
        (n_heads, n_kv_heads, head_dim): (usize, usize, usize),
        interleaved: bool,
        attention_factor: f32,
    ) -> Result<(), CudaError> {
        let f = self.kernels.get("rope_kv_write");
        let bias = bias.unwrap_or(0);
        let (nh, nkv, hd, il) = (n_heads as i32, n_kv_heads as i32, head_dim as i32, interleaved as i32);
        unsafe {
            self.stream
                .launch_builder(f)
                .arg(&qkv)
                .arg(&bias)
                .arg(&positions)
                .arg(&slots)
                .arg(&inv_freq)
                .arg(&k_cache)
                .arg(&v_cache)
                .arg(&nh)
                .arg(&nkv)
                .arg(&hd)
                .arg(&il)
                .arg(&attention_factor)
                .launch(grid(n, 128))
        }?;
        Ok(())
    }

    /// Attention of every token over its sequence's cached positions 0..=pos.
    pub fn paged_attention(&self, a: &AttentionArgs) -> Result<(), CudaError> {
        if a.head_dim > 256
            || !a.head_dim.is_multiple_of(2)
            || a.n_kv_heads == 0
            || !a.n_heads.is_multiple_of(a.n_kv_heads)
        {
            return Err(CudaError::Shape(format!(
                "attention: head_dim {} (even, ≤ 256), {} heads over {} KV heads",
                a.head_dim, a.n_heads, a.n_kv_heads
            )));
        }
        if a.n == 0 {
            return Ok(());
        }
        let f = self.kernels.get("paged_attention");
        let cfg = LaunchConfig {
            grid_dim: (a.n as u32, a.n_heads as u32, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        };
        let (qs, mb, nh, nkv, hd, bs) = (
            a.q_stride as i32,
            a.max_blocks as i32,
            a.n_heads as i32,
            a.n_kv_heads as i32,
            a.head_dim as i32,
            a.block_size as i32,
        );
        unsafe {
            self.stream
                .launch_builder(f)
                .arg(&a.q)
                .arg(&qs)
                .arg(&a.k_cache)
                .arg(&a.v_cache)
                .arg(&a.block_tables)
                .arg(&mb)
                .arg(&a.seq_of)
                .arg(&a.positions)
                .arg(&a.out)
                .arg(&nh)
                .arg(&nkv)
                .arg(&hd)
                .arg(&bs)
                .arg(&a.scale)
                .launch(cfg)
        }?;
        Ok(())
    }

    /// Copies `bytes` from `src` to `dst` on the stream (KV block copy-on-write).
    pub fn copy_device(&self, src: u64, dst: u64, bytes: usize) -> Result<(), CudaError> {
        unsafe { cudarc::driver::result::memcpy_dtod_async(dst, src, bytes, self.stream.cu_stream()) }?;
        Ok(())
    }
}
