//! The CUDA kernels against the CPU backend. `kernels_compile_to_ptx` needs only
//! libnvrtc (CI installs it from PyPI); the rest need a GPU and print that they
//! were skipped otherwise. Each check draws fresh random inputs, poisons the output
//! (0xff bytes: NaN) first, and compares ‖gpu − cpu‖ / ‖cpu‖ against a bf16 tolerance.
#![cfg(feature = "cuda")]

use half::bf16;
use peregrine_compute::cpu::{self, RopeStyle, RopeTable};
use peregrine_compute::cuda::{self, CudaLibrary, DeviceBuffer};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn random(rng: &mut StdRng, n: usize, scale: f32) -> Vec<f32> {
    (0..n).map(|_| (rng.random::<f32>() * 2.0 - 1.0) * scale).collect()
}

fn to_bf16(v: &[f32]) -> Vec<bf16> {
    v.iter().map(|&x| bf16::from_f32(x)).collect()
}

fn rounded(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| bf16::from_f32(x).to_f32()).collect()
}

/// ‖a − b‖ / ‖b‖; fails on any NaN (an unwritten, poisoned element).
fn rel_err(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    assert!(a.iter().all(|v| v.is_finite()), "GPU output has NaN/inf (unwritten elements?)");
    let num: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    let den: f64 = b.iter().map(|y| (*y as f64).powi(2)).sum();
    (num / den.max(1e-30)).sqrt()
}

fn f32s(v: &[bf16]) -> Vec<f32> {
    v.iter().map(|x| x.to_f32()).collect()
}

#[test]
fn kernels_compile_to_ptx() {
    if !CudaLibrary::Nvrtc.is_present() {
        eprintln!("SKIPPED: {}", CudaLibrary::Nvrtc.explain());
        return;
    }
    for arch in ["compute_80", "compute_90"] {
        let ptx = cuda::compile_ptx(arch).unwrap_or_else(|e| panic!("{arch}: {e}"));
        for name in ["paged_attention", "rope_kv_write", "add_rms_norm", "argmax_rows"] {
            assert!(ptx.contains(&format!(".entry {name}")), "{arch}: no entry {name} in the PTX");
        }
    }
}

#[test]
fn gemm_matches_cpu() {
    let Some(gpu) = cuda::gpu_or_skip() else { return };
    let mut rng = StdRng::seed_from_u64(1);
    for &(n, out, inp) in &[(1, 64, 64), (7, 300, 576), (33, 1536, 576), (128, 512, 4096)] {
        let x = rounded(&random(&mut rng, n * inp, 1.0));
        let w = rounded(&random(&mut rng, out * inp, 0.05));
        let mut want = vec![0f32; n * out];
        for i in 0..n {
            for o in 0..out {
                want[i * out + o] =
                    (0..inp).map(|k| x[i * inp + k] as f64 * w[o * inp + k] as f64).sum::<f64>() as f32;
            }
        }
        let xd = DeviceBuffer::from_host(&gpu, &to_bf16(&x)).unwrap();
        let wd = DeviceBuffer::from_host(&gpu, &to_bf16(&w)).unwrap();
        let mut yd = DeviceBuffer::<f32>::zeros(&gpu, n * out).unwrap();
        yd.fill_bytes(&gpu, 0xff).unwrap();
        gpu.matmul_bf16(xd.ptr(), wd.ptr(), yd.ptr(), n, out, inp).unwrap();
        let got = yd.download(&gpu, n * out).unwrap();
        let e = rel_err(&got, &want);
        assert!(e < 1e-4, "gemm {n}x{out}x{inp}: rel err {e}");
    }
}

