//! An in-memory backend with a manual clock and fault switches.
//!
//! It implements [`LeaseBackend`](crate::LeaseBackend) with exactly the semantics of the Redis
//! scripts (same-owner takeover, counter healing from the mark, exact owner match,
//! guard-then-write-then-advance for fenced writes, WRONGTYPE on a write to a key of another
//! type), so code written against it behaves the same against Redis. Time is a [`ManualClock`]
//! the test advances; nothing here reads a real clock or needs a runtime (delays are futures
//! woken by the clock).
//!
//! It is for unit tests — ours and our users'. It is not a stand-in for Redis in integration
//! tests.
//!
//! ```
//! use std::time::Duration;
//! use lease_core::memory::{ManualClock, MemoryBackend};
//! use lease_core::{LeaseSpec, Owner, Ttl, AcquireRequest, AcquireOutcome};
//! use std::sync::Arc;
//!
//! let clock = ManualClock::new();
//! let backend = MemoryBackend::new(clock.clone());
//! let req = AcquireRequest::new(
//!     Arc::new(LeaseSpec::election("jobs")),
//!     Owner::new("a")?,
//!     Ttl::new(Duration::from_secs(1))?,
//! );
//! let first = backend.acquire_now(&req)?;
//! assert!(matches!(first, AcquireOutcome::Acquired { token: Some(t), .. } if t.get() == 1));
//! clock.advance(Duration::from_secs(2)); // the lease expires
//! let other = AcquireRequest::new(req.spec.clone(), Owner::new("b")?, req.ttl);
//! let second = backend.acquire_now(&other)?;
//! assert!(matches!(second, AcquireOutcome::Acquired { token: Some(t), .. } if t.get() == 2));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod backend;
mod clock;
mod fair;
mod fencer;
mod rwlock;
mod semaphore;
mod store;

pub use backend::MemoryBackend;
pub use clock::{ManualClock, Sleep};
pub use fencer::{MemoryFencer, MemoryPermitFencer, MemoryWrite};
pub use store::Faults;

use std::sync::{Mutex, MutexGuard};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock means a panic elsewhere while holding it; the data is still consistent
    // for our purposes (every mutation is a single step), so keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
