//! The share rule's side of the group's task ([`Driver`]): turning the last roster read into
//! this member's target and the machines' contend / hold / resign ([`lease_core::share`]), and
//! reading the roster (which members hold a roster slot) every acquire interval.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use lease_core::share::{Step, step, target};
use lease_core::{LeaseBackend, LeaseSpec};
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
                _ => 0,
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
            // One after another on this task: a few dozen short calls every acquire interval.
            let read = async {
                let mut live = Vec::with_capacity(specs.len());
                for spec in &specs {
                    live.push(backend.inspect(spec).await.ok()?.holder.is_some());
                }
                Some(live)
            };
            Done::Roster(tokio::time::timeout(timeout, read).await.ok().flatten())
        });
        self.in_flight.insert(task.id(), InFlight::Roster);
    }
}
