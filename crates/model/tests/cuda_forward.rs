//! The GPU forward pass against the CPU one, end to end: the GPU decodes greedily
//! (a prompt prefill, then one token per step through the paged cache, blocks
//! shuffled), and the CPU scores the same sequence teacher-forced in one pass. The
//! GPU's pick must be the CPU's argmax wherever the CPU's top-2 gap exceeds a bf16
//! margin, and the logits must agree within a bf16 tolerance. Needs a GPU; prints
//! SKIPPED otherwise. Models: the default SmolLM2 GGUF and the reference fixtures
//! when present, and always a tiny random Llama (GQA, untied head).
#![cfg(feature = "cuda")]

use std::path::PathBuf;

use peregrine_compute::cpu::{Cpu, KvDtype, RopeStyle};
use peregrine_compute::cuda::{self, Gpu};
use peregrine_compute::quant::WeightFormat;
use peregrine_model::config::{Architecture, ModelConfig, RopeScaling};
use peregrine_model::llama::{Batch, Llama};
use peregrine_model::llama_cuda::{CudaKvCache, CudaLlama};
use peregrine_model::load::{LoadFormat, Model};
use peregrine_model::testing::{default_model_path, reference_dir};
use peregrine_model::weights::WeightSet;

const STEPS: usize = 32;
const BLOCK: usize = 16;

fn argmax(row: &[f32]) -> (usize, f32) {
    let mut idx: Vec<usize> = (0..row.len()).collect();
    idx.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
    (idx[0], row[idx[0]] - row[idx[1]])
}

/// Greedy decode on the GPU; returns the whole sequence.
fn gpu_greedy(gpu: &Gpu, model: &mut CudaLlama, config: &ModelConfig, prompt: &[u32]) -> Vec<u32> {
    let total = prompt.len() + STEPS;
    let nblocks = total.div_ceil(BLOCK);
    let kv = CudaKvCache::new(gpu, config, nblocks + 3, BLOCK).unwrap();
    // Blocks out of order, leaving some unused, so the block table is really read.
    let table: Vec<u32> = (0..nblocks as u32).map(|i| (i * 7 + 2) % (nblocks as u32 + 3)).collect();
    let mut seq = prompt.to_vec();
    let mut done = 0;
    while seq.len() < total {
        let tokens = &seq[done..];
        let positions: Vec<usize> = (done..seq.len()).collect();
        let seqs = vec![0usize; tokens.len()];
        let logits = model
            .forward(
                gpu,
                &Batch {
                    tokens,
                    positions: &positions,
                    seq: &seqs,
                    block_tables: &[&table],
                    logits_for: &[tokens.len() - 1],
                },
                &kv,
            )
            .unwrap();
        assert!(logits.iter().all(|v| v.is_finite()), "GPU logits have NaN/inf");
        done = seq.len();
        seq.push(argmax(&logits).0 as u32);
    }
    seq
}

/// All positions' logits on the CPU in one teacher-forced pass: [len, vocab].
fn cpu_logits(llama: &Llama, seq: &[u32]) -> Vec<f32> {
    let cpu = Cpu::new(2);
    let nblocks = seq.len().div_ceil(BLOCK);
    let mut kv = llama.new_kv_pool(nblocks, BLOCK, KvDtype::F32);
    let table: Vec<u32> = (0..nblocks as u32).collect();
    let positions: Vec<usize> = (0..seq.len()).collect();
    let rows: Vec<usize> = (0..seq.len()).collect();
    llama
        .forward(
            &cpu,
            &Batch {
                tokens: seq,
                positions: &positions,
                seq: &vec![0; seq.len()],
                block_tables: &[&table],
                logits_for: &rows,
            },
            &mut kv,
        )
        .unwrap()
}

