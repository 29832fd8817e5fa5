//! The timeline picture: one lane per node, terms as bars labelled with their tokens, write
//! attempts as ticks (refused ones in red, taller), faults shaded, one lane per Redis server,
//! violations marked. Hand-written SVG.

use std::fmt::Write;

use crate::checker::Mode;
use crate::history::{Outcome, Target};
use crate::nemesis::{Direction, Fault};
use crate::run::RunSummary;

/// The narrowest picture; longer runs get 24 px per second (a 10-minute run scrolls).
const MIN_WIDTH: f64 = 1600.0;
const PX_PER_SECOND: f64 = 24.0;
const LEFT: f64 = 120.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 60.0;
const NODE_LANE: f64 = 64.0;
const REDIS_LANE: f64 = 26.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A distinct colour per token (the golden-angle hue walk).
fn colour(token: u64) -> String {
    let hue = (token.wrapping_mul(137) % 360) as f64;
    format!("hsl({hue:.0},55%,62%)")
}

/// Renders the run's timeline.
pub fn timeline(s: &RunSummary) -> String {
    let h = &s.history;
    let r = &s.report;
    let start = h.start_at();
    let end = h.end_at().max(start + 1);
    let span = (end - start) as f64;
    let width = (LEFT + RIGHT + span / 1e6 * PX_PER_SECOND).max(MIN_WIDTH);
    let x = |us: u64| LEFT + (us.saturating_sub(start) as f64 / span) * (width - LEFT - RIGHT);
    let nodes = s.config.nodes;
    let servers = s.config.scenario.stores() + usize::from(s.config.scenario.separate_resource());
    let node_y = |i: usize| TOP + i as f64 * NODE_LANE;
    let redis_y = |j: usize| TOP + nodes as f64 * NODE_LANE + 10.0 + j as f64 * REDIS_LANE;
    let height = redis_y(servers) + 70.0;
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(o, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let verdict = if s.passed { "PASS" } else { "FAIL" };
    let _ = writeln!(
        o,
        r#"<text x="{LEFT}" y="20" font-size="15" font-weight="bold">{} seed {} — {verdict} — {} faults, {} terms, {} writes applied, longest leaderless gap {} ms</text>"#,
        s.config.scenario,
        s.config.seed,
        s.faults.len(),
        r.terms.len(),
        r.outcomes.get(&Outcome::Applied).copied().unwrap_or(0),
        r.longest_gap.0 / 1000
    );
    // The time axis: a tick every 5 s (every second for short runs).
    let step = if span > 30e6 { 5_000_000 } else { 1_000_000 };
    let mut t = 0u64;
    while start + t <= end {
        let xx = x(start + t);
        let _ = writeln!(
            o,
            r##"<line x1="{xx:.1}" y1="{:.1}" x2="{xx:.1}" y2="{:.1}" stroke="#eee"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle" fill="#666">{}s</text>"##,
            TOP - 8.0,
            redis_y(servers),
            TOP - 12.0,
            t / 1_000_000
        );
        t += step;
    }
    // Lanes.
    for i in 0..nodes {
        let y = node_y(i);
        let _ = writeln!(
            o,
            r##"<rect x="{LEFT}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{}"/><text x="8" y="{:.1}" font-weight="bold">node {i}</text>"##,
            width - LEFT - RIGHT,
            NODE_LANE - 4.0,
            if i % 2 == 0 { "#fafafa" } else { "#f3f3f3" },
            y + 24.0
        );
    }
    for j in 0..servers {
        let y = redis_y(j);
        let name = if j < s.config.scenario.stores() {
            format!("redis r{j}")
        } else {
            format!("resource r{j}")
        };
        let _ = writeln!(
            o,
            r##"<rect x="{LEFT}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="#f6f6ff"/><text x="8" y="{:.1}">{name}</text>"##,
            width - LEFT - RIGHT,
            REDIS_LANE - 4.0,
            y + 15.0
        );
    }
    // Faults.
    for f in &s.faults {
        let (x0, x1) = (x(f.span_us.0), x(f.span_us.1).max(x(f.span_us.0) + 1.0));
        let (fill, label) = match &f.planned.fault {
            Fault::PauseNode { .. } | Fault::PauseRedis { .. } => ("#9e9e9e", "paused".to_owned()),
            Fault::Partition {
                direction, servers, ..
            } => {
                let to: Vec<String> = servers.iter().map(|s| format!("r{s}")).collect();
                let to = to.join(",");
                let label = match direction {
                    Direction::Both => format!("cut off from {to}"),
                    Direction::Requests => format!("requests to {to} dropped"),
                    Direction::Replies => format!("replies from {to} dropped"),
                };
                ("#f0a030", label)
            }
            Fault::KillNode { .. } | Fault::KillRedis { .. } => ("#e05050", "killed".to_owned()),
            Fault::IsolateRedis { servers } => {
                let to: Vec<String> = servers.iter().map(|s| format!("r{s}")).collect();
                ("#7050c0", format!("{} isolated", to.join(",")))
            }
        };
        let title = esc(&f.planned.fault.to_string());
        match f.target {
            Target::Node(i) => {
                let y = node_y(i);
                let _ = writeln!(
                    o,
                    r#"<rect x="{x0:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{fill}" opacity="0.35"><title>{title}</title></rect><text x="{:.1}" y="{:.1}" fill="{fill}" font-size="9">{label}</text>"#,
                    x1 - x0,
                    NODE_LANE - 4.0,
                    x0 + 2.0,
                    y + NODE_LANE - 7.0
                );
            }
            Target::Redis(j) => {
                // Shade every node lane lightly and the server's lane fully.
                let _ = writeln!(
                    o,
                    r#"<rect x="{x0:.1}" y="{TOP:.1}" width="{:.1}" height="{:.1}" fill="{fill}" opacity="0.12"><title>{title}</title></rect>"#,
                    x1 - x0,
                    nodes as f64 * NODE_LANE
                );
                let y = redis_y(j);
                let _ = writeln!(
                    o,
                    r#"<rect x="{x0:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{fill}" opacity="0.6"><title>{title}</title></rect><text x="{:.1}" y="{:.1}" font-size="9">{label}</text>"#,
                    x1 - x0,
                    REDIS_LANE - 4.0,
                    x0 + 2.0,
                    y + 14.0
                );
            }
        }
    }
    // Terms, labelled with their token minus the run's first token (clock-floored tokens are
    // 16 digits; the difference keeps the order readable).
    let base = r.terms.iter().map(|t| t.token).min().unwrap_or(0);
    let mut label_end = vec![0.0f64; nodes];
    for t in &r.terms {
        let i = t.node.node as usize;
        if i >= nodes {
            continue;
        }
        let y = node_y(i) + 6.0;
        let (x0, x1) = (x(t.elected_us), x(t.end_us()).max(x(t.elected_us) + 1.5));
        let _ = writeln!(
            o,
            r##"<rect x="{x0:.1}" y="{y:.1}" width="{:.1}" height="18" fill="{}" stroke="#333" stroke-width="0.5"{}><title>node {} token {}{}</title></rect>"##,
            x1 - x0,
            colour(t.token),
            if t.shared {
                r#" stroke-dasharray="3 2""#
            } else {
                ""
            },
            t.node,
            t.token,
            if t.shared { " (a reader)" } else { "" }
        );
        // The label may run past a short bar, up to the next label of the lane; a reader's
        // hold is marked `r`.
        let label = format!("+{}{}", t.token - base, if t.shared { "r" } else { "" });
        if x0 >= label_end[i] {
            let _ = writeln!(
                o,
                r#"<text x="{:.1}" y="{:.1}" font-size="9">{label}</text>"#,
                x0 + 2.0,
                y + 13.0
            );
            label_end[i] = x0 + 5.5 * label.len() as f64 + 6.0;
        }
    }
    // Write attempts.
    for a in &r.attempts {
        let i = a.node.node as usize;
        if i >= nodes {
            continue;
        }
        let xx = x(a.sent_us);
        let base = node_y(i) + 28.0;
        let (stroke, y0, y1) = match a.outcome {
            Outcome::Applied => ("#2a9d2a", base, base + 8.0),
            Outcome::Stale => ("#d62020", base, base + 20.0),
            Outcome::NotApplied => ("#888888", base + 10.0, base + 16.0),
            Outcome::Unknown => ("#e08000", base + 10.0, base + 20.0),
        };
        let _ = writeln!(
            o,
            r#"<line x1="{xx:.1}" y1="{y0:.1}" x2="{xx:.1}" y2="{y1:.1}" stroke="{stroke}" stroke-width="1"/>"#
        );
    }
    // The final heal.
    if let Some(healed) = h.healed_at() {
        let xx = x(healed);
        let _ = writeln!(
            o,
            r##"<line x1="{xx:.1}" y1="{:.1}" x2="{xx:.1}" y2="{:.1}" stroke="#1060c0" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}" fill="#1060c0">healed</text>"##,
            TOP - 8.0,
            redis_y(servers),
            xx + 3.0,
            TOP - 2.0
        );
    }
    // Violations.
    for p in &r.results {
        let colour = if p.mode == Mode::Asserted {
            "#000"
        } else {
            "#8040a0"
        };
        for v in p.violations.iter().filter(|v| v.at_us >= start) {
            let xx = x(v.at_us);
            let _ = writeln!(
                o,
                r#"<path d="M{:.1},{:.1} l5,-9 l-10,0 z" fill="{colour}"><title>{}: {}</title></path>"#,
                xx,
                TOP - 1.0,
                p.property,
                esc(&v.what)
            );
        }
    }
    // Legend.
    let ly = redis_y(servers) + 20.0;
    let items = [
        ("#2a9d2a", "write applied"),
        ("#d62020", "write refused (stale)"),
        ("#e08000", "outcome unknown"),
        ("#888888", "not applied"),
        ("#9e9e9e", "paused (SIGSTOP)"),
        ("#f0a030", "partitioned (iptables, in the node's namespace)"),
        ("#e05050", "killed (-9)"),
    ];
    let mut lx = LEFT;
    for (c, label) in items {
        let _ = writeln!(
            o,
            r#"<rect x="{lx:.1}" y="{ly:.1}" width="12" height="10" fill="{c}"/><text x="{:.1}" y="{:.1}">{label}</text>"#,
            lx + 16.0,
            ly + 9.0
        );
        lx += 28.0 + 7.0 * label.len() as f64;
    }
    let _ = writeln!(
        o,
        r##"<text x="{LEFT}" y="{:.1}" fill="#444">Bars: terms from election to step-down or local deadline, labelled with token − {base} (hover: the token; dashed and marked r: a reader's hold). Triangles: violations (black asserted, purple reported). Hover for details.</text>"##,
        ly + 30.0
    );
    let _ = writeln!(o, "</svg>");
    o
}
