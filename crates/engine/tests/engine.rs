//! The engine end to end on real models: batching, chunking, prefix caching and
//! preemption must not change what a request generates; the sampler's request
//! options (n, best_of, logprobs, stops, min_tokens, seeds) behave as specified.
//!
//! Greedy outputs of one request alone and inside a batch come from different
//! kernels (one-token dot products vs the tiled GEMM), equal up to float rounding;
//! where two candidates are within `TIE` in logprob the continuations may
//! legitimately part, as between any two correct implementations (DESIGN §6).

use std::sync::Arc;

use peregrine_compute::cpu::{Cpu, KvDtype};
use peregrine_engine::engine::{Engine, EngineConfig};
use peregrine_engine::model_runner::{CpuModelRunner, KvCacheConfig};
use peregrine_engine::request::{Event, FinishReason, GenerateRequest, StopMatch, TokenLogprob, Usage};
use peregrine_engine::sampler::SamplingParams;
use peregrine_engine::scheduler::SchedulerConfig;
use peregrine_model::load::{LoadFormat, Model};
use peregrine_model::testing::{default_model_path, reference_dir};
use tokio::sync::mpsc::unbounded_channel;

/// Logprob gap under which two greedy continuations may part.
const TIE: f32 = 0.02;

fn load(path: &std::path::Path) -> Arc<Model> {
    Arc::new(Model::load(path.to_str().unwrap(), LoadFormat::Auto).expect("model (run scripts/setup.sh)"))
}

fn smollm2() -> Arc<Model> {
    load(&default_model_path())
}

struct Setup {
    blocks: usize,
    block_size: usize,
    budget: usize,
    max_seqs: usize,
    chunked: bool,
    prefix: bool,
    dtype: KvDtype,
}

impl Default for Setup {
    fn default() -> Self {
        Self {
            blocks: 512,
            block_size: 16,
            budget: 512,
            max_seqs: 64,
            chunked: true,
            prefix: true,
            dtype: KvDtype::F32,
        }
    }
}

fn engine(model: &Arc<Model>, s: Setup) -> Engine {
    let kv = KvCacheConfig {
        block_size: s.block_size,
        dtype: s.dtype,
        memory_bytes: 0,
        num_blocks: Some(s.blocks),
    };
    let plan = kv.plan(&model.config).unwrap();
    let runner = CpuModelRunner::new(model.clone(), Cpu::new(2), plan, s.dtype).unwrap();
    let config = EngineConfig {
        scheduler: SchedulerConfig {
            max_num_batched_tokens: s.budget,
            max_num_seqs: s.max_seqs,
            chunked_prefill: s.chunked,
            ..SchedulerConfig::default()
        },
        prefix_caching: s.prefix,
        ..EngineConfig::default()
    };
    Engine::new(Box::new(runner), model.tokenizer.clone(), model.eos_token_ids.clone(), 2048, config).unwrap()
}

/// One sample's result.
#[derive(Clone, Debug, Default)]
struct Out {
    tokens: Vec<u32>,
    text: String,
    logprobs: Vec<TokenLogprob>,
    finish: Option<FinishReason>,
}

/// A request's result: its samples, prompt logprobs, usage.
type RequestResult = (Vec<Out>, Option<Vec<Option<TokenLogprob>>>, Usage);