#[test]
fn embedding_norm_silu_gather_match_cpu() {
    let Some(gpu) = cuda::gpu_or_skip() else { return };
    let mut rng = StdRng::seed_from_u64(2);
    for &(n, d, vocab, ff) in &[(1, 64, 100, 96), (5, 576, 1000, 1536), (37, 4096, 300, 14336)] {
        // embedding
        let table = rounded(&random(&mut rng, vocab * d, 1.0));
        let tokens: Vec<u32> = (0..n).map(|_| rng.random_range(0..vocab as u32)).collect();
        let td = DeviceBuffer::from_host(&gpu, &to_bf16(&table)).unwrap();
        let tokd = DeviceBuffer::from_host(&gpu, &tokens).unwrap();
        let mut x = DeviceBuffer::<f32>::zeros(&gpu, n * d).unwrap();
        x.fill_bytes(&gpu, 0xff).unwrap();
        gpu.embedding(tokd.ptr(), td.ptr(), x.ptr(), n, d).unwrap();
        let want: Vec<f32> = tokens.iter().flat_map(|&t| table[t as usize * d..][..d].to_vec()).collect();
        assert_eq!(x.download(&gpu, n * d).unwrap(), want, "embedding n={n} d={d}");

        // x += delta; out = rms_norm(x) · w
        let delta = random(&mut rng, n * d, 0.5);
        let w = random(&mut rng, d, 1.0);
        let (dd, wd) =
            (DeviceBuffer::from_host(&gpu, &delta).unwrap(), DeviceBuffer::from_host(&gpu, &w).unwrap());
        let mut out = DeviceBuffer::<bf16>::zeros(&gpu, n * d).unwrap();
        out.fill_bytes(&gpu, 0xff).unwrap();
        gpu.add_rms_norm(x.ptr(), Some(dd.ptr()), wd.ptr(), out.ptr(), n, d, 1e-5).unwrap();
        let mut x_ref = want.clone();
        cpu::add_in_place(&mut x_ref, &delta);
        let mut norm_ref = vec![0f32; n * d];
        cpu::rms_norm(&x_ref, &w, 1e-5, &mut norm_ref);
        assert!(rel_err(&x.download(&gpu, n * d).unwrap(), &x_ref) < 1e-6, "residual add");
        let e = rel_err(&f32s(&out.download(&gpu, n * d).unwrap()), &norm_ref);
        assert!(e < 5e-3, "rms_norm n={n} d={d}: {e}");

        // silu(gate) · up from one [gate | up] row
        let gu = random(&mut rng, n * 2 * ff, 4.0);
        let gud = DeviceBuffer::from_host(&gpu, &gu).unwrap();
        let mut act = DeviceBuffer::<bf16>::zeros(&gpu, n * ff).unwrap();
        act.fill_bytes(&gpu, 0xff).unwrap();
        gpu.silu_mul(gud.ptr(), act.ptr(), n, ff).unwrap();
        let (mut g, mut u) = (Vec::new(), Vec::new());
        for row in gu.chunks_exact(2 * ff) {
            g.extend_from_slice(&row[..ff]);
            u.extend_from_slice(&row[ff..]);
        }
        let mut act_ref = vec![0f32; n * ff];
        cpu::silu_mul(&g, &u, &mut act_ref);
        let e = rel_err(&f32s(&act.download(&gpu, n * ff).unwrap()), &act_ref);
        assert!(e < 5e-3, "silu_mul: {e}");

        // gather rows of the normed activations
        let rows: Vec<u32> = (0..n as u32).rev().step_by(2).collect();
        let rd = DeviceBuffer::from_host(&gpu, &rows).unwrap();
        let g_out = DeviceBuffer::<bf16>::zeros(&gpu, rows.len() * d).unwrap();
        gpu.gather_rows(out.ptr(), rd.ptr(), g_out.ptr(), rows.len(), d).unwrap();
        let normed = out.download(&gpu, n * d).unwrap();
        let want: Vec<bf16> = rows.iter().flat_map(|&r| normed[r as usize * d..][..d].to_vec()).collect();
        assert_eq!(g_out.download(&gpu, rows.len() * d).unwrap(), want, "gather");
    }
}

#[test]
fn argmax_and_dummy_fill() {
    let Some(gpu) = cuda::gpu_or_skip() else { return };
    let mut rng = StdRng::seed_from_u64(3);
    let (m, vocab) = (5, 49_152);
    let logits = random(&mut rng, m * vocab, 10.0);
    let ld = DeviceBuffer::from_host(&gpu, &logits).unwrap();
    let od = DeviceBuffer::<u32>::zeros(&gpu, m).unwrap();
    gpu.argmax_rows(ld.ptr(), od.ptr(), m, vocab).unwrap();
    let want: Vec<u32> = logits
        .chunks_exact(vocab)
        .map(|r| {
            r.iter().enumerate().fold((0, f32::MIN), |b, (i, &v)| if v > b.1 { (i, v) } else { b }).0 as u32
        })
        .collect();
    assert_eq!(od.download(&gpu, m).unwrap(), want);

    let n = 1_000_003;
    let mut p = DeviceBuffer::<bf16>::zeros(&gpu, n).unwrap();
    p.fill_bytes(&gpu, 0xff).unwrap();
    gpu.fill_uniform(p.ptr(), n, 42, -0.5, 0.5).unwrap();
    let v = f32s(&p.download(&gpu, n).unwrap());
    assert!(v.iter().all(|x| (-0.5..=0.5).contains(x)), "values outside [lo, hi)");
    let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
    let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n as f64;
    assert!(mean.abs() < 2e-3 && (var - 1.0 / 12.0).abs() < 2e-3, "mean {mean} var {var}");
}

