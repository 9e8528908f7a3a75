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
///
/// # Examples
///
/// ```
/// let engine = depengine::Engine::new();
/// let v = engine.var_named("model", 0);
/// let (guard,) = engine.acquire().write(&v).push().blocking_wait()?; // held
/// let stuck = engine.op("request").read(&v).run(|(v,), ()| Ok(*v));
/// let pending = engine.debug_pending();
/// println!("{pending}"); // who waits on what, down to the holder
/// assert_eq!(pending.waiting().count(), 1);
/// # drop(guard); stuck.blocking_wait()?;
/// # Ok::<(), depengine::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Pending {
    /// The ops seen waiting on a var or holding one, by key.
    pub ops: Vec<PendingOp>,
    /// The vars with an op waiting or holding them.
    pub vars: Vec<PendingVar>,
}

/// An op that waits on vars, holds vars, or both.
///
/// # Examples
///
/// ```
/// let engine = depengine::Engine::new();
/// let v = engine.var_named("model", 0);
/// let (guard,) = engine.acquire().write(&v).push().blocking_wait()?; // held
/// let stuck = engine.op("request").read(&v).run(|(v,), ()| Ok(*v));
/// let pending = engine.debug_pending();
/// let op = pending.waiting().next().unwrap();
/// assert_eq!(op.waits_on, [v.label()]);
/// # drop(guard); stuck.blocking_wait()?;
/// # Ok::<(), depengine::Error>(())
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PendingOp {
    /// Its identity in this report.
    pub key: usize,
    /// Its name.
    pub name: String,
    /// The name of its group ([`OpGroup`](crate::OpGroup)), if it joined one.
    pub group: Option<String>,
    /// The vars it is queued on (not let through yet), by label.
    pub waits_on: Vec<String>,
    /// The vars it holds (let through, not completed), by label.
    pub holds: Vec<String>,
    /// How long ago it was pushed: exact for an op the profiler records,
    /// else to the explainer's clock (it advances every 50 ms while an
    /// engine that tracks holders exists); `None` if neither knows.
    pub pushed_ago: Option<Duration>,
    /// How long ago its body started, where known (the op was profiled).
    pub started_ago: Option<Duration>,
    /// How long it has waited at least, as the watchdog saw it.
    pub waited_at_least: Option<Duration>,
    /// How long it has held each var of `holds` (in that order), to the
    /// explainer's clock (see `pushed_ago`), where the engine tracks
    /// holders.
    pub held_for: Vec<Option<Duration>>,
}

/// A var that ops wait on or hold.
///
/// # Examples
///
/// ```
/// let engine = depengine::Engine::new();
/// let v = engine.var_named("model", 0);
/// let (guard,) = engine.acquire().write(&v).push().blocking_wait()?; // held
/// let stuck = engine.op("request").read(&v).run(|(v,), ()| Ok(*v));
/// let pending = engine.debug_pending();
/// let model = pending.var(&v.label()).unwrap();
/// assert_eq!((model.write, model.reads), (true, 0));
/// # drop(guard); stuck.blocking_wait()?;
/// # Ok::<(), depengine::Error>(())
/// ```
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
    /// The ops queued on it, in order (those cancelled while queued
    /// apart).
    pub queued: Vec<usize>,
    /// Ops cancelled while queued on it: their handles have resolved, and
    /// each leaves the queue as the var reaches it.
    pub cancelled: usize,
}

impl PendingOp {
    fn label(&self) -> String {
        match &self.group {
            Some(group) => format!("`{}` (group `{group}`)", self.name),
            None => format!("`{}`", self.name),
        }
    }

    /// What is known of its times, as `" (pushed ~1.2s ago)"`, or nothing.
    /// `held`: how long it has held the var the text is about.
    fn times(&self, held: Option<Duration>) -> String {
        let mut parts = Vec::new();
        if let Some(d) = held {
            parts.push(format!("for {}", coarse(d)));
        }
        if let Some(d) = self.started_ago {
            parts.push(format!("started {d:.1?} ago"));
        } else if let Some(d) = self.pushed_ago {
            parts.push(format!("pushed {} ago", coarse(d)));
        }
        if let Some(d) = self.waited_at_least {
            parts.push(format!("waiting for at least {}", coarse(d)));
        }
        if parts.is_empty() { String::new() } else { format!(" ({})", parts.join(", ")) }
    }
}

/// A duration known to the explainer's clock (50 ms), as text: tenths of
/// a second, no finer.
fn coarse(d: Duration) -> String {
    if d < Duration::from_millis(100) { "<0.1s".to_owned() } else { format!("~{:.1}s", d.as_secs_f64()) }
}

impl Pending {
    /// Whether nothing waits and nothing holds a var.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// engine.wait_for_all().blocking_wait()?;
    /// assert!(engine.debug_pending().is_empty());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The op of `key`.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var_named("model", 0);
    /// let (guard,) = engine.acquire().write(&v).push().blocking_wait()?; // held
    /// let stuck = engine.op("request").read(&v).run(|(v,), ()| Ok(*v));
    /// let pending = engine.debug_pending();
    /// let waiting = pending.waiting().next().unwrap();
    /// assert_eq!(pending.op(waiting.key).unwrap().name, "request");
    /// # drop(guard); stuck.blocking_wait()?;
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn op(&self, key: usize) -> Option<&PendingOp> {
        self.ops.iter().find(|op| op.key == key)
    }

