//! Incremental detokenization: token ids in, text deltas out.
//!
//! Works on the raw bytes each token stands for (`Tokenizer::token_bytes`: GPT-2
//! byte-level tokens mapped back, SentencePiece `▁` as a space, `<0xXX>` byte
//! fallback), so a character split over several tokens (emoji, CJK in byte-level
//! BPE, byte-fallback sequences) is emitted only once complete and a delta never
//! splits a UTF-8 character. Text is emitted as it would follow a prompt: the
//! leading space a SentencePiece decoder strips at the start of a *whole* text is
//! kept, so prompt + deltas reads as one text.
//!
//! Stop strings are matched across token boundaries: text that could still be the
//! start of a stop string is held back until it cannot; a completed stop string
//! ends the output just before it (it is not emitted).

use std::sync::Arc;

use peregrine_model::tokenizer::Tokenizer;

/// What one token added.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    /// Text safe to show now (possibly empty).
    pub text: String,
    /// Index into the stop strings when one matched: generation ends here.
    pub stopped_by: Option<usize>,
}

/// Shares the tokenizer (`Arc`) so each sequence of the engine can own one.
pub struct Detokenizer {
    tokenizer: Arc<Tokenizer>,
    skip_special_tokens: bool,
    stop: Vec<String>,
    /// Bytes of an incomplete UTF-8 character.
    pending: Vec<u8>,
    /// Decoded text not yet emitted because it may begin a stop string.
    held: String,
    /// Everything emitted so far.
    output: String,
    stopped: bool,
}

impl Detokenizer {
    pub fn new(tokenizer: Arc<Tokenizer>, stop: Vec<String>, skip_special_tokens: bool) -> Self {
        let stop = stop.into_iter().filter(|s| !s.is_empty()).collect();
        Self {
            tokenizer,
            skip_special_tokens,
            stop,
            pending: Vec::new(),
            held: String::new(),
            output: String::new(),
            stopped: false,
        }
    }

    /// Replaces the stop strings (they start counting once `min_tokens` are out).
    pub fn set_stop(&mut self, stop: Vec<String>) {
        self.stop = stop.into_iter().filter(|s| !s.is_empty()).collect();
    }

    /// The text emitted so far.
    pub fn output(&self) -> &str {
        &self.output
    }

    /// Adds one token.
    pub fn push(&mut self, token: u32) -> Delta {
        if self.stopped || (self.skip_special_tokens && self.tokenizer.is_special(token)) {
            return Delta::default();
        }
        self.pending.extend_from_slice(self.tokenizer.token_bytes_ref(token));
        // Move the longest valid UTF-8 prefix of `pending` into `held`.
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(s) => s.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(), // incomplete tail: wait
            Err(e) => {
                // Invalid bytes (not just incomplete): replace them, as decode would.
                let bad_end = e.valid_up_to() + e.error_len().unwrap_or(1);
                let lossy = String::from_utf8_lossy(&self.pending[..bad_end]).into_owned();
                self.held.push_str(&lossy);
                self.pending.drain(..bad_end);
                return self.release();
            }
        };
        let text = std::str::from_utf8(&self.pending[..valid]).expect("checked valid").to_owned();
        self.pending.drain(..valid);
        self.held.push_str(&text);
        self.release()
    }

    /// Ends the stream: emits anything held back (an incomplete character as U+FFFD).
    pub fn finish(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        if !self.pending.is_empty() {
            let rest = String::from_utf8_lossy(&self.pending).into_owned();
            self.held.push_str(&rest);
            self.pending.clear();
        }
        let text = std::mem::take(&mut self.held);
        self.output.push_str(&text);
        text
    }

    /// Emits `held` up to where a stop string could still begin; stops on a match.
    fn release(&mut self) -> Delta {
        // A complete stop string: emit what precedes the earliest one and stop.
        let mut first: Option<(usize, usize)> = None;
        for (i, s) in self.stop.iter().enumerate() {
            if let Some(at) = self.held.find(s.as_str()) {
                if first.is_none_or(|(best, _)| at < best) {
                    first = Some((at, i));
                }
            }
        }
        if let Some((at, i)) = first {
            let text = self.held[..at].to_string();
            self.held.clear();
            self.output.push_str(&text);
            self.stopped = true;
            return Delta { text, stopped_by: Some(i) };
        }
        // Hold back the longest suffix of `held` that is a proper prefix of a stop string.
        let keep = self
            .stop
            .iter()
            .map(|s| {
                (1..s.len().min(self.held.len() + 1))
                    .rev()
                    .filter(|&k| s.is_char_boundary(k) && self.held.is_char_boundary(self.held.len() - k))
                    .find(|&k| self.held.ends_with(&s[..k]))
                    .unwrap_or(0)
            })
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        let text: String = self.held.drain(..cut).collect();
        self.output.push_str(&text);
        Delta { text, stopped_by: None }
    }
}
