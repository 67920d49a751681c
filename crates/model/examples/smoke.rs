use peregrine_compute::cpu::{Cpu, RopeStyle};
use peregrine_model::{
    config::ModelConfig,
    gguf::GgufFile,
    llama::{Batch, Llama},
    weights::WeightSet,
};
fn main() {
    let f = GgufFile::open(&peregrine_model::testing::default_model_path()).unwrap();
    let cfg = ModelConfig::from_gguf(&f).unwrap();
    let w = WeightSet::from_gguf(&f);
    let m = Llama::new(cfg, &w, RopeStyle::Interleaved).unwrap();
    let cpu = Cpu::new(2);
    let toks = [504u32, 3575, 282, 4649, 314];
    let pos: Vec<usize> = (0..5).collect();
    let mut caches = vec![m.new_cache()];
    let t = std::time::Instant::now();
    let l = m
        .forward(&cpu, &Batch { tokens: &toks, positions: &pos, seq: &[0; 5], logits_for: &[4] }, &mut caches)
        .unwrap();
    let (best, v) = l.iter().enumerate().max_by(|a, b| a.1.partial_cmp(b.1).unwrap()).unwrap();
    println!("top {best} {v} paris={} {:?}", l[7042], t.elapsed());
}
