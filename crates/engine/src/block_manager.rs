//! The block manager of the paged KV cache: which fixed-size blocks of the K/V
//! pools each sequence owns, reference counts for sharing, and the prefix cache.
//!
//! A sequence's KV lives in `block_size`-token blocks named by its block table.
//! Full blocks are identified by a hash chained over the previous block's hash,
//! this block's tokens and an extra key (anything else that changes the KV, e.g. an
//! adapter id). A freed block keeps its hash and stays findable until it is reused:
//! free blocks are handed out least-recently-freed first, so a cached prefix
//! survives as long as memory allows (vLLM's automatic prefix caching).

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};

pub type BlockId = u32;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("KV cache full: need {needed} free blocks, {free} available")]
pub struct OutOfBlocks {
    pub needed: usize,
    pub free: usize,
}

#[derive(Clone, Debug, Default)]
struct BlockMeta {
    ref_count: u32,
    /// Set once the block is full and registered in the prefix cache.
    hash: Option<u64>,
    /// Position in the free list (`None` while in use).
    free_stamp: Option<u64>,
}

/// Counters for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefixCacheStats {
    /// Full prompt blocks looked up.
    pub queries: u64,
    /// Of those, found in the cache.
    pub hits: u64,
}

pub struct BlockManager {
    block_size: usize,
    blocks: Vec<BlockMeta>,
    /// Free blocks by the order they were freed (oldest first); the stamp is the key.
    free: BTreeMap<u64, BlockId>,
    next_stamp: u64,
    /// Full-block hash → block, for blocks in use or free but not yet reused.
    cached: HashMap<u64, BlockId>,
    prefix_caching: bool,
    stats: PrefixCacheStats,
}

/// The hash of a full block: chained over the previous block's hash.
pub fn block_hash(prev: Option<u64>, tokens: &[u32], extra_key: u64) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    prev.hash(&mut h);
    tokens.hash(&mut h);
    extra_key.hash(&mut h);
    h.finish()
}