/// Runs requests to completion on the calling thread.
fn run(engine: &mut Engine, reqs: Vec<GenerateRequest>) -> Vec<RequestResult> {
    let mut rxs = Vec::new();
    for (i, r) in reqs.into_iter().enumerate() {
        let (tx, rx) = unbounded_channel();
        engine.add_request(i as u64, r, tx).expect("accepted");
        rxs.push(rx);
    }
    while engine.has_work() {
        engine.step();
    }
    rxs.into_iter()
        .map(|mut rx| {
            let (mut outs, mut plp, mut usage) = (Vec::<Out>::new(), None, None);
            while let Ok(e) = rx.try_recv() {
                let at = |outs: &mut Vec<Out>, i: usize| {
                    if outs.len() <= i {
                        outs.resize(i + 1, Out::default());
                    }
                };
                match e {
                    Event::Token { index, token, text, logprob, .. } => {
                        at(&mut outs, index);
                        outs[index].tokens.push(token);
                        outs[index].text.push_str(&text);
                        outs[index].logprobs.extend(logprob);
                    }
                    Event::Finished { index, reason, text, .. } => {
                        at(&mut outs, index);
                        outs[index].text.push_str(&text);
                        outs[index].finish = Some(reason);
                    }
                    Event::PromptLogprobs(p) => plp = Some(p),
                    Event::Scheduled => assert!(outs.is_empty() && plp.is_none(), "Scheduled comes first"),
                    Event::Done(u) => usage = Some(u),
                    Event::Error(e) => panic!("request failed: {e}"),
                }
            }
            (outs, plp, usage.expect("Done event"))
        })
        .collect()
}

fn greedy(prompt: Vec<u32>, max_tokens: usize) -> GenerateRequest {
    let mut r = GenerateRequest::new(prompt, SamplingParams::default());
    r.max_tokens = Some(max_tokens);
    r.ignore_eos = true;
    r.logprobs = Some(2);
    r
}

/// 16 prompts of mixed lengths (1 to ~100 tokens), some sharing a long prefix.
fn mixed_prompts(model: &Model) -> Vec<Vec<u32>> {
    let tok = model.tokenizer().unwrap();
    let shared = "You are a helpful assistant. Answer briefly and precisely, in plain English. ";
    let texts = [
        "The capital of France is",
        "1, 2, 3, 4,",
        "def fibonacci(n):",
        "Once upon a time",
        "Q: What is the boiling point of water?\nA:",
        "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown fox",
        "Rust is a programming language that",
        "Translate to French: Good morning, how are you today?",
    ];
    let mut prompts: Vec<Vec<u32>> = texts.iter().map(|t| tok.encode(t, true).unwrap()).collect();
    for t in &texts {
        prompts.push(tok.encode(&format!("{}{t}", shared.repeat(4)), true).unwrap());
    }
    prompts[0] = vec![504]; // a one-token prompt
    prompts
}

/// `got` equals `want` token for token, or parts where `want`'s top two were within TIE.
fn same_greedy(label: &str, want: &Out, got: &Out) {
    for (i, (&w, &g)) in want.tokens.iter().zip(&got.tokens).enumerate() {
        if w != g {
            let top = &want.logprobs[i].top;
            let gap = top[0].1 - top[1].1;
            assert!(gap < TIE, "{label}: token {i} is {g}, alone {w} (logprob gap {gap})");
            return;
        }
    }
    assert_eq!(want.tokens.len(), got.tokens.len(), "{label}: lengths differ");
}

fn check_batch_invariance(model: &Arc<Model>, prompts: &[Vec<u32>], max_tokens: usize) {
    let alone: Vec<Out> = prompts
        .iter()
        .map(|p| {
            run(&mut engine(model, Setup::default()), vec![greedy(p.clone(), max_tokens)])[0].0[0].clone()
        })
        .collect();
    for (chunked, prefix, budget) in
        [(true, true, 64), (true, false, 64), (false, true, 512), (false, false, 512)]
    {
        let mut e = engine(model, Setup { chunked, prefix, budget, ..Setup::default() });
        let reqs = prompts.iter().map(|p| greedy(p.clone(), max_tokens)).collect();
        let together = run(&mut e, reqs);
        for (i, (want, got)) in alone.iter().zip(&together).enumerate() {
            same_greedy(&format!("prompt {i}, chunked {chunked}, prefix caching {prefix}"), want, &got.0[0]);
        }
        assert_eq!(e.stats().kv_usage, 0.0, "blocks leaked");
    }
}

