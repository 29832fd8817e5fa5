//! The nemesis's schedule: a pure function of the seed, the scenario, the run's length, the
//! node count and the TTL, so a seed replays the same faults at the same offsets. Which node
//! is the leader when a fault aimed at "the leader" starts depends on the run; everything
//! else replays exactly.

use std::fmt;
use std::time::Duration;

use crate::rng::Rng;
use crate::scenario::Scenario;

/// Which way a partition cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Requests and replies are dropped.
    Both,
    /// The node's requests are dropped (nothing reaches the server).
    Requests,
    /// The server's replies are dropped (requests are applied, the node hears nothing).
    Replies,
}

impl Direction {
    /// The word in histories.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Both => "both",
            Direction::Requests => "requests",
            Direction::Replies => "replies",
        }
    }
}

/// Which node a node fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeChoice {
    /// The node that leads when the fault starts (a random one if none leads).
    Leader,
    /// This node.
    Index(usize),
}

impl fmt::Display for NodeChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeChoice::Leader => f.write_str("leader"),
            NodeChoice::Index(i) => write!(f, "n{i}"),
        }
    }
}

/// One fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// SIGSTOP a node for longer than the TTL, then SIGCONT.
    PauseNode {
        /// Which node.
        node: NodeChoice,
    },
    /// iptables in the node's namespace drop its traffic to some servers.
    Partition {
        /// Which node.
        node: NodeChoice,
        /// Which way.
        direction: Direction,
        /// The servers cut off (indices into the harness's server list: stores first, then
        /// the resource if separate).
        servers: Vec<usize>,
    },
    /// `kill -9` a node, then start it again (a new incarnation).
    KillNode {
        /// Which node.
        node: NodeChoice,
    },
    /// SIGSTOP a Redis server, then SIGCONT.
    PauseRedis {
        /// Which store server.
        server: usize,
    },
    /// `kill -9` a Redis server, then restart it.
    KillRedis {
        /// Which store server.
        server: usize,
    },
    /// Every node is cut off from these store servers, both ways, for a long time (5 to 10
    /// TTLs): a blackholed primary, a long partition of Redis from everyone. Packets are
    /// dropped, so the nodes' sockets sit in TCP's retransmission backoff; the run then stays
    /// quiet for [`LIVENESS_GAP_TTLS`] TTLs + 1 s so that the liveness property can judge the
    /// recovery.
    IsolateRedis {
        /// Which store servers (one, a majority or all of the Redlock servers).
        servers: Vec<usize>,
    },
}

/// The quiet time after an isolation, in TTLs (plus 1 s): longer than the liveness bound
/// (TTL + acquire interval + 1 s; the acquire interval is at most a TTL).
pub const LIVENESS_GAP_TTLS: u64 = 3;

impl Fault {
    /// The fault's kind, as in histories.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::PauseNode { .. } => "pause-node",
            Fault::Partition { .. } => "partition",
            Fault::KillNode { .. } => "kill-node",
            Fault::PauseRedis { .. } => "pause-redis",
            Fault::KillRedis { .. } => "kill-redis",
            Fault::IsolateRedis { .. } => "isolate-redis",
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::PauseNode { node } => write!(f, "pause-node {node}"),
            Fault::Partition {
                node,
                direction,
                servers,
            } => {
                let s: Vec<String> = servers.iter().map(|s| format!("r{s}")).collect();
                write!(
                    f,
                    "partition {node} {} from {}",
                    direction.as_str(),
                    s.join(",")
                )
            }
            Fault::KillNode { node } => write!(f, "kill-node {node}"),
            Fault::PauseRedis { server } => write!(f, "pause-redis r{server}"),
            Fault::KillRedis { server } => write!(f, "kill-redis r{server}"),
            Fault::IsolateRedis { servers } => {
                let s: Vec<String> = servers.iter().map(|s| format!("r{s}")).collect();
                write!(f, "isolate-redis {}", s.join(","))
            }
        }
    }
}

/// A fault at an offset from the start of the nemesis, held for a while.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// When it starts, from the start of the nemesis.
    pub at: Duration,
    /// What.
    pub fault: Fault,
    /// How long it holds (a killed process stays down this long).
    pub hold: Duration,
}

/// The inputs of a schedule.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// The run's seed.
    pub seed: u64,
    /// The scenario.
    pub scenario: Scenario,
    /// How long faults go on.
    pub time: Duration,
    /// How many nodes.
    pub nodes: usize,
    /// The election's TTL.
    pub ttl: Duration,
}