impl BlockManager {
    pub fn new(num_blocks: usize, block_size: usize, prefix_caching: bool) -> Self {
        assert!(block_size > 0, "block size must be positive");
        let blocks = vec![BlockMeta::default(); num_blocks];
        let mut m = Self {
            block_size,
            blocks,
            free: BTreeMap::new(),
            next_stamp: 0,
            cached: HashMap::new(),
            prefix_caching,
            stats: PrefixCacheStats::default(),
        };
        for id in 0..num_blocks as BlockId {
            m.push_free(id);
        }
        m
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    pub fn num_free_blocks(&self) -> usize {
        self.free.len()
    }

    /// Fraction of blocks in use.
    pub fn usage(&self) -> f64 {
        1.0 - self.free.len() as f64 / self.blocks.len().max(1) as f64
    }

    pub fn stats(&self) -> PrefixCacheStats {
        self.stats
    }

    pub fn ref_count(&self, id: BlockId) -> u32 {
        self.blocks[id as usize].ref_count
    }

    /// Blocks needed to hold `n_tokens`.
    pub fn blocks_for(&self, n_tokens: usize) -> usize {
        n_tokens.div_ceil(self.block_size)
    }

    fn push_free(&mut self, id: BlockId) {
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        self.blocks[id as usize].free_stamp = Some(stamp);
        self.free.insert(stamp, id);
    }

    /// Takes a specific free block out of the free list (a prefix-cache hit on it).
    fn take_free(&mut self, id: BlockId) {
        if let Some(stamp) = self.blocks[id as usize].free_stamp.take() {
            self.free.remove(&stamp);
        }
    }

    /// The least recently freed block, forgetting any cached content it held.
    fn pop_free(&mut self) -> Option<BlockId> {
        let (_, id) = self.free.pop_first()?;
        let meta = &mut self.blocks[id as usize];
        meta.free_stamp = None;
        if let Some(h) = meta.hash.take() {
            if self.cached.get(&h) == Some(&id) {
                self.cached.remove(&h);
            }
        }
        Some(id)
    }

    fn cached_block(&self, hash: u64) -> Option<BlockId> {
        if !self.prefix_caching {
            return None;
        }
        self.cached.get(&hash).copied()
    }

    /// Block table for a new sequence with `tokens` already known (its prompt).
    /// Returns the table and how many leading tokens are already in the cache
    /// (whole blocks only; at least the last token is always left to compute so
    /// the step produces logits). All or nothing: on error nothing changed.
    pub fn allocate(&mut self, tokens: &[u32], extra_key: u64) -> Result<(Vec<BlockId>, usize), OutOfBlocks> {
        self.allocate_with(tokens, extra_key, true)
    }

    /// `allocate`, looking up cached prefixes only when `lookup` (a request that
    /// wants prompt logprobs must compute every position).
    pub fn allocate_with(
        &mut self,
        tokens: &[u32],
        extra_key: u64,
        lookup: bool,
    ) -> Result<(Vec<BlockId>, usize), OutOfBlocks> {
        let n_blocks = self.blocks_for(tokens.len());
        // Full blocks that may be reused; the block holding the last token is
        // never taken from the cache, so at least one token is computed.
        let reusable = tokens.len().saturating_sub(1) / self.block_size;
        let mut hits = Vec::new();
        let mut prev = None;
        for chunk in tokens.chunks_exact(self.block_size).take(reusable) {
            let h = block_hash(prev, chunk, extra_key);
            match self.cached_block(h).filter(|_| lookup) {
                Some(id) => hits.push(id),
                None => break,
            }
            prev = Some(h);
        }
        let hits_in_free = hits.iter().filter(|&&id| self.blocks[id as usize].ref_count == 0).count();
        let needed = n_blocks - hits.len();
        let free = self.free.len() - hits_in_free;
        if needed > free {
            return Err(OutOfBlocks { needed, free });
        }
        self.stats.queries += if lookup { reusable as u64 } else { 0 };
        self.stats.hits += hits.len() as u64;
        let mut table = Vec::with_capacity(n_blocks);
        for &id in &hits {
            self.take_free(id);
            self.blocks[id as usize].ref_count += 1;
            table.push(id);
        }
        for _ in hits.len()..n_blocks {
            let id = self.pop_free().expect("capacity checked above");
            self.blocks[id as usize].ref_count = 1;
            table.push(id);
        }
        let cached_tokens = hits.len() * self.block_size;
        // The freshly filled full blocks become cacheable once their KV is written;
        // the caller registers them with `seal` after the step that computes them.
        Ok((table, cached_tokens))
    }

    /// Registers the full blocks of `table` (covering `tokens`) in the prefix cache,
    /// after their KV has been computed. Cheap to call repeatedly.
    pub fn seal(&mut self, table: &[BlockId], tokens: &[u32], extra_key: u64) {
        if !self.prefix_caching {
            return;
        }
        let mut prev = None;
        for (chunk, &id) in tokens.chunks_exact(self.block_size).zip(table) {
            let h = block_hash(prev, chunk, extra_key);
            let meta = &mut self.blocks[id as usize];
            match meta.hash {
                Some(existing) if existing == h => {}
                Some(_) => break, // a different history: stop (should not happen)
                None => {
                    meta.hash = Some(h);
                    self.cached.entry(h).or_insert(id);
                }
            }
            prev = Some(h);
        }
    }

    /// Registers one full block whose K/V is computed under its chained hash (the
    /// incremental form of `seal`). A block already registered keeps its hash.
    pub fn register_block(&mut self, id: BlockId, hash: u64) {
        if !self.prefix_caching {
            return;
        }
        let meta = &mut self.blocks[id as usize];
        if meta.hash.is_none() {
            meta.hash = Some(hash);
            self.cached.entry(hash).or_insert(id);
        }
    }

    /// Makes room for a sequence growing to `n_tokens`. When the block that the
    /// next token goes into is shared (after `fork`), it is copied first: the
    /// returned pair (src, dst) is a copy the KV pools must perform.
    pub fn append(
        &mut self,
        table: &mut Vec<BlockId>,
        n_tokens: usize,
    ) -> Result<Option<(BlockId, BlockId)>, OutOfBlocks> {
        let need = self.blocks_for(n_tokens);
        // The block the newest token lands in.
        let last_idx = (n_tokens.max(1) - 1) / self.block_size;
        let cow = last_idx < table.len() && self.blocks[table[last_idx] as usize].ref_count > 1;
        let extra = need.saturating_sub(table.len()) + cow as usize;
        if extra > self.free.len() {
            return Err(OutOfBlocks { needed: extra, free: self.free.len() });
        }
        let mut copy = None;
        if cow {
            let src = table[last_idx];
            let dst = self.pop_free().expect("capacity checked");
            self.blocks[dst as usize].ref_count = 1;
            self.blocks[src as usize].ref_count -= 1;
            table[last_idx] = dst;
            copy = Some((src, dst));
        }
        while table.len() < need {
            let id = self.pop_free().expect("capacity checked");
            self.blocks[id as usize].ref_count = 1;
            table.push(id);
        }
        Ok(copy)
    }

    /// A second owner of the same blocks (parallel samples of one prompt).
    pub fn fork(&mut self, table: &[BlockId]) -> Vec<BlockId> {
        for &id in table {
            self.blocks[id as usize].ref_count += 1;
        }
        table.to_vec()
    }

    /// Releases a sequence's blocks. The tail is freed first so that, under
    /// memory pressure, the end of a cached prefix is evicted before its start.
    pub fn free(&mut self, table: &[BlockId]) {
        for &id in table.iter().rev() {
            let meta = &mut self.blocks[id as usize];
            debug_assert!(meta.ref_count > 0, "block {id} freed twice");
            meta.ref_count = meta.ref_count.saturating_sub(1);
            if meta.ref_count == 0 {
                if meta.hash.is_none() || !self.prefix_caching {
                    meta.hash = None;
                }
                self.push_free(id);
            }
        }
    }

    /// Checks the internal invariants; for tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut n_free = 0;
        for (i, b) in self.blocks.iter().enumerate() {
            match (b.ref_count, b.free_stamp) {
                (0, Some(s)) if self.free.get(&s) == Some(&(i as BlockId)) => n_free += 1,
                (0, _) => return Err(format!("block {i} has no owner and is not free")),
                (_, Some(_)) => return Err(format!("block {i} is owned and in the free list")),
                _ => {}
            }
        }
        if n_free != self.free.len() {
            return Err(format!("free list has {} entries, {} blocks are free", self.free.len(), n_free));
        }
        for (&h, &id) in &self.cached {
            if self.blocks[id as usize].hash != Some(h) {
                return Err(format!("cache entry for block {id} has a stale hash"));
            }
        }
        Ok(())
    }
}
