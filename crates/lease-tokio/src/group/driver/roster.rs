//! The share rule's side of the group's task ([`Driver`]): turning the last roster read into
//! this member's target and the machines' contend / hold / resign ([`lease_core::share`]), and
//! reading the roster (which members hold a roster slot) every acquire interval.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;

use lease_core::share::{Step, step, target, target_without_slot};
use lease_core::{BackendError, LeaseBackend, LeaseInfo, LeaseSpec};
use tokio::time::Instant;

use super::{Done, Driver, InFlight};

impl<B: LeaseBackend> Driver<B> {
    /// The share rule: see the [group's docs](super::super).
    pub(super) fn apply_policy(&mut self, now: lease_core::Instant) {
        if self.stopping {
            return;
        }
        let names = self.names;
        let goal = if self.slots.len() == names {
            names
        } else {
            let held: Vec<usize> = self.roster_held.iter().copied().collect();
            for &extra in held.iter().skip(1) {
                tracing::debug!(slot = %self.slots[extra].name, "holding two roster slots; resigning one");
                self.slots[extra].election.resign(now);
                self.mark(extra);
            }
            let roster_contend = held.is_empty();
            if roster_contend != self.roster_contend {
                self.roster_contend = roster_contend;
                self.mark_range(names..self.slots.len());
            }
            match (held.first(), &self.roster_live) {
                (Some(&mine), Some(live)) => {
                    let mine = mine - names;
                    let live_at = |i: usize| i == mine || live.get(i).copied().unwrap_or(false);
                    let members = (0..self.slots.len() - names)
                        .filter(|&i| live_at(i))
                        .count();
                    let rank = (0..mine).filter(|&i| live_at(i)).count();
                    self.shared.members.store(members, Ordering::Relaxed);
                    target(names, members, rank)
                }
                // No slot (lost, or none yet), or no roster read yet: keep what is owned.
                _ => target_without_slot(self.owned),
            }
        };
        self.shared.target.store(goal, Ordering::Relaxed);
        let owned = self.owned;
        let (contend, resign) = match step(owned, goal) {
            Step::Contend => (true, 0),
            Step::Hold => (false, 0),
            Step::Resign(n) => (false, n),
        };
        if contend != self.contend {
            self.contend = contend;
            self.mark_range(0..names);
        }
        if resign > 0 {
            tracing::debug!(
                owned,
                target = goal,
                resign,
                "over its share: resigning names"
            );
            let leading: Vec<usize> = (0..names)
                .rev()
                .filter(|&i| self.slots[i].election.token(now).is_some())
                .take(resign)
                .collect();
            for idx in leading {
                self.slots[idx].election.resign(now);
                self.mark(idx);
            }
        }
    }

    /// Reads the roster every acquire interval (one `inspect` per slot, in turn).
    pub(super) fn maybe_read_roster(&mut self) {
        if self.stopping
            || self.reading_roster
            || self.slots.len() == self.names
            || Instant::now() < self.next_roster_read
        {
            return;
        }
        self.reading_roster = true;
        let specs: Vec<Arc<LeaseSpec>> = self.slots[self.names..]
            .iter()
            .map(|s| Arc::clone(s.election.spec()))
            .collect();
        let backend = Arc::clone(&self.backend);
        let timeout = self.acquire_timeout;
        let task = self.tasks.spawn(async move {
            // Every slot at once, polled together on this task: on a multiplexed connection
            // the reads go out in one write and come back in one read (one after another,
            // they cost a round trip and a wake each, a few dozen every acquire interval).
            let read = read_all(specs.iter().map(|spec| backend.inspect(spec)).collect());
            Done::Roster(tokio::time::timeout(timeout, read).await.ok().flatten())
        });
        self.in_flight
            .insert(task.id(), InFlight::Roster(self.roster_epoch));
    }
}

/// Polls `reads` together until all have answered: whether each slot is held, in order, or
/// `None` if any read failed.
async fn read_all<F>(reads: Vec<F>) -> Option<Vec<bool>>
where
    F: Future<Output = Result<LeaseInfo, BackendError>> + Unpin,
{
    let mut reads: Vec<Option<F>> = reads.into_iter().map(Some).collect();
    let mut live: Vec<Option<bool>> = vec![None; reads.len()];
    let mut failed = false;
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (read, held) in reads.iter_mut().zip(live.iter_mut()) {
            if let Some(f) = read {
                match Pin::new(f).poll(cx) {
                    Poll::Ready(Ok(info)) => *held = Some(info.holder.is_some()),
                    Poll::Ready(Err(_)) => failed = true,
                    Poll::Pending => {
                        pending = true;
                        continue;
                    }
                }
                *read = None;
            }
        }
        if pending && !failed {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    if failed {
        return None;
    }
    live.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use std::future::{Future, ready};
    use std::pin::Pin;
    use std::time::Duration;

    use lease_core::{BackendError, LeaseInfo};

    use super::read_all;

    type Read = Pin<Box<dyn Future<Output = Result<LeaseInfo, BackendError>> + Send>>;

    fn slot(holder: Option<&str>, after_ms: u64) -> Read {
        let mut info = LeaseInfo::default();
        info.holder = holder.map(str::to_owned);
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(after_ms)).await;
            Ok(info)
        })
    }

    #[tokio::test(start_paused = true)]
    async fn every_slot_in_order_whichever_answers_first() {
        let reads = vec![slot(Some("a"), 30), slot(None, 10), slot(Some("c"), 20)];
        assert_eq!(read_all(reads).await, Some(vec![true, false, true]));
        assert_eq!(read_all(Vec::<Read>::new()).await, Some(vec![]));
    }

    #[tokio::test(start_paused = true)]
    async fn one_failed_read_fails_the_roster_read_at_once() {
        let failed: Read = Box::pin(ready(Err(BackendError::Timeout(Duration::from_millis(1)))));
        let start = tokio::time::Instant::now();
        let reads = vec![slot(Some("a"), 60_000), failed];
        assert_eq!(read_all(reads).await, None);
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "not held up by the slow read"
        );
    }
}