#[test]
fn smollm2_batched_chunked_and_cached_equal_each_alone() {
    let model = smollm2();
    check_batch_invariance(&model, &mixed_prompts(&model), 16);
}

#[test]
fn tiny_reference_models_batched_equal_each_alone() {
    for (name, file) in
        [("tiny-llama", ""), ("tiny-qwen2", ""), ("tiny-mistral", ""), ("tiny-spm-gguf", "tiny-spm.gguf")]
    {
        let dir = reference_dir(name);
        let model = load(&if file.is_empty() { dir } else { dir.join(file) });
        let vocab = model.config.vocab_size as u32;
        let prompts: Vec<Vec<u32>> = (0..16)
            .map(|i| (0..(1 + i * 7) as u32).map(|j| (j * 31 + i as u32 * 17 + 3) % vocab).collect())
            .collect();
        check_batch_invariance(&model, &prompts, 12);
    }
}

#[test]
fn preemption_under_a_tiny_pool_gives_the_unconstrained_output() {
    let model = smollm2();
    let prompts: Vec<Vec<u32>> = mixed_prompts(&model).into_iter().take(8).collect();
    let reqs = || prompts.iter().map(|p| greedy(p.clone(), 24)).collect::<Vec<_>>();
    let free = run(&mut engine(&model, Setup::default()), reqs());
    // 12 blocks of 16 tokens for 8 sequences of up to ~60 tokens each.
    let mut tight = engine(&model, Setup { blocks: 12, budget: 64, ..Setup::default() });
    let constrained = run(&mut tight, reqs());
    assert!(tight.stats().preemptions_total > 0, "the pool was meant to run out");
    for (i, (a, b)) in free.iter().zip(&constrained).enumerate() {
        same_greedy(&format!("prompt {i} under preemption"), &a.0[0], &b.0[0]);
    }
    assert_eq!(tight.stats().kv_usage, 0.0);
}

#[test]
fn prefix_cache_hits_skip_the_shared_prompt() {
    let model = smollm2();
    let prompts = mixed_prompts(&model);
    let mut e = engine(&model, Setup::default());
    let first = run(&mut e, vec![greedy(prompts[9].clone(), 4)]);
    assert_eq!(first[0].2.cached_prompt_tokens, 0);
    let second = run(&mut e, vec![greedy(prompts[10].clone(), 4)]);
    // Both start with the same ~60-token system text: its whole blocks hit.
    assert!(second[0].2.cached_prompt_tokens >= 48, "{:?}", second[0].2);
    assert!(e.stats().prefix_cache_hits >= 2);
}

#[test]
fn prompt_logprobs_score_the_tokens_a_run_generated() {
    // Generate greedily, then feed prompt + output as a prompt: its prompt logprobs at
    // the generated positions are the logprobs the generation reported.
    let model = smollm2();
    let mut e = engine(&model, Setup { budget: 16, max_seqs: 8, ..Setup::default() }); // chunked prompt logprobs
    let prompt = mixed_prompts(&model)[4].clone();
    let gen = run(&mut e, vec![greedy(prompt.clone(), 8)]).remove(0).0.remove(0);
    let mut full = prompt.clone();
    full.extend(&gen.tokens);
    let mut r = greedy(full.clone(), 1);
    r.prompt_logprobs = Some(3);
    let (_, plp, usage) = run(&mut e, vec![r]).remove(0);
    let plp = plp.expect("prompt logprobs");
    assert_eq!(plp.len(), full.len());
    assert!(plp[0].is_none());
    assert_eq!(usage.cached_prompt_tokens, 0, "prompt logprobs must compute every position");
    for (i, lp) in gen.logprobs.iter().enumerate() {
        let p = plp[prompt.len() + i].as_ref().unwrap();
        assert_eq!(p.token, gen.tokens[i]);
        assert!((p.logprob - lp.logprob).abs() < 1e-3, "position {i}: {} vs {}", p.logprob, lp.logprob);
        assert_eq!(p.top.len(), 3);
        assert_eq!(p.rank, 1, "greedy tokens rank first");
    }
}

