//! The benchmarks end to end on the smallest reference model (tiny-spm-gguf: 2 MB,
//! vocabulary of 1000), driving a real engine.

use std::sync::Arc;

use peregrine_bench::latency::{self, LatencyConfig};
use peregrine_bench::throughput;
use peregrine_bench::{run_to_completion, to_json_string, BenchRequest};
use peregrine_compute::cpu::{Cpu, KvDtype};
use peregrine_engine::engine::{Engine, EngineConfig};
use peregrine_engine::model_runner::{CpuModelRunner, KvCacheConfig};
use peregrine_model::load::{LoadFormat, Model};
use peregrine_model::testing::reference_dir;
use serde_json::Value;

fn tiny_model() -> Arc<Model> {
    let path = reference_dir("tiny-spm-gguf").join("tiny-spm.gguf");
    Arc::new(
        Model::load(path.to_str().unwrap(), LoadFormat::Auto)
            .expect("tiny-spm-gguf (run python3 scripts/reference.py)"),
    )
}

fn engine(model: &Arc<Model>, blocks: usize) -> Engine {
    let kv = KvCacheConfig { block_size: 16, dtype: KvDtype::F32, memory_bytes: 0, num_blocks: Some(blocks) };
    let plan = kv.plan(&model.config).unwrap();
    let runner = CpuModelRunner::new(model.clone(), Cpu::new(2), plan, kv.dtype).unwrap();
    Engine::new(
        Box::new(runner),
        model.tokenizer.clone(),
        model.eos_token_ids.clone(),
        model.config.max_position_embeddings,
        EngineConfig::default(),
    )
    .unwrap()
}

#[test]
fn latency_runs_every_request_to_its_length_and_reports_vllms_json() {
    let model = tiny_model();
    let mut e = engine(&model, 64);
    let config = LatencyConfig {
        batch_size: 2,
        input_len: 4,
        output_len: 4,
        num_iters_warmup: 1,
        num_iters: 2,
        seed: 0,
        vocab_size: model.config.vocab_size,
        progress: false,
    };
    let r = latency::run(&mut e, &config).unwrap();
    assert!(!e.has_work());
    // Two timed iterations of two requests, each exactly output_len tokens.
    assert_eq!(r.output_tokens, vec![4; 4]);
    assert_eq!(r.prompt_tokens, 2 * 2 * 4);
    assert_eq!(r.latencies.len(), 2);
    assert!(r.latencies.iter().all(|&s| s > 0.0));
    let lo = r.latencies.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = r.latencies.iter().copied().fold(0.0, f64::max);
    assert!(lo <= r.avg_latency && r.avg_latency <= hi);

    let json: Value = serde_json::from_str(&to_json_string(&r)).unwrap();
    let keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(sorted, ["avg_latency", "latencies", "percentiles"]);
    assert_eq!(json["latencies"].as_array().unwrap().len(), 2);
    let pct = json["percentiles"].as_object().unwrap();
    for (p, v) in ["10", "25", "50", "75", "90", "99"].iter().zip(pct) {
        assert_eq!(p, v.0);
        let x = v.1.as_f64().unwrap();
        assert!(lo <= x && x <= hi, "{p}: {x}");
    }
    assert!(r.report().starts_with("Avg latency: "));
}

#[test]
fn throughput_counts_every_token_of_every_request() {
    let model = tiny_model();
    let mut e = engine(&model, 64);
    let mut reqs = throughput::random_requests(6, 5, 3, model.config.vocab_size, 1);
    reqs.push(BenchRequest { prompt: vec![1, 2, 3], output_len: 7 });
    let r = throughput::run(&mut e, &reqs, false).unwrap();
    assert!(!e.has_work());
    assert_eq!(r.num_requests, 7);
    assert_eq!(r.total_prompt_tokens, 6 * 5 + 3);
    assert_eq!(r.total_output_tokens, 6 * 3 + 7);
    assert_eq!(r.total_num_tokens, 33 + 25);
    assert!((r.requests_per_second - 7.0 / r.elapsed_time).abs() < 1e-9);
    let json: Value = serde_json::from_str(&to_json_string(&r)).unwrap();
    let mut keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "elapsed_time",
            "num_requests",
            "output_tokens_per_second",
            "requests_per_second",
            "tokens_per_second",
            "total_num_tokens"
        ]
    );
}

#[test]
fn sharegpt_through_the_models_tokenizer() {
    let model = tiny_model();
    let tok = model.tokenizer().unwrap();
    let dir = std::env::temp_dir().join(format!("peregrine-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("sharegpt.json");
    let data = serde_json::json!([
        {"conversations": [
            {"from": "human", "value": "Tell me a story about a dragon and a knight."},
            {"from": "gpt", "value": "Once upon a time, a dragon met a knight in the woods."}]},
        {"conversations": [{"from": "human", "value": ""}, {"from": "gpt", "value": "Hello there, friend!"}]},
    ]);
    std::fs::write(&path, data.to_string()).unwrap();
    let reqs = throughput::load_sharegpt(&path, tok, 10, 0, None).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    // An empty prompt is under 4 tokens even with BOS: only the story is kept.
    assert_eq!(reqs.len(), 1);
    let prompt = tok.encode("Tell me a story about a dragon and a knight.", true).unwrap();
    let completion = tok.encode("Once upon a time, a dragon met a knight in the woods.", true).unwrap();
    assert_eq!(reqs[0], BenchRequest { prompt, output_len: completion.len() });

    let mut e = engine(&model, 64);
    let r = throughput::run(&mut e, &reqs, false).unwrap();
    assert_eq!(r.total_output_tokens, reqs[0].output_len);
}

#[test]
fn requests_that_cannot_run_to_length_are_refused_before_timing() {
    let model = tiny_model();
    // 4 blocks of 16: max_model_len 64.
    let mut e = engine(&model, 4);
    let reqs = vec![BenchRequest { prompt: vec![5; 40], output_len: 30 }];
    let err = throughput::run(&mut e, &reqs, false).unwrap_err().to_string();
    assert!(err.contains("max_model_len"), "{err}");
    let outside = vec![BenchRequest { prompt: vec![5_000], output_len: 2 }];
    let err = throughput::run(&mut e, &outside, false).unwrap_err().to_string();
    assert!(err.contains("vocabulary"), "{err}");
    assert!(!e.has_work());
    // The engine still works afterwards.
    let done =
        run_to_completion(&mut e, &[BenchRequest { prompt: vec![5; 8], output_len: 3 }], || {}).unwrap();
    assert_eq!(done[0].tokens, 3);
}
