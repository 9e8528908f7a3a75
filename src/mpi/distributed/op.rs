//! An op on distributed vars: what it reads and writes, typed as a local
//! op's declarations are, where it runs, and the transfers and books its
//! push brings.

use std::fmt;
use std::sync::Arc;

use smallvec::SmallVec;

use super::moves::Moved;
use super::slice::DistSlice;
use super::{DistVar, Distribution, Plain, mix};
use crate::engine::OpBuilder;
use crate::engine::OpHandle;
use crate::error::{BoxError, Error};
use crate::op::access::{Append, Item, Reading, Writing};
use crate::var::Var;

impl<'c> Distribution<'c> {
    /// An op on distributed vars, to declare and run (see [`DistOp`]).
    pub fn op(&self, name: &str) -> DistOp<'_, 'c> {
        DistOp {
            dist: self,
            name: name.to_owned(),
            reads: Vec::new(),
            writes: Vec::new(),
            repair: false,
            // Named when it runs, on its rank only.
            op: self.engine.op(""),
        }
    }
}

/// An op on distributed vars, submitted on every rank alike: declare what
/// it reads and writes, then [`run`](Self::run) it.
///
/// As with a local op ([`OpBuilder`]), each declaration adds one guard to
/// the tuple its body receives, in call order: a [`ReadGuard`](crate::ReadGuard)
/// of a [`DistSlice`] for a read, a [`WriteGuard`](crate::WriteGuard) for a write;
/// [`read_all`](Self::read_all) and [`write_all`](Self::write_all) add a `Vec`
/// of them. Vars of different element types mix in one op. A `DistSlice` derefs
/// to a slice: its elements can change, its length cannot.
///
/// ```no_run
/// # fn f(dist: &depengine::mpi::distributed::Distribution<'_>) -> depengine::Result<()> {
/// let counts = dist.var("counts", 0, 4, || vec![1u32, 2, 3, 4])?;
/// let scale = dist.var("scale", 0, 1, || vec![0.5f64])?;
/// let out = dist.var("out", 1 % dist.size(), 4, || vec![0.0f64; 4])?;
/// dist.op("scale").read(&counts).read(&scale).write(&out).run(|(counts, scale), (mut out,)| {
///     for (o, c) in out.iter_mut().zip(counts.iter()) {
///         *o = f64::from(*c) * scale[0];
///     }
///     Ok(())
/// })?;
/// # Ok(()) }
/// ```
///
/// What the body may touch is what the op declares, as the compiler
/// checks:
///
/// ```compile_fail
/// # fn f(dist: &depengine::mpi::distributed::Distribution<'_>,
/// #      a: &depengine::mpi::distributed::DistVar<f64>, b: &depengine::mpi::distributed::DistVar<f64>) {
/// // A read gives no write access.
/// dist.op("x").read(a).write(b).run(|(mut a,), (_b,)| { a[0] = 1.0; Ok(()) });
/// # }
/// ```
///
/// ```compile_fail
/// # fn f(dist: &depengine::mpi::distributed::Distribution<'_>, a: &depengine::mpi::distributed::DistVar<f64>) {
/// // A body cannot take a guard the op did not declare.
/// dist.op("x").read(a).run(|(a, b), ()| Ok(()));
/// # }
/// ```
///
/// ```compile_fail
/// # fn f(dist: &depengine::mpi::distributed::Distribution<'_>,
/// #      a: &depengine::mpi::distributed::DistVar<f64>, b: &depengine::mpi::distributed::DistVar<u32>) {
/// // Each guard has its var's element type.
/// dist.op("x").read(a).write(b).run(|(a,), (mut b,)| { b[0] = a[0]; Ok(()) });
/// # }
/// ```
///
/// ```compile_fail
/// # fn f(dist: &depengine::mpi::distributed::Distribution<'_>, b: &depengine::mpi::distributed::DistVar<f64>) {
/// // A slice's length is the var's: it cannot grow.
/// dist.op("x").write(b).run(|(), (mut b,)| { b.push(1.0); Ok(()) });
/// # }
/// ```
#[must_use = "an op is pushed only when `run` is called"]
pub struct DistOp<'d, 'c, Rd = (), Wr = ()> {
    dist: &'d Distribution<'c>,
    name: String,
    reads: Vec<&'d dyn Moved>,
    writes: Vec<&'d dyn Moved>,
    repair: bool,
    /// The local op, pushed on the rank that runs it.
    op: OpBuilder<'d, Rd, Wr>,
}

impl<Rd, Wr> fmt::Debug for DistOp<'_, '_, Rd, Wr> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids = |vars: &[&dyn Moved]| vars.iter().map(|v| v.id()).collect::<Vec<_>>();
        f.debug_struct("DistOp")
            .field("name", &self.name)
            .field("reads", &ids(&self.reads))
            .field("writes", &ids(&self.writes))
            .finish()
    }
}

