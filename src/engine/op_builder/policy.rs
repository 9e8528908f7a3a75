//! How an op runs, beside what it declares: its device, lane and
//! priority, and what it does with errors, profiling and its handle.

use super::OpOptions;
use super::{InGroup, OpBuilder};
use crate::device::{Device, Lane};

impl<Rd, Wr, G> OpBuilder<'_, Rd, Wr, G> {
    /// Names the op (the crate's own builders that learn the name late:
    /// a distributed op names its local op only on the rank that runs it).
    #[cfg(feature = "mpi")]
    pub(crate) fn named(mut self, name: String) -> Self {
        self.opts.name = name.into();
        self
    }

    /// The device the op runs on (default `Cpu(0)`).
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::{Device, Engine};
    /// let engine = Engine::builder().cpu_devices(2).build()?;
    /// let h = engine.op("on the second").device(Device::Cpu(1)).run(|(), ()| Ok(1));
    /// assert_eq!(h.blocking_wait()?, 1);
    /// assert!(engine.op("none such").device(Device::Cpu(7)).run(|(), ()| Ok(())).pushed().is_err());
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn device(mut self, device: Device) -> Self {
        self.opts.device = device;
        self
    }

    /// The lane (worker pool) the op runs on (default [`Lane::Normal`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use depengine::Lane;
    /// let engine = depengine::Engine::new();
    /// // A health check that must not queue behind batch work.
    /// let h = engine.op("health").lane(Lane::Prioritized).run(|(), ()| Ok("ok"));
    /// assert_eq!(h.blocking_wait()?, "ok");
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn lane(mut self, lane: Lane) -> Self {
        self.opts.lane = lane;
        self
    }

    /// Priority within the lane's queue: higher first, FIFO among equals
    /// made ready by one thread (default 0). Ready ops of equal priority
    /// from different threads are taken in turn.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let urgent = engine.op("urgent").priority(10).run(|(), ()| Ok(()));
    /// let later = engine.op("later").priority(-10).run(|(), ()| Ok(()));
    /// urgent.blocking_wait()?;
    /// later.blocking_wait()?;
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn priority(mut self, priority: i32) -> Self {
        self.opts.priority = priority;
        self
    }

    /// Runs the op even when a var it uses carries an error (default
    /// false). The error still passes on to the vars it writes.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let v = engine.var(0);
    /// let _ = engine.op("fails").write(&v).run(|(), _| -> depengine::Result<(), _> { Err("broken".into()) });
    /// // Skipped: `v` carries the error.
    /// assert!(engine.op("reads").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait().unwrap_err().is_skipped());
    /// // Runs anyway: a logger, say.
    /// let logged = engine.op("log").read(&v).no_skip(true).run(|(v,), ()| Ok(*v));
    /// assert_eq!(logged.blocking_wait()?, 0);
    /// # let _ = engine.wait_for_all().blocking_wait();
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn no_skip(mut self, no_skip: bool) -> Self {
        self.opts.set(OpOptions::NO_SKIP, no_skip);
        self
    }

    /// Whether the profiler records this op ([`Engine::profiler`](crate::Engine::profiler)):
    /// `true` records it even while the profiler records only the ops that
    /// opt in; `false` never records it. Default: as the profiler says.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// engine.profiler().start_opted_in();
    /// engine.op("noise").run(|(), ()| Ok(())).blocking_wait()?;
    /// engine.op("watched").profile(true).run(|(), ()| Ok(())).blocking_wait()?;
    /// let profile = engine.profiler().stop();
    /// let names: Vec<_> = profile.ops().iter().map(|op| op.name.as_str()).collect();
    /// assert_eq!(names, ["watched"]);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn profile(mut self, profile: bool) -> Self {
        self.opts.set(OpOptions::PROFILE, profile);
        self.opts.set(OpOptions::NO_PROFILE, !profile);
        self
    }

    /// Runs the op on the pushing thread, inside the push, when it is ready
    /// then and every worker of its pool is parked; otherwise it goes to the
    /// pool as any op (default false). A request's op on a quiet service
    /// then costs no hand-off to a sleeping worker and back (two wake-ups),
    /// while under load its requests still run on the engine's workers,
    /// off the caller's threads. Meant for short ops: the pushing thread,
    /// a Tokio worker say, runs the body before `run` returns. Only ops of
    /// a CPU device's normal lane with a sync or async body may run so;
    /// others ignore the setting.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> depengine::Result<()> {
    /// let engine = depengine::Engine::new();
    /// let model = engine.var(vec![0.5f32; 1024]);
    /// // A prediction: on this thread while the workers sleep.
    /// let y = engine
    ///     .op("predict")
    ///     .read(&model)
    ///     .inline_when_idle(true)
    ///     .run(|(m,), ()| Ok(m.iter().sum::<f32>()))
    ///     .await?;
    /// assert_eq!(y, 512.0);
    /// # Ok(()) }
    /// ```
    pub fn inline_when_idle(mut self, inline: bool) -> Self {
        self.opts.set(OpOptions::INLINE_WHEN_IDLE, inline);
        self
    }

    /// Makes the op a repair of the vars it writes (default false): it runs
    /// whatever errors its vars carry (as [`no_skip`](Self::no_skip)), it
    /// takes the error of each var it writes as it is let through there,
    /// and it passes on no error it saw. So if it succeeds, the vars it
    /// writes carry no error after it; if it fails, they carry its own
    /// failure (unless [`poison(false)`](Self::poison)). Ops pushed before
    /// it saw the error (and were skipped), ops pushed after it see the
    /// repaired data: the repair and the clearing are one op, in push
    /// order, with no window between them in which another op could see
    /// the vars half repaired.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> depengine::Result<()> {
    /// let engine = depengine::Engine::new();
    /// let model = engine.var(vec![1.0f32; 4]);
    /// let bad = engine.op("update").write(&model).run(|(), (mut m,)| -> depengine::Result<(), _> {
    ///     m[0] = f32::NAN; // half written…
    ///     Err("the update failed".into())
    /// });
    /// assert!(bad.blocking_wait().is_err());
    /// // Requests are skipped while the model carries the error.
    /// let skipped = engine.op("request").read(&model).run(|(m,), ()| Ok(m[0]));
    /// assert!(skipped.blocking_wait().unwrap_err().is_skipped());
    /// // One op repairs the data and clears the error.
    /// engine.op("repair").write(&model).repair(true).run(|(), (mut m,)| {
    ///     m.iter_mut().for_each(|w| *w = 1.0);
    ///     Ok(())
    /// });
    /// let served = engine.op("request").read(&model).run(|(m,), ()| Ok(m[0]));
    /// assert_eq!(served.blocking_wait()?, 1.0);
    /// # let _ = engine.wait_for_all().blocking_wait();
    /// # Ok(()) }
    /// ```
    pub fn repair(mut self, repair: bool) -> Self {
        self.opts.set(OpOptions::REPAIR, repair);
        self
    }

    /// Whether the op's own failure (an error it returns, a panic) is left
    /// on the vars it writes, so that the ops after it there are skipped
    /// (default true, as MXNet does). `false`: the op promises that it left
    /// its vars consistent whatever happened (it validates before it
    /// writes, say), so its failure is reported through its handle and
    /// [`Engine::wait_for_all`](crate::Engine::wait_for_all) only, and
    /// later ops use the vars as they are. A service's update that fails
    /// then does not make every later request fail. An error the op *saw*
    /// on its vars (a no-skip op) still passes on, and a write guard
    /// dropped during a panic still poisons its var.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let cache = engine.var(vec![1, 2]);
    /// let refused = engine.op("validated update").write(&cache).poison(false).run(|(), (mut c,)| {
    ///     let update = vec![-1];
    ///     if update.iter().any(|x| *x < 0) {
    ///         return Err("rejected before writing".into()); // `c` is untouched
    ///     }
    ///     *c = update;
    ///     Ok(())
    /// });
    /// assert!(refused.blocking_wait().is_err());
    /// // Later requests still read the cache.
    /// assert_eq!(engine.op("get").read(&cache).run(|(c,), ()| Ok(c.len())).blocking_wait()?, 2);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn poison(mut self, poison: bool) -> Self {
        self.opts.set(OpOptions::NO_POISON, !poison);
        self
    }

    /// Cancels the op if its handle is dropped before the op starts
    /// (default false: a dropped handle detaches the op, which still runs).
    /// For request-scoped work: the op of a request whose client hung up
    /// costs no worker. It is cancelled as by
    /// [`OpHandle::abort`](crate::OpHandle::abort).
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::builder().cpu_workers(1).build()?;
    /// let v = engine.var(0);
    /// let (tx, rx) = std::sync::mpsc::channel::<()>();
    /// let busy = engine.op("busy").write(&v).run(move |(), _| { rx.recv().ok(); Ok(()) });
    /// let request = engine.op("request").write(&v).cancel_on_drop(true).run(|(), (mut v,)| { *v += 1; Ok(()) });
    /// drop(request); // the client hung up: the op will not run
    /// tx.send(()).unwrap();
    /// busy.blocking_wait()?;
    /// assert_eq!(*v.read().blocking_wait()?, 0);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn cancel_on_drop(mut self, cancel: bool) -> Self {
        self.opts.set(OpOptions::CANCEL_ON_DROP, cancel);
        self
    }
}

