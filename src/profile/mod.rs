//! What the profiler records ([`Engine::profiler`](crate::Engine::profiler))
//! and the views it gives: a Chrome trace (Perfetto, chrome://tracing), an
//! aggregate table per op name, and a self-contained SVG timeline.
//!
//! Times are nanoseconds on one clock for the whole process, from the first
//! op any engine profiled; a view shows them from the first op it holds.

mod aggregate;
mod chrome;
mod idle;
mod op_record;
mod svg;

pub(crate) use op_record::{Dep, OpRecord};

pub use aggregate::Aggregate;

/// The shortest idle-while-ready stretch the trace and the timeline mark:
/// shorter ones are a wake-up's or a hand-off's length, the ordinary cost
/// of passing an op between threads.
const MIN_IDLE_MARK_NS: u64 = 2_000;
pub use idle::IdleGap;

use crate::device::{Device, Lane};

/// How an op ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// Its body succeeded.
    Ok,
    /// Its body failed, panicked or dropped its token.
    Failed,
    /// Skipped for an error on a var it uses.
    Skipped,
    /// Cancelled before it started.
    Cancelled,
}

impl Outcome {
    pub(crate) fn from_u8(v: u8) -> Self {
        match v {
            1 => Outcome::Failed,
            2 => Outcome::Skipped,
            3 => Outcome::Cancelled,
            _ => Outcome::Ok,
        }
    }

    /// The outcome of an op that ended with `err`.
    pub(crate) fn of(err: &crate::error::Error) -> Self {
        if err.is_skipped() {
            Outcome::Skipped
        } else if err.is_cancelled() {
            Outcome::Cancelled
        } else {
            Outcome::Failed
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::Skipped => "skipped",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// A var an op declared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VarRef {
    /// Its id.
    pub id: u64,
    /// Its name, if it was given one.
    pub name: Option<String>,
}

impl VarRef {
    /// Its name and id, or its id: as [`Var::label`](crate::Var::label)
    /// without the backticks, which a trace viewer would show.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var_named("x", 0);
    /// engine.profiler().start();
    /// engine.op("set").write(&v).run(|(), (mut v,)| { *v = 1; Ok(()) });
    /// engine.op("get").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait()?;
    /// let profile = engine.profiler().stop();
    /// assert_eq!(profile.ops()[0].writes[0].label(), format!("x (#{})", v.id()));
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn label(&self) -> String {
        match &self.name {
            Some(name) => format!("{name} (#{})", self.id),
            None => format!("#{}", self.id),
        }
    }
}

/// One profiled op. Times are in nanoseconds on the profiler's clock.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ProfiledOp {
    /// Its number: the order of pushes among profiled ops.
    pub seq: u64,
    /// Its name.
    pub name: String,
    /// The name of its group ([`OpGroup`](crate::OpGroup)), if it joined one.
    pub group: Option<String>,
    /// Its device.
    pub device: Device,
    /// Its lane.
    pub lane: Lane,
    /// Its priority.
    pub priority: i32,
    /// The thread its body ran on (`None`: it never started).
    pub thread: Option<String>,
    /// The thread that completed it (a GPU op's: its device's poller).
    pub completed_on: String,
    /// The thread that pushed it.
    pub pushed_by: String,
    /// When its push began.
    pub pushed: u64,
    /// When its push had appended it to its vars (where it completed
    /// before its push returned: when it was ready).
    pub push_end: Option<u64>,
    /// When it was queued, its vars free (`None`: it never was).
    pub ready: Option<u64>,
    /// When its body started on `thread`.
    pub start: Option<u64>,
    /// When its body returned (or stored its result, if that came first).
    pub end: Option<u64>,
    /// When it completed: its result published, its vars released.
    pub done: u64,
    /// The vars it read.
    pub reads: Vec<VarRef>,
    /// The vars it wrote.
    pub writes: Vec<VarRef>,
    /// The ops (by `seq`) whose last dependency its completion released.
    pub released: Vec<u64>,
    /// How it ended.
    pub outcome: Outcome,
}

impl ProfiledOp {
    /// Its body's run time on its thread.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var_named("x", 0);
    /// engine.profiler().start();
    /// engine.op("set").write(&v).run(|(), (mut v,)| { *v = 1; Ok(()) });
    /// engine.op("get").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait()?;
    /// let profile = engine.profiler().stop();
    /// assert!(profile.ops().iter().all(|op| op.run_ns().is_some()));
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn run_ns(&self) -> Option<u64> {
        Some(self.end?.saturating_sub(self.start?))
    }

