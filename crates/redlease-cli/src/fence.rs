//! `redlease fence`: fenced writes from a shell leader.

use redlease::redis::client::aio::ConnectionLike;
use redlease::redis::{RedisBackend, RedisLeaseError};
use redlease::{ElectionConfig, FenceOutcome, Token};
use std::time::Duration;

use crate::cli::{FenceCommand, FenceTarget};
use crate::exit::{self, Failure};
use crate::output::{Json, object, print_stdout};
use crate::topology::{self, Topology, Unsupported};
use crate::{Ctx, conn};

pub(crate) async fn fence(ctx: &Ctx, command: FenceCommand) -> Result<u8, Failure> {
    let (target, what) = match &command {
        FenceCommand::Set { target, key, .. } => (target, format!("SET {key}")),
        FenceCommand::HSet {
            target, key, field, ..
        } => (target, format!("HSET {key} {field}")),
        FenceCommand::Del { target, keys } => (target, format!("DEL {}", keys.join(" "))),
    };
    let token = validate(target)?;
    match Topology::of(ctx)? {
        // Refused before connecting: see `Unsupported::FenceOnRedlock`.
        Topology::Redlock(_) => Err(Unsupported::FenceOnRedlock.into()),
        Topology::Standalone => {
            let backend = topology::standalone_once(ctx, false).await?;
            fence_on(ctx, &command, backend, token, &what).await
        }
        Topology::Cluster(urls) => {
            let backend = topology::cluster(ctx, &urls, false).await?;
            fence_on(ctx, &command, backend, token, &what).await
        }
        Topology::Sentinel { sentinels, service } => {
            let backend = topology::sentinel(ctx, &sentinels, &service, false).await?;
            fence_on(ctx, &command, backend, token, &what).await
        }
    }
}

/// The fenced write on a single server, a Sentinel-managed primary or a Redis Cluster.
async fn fence_on<C>(
    ctx: &Ctx,
    command: &FenceCommand,
    backend: RedisBackend<C>,
    token: Token,
    what: &str,
) -> Result<u8, Failure>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let target = match command {
        FenceCommand::Set { target, .. }
        | FenceCommand::HSet { target, .. }
        | FenceCommand::Del { target, .. } => target,
    };
    // The fencer bounds the write itself (its error then says "outcome unknown"); the outer
    // timeout below only guards against a hang elsewhere. On a cluster the election's name
    // must carry a hash tag, and every key its slot (refused before the round trip).
    let fencer = backend
        .election_fencer(&target.name, token)
        .map_err(|e| Failure::invalid("--name", e))?
        .with_timeout(conn::OP_TIMEOUT);
    let write = async {
        match command {
            FenceCommand::Set { key, value, .. } => fencer.set(key.clone(), value.as_str()).await,
            FenceCommand::HSet {
                key, field, value, ..
            } => {
                fencer
                    .hset(key.clone(), field.as_str(), value.as_str())
                    .await
            }
            FenceCommand::Del { keys, .. } => fencer.del(keys.iter().cloned()).await,
        }
    };
    let outcome = match tokio::time::timeout(conn::OP_TIMEOUT + Duration::from_secs(1), write).await
    {
        Ok(Ok(o)) => o,
        Ok(Err(RedisLeaseError::Backend(e))) => {
            return Err(Failure::backend(&format!("fenced {what}"), &e));
        }
        Ok(Err(e)) => return Err(Failure::invalid("fenced write", e)),
        Err(_) => {
            // Sent, unanswered: it may have been applied.
            return Err(Failure::new(
                exit::OUTCOME_UNKNOWN,
                format!(
                    "fenced {what}: no reply within {:?}; the outcome is unknown (it may have been applied)",
                    conn::OP_TIMEOUT
                ),
            ));
        }
    };
    let (applied, mark) = match outcome {
        FenceOutcome::Applied => (true, Some(token)),
        FenceOutcome::Stale { mark } => (false, mark.token()),
    };
    if ctx.json {
        print_stdout(&object(&[
            ("applied", Json::from(applied)),
            ("token", Json::from(token.get())),
            ("mark", Json::from(mark.map(|t| t.get()))),
        ]));
    }
    if applied {
        if !ctx.json {
            eprintln_line(&format!("applied {what} under token {token}"));
        }
        Ok(exit::OK)
    } else {
        let mark_text = mark.map_or_else(|| "?".to_owned(), |m| m.to_string());
        eprintln_line(&format!(
            "refused: token {token} is stale (the mark is {mark_text}: a newer term exists); nothing was written"
        ));
        Ok(exit::STALE)
    }
}

/// The name (as an elector would validate it) and the token, before any round trip.
fn validate(target: &FenceTarget) -> Result<Token, Failure> {
    ElectionConfig::builder(target.name.clone(), "redlease-fence")
        .build()
        .map_err(|e| Failure::config(&e))?;
    target
        .token
        .parse::<Token>()
        .map_err(|e| Failure::token(&e))
}

fn eprintln_line(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "redlease: {line}");
}