impl<'e, Rd, Wr> OpBuilder<'e, Rd, Wr, ()> {
    /// Makes the op one of `group`'s (see [`OpGroup`](crate::OpGroup)): waited
    /// for, cancelled and counted with it. A push into a cancelled group is
    /// refused ([`Error::is_cancelled`](crate::Error::is_cancelled)), and so is
    /// one into a group of another engine
    /// ([`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)).
    /// An op joins one group: `group` is not there to call twice.
    ///
    /// ```compile_fail
    /// let engine = depengine::Engine::new();
    /// let (a, b) = (engine.group("a"), engine.group("b"));
    /// engine.op("in two groups").group(&a).group(&b).run(|(), ()| Ok(()));
    /// ```
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let request = engine.group("request");
    /// let h = engine.op("answer").group(&request).run(|(), ()| Ok(42));
    /// request.close();
    /// request.wait().blocking_wait()?;
    /// assert_eq!(h.blocking_wait()?, 42);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn group(self, group: &crate::OpGroup) -> OpBuilder<'e, Rd, Wr, InGroup> {
        let OpBuilder { shared, opts, reads, writes, untyped, reserved, group: () } = self;
        OpBuilder { shared, opts, reads, writes, untyped, reserved, group: InGroup(group.core().clone()) }
    }

    /// [`group`](Self::group) if `group` is `Some`, for a group known only
    /// at run time.
    ///
    /// # Examples
    ///
    /// ```
    /// let engine = depengine::Engine::new();
    /// let request = engine.group("request");
    /// for traced in [true, false] {
    ///     let group = traced.then_some(&request);
    ///     engine.op("step").group_opt(group).run_detached(|(), ()| Ok(()))?;
    /// }
    /// request.close();
    /// request.wait().blocking_wait()?;
    /// assert_eq!(request.counts().done, 1);
    /// # Ok::<(), depengine::Error>(())
    /// ```
    pub fn group_opt(self, group: Option<&crate::OpGroup>) -> OpBuilder<'e, Rd, Wr, Option<InGroup>> {
        let OpBuilder { shared, opts, reads, writes, untyped, reserved, group: () } = self;
        let group = group.map(|g| InGroup(g.core().clone()));
        OpBuilder { shared, opts, reads, writes, untyped, reserved, group }
    }
}
