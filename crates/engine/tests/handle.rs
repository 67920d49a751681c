//! The engine on its thread: streams, abort by dropping, explicit abort, stats,
//! graceful shutdown that finishes in-flight requests.

use std::sync::Arc;
use std::time::{Duration, Instant};

use peregrine_compute::cpu::{Cpu, KvDtype};
use peregrine_engine::engine::{Engine, EngineConfig};
use peregrine_engine::handle::EngineHandle;
use peregrine_engine::model_runner::{CpuModelRunner, KvCacheConfig};
use peregrine_engine::request::{Event, FinishReason, GenerateRequest};
use peregrine_engine::sampler::SamplingParams;
use peregrine_model::load::{LoadFormat, Model};
use peregrine_model::testing::default_model_path;

fn spawn() -> EngineHandle {
    let model = Arc::new(Model::load(default_model_path().to_str().unwrap(), LoadFormat::Auto).unwrap());
    let kv = KvCacheConfig { num_blocks: Some(256), ..KvCacheConfig::default() };
    let plan = kv.plan(&model.config).unwrap();
    let runner = CpuModelRunner::new(model.clone(), Cpu::new(2), plan, KvDtype::F32).unwrap();
    let engine = Engine::new(
        Box::new(runner),
        model.tokenizer.clone(),
        model.eos_token_ids.clone(),
        2048,
        EngineConfig::default(),
    )
    .unwrap();
    EngineHandle::spawn(engine)
}

fn long_request() -> GenerateRequest {
    let mut r = GenerateRequest::new(vec![504, 3575, 282, 4649, 314], SamplingParams::default());
    r.max_tokens = Some(400);
    r.ignore_eos = true;
    r
}

/// Waits until the engine reports `f` of its stats, or fails after 30 s.
fn wait_for(h: &EngineHandle, what: &str, f: impl Fn(&peregrine_engine::engine::EngineStats) -> bool) {
    let t = Instant::now();
    while !f(&h.stats()) {
        assert!(t.elapsed() < Duration::from_secs(30), "timed out waiting for {what}: {:?}", h.stats());
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn dropping_a_stream_aborts_its_request_and_frees_its_blocks() {
    let h = spawn();
    let mut s = h.submit(long_request());
    assert!(matches!(s.blocking_next(), Some(Event::Scheduled)));
    // A few tokens arrive, then the caller goes away.
    for _ in 0..3 {
        assert!(matches!(s.blocking_next(), Some(Event::Token { .. })));
    }
    assert!(h.stats().kv_usage > 0.0);
    drop(s);
    wait_for(&h, "KV usage back to zero", |st| st.running == 0 && st.kv_usage == 0.0);
    h.shutdown();
}

#[test]
fn abort_by_id_ends_the_stream_with_abort() {
    let h = spawn();
    let mut s = h.submit(long_request());
    assert!(matches!(s.blocking_next(), Some(Event::Scheduled)));
    assert!(matches!(s.blocking_next(), Some(Event::Token { .. })));
    h.abort(s.id);
    let mut reason = None;
    while let Some(e) = s.blocking_next() {
        if let Event::Finished { reason: r, .. } = e {
            reason = Some(r);
        }
    }
    assert_eq!(reason, Some(FinishReason::Abort));
    wait_for(&h, "KV usage back to zero", |st| st.kv_usage == 0.0);
    h.shutdown();
}

#[test]
fn shutdown_finishes_in_flight_requests_and_refuses_new_ones() {
    let h = spawn();
    let streams: Vec<_> = (0..4)
        .map(|i| {
            let mut r = long_request();
            r.max_tokens = Some(10 + i);
            h.submit(r)
        })
        .collect();
    wait_for(&h, "requests running", |st| st.running > 0);
    let h2 = h.clone();
    let stopper = std::thread::spawn(move || h2.shutdown());
    for (i, s) in streams.into_iter().enumerate() {
        let events = s.collect_blocking();
        let tokens = events.iter().filter(|e| matches!(e, Event::Token { .. })).count();
        assert_eq!(tokens, 10 + i, "request {i} was cut short");
        assert!(matches!(events.last(), Some(Event::Done(_))));
    }
    stopper.join().unwrap();
    let after = h.submit(long_request()).collect_blocking();
    assert!(matches!(after.as_slice(), [Event::Error(_)]), "{after:?}");
}
