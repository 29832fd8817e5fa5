//! A call bounded by its deadline, on a reused timer.
//!
//! [`within`] is [`tokio::time::timeout_at`] with one difference: the timer comes from a
//! small per-thread pool of tokio timers already in the runtime's wheel, instead of a new one
//! registered on the call's first poll and removed when it ends. A new timer takes the wheel's
//! lock twice, to insert and to remove; a pooled one is reused where it is. A lock's calls (an
//! obtain's attempt, a release, a hand-off, a refresh) each carry one bound, so on the hot path
//! no round trip takes that lock, which every worker thread and the driver share.
//!
//! A pooled timer is reused only for a deadline no earlier than the one it is set to, and it
//! is not moved to the call's deadline: it may fire early, never late. When it fires before the
//! call's deadline, it is moved to that deadline then (one reset) and polled again; a call
//! whose reply comes first never moves it. A timer in steady use is thus reset about once per
//! bound (when its old deadline comes round), not once per call.
//!
//! The rules are `timeout_at`'s: the call is polled first (a reply that is ready wins over a
//! deadline that has passed), the output is `None` once the deadline passes, and dropping the
//! future drops the call and puts the timer back. A timer is reused only on the runtime that
//! made it (a pooled timer set later than the call's deadline, or of another runtime, is not
//! used; a new one is made, as `timeout_at` would). A pooled timer keeps the last call's waker
//! until it is reused or its deadline passes (then the driver wakes and drops it: at most one
//! spurious wake-up, never a lost one; never a poll in `Drop`, which would panic on a runtime
//! shutting down), and each thread keeps at most [`POOL_CAP`] timers.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::runtime::{Handle, Id};
use tokio::time::{Instant, Sleep};

/// The most timers one thread keeps for reuse (about the calls one thread has in flight at
/// once; each pooled timer is one small allocation).
pub(crate) const POOL_CAP: usize = 128;

/// How many of the most recently pooled timers a call looks through for one it can reuse.
const SCAN: usize = 4;

/// A timer and the runtime whose wheel it is in.
struct Slot {
    runtime: Id,
    sleep: Pin<Box<Sleep>>,
}

thread_local! {
    static POOL: RefCell<Vec<Slot>> = const { RefCell::new(Vec::new()) };
}

/// Runs `call` until it completes or `deadline` passes (then `None`), like
/// [`tokio::time::timeout_at`], on a pooled timer. Must be polled within a tokio runtime with
/// the time driver enabled (as `timeout_at` must).
pub(crate) async fn within<F: Future>(deadline: Instant, call: F) -> Option<F::Output> {
    let mut call = std::pin::pin!(call);
    let mut timer = Lent::take(deadline);
    std::future::poll_fn(move |cx| {
        if let Poll::Ready(out) = call.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        timer.poll(cx).map(|()| None)
    })
    .await
}

/// [`within`] for `bound` from now, like [`tokio::time::timeout`] (a bound too far to add is
/// about thirty years away, as tokio's is).
pub(crate) async fn within_for<F: Future>(bound: Duration, call: F) -> Option<F::Output> {
    let now = Instant::now();
    let deadline = now
        .checked_add(bound)
        .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30));
    within(deadline, call).await
}

/// A timer lent to one call; put back in this thread's pool when the call ends or is dropped.
struct Lent {
    slot: Option<Slot>,
    /// The runtime the call was first polled on (`None` outside any).
    runtime: Option<Id>,
    deadline: Instant,
}

impl Lent {
    /// A timer for `deadline`: a pooled one of this runtime set no later than `deadline` (left
    /// there; moved to `deadline` only if it fires first), else none yet (made on the first
    /// poll that needs it). Pooled timers of another runtime, one this thread ran before, are let go
    /// here: each holds that runtime's driver (and its file descriptors) open.
    fn take(deadline: Instant) -> Lent {
        let Ok(handle) = Handle::try_current() else {
            // Polling will report it, as `timeout_at` does.
            return Lent {
                slot: None,
                runtime: None,
                deadline,
            };
        };
        let runtime = handle.id();
        let (slot, stale) = POOL
            .try_with(|pool| {
                let Ok(mut pool) = pool.try_borrow_mut() else {
                    return (None, Vec::new());
                };
                let mut stale = Vec::new();
                if pool.last().is_some_and(|s| s.runtime != runtime) {
                    let (keep, other): (Vec<Slot>, Vec<Slot>) = std::mem::take(&mut *pool)
                        .into_iter()
                        .partition(|s| s.runtime == runtime);
                    *pool = keep;
                    stale = other;
                }
                let len = pool.len();
                let at = (len.saturating_sub(SCAN)..len)
                    .rev()
                    .find(|&i| pool[i].sleep.deadline() <= deadline);
                (at.map(|i| pool.swap_remove(i)), stale)
            })
            .unwrap_or_default();
        // Dropped outside the pool's borrow: a timer's drop takes its driver's lock.
        drop(stale);
        Lent {
            slot,
            runtime: Some(runtime),
            deadline,
        }
    }