    /// How long it waited, ready, for a thread.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var_named("x", 0);
    /// engine.profiler().start();
    /// engine.op("set").write(&v).run(|(), (mut v,)| { *v = 1; Ok(()) });
    /// engine.op("get").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait()?;
    /// let profile = engine.profiler().stop();
    /// assert!(profile.ops()[1].queue_wait_ns().is_some());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn queue_wait_ns(&self) -> Option<u64> {
        Some(self.start?.saturating_sub(self.ready?))
    }
}

/// The ops a profiler recorded, in the order they completed: the last
/// ones it keeps (see `Profiler::keep_last`).
///
/// # Examples
///
/// ```
/// let engine = depengine::Engine::new();
/// let v = engine.var_named("x", 0);
/// engine.profiler().start();
/// engine.op("set").write(&v).run(|(), (mut v,)| { *v = 1; Ok(()) });
/// engine.op("get").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait()?;
/// let profile = engine.profiler().stop();
/// assert_eq!(profile.ops().len(), 2);
/// # Ok::<(), depengine::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Profile {
    ops: Vec<ProfiledOp>,
    dropped: u64,
}

impl Profile {
    pub(crate) fn new(mut ops: Vec<ProfiledOp>, dropped: u64) -> Self {
        ops.sort_by_key(|op| (op.done, op.seq));
        Self { ops, dropped }
    }

