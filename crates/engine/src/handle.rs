//! The engine on its own OS thread, and the handle callers hold.
//!
//! The loop owns all engine state (no locks on the hot path); callers talk to it
//! through a command channel, and each request gets its own event channel. Dropping
//! a `RequestStream` aborts the request: its blocks are freed at the next step.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::engine::{Engine, EngineStats};
use crate::request::{Event, GenerateRequest, RequestId};

/// One engine step, for tracing.
#[derive(Clone, Debug)]
pub struct StepRecord {
    pub start: SystemTime,
    pub duration: Duration,
    /// Tokens computed (prompt chunks + decodes).
    pub tokens: usize,
    pub running: usize,
    pub waiting: usize,
    pub kv_usage: f64,
}

/// Called on the engine thread after every step that computed something; keep it cheap.
pub type StepObserver = Box<dyn FnMut(&StepRecord) + Send>;

enum Command {
    Submit(RequestId, Box<GenerateRequest>, tokio::sync::mpsc::UnboundedSender<Event>),
    Abort(RequestId),
    ObserveSteps(StepObserver),
    /// Stop admitting; finish what is in flight, then exit.
    Shutdown,
}

/// Fixed facts about the running engine.
#[derive(Clone, Debug)]
pub struct EngineInfo {
    pub max_model_len: usize,
    pub num_blocks: usize,
    pub block_size: usize,
    pub max_num_seqs: usize,
    pub max_num_batched_tokens: usize,
}

/// A cheap, cloneable handle to the engine thread.
#[derive(Clone)]
pub struct EngineHandle {
    commands: Sender<Command>,
    stats: Arc<Mutex<EngineStats>>,
    next_id: Arc<AtomicU64>,
    thread: Arc<Mutex<Option<JoinHandle<()>>>>,
    pub info: EngineInfo,
}

/// A request's events. Dropping it aborts the request.
pub struct RequestStream {
    pub id: RequestId,
    events: UnboundedReceiver<Event>,
    commands: Sender<Command>,
    done: bool,
}

impl RequestStream {
    /// The next event; `None` after the last one (`Done` / `Error`), or if the engine stopped.
    pub async fn next(&mut self) -> Option<Event> {
        let e = self.events.recv().await;
        self.done |= matches!(e, None | Some(Event::Done(_) | Event::Error(_)));
        e
    }

    /// `next` for synchronous callers (not from inside an async runtime).
    pub fn blocking_next(&mut self) -> Option<Event> {
        let e = self.events.blocking_recv();
        self.done |= matches!(e, None | Some(Event::Done(_) | Event::Error(_)));
        e
    }

    /// All remaining events.
    pub fn collect_blocking(mut self) -> Vec<Event> {
        let mut out = Vec::new();
        while let Some(e) = self.blocking_next() {
            out.push(e);
        }
        out
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.commands.send(Command::Abort(self.id));
        }
    }
}

impl EngineHandle {
    /// Starts the engine loop on a new thread.
    pub fn spawn(engine: Engine) -> Self {
        let sc = &engine.scheduler().config;
        let info = EngineInfo {
            max_model_len: engine.max_model_len(),
            num_blocks: engine.stats().num_blocks,
            block_size: engine.stats().block_size,
            max_num_seqs: sc.max_num_seqs,
            max_num_batched_tokens: sc.max_num_batched_tokens,
        };
        let (tx, rx) = mpsc::channel();
        let stats = Arc::new(Mutex::new(engine.stats().clone()));
        let stats_out = stats.clone();
        let thread = std::thread::Builder::new()
            .name("peregrine-engine".into())
            .spawn(move || run_loop(engine, rx, stats_out))
            .expect("spawning the engine thread");
        Self {
            commands: tx,
            stats,
            next_id: Arc::new(AtomicU64::new(1)),
            thread: Arc::new(Mutex::new(Some(thread))),
            info,
        }
    }

    /// Queues a request; its events arrive on the returned stream. A refused request
    /// (invalid, too long, engine shutting down) yields one `Error` event.
    pub fn submit(&self, request: GenerateRequest) -> RequestStream {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = unbounded_channel();
        if let Err(mpsc::SendError(Command::Submit(_, _, tx))) =
            self.commands.send(Command::Submit(id, Box::new(request), tx))
        {
            let _ = tx.send(Event::Error("the engine has stopped".into()));
        }
        RequestStream { id, events: rx, commands: self.commands.clone(), done: false }
    }

    pub fn abort(&self, id: RequestId) {
        let _ = self.commands.send(Command::Abort(id));
    }

    /// Calls `observer` after each step from now on (replacing any earlier one).
    pub fn observe_steps(&self, observer: StepObserver) {
        let _ = self.commands.send(Command::ObserveSteps(observer));
    }

    /// The latest per-step statistics.
    pub fn stats(&self) -> EngineStats {
        self.stats.lock().expect("stats lock").clone()
    }

    /// Stops admitting, lets in-flight requests finish, and waits for the loop to exit.
    pub fn shutdown(&self) {
        let _ = self.commands.send(Command::Shutdown);
        if let Some(t) = self.thread.lock().expect("thread lock").take() {
            let _ = t.join();
        }
    }
}

/// What the loop keeps besides the engine.
#[derive(Default)]
struct LoopState {
    shutting_down: bool,
    observer: Option<StepObserver>,
}

fn handle_command(engine: &mut Engine, cmd: Command, st: &mut LoopState) {
    match cmd {
        Command::Submit(id, req, sink) => {
            if st.shutting_down {
                let _ = sink.send(Event::Error("the server is shutting down".into()));
            } else {
                let _ = engine.add_request(id, *req, sink);
            }
        }
        Command::Abort(id) => engine.abort(id),
        Command::ObserveSteps(f) => st.observer = Some(f),
        Command::Shutdown => st.shutting_down = true,
    }
}

fn run_loop(mut engine: Engine, commands: Receiver<Command>, stats: Arc<Mutex<EngineStats>>) {
    let mut st = LoopState::default();
    loop {
        if !engine.has_work() {
            if st.shutting_down {
                break;
            }
            // Idle: block until a command arrives (with a timeout to publish stats).
            match commands.recv_timeout(Duration::from_millis(500)) {
                Ok(cmd) => handle_command(&mut engine, cmd, &mut st),
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        while let Ok(cmd) = commands.try_recv() {
            handle_command(&mut engine, cmd, &mut st);
        }
        let (start, t0) = (SystemTime::now(), Instant::now());
        let computed = engine.step();
        let s = engine.stats().clone();
        if let (Some(observe), true) = (st.observer.as_mut(), computed > 0) {
            observe(&StepRecord {
                start,
                duration: t0.elapsed(),
                tokens: computed,
                running: s.running,
                waiting: s.waiting,
                kv_usage: s.kv_usage,
            });
        }
        *stats.lock().expect("stats lock") = s;
        if computed == 0 && engine.has_work() {
            // Nothing schedulable right now (should be rare): don't spin.
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    *stats.lock().expect("stats lock") = engine.stats().clone();
}
