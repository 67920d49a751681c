//! The engine core, single-threaded and synchronous: requests in, one step at a
//! time, events out. `handle.rs` runs it on its own thread.
//!
//! A step: schedule → copy-on-write block copies → one forward pass over the flat
//! batch → prompt logprobs → sample each sequence that reached its last token →
//! stop checks and detokenization → events.

use std::collections::HashMap;
use std::sync::Arc;

use peregrine_model::llama::Batch;
use peregrine_model::tokenizer::Tokenizer;
use tokio::sync::mpsc::UnboundedSender;

use crate::block_manager::BlockManager;
use crate::detokenizer::Detokenizer;
use crate::logprobs::token_logprob;
use crate::model_runner::ModelRunner;
use crate::request::{Event, FinishReason, GenerateRequest, RequestId, StopMatch, TokenLogprob, Usage};
use crate::sampler::Sampler;
use crate::scheduler::{ScheduledBatch, Scheduler, SchedulerConfig};
use crate::sequence::{SeqId, Sequence};
use crate::watermark::WatermarkConfig;

pub type EventSink = UnboundedSender<Event>;

#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub scheduler: SchedulerConfig,
    pub prefix_caching: bool,
    /// Longest prompt + output; `None`: the model's, capped by the KV pool.
    pub max_model_len: Option<usize>,
    pub watermark: WatermarkConfig,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            scheduler: SchedulerConfig::default(),
            prefix_caching: true,
            max_model_len: None,
            watermark: WatermarkConfig::default(),
        }
    }
}

/// Counters and gauges for metrics, updated every step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineStats {
    pub running: usize,
    pub waiting: usize,
    pub kv_usage: f64,
    pub num_blocks: usize,
    pub block_size: usize,
    pub prefix_cache_queries: u64,
    pub prefix_cache_hits: u64,
    pub steps: u64,
    pub last_step_tokens: usize,
    pub prompt_tokens_total: u64,
    pub generation_tokens_total: u64,
    pub preemptions_total: u64,
    pub requests_finished: u64,
}

/// One sample of a request (best_of of them).
struct Sample {
    /// `None` before the fork from sample 0 and after finishing.
    seq: Option<SeqId>,
    sampler: Sampler,
    detok: Option<Detokenizer>,
    output: Vec<u32>,
    cumulative_logprob: f64,
    finished: Option<FinishReason>,
    /// Events held back until all samples finish (best_of > n picks the best n).
    held: Vec<Event>,
}

struct RequestState {
    req: GenerateRequest,
    sink: EventSink,
    samples: Vec<Sample>,
    /// Longest the token sequence may grow (prompt + max_tokens, ≤ max_model_len).
    max_len: usize,
    prompt_logprobs: Vec<Option<TokenLogprob>>,
    forked: bool,
    /// `Event::Scheduled` was sent (a preempted request is not announced twice).
    scheduled: bool,
    cached_prompt_tokens: usize,
}

pub struct Engine {
    runner: Box<dyn ModelRunner>,
    scheduler: Scheduler,
    tokenizer: Option<Arc<Tokenizer>>,
    eos_token_ids: Vec<u32>,
    max_model_len: usize,
    watermark: WatermarkConfig,
    requests: HashMap<RequestId, RequestState>,
    /// Sequence → (request, sample index).
    owners: HashMap<SeqId, (RequestId, usize)>,
    next_seq: SeqId,
    stats: EngineStats,
}

impl Engine {
    /// `model_max_len`: the model's context length (max_position_embeddings).
    pub fn new(
        runner: Box<dyn ModelRunner>,
        tokenizer: Option<Arc<Tokenizer>>,
        eos_token_ids: Vec<u32>,
        model_max_len: usize,
        config: EngineConfig,
    ) -> Result<Self, String> {
        config.scheduler.validate()?;
        config.watermark.validate()?;
        let (num_blocks, block_size) = (runner.num_blocks(), runner.block_size());
        // A sequence must fit in the pool alone, so that preemption always makes progress.
        let pool_tokens = num_blocks * block_size;
        let max_model_len = config.max_model_len.unwrap_or(model_max_len).min(pool_tokens);
        if max_model_len < 2 {
            return Err(format!("max_model_len {max_model_len} leaves no room for a prompt and a token"));
        }
        let blocks = BlockManager::new(num_blocks, block_size, config.prefix_caching);
        let stats = EngineStats { num_blocks, block_size, ..Default::default() };
        Ok(Self {
            runner,
            scheduler: Scheduler::new(config.scheduler, blocks),
            tokenizer,
            eos_token_ids,
            max_model_len,
            watermark: config.watermark,
            requests: HashMap::new(),
            owners: HashMap::new(),
            next_seq: 0,
            stats,
        })
    }