    /// Polls the timer, making it on the first poll when none was pooled: ready once
    /// `deadline` has passed. A timer set earlier (a pooled one, left where it was) that fires
    /// is moved to `deadline` and polled again.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let deadline = self.deadline;
        let runtime = self.runtime;
        let slot = self.slot.get_or_insert_with(|| Slot {
            runtime: runtime.unwrap_or_else(|| Handle::current().id()),
            // Registered in the wheel on its first poll, just below.
            sleep: Box::pin(tokio::time::sleep_until(deadline)),
        });
        loop {
            if slot.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if slot.sleep.deadline() >= deadline {
                return Poll::Ready(());
            }
            // Fired early (set for an earlier call): on to this call's deadline. A reset
            // timer is pending until then, so this loops at most twice.
            slot.sleep.as_mut().reset(deadline);
        }
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        let Some(slot) = self.slot.take() else {
            return;
        };
        let _ = POOL.try_with(|pool| {
            if let Ok(mut pool) = pool.try_borrow_mut()
                && pool.len() < POOL_CAP
            {
                pool.push(slot);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_ready_call_wins_and_a_late_one_times_out() {
        let now = Instant::now();
        assert_eq!(within(now, async { 7 }).await, Some(7));
        let never = std::future::pending::<()>();
        assert_eq!(within(now + Duration::from_millis(50), never).await, None);
        assert!(Instant::now() >= now + Duration::from_millis(50));
    }

    #[tokio::test(start_paused = true)]
    async fn a_pooled_timer_is_reused_and_still_bounds() {
        let start = Instant::now();
        for i in 1..=5u64 {
            let deadline = start + Duration::from_millis(100 * i);
            let sleep_until_half = tokio::time::sleep_until(deadline - Duration::from_millis(50));
            assert_eq!(within(deadline, sleep_until_half).await, Some(()));
        }
        let pooled = POOL.with(|p| p.borrow().len());
        assert_eq!(pooled, 1, "one timer, reused by every call");
        // An earlier deadline than the pooled timer's takes a new one, and is kept.
        let early = Instant::now() + Duration::from_millis(10);
        assert_eq!(within(early, std::future::pending::<()>()).await, None);
        assert!(Instant::now() >= early && Instant::now() < early + Duration::from_millis(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_reused_timer_fires_at_the_new_deadline_not_the_old_one() {
        let start = Instant::now();
        // Registered for +10 ms, put back at +5 ms.
        let done = tokio::time::sleep_until(start + Duration::from_millis(5));
        assert_eq!(
            within(start + Duration::from_millis(10), done).await,
            Some(())
        );
        // Reused, left at +10 ms: it fires there, early, and is moved on to +100 ms; the call
        // is not timed out at +10 ms.
        let late = start + Duration::from_millis(100);
        assert_eq!(within(late, std::future::pending::<()>()).await, None);
        assert!(
            Instant::now() >= late,
            "timed out early: {:?}",
            Instant::now() - start
        );
        assert_eq!(
            POOL.with(|p| p.borrow().len()),
            1,
            "the one timer was reused"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_reused_timer_is_not_moved_when_the_call_ends_first() {
        let start = Instant::now();
        let first = start + Duration::from_millis(100);
        let done = tokio::time::sleep_until(start + Duration::from_millis(5));
        assert_eq!(within(first, done).await, Some(()));
        // Reused for later deadlines by calls that end before +100 ms: never reset.
        for i in 1..=3u64 {
            let deadline = first + Duration::from_millis(10 * i);
            let done = tokio::time::sleep_until(start + Duration::from_millis(20 * i));
            assert_eq!(within(deadline, done).await, Some(()));
        }
        let deadlines: Vec<Instant> =
            POOL.with(|p| p.borrow().iter().map(|s| s.sleep.deadline()).collect());
        assert_eq!(
            deadlines,
            vec![first],
            "one timer, still set for the first call"
        );
        // A call still in flight when it fires moves it to its own deadline.
        let late = first + Duration::from_millis(50);
        let done = tokio::time::sleep_until(first + Duration::from_millis(20));
        assert_eq!(within(late, done).await, Some(()));
        let deadlines: Vec<Instant> =
            POOL.with(|p| p.borrow().iter().map(|s| s.sleep.deadline()).collect());
        assert_eq!(deadlines, vec![late]);
    }

    #[test]
    fn timers_of_another_runtime_are_let_go_not_reused() {
        let mut last = None;
        for _ in 0..2 {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .expect("runtime");
            rt.block_on(async {
                let deadline = Instant::now() + Duration::from_millis(20);
                assert_eq!(within(deadline, std::future::pending::<()>()).await, None);
            });
            last = Some(rt.handle().id());
        }
        // The first runtime's timer (that runtime is gone) was dropped when the second runtime
        // took one; only the second's is pooled.
        let pooled: Vec<Id> = POOL.with(|p| p.borrow().iter().map(|s| s.runtime).collect());
        assert_eq!(pooled, vec![last.expect("two runtimes ran")]);
        POOL.with(|p| p.borrow_mut().clear());
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_call_puts_the_timer_back() {
        let deadline = Instant::now() + Duration::from_secs(1);
        let call = within(deadline, std::future::pending::<()>());
        let mut call = Box::pin(call);
        assert!(
            std::future::poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx)))
                .await
                .is_pending()
        );
        drop(call);
        assert_eq!(POOL.with(|p| p.borrow().len()), 1);
    }
}
