//! Server-sent events: a task produces the events, the response body streams them.
//!
//! The producer runs as its own task and writes into a small channel; the body reads
//! the channel. When the client goes away the body (and so the channel's receiver)
//! is dropped: `Sink::closed` resolves, the producer returns, and dropping its
//! `Generation`s aborts the engine requests, freeing their KV blocks at once, even
//! for a request still waiting in the queue.

use std::convert::Infallible;
use std::future::Future;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::Response;
use futures_util::future::select_all;
use peregrine_engine::request::Event;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::generation::Generation;

/// Where a producer writes events.
pub struct Sink {
    tx: mpsc::Sender<Bytes>,
    /// TGI writes `data:{…}`; OpenAI and vLLM `data: {…}`.
    space: bool,
}

impl Sink {
    /// Sends one `data:` event; false when the client has gone.
    pub async fn data(&self, payload: &str) -> bool {
        let prefix = if self.space { "data: " } else { "data:" };
        self.tx.send(Bytes::from(format!("{prefix}{payload}\n\n"))).await.is_ok()
    }

    pub async fn json<T: Serialize>(&self, value: &T) -> bool {
        match serde_json::to_string(value) {
            Ok(s) => self.data(&s).await,
            Err(_) => false,
        }
    }

    /// Resolves when the client has gone.
    pub async fn closed(&self) {
        self.tx.closed().await
    }
}

/// A `text/event-stream` response whose events `produce` writes.
pub fn response<F, Fut>(space: bool, produce: F) -> Response
where
    F: FnOnce(Sink) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    tokio::spawn(produce(Sink { tx, space }));
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no")
        .body(Body::from_stream(stream))
        .expect("valid SSE response")
}

/// The next event of any unfinished generation, as (generation index, event); `None`
/// when all have ended or the client has gone.
pub async fn next_event(gens: &mut [Generation], sink: &Sink) -> Option<(usize, Event)> {
    let pending: Vec<_> = gens
        .iter_mut()
        .enumerate()
        .filter(|(_, g)| !g.ended())
        .map(|(i, g)| Box::pin(async move { (i, g.next().await) }))
        .collect();
    if pending.is_empty() {
        return None;
    }
    tokio::select! {
        ((i, e), _, _) = select_all(pending) => e.map(|e| (i, e)),
        _ = sink.closed() => None,
    }
}