fn check(name: &str, gpu: &Gpu, config: &ModelConfig, weights: &WeightSet, llama: &Llama, rope: RopeStyle) {
    let mut model = CudaLlama::new(gpu, config.clone(), weights, rope).unwrap();
    let prompt: Vec<u32> = [1u32, 504, 3458, 282, 4649, 314, 30, 22, 9, 1050, 77]
        .iter()
        .map(|&t| t % config.vocab_size as u32)
        .collect();
    let seq = gpu_greedy(gpu, &mut model, config, &prompt);
    let want = cpu_logits(llama, &seq);
    let v = config.vocab_size;
    // Logits the GPU produced for the same positions (teacher-forced on the GPU too).
    let kv = CudaKvCache::new(gpu, config, seq.len().div_ceil(BLOCK), BLOCK).unwrap();
    let table: Vec<u32> = (0..seq.len().div_ceil(BLOCK) as u32).collect();
    let positions: Vec<usize> = (0..seq.len()).collect();
    let rows: Vec<usize> = (0..seq.len()).collect();
    let got = model
        .forward(
            gpu,
            &Batch {
                tokens: &seq,
                positions: &positions,
                seq: &vec![0; seq.len()],
                block_tables: &[&table],
                logits_for: &rows,
            },
            &kv,
        )
        .unwrap();
    let num: f64 = got.iter().zip(&want).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
    let den: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum();
    let rel = (num / den).sqrt();
    // A pick can differ only where the CPU's top-2 gap is within the two backends'
    // disagreement on that row: require agreement wherever the gap exceeds twice the
    // row's largest logit difference (bf16 rounding), and count the near-ties.
    let (mut checked, mut same) = (0, 0);
    for p in prompt.len() - 1..seq.len() - 1 {
        let (cpu_row, gpu_row) = (&want[p * v..(p + 1) * v], &got[p * v..(p + 1) * v]);
        let (best, gap) = argmax(cpu_row);
        let diff = cpu_row.iter().zip(gpu_row).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        same += (seq[p + 1] as usize == best) as usize;
        if gap > 2.0 * diff {
            checked += 1;
            assert_eq!(
                seq[p + 1] as usize,
                best,
                "{name}: position {p}: GPU picked {}, CPU argmax {best} (gap {gap}, max diff {diff})",
                seq[p + 1]
            );
        }
    }
    eprintln!(
        "{name}: {STEPS} greedy GPU tokens, {same} equal to the CPU's argmax; all {checked} with a gap over \
         2× the row's max difference agree; logits rel err {rel:.2e}"
    );
    assert!(rel < 2e-2, "{name}: logits rel err {rel}");
}

fn check_file(name: &str, path: PathBuf) {
    let Some(gpu) = cuda::gpu_or_skip() else { return };
    if !path.exists() {
        eprintln!("SKIPPED {name}: {} not found", path.display());
        return;
    }
    let model = Model::load(path.to_str().unwrap(), LoadFormat::Auto).unwrap();
    check(name, &gpu, &model.config, &model.weights, model.llama().unwrap(), model.rope_style);
}

#[test]
fn smollm2_gguf_gpu_matches_cpu() {
    check_file("SmolLM2-135M Q4_1", default_model_path());
}

#[test]
fn tiny_llama_safetensors_gpu_matches_cpu() {
    check_file("tiny-llama (llama3 rope)", reference_dir("tiny-llama"));
}

#[test]
fn tiny_qwen2_gpu_matches_cpu() {
    check_file("tiny-qwen2 (qkv bias)", reference_dir("tiny-qwen2"));
}

#[test]
fn tiny_random_llama_gpu_matches_cpu() {
    let Some(gpu) = cuda::gpu_or_skip() else { return };
    let config = ModelConfig {
        architecture: Architecture::Llama,
        hidden_size: 256,
        intermediate_size: 688,
        num_layers: 3,
        num_heads: 8,
        num_kv_heads: 2,
        head_dim: 32,
        vocab_size: 5000,
        rms_norm_eps: 1e-5,
        rope_theta: 10000.0,
        rope_scaling: RopeScaling::None,
        max_position_embeddings: 512,
        tie_word_embeddings: false,
        qkv_bias: false,
    };
    let weights = WeightSet::dummy(&config, WeightFormat::BF16, 7).unwrap();
    let llama = Llama::new(config.clone(), &weights, RopeStyle::Neox).unwrap();
    check("tiny random llama", &gpu, &config, &weights, &llama, RopeStyle::Neox);
}
