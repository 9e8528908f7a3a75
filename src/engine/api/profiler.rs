//! The profiler, as the engine's handle shows it (`engine/recorder.rs`
//! records; `crate::profile` renders).

use super::Engine;
use crate::profile::Profile;

/// The engine's profiler (see [`Engine::profiler`]).
#[derive(Debug)]
pub struct Profiler<'e> {
    engine: &'e Engine,
}

impl Engine {
    /// The engine's profiler: start it, stop it, take what it recorded.
    ///
    /// It records, per op: name, device, lane, the thread its body ran on,
    /// push, ready, start, end and completion times, the vars it read and
    /// wrote, and the ops whose last dependency it released. An op pushed
    /// with [`OpBuilder::profile`](crate::engine::OpBuilder::profile)`(false)` is
    /// never recorded; with `profile(true)`, it is recorded even while the
    /// profiler records only the ops that opt in
    /// ([`Profiler::start_opted_in`]), so one stage of a busy service can be
    /// profiled alone. `DEPENGINE_PROFILE=path.json` makes every engine of
    /// the process record from its start and write the Chrome trace there
    /// when it shuts down, or once it has drained after its last handle is
    /// dropped (a process that exits before that writes nothing: shut the
    /// engine down, or wait for it, first). The first engine of the process
    /// writes `path.json`, later ones `path.2.json`, `path.3.json`…; each
    /// file is written whole, once. It keeps the last ops only (see
    /// [`Profiler::keep_last`]).
    ///
    /// Off, the profiler costs a push one relaxed load.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> depengine::Result<()> {
    /// let engine = depengine::Engine::new();
    /// let v = engine.var_named("counter", 0u64);
    /// engine.profiler().start();
    /// for _ in 0..3 {
    ///     engine.op("add").write(&v).run(|(), (mut v,)| {
    ///         *v += 1;
    ///         Ok(())
    ///     });
    /// }
    /// engine.wait_for_all().await?;
    /// let profile = engine.profiler().stop();
    /// assert_eq!(profile.ops().len(), 3);
    /// assert_eq!(profile.aggregate()[0].count, 3);
    /// assert!(profile.chrome_trace().contains("counter (#"));
    /// # Ok(()) }
    /// ```
    pub fn profiler(&self) -> Profiler<'_> {
        Profiler { engine: self }
    }
}

impl Profiler<'_> {
    /// Records every op pushed from now on (but those pushed with
    /// `profile(false)`).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// engine.profiler().start();
    /// engine.op("step").run(|(), ()| Ok(())).blocking_wait()?;
    /// assert_eq!(engine.profiler().stop().ops().len(), 1);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn start(&self) {
        self.engine.shared().recorder.start(false);
    }

    /// Records only the ops pushed with `profile(true)` from now on.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// engine.profiler().start_opted_in();
    /// engine.op("other").run(|(), ()| Ok(())).blocking_wait()?;
    /// engine.op("stage").profile(true).run(|(), ()| Ok(())).blocking_wait()?;
    /// assert_eq!(engine.profiler().stop().ops()[0].name, "stage");
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn start_opted_in(&self) {
        self.engine.shared().recorder.start(true);
    }

    /// Whether it records.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// # if std::env::var_os("DEPENGINE_PROFILE").is_none() {
    /// assert!(!engine.profiler().is_on());
    /// # }
    /// engine.profiler().start();
    /// assert!(engine.profiler().is_on());
    /// ```
    pub fn is_on(&self) -> bool {
        self.engine.shared().recorder.is_on()
    }

    /// Stops recording and takes what was recorded. Ops pushed while it
    /// recorded and completing later are kept for the next take.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// engine.profiler().start();
    /// engine.op("a").run(|(), ()| Ok(())).blocking_wait()?;
    /// let profile = engine.profiler().stop();
    /// assert!(!engine.profiler().is_on());
    /// assert_eq!(profile.ops()[0].name, "a");
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn stop(&self) -> Profile {
        let recorder = &self.engine.shared().recorder;
        recorder.stop();
        recorder.profile(true)
    }

    /// What was recorded so far (the ops that completed), without taking
    /// it. Completions are held back only while the references to what is
    /// kept are copied, not while the ops are: a snapshot of a large
    /// profile does not stall the engine.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// engine.profiler().start();
    /// engine.op("a").run(|(), ()| Ok(())).blocking_wait()?;
    /// assert_eq!(engine.profiler().snapshot().ops().len(), 1);
    /// assert_eq!(engine.profiler().stop().ops().len(), 1); // still there
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn snapshot(&self) -> Profile {
        self.engine.shared().recorder.profile(false)
    }

    /// Takes what was recorded so far; recording goes on.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// engine.profiler().start();
    /// engine.op("a").run(|(), ()| Ok(())).blocking_wait()?;
    /// assert_eq!(engine.profiler().take().ops().len(), 1);
    /// engine.op("b").run(|(), ()| Ok(())).blocking_wait()?;
    /// assert_eq!(engine.profiler().stop().ops()[0].name, "b");
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn take(&self) -> Profile {
        self.engine.shared().recorder.profile(true)
    }

    /// Keeps only the last `n` completed ops (at least one): older ones
    /// are let go as new ones complete, and
    /// [`Profile::dropped`](crate::profile::Profile::dropped) counts them.
    /// A profiler left on in a long-running service thus holds a bounded
    /// amount of memory (each op kept costs some 600 bytes). Environment:
    /// `DEPENGINE_PROFILE_KEEP`. Default: 100,000.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let profiler = engine.profiler();
    /// profiler.keep_last(2);
    /// profiler.start();
    /// for _ in 0..5 {
    ///     engine.op("step").run(|(), ()| Ok(())).blocking_wait()?;
    /// }
    /// let profile = profiler.stop();
    /// assert_eq!((profile.ops().len(), profile.dropped()), (2, 3));
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn keep_last(&self, n: usize) {
        self.engine.shared().recorder.keep_last(n);
    }

    /// How many completed ops it keeps (see [`keep_last`](Self::keep_last)).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// engine.profiler().keep_last(10);
    /// assert_eq!(engine.profiler().keeps(), 10);
    /// ```
    pub fn keeps(&self) -> usize {
        self.engine.shared().recorder.keeps()
    }
}
