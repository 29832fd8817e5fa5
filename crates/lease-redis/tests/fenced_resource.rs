//! The Redis fencer used as a generic `FencedResource` against a
//! real Redis.

use lease_core::{FenceMark, FenceOutcome, FencedResource, Token};
use lease_redis::{FencedWrite, RedisFencer};
use lease_testkit::redis::RedisServer;
use redis::AsyncCommands;

async fn write_through<R: FencedResource>(
    resource: &R,
    token: Token,
    write: R::Write,
) -> Result<FenceOutcome, R::Error> {
    resource.apply(token, write).await
}

#[tokio::test]
async fn redis_fencer_is_a_fenced_resource() {
    let server = RedisServer::start().await.unwrap();
    let mut conn = server.connection().await.unwrap();
    let t = |raw| Token::new(raw).unwrap();
    let fencer = RedisFencer::for_election(conn.clone(), "{jobs}", t(2));

    let outcome = write_through(&fencer, t(2), FencedWrite::set("{jobs}:state", "two"))
        .await
        .unwrap();
    assert_eq!(outcome, FenceOutcome::Applied);
    let outcome = write_through(&fencer, t(1), FencedWrite::set("{jobs}:state", "one"))
        .await
        .unwrap();
    assert_eq!(
        outcome,
        FenceOutcome::Stale {
            mark: FenceMark::at(t(2))
        }
    );
    let state: String = conn.get("{jobs}:state").await.unwrap();
    assert_eq!(state, "two");
}
