//! One engine request as the server sees it: the engine's event stream, the
//! admission ticket it holds, and what it records on the way (latency histograms,
//! the finish reason, a trace). Every generation route reads its events through here.
//! Dropping it (the response ended, or the client went away) aborts the engine
//! request and frees its KV blocks.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use peregrine_engine::handle::{EngineHandle, RequestStream};
use peregrine_engine::request::{Event, GenerateRequest, Usage};
use serde_json::Value;

use crate::admission::Ticket;
use crate::metrics::{Metrics, Series};
use crate::tracing::{new_span_id, new_trace_id, Span, Tracer};

pub struct Generation {
    stream: RequestStream,
    ticket: Arc<Ticket>,
    metrics: Arc<Metrics>,
    tracer: Option<Tracer>,
    route: &'static str,
    prompt_len: usize,
    arrival: Instant,
    arrival_wall: SystemTime,
    scheduled: Option<(Instant, SystemTime)>,
    first_token: Option<(Instant, SystemTime)>,
    /// Last token time per sample, for inter-token latency.
    last_token: Vec<Option<Instant>>,
    /// OpenAI finish reason of sample 0.
    reason: Option<&'static str>,
    usage: Option<Usage>,
    /// `Done` or `Error` was seen.
    ended: bool,
    error: bool,
}

impl Generation {
    /// Submits `req` to the engine; the ticket is released when the last generation
    /// of the HTTP request is dropped.
    pub fn start(
        engine: &EngineHandle,
        req: GenerateRequest,
        ticket: Arc<Ticket>,
        metrics: Arc<Metrics>,
        tracer: Option<Tracer>,
        route: &'static str,
    ) -> Self {
        let prompt_len = req.prompt.len();
        let samples = req.n;
        Self {
            stream: engine.submit(req),
            ticket,
            metrics,
            tracer,
            route,
            prompt_len,
            arrival: Instant::now(),
            arrival_wall: SystemTime::now(),
            scheduled: None,
            first_token: None,
            last_token: vec![None; samples],
            reason: None,
            usage: None,
            ended: false,
            error: false,
        }
    }

    pub fn prompt_len(&self) -> usize {
        self.prompt_len
    }

    /// `Done` or `Error` was seen: no more events.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The next event (`None` after `Done` / `Error`).
    pub async fn next(&mut self) -> Option<Event> {
        if self.ended {
            return None;
        }
        let e = self.stream.next().await;
        self.observe(e.as_ref());
        e
    }

    fn observe(&mut self, e: Option<&Event>) {
        let now = Instant::now();
        match e {
            Some(Event::Scheduled) => {
                self.scheduled = Some((now, SystemTime::now()));
                self.ticket.scheduled(self.prompt_len);
                self.metrics.observe(Series::QueueTime, (now - self.arrival).as_secs_f64());
            }
            Some(Event::Token { index, .. }) => {
                if self.first_token.is_none() {
                    self.first_token = Some((now, SystemTime::now()));
                    self.metrics.observe(Series::TimeToFirstToken, (now - self.arrival).as_secs_f64());
                }
                if let Some(slot) = self.last_token.get_mut(*index) {
                    if let Some(prev) = slot.replace(now) {
                        self.metrics.observe(Series::InterTokenLatency, (now - prev).as_secs_f64());
                    }
                }
            }
            Some(Event::Finished { index: 0, reason, .. }) => self.reason = Some(reason.openai()),
            Some(Event::Done(usage)) => {
                self.ended = true;
                self.usage = Some(*usage);
                let m = &self.metrics;
                m.observe(Series::EndToEnd, (now - self.arrival).as_secs_f64());
                m.observe(Series::PromptTokens, usage.prompt_tokens as f64);
                m.observe(Series::GenerationTokens, usage.completion_tokens as f64);
                m.finished(self.reason.unwrap_or("stop"));
            }
            Some(Event::Error(_)) | None => {
                self.ended = true;
                self.error = true;
                self.metrics.rejected("engine");
            }
            Some(Event::Finished { .. } | Event::PromptLogprobs(_)) => {}
        }
    }

    fn trace(&self) {
        let Some(tracer) = &self.tracer else { return };
        let end = SystemTime::now();
        let trace_id = new_trace_id();
        let root = new_span_id();
        let mut attributes: Vec<(&'static str, Value)> = vec![
            ("peregrine.route", self.route.into()),
            ("peregrine.prompt_tokens", self.prompt_len.into()),
            (
                "peregrine.finish_reason",
                self.reason.unwrap_or(if self.ended { "error" } else { "abort" }).into(),
            ),
        ];
        if let Some(u) = self.usage {
            attributes.push(("peregrine.completion_tokens", u.completion_tokens.into()));
            attributes.push(("peregrine.cached_prompt_tokens", u.cached_prompt_tokens.into()));
        }
        let child = |name: &str, start: SystemTime, end: SystemTime| Span {
            name: name.into(),
            trace_id,
            span_id: new_span_id(),
            parent: Some(root),
            start,
            end,
            attributes: Vec::new(),
            error: false,
        };
        let scheduled = self.scheduled.map(|s| s.1);
        let first = self.first_token.map(|s| s.1);
        tracer.record(child("queue", self.arrival_wall, scheduled.unwrap_or(end)));
        if let Some(s) = scheduled {
            tracer.record(child("prefill", s, first.unwrap_or(end)));
        }
        if let Some(f) = first {
            tracer.record(child("decode", f, end));
        }
        tracer.record(Span {
            name: format!("generate {}", self.route),
            trace_id,
            span_id: root,
            parent: None,
            start: self.arrival_wall,
            end,
            attributes,
            error: self.error,
        });
    }
}

impl Drop for Generation {
    fn drop(&mut self) {
        if !self.ended {
            // The client went away (or the response was cut short): the engine request
            // is aborted by the stream's own drop.
            self.metrics.finished("abort");
        }
        self.trace();
    }
}
