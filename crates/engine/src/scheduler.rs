//! Iteration-level (continuous) batching: which tokens of which sequences the next
//! forward pass computes.
//!
//! Each step takes, under a token budget (`max_num_batched_tokens`) and a sequence
//! cap (`max_num_seqs`):
//! 1. one token of every running sequence that is decoding, oldest first;
//! 2. the next chunk of every running sequence still in its prompt (chunked
//!    prefill: a long prompt spreads over steps, so decodes never wait behind it);
//! 3. new sequences from the waiting queue, first come first served, while blocks
//!    and budget last (FCFS: the head is never skipped).
//!
//! When a running sequence needs a block and none is free, the most recently
//! admitted sequence not yet scheduled this step is preempted: its blocks are freed
//! and it returns to the head of the queue to be recomputed later (its full blocks
//! usually survive in the prefix cache). No sequence is dropped for lack of memory;
//! the engine rejects at admission any sequence that could not fit alone.
//!
//! Without chunked prefill a prompt is computed in one step, and TGI's options
//! decide when new requests may join a running batch: only when at least
//! `waiting_served_ratio × running` of them can join at once, or after
//! `max_waiting_tokens` steps without joining.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::block_manager::{block_hash, BlockId, BlockManager};
use crate::sequence::{SeqId, SeqStatus, Sequence};

#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerConfig {
    pub max_num_batched_tokens: usize,
    pub max_num_seqs: usize,
    pub chunked_prefill: bool,
    /// TGI: new requests join a running batch only if at least ratio × running can.
    pub waiting_served_ratio: Option<f32>,
    /// TGI: … or after this many steps without any joining.
    pub max_waiting_tokens: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        Self {
            max_num_batched_tokens: 512,
            max_num_seqs: 256,
            chunked_prefill: true,
            waiting_served_ratio: None,
            max_waiting_tokens: 20,
        }
    }
}

impl SchedulerConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.max_num_seqs == 0 {
            return Err("max_num_seqs must be at least 1".into());
        }
        if self.max_num_batched_tokens < self.max_num_seqs {
            return Err(format!(
                "max_num_batched_tokens ({}) must be >= max_num_seqs ({})",
                self.max_num_batched_tokens, self.max_num_seqs
            ));
        }
        if let Some(r) = self.waiting_served_ratio {
            if !(r >= 0.0 && r.is_finite()) {
                return Err(format!("waiting_served_ratio must be >= 0, got {r}"));
            }
        }
        Ok(())
    }
}

/// Tokens `start..start + len` of sequence `id` are fed this step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScheduledSeq {
    pub id: SeqId,
    pub start: usize,
    pub len: usize,
    /// The chunk reaches the sequence's last token: the step yields its next-token logits.
    pub samples: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScheduledBatch {
    pub seqs: Vec<ScheduledSeq>,
    /// Copy-on-write block copies (src, dst) to perform before the forward pass.
    pub block_copies: Vec<(BlockId, BlockId)>,
    /// Sequences preempted by this step (back in the waiting queue).
    pub preempted: Vec<SeqId>,
}

impl ScheduledBatch {
    pub fn num_tokens(&self) -> usize {
        self.seqs.iter().map(|s| s.len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.seqs.is_empty()
    }
}

pub struct Scheduler {
    pub config: SchedulerConfig,
    blocks: BlockManager,
    seqs: HashMap<SeqId, Sequence>,
    waiting: VecDeque<SeqId>,
    /// In admission order.
    running: Vec<SeqId>,
    /// Steps since new sequences last joined (TGI's waiting tokens).
    steps_since_join: usize,
    pub total_preemptions: u64,
}

impl Scheduler {
    pub fn new(config: SchedulerConfig, blocks: BlockManager) -> Self {
        Self {
            config,
            blocks,
            seqs: HashMap::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            steps_since_join: 0,
            total_preemptions: 0,
        }
    }

    pub fn block_manager(&self) -> &BlockManager {
        &self.blocks
    }

    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    pub fn get(&self, id: SeqId) -> Option<&Sequence> {
        self.seqs.get(&id)
    }

    /// Queues a new sequence (at the back: FCFS).
    pub fn add(&mut self, mut seq: Sequence) {
        seq.status = SeqStatus::Waiting;
        self.waiting.push_back(seq.id);
        self.seqs.insert(seq.id, seq);
    }

