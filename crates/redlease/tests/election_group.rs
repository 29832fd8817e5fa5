//! Many elections per process ([`ElectionGroup`]) against a real Redis: 1,000 elections on one
//! task renewed in batches (counted with `INFO commandstats`), a fair split of 300 names among
//! three members (a newcomer gets its share from members that resign their excess), a member
//! cut off by a blackholed connection whose names the others take over within TTL + acquire
//! interval + 1 s while its own handle stops claiming them by its deadlines, and a negative
//! control (the share rule off: no split).
//!
//! Every await is bounded; the only sleeps are measurement windows (commands counted over
//! several intervals) and the window of the negative control.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use common::locks::{ms, proxied};
use common::{Backend, EVENTUALLY, raw};
use lease_testkit::proxy::{FaultProxy, Mode};
use redlease::{ElectionGroup, LeaseBackend};

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("shard-{i}")).collect()
}

/// `INFO commandstats` `calls=` per command name.
async fn command_calls(conn: &mut redis::aio::MultiplexedConnection) -> HashMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// Waits (bounded by `within`) until `pred` holds over the groups' owned counts; panics with
/// the counts if it never does.
async fn settle<B: LeaseBackend>(
    groups: &[&ElectionGroup<B>],
    within: Duration,
    what: &str,
    pred: impl Fn(&[usize]) -> bool,
) {
    let deadline = tokio::time::Instant::now() + within;
    let mut watches: Vec<_> = groups.iter().map(|g| g.subscribe()).collect();
    loop {
        let counts: Vec<usize> = groups.iter().map(|g| g.owned().len()).collect();
        if pred(&counts) {
            return;
        }
        let changed = futures_any(&mut watches);
        if tokio::time::timeout_at(deadline, changed).await.is_err() {
            panic!("timed out waiting for: {what} (owned counts {counts:?})");
        }
    }
}

/// The first of the watches to change (or a short tick, so that a lapse that needs no
/// publication is seen too).
async fn futures_any(watches: &mut [tokio::sync::watch::Receiver<redlease::group::Owned>]) {
    let mut set = tokio::task::JoinSet::new();
    for w in watches.iter() {
        let mut w = w.clone();
        set.spawn(async move {
            let _ = w.changed().await;
        });
    }
    let _ = tokio::time::timeout(ms(100), set.join_next()).await;
    for w in watches.iter_mut() {
        w.mark_unchanged();
    }
}

/// No name owned by two members at once (as each member's handle sees it).
fn disjoint<B: LeaseBackend>(groups: &[&ElectionGroup<B>]) -> usize {
    let mut all = BTreeSet::new();
    for g in groups {
        for name in g.owned().keys() {
            assert!(all.insert(name.clone()), "{name} owned by two members");
        }
    }
    all.len()
}

async fn backend(server: &lease_testkit::redis::RedisServer) -> Backend {
    common::backend(server).await
}

/// Issue 31: 1,000 elections in one process, one task, one connection. All are led, and over
/// several renew intervals the client sends far fewer than one command per election per
/// interval (the renewals travel as `renew_many.lua` calls of up to 128 leases), while each
/// lease is renewed about once per interval (PEXPIRE inside the script).
#[tokio::test]
async fn a_thousand_elections_share_batched_renewals() {
    const N: usize = 1_000;
    let server = common::redis().await;
    let mut raw = raw(&server).await;
    let (ttl, interval) = (ms(3_000), ms(1_000));
    let group = ElectionGroup::builder(backend(&server).await, "many", names(N), "solo")
        .ttl(ttl)
        .renew_interval(interval)
        .start()
        .unwrap();
    settle(&[&group], EVENTUALLY, "all 1,000 led", |c| c[0] == N).await;
    assert_eq!(group.members(), 1);
    assert_eq!(group.target(), N);
    let before = command_calls(&mut raw).await;
    let start = std::time::Instant::now();
    // A measurement window: several renew intervals.
    tokio::time::sleep(interval * 4).await;
    let after = command_calls(&mut raw).await;
    let intervals = start.elapsed().as_secs_f64() / interval.as_secs_f64();
    let delta =
        |name: &str| after.get(name).copied().unwrap_or(0) - before.get(name).copied().unwrap_or(0);
    // Commands the client sent: scripts (renewals, roster reads), plus the INFO above.
    let client: u64 = delta("evalsha") + delta("eval") + delta("info") + delta("script|load");
    let per_election = client as f64 / N as f64 / intervals;
    let renewals = delta("pexpire") as f64 / N as f64;
    println!(
        "{client} client commands in {intervals:.1} intervals: {per_election:.4} per election per interval; {renewals:.2} renewals per election"
    );
    assert!(
        per_election <= 1.0,
        "{per_election} commands per election per interval"
    );
    // Batched: a few dozen scripts per interval, not one per election.
    assert!(
        per_election <= 0.1,
        "{per_election}: renewals are not batched"
    );
    assert!(
        renewals >= intervals - 2.0 && renewals <= intervals * 1.15 + 1.0,
        "{renewals:.1} renewals per election in {intervals:.1} intervals"
    );
    let owned = group.owned();
    assert_eq!(owned.len(), N);
    for (name, token) in owned.iter() {
        assert_eq!(group.token(name), Some(*token), "{name} led");
    }
    tokio::time::timeout(EVENTUALLY, group.shutdown())
        .await
        .expect("shutdown releases everything in time");
    let leaders: Vec<Option<String>> = redis::cmd("MGET")
        .arg(
            (0..N)
                .map(|i| format!("shard-{i}:leader"))
                .collect::<Vec<_>>(),
        )
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(
        leaders.iter().all(Option::is_none),
        "every lease released at shutdown"
    );
}

