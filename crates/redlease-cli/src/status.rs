//! `redlease status`: who leads an election now.

use redlease::core::LeaseSpec;
use redlease::redis::RedisBackend;
use redlease::{ElectionConfig, LeaseBackend};

use crate::cli::StatusArgs;
use crate::exit::{self, Failure};
use crate::output::{Json, object, print_stdout};
use crate::{Ctx, conn, duration};

pub(crate) async fn status(ctx: &Ctx, args: StatusArgs) -> Result<u8, Failure> {
    // Validates the name exactly as an elector would (the instance id is a placeholder).
    ElectionConfig::builder(args.name.clone(), "redlease-status")
        .build()
        .map_err(|e| Failure::config(&e))?;
    let connection = conn::connect(&ctx.redis_url).await?;
    let backend = RedisBackend::new(connection);
    let spec = LeaseSpec::election(&args.name);
    let info = match tokio::time::timeout(conn::OP_TIMEOUT, backend.inspect(&spec)).await {
        Ok(Ok(info)) => info,
        Ok(Err(e)) => return Err(Failure::backend("status", &e)),
        Err(_) => {
            return Err(Failure::new(
                exit::UNAVAILABLE,
                format!("status: no reply within {:?}", conn::OP_TIMEOUT),
            ));
        }
    };
    let held = info.holder.is_some();
    // The counter is the latest token minted: the holder's while the lease is held.
    let token = if held { info.counter } else { None };
    let remaining_ms = info
        .remaining
        .filter(|_| held)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let mark = info.mark.token();
    if ctx.json {
        print_stdout(&object(&[
            ("name", Json::from(args.name.as_str())),
            ("holder", Json::from(info.holder.clone())),
            ("token", Json::from(token.map(|t| t.get()))),
            ("remaining_ms", Json::from(remaining_ms)),
            ("mark", Json::from(mark.map(|t| t.get()))),
            ("last_token", Json::from(info.counter.map(|t| t.get()))),
        ]));
    } else {
        let none = || "-".to_owned();
        print_stdout(&format!("name:       {}", args.name));
        print_stdout(&format!(
            "holder:     {}",
            info.holder.clone().unwrap_or_else(|| "(none)".to_owned())
        ));
        print_stdout(&format!(
            "token:      {}",
            token.map_or_else(none, |t| t.to_string())
        ));
        print_stdout(&format!(
            "remaining:  {}",
            info.remaining
                .filter(|_| held)
                .map_or_else(none, duration::show)
        ));
        print_stdout(&format!(
            "mark:       {}",
            mark.map_or_else(none, |t| t.to_string())
        ));
        if !held && let Some(last) = info.counter {
            print_stdout(&format!("last token: {last}"));
        }
    }
    Ok(exit::OK)
}
