//! One run: servers, namespaces, nodes, the nemesis, the heal, the checker, the output.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use lease_testkit::ServerMode;
use lease_testkit::redis::{Persistence, RedisServer};
use redlease::ElectionConfig;
use tokio::process::{Child, ChildStdin, Command};

use crate::checker;
use crate::error::{JepsenError, Result};
use crate::history::{Event, HarnessEvent, History, HistoryFile, LogEntry, Target, now_us};
use crate::nemesis::{self, Direction, Fault, NodeChoice, Plan, Planned};
use crate::netns::{self, Network};
use crate::{LOG_KEY, report, svg};

pub use crate::run::{AppliedFault, RunConfig, RunResult, RunSummary, Workload};

/// A node process and its incarnation.
struct NodeProc {
    index: usize,
    incarnation: u32,
    child: Option<Child>,
    // Closing it (dropping) tells the node its harness is gone.
    _stdin: Option<ChildStdin>,
}

impl NodeProc {
    fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }
}

struct Ctx<'a> {
    cfg: &'a RunConfig,
    dir: PathBuf,
    net: Network,
    servers: Vec<RedisServer>,
    nodes: Vec<NodeProc>,
    harness: HistoryFile,
}

impl Ctx<'_> {
    fn history_path(&self, node: usize) -> PathBuf {
        self.dir.join(format!("node-{node}.hist"))
    }

    fn url(&self, node: usize, server: usize) -> String {
        let host = &self.net.nodes()[node].host_ip;
        format!("redis://{host}:{}/", self.servers[server].port())
    }

    fn spawn(&mut self, index: usize, incarnation: u32) -> Result<()> {
        let scenario = self.cfg.scenario;
        let ns = self.net.ns(index).unwrap_or_default().to_owned();
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("node-{index}.log")))
            .map_err(|error| JepsenError::Io {
                path: self.dir.join(format!("node-{index}.log")),
                error,
            })?;
        let log2 = log.try_clone().map_err(|error| JepsenError::Io {
            path: self.dir.join(format!("node-{index}.log")),
            error,
        })?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &ns])
            .arg(&self.cfg.node_bin)
            .args(["--node", &index.to_string()])
            .args(["--incarnation", &incarnation.to_string()])
            .arg("--history")
            .arg(self.history_path(index))
            .args(["--ttl-ms", &self.cfg.ttl.as_millis().to_string()])
            .args(["--seed", &self.cfg.seed.to_string()])
            .args(["--workload", self.cfg.workload.name()]);
        for s in 0..scenario.stores() {
            cmd.args(["--store", &self.url(index, s)]);
        }
        if scenario.separate_resource() {
            cmd.args(["--resource", &self.url(index, scenario.stores())]);
        }
        if !scenario.fenced() {
            cmd.arg("--unfenced");
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| JepsenError::Node {
            node: index,
            detail: format!("cannot start {}: {e}", self.cfg.node_bin.display()),
        })?;
        let stdin = child.stdin.take();
        let proc = NodeProc {
            index,
            incarnation,
            child: Some(child),
            _stdin: stdin,
        };
        if let Some(slot) = self.nodes.iter_mut().find(|n| n.index == index) {
            *slot = proc;
        } else {
            self.nodes.push(proc);
        }
        Ok(())
    }

    fn signal(&self, node: usize, sig: &str) -> Result<()> {
        if let Some(pid) = self.nodes.get(node).and_then(NodeProc::pid) {
            netns::run(&["kill", sig, &pid.to_string()])?;
        }
        Ok(())
    }

    async fn kill_node(&mut self, node: usize) -> Result<()> {
        if let Some(mut child) = self.nodes.get_mut(node).and_then(|n| n.child.take()) {
            let _ = child.start_kill();
            tokio::time::timeout(Duration::from_secs(10), child.wait())
                .await
                .map_err(|_| JepsenError::Timeout(format!("node {node} did not die")))?
                .map_err(|e| JepsenError::Node {
                    node,
                    detail: e.to_string(),
                })?;
        }
        Ok(())
    }

    fn read_history(&self) -> Result<History> {
        let mut paths: Vec<PathBuf> = (0..self.cfg.nodes)
            .map(|i| self.history_path(i))
            .filter(|p| p.exists())
            .collect();
        paths.push(self.dir.join("harness.hist"));
        History::read_files(&paths)
    }

    /// The node that leads now by the histories (a term elected, not stepped down, whose
    /// deadline is ahead).
    fn leader(&self) -> Option<usize> {
        let history = self.read_history().ok()?;
        let now = now_us();
        checker::terms(&history)
            .into_iter()
            .rev()
            .find(|t| t.stepped_down_us.is_none() && t.deadline_us > now)
            .map(|t| t.node.node as usize)
    }

    fn resolve(&self, choice: NodeChoice) -> usize {
        match choice {
            NodeChoice::Index(i) => i.min(self.cfg.nodes - 1),
            NodeChoice::Leader => self.leader().unwrap_or(0),
        }
    }

    async fn apply(&mut self, id: u32, p: &Planned) -> Result<AppliedFault> {
        let target = match &p.fault {
            Fault::PauseNode { node } | Fault::KillNode { node } => {
                Target::Node(self.resolve(*node))
            }
            Fault::Partition { node, .. } => Target::Node(self.resolve(*node)),
            Fault::PauseRedis { server } | Fault::KillRedis { server } => Target::Redis(*server),
            Fault::IsolateRedis { servers } => Target::Redis(servers.first().copied().unwrap_or(0)),
        };
        let detail = format!("{} {}ms", p.fault, p.hold.as_millis()).replace(' ', "_");
        let start = self.harness.harness(HarnessEvent::FaultStart {
            id,
            kind: p.fault.kind().to_owned(),
            target,
            detail,
        })?;
        match (&p.fault, target) {
            (Fault::PauseNode { .. }, Target::Node(n)) => {
                self.signal(n, "-STOP")?;
                tokio::time::sleep(p.hold).await;
                self.signal(n, "-CONT")?;
            }
            (
                Fault::Partition {
                    direction, servers, ..
                },
                Target::Node(n),
            ) => {
                let ports: Vec<u16> = servers
                    .iter()
                    .filter_map(|s| self.servers.get(*s).map(RedisServer::port))
                    .collect();
                self.net.partition(n, *direction, &ports)?;
                tokio::time::sleep(p.hold).await;
                self.net.heal(n)?;
            }
            (Fault::KillNode { .. }, Target::Node(n)) => {
                self.kill_node(n).await?;
                tokio::time::sleep(p.hold).await;
                let inc = self.nodes[n].incarnation + 1;
                self.spawn(n, inc)?;
            }
            (Fault::PauseRedis { .. }, Target::Redis(s)) => {
                self.servers[s].pause().await?;
                tokio::time::sleep(p.hold).await;
                self.servers[s].resume().await?;
            }
            (Fault::KillRedis { .. }, Target::Redis(s)) => {
                self.servers[s].kill().await?;
                tokio::time::sleep(p.hold).await;
                self.servers[s].restart().await?;
            }
            (Fault::IsolateRedis { servers }, _) => {
                let ports: Vec<u16> = servers
                    .iter()
                    .filter_map(|s| self.servers.get(*s).map(RedisServer::port))
                    .collect();
                for n in 0..self.cfg.nodes {
                    self.net.partition(n, Direction::Both, &ports)?;
                }
                tokio::time::sleep(p.hold).await;
                for n in 0..self.cfg.nodes {
                    self.net.heal(n)?;
                }
            }
            _ => {}
        }
        let end = self.harness.harness(HarnessEvent::FaultEnd { id })?;
        Ok(AppliedFault {
            id,
            planned: p.clone(),
            target,
            span_us: (start, end),
        })
    }

    /// Undoes anything still in effect: continues every node, removes every rule, restarts
    /// dead nodes, resumes and restarts servers.
    async fn heal_all(&mut self) -> Result<()> {
        for i in 0..self.cfg.nodes {
            let _ = self.signal(i, "-CONT");
            self.net.heal(i)?;
            if self.nodes[i].child.is_none() {
                let inc = self.nodes[i].incarnation + 1;
                self.spawn(i, inc)?;
            }
        }
        for s in &self.servers {
            match s.state() {
                lease_testkit::redis::ServerState::Paused => s.resume().await?,
                lease_testkit::redis::ServerState::Stopped => s.restart().await?,
                lease_testkit::redis::ServerState::Running => {}
            }
        }
        Ok(())
    }

    /// Waits (bounded) for a record matching `pred` in the histories.
    async fn wait_for(&self, bound: Duration, pred: impl Fn(&History) -> bool) -> bool {
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            if self.read_history().is_ok_and(|h| pred(&h)) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    async fn stop_nodes(&mut self) {
        for n in &self.nodes {
            if let Some(pid) = n.pid() {
                let _ = netns::run(&["kill", "-CONT", &pid.to_string()]);
                let _ = netns::run(&["kill", "-TERM", &pid.to_string()]);
            }
        }
        let bound = self.cfg.ttl * 2 + Duration::from_secs(5);
        for n in &mut self.nodes {
            if let Some(mut child) = n.child.take()
                && tokio::time::timeout(bound, child.wait()).await.is_err()
            {
                let _ = child.start_kill();
                let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
            }
        }
    }

    async fn read_log(&self) -> Result<Vec<LogEntry>> {
        let server = if self.cfg.scenario.separate_resource() {
            self.cfg.scenario.stores()
        } else {
            0
        };
        let mut conn =
            tokio::time::timeout(Duration::from_secs(10), self.servers[server].connection())
                .await
                .map_err(|_| JepsenError::Timeout("connecting to read the log".to_owned()))??;
        let raw: Vec<String> = tokio::time::timeout(
            Duration::from_secs(10),
            redis::cmd("LRANGE")
                .arg(LOG_KEY)
                .arg(0)
                .arg(-1)
                .query_async(&mut conn),
        )
        .await
        .map_err(|_| JepsenError::Timeout("reading the log".to_owned()))??;
        let text: String = raw.iter().map(|l| format!("{l}\n")).collect();
        let path = self.dir.join("resource.log");
        std::fs::write(&path, text).map_err(|error| JepsenError::Io { path, error })?;
        raw.iter().map(|l| l.parse()).collect()
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> JepsenError + '_ {
    move |error| JepsenError::Io {
        path: path.to_path_buf(),
        error,
    }
}

/// Does one run: checks the machine can (else [`RunResult::Skipped`]), removes what dead
/// harnesses left, builds the network and servers, starts the nodes, applies the schedule,
/// heals, waits for recovery, stops the nodes, reads the log and checks. Everything it made
/// is removed when it returns, on every path (drop guards: the network, the servers, the
/// node processes).
pub async fn run(cfg: &RunConfig) -> Result<RunResult> {
    if !(3..=5).contains(&cfg.nodes) {
        return Err(JepsenError::Config(format!(
            "--nodes {}: 3 to 5",
            cfg.nodes
        )));
    }
    if !cfg.scenario.supports(cfg.workload) {
        return Err(JepsenError::Config(format!(
            "the {} workload does not run on {}: it needs the single store with persistence \
             (single-aof, or the control)",
            cfg.workload.name(),
            cfg.scenario
        )));
    }
    if let Some(why) = netns::unsupported() {
        return Ok(RunResult::Skipped(why));
    }
    netns::clean_stale();
    let election = ElectionConfig::builder(crate::ELECTION, "harness")
        .ttl(cfg.ttl)
        .build()
        .map_err(|e| JepsenError::Config(e.to_string()))?;
    let dir = cfg.out.join(format!(
        "{}-{}-{}-{}",
        cfg.scenario,
        cfg.workload.name(),
        cfg.seed,
        now_us()
    ));
    std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    let net = Network::create(cfg.nodes)?;
    let bind = format!("bind 127.0.0.1 {}", net.host_ips().join(" "));
    let mut servers = Vec::new();
    let persistence = if cfg.scenario.stores_persist() {
        Persistence::AofAlways
    } else {
        Persistence::None
    };
    for _ in 0..cfg.scenario.stores() {
        servers.push(
            RedisServer::builder()
                .mode(ServerMode::Process)
                .persistence(persistence)
                .config_line(bind.clone())
                .start()
                .await?,
        );
    }
    if cfg.scenario.separate_resource() {
        servers.push(
            RedisServer::builder()
                .mode(ServerMode::Process)
                .persistence(Persistence::AofAlways)
                .config_line(bind.clone())
                .start()
                .await?,
        );
    }
    let harness = HistoryFile::open(&dir.join("harness.hist"))?;
    let mut ctx = Ctx {
        cfg,
        dir: dir.clone(),
        net,
        servers,
        nodes: Vec::new(),
        harness,
    };
    for i in 0..cfg.nodes {
        ctx.spawn(i, 0)?;
    }
    let elected = |h: &History| {
        h.records
            .iter()
            .any(|r| matches!(r.event, Event::Elected { .. } | Event::Shared { .. }))
    };
    if !ctx.wait_for(Duration::from_secs(30), elected).await {
        ctx.stop_nodes().await;
        return Err(JepsenError::Timeout(format!(
            "no node was elected within 30 s (see {})",
            dir.display()
        )));
    }
    let schedule = cfg.schedule.clone().unwrap_or_else(|| {
        nemesis::schedule(&Plan {
            seed: cfg.seed,
            scenario: cfg.scenario,
            time: cfg.time,
            nodes: cfg.nodes,
            ttl: cfg.ttl,
        })
    });
    let start = tokio::time::Instant::now();
    let mut faults = Vec::new();
    for (id, p) in schedule.iter().enumerate() {
        tokio::time::sleep_until(start + p.at).await;
        let id = u32::try_from(id).unwrap_or(u32::MAX);
        match ctx.apply(id, p).await {
            Ok(f) => faults.push(f),
            Err(e) => {
                let _ = ctx.heal_all().await;
                ctx.stop_nodes().await;
                return Err(e);
            }
        }
    }
    tokio::time::sleep_until(start + cfg.time).await;
    ctx.heal_all().await?;
    let healed = ctx.harness.harness(HarnessEvent::Healed)?;
    let rules = cfg
        .scenario
        .rules_for(cfg.workload, cfg.ttl, election.acquire_interval());
    let bound = Duration::from_micros(rules.recovery_bound_us()) + Duration::from_secs(1);
    let recovered = |h: &History| {
        checker::attempts(h)
            .iter()
            .any(|a| a.outcome == crate::history::Outcome::Applied && a.sent_us >= healed)
    };
    ctx.wait_for(bound, recovered).await;
    // One more term's worth of writes after the recovery.
    tokio::time::sleep(cfg.ttl).await;
    ctx.harness.harness(HarnessEvent::End)?;
    ctx.stop_nodes().await;
    let log = ctx.read_log().await?;
    let history = ctx.read_history()?;
    let report = checker::check(&history, &log, &rules);
    let passed = report.failed() == cfg.scenario.expects_violations();
    let summary = RunSummary {
        config: cfg.clone(),
        faults,
        report,
        dir: dir.clone(),
        passed,
        history,
        log,
    };
    let md = report::markdown(&summary);
    let path = dir.join("summary.md");
    std::fs::write(&path, md).map_err(io_err(&path))?;
    let picture = svg::timeline(&summary);
    let path = dir.join("timeline.svg");
    std::fs::write(&path, picture).map_err(io_err(&path))?;
    drop(ctx);
    Ok(RunResult::Checked(Box::new(summary)))
}