/// Issue 31: three members split 300 names 100/100/100. The first owns all 300 alone; two
/// newcomers get their shares because it resigns its excess (gracefully: released, no TTL
/// wait); no name is ever owned by two members as their handles see it.
#[tokio::test]
async fn three_members_split_three_hundred_names_fairly() {
    const N: usize = 300;
    let server = common::redis().await;
    let start = |id: &'static str, b: Backend| {
        ElectionGroup::builder(b, "split", names(N), id)
            .ttl(ms(1_500))
            .acquire_interval(ms(500))
            .start()
            .unwrap()
    };
    let a = start("a", backend(&server).await);
    settle(&[&a], EVENTUALLY, "a alone owns all", |c| c[0] == N).await;
    let b = start("b", backend(&server).await);
    let c = start("c", backend(&server).await);
    let groups = [&a, &b, &c];
    settle(&groups, EVENTUALLY, "a fair split", |c| {
        c.iter().sum::<usize>() == N && c.iter().all(|&n| n.abs_diff(N / 3) <= 1)
    })
    .await;
    assert_eq!(disjoint(&groups), N);
    // Every member's roster read has caught up (a split can be reached a read early), and
    // the split holds under the settled view.
    tokio::time::timeout(EVENTUALLY, async {
        while !groups.iter().all(|g| g.members() == 3) {
            tokio::time::sleep(ms(50)).await;
        }
    })
    .await
    .expect("every member sees three members");
    assert!(groups.iter().all(|g| g.target() == N / 3));
    settle(&groups, EVENTUALLY, "a fair split, settled", |c| {
        c.iter().all(|&n| n == N / 3)
    })
    .await;
    assert_eq!(disjoint(&groups), N);
    for g in [a, b, c] {
        tokio::time::timeout(EVENTUALLY, g.shutdown())
            .await
            .unwrap();
    }
}

/// Issue 31: a member cut off (its connection blackholed: nothing it sends arrives, nothing
/// is answered, so it releases nothing) stops claiming its names by their own deadlines, and
/// the two others take every name over within TTL + acquire interval + 1 s.
#[tokio::test]
async fn a_member_cut_off_loses_its_names_to_the_others_in_time() {
    const N: usize = 300;
    let server = common::redis().await;
    let (ttl, acquire) = (ms(1_500), ms(500));
    let start = |id: &'static str, b: Backend| {
        ElectionGroup::builder(b, "cut", names(N), id)
            .ttl(ttl)
            .acquire_interval(acquire)
            .start()
            .unwrap()
    };
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let a = start("a", backend(&server).await);
    let b = start("b", backend(&server).await);
    let c = start("c", proxied(&server, &proxy).await);
    settle(&[&a, &b, &c], EVENTUALLY, "a fair split", |n| {
        n.iter().sum::<usize>() == N && n.iter().all(|&k| k.abs_diff(N / 3) <= 1)
    })
    .await;
    let cs: Vec<String> = c.owned().keys().cloned().collect();
    proxy.set_mode(Mode::Blackhole);
    let cut = std::time::Instant::now();
    settle(
        &[&a, &b],
        ttl + acquire + ms(1_000),
        "the others own all",
        |n| n.iter().sum::<usize>() == N,
    )
    .await;
    println!("taken over in {:?}", cut.elapsed());
    assert_eq!(disjoint(&[&a, &b]), N);
    // The cut-off member's own deadlines have passed: it claims none of its old names.
    assert!(
        cut.elapsed() >= ttl - ms(500) - ms(100),
        "not before the TTL: {:?}",
        cut.elapsed()
    );
    for name in &cs {
        assert_eq!(
            c.token(name),
            None,
            "{name} still claimed by the cut-off member"
        );
    }
    settle(&[&a, &b], EVENTUALLY, "150 each", |n| n == [150, 150]).await;
    drop(c);
    for g in [a, b] {
        tokio::time::timeout(EVENTUALLY, g.shutdown())
            .await
            .unwrap();
    }
}

