// RoPE on q and k, then K/V written into the paged cache: one pass over the QKV
// projection. Angles in double: positions in the tens of thousands lose digits in
// float before the sin/cos (the CPU backend does the same).
//
// grid: n tokens, block: 128.
// qkv:   [n, (nh + 2·nkv)·hd] f32, q rotated in place (attention reads it from here)
// bias:  [(nh + 2·nkv)·hd] f32 or null (Qwen2), added before the rotation
// slots: [n] the cache row of each token (block · block_size + offset)
// k_cache, v_cache: [num_blocks · block_size, nkv, hd] bf16 (this layer's)
extern "C" __global__ void rope_kv_write(float* qkv, const float* bias, const int* positions,
                                         const long long* slots, const float* inv_freq, bf16_t* k_cache,
                                         bf16_t* v_cache, int nh, int nkv, int hd, int interleaved,
                                         float attn_factor) {
    const int t = blockIdx.x;
    const int q_dim = nh * hd, kv_dim = nkv * hd, half = hd / 2;
    float* row = qkv + (u64)t * (q_dim + 2 * kv_dim);
    if (bias) {
        for (int j = threadIdx.x; j < q_dim + 2 * kv_dim; j += blockDim.x) row[j] += bias[j];
        __syncthreads();
    }
    const double pos = (double)positions[t];
    // Rotate the (nh + nkv) heads of q and k: one (head, pair) per thread-iteration.
    for (int p = threadIdx.x; p < (nh + nkv) * half; p += blockDim.x) {
        int head = p / half, i = p % half;
        float* h = row + head * hd;  // k heads follow q heads in the row
        double s, c;
        sincos(pos * (double)inv_freq[i], &s, &c);
        float sf = (float)s * attn_factor, cf = (float)c * attn_factor;
        int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
        float x0 = h[a], x1 = h[b];
        h[a] = x0 * cf - x1 * sf;
        h[b] = x0 * sf + x1 * cf;
    }
    __syncthreads();
    const long long slot = slots[t];
    const float* k = row + q_dim;
    const float* v = k + kv_dim;
    bf16_t* kc = k_cache + slot * kv_dim;
    bf16_t* vc = v_cache + slot * kv_dim;
    for (int j = threadIdx.x; j < kv_dim; j += blockDim.x) {
        kc[j] = f32_to_bf16(k[j]);
        vc[j] = f32_to_bf16(v[j]);
    }
}