#[test]
fn stops_min_tokens_and_max_tokens() {
    let model = smollm2();
    let tok = model.tokenizer().unwrap().clone();
    let prompt = tok.encode("1, 2, 3, 4, 5,", true).unwrap();
    let mut e = engine(&model, Setup::default());
    let base = run(&mut e, vec![greedy(prompt.clone(), 12)]).remove(0).0.remove(0);
    assert!(base.text.starts_with(" 6, 7, 8"), "{:?}", base.text);
    assert_eq!(base.finish, Some(FinishReason::Length));
    assert_eq!(base.tokens.len(), 12);

    // A stop string spanning tokens ends the text before it.
    let mut r = greedy(prompt.clone(), 12);
    r.stop = vec![" 8,".into()];
    let out = run(&mut e, vec![r]).remove(0).0.remove(0);
    assert_eq!(out.text, " 6, 7,");
    assert_eq!(out.finish, Some(FinishReason::Stop(StopMatch::Text(" 8,".into()))));

    // A stop token ends generation and is not part of the text.
    let stop_tok = base.tokens[2];
    let mut r = greedy(prompt.clone(), 12);
    r.stop_token_ids = vec![stop_tok];
    let out = run(&mut e, vec![r]).remove(0).0.remove(0);
    assert_eq!(out.tokens, base.tokens[..2]);
    assert_eq!(out.finish, Some(FinishReason::Stop(StopMatch::Token(stop_tok))));

    // min_tokens holds stop tokens off: the same token cannot end it before 5 tokens.
    let mut r = greedy(prompt.clone(), 12);
    r.stop_token_ids = vec![stop_tok];
    r.min_tokens = 5;
    let out = run(&mut e, vec![r]).remove(0).0.remove(0);
    assert!(out.tokens.len() >= 5 && !out.tokens.contains(&stop_tok), "{:?}", out.tokens);

    // eos ends a chat answer unless ignore_eos.
    let chat = tok
        .chat_template()
        .unwrap()
        .render(&serde_json::json!([{"role": "user", "content": "Say hi."}]), true, None)
        .unwrap();
    let mut r = greedy(tok.encode(&chat, false).unwrap(), 64);
    r.ignore_eos = false;
    let out = run(&mut e, vec![r]).remove(0).0.remove(0);
    assert!(matches!(out.finish, Some(FinishReason::Eos(2))), "{:?}", out.finish);
}

#[test]
fn n_and_best_of_fork_the_prompt_and_keep_the_likeliest() {
    let model = smollm2();
    let prompt = mixed_prompts(&model)[3].clone();
    let sampled = |n: usize, best_of: usize| {
        let mut r = GenerateRequest::new(
            prompt.clone(),
            SamplingParams { temperature: 1.0, seed: Some(11), ..Default::default() },
        );
        r.max_tokens = Some(10);
        r.ignore_eos = true;
        r.n = n;
        r.best_of = best_of;
        r
    };
    let mut e = engine(&model, Setup::default());
    let (outs, _, usage) = run(&mut e, vec![sampled(3, 3)]).remove(0);
    assert_eq!(outs.len(), 3);
    assert!(outs.iter().all(|o| o.tokens.len() == 10 && o.finish == Some(FinishReason::Length)));
    assert!(outs[0].tokens != outs[1].tokens || outs[1].tokens != outs[2].tokens, "samples should differ");
    assert_eq!(usage.completion_tokens, 30);
    // Seeded: the same request again gives the same samples.
    let again = run(&mut e, vec![sampled(3, 3)]).remove(0).0;
    assert_eq!(
        outs.iter().map(|o| &o.tokens).collect::<Vec<_>>(),
        again.iter().map(|o| &o.tokens).collect::<Vec<_>>()
    );

    // best_of 4, n 2: the two returned are the likeliest of the four, best first.
    let all4 = run(
        &mut e,
        vec![{
            let mut r = sampled(4, 4);
            r.logprobs = Some(0);
            r
        }],
    )
    .remove(0)
    .0;
    let score = |o: &Out| o.logprobs.iter().map(|l| l.logprob as f64).sum::<f64>();
    let mut scores: Vec<f64> = all4.iter().map(score).collect();
    scores.sort_by(|a, b| b.total_cmp(a));
    let best2 = run(&mut e, vec![sampled(2, 4)]).remove(0).0;
    assert_eq!(best2.len(), 2);
    let got: Vec<f64> = best2
        .iter()
        .map(|o| all4.iter().find(|a| a.tokens == o.tokens).map(score).expect("a sample of the 4"))
        .collect();
    assert!((got[0] - scores[0]).abs() < 1e-6 && (got[1] - scores[1]).abs() < 1e-6, "{got:?} vs {scores:?}");
    assert_eq!(e.stats().kv_usage, 0.0);
}

