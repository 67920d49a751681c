//! Fail-fast admission: a request over `--max-concurrent-requests`, or one that would
//! push the queue (admitted, not yet scheduled) over its caps, is refused with 429
//! before anything is queued. An admitted request holds a `Ticket`; dropping it (the
//! response finished or the client went away) gives the slot back.

use std::sync::{Arc, Mutex};

use crate::config::Limits;
use crate::error::{ApiError, ApiResult};

pub struct Admission {
    max_concurrent: usize,
    max_queue_requests: Option<usize>,
    max_queue_tokens: Option<usize>,
    counts: Mutex<Counts>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// HTTP requests in flight.
    pub active: usize,
    /// Engine requests admitted but not yet scheduled, and their prompt tokens.
    pub queued_requests: usize,
    pub queued_tokens: usize,
}

/// One admitted HTTP request (possibly several engine requests: a list of prompts).
pub struct Ticket {
    admission: Arc<Admission>,
    /// Prompt lengths of this ticket's engine requests still in the queue.
    queued: Mutex<Vec<usize>>,
}

impl Admission {
    pub fn new(limits: &Limits) -> Self {
        Self {
            max_concurrent: limits.max_concurrent_requests,
            max_queue_requests: limits.max_queue_requests,
            max_queue_tokens: limits.max_queue_tokens,
            counts: Mutex::new(Counts::default()),
        }
    }

    pub fn counts(&self) -> Counts {
        *self.counts.lock().expect("admission lock")
    }

    /// Admits a request whose engine requests have these prompt lengths, or refuses it.
    pub fn admit(self: &Arc<Self>, prompt_lens: &[usize]) -> ApiResult<Ticket> {
        let mut c = self.counts.lock().expect("admission lock");
        if c.active >= self.max_concurrent {
            return Err(ApiError::overloaded(format!(
                "Model is overloaded: {} requests in flight (--max-concurrent-requests)",
                c.active
            )));
        }
        let tokens: usize = prompt_lens.iter().sum();
        if let Some(max) = self.max_queue_requests {
            if c.queued_requests + prompt_lens.len() > max {
                return Err(ApiError::overloaded(format!(
                    "Model is overloaded: {} requests queued (--max-queue-requests {max})",
                    c.queued_requests
                )));
            }
        }
        if let Some(max) = self.max_queue_tokens {
            // An empty queue takes any prompt: a long one must not be refused forever.
            if c.queued_requests > 0 && c.queued_tokens + tokens > max {
                return Err(ApiError::overloaded(format!(
                    "Model is overloaded: {} prompt tokens queued, this request adds {tokens} \
                     (--max-queue-tokens {max})",
                    c.queued_tokens
                )));
            }
        }
        c.active += 1;
        c.queued_requests += prompt_lens.len();
        c.queued_tokens += tokens;
        Ok(Ticket { admission: self.clone(), queued: Mutex::new(prompt_lens.to_vec()) })
    }
}

impl Ticket {
    /// An engine request of this ticket with this prompt length left the queue.
    pub fn scheduled(&self, prompt_len: usize) {
        let mut q = self.queued.lock().expect("ticket lock");
        if let Some(i) = q.iter().position(|&l| l == prompt_len) {
            q.swap_remove(i);
            let mut c = self.admission.counts.lock().expect("admission lock");
            c.queued_requests -= 1;
            c.queued_tokens -= prompt_len;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let q = self.queued.get_mut().expect("ticket lock");
        let mut c = self.admission.counts.lock().expect("admission lock");
        c.active -= 1;
        c.queued_requests -= q.len();
        c.queued_tokens -= q.iter().sum::<usize>();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(
        concurrent: usize,
        queue_requests: Option<usize>,
        queue_tokens: Option<usize>,
    ) -> Arc<Admission> {
        Arc::new(Admission::new(&Limits {
            max_concurrent_requests: concurrent,
            max_queue_requests: queue_requests,
            max_queue_tokens: queue_tokens,
            ..Limits::default()
        }))
    }

    #[test]
    fn concurrency_limit_refuses_then_frees_on_drop() {
        let a = admission(2, None, None);
        let t1 = a.admit(&[5]).unwrap();
        let _t2 = a.admit(&[5]).unwrap();
        let e = a.admit(&[5]).err().expect("third is refused");
        assert_eq!(e.status().as_u16(), 429);
        drop(t1);
        assert!(a.admit(&[5]).is_ok());
    }

    #[test]
    fn queue_caps_count_unscheduled_requests_and_tokens() {
        let a = admission(100, Some(3), Some(100));
        let t1 = a.admit(&[60]).unwrap();
        assert!(a.admit(&[50]).is_err(), "60 + 50 tokens > 100");
        drop(a.admit(&[500, 1]).err());
        t1.scheduled(60);
        let t2 = a.admit(&[50, 40]).unwrap();
        assert_eq!(a.counts(), Counts { active: 2, queued_requests: 2, queued_tokens: 90 });
        assert!(a.admit(&[1, 1]).is_err(), "2 + 2 requests > 3");
        drop(t2);
        drop(t1);
        assert_eq!(a.counts(), Counts::default());
    }
}
