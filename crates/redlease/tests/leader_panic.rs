//! A panic in leader work (issue defect 6): reported (Observer and `tracing`), the term ends,
//! the lease is released at once (not left to expire), and the elector contends again.

mod common;

use std::time::Duration;

use redlease::{CancellationToken, Elector, Observer, Token};
use tokio::sync::mpsc;

/// Forwards each reported panic.
struct Panics(mpsc::UnboundedSender<(Token, String)>);

impl Observer for Panics {
    fn on_leader_panic(&self, token: Token, message: &str) {
        let _ = self.0.send((token, message.to_owned()));
    }
}

#[tokio::test]
async fn a_panicking_leader_is_reported_released_and_contends_again() {
    let server = common::redis().await;
    let (tx, mut panics) = mpsc::unbounded_channel();
    // TTL 6 s: a lease left to expire would hold the key for seconds after the panic.
    let elector = Elector::builder(
        common::backend(&server).await,
        common::config("{p}", "a", 6_000),
    )
    .observer(Panics(tx))
    .build();
    let shutdown = CancellationToken::new();
    let (terms_tx, mut terms) = mpsc::unbounded_channel();
    let run = {
        let elector = elector.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            elector
                .run(shutdown, move |term| {
                    let terms_tx = terms_tx.clone();
                    async move {
                        let _ = terms_tx.send(term.token());
                        if term.token().get() == 1 {
                            panic!("boom in term {}", term.token());
                        }
                        term.cancelled().await;
                    }
                })
                .await
        })
    };
    let (token, message) = tokio::time::timeout(Duration::from_secs(10), panics.recv())
        .await
        .expect("the panic is reported within seconds")
        .expect("observer alive");
    assert_eq!(token.get(), 1);
    assert_eq!(message, "boom in term 1");
    // Released at once: the key is gone well before the 6 s TTL could expire it.
    let mut conn = server.connection().await.unwrap();
    let released = tokio::time::timeout(Duration::from_secs(2), async {
        loop {
            let holder: Option<String> = redis::cmd("GET")
                .arg("{p}:leader")
                .query_async(&mut conn)
                .await
                .unwrap();
            if holder.is_none() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(released.is_ok(), "the lease was released after the panic");
    // And the elector contends again: a new term with a higher token.
    let first = tokio::time::timeout(common::EVENTUALLY, terms.recv())
        .await
        .unwrap();
    assert_eq!(first.map(|t| t.get()), Some(1));
    let second = tokio::time::timeout(common::EVENTUALLY, terms.recv())
        .await
        .expect("re-elected")
        .unwrap();
    assert!(second.get() > 1);
    shutdown.cancel();
    tokio::time::timeout(common::EVENTUALLY, run)
        .await
        .expect("run returns")
        .unwrap()
        .expect("a clean shutdown");
}
