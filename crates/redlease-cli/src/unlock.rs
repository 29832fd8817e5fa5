//! `redlease unlock KEY`: an operator's release of a plain lock, owner-checked (`--owner`) or
//! forced (`--force`: whoever holds it, with the fence raised).

use std::sync::Arc;

use redlease::core::{LeaseSpec, Owner, ReleaseOutcome, ReleaseRequest};
use redlease::{ForceReleaseOutcome, LeaseBackend, Locker};

use crate::cli::UnlockArgs;
use crate::exit::{self, Failure};
use crate::output::{Json, Progress, Sink, object, print_stdout};
use crate::{Ctx, conn};

pub(crate) async fn unlock(ctx: &Ctx, args: UnlockArgs) -> Result<u8, Failure> {
    // Bad input is refused before connecting.
    let fence_key = format!("{}:fence", args.key);
    let spec = LeaseSpec::lock([args.key.clone()], None).map_err(|e| Failure::config(&e))?;
    LeaseSpec::lock([args.key.clone()], Some(fence_key.clone()))
        .map_err(|e| Failure::config(&e))?;
    let owner = match &args.owner {
        Some(o) => Some(Owner::new(o).map_err(|e| Failure::config(&e))?),
        None => None,
    };
    crate::topology::with_backend!(ctx, once, false, |backend, _topology| {
        match &owner {
            Some(owner) => by_owner(ctx, backend, spec, owner.clone()).await,
            None => forced(ctx, backend, &args.key, &fence_key).await,
        }
    })
}

/// `--owner`: compare-and-delete; the fence is left alone (the owner gave it up).
async fn by_owner<B: LeaseBackend>(
    ctx: &Ctx,
    backend: B,
    spec: LeaseSpec,
    owner: Owner,
) -> Result<u8, Failure> {
    const WHAT: &str = "unlock";
    backend
        .check_spec(&spec)
        .map_err(|e| Failure::new(exit::INVALID, format!("{WHAT}: {e}")))?;
    let key = spec.keys().first().cloned().unwrap_or_default();
    let req = ReleaseRequest::new(Arc::new(spec), owner.clone());
    let outcome = match tokio::time::timeout(conn::OP_TIMEOUT, backend.release(&req)).await {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => return Err(Failure::backend(WHAT, &e)),
        Err(_) => {
            return Err(Failure::new(
                exit::OUTCOME_UNKNOWN,
                format!(
                    "{WHAT}: no reply within {:?}: the lock may or may not have been released",
                    conn::OP_TIMEOUT
                ),
            ));
        }
    };
    let released = outcome == ReleaseOutcome::Released;
    if ctx.json {
        print_stdout(&object(&[
            ("lock", Json::from(key.as_str())),
            ("released", Json::from(released)),
            ("owner", Json::from(owner.as_str())),
        ]));
    } else if released {
        print_stdout(&format!("released: {key} (held by {})", owner.as_str()));
    } else {
        print_stdout(&format!(
            "not held: {key} is not held by {}; nothing deleted",
            owner.as_str()
        ));
    }
    Ok(if released { exit::OK } else { exit::NOT_HELD })
}

/// `--force`: whoever holds it, the fence raised in the same step; logged on stderr.
async fn forced<B: LeaseBackend>(
    ctx: &Ctx,
    backend: B,
    key: &str,
    fence_key: &str,
) -> Result<u8, Failure> {
    let locker = Locker::new(backend);
    let outcome = locker
        .force_release(key, Some(fence_key))
        .await
        .map_err(|e| {
            let f = Failure::lock(key, &e);
            Failure::new(f.code, format!("unlock --force: {}", f.message))
        })?;
    let fence = outcome.fence().map(|t| t.get());
    let shown = fence.map_or_else(|| "-".to_owned(), |t| t.to_string());
    let (released, holder) = match &outcome {
        ForceReleaseOutcome::Released { holder, .. } => (true, Some(holder.clone())),
        _ => (false, None),
    };
    let progress = Progress::new(ctx.json, Sink::Stderr);
    let text = match &holder {
        Some(h) => format!(
            "unlock --force: broke lock {key:?} held by {h}; fence raised to {shown} (its fenced writes are refused)"
        ),
        None => {
            format!("unlock --force: lock {key:?} was not held; fence raised to {shown} anyway")
        }
    };
    progress.event(
        "forced",
        &text,
        &[
            ("lock", Json::from(key)),
            ("holder", Json::from(holder.clone())),
            ("fence", Json::from(fence)),
        ],
    );
    if ctx.json {
        print_stdout(&object(&[
            ("lock", Json::from(key)),
            ("released", Json::from(released)),
            ("holder", Json::from(holder.clone())),
            ("fence", Json::from(fence)),
        ]));
    } else {
        match &holder {
            Some(h) => print_stdout(&format!("released: {key} (held by {h}; fence {shown})")),
            None => print_stdout(&format!("not held: {key}; nothing deleted (fence {shown})")),
        }
    }
    Ok(if released { exit::OK } else { exit::NOT_HELD })
}
