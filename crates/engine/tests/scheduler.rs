//! The scheduler alone, on the CPU, with scripted arrivals and a stand-in "model"
//! whose next token is a function of the sequence so far: what comes out cannot
//! depend on how steps were batched, chunked or preempted, so any difference is a
//! scheduling bug.

use std::collections::HashMap;

use peregrine_engine::block_manager::BlockManager;
use peregrine_engine::scheduler::{ScheduledBatch, Scheduler, SchedulerConfig};
use peregrine_engine::sequence::{SeqId, Sequence};
use proptest::prelude::*;

fn next_token(tokens: &[u32]) -> u32 {
    tokens.iter().fold(17u32, |h, &t| h.wrapping_mul(31).wrapping_add(t)) % 1000
}

fn config(budget: usize, max_seqs: usize, chunked: bool) -> SchedulerConfig {
    SchedulerConfig {
        max_num_batched_tokens: budget,
        max_num_seqs: max_seqs,
        chunked_prefill: chunked,
        ..SchedulerConfig::default()
    }
}

/// A request: arrival step, prompt, tokens to generate.
#[derive(Clone, Debug)]
struct Script {
    arrive: usize,
    prompt: Vec<u32>,
    generate: usize,
}

/// Runs the scripts to completion, checking every step; returns each sequence's
/// generated tokens and the batches scheduled.
fn simulate(mut s: Scheduler, scripts: &[Script]) -> (HashMap<SeqId, Vec<u32>>, Vec<ScheduledBatch>) {
    let budget = s.config.max_num_batched_tokens;
    let mut out: HashMap<SeqId, Vec<u32>> = HashMap::new();
    let mut batches = Vec::new();
    let mut step = 0;
    while out.values().filter(|o| !o.is_empty()).count() < scripts.len() || s.has_work() {
        for (i, sc) in scripts.iter().enumerate() {
            if sc.arrive == step {
                s.add(Sequence::new(i as SeqId, sc.prompt.clone(), 0, true));
            }
        }
        let batch = s.schedule();
        assert!(batch.num_tokens() <= budget, "step {step}: {} tokens > budget {budget}", batch.num_tokens());
        s.check_invariants().unwrap_or_else(|e| panic!("step {step}: {e}"));
        s.on_computed(&batch);
        for b in &batch.seqs {
            if b.samples {
                let seq = s.get(b.id).unwrap();
                let tok = next_token(&seq.tokens);
                let o = out.entry(b.id).or_default();
                o.push(tok);
                if o.len() == scripts[b.id as usize].generate {
                    s.finish(b.id);
                } else {
                    s.append_token(b.id, tok);
                }
            }
        }
        batches.push(batch);
        step += 1;
        assert!(step < 10_000, "no progress");
    }
    s.check_invariants().unwrap();
    (out, batches)
}

/// What each sequence must produce, whatever the batching.
fn expected(scripts: &[Script]) -> HashMap<SeqId, Vec<u32>> {
    scripts
        .iter()
        .enumerate()
        .map(|(i, sc)| {
            let mut t = sc.prompt.clone();
            let mut o = Vec::new();
            for _ in 0..sc.generate {
                let x = next_token(&t);
                o.push(x);
                t.push(x);
            }
            (i as SeqId, o)
        })
        .collect()
}

fn prompt(len: usize, salt: u32) -> Vec<u32> {
    (0..len as u32).map(|i| (i * 7 + salt * 13) % 500).collect()
}

#[test]
fn chunked_prefill_interleaves_with_decode() {
    let s = Scheduler::new(config(8, 4, true), BlockManager::new(64, 4, true));
    let scripts = [
        Script { arrive: 0, prompt: prompt(3, 1), generate: 10 },
        Script { arrive: 2, prompt: prompt(20, 2), generate: 2 },
    ];
    let (out, batches) = simulate(s, &scripts);
    assert_eq!(out, expected(&scripts));
    // While the 20-token prompt is prefilled in chunks, sequence 0 decodes every step.
    let prefill_steps: Vec<&ScheduledBatch> =
        batches.iter().filter(|b| b.seqs.iter().any(|x| x.id == 1 && !x.samples)).collect();
    assert!(prefill_steps.len() >= 2, "the long prompt was not chunked");
    for b in prefill_steps {
        let decode = b.seqs.iter().find(|x| x.id == 0).expect("decode stalled behind a prompt chunk");
        assert_eq!(decode.len, 1);
        assert_eq!(b.num_tokens(), 8, "the chunk fills the budget left by decodes");
    }
}

#[test]
fn without_chunking_a_prompt_runs_whole() {
    let s = Scheduler::new(config(32, 4, false), BlockManager::new(64, 4, true));
    let scripts = [
        Script { arrive: 0, prompt: prompt(5, 1), generate: 6 },
        Script { arrive: 1, prompt: prompt(30, 2), generate: 3 },
    ];
    let (out, batches) = simulate(s, &scripts);
    assert_eq!(out, expected(&scripts));
    let chunk = batches.iter().flat_map(|b| &b.seqs).find(|x| x.id == 1).unwrap();
    assert_eq!((chunk.start, chunk.len), (0, 30));
}

