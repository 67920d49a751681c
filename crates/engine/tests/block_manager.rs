//! Property tests of the block manager: after any sequence of allocate / append /
//! fork / free (with eviction happening whenever the free list runs dry), every
//! live sequence reads back exactly its own tokens through its block table,
//! reference counts equal the number of tables holding a block, free + used =
//! total, and prefix-cache hits only ever return blocks holding the same tokens.

use std::collections::HashMap;

use peregrine_engine::block_manager::{BlockId, BlockManager};
use proptest::prelude::*;

const BS: usize = 4;

#[derive(Clone, Debug)]
enum Op {
    /// A prompt built from a shared stem (to provoke prefix hits) plus a tail.
    Allocate {
        stem: usize,
        tail: Vec<u32>,
    },
    Append {
        seq: usize,
        token: u32,
    },
    Fork {
        seq: usize,
    },
    Free {
        seq: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0usize..4, prop::collection::vec(0u32..5, 0..10)).prop_map(|(stem, tail)| Op::Allocate { stem, tail }),
        4 => (any::<usize>(), 0u32..5).prop_map(|(seq, token)| Op::Append { seq, token }),
        1 => any::<usize>().prop_map(|seq| Op::Fork { seq }),
        2 => any::<usize>().prop_map(|seq| Op::Free { seq }),
    ]
}

struct Seq {
    table: Vec<BlockId>,
    tokens: Vec<u32>,
}

/// What the KV pools would hold: block → the token written at each slot.
type Pool = HashMap<BlockId, [Option<u32>; BS]>;

fn write(pool: &mut Pool, table: &[BlockId], pos: usize, token: u32) {
    pool.entry(table[pos / BS]).or_insert([None; BS])[pos % BS] = Some(token);
}

fn check(m: &BlockManager, seqs: &[Seq], pool: &Pool) -> Result<(), TestCaseError> {
    m.check_invariants().map_err(TestCaseError::fail)?;
    let mut owners: HashMap<BlockId, u32> = HashMap::new();
    for s in seqs {
        prop_assert_eq!(s.table.len(), s.tokens.len().div_ceil(BS));
        for &b in &s.table {
            *owners.entry(b).or_default() += 1;
        }
        for (pos, &t) in s.tokens.iter().enumerate() {
            prop_assert_eq!(pool[&s.table[pos / BS]][pos % BS], Some(t), "sequence reads a foreign token");
        }
    }
    let mut used = 0;
    for b in 0..m.num_blocks() as BlockId {
        prop_assert_eq!(m.ref_count(b), owners.get(&b).copied().unwrap_or(0), "ref count of block {}", b);
        used += (m.ref_count(b) > 0) as usize;
    }
    prop_assert_eq!(used + m.num_free_blocks(), m.num_blocks());
    Ok(())
}

