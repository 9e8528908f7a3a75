//! What [`Engine::debug_pending`](crate::Engine::debug_pending) returns: the
//! ops that wait on vars, the vars they wait on, and who holds each (an op
//! let through and not yet completed: running, or whose guards or
//! completion token are still out), as text and as Graphviz DOT. A hang in
//! a dependency engine is nearly always someone holding a var: this names
//! the chain from each waiting op down to the holder at its end.

use std::collections::{HashMap, HashSet};
use std::fmt::{self, Write};
use std::time::Duration;

/// The engine's pending ops as one look saw them.
#[derive(Clone, Debug, Default)]
pub struct Pending {
    /// The ops seen waiting on a var or holding one, by key.
    pub ops: Vec<PendingOp>,
    /// The vars with an op waiting or holding them.
    pub vars: Vec<PendingVar>,
}

/// An op that waits on vars, holds vars, or both.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PendingOp {
    /// Its identity in this report.
    pub key: usize,
    /// Its name.
    pub name: String,
    /// The vars it is queued on (not let through yet), by label.
    pub waits_on: Vec<String>,
    /// The vars it holds (let through, not completed), by label.
    pub holds: Vec<String>,
    /// How long ago it was pushed and its body started, where known (the
    /// op was profiled).
    pub pushed_ago: Option<Duration>,
    /// See `pushed_ago`.
    pub started_ago: Option<Duration>,
    /// How long it has waited at least, as the watchdog saw it.
    pub waited_at_least: Option<Duration>,
    /// How long it has held each var of `holds` (in that order), where a
    /// watchdog kept the explainer's clock since it was let through there
    /// (to the watchdog's period).
    pub held_for: Vec<Option<Duration>>,
}

/// A var that ops wait on or hold.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PendingVar {
    /// Its label: `` `name` (#id) `` or `#id`.
    pub label: String,
    /// Whether a write holds it.
    pub write: bool,
    /// Reads that hold it.
    pub reads: usize,
    /// The holders it names, oldest first (every write, the first reads).
    pub holders: Vec<usize>,
    /// The ops queued on it, in order.
    pub queued: Vec<usize>,
}

impl PendingOp {
    fn label(&self) -> String {
        format!("`{}`", self.name)
    }

    fn times(&self) -> String {
        let mut out = String::new();
        if let Some(d) = self.started_ago {
            let _ = write!(out, ", started {d:.1?} ago");
        } else if let Some(d) = self.pushed_ago {
            let _ = write!(out, ", pushed {d:.1?} ago");
        }
        if let Some(d) = self.waited_at_least {
            let _ = write!(out, ", waiting for at least {d:.1?}");
        }
        out
    }
}

impl Pending {
    /// Whether nothing waits and nothing holds a var.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The op of `key`.
    pub fn op(&self, key: usize) -> Option<&PendingOp> {
        self.ops.iter().find(|op| op.key == key)
    }

    /// The var of `label`.
    pub fn var(&self, label: &str) -> Option<&PendingVar> {
        self.vars.iter().find(|v| v.label == label)
    }

    /// The ops that wait on a var.
    pub fn waiting(&self) -> impl Iterator<Item = &PendingOp> {
        self.ops.iter().filter(|op| !op.waits_on.is_empty())
    }

    /// Why `op` waits: the var it waits on, the op holding that var, the
    /// var that op waits on in turn, and so on down to a holder that waits
    /// on nothing (it runs, or its guards or completion token are out), or
    /// back to an op already in the chain (a cycle).
    pub fn chain(&self, op: &PendingOp) -> String {
        let by_key: HashMap<usize, &PendingOp> = self.ops.iter().map(|o| (o.key, o)).collect();
        let mut seen = HashSet::new();
        let mut out = op.label();
        let mut cur = op;
        loop {
            seen.insert(cur.key);
            let Some(label) = cur.waits_on.first() else {
                out += " (let through: running, or its guards or completion token are still out)";
                return out;
            };
            let _ = write!(out, " waits for {label}");
            let Some(var) = self.var(label) else { return out };
            let Some(holder) = var.holders.first().and_then(|k| by_key.get(k)) else {
                let what = if var.write { "a write" } else { "reads" };
                let _ = write!(out, ", held by {what} it does not name ({} reads)", var.reads);
                return out;
            };
            let access = if var.write { "write" } else { "read" };
            let _ = write!(out, ", held ({access}) by {}", holder.label());
            if let Some(Some(d)) =
                holder.holds.iter().position(|h| h == label).and_then(|at| holder.held_for.get(at))
            {
                let _ = write!(out, " for {d:.1?}");
            }
            out += &holder.times();
            if seen.contains(&holder.key) {
                out += ": a cycle";
                return out;
            }
            cur = holder;
        }
    }

    /// The report as Graphviz DOT: ops as boxes, vars as ellipses, an edge
    /// from an op to each var it waits on, and from a var to each holder.
    pub fn dot(&self) -> String {
        let esc = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
        let mut out = String::from("digraph pending {\n  rankdir=LR;\n");
        for op in &self.ops {
            let _ = writeln!(out, "  op{} [shape=box, label=\"{}\"];", op.key, esc(&op.name));
        }
        for (k, var) in self.vars.iter().enumerate() {
            let _ = writeln!(out, "  var{k} [shape=ellipse, label=\"{}\"];", esc(&var.label));
            for q in &var.queued {
                let _ = writeln!(out, "  op{q} -> var{k} [style=dashed, label=\"waits\"];");
            }
            for h in &var.holders {
                let access = if var.write { "write" } else { "read" };
                let _ = writeln!(out, "  var{k} -> op{h} [label=\"held ({access})\"];");
            }
        }
        out.push_str("}\n");
        out
    }
}

impl fmt::Display for Pending {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let waiting: Vec<_> = self.waiting().collect();
        writeln!(f, "{} ops wait on vars; {} vars are held or waited on", waiting.len(), self.vars.len())?;
        for op in &waiting {
            writeln!(f, "  {}{}", self.chain(op), op.times())?;
        }
        let by_key: HashMap<usize, &PendingOp> = self.ops.iter().map(|o| (o.key, o)).collect();
        let name = |k: &usize| by_key.get(k).map_or_else(|| "?".to_owned(), |o| o.label());
        for var in &self.vars {
            let held = if var.write { "a write".to_owned() } else { format!("{} reads", var.reads) };
            let holders: Vec<String> = var.holders.iter().map(name).collect();
            let queued: Vec<String> = var.queued.iter().map(name).collect();
            writeln!(
                f,
                "  var {}: held by {held} [{}]; queued: [{}]",
                var.label,
                holders.join(", "),
                queued.join(", ")
            )?;
        }
        Ok(())
    }
}
