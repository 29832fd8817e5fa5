//! Every event of a term carries the `term` span (election name, instance, token), every event
//! of a held lock the `lock` span (keys, fencing token), and a locker's `LockObserver` hears
//! obtained / renewal failed / lost. In-memory backend on tokio's paused clock; a small
//! recording `tracing` subscriber (no subscriber crate needed).

mod common;

use common::bridge;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::memory::{ManualClock, MemoryBackend};
use lease_core::{BackendError, ElectionConfig, LossReason, Token};
use lease_tokio::{CancellationToken, Elector, LockObserver, LockOptions, Locker};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// One recorded event: its message, and the names and fields of the spans it was inside.
#[derive(Clone, Debug)]
struct Seen {
    message: String,
    spans: Vec<(String, String)>,
}

#[derive(Default)]
struct Recording {
    next: AtomicU64,
    spans: Mutex<HashMap<u64, (String, String)>>,
    stack: Mutex<Vec<u64>>,
    events: Mutex<Vec<Seen>>,
}

/// Renders a span's or an event's fields as `name=value ...` (and the message apart).
#[derive(Default)]
struct Fields {
    message: String,
    text: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.text.push_str(&format!("{}={value:?} ", field.name()));
        }
    }
}

#[derive(Clone, Default)]
struct Recorder(Arc<Recording>);

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let id = self.0.next.fetch_add(1, Ordering::Relaxed) + 1;
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        self.0
            .spans
            .lock()
            .unwrap()
            .insert(id, (attrs.metadata().name().to_owned(), fields.text));
        Id::from_u64(id)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let spans = self.0.spans.lock().unwrap();
        let seen = Seen {
            message: fields.message,
            spans: self
                .0
                .stack
                .lock()
                .unwrap()
                .iter()
                .filter_map(|id| spans.get(id).cloned())
                .collect(),
        };
        self.0.events.lock().unwrap().push(seen);
    }
    fn enter(&self, span: &Id) {
        self.0.stack.lock().unwrap().push(span.into_u64());
    }
    fn exit(&self, span: &Id) {
        let mut stack = self.0.stack.lock().unwrap();
        if let Some(i) = stack.iter().rposition(|id| *id == span.into_u64()) {
            stack.remove(i);
        }
    }
}

impl Recorder {
    /// The spans the first event with `message` was inside.
    fn spans_of(&self, message: &str) -> Vec<(String, String)> {
        let events = self.0.events.lock().unwrap();
        let seen = events
            .iter()
            .find(|e| e.message.contains(message))
            .unwrap_or_else(|| panic!("no event {message:?} in {events:#?}"));
        seen.spans.clone()
    }
}

/// Runs `f` on a current-thread runtime with paused time, under the recording subscriber.
fn traced<F: std::future::Future<Output = ()>>(recorder: &Recorder, f: F) {
    let runtime = common::paused_runtime();
    tracing::subscriber::with_default(recorder.clone(), || runtime.block_on(f));
}

#[test]
fn a_terms_work_and_events_run_in_its_span() {
    let recorder = Recorder::default();
    traced(&recorder, async {
        let clock = ManualClock::new();
        let _bridge = bridge(clock.clone());
        let backend = MemoryBackend::new(clock);
        let config = ElectionConfig::builder("jobs", "node-a")
            .ttl(Duration::from_millis(900))
            .build()
            .unwrap();
        let elector = Elector::new(backend, config);
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let run = elector.run(shutdown, move |term| {
            let stop = stop.clone();
            async move {
                tracing::info!("leader work step");
                stop.cancel();
                term.cancelled().await;
            }
        });
        tokio::time::timeout(Duration::from_secs(10), run)
            .await
            .expect("the run ends after shutdown")
            .unwrap();
    });
    for message in ["elected leader", "leader work step", "stepped down"] {
        let spans = recorder.spans_of(message);
        let term = spans
            .iter()
            .find(|(name, _)| name == "term")
            .unwrap_or_else(|| panic!("{message:?} outside a term span: {spans:?}"));
        assert!(term.1.contains("name=\"jobs\""), "{term:?}");
        assert!(term.1.contains("instance=\"node-a\""), "{term:?}");
        assert!(term.1.contains("token=1"), "{term:?}");
    }
}

#[derive(Clone, Default)]
struct Heard(Arc<Mutex<Vec<String>>>);

impl LockObserver for Heard {
    fn on_obtained(&self, keys: &[String], fence_token: Option<Token>) {
        self.0
            .lock()
            .unwrap()
            .push(format!("obtained {keys:?} {fence_token:?}"));
    }
    fn on_renew_failed(&self, keys: &[String], error: &BackendError) {
        let _ = error;
        self.0
            .lock()
            .unwrap()
            .push(format!("renew failed {keys:?}"));
    }
    fn on_lost(&self, keys: &[String], reason: LossReason) {
        self.0
            .lock()
            .unwrap()
            .push(format!("lost {keys:?} {reason:?}"));
    }
}

#[test]
fn a_locks_events_run_in_its_span_and_reach_its_observer() {
    let recorder = Recorder::default();
    let heard = Heard::default();
    traced(&recorder, {
        let heard = heard.clone();
        async move {
            let clock = ManualClock::new();
            let _bridge = bridge(clock.clone());
            let backend = Arc::new(MemoryBackend::new(clock));
            let locker = Locker::from_arc(Arc::clone(&backend)).with_observer(heard);
            let lock = locker
                .obtain(
                    "report",
                    Duration::from_millis(600),
                    LockOptions::new()
                        .fence_key("report:fence")
                        .auto_renew(Duration::from_millis(100)),
                )
                .await
                .unwrap();
            // Renewals fail from now on: tolerated, then the lock is lost at its deadline.
            backend.set_unavailable(true);
            tokio::time::timeout(Duration::from_secs(5), lock.lost().cancelled())
                .await
                .expect("lost by the deadline");
        }
    });
    let heard = heard.0.lock().unwrap().clone();
    assert_eq!(
        heard.first().map(String::as_str),
        Some("obtained [\"report\"] Some(Token(1))"),
        "{heard:?}"
    );
    assert!(
        heard.iter().any(|h| h == "renew failed [\"report\"]"),
        "{heard:?}"
    );
    assert_eq!(
        heard.last().map(String::as_str),
        Some("lost [\"report\"] DeadlineExpired"),
        "{heard:?}"
    );
    for message in ["lock obtained", "lock renewal failed", "lock lost"] {
        let spans = recorder.spans_of(message);
        let lock = spans
            .iter()
            .find(|(name, _)| name == "lock")
            .unwrap_or_else(|| panic!("{message:?} outside a lock span: {spans:?}"));
        assert!(lock.1.contains("keys=[\"report\"]"), "{lock:?}");
        assert!(lock.1.contains("fence_token=Some("), "{lock:?}");
    }
}