/// A paged layout: each sequence's positions live in shuffled blocks of the pool.
struct Paged {
    block_size: usize,
    tables: Vec<Vec<u32>>,
}

impl Paged {
    fn new(rng: &mut StdRng, lens: &[usize], block_size: usize) -> (Self, usize) {
        let need: Vec<usize> = lens.iter().map(|l| l.div_ceil(block_size)).collect();
        let total: usize = need.iter().sum::<usize>() + 3;
        let mut ids: Vec<u32> = (0..total as u32).collect();
        for i in (1..ids.len()).rev() {
            ids.swap(i, rng.random_range(0..=i));
        }
        let mut it = ids.into_iter();
        let tables = need.iter().map(|&k| it.by_ref().take(k).collect()).collect();
        (Self { block_size, tables }, total)
    }

    fn slot(&self, seq: usize, pos: usize) -> usize {
        self.tables[seq][pos / self.block_size] as usize * self.block_size + pos % self.block_size
    }
}

#[test]
fn rope_kv_write_and_paged_attention_match_cpu() {
    let Some(gpu) = cuda::gpu_or_skip() else { return };
    let mut rng = StdRng::seed_from_u64(4);
    // (heads, kv heads, head dim, block size, sequence lengths, interleaved, bias)
    type Case<'a> = (usize, usize, usize, usize, &'a [usize], bool, bool);
    let cases: &[Case] = &[
        (9, 3, 64, 16, &[1, 17, 40], true, false),
        (32, 8, 128, 16, &[300, 5, 129], false, true),
        (4, 4, 256, 8, &[70], false, false),
    ];
    for &(nh, nkv, hd, bs, lens, interleaved, with_bias) in cases {
        let (q_dim, kv_dim) = (nh * hd, nkv * hd);
        let row = q_dim + 2 * kv_dim;
        let (paged, num_blocks) = Paged::new(&mut rng, lens, bs);
        // The batch holds every position of every sequence (a prefill of all of them).
        let mut seq_of = Vec::new();
        let mut positions = Vec::new();
        for (s, &l) in lens.iter().enumerate() {
            for p in 0..l {
                seq_of.push(s as u32);
                positions.push(p as i32);
            }
        }
        let n = positions.len();
        let slots: Vec<i64> =
            (0..n).map(|i| paged.slot(seq_of[i] as usize, positions[i] as usize) as i64).collect();
        let qkv = random(&mut rng, n * row, 1.0);
        let bias = random(&mut rng, row, 0.5);
        let rope = RopeTable {
            inv_freq: (0..hd / 2).map(|i| 1.0 / 10000f32.powf(2.0 * i as f32 / hd as f32)).collect(),
            attention_factor: 1.0,
            style: if interleaved { RopeStyle::Interleaved } else { RopeStyle::Neox },
        };

        // CPU reference: bias, rope, bf16-rounded K/V (the GPU cache is bf16), attention in f64.
        let mut r = qkv.clone();
        for (i, chunk) in r.chunks_exact_mut(row).enumerate() {
            if with_bias {
                cpu::add_in_place(chunk, &bias);
            }
            cpu::rope_in_place(&mut chunk[..q_dim], hd, positions[i] as usize, &rope);
            cpu::rope_in_place(&mut chunk[q_dim..q_dim + kv_dim], hd, positions[i] as usize, &rope);
        }
        let ks: Vec<Vec<f32>> = (0..n).map(|i| rounded(&r[i * row + q_dim..][..kv_dim])).collect();
        let vs: Vec<Vec<f32>> = (0..n).map(|i| rounded(&r[i * row + q_dim + kv_dim..][..kv_dim])).collect();
        let k_of = |i: usize| ks[i].clone();
        let v_of = |i: usize| vs[i].clone();
        let scale = 1.0 / (hd as f32).sqrt();
        let mut want = vec![0f32; n * q_dim];
        for t in 0..n {
            let first = t - positions[t] as usize; // this sequence's position 0 in the batch
            for h in 0..nh {
                let kvh = h / (nh / nkv);
                let q = &r[t * row + h * hd..][..hd];
                let scores: Vec<f64> = (first..=t)
                    .map(|j| {
                        let k = &ks[j][kvh * hd..][..hd];
                        q.iter().zip(k).map(|(a, b)| (*a * scale) as f64 * *b as f64).sum()
                    })
                    .collect();
                let mx = scores.iter().cloned().fold(f64::MIN, f64::max);
                let ws: Vec<f64> = scores.iter().map(|s| (s - mx).exp()).collect();
                let z: f64 = ws.iter().sum();
                for d in 0..hd {
                    let acc: f64 = (first..=t).zip(&ws).map(|(j, w)| w * vs[j][kvh * hd + d] as f64).sum();
                    want[t * q_dim + h * hd + d] = (acc / z) as f32;
                }
            }
        }

        let qkv_d = DeviceBuffer::from_host(&gpu, &qkv).unwrap();
        let bias_d = DeviceBuffer::from_host(&gpu, &bias).unwrap();
        let pos_d = DeviceBuffer::from_host(&gpu, &positions).unwrap();
        let slot_d = DeviceBuffer::from_host(&gpu, &slots).unwrap();
        let freq_d = DeviceBuffer::from_host(&gpu, &rope.inv_freq).unwrap();
        let rows = num_blocks * bs;
        let mut kc = DeviceBuffer::<bf16>::zeros(&gpu, rows * kv_dim).unwrap();
        let mut vc = DeviceBuffer::<bf16>::zeros(&gpu, rows * kv_dim).unwrap();
        kc.fill_bytes(&gpu, 0xff).unwrap();
        vc.fill_bytes(&gpu, 0xff).unwrap();
        gpu.rope_kv_write(
            qkv_d.ptr(),
            with_bias.then(|| bias_d.ptr()),
            pos_d.ptr(),
            slot_d.ptr(),
            freq_d.ptr(),
            kc.ptr(),
            vc.ptr(),
            n,
            (nh, nkv, hd),
            interleaved,
            1.0,
        )
        .unwrap();
        // The rotated q in place and the cache rows.
        let got_qkv = qkv_d.download(&gpu, n * row).unwrap();
        let got_q: Vec<f32> = got_qkv.chunks_exact(row).flat_map(|c| c[..q_dim].to_vec()).collect();
        let want_q: Vec<f32> = r.chunks_exact(row).flat_map(|c| c[..q_dim].to_vec()).collect();
        assert!(rel_err(&got_q, &want_q) < 1e-5, "rope q");
        // K/V rows in the cache: bf16 of the rotated values (an FMA on the GPU can move
        // a value across a bf16 rounding boundary, so compare within bf16 precision).
        let (kc_h, vc_h) = (
            f32s(&kc.download(&gpu, rows * kv_dim).unwrap()),
            f32s(&vc.download(&gpu, rows * kv_dim).unwrap()),
        );
        let (mut got_k, mut got_v, mut want_k, mut want_v) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (i, &slot) in slots.iter().enumerate() {
            got_k.extend_from_slice(&kc_h[slot as usize * kv_dim..][..kv_dim]);
            got_v.extend_from_slice(&vc_h[slot as usize * kv_dim..][..kv_dim]);
            want_k.extend(k_of(i));
            want_v.extend(v_of(i));
        }
        assert!(rel_err(&got_k, &want_k) < 4e-3, "K rows in the cache");
        assert!(rel_err(&got_v, &want_v) < 4e-3, "V rows in the cache");

        let tables: Vec<u32> = {
            let mb = paged.tables.iter().map(Vec::len).max().unwrap();
            paged.tables.iter().flat_map(|t| t.iter().copied().chain(std::iter::repeat(0)).take(mb)).collect()
        };
        let max_blocks = tables.len() / lens.len();
        let tables_d = DeviceBuffer::from_host(&gpu, &tables).unwrap();
        let seq_d = DeviceBuffer::from_host(&gpu, &seq_of).unwrap();
        let mut out = DeviceBuffer::<bf16>::zeros(&gpu, n * q_dim).unwrap();
        out.fill_bytes(&gpu, 0xff).unwrap();
        gpu.paged_attention(&cuda::AttentionArgs {
            q: qkv_d.ptr(),
            q_stride: row,
            k_cache: kc.ptr(),
            v_cache: vc.ptr(),
            block_tables: tables_d.ptr(),
            max_blocks,
            seq_of: seq_d.ptr(),
            positions: pos_d.ptr(),
            out: out.ptr(),
            n,
            n_heads: nh,
            n_kv_heads: nkv,
            head_dim: hd,
            block_size: bs,
            scale,
        })
        .unwrap();
        let e = rel_err(&f32s(&out.download(&gpu, n * q_dim).unwrap()), &want);
        assert!(e < 1e-2, "attention nh={nh} nkv={nkv} hd={hd}: rel err {e}");
    }
}