/// The faults of a run, one after another (never two at once), with quiet gaps between.
pub fn schedule(plan: &Plan) -> Vec<Planned> {
    let mut rng = Rng::new(plan.seed ^ 0x6a65_7073_656e);
    let ttl = u64::try_from(plan.ttl.as_millis()).unwrap_or(1000).max(1);
    let total = u64::try_from(plan.time.as_millis()).unwrap_or(u64::MAX);
    let stores = plan.scenario.stores();
    // Server indices: stores 0..stores, then the separate resource.
    let resource = plan.scenario.separate_resource().then_some(stores);
    let mut out = Vec::new();
    let mut t = 0u64;
    loop {
        t += rng.range(ttl / 2, ttl * 3 / 2);
        let node = if rng.chance(60) {
            NodeChoice::Leader
        } else {
            NodeChoice::Index(usize::try_from(rng.range(0, plan.nodes as u64 - 1)).unwrap_or(0))
        };
        let server = usize::try_from(rng.range(0, stores as u64 - 1)).unwrap_or(0);
        let (fault, hold) = match rng.range(0, 10) {
            0..=2 => (Fault::PauseNode { node }, rng.range(ttl * 3 / 2, ttl * 3)),
            3..=5 => {
                let direction = match rng.range(0, 2) {
                    0 => Direction::Both,
                    1 => Direction::Requests,
                    _ => Direction::Replies,
                };
                let mut servers: Vec<usize> = if stores > 1 {
                    // A minority, a majority, or all of the Redlock servers.
                    let k = usize::try_from(rng.range(1, stores as u64)).unwrap_or(1);
                    let first = usize::try_from(rng.range(0, stores as u64 - 1)).unwrap_or(0);
                    (0..k).map(|i| (first + i) % stores).collect()
                } else {
                    vec![0]
                };
                // With a separate resource, half of the partitions also cut it off.
                if let Some(r) = resource
                    && rng.chance(50)
                {
                    servers.push(r);
                }
                servers.sort_unstable();
                (
                    Fault::Partition {
                        node,
                        direction,
                        servers,
                    },
                    rng.range(ttl, ttl * 3),
                )
            }
            6 => (Fault::KillNode { node }, rng.range(ttl / 2, ttl * 2)),
            7 => (Fault::PauseRedis { server }, rng.range(ttl / 3, ttl * 2)),
            8 => (Fault::KillRedis { server }, rng.range(ttl / 5, ttl)),
            _ => {
                // One server, or a majority or all of the Redlock servers.
                let k = usize::try_from(rng.range(stores as u64 / 2 + 1, stores as u64))
                    .unwrap_or(1)
                    .min(stores);
                let first = usize::try_from(rng.range(0, stores as u64 - 1)).unwrap_or(0);
                let mut servers: Vec<usize> = (0..k).map(|i| (first + i) % stores).collect();
                servers.sort_unstable();
                (
                    Fault::IsolateRedis { servers },
                    rng.range(ttl * 5, ttl * 10),
                )
            }
        };
        let quiet = match fault {
            Fault::IsolateRedis { .. } => ttl * LIVENESS_GAP_TTLS + 1000,
            _ => 0,
        };
        if t + hold + quiet > total {
            break;
        }
        out.push(Planned {
            at: Duration::from_millis(t),
            fault,
            hold: Duration::from_millis(hold),
        });
        t += hold + quiet;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(seed: u64, scenario: Scenario) -> Plan {
        Plan {
            seed,
            scenario,
            time: Duration::from_secs(60),
            nodes: 3,
            ttl: Duration::from_millis(1000),
        }
    }

    #[test]
    fn a_seed_replays_its_schedule_and_seeds_differ() {
        let a = schedule(&plan(7, Scenario::Redlock));
        assert_eq!(a, schedule(&plan(7, Scenario::Redlock)));
        assert_ne!(a, schedule(&plan(8, Scenario::Redlock)));
        assert!(a.len() >= 10, "{}", a.len());
    }

    #[test]
    fn faults_are_sequential_within_the_time_and_pauses_outlast_the_ttl() {
        for seed in 0..50 {
            let s = schedule(&plan(seed, Scenario::SingleAof));
            let mut end = Duration::ZERO;
            for p in &s {
                assert!(p.at >= end, "overlap at {p:?}");
                end = p.at + p.hold;
                if let Fault::PauseNode { .. } = p.fault {
                    assert!(p.hold > Duration::from_millis(1000));
                }
                if let Fault::Partition { servers, .. } = &p.fault {
                    assert_eq!(servers, &[0]);
                }
            }
            assert!(end <= Duration::from_secs(60));
        }
    }

    #[test]
    fn redlock_partitions_cut_subsets_of_the_servers() {
        let mut sizes = std::collections::BTreeSet::new();
        for seed in 0..50 {
            for p in schedule(&plan(seed, Scenario::Redlock)) {
                if let Fault::Partition { servers, .. } = p.fault {
                    sizes.insert(servers.iter().filter(|s| **s < 3).count());
                    assert!(servers.iter().all(|s| *s <= 3));
                }
            }
        }
        assert_eq!(sizes.into_iter().collect::<Vec<_>>(), vec![1, 2, 3]);
    }

    #[test]
    fn isolations_are_long_cut_a_majority_and_are_followed_by_quiet() {
        let mut seen = 0;
        for seed in 0..50 {
            for scenario in [Scenario::SingleAof, Scenario::Redlock] {
                let s = schedule(&plan(seed, scenario));
                for (i, p) in s.iter().enumerate() {
                    let Fault::IsolateRedis { servers } = &p.fault else {
                        continue;
                    };
                    seen += 1;
                    assert!(p.hold >= Duration::from_millis(5000), "{p:?}");
                    assert!(servers.len() * 2 > scenario.stores(), "{p:?}");
                    if let Some(next) = s.get(i + 1) {
                        assert!(next.at >= p.at + p.hold + Duration::from_millis(4000));
                    }
                }
            }
        }
        assert!(seen >= 10, "{seen}");
    }
}
