//! Bounded polling: the kit's one wait loop, for conditions that have no signal of their own
//! (a server process becoming ready, a replication link coming up, sentinels agreeing).
//!
//! Each look either finishes the wait ([`Look::Done`]), says why not yet ([`Look::NotYet`],
//! kept as the error's `last_error` should the deadline pass), or fails it at once
//! ([`Look::Fail`], e.g. the process exited). There is always at least one look; past the
//! deadline the wait is [`Error::NotReady`].
//!
//! ```
//! # async fn demo() -> lease_testkit::Result<()> {
//! use std::time::Duration;
//! use lease_testkit::poll::{Look, poll_until};
//!
//! let mut tries = 0;
//! let n = poll_until(Duration::from_secs(5), "the third try", || {
//!     tries += 1;
//!     let now = tries;
//!     async move {
//!         if now < 3 { Look::NotYet(format!("try {now}")) } else { Look::Done(now) }
//!     }
//! })
//! .await?;
//! assert_eq!(n, 3);
//! # Ok(()) }
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
//! ```

use std::future::Future;
use std::time::{Duration, Instant};

use crate::{Error, Result};

/// How long [`poll_until`] waits between two looks.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// What one look at a condition found.
#[derive(Debug)]
pub enum Look<T> {
    /// The condition holds: the wait ends with this value.
    Done(T),
    /// Not yet, and why (the last one is reported if the deadline passes).
    NotYet(String),
    /// The wait cannot succeed any more: it ends with this error at once.
    Fail(Error),
}

/// Looks with `look` every [`POLL_INTERVAL`] until it is [`Look::Done`] or [`Look::Fail`];
/// once `deadline` (from the first look) has passed, [`Error::NotReady`] naming `what` and the
/// last [`Look::NotYet`] reason.
pub async fn poll_until<T, F, Fut>(
    deadline: Duration,
    what: impl Into<String>,
    look: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Look<T>>,
{
    poll_every(POLL_INTERVAL, deadline, what, look).await
}

/// [`poll_until`], looking every `interval`.
pub async fn poll_every<T, F, Fut>(
    interval: Duration,
    deadline: Duration,
    what: impl Into<String>,
    mut look: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Look<T>>,
{
    let started = Instant::now();
    loop {
        let last_error = match look().await {
            Look::Done(v) => return Ok(v),
            Look::Fail(e) => return Err(e),
            Look::NotYet(why) => why,
        };
        if started.elapsed() > deadline {
            return Err(Error::NotReady {
                what: what.into(),
                waited: started.elapsed(),
                last_error,
            });
        }
        tokio::time::sleep(interval).await;
    }
}

/// Adds `more` to the reason of an [`Error::NotReady`] (a log tail, say); other errors are
/// returned as they are.
pub(crate) fn with_detail(e: Error, more: impl FnOnce() -> String) -> Error {
    match e {
        Error::NotReady {
            what,
            waited,
            last_error,
        } => Error::NotReady {
            what,
            waited,
            last_error: format!("{last_error}{}", more()),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_condition_that_never_holds_is_not_ready_with_the_last_reason() {
        let mut n = 0;
        let got: Result<()> = tokio::time::timeout(
            Duration::from_secs(5),
            poll_every(
                Duration::from_millis(1),
                Duration::from_millis(20),
                "never",
                || {
                    n += 1;
                    let now = n;
                    async move { Look::NotYet(format!("look {now}")) }
                },
            ),
        )
        .await
        .expect("bounded");
        match got {
            Err(Error::NotReady {
                what, last_error, ..
            }) => {
                assert_eq!(what, "never");
                assert_eq!(last_error, format!("look {n}"));
                assert!(n >= 2);
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_failed_look_ends_the_wait_at_once() {
        let got: Result<()> = poll_until(Duration::from_secs(60), "x", || async {
            Look::Fail(Error::Config("gone".into()))
        })
        .await;
        assert!(matches!(got, Err(Error::Config(_))));
    }
}