    pub fn max_model_len(&self) -> usize {
        self.max_model_len
    }

    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    pub fn has_work(&self) -> bool {
        !self.requests.is_empty()
    }

    pub fn num_requests(&self) -> usize {
        self.requests.len()
    }

    /// Checks a request against this engine's limits (on top of `GenerateRequest::validate`).
    pub fn check(&self, req: &GenerateRequest) -> Result<(), String> {
        req.validate()?;
        let vocab = self.runner.vocab_size();
        if let Some(&t) = req.prompt.iter().find(|&&t| t as usize >= vocab) {
            return Err(format!("prompt contains token id {t}, outside the vocabulary of {vocab}"));
        }
        if req.prompt.len() >= self.max_model_len {
            return Err(format!(
                "prompt has {} tokens; this model's context is {} (max_model_len), leaving no room to generate",
                req.prompt.len(),
                self.max_model_len
            ));
        }
        let sc = &self.scheduler.config;
        if !sc.chunked_prefill && req.prompt.len() > sc.max_num_batched_tokens {
            return Err(format!(
                "prompt has {} tokens, over max_num_batched_tokens {} (chunked prefill is off)",
                req.prompt.len(),
                sc.max_num_batched_tokens
            ));
        }
        if req.best_of > sc.max_num_seqs {
            return Err(format!("best_of ({}) exceeds max_num_seqs ({})", req.best_of, sc.max_num_seqs));
        }
        Ok(())
    }

    /// Accepts a request; on refusal sends a lone `Error` event and returns the message.
    pub fn add_request(
        &mut self,
        id: RequestId,
        req: GenerateRequest,
        sink: EventSink,
    ) -> Result<(), String> {
        if let Err(e) = self.check(&req) {
            let _ = sink.send(Event::Error(e.clone()));
            return Err(e);
        }
        let max_len = match req.max_tokens {
            Some(m) => (req.prompt.len() + m).min(self.max_model_len),
            None => self.max_model_len,
        };
        let samples = (0..req.best_of).map(|i| self.new_sample(&req, i)).collect();
        let seq_id = self.alloc_seq_id();
        let mut seq =
            Sequence::new(seq_id, req.prompt.clone(), req.cache_salt, req.prompt_logprobs.is_none());
        seq.reserved_seats = req.best_of - 1;
        self.scheduler.add(seq);
        self.owners.insert(seq_id, (id, 0));
        let mut state = RequestState {
            req,
            sink,
            samples,
            max_len,
            prompt_logprobs: Vec::new(),
            forked: false,
            scheduled: false,
            cached_prompt_tokens: 0,
        };
        state.samples[0].seq = Some(seq_id);
        self.requests.insert(id, state);
        Ok(())
    }