/// Negative control: with the share rule off (`contend_for_all`), a newcomer gets nothing
/// from a member that owns every name, so the split above is the rule's doing.
#[tokio::test]
async fn without_the_share_rule_a_newcomer_gets_nothing() {
    const N: usize = 60;
    let server = common::redis().await;
    let start = |id: &'static str, b: Backend| {
        ElectionGroup::builder(b, "greedy", names(N), id)
            .ttl(ms(1_500))
            .acquire_interval(ms(500))
            .contend_for_all()
            .start()
            .unwrap()
    };
    let a = start("a", backend(&server).await);
    settle(&[&a], EVENTUALLY, "a owns all", |c| c[0] == N).await;
    let b = start("b", backend(&server).await);
    // The window of the control: several acquire intervals and a TTL.
    tokio::time::sleep(ms(2_500)).await;
    assert_eq!(a.owned().len(), N);
    assert_eq!(b.owned().len(), 0);
    for g in [a, b] {
        tokio::time::timeout(EVENTUALLY, g.shutdown())
            .await
            .unwrap();
    }
}

/// Issue 54: a member whose roster slot is lost (its key deleted, as an eviction or an
/// operator would) keeps every name it leads — same terms, same tokens, never fewer owned —
/// while it wins a slot again. Before, it resigned every name at once.
#[tokio::test]
async fn a_lost_roster_slot_ends_no_term() {
    const N: usize = 20;
    let server = common::redis().await;
    let mut raw = raw(&server).await;
    let (ttl, acquire) = (ms(1_500), ms(300));
    let group = ElectionGroup::builder(backend(&server).await, "lose", names(N), "a")
        .ttl(ttl)
        .acquire_interval(acquire)
        .start()
        .unwrap();
    settle(&[&group], EVENTUALLY, "all led", |n| n[0] == N).await;
    let before = group.owned();
    // Watch the owned count from now on: it must never drop.
    let mut watch = group.subscribe();
    let fewest = tokio::spawn(async move {
        let mut fewest = usize::MAX;
        let deadline = tokio::time::Instant::now() + ttl * 3;
        loop {
            fewest = fewest.min(watch.borrow_and_update().len());
            match tokio::time::timeout_at(deadline, watch.changed()).await {
                Ok(Ok(())) => {}
                _ => return fewest,
            }
        }
    });
    // Delete every roster slot's key: the member's slot renewal finds it gone.
    let mut deleted = 0;
    for i in 0..64 {
        let spec = redlease::core::LeaseSpec::election(&format!("lose.member.{i}"));
        for key in spec.keys() {
            let n: i64 = redis::cmd("DEL")
                .arg(key)
                .query_async(&mut raw)
                .await
                .unwrap();
            deleted += n;
        }
    }
    assert_eq!(deleted, 1, "the member held one roster slot");
    let fewest = tokio::time::timeout(EVENTUALLY, fewest)
        .await
        .expect("the watch window ends")
        .expect("watch task");
    assert_eq!(
        fewest, N,
        "names were resigned when the roster slot was lost"
    );
    // The same terms (no name changed hands or token), and a slot again.
    assert_eq!(group.owned(), before);
    tokio::time::timeout(EVENTUALLY, async {
        while group.members() != 1 {
            tokio::time::sleep(ms(20)).await;
        }
    })
    .await
    .expect("a roster slot again");
    tokio::time::timeout(EVENTUALLY, group.shutdown())
        .await
        .unwrap();
}