fn run(ops: Vec<Op>, num_blocks: usize, prefix_caching: bool) -> Result<(), TestCaseError> {
    let stems: [&[u32]; 4] = [&[1, 2, 3, 4, 5, 6, 7, 8, 9], &[1, 2, 3, 4], &[9, 9, 9, 9, 9, 9, 9, 9], &[]];
    let mut m = BlockManager::new(num_blocks, BS, prefix_caching);
    let mut seqs: Vec<Seq> = Vec::new();
    let mut pool: Pool = HashMap::new();
    for op in ops {
        match op {
            Op::Allocate { stem, tail } => {
                let tokens: Vec<u32> = stems[stem].iter().copied().chain(tail).collect();
                if tokens.is_empty() {
                    continue;
                }
                if let Ok((table, cached)) = m.allocate(&tokens, 0) {
                    prop_assert!(cached % BS == 0 && cached < tokens.len());
                    // Cached blocks must already hold exactly these tokens.
                    for (pos, &t) in tokens.iter().enumerate().take(cached) {
                        prop_assert_eq!(
                            pool[&table[pos / BS]][pos % BS],
                            Some(t),
                            "prefix hit with other tokens"
                        );
                    }
                    for (pos, &t) in tokens.iter().enumerate().skip(cached) {
                        write(&mut pool, &table, pos, t);
                    }
                    m.seal(&table, &tokens, 0);
                    seqs.push(Seq { table, tokens });
                }
            }
            Op::Append { seq, token } if !seqs.is_empty() => {
                let n_seqs = seqs.len();
                let s = &mut seqs[seq % n_seqs];
                let n = s.tokens.len() + 1;
                if let Ok(copy) = m.append(&mut s.table, n) {
                    if let Some((src, dst)) = copy {
                        let content = pool.get(&src).copied().unwrap_or([None; BS]);
                        pool.insert(dst, content);
                    }
                    write(&mut pool, &s.table, n - 1, token);
                    s.tokens.push(token);
                    m.seal(&s.table, &s.tokens, 0);
                }
            }
            Op::Fork { seq } if !seqs.is_empty() => {
                let s = &seqs[seq % seqs.len()];
                let (table, tokens) = (m.fork(&s.table), s.tokens.clone());
                seqs.push(Seq { table, tokens });
            }
            Op::Free { seq } if !seqs.is_empty() => {
                let s = seqs.swap_remove(seq % seqs.len());
                m.free(&s.table);
            }
            _ => {}
        }
        check(&m, &seqs, &pool)?;
    }
    for s in seqs.drain(..) {
        m.free(&s.table);
    }
    prop_assert_eq!(m.num_free_blocks(), m.num_blocks(), "every block returns once all sequences are freed");
    m.check_invariants().map_err(TestCaseError::fail)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn invariants_hold_with_prefix_caching(ops in prop::collection::vec(op(), 1..80), blocks in 4usize..24) {
        run(ops, blocks, true)?;
    }

    #[test]
    fn invariants_hold_without_prefix_caching(ops in prop::collection::vec(op(), 1..80), blocks in 4usize..24) {
        run(ops, blocks, false)?;
    }
}

#[test]
fn a_shared_prefix_is_computed_once_and_evicted_least_recently_freed_first() {
    let mut m = BlockManager::new(4, BS, true);
    let prompt: Vec<u32> = (0..9).collect(); // 2 full blocks + 1 token
    let (t1, cached) = m.allocate(&prompt, 0).unwrap();
    assert_eq!(cached, 0);
    m.seal(&t1, &prompt, 0);
    m.free(&t1);
    // Same prompt again: both full blocks come from the cache.
    let (t2, cached) = m.allocate(&prompt, 0).unwrap();
    assert_eq!((cached, &t2[..2]), (8, &t1[..2]));
    assert_eq!(m.stats().hits, 2);
    // Another adapter (extra key) shares nothing.
    m.free(&t2);
    let (t3, cached) = m.allocate(&prompt, 7).unwrap();
    assert_eq!(cached, 0);
    m.free(&t3);
    // Too big for the pool: an error, and nothing changed.
    let free = m.num_free_blocks();
    assert!(m.allocate(&(0..100).collect::<Vec<u32>>(), 0).is_err());
    assert_eq!(m.num_free_blocks(), free);
}

#[test]
fn forked_sequences_copy_the_shared_last_block_before_writing() {
    let mut m = BlockManager::new(8, BS, true);
    let prompt = [5u32, 6, 7];
    let (mut a, _) = m.allocate(&prompt, 0).unwrap();
    let mut b = m.fork(&a);
    assert_eq!(m.ref_count(a[0]), 2);
    let copy = m.append(&mut b, 4).unwrap();
    let (src, dst) = copy.expect("the shared partial block is copied");
    assert_eq!((src, b[0]), (a[0], dst));
    assert_eq!((m.ref_count(a[0]), m.ref_count(b[0])), (1, 1));
    assert_eq!(m.append(&mut a, 4).unwrap(), None, "a owns its block alone now");
}