    fn new_sample(&self, req: &GenerateRequest, index: usize) -> Sample {
        let mut params = req.params.clone();
        // Sample 0 keeps the request's seed (n = 1 reproduces); the others derive theirs.
        params.seed = params.seed.map(|s| s.wrapping_add((index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        // Stop strings are matched only once min_tokens are out (vLLM).
        let stop = if req.min_tokens == 0 { req.stop.clone() } else { Vec::new() };
        Sample {
            seq: None,
            sampler: Sampler::with_prompt(params, &req.prompt),
            detok: self.tokenizer.clone().map(|t| Detokenizer::new(t, stop, req.skip_special_tokens)),
            output: Vec::new(),
            cumulative_logprob: 0.0,
            finished: None,
            held: Vec::new(),
        }
    }

    fn alloc_seq_id(&mut self) -> SeqId {
        self.next_seq += 1;
        self.next_seq
    }

    /// Ends a request now: every unfinished sample finishes with `Abort`.
    pub fn abort(&mut self, id: RequestId) {
        let Some(state) = self.requests.get(&id) else { return };
        let open: Vec<usize> =
            (0..state.samples.len()).filter(|&i| state.samples[i].finished.is_none()).collect();
        for i in open {
            self.finish_sample(id, i, FinishReason::Abort, None);
        }
        self.complete_if_done(id);
    }

    /// Runs one step; returns the number of tokens computed (0: nothing to do).
    pub fn step(&mut self) -> usize {
        // Callers that went away: free their blocks before scheduling.
        let gone: Vec<RequestId> =
            self.requests.iter().filter(|(_, r)| r.sink.is_closed()).map(|(&id, _)| id).collect();
        for id in gone {
            self.abort(id);
        }
        let batch = self.scheduler.schedule();
        self.stats.preemptions_total = self.scheduler.total_preemptions;
        if batch.is_empty() {
            self.update_stats(0);
            return 0;
        }
        let n_tokens = batch.num_tokens();
        match self.execute(&batch) {
            Ok(()) => {}
            Err(e) => {
                // A failed forward pass fails the requests in it, not the engine.
                let ids: Vec<RequestId> =
                    batch.seqs.iter().filter_map(|s| self.owners.get(&s.id)).map(|o| o.0).collect();
                for id in ids {
                    if let Some(r) = self.requests.get(&id) {
                        let _ = r.sink.send(Event::Error(format!("forward pass failed: {e}")));
                    }
                    self.abort(id);
                }
            }
        }
        self.update_stats(n_tokens);
        n_tokens
    }

    fn update_stats(&mut self, n_tokens: usize) {
        let bm = self.scheduler.block_manager();
        let s = &mut self.stats;
        s.running = self.scheduler.num_running();
        s.waiting = self.scheduler.num_waiting();
        s.kv_usage = bm.usage();
        s.prefix_cache_queries = bm.stats().queries;
        s.prefix_cache_hits = bm.stats().hits;
        if n_tokens > 0 {
            s.steps += 1;
            s.last_step_tokens = n_tokens;
        }
    }

    fn execute(&mut self, batch: &ScheduledBatch) -> Result<(), String> {
        self.runner.copy_blocks(&batch.block_copies);
        // The flat batch, and for each scheduled sequence its rows of logits.
        let (mut tokens, mut positions, mut seq_idx, mut logits_for) = (vec![], vec![], vec![], vec![]);
        // (first row, row count, whether the rows score prompt tokens)
        let mut rows: Vec<(usize, usize, bool)> = Vec::with_capacity(batch.seqs.len());
        let mut tables: Vec<&[u32]> = Vec::with_capacity(batch.seqs.len());
        for s in batch.seqs.iter().filter(|s| s.start == 0) {
            if let Some(st) = self.owners.get(&s.id).and_then(|(r, _)| self.requests.get_mut(r)) {
                if !st.scheduled {
                    st.scheduled = true;
                    let _ = st.sink.send(Event::Scheduled);
                }
            }
        }
        for (i, s) in batch.seqs.iter().enumerate() {
            let seq = self.scheduler.get(s.id).expect("scheduled sequence exists");
            let base = tokens.len();
            let in_prompt = (s.start + s.len).min(seq.num_prompt) - s.start.min(seq.num_prompt);
            self.stats.prompt_tokens_total += in_prompt as u64;
            tokens.extend_from_slice(&seq.tokens[s.start..s.start + s.len]);
            positions.extend(s.start..s.start + s.len);
            seq_idx.extend(std::iter::repeat_n(i, s.len));
            tables.push(&seq.block_table);
            let wants_prompt = self.wants_prompt_logprobs(s.id) && s.start < seq.num_prompt;
            let first = logits_for.len();
            if wants_prompt {
                logits_for.extend(base..base + s.len);
            } else if s.samples {
                logits_for.push(base + s.len - 1);
            }
            rows.push((first, logits_for.len() - first, wants_prompt));
        }
        let logits = self
            .runner
            .execute(&Batch {
                tokens: &tokens,
                positions: &positions,
                seq: &seq_idx,
                block_tables: &tables,
                logits_for: &logits_for,
            })
            .map_err(|e| e.to_string())?;
        self.scheduler.on_computed(batch);
        let vocab = self.runner.vocab_size();
        for (s, &(first, count, wants_prompt)) in batch.seqs.iter().zip(&rows) {
            let row = |r: usize| &logits[(first + r) * vocab..(first + r + 1) * vocab];
            if wants_prompt {
                let chunk: Vec<&[f32]> = (0..count).map(row).collect();
                self.record_prompt_logprobs(s.id, s.start, &chunk);
            }
            if s.samples {
                self.on_logits(s.id, row(count - 1));
            }
        }
        Ok(())
    }

    fn wants_prompt_logprobs(&self, seq: SeqId) -> bool {
        self.owners
            .get(&seq)
            .and_then(|(r, i)| self.requests.get(r).map(|st| *i == 0 && st.req.prompt_logprobs.is_some()))
            .unwrap_or(false)
    }

    /// Logits rows of prompt positions `start..start + rows.len()`; the row at
    /// position p scores prompt token p + 1. Emits the event once the prompt is scored.
    fn record_prompt_logprobs(&mut self, seq: SeqId, start: usize, rows: &[&[f32]]) {
        let Some(&(rid, 0)) = self.owners.get(&seq) else { return };
        let Some(st) = self.requests.get_mut(&rid) else { return };
        let Some(top) = st.req.prompt_logprobs else { return };
        let n = st.req.prompt.len();
        if st.prompt_logprobs.len() == n {
            return; // recomputed after a preemption: already reported
        }
        if st.prompt_logprobs.is_empty() {
            st.prompt_logprobs.push(None);
        }
        for (j, row) in rows.iter().enumerate() {
            let p = start + j;
            if p + 1 < n && p + 1 == st.prompt_logprobs.len() {
                st.prompt_logprobs.push(Some(token_logprob(row, st.req.prompt[p + 1], top)));
            }
        }
        if st.prompt_logprobs.len() == n {
            let _ = st.sink.send(Event::PromptLogprobs(st.prompt_logprobs.clone()));
        }
    }

    /// The sequence's next-token logits: fork the other samples on the first one,
    /// then sample each.
    fn on_logits(&mut self, seq: SeqId, logits: &[f32]) {
        let Some(&(rid, index)) = self.owners.get(&seq) else { return };
        let mut samplers = vec![index];
        let st = &self.requests[&rid];
        if index == 0 && !st.forked {
            let children: Vec<SeqId> = (1..st.samples.len()).map(|_| self.alloc_seq_id()).collect();
            let cached = self.scheduler.get(seq).and_then(|s| s.cached_prompt_tokens).unwrap_or_default();
            let st = self.requests.get_mut(&rid).expect("owner has a request");
            st.forked = true;
            st.cached_prompt_tokens = cached;
            for (i, child) in (1..).zip(children) {
                self.scheduler.fork(seq, child);
                self.owners.insert(child, (rid, i));
                st.samples[i].seq = Some(child);
                samplers.push(i);
            }
        }
        for i in samplers {
            self.sample_one(rid, i, logits);
        }
        self.complete_if_done(rid);
    }

    fn sample_one(&mut self, rid: RequestId, i: usize, logits: &[f32]) {
        let st = self.requests.get_mut(&rid).expect("request");
        let sample = &mut st.samples[i];
        let seq_id = sample.seq.expect("sampling a live sequence");
        let seq = self.scheduler.get(seq_id).expect("live sequence");
        let n_generated = sample.output.len();
        let mut l = logits.to_vec();
        if n_generated < st.req.min_tokens {
            for &t in self.eos_token_ids.iter().chain(&st.req.stop_token_ids) {
                if let Some(v) = l.get_mut(t as usize) {
                    *v = f32::NEG_INFINITY;
                }
            }
        }
        if st.req.watermark {
            self.watermark.apply(*seq.tokens.last().expect("non-empty"), &mut l);
        }
        let token = sample.sampler.sample_owned(l);
        let need_logprob = st.req.logprobs.is_some() || st.req.best_of > st.req.n;
        let logprob = need_logprob.then(|| token_logprob(logits, token, st.req.logprobs.unwrap_or(0)));
        if let Some(lp) = &logprob {
            sample.cumulative_logprob += lp.logprob as f64;
        }
        sample.output.push(token);
        self.stats.generation_tokens_total += 1;
        let n_generated = sample.output.len();
        if n_generated == st.req.min_tokens && st.req.min_tokens > 0 {
            if let Some(d) = &mut sample.detok {
                d.set_stop(st.req.stop.clone());
            }
        }

        let is_eos = !st.req.ignore_eos && self.eos_token_ids.contains(&token);
        let finish = if is_eos {
            Some((FinishReason::Eos(token), logprob))
        } else if st.req.stop_token_ids.contains(&token) {
            Some((FinishReason::Stop(StopMatch::Token(token)), logprob))
        } else {
            let delta = sample.detok.as_mut().map(|d| d.push(token)).unwrap_or_default();
            let finish = if let Some(k) = delta.stopped_by {
                Some(FinishReason::Stop(StopMatch::Text(st.req.stop[k].clone())))
            } else if seq.len() + 1 >= st.max_len {
                Some(FinishReason::Length)
            } else {
                None
            };
            let last = finish.is_some();
            let event = Event::Token { index: i, token, text: delta.text, logprob, last };
            emit(&st.sink, &mut sample.held, st.req.best_of > st.req.n, event);
            finish.map(|f| (f, None))
        };
        match finish {
            Some((reason, logprob)) => self.finish_sample(rid, i, reason, logprob),
            None => self.scheduler.append_token(seq_id, token),
        }
    }

    /// `logprob`: of the token that ended the sample, when it was not sent as a `Token`.
    fn finish_sample(
        &mut self,
        rid: RequestId,
        i: usize,
        reason: FinishReason,
        logprob: Option<TokenLogprob>,
    ) {
        let st = self.requests.get_mut(&rid).expect("request");
        let sample = &mut st.samples[i];
        if let Some(seq) = sample.seq.take() {
            self.scheduler.finish(seq);
            self.owners.remove(&seq);
        }
        let text = match (&reason, sample.detok.as_mut()) {
            (FinishReason::Stop(StopMatch::Text(_)), _) | (_, None) => String::new(),
            (_, Some(d)) => d.finish(),
        };
        let computed = st.req.logprobs.is_some() || st.req.best_of > st.req.n;
        let event = Event::Finished {
            index: i,
            reason: reason.clone(),
            text,
            cumulative_logprob: computed.then_some(sample.cumulative_logprob),
            logprob,
        };
        emit(&st.sink, &mut sample.held, st.req.best_of > st.req.n, event);
        sample.finished = Some(reason);
    }

    /// When every sample has finished: the best `n` (if held back), usage, `Done`.
    fn complete_if_done(&mut self, rid: RequestId) {
        let Some(st) = self.requests.get(&rid) else { return };
        if st.samples.iter().any(|s| s.finished.is_none()) {
            return;
        }
        let mut st = self.requests.remove(&rid).expect("present");
        let n = st.req.n;
        let mut chosen: Vec<usize> = (0..st.samples.len()).collect();
        if st.req.best_of > n {
            chosen.sort_by(|&a, &b| {
                st.samples[b].cumulative_logprob.total_cmp(&st.samples[a].cumulative_logprob)
            });
            chosen.truncate(n);
            for (new_index, &i) in chosen.iter().enumerate() {
                for mut e in std::mem::take(&mut st.samples[i].held) {
                    match &mut e {
                        Event::Token { index, .. } | Event::Finished { index, .. } => *index = new_index,
                        _ => {}
                    }
                    let _ = st.sink.send(e);
                }
            }
        }
        let usage = Usage {
            prompt_tokens: st.req.prompt.len(),
            completion_tokens: chosen.iter().map(|&i| st.samples[i].output.len()).sum(),
            cached_prompt_tokens: st.cached_prompt_tokens,
        };
        let _ = st.sink.send(Event::Done(usage));
        self.stats.requests_finished += 1;
    }
}

/// Sends an event now, or holds it when the request's samples are ranked at the end.
fn emit(sink: &EventSink, held: &mut Vec<Event>, hold: bool, event: Event) {
    if hold {
        held.push(event);
    } else {
        let _ = sink.send(event);
    }
}