    /// The profile of `records`, expanded now.
    pub(crate) fn of_records<'a>(records: impl Iterator<Item = &'a OpRecord>, dropped: u64) -> Self {
        Self::new(records.map(OpRecord::expand).collect(), dropped)
    }

    /// The ops.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var_named("x", 0);
    /// engine.profiler().start();
    /// engine.op("set").write(&v).run(|(), (mut v,)| { *v = 1; Ok(()) });
    /// engine.op("get").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait()?;
    /// let profile = engine.profiler().stop();
    /// let names: Vec<_> = profile.ops().iter().map(|op| op.name.as_str()).collect();
    /// assert_eq!(names, ["set", "get"]);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn ops(&self) -> &[ProfiledOp] {
        &self.ops
    }

    /// The ops recorded before these and let go, to keep the profile
    /// within its bound.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var_named("x", 0);
    /// engine.profiler().start();
    /// engine.op("set").write(&v).run(|(), (mut v,)| { *v = 1; Ok(()) });
    /// engine.op("get").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait()?;
    /// let profile = engine.profiler().stop();
    /// assert_eq!(profile.dropped(), 0);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The first time any op holds: views start there.
    fn origin(&self) -> u64 {
        self.ops.iter().map(|op| op.pushed).min().unwrap_or(0)
    }

    /// The profile as Chrome trace-event JSON (opens in Perfetto and
    /// chrome://tracing): a process per device, a thread per worker, each
    /// op's body a complete event with its vars and queue wait (and its
    /// priority, lane and outcome where they are not the usual ones); the
    /// pushing threads, each push a span; the stretches of 2 µs or more
    /// where an op was ready while a worker idled
    /// ([`idle_while_ready`](Self::idle_while_ready));
    /// flow arrows from an op to the ops whose last dependency it
    /// released; a counter of ready ops waiting, per device.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var_named("x", 0);
    /// engine.profiler().start();
    /// engine.op("set").write(&v).run(|(), (mut v,)| { *v = 1; Ok(()) });
    /// engine.op("get").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait()?;
    /// let profile = engine.profiler().stop();
    /// let json = profile.chrome_trace(); // open in chrome://tracing or Perfetto
    /// assert!(json.contains("\"set\""));
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn chrome_trace(&self) -> String {
        chrome::render(self)
    }

    /// Writes [`chrome_trace`](Self::chrome_trace) to `path`.
    ///
    /// # Errors
    ///
    /// The file's I/O error.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var_named("x", 0);
    /// engine.profiler().start();
    /// engine.op("set").write(&v).run(|(), (mut v,)| { *v = 1; Ok(()) });
    /// engine.op("get").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait()?;
    /// let profile = engine.profiler().stop();
    /// let path = std::env::temp_dir().join(format!("depengine-doc-{}.json", std::process::id()));
    /// profile.write_chrome_trace(&path).unwrap();
    /// assert!(std::fs::read_to_string(&path).unwrap().contains("\"get\""));
    /// # std::fs::remove_file(&path).unwrap();
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn write_chrome_trace(&self, path: impl AsRef<std::path::Path>) -> std::io::Result<()> {
        std::fs::write(path, self.chrome_trace())
    }

    /// Per op name: count, total, min, mean and max run time, and mean
    /// queue wait (MXNet's aggregate statistics), sorted by total run time.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var_named("x", 0);
    /// engine.profiler().start();
    /// engine.op("set").write(&v).run(|(), (mut v,)| { *v = 1; Ok(()) });
    /// engine.op("get").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait()?;
    /// let profile = engine.profiler().stop();
    /// let per_name = profile.aggregate();
    /// assert_eq!(per_name.iter().map(|a| a.count).sum::<u64>(), 2);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn aggregate(&self) -> Vec<Aggregate> {
        aggregate::compute(self)
    }

    /// Where an op was ready while a worker of its pool ran none, per pool
    /// (a pushing thread that ran ops itself does not count as a worker),
    /// in time order: the stalls a scheduler should not leave.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var_named("x", 0);
    /// engine.profiler().start();
    /// engine.op("set").write(&v).run(|(), (mut v,)| { *v = 1; Ok(()) });
    /// engine.op("get").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait()?;
    /// let profile = engine.profiler().stop();
    /// for gap in profile.idle_while_ready() {
    ///     println!("{gap:?}"); // a worker idle while an op waited, ready
    /// }
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn idle_while_ready(&self) -> Vec<IdleGap> {
        idle::compute(self)
    }

    /// [`aggregate`](Self::aggregate) as a text table.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var_named("x", 0);
    /// engine.profiler().start();
    /// engine.op("set").write(&v).run(|(), (mut v,)| { *v = 1; Ok(()) });
    /// engine.op("get").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait()?;
    /// let profile = engine.profiler().stop();
    /// let table = profile.aggregate_table();
    /// assert!(table.contains("set") && table.contains("get"));
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn aggregate_table(&self) -> String {
        aggregate::table(&self.aggregate())
    }

    /// A self-contained SVG timeline: a row per thread, each op's body a bar
    /// coloured by its name, each push a grey bar on its pushing thread's
    /// row, and a row per pool marking in red where an op was ready while
    /// a worker idled (2 µs or more); with a legend.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var_named("x", 0);
    /// engine.profiler().start();
    /// engine.op("set").write(&v).run(|(), (mut v,)| { *v = 1; Ok(()) });
    /// engine.op("get").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait()?;
    /// let profile = engine.profiler().stop();
    /// let svg = profile.svg(); // a timeline, a row per thread
    /// assert!(svg.starts_with("<svg") || svg.starts_with("<?xml"));
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn svg(&self) -> String {
        svg::render(self)
    }
}