    /// The var of `label`.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var_named("model", 0);
    /// let (guard,) = engine.acquire().write(&v).push().blocking_wait()?; // held
    /// let stuck = engine.op("request").read(&v).run(|(v,), ()| Ok(*v));
    /// let pending = engine.debug_pending();
    /// let model = pending.var(&v.label()).unwrap();
    /// assert!(model.write);
    /// # drop(guard); stuck.blocking_wait()?;
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn var(&self, label: &str) -> Option<&PendingVar> {
        self.vars.iter().find(|v| v.label == label)
    }

    /// The ops that wait on a var.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var_named("model", 0);
    /// let (guard,) = engine.acquire().write(&v).push().blocking_wait()?; // held
    /// let stuck = engine.op("request").read(&v).run(|(v,), ()| Ok(*v));
    /// let pending = engine.debug_pending();
    /// let names: Vec<_> = pending.waiting().map(|op| op.name.as_str()).collect();
    /// assert_eq!(names, ["request"]);
    /// # drop(guard); stuck.blocking_wait()?;
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn waiting(&self) -> impl Iterator<Item = &PendingOp> {
        self.ops.iter().filter(|op| !op.waits_on.is_empty())
    }

    /// Why `op` waits: the var it waits on, the op holding that var, the
    /// var that op waits on in turn, and so on down to a holder that waits
    /// on nothing (it runs, or its guards or completion token are out), or
    /// back to an op already in the chain (a cycle).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var_named("model", 0);
    /// let (guard,) = engine.acquire().write(&v).push().blocking_wait()?; // held
    /// let stuck = engine.op("request").read(&v).run(|(v,), ()| Ok(*v));
    /// let pending = engine.debug_pending();
    /// let why = pending.chain(pending.waiting().next().unwrap());
    /// assert!(why.contains("model"));
    /// # drop(guard); stuck.blocking_wait()?;
    /// # Ok::<(), depengine::Error>(())
    /// ```
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
            let held = holder.holds.iter().position(|h| h == label).and_then(|at| holder.held_for.get(at));
            let _ = write!(
                out,
                ", held ({access}) by {}{}",
                holder.label(),
                holder.times(held.copied().flatten())
            );
            if seen.contains(&holder.key) {
                out += ": a cycle";
                return out;
            }
            if !holder.waits_on.is_empty() {
                out += ", which";
            }
            cur = holder;
        }
    }

    /// The report as Graphviz DOT: ops as boxes, vars as ellipses, an edge
    /// from an op to each var it waits on, and from a var to each holder.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var_named("model", 0);
    /// let (guard,) = engine.acquire().write(&v).push().blocking_wait()?; // held
    /// let stuck = engine.op("request").read(&v).run(|(v,), ()| Ok(*v));
    /// let pending = engine.debug_pending();
    /// let dot = pending.dot(); // render with `dot -Tsvg`
    /// assert!(dot.starts_with("digraph"));
    /// # drop(guard); stuck.blocking_wait()?;
    /// # Ok::<(), depengine::Error>(())
    /// ```
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
    /// One line per distinct chain (ops of one name waiting on the same
    /// vars behind the same holder are one line, with their count and the
    /// longest wait), then one line per var, its queue with runs of one
    /// name counted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let waiting: Vec<_> = self.waiting().collect();
        writeln!(f, "{} ops wait on vars; {} vars are held or waited on", waiting.len(), self.vars.len())?;
        let mut groups: Vec<(String, Vec<&PendingOp>)> = Vec::new();
        for op in &waiting {
            let chain = self.chain(op);
            match groups.iter_mut().find(|(c, _)| *c == chain) {
                Some((_, ops)) => ops.push(op),
                None => groups.push((chain, vec![op])),
            }
        }
        for (chain, ops) in &groups {
            let oldest =
                ops.iter().max_by_key(|op| (op.pushed_ago, op.waited_at_least)).expect("a group has ops");
            match ops.len() {
                1 => writeln!(f, "  {chain}{}", oldest.times(None))?,
                n => writeln!(f, "  {n} × {chain}; the longest waiting{}", oldest.times(None))?,
            }
        }
        let by_key: HashMap<usize, &PendingOp> = self.ops.iter().map(|o| (o.key, o)).collect();
        let name = |k: &usize| by_key.get(k).map_or_else(|| "?".to_owned(), |o| o.label());
        for var in &self.vars {
            let held = if var.write { "a write".to_owned() } else { format!("{} reads", var.reads) };
            let holders: Vec<String> = var.holders.iter().map(name).collect();
            let mut queued: Vec<(String, usize)> = Vec::new();
            for label in var.queued.iter().map(name) {
                match queued.last_mut() {
                    Some((last, n)) if *last == label => *n += 1,
                    _ => queued.push((label, 1)),
                }
            }
            let queued: Vec<String> =
                queued.into_iter().map(|(l, n)| if n == 1 { l } else { format!("{l} × {n}") }).collect();
            let cancelled = match var.cancelled {
                0 => String::new(),
                n => format!("; {n} cancelled, leaving as the var reaches them"),
            };
            writeln!(
                f,
                "  var {}: held by {held} [{}]; queued: [{}]{cancelled}",
                var.label,
                holders.join(", "),
                queued.join(", ")
            )?;
        }
        Ok(())
    }
}
