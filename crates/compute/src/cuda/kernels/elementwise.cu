// Embedding lookup, fused residual add + RMSNorm, SiLU·mul, row gather.

// x[i, :] = table[tokens[i], :].  grid: n, block: 256.  table: [vocab, d] bf16, x: [n, d] f32
extern "C" __global__ void embedding_bf16(const u32* tokens, const bf16_t* table, float* x, int d) {
    const bf16_t* row = table + (u64)tokens[blockIdx.x] * d;
    float* out = x + (u64)blockIdx.x * d;
    for (int j = threadIdx.x; j < d; j += blockDim.x) out[j] = bf16_to_f32(row[j]);
}

// x += delta (when delta is not null), then out = x / rms(x) · w.
// grid: n, block: 256+.  x, delta: [n, d] f32, w: [d] f32, out: [n, d] bf16
extern "C" __global__ void add_rms_norm(float* x, const float* delta, const float* w, bf16_t* out, int d,
                                        float eps) {
    __shared__ float scratch[32];
    float* xr = x + (u64)blockIdx.x * d;
    const float* dr = delta ? delta + (u64)blockIdx.x * d : nullptr;
    float ss = 0.f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float v = xr[j];
        if (dr) {
            v += dr[j];
            xr[j] = v;
        }
        ss += v * v;
    }
    ss = block_sum(ss, scratch);
    float inv = rsqrtf(ss / d + eps);
    bf16_t* o = out + (u64)blockIdx.x * d;
    for (int j = threadIdx.x; j < d; j += blockDim.x) o[j] = f32_to_bf16(xr[j] * inv * w[j]);
}

// out = silu(gate) · up, reading one fused [gate | up] row.
// grid: n, block: 256.  gate_up: [n, 2·ff] f32, out: [n, ff] bf16
extern "C" __global__ void silu_mul(const float* gate_up, bf16_t* out, int ff) {
    const float* g = gate_up + (u64)blockIdx.x * 2 * ff;
    const float* u = g + ff;
    bf16_t* o = out + (u64)blockIdx.x * ff;
    for (int j = threadIdx.x; j < ff; j += blockDim.x) {
        float gv = g[j];
        o[j] = f32_to_bf16(gv / (1.f + __expf(-gv)) * u[j]);
    }
}

// dst[i, :] = src[rows[i], :].  grid: m, block: 256.  src: [n, d] bf16, dst: [m, d] bf16
extern "C" __global__ void gather_rows_bf16(const bf16_t* src, const u32* rows, bf16_t* dst, int d) {
    const bf16_t* s = src + (u64)rows[blockIdx.x] * d;
    bf16_t* o = dst + (u64)blockIdx.x * d;
    for (int j = threadIdx.x; j < d; j += blockDim.x) o[j] = s[j];
}

// Random weights for --load-format dummy: uniform in [lo, hi) from a counter hash
// (splitmix64), so any n and any seed fill in one pass with no state.
extern "C" __global__ void fill_uniform_bf16(bf16_t* p, u64 n, u64 seed, float lo, float hi) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        u64 z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        float u = (float)(z >> 40) * (1.0f / 16777216.0f);
        p[i] = f32_to_bf16(lo + (hi - lo) * u);
    }
}

// Greedy sampling on the device: out[i] = argmax of logits row i (lowest index on ties).
// grid: m, block: 1024.  logits: [m, vocab] f32
extern "C" __global__ void argmax_rows(const float* logits, u32* out, int vocab) {
    __shared__ float best_v[1024];
    __shared__ u32 best_i[1024];
    const float* row = logits + (u64)blockIdx.x * vocab;
    float bv = -INFINITY;
    u32 bi = 0;
    for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
        float v = row[j];
        if (v > bv) { bv = v; bi = j; }
    }
    best_v[threadIdx.x] = bv;
    best_i[threadIdx.x] = bi;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float ov = best_v[threadIdx.x + s];
            u32 oi = best_i[threadIdx.x + s];
            if (ov > best_v[threadIdx.x] || (ov == best_v[threadIdx.x] && oi < best_i[threadIdx.x])) {
                best_v[threadIdx.x] = ov;
                best_i[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = best_i[0];
}