#[test]
fn preemption_under_a_tiny_pool_completes_every_sequence() {
    // 12 blocks of 4 tokens = 48 slots for 6 sequences that grow to 24 tokens each.
    let s = Scheduler::new(config(16, 6, true), BlockManager::new(12, 4, true));
    let scripts: Vec<Script> =
        (0..6).map(|i| Script { arrive: i, prompt: prompt(6 + i, i as u32), generate: 18 - i }).collect();
    let (out, batches) = simulate(s, &scripts);
    assert_eq!(out, expected(&scripts));
    let preempted: usize = batches.iter().map(|b| b.preempted.len()).sum();
    assert!(preempted > 0, "the pool was meant to run out");
}

#[test]
fn the_queue_is_first_come_first_served() {
    // The head needs 5 blocks; only 4 are free while sequence 0 runs. The small
    // request behind it must not overtake it.
    let mut s = Scheduler::new(config(64, 4, true), BlockManager::new(6, 4, false));
    s.add(Sequence::new(0, prompt(8, 1), 0, true)); // 2 blocks
    let b = s.schedule();
    s.on_computed(&b);
    s.append_token(0, 1);
    s.add(Sequence::new(1, prompt(20, 2), 0, true)); // 5 blocks: waits
    s.add(Sequence::new(2, prompt(2, 3), 0, true)); // 1 block: would fit
    let b = s.schedule();
    assert_eq!(b.seqs.iter().map(|x| x.id).collect::<Vec<_>>(), vec![0]);
    assert_eq!(s.num_waiting(), 2);
    s.finish(0);
    let b = s.schedule();
    assert_eq!(b.seqs[0].id, 1, "the head goes first once memory is free");
}

#[test]
fn tgi_waiting_served_ratio_holds_new_requests_back() {
    let mut cfg = config(64, 8, false);
    cfg.waiting_served_ratio = Some(1.2);
    cfg.max_waiting_tokens = 3;
    let mut s = Scheduler::new(cfg, BlockManager::new(64, 4, false));
    for i in 0..2 {
        s.add(Sequence::new(i, prompt(4, i as u32), 0, true));
    }
    let b = s.schedule(); // nothing running: both join
    assert_eq!(b.seqs.len(), 2);
    s.on_computed(&b);
    s.append_token(0, 1);
    s.append_token(1, 1);
    // One new request; 2 running × 1.2 = 2 must be able to join: it waits…
    s.add(Sequence::new(2, prompt(4, 9), 0, true));
    let mut joined_at = None;
    for step in 0..5 {
        let b = s.schedule();
        s.on_computed(&b);
        for x in &b.seqs {
            s.append_token(x.id, 1);
        }
        if b.seqs.iter().any(|x| x.id == 2) {
            joined_at = Some(step);
            break;
        }
    }
    // …until max_waiting_tokens steps have passed without anything joining.
    assert_eq!(joined_at, Some(3));
    s.check_invariants().unwrap();
}

#[test]
fn forks_share_the_prompt_and_copy_the_last_block_on_write() {
    let mut s = Scheduler::new(config(64, 4, true), BlockManager::new(16, 4, false));
    s.add(Sequence::new(0, prompt(6, 1), 0, true)); // blocks: 4 + 2 tokens
    let b = s.schedule();
    s.on_computed(&b);
    s.fork(0, 1);
    assert_eq!(s.block_manager().num_free_blocks(), 14, "the fork shares both blocks");
    s.append_token(0, 5);
    s.append_token(1, 6);
    let b = s.schedule();
    // Both write position 6, in the shared half-full second block: the first to
    // write gets a copy, the other then owns the original alone.
    assert_eq!(b.block_copies.len(), 1);
    let (t0, t1) = (&s.get(0).unwrap().block_table, &s.get(1).unwrap().block_table);
    assert_eq!(t0[0], t1[0], "the full first block stays shared");
    assert_ne!(t0[1], t1[1]);
    s.check_invariants().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Random arrivals, lengths, budgets and pool sizes: every sequence completes with
    /// the tokens it would get alone, the budget and the sequence cap always hold.
    #[test]
    fn any_schedule_produces_what_each_sequence_would_alone(
        reqs in prop::collection::vec((0usize..12, 1usize..40, 1usize..20), 1..10),
        budget in 8usize..48,
        max_seqs in 1usize..8,
        block_size in 1usize..6,
        chunked in any::<bool>(),
        prefix in any::<bool>(),
    ) {
        let scripts: Vec<Script> = reqs
            .iter()
            .enumerate()
            .map(|(i, &(arrive, len, generate))| Script {
                arrive,
                // Some prompts share prefixes, to exercise the prefix cache.
                prompt: prompt(len, (i % 3) as u32),
                generate,
            })
            .collect();
        let longest = scripts.iter().map(|s| s.prompt.len() + s.generate).max().unwrap();
        // Enough for the longest sequence alone, not much more: preemption happens.
        let blocks = longest.div_ceil(block_size) + 2;
        let budget = budget.max(max_seqs);
        // Without chunking a whole prompt must fit in one step.
        let budget = if chunked { budget } else { budget.max(longest) };
        let s = Scheduler::new(config(budget, max_seqs, chunked), BlockManager::new(blocks, block_size, prefix));
        let (out, _) = simulate(s, &scripts);
        prop_assert_eq!(out, expected(&scripts));
    }
}
