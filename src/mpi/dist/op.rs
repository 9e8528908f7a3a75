//! An op on distributed vars: what it reads and writes, where it runs,
//! and the transfers and books its push brings.

use std::fmt;

use super::{DistVar, Distribution, Plain, mix};
use crate::BoxError;
use crate::error::Error;
use crate::op::op_handle::OpHandle;
use crate::var::Var;

impl<'c> Distribution<'c> {
    /// An op on distributed vars, to declare and run (see [`DistOp`]).
    pub fn op<T: Plain>(&self, name: &str) -> DistOp<'_, 'c, T> {
        DistOp {
            dist: self,
            name: name.to_owned(),
            reads: Vec::new(),
            writes: Vec::new(),
            repair: false,
            priority: 0,
        }
    }
}

/// An op on distributed vars, submitted on every rank alike: declare what
/// it reads and writes, then [`run`](Self::run) it.
pub struct DistOp<'d, 'c, T: Plain> {
    dist: &'d Distribution<'c>,
    name: String,
    reads: Vec<&'d DistVar<T>>,
    writes: Vec<&'d DistVar<T>>,
    repair: bool,
    priority: i32,
}

impl<T: Plain> fmt::Debug for DistOp<'_, '_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DistOp")
            .field("name", &self.name)
            .field("reads", &self.reads)
            .field("writes", &self.writes)
            .finish()
    }
}

/// An op's body: the elements of what it reads, then of what it writes,
/// in the order declared.
type DistBody<T> = dyn FnOnce(&[&[T]], &mut [&mut [T]]) -> Result<(), BoxError> + Send;

impl<'d, 'c, T: Plain> DistOp<'d, 'c, T> {
    /// Declares a read of `var`.
    pub fn read(mut self, var: &'d DistVar<T>) -> Self {
        self.reads.push(var);
        self
    }

    /// Declares a write of `var`.
    pub fn write(mut self, var: &'d DistVar<T>) -> Self {
        self.writes.push(var);
        self
    }

    /// Whether the op runs even though what it uses carries an error, and
    /// clears the error of what it writes when it succeeds (as
    /// [`OpBuilder::repair`](crate::engine::OpBuilder::repair)).
    pub fn repair(mut self, repair: bool) -> Self {
        self.repair = repair;
        self
    }

    /// The op's priority on the rank that runs it (as
    /// [`OpBuilder::priority`](crate::engine::OpBuilder::priority)).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

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
    pub fn run(
        self,
        body: impl FnOnce(&[&[T]], &mut [&mut [T]]) -> Result<(), BoxError> + Send + 'static,
    ) -> Result<Option<OpHandle<()>>, Error> {
        let Self { dist, name, reads, writes, repair, priority } = self;
        if let Some(err) = &dist.lock().diverged {
            return Err(err.clone());
        }
        let at = match (writes.first(), reads.first()) {
            (Some(w), _) => w.owner,
            (None, Some(r)) => r.owner,
            (None, None) => 0,
        };
        if let Some(other) = writes.iter().find(|w| w.owner != at) {
            let mut books = dist.lock();
            let names = |v: &DistVar<T>| books.vars[v.id as usize].name.clone();
            let first = names(writes[0]);
            let second = names(other);
            books.program = mix(books.program, &("refused", &name));
            return Err(Error::invalid(format!(
                "op `{name}` writes `{first}` (owned by rank {at}) and `{second}` (owned by rank {}): an op writes vars of one owner",
                other.owner
            )));
        }
        let mut books = dist.lock();
        dist.move_reads(&mut books, &reads, at);
        for w in &writes {
            let book = &mut books.vars[w.id as usize];
            book.version += 1;
            book.copies[at] = Some(book.version);
        }
        let ids: Vec<u32> = reads.iter().chain(&writes).map(|v| v.id).collect();
        books.program = mix(books.program, &(&name, reads.len(), &ids));
        if dist.rank() != at {
            return Ok(None);
        }
        let body: Box<DistBody<T>> = Box::new(body);
        let written: Vec<u32> = writes.iter().map(|v| v.id).collect();
        let reads: Vec<&Var<Vec<T>>> = reads.iter().map(|v| &v.local).collect();
        let writes: Vec<&Var<Vec<T>>> = writes.iter().map(|v| &v.local).collect();
        let op = dist.engine.op(name.clone()).repair(repair).priority(priority);
        let pushed = op.read_all(reads).write_all(writes).run(move |(reads,), (mut writes,)| {
            let reads: Vec<&[T]> = reads.iter().map(|g| g.as_slice()).collect();
            let mut writes: Vec<&mut [T]> = writes.iter_mut().map(|g| g.as_mut_slice()).collect();
            body(&reads, &mut writes)
        });
        // A refused op leaves its vars without their new version here: the
        // ranks they are sent to learn why instead of getting the old one.
        let refused = pushed.pushed().map_err(|err| {
            let why = format!("op `{name}`, which writes it, was refused on rank {at}: {err}");
            (why, err)
        });
        for id in written {
            match &refused {
                Err((why, _)) => books.vars[id as usize].refused = Some(why.clone()),
                Ok(_) if repair => books.vars[id as usize].refused = None,
                Ok(_) => {}
            }
        }
        let handle = refused.map_err(|(_, err)| err)?;
        books.stats.ops_run += 1;
        Ok(Some(handle))
    }
}
