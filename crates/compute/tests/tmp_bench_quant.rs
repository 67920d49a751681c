use peregrine_compute::quant::*;
use std::time::Instant;
#[test]
fn bench() {
    let n = 4096usize;
    let rows = 256usize;
    for f in [WeightFormat::Q4_1, WeightFormat::Q8_0, WeightFormat::Q4_0, WeightFormat::F32, WeightFormat::F16, WeightFormat::BF16, WeightFormat::Q4K, WeightFormat::Q5K, WeightFormat::Q6K, WeightFormat::Q5_0, WeightFormat::Q3K] {
        let rb = f.bytes_for(n as u64).unwrap() as usize;
        let mut data = vec![0u8; rb * rows];
        let mut s = 1u32;
        for b in data.iter_mut() { s = s.wrapping_mul(1664525).wrapping_add(1013904223); *b = (s >> 24) as u8; }
        // sane scales: zero them is fine for timing, but keep bytes random except make f16s finite by clearing exponent top bit
        let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.001).sin()).collect();
        for (name, func) in [("simd", dot_row as fn(WeightFormat,&[u8],&[f32])->f32), ("scalar", dot_row_scalar)] {
            let mut acc = 0f32;
            let t = Instant::now();
            let iters = 20;
            for _ in 0..iters { for r in data.chunks_exact(rb) { acc += func(f, r, &x); } }
            let dt = t.elapsed().as_secs_f64();
            let gb = (rb * rows * iters) as f64 / dt / 1e9;
            let gv = (n * rows * iters) as f64 / dt / 1e9;
            eprintln!("{f:5} {name:6} {gb:6.2} GB/s {gv:6.2} Gvalues/s  ({acc})");
        }
    }
}
