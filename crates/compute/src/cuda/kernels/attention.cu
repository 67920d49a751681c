// Paged attention over a variable-length batch (prefill chunks and decodes alike):
// token t of sequence s attends to positions 0..=positions[t] of s, reading K/V
// through s's block table. One thread block per (token, query head); keys are
// taken in tiles of blockDim with an online softmax, so any context length fits.
//
// grid: (n, nh), block: 128 (must equal ATT_TILE), head_dim <= 256.
// q:   [n, q_stride] f32, head h at q + t·q_stride + h·hd (rotated by rope_kv_write)
// k_cache, v_cache: [num_blocks · block_size, nkv, hd] bf16
// block_tables: [num_seqs, max_blocks] u32; seq_of: [n]; out: [n, nh·hd] bf16
#define ATT_TILE 128
#define ATT_MAX_HD 256
extern "C" __global__ void paged_attention(const float* q, int q_stride, const bf16_t* k_cache,
                                           const bf16_t* v_cache, const u32* block_tables, int max_blocks,
                                           const u32* seq_of, const int* positions, bf16_t* out, int nh,
                                           int nkv, int hd, int block_size, float scale) {
    __shared__ float q_s[ATT_MAX_HD];
    __shared__ float p_s[ATT_TILE];
    __shared__ long long slot_s[ATT_TILE];
    __shared__ float scratch[32];
    const int t = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
    const int kvh = h / (nh / nkv), kv_dim = nkv * hd;
    const u32* table = block_tables + (u64)seq_of[t] * max_blocks;
    const int n_ctx = positions[t] + 1;
    for (int j = tid; j < hd; j += blockDim.x) q_s[j] = q[(u64)t * q_stride + h * hd + j] * scale;
    __syncthreads();

    float m = -INFINITY, l = 0.f;
    float acc0 = 0.f, acc1 = 0.f;  // this thread's output dims: tid and tid + 128
    for (int start = 0; start < n_ctx; start += ATT_TILE) {
        const int j = start + tid;
        float s = -INFINITY;
        if (j < n_ctx) {
            long long slot = (long long)table[j / block_size] * block_size + j % block_size;
            slot_s[tid] = slot;
            const bf16_t* k = k_cache + slot * kv_dim + kvh * hd;
            float dot = 0.f;
            for (int d = 0; d < hd; d += 2) {
                u32 pair = *(const u32*)(k + d);
                dot += q_s[d] * __uint_as_float(pair << 16) + q_s[d + 1] * __uint_as_float(pair & 0xffff0000u);
            }
            s = dot;
        }
        const float m_new = fmaxf(m, block_max(s, scratch));
        const float p = j < n_ctx ? __expf(s - m_new) : 0.f;
        p_s[tid] = p;
        const float p_sum = block_sum(p, scratch);  // also orders p_s / slot_s writes before reads
        const float corr = __expf(m - m_new);
        l = l * corr + p_sum;
        m = m_new;
        const int tile = min(ATT_TILE, n_ctx - start);
        acc0 *= corr;
        acc1 *= corr;
        for (int i = 0; i < tile; i++) {
            const bf16_t* v = v_cache + slot_s[i] * kv_dim + kvh * hd;
            const float pi = p_s[i];
            if (tid < hd) acc0 += pi * bf16_to_f32(v[tid]);
            if (tid + ATT_TILE < hd) acc1 += pi * bf16_to_f32(v[tid + ATT_TILE]);
        }
        __syncthreads();  // p_s / slot_s are rewritten by the next tile
    }
    bf16_t* o = out + (u64)t * nh * hd + h * hd;
    const float inv = 1.f / l;
    if (tid < hd) o[tid] = f32_to_bf16(acc0 * inv);
    if (tid + ATT_TILE < hd) o[tid + ATT_TILE] = f32_to_bf16(acc1 * inv);
}