    /// A running copy of `parent` sharing its blocks (another sample of its prompt).
    /// Call after the parent's prompt is computed and before either appends a token.
    pub fn fork(&mut self, parent: SeqId, id: SeqId) {
        let p = self.seqs.get_mut(&parent).expect("fork of an unknown sequence");
        p.reserved_seats = p.reserved_seats.saturating_sub(1);
        let mut child = p.clone();
        child.id = id;
        child.reserved_seats = 0;
        child.block_table = self.blocks.fork(&p.block_table);
        let at = self.running.iter().position(|&r| r == parent).map_or(self.running.len(), |i| i + 1);
        self.running.insert(at, id);
        self.seqs.insert(id, child);
    }

    /// Records a sampled token (fed at the next step).
    pub fn append_token(&mut self, id: SeqId, token: u32) {
        self.seqs.get_mut(&id).expect("unknown sequence").tokens.push(token);
    }

    /// Removes a sequence (finished or aborted), freeing its blocks; its full blocks
    /// stay in the prefix cache.
    pub fn finish(&mut self, id: SeqId) -> Option<Sequence> {
        let seq = self.seqs.remove(&id)?;
        match seq.status {
            SeqStatus::Running => self.running.retain(|&r| r != id),
            SeqStatus::Waiting => self.waiting.retain(|&w| w != id),
        }
        self.blocks.free(&seq.block_table);
        Some(seq)
    }

    /// Plans the next step. Empty when there is nothing to run.
    pub fn schedule(&mut self) -> ScheduledBatch {
        let mut batch = ScheduledBatch::default();
        let mut budget = self.config.max_num_batched_tokens;
        let mut scheduled: HashSet<SeqId> = HashSet::new();

        // 1–2. Running sequences: decodes first, then prompt chunks, each in admission order.
        let (decodes, prefills): (Vec<SeqId>, Vec<SeqId>) =
            self.running.iter().partition(|id| self.seqs[id].is_decode());
        for id in decodes.into_iter().chain(prefills) {
            if budget == 0 {
                break;
            }
            if !self.running.contains(&id) {
                continue; // preempted earlier in this loop
            }
            let seq = &self.seqs[&id];
            let remaining = seq.remaining();
            let len = if self.config.chunked_prefill { remaining.min(budget) } else { remaining };
            if len > budget {
                continue; // a whole prompt (no chunking) waits for a step with room
            }
            if self.reserve_blocks(id, len, &scheduled, &mut batch) {
                let seq = &self.seqs[&id];
                batch.seqs.push(ScheduledSeq {
                    id,
                    start: seq.num_computed,
                    len,
                    samples: seq.num_computed + len == seq.len(),
                });
                scheduled.insert(id);
                budget -= len;
            }
        }

        // 3. New sequences, unless memory ran short this step.
        if batch.preempted.is_empty() {
            let joined = self.admit(&mut budget, &mut batch);
            self.steps_since_join = if joined > 0 { 0 } else { self.steps_since_join + 1 };
        }
        batch
    }

    /// Makes room for `len` more tokens of running sequence `id`, preempting the most
    /// recently admitted unscheduled sequences while blocks are short. False when `id`
    /// itself had to be preempted.
    fn reserve_blocks(
        &mut self,
        id: SeqId,
        len: usize,
        scheduled: &HashSet<SeqId>,
        batch: &mut ScheduledBatch,
    ) -> bool {
        loop {
            let seq = self.seqs.get_mut(&id).expect("running sequence");
            let target = seq.num_computed + len;
            match self.blocks.append(&mut seq.block_table, target) {
                Ok(copy) => {
                    batch.block_copies.extend(copy);
                    return true;
                }
                Err(_) => {
                    let victim = *self
                        .running
                        .iter()
                        .rev()
                        .find(|v| !scheduled.contains(v))
                        .expect("the sequence itself is unscheduled");
                    self.preempt(victim);
                    batch.preempted.push(victim);
                    if victim == id {
                        return false;
                    }
                }
            }
        }
    }

    fn preempt(&mut self, id: SeqId) {
        self.requeue(id);
        self.seqs.get_mut(&id).expect("requeued sequence").preemptions += 1;
        self.total_preemptions += 1;
    }