#[test]
fn a_seeded_request_samples_the_same_tokens_whatever_else_runs() {
    let model = smollm2();
    let prompts = mixed_prompts(&model);
    let seeded = || {
        let mut r = GenerateRequest::new(
            prompts[6].clone(),
            SamplingParams { temperature: 0.8, top_p: 0.95, seed: Some(1234), ..Default::default() },
        );
        r.max_tokens = Some(16);
        r.ignore_eos = true;
        r
    };
    let alone = run(&mut engine(&model, Setup::default()), vec![seeded()]).remove(0).0.remove(0);
    let mut reqs: Vec<GenerateRequest> = prompts
        .iter()
        .take(6)
        .map(|p| {
            let mut r =
                GenerateRequest::new(p.clone(), SamplingParams { temperature: 1.0, ..Default::default() });
            r.max_tokens = Some(16);
            r
        })
        .collect();
    reqs.insert(3, seeded());
    let together = run(&mut engine(&model, Setup { budget: 64, ..Setup::default() }), reqs);
    assert_eq!(together[3].0[0].tokens, alone.tokens);
}

#[test]
fn kv_cache_in_f16_and_bf16_generates_like_f32() {
    let model = smollm2();
    let prompts: Vec<Vec<u32>> = mixed_prompts(&model).into_iter().skip(1).take(4).collect();
    let reqs = || prompts.iter().map(|p| greedy(p.clone(), 8)).collect::<Vec<_>>();
    let f32_out = run(&mut engine(&model, Setup::default()), reqs());
    for dtype in [KvDtype::F16, KvDtype::Bf16] {
        let out = run(&mut engine(&model, Setup { dtype, ..Setup::default() }), reqs());
        // Rounded K/V move logits by ~1e-2: compare the first tokens, where margins are wide.
        for (a, b) in f32_out.iter().zip(&out) {
            assert_eq!(a.0[0].tokens[..2], b.0[0].tokens[..2], "{dtype}");
        }
    }
}

#[test]
fn requests_that_can_never_fit_are_refused_with_a_reason() {
    let model = smollm2();
    let mut e = engine(&model, Setup { blocks: 4, block_size: 16, ..Setup::default() }); // 64 tokens
    assert_eq!(e.max_model_len(), 64);
    let (tx, mut rx) = unbounded_channel();
    let err = e.add_request(1, greedy(vec![504; 80], 4), tx).unwrap_err();
    assert!(err.contains("max_model_len"), "{err}");
    assert!(matches!(rx.try_recv(), Ok(Event::Error(_))));
    let (tx, _rx) = unbounded_channel();
    let err = e.add_request(2, greedy(vec![60_000], 4), tx).unwrap_err();
    assert!(err.contains("outside the vocabulary"), "{err}");
    // A request that fits runs up to the context length and stops there.
    let out = run(&mut e, vec![greedy(vec![504; 60], 100)]).remove(0).0.remove(0);
    assert_eq!(out.tokens.len(), 4);
    assert_eq!(out.finish, Some(FinishReason::Length));
}
