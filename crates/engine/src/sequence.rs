//! One sequence the scheduler runs: its tokens, how many of them have K/V in the
//! pool, and the blocks holding them. A request with `best_of` samples becomes that
//! many sequences sharing the prompt's blocks.

use crate::block_manager::BlockId;

pub type SeqId = u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeqStatus {
    Waiting,
    Running,
}

#[derive(Clone, Debug)]
pub struct Sequence {
    pub id: SeqId,
    /// Prompt, then generated tokens.
    pub tokens: Vec<u32>,
    pub num_prompt: usize,
    /// Leading tokens whose K/V are in the pool. The tokens after it are fed next;
    /// a step that feeds up to `tokens.len()` yields logits for the next token.
    pub num_computed: usize,
    pub block_table: Vec<BlockId>,
    /// Full blocks registered in the prefix cache, and the hash of the last one
    /// (the chain continues from it).
    pub hashed_blocks: usize,
    pub last_hash: Option<u64>,
    /// Part of every block hash (adapter id, …).
    pub cache_key: u64,
    /// Whether to look up cached prefixes (off when prompt logprobs are wanted).
    pub use_prefix_cache: bool,
    pub status: SeqStatus,
    /// Seats this sequence will need for its forks once its prompt is done (best_of − 1).
    pub reserved_seats: usize,
    /// Prompt tokens found in the prefix cache at first admission.
    pub cached_prompt_tokens: Option<usize>,
    pub preemptions: usize,
}

impl Sequence {
    pub fn new(id: SeqId, prompt: Vec<u32>, cache_key: u64, use_prefix_cache: bool) -> Self {
        Self {
            id,
            num_prompt: prompt.len(),
            tokens: prompt,
            num_computed: 0,
            block_table: Vec::new(),
            hashed_blocks: 0,
            last_hash: None,
            cache_key,
            use_prefix_cache,
            status: SeqStatus::Waiting,
            reserved_seats: 0,
            cached_prompt_tokens: None,
            preemptions: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    pub fn num_generated(&self) -> usize {
        self.tokens.len() - self.num_prompt
    }

    /// Tokens still to feed before the next logits.
    pub fn remaining(&self) -> usize {
        self.tokens.len() - self.num_computed
    }

    /// One token to feed: a decode step (as opposed to a prompt or a recompute).
    pub fn is_decode(&self) -> bool {
        self.remaining() == 1
    }
}