    /// Frees a running sequence's blocks and puts it back at the head of the queue;
    /// it will be computed again from its first uncached token.
    fn requeue(&mut self, id: SeqId) {
        let seq = self.seqs.get_mut(&id).expect("running sequence");
        self.blocks.free(&seq.block_table);
        seq.block_table.clear();
        seq.num_computed = 0;
        seq.hashed_blocks = 0;
        seq.last_hash = None;
        seq.status = SeqStatus::Waiting;
        self.running.retain(|&r| r != id);
        self.waiting.push_front(id);
    }

    /// Admits waiting sequences in order; returns how many joined.
    fn admit(&mut self, budget: &mut usize, batch: &mut ScheduledBatch) -> usize {
        let mut joined: Vec<ScheduledSeq> = Vec::new();
        let mut spent = 0;
        while let Some(&id) = self.waiting.front() {
            let seq = &self.seqs[&id];
            let seats = 1 + seq.reserved_seats;
            if self.running.len() + seats > self.config.max_num_seqs || spent >= *budget {
                break;
            }
            let Ok((table, cached)) =
                self.blocks.allocate_with(&seq.tokens, seq.cache_key, seq.use_prefix_cache)
            else {
                break; // FCFS: wait for memory rather than let later ones pass
            };
            let remaining = seq.len() - cached;
            let left = *budget - spent;
            let len = if self.config.chunked_prefill { remaining.min(left) } else { remaining };
            if len > left {
                self.blocks.free(&table);
                break;
            }
            let seq = self.seqs.get_mut(&id).expect("waiting sequence");
            seq.block_table = table;
            seq.num_computed = cached;
            seq.cached_prompt_tokens.get_or_insert(cached.min(seq.num_prompt));
            seq.status = SeqStatus::Running;
            self.register_full_blocks(id);
            let seq = &self.seqs[&id];
            joined.push(ScheduledSeq { id, start: cached, len, samples: cached + len == seq.len() });
            self.waiting.pop_front();
            self.running.push(id);
            spent += len;
        }
        // TGI's rule for joining a running batch (only meaningful without chunking).
        if let (Some(ratio), false) = (self.config.waiting_served_ratio, self.config.chunked_prefill) {
            let already = self.running.len() - joined.len();
            let min_join = (already as f32 * ratio).floor() as usize;
            let waited_enough = self.steps_since_join >= self.config.max_waiting_tokens;
            if already > 0 && !waited_enough && joined.len() < min_join {
                // Undo this step's admissions (nothing was computed yet), last first.
                for s in joined.iter().rev() {
                    self.requeue(s.id);
                }
                return 0;
            }
        }
        *budget -= spent;
        let n = joined.len();
        batch.seqs.extend(joined);
        n
    }

    /// After the forward pass: the scheduled tokens' K/V are in the pool.
    pub fn on_computed(&mut self, batch: &ScheduledBatch) {
        for s in &batch.seqs {
            if let Some(seq) = self.seqs.get_mut(&s.id) {
                seq.num_computed = s.start + s.len;
            }
            self.register_full_blocks(s.id);
        }
    }

    /// Registers the sequence's newly completed full blocks in the prefix cache,
    /// continuing its hash chain.
    fn register_full_blocks(&mut self, id: SeqId) {
        let Some(seq) = self.seqs.get_mut(&id) else { return };
        let bs = self.blocks.block_size();
        while (seq.hashed_blocks + 1) * bs <= seq.num_computed {
            let i = seq.hashed_blocks;
            let h = block_hash(seq.last_hash, &seq.tokens[i * bs..(i + 1) * bs], seq.cache_key);
            self.blocks.register_block(seq.block_table[i], h);
            seq.last_hash = Some(h);
            seq.hashed_blocks += 1;
        }
    }

    /// Checks scheduler and block-manager invariants; for tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.blocks.check_invariants()?;
        if self.running.len() > self.config.max_num_seqs {
            return Err(format!(
                "{} running > max_num_seqs {}",
                self.running.len(),
                self.config.max_num_seqs
            ));
        }
        for id in &self.running {
            let s = &self.seqs[id];
            if s.status != SeqStatus::Running || s.block_table.len() < self.blocks.blocks_for(s.num_computed)
            {
                return Err(format!("running sequence {id} lacks blocks for its computed tokens"));
            }
        }
        for id in &self.waiting {
            let s = &self.seqs[id];
            if s.status != SeqStatus::Waiting || !s.block_table.is_empty() {
                return Err(format!("waiting sequence {id} holds blocks"));
            }
        }
        Ok(())
    }
}