impl<'d, 'c, Rd, Wr> DistOp<'d, 'c, Rd, Wr> {
    /// Declares a read of `var`: the body receives a
    /// [`ReadGuard`](crate::ReadGuard) of its [`DistSlice`].
    pub fn read<T: Plain>(self, var: &'d DistVar<T>) -> DistOp<'d, 'c, Rd::Output, Wr>
    where
        Rd: Append<Reading<Var<DistSlice<T>>>>,
    {
        let Self { dist, name, mut reads, writes, repair, op } = self;
        reads.push(var);
        DistOp { dist, name, reads, writes, repair, op: op.read(&var.local) }
    }

    /// Declares a read of each var: the body receives a `Vec` of guards.
    pub fn read_all<T: Plain>(
        self,
        vars: impl IntoIterator<Item = &'d DistVar<T>>,
    ) -> DistOp<'d, 'c, Rd::Output, Wr>
    where
        Rd: Append<Reading<Vec<Var<DistSlice<T>>>>>,
    {
        let Self { dist, name, mut reads, writes, repair, op } = self;
        let vars: Vec<&'d DistVar<T>> = vars.into_iter().collect();
        reads.extend(vars.iter().map(|v| *v as &dyn Moved));
        DistOp { dist, name, reads, writes, repair, op: op.read_all(vars.iter().map(|v| &v.local)) }
    }

    /// Declares a write of `var`: the body receives a
    /// [`WriteGuard`](crate::WriteGuard) of its [`DistSlice`].
    pub fn write<T: Plain>(self, var: &'d DistVar<T>) -> DistOp<'d, 'c, Rd, Wr::Output>
    where
        Wr: Append<Writing<Var<DistSlice<T>>>>,
    {
        let Self { dist, name, reads, mut writes, repair, op } = self;
        writes.push(var);
        DistOp { dist, name, reads, writes, repair, op: op.write(&var.local) }
    }

    /// Declares a write of each var: the body receives a `Vec` of guards.
    pub fn write_all<T: Plain>(
        self,
        vars: impl IntoIterator<Item = &'d DistVar<T>>,
    ) -> DistOp<'d, 'c, Rd, Wr::Output>
    where
        Wr: Append<Writing<Vec<Var<DistSlice<T>>>>>,
    {
        let Self { dist, name, reads, mut writes, repair, op } = self;
        let vars: Vec<&'d DistVar<T>> = vars.into_iter().collect();
        writes.extend(vars.iter().map(|v| *v as &dyn Moved));
        DistOp { dist, name, reads, writes, repair, op: op.write_all(vars.iter().map(|v| &v.local)) }
    }

    /// Whether the op runs even though what it uses carries an error, and
    /// clears the error of what it writes when it succeeds (as
    /// [`OpBuilder::repair`]).
    pub fn repair(mut self, repair: bool) -> Self {
        self.repair = repair;
        self.op = self.op.repair(repair);
        self
    }

    /// The op's priority on the rank that runs it (as
    /// [`OpBuilder::priority`]).
    pub fn priority(mut self, priority: i32) -> Self {
        self.op = self.op.priority(priority);
        self
    }
}

impl<Rd: Item, Wr: Item> DistOp<'_, '_, Rd, Wr> {
    /// Pushes the op on every rank's books, the transfers it needs, and,
    /// on the rank that runs it, the op itself: its handle there, `None`
    /// elsewhere.
    ///
    /// # Errors
    ///
    /// The ranks' programs were found to differ at an earlier
    /// [`Distribution::wait`] (that error, on every rank), the op writes
    /// vars of two owners (refused on every rank alike,
    /// before anything is pushed), or the engine refused it on the rank
    /// that runs it (there only: the vars it writes then carry the refusal
    /// to the ranks they are sent to, until an op that repairs them).
    pub fn run<R, F>(self, body: F) -> Result<Option<OpHandle<R>>, Error>
    where
        F: FnOnce(Rd::Guard, Wr::Guard) -> Result<R, BoxError> + Send + 'static,
        R: Send + 'static,
    {
        let Self { dist, name, reads, writes, repair, op } = self;
        if let Some(err) = &dist.lock().diverged {
            return Err(err.clone());
        }
        let at = match (writes.first(), reads.first()) {
            (Some(w), _) => w.owner(),
            (None, Some(r)) => r.owner(),
            (None, None) => 0,
        };
        let mut books = dist.lock();
        if let Some(other) = writes.iter().find(|w| w.owner() != at) {
            let first = Arc::clone(&books.vars[writes[0].id() as usize].name);
            let second = Arc::clone(&books.vars[other.id() as usize].name);
            books.program = mix(books.program, &("refused", &name));
            return Err(Error::invalid(format!(
                "op `{name}` writes `{first}` (owned by rank {at}) and `{second}` (owned by rank {}): an op writes vars of one owner",
                other.owner()
            )));
        }
        dist.move_reads(&mut books, &reads, at);
        for w in &writes {
            let book = &mut books.vars[w.id() as usize];
            book.version += 1;
            book.copies[at] = Some(book.version);
        }
        let ids = reads.iter().chain(&writes).map(|v| v.id());
        books.program = mix(books.program, &(&name, reads.len(), ids.collect::<SmallVec<[u32; 8]>>()));
        if dist.rank() != at {
            return Ok(None);
        }
        let pushed = op.named(name.clone()).run(body).pushed();
        // A refused op leaves its vars without their new version here: the
        // ranks they are sent to learn why instead of getting the old one.
        let refused = pushed.map_err(|err| {
            let why = format!("op `{name}`, which writes it, was refused on rank {at}: {err}");
            (why, err)
        });
        for w in &writes {
            let book = &mut books.vars[w.id() as usize];
            match &refused {
                Err((why, _)) => book.refused = Some(why.clone()),
                Ok(_) if repair => book.refused = None,
                Ok(_) => {}
            }
        }
        let handle = refused.map_err(|(_, err)| err)?;
        books.stats.ops_run += 1;
        Ok(Some(handle))
    }
}
