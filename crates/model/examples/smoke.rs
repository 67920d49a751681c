use peregrine_compute::cpu::{Cpu, KvDtype, RopeStyle};
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
    let mut kv = m.new_kv_pool(1, 16, KvDtype::F32);
    let batch =
        Batch { tokens: &toks, positions: &pos, seq: &[0; 5], block_tables: &[&[0]], logits_for: &[4] };
    let t = std::time::Instant::now();
    let l = m.forward(&cpu, &batch, &mut kv).unwrap();
    let (best, v) = l.iter().enumerate().max_by(|a, b| a.1.partial_cmp(b.1).unwrap()).unwrap();
    println!("top {best} {v} paris={} {:?}", l[7042], t.elapsed());
}
