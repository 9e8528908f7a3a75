//! The ranks compare their programs: at a wait (a future that blocks no
//! thread) and at the drop (which never waits at all).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::Sender;
use std::task::{Context, Poll};

use super::super::comm_thread::Msg;
use super::error::TransferError;
use super::{Distribution, Slots};
use crate::engine::OpHandle;
use crate::error::Error;
use crate::may_block::{Instead, refuse_blocking};

/// [`Distribution::wait`]'s future: `.await` it, or call
/// [`blocking_wait`](Self::blocking_wait) off the runtime's workers.
#[must_use = "a wait does nothing unless awaited"]
pub struct DistWait<'a> {
    waiting: Pin<Box<dyn Future<Output = Result<(), Error>> + Send + 'a>>,
}

impl DistWait<'_> {
    /// Blocks this thread until the wait resolves.
    ///
    /// # Errors
    ///
    /// As for [`Distribution::wait`]; on a Tokio runtime's worker it
    /// refuses at once ([`Error::is_blocking_in_runtime`](crate::Error::is_blocking_in_runtime)):
    /// `.await` it there.
    pub fn blocking_wait(self) -> Result<(), Error> {
        refuse_blocking("Distribution::wait", Instead::Await)?;
        crate::sync::block_on::block_on(self)
    }
}

impl Future for DistWait<'_> {
    type Output = Result<(), Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.waiting.as_mut().poll(cx)
    }
}

impl fmt::Debug for DistWait<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DistWait").finish_non_exhaustive()
    }
}

impl Distribution<'_> {
    /// Resolves once every op and transfer this rank runs for the
    /// distribution so far is done, after the ranks have compared their
    /// programs: a collective, so every rank calls it at the same point of
    /// the program. A future: `.await` it, or
    /// [`blocking_wait`](DistWait::blocking_wait) for it.
    ///
    /// # Errors
    ///
    /// If the ranks' programs differ (their hashes of every var and op
    /// pushed, or their numbers of transfers), every rank fails with
    /// [`TransferError::ProgramsDiffer`], naming the first rank that
    /// differs from it, and the transfers in flight are given up
    /// ([`TransferError::Abandoned`]) instead of waited for, as some may
    /// never be matched; every later var and op of this distribution is
    /// refused with the same error. Else the first failure among the ops, as
    /// [`Engine::wait_for_all`](crate::Engine::wait_for_all) reports it.
    pub fn wait(&self) -> DistWait<'_> {
        let agreed = self.agree(None);
        DistWait { waiting: Box::pin(self.waited(agreed)) }
    }

    async fn waited(&self, agreed: OpHandle<()>) -> Result<(), Error> {
        let agreed = agreed.await;
        if let Err(err) = &agreed {
            let why = format!("{err:#}");
            let _ = self.tx.send(Msg::Abandon { slot: self.slot, dist: self.id, why });
            // A send given up keeps its var read-held for good: no op of
            // the distribution may queue behind it, so none is taken.
            self.lock().diverged = Some(err.clone());
        }
        // Every op of the engine first, which wakes this task once, not
        // once per transfer as waiting for each in turn would while they
        // still run; the transfers' outcomes are then at hand.
        let all = self.engine.wait_for_all().await;
        let handles = std::mem::take(&mut self.lock().in_flight);
        let mut first = agreed.err();
        for handle in handles {
            if let Err(err) = handle.await {
                first.get_or_insert(err);
            }
        }
        match first {
            Some(err) => Err(err),
            None => all,
        }
    }

    /// Every rank's program, compared: an all-gather of each rank's hash
    /// and number of transfers, then an op that fails unless all match
    /// (and, at the drop, tells the comm thread: `closing`).
    fn agree(&self, closing: Option<Closing>) -> OpHandle<()> {
        let (program, transfers) = {
            let books = self.lock();
            (books.program, books.transfers)
        };
        let world = self.world.engine();
        let mine = world.var(vec![program, transfers]);
        let all = world.var(Vec::<u64>::new());
        // The check op below waits on `all`; the handle is not needed.
        drop(self.world.all_gather(&mine, &all));
        let describe = |p: &[u64]| format!("program hash {:016x} with {} transfers", p[0], p[1]);
        let op = world.op(format!("distribution #{}: compare the ranks' programs", self.id));
        op.read(&all).run(move |(all,), ()| {
            let mine = [program, transfers];
            let span = all.chunks(2).map(|p| p[1]).max().unwrap_or(transfers);
            let verdict = match all.chunks(2).enumerate().find(|(_, theirs)| *theirs != mine) {
                Some((rank, theirs)) => Err(TransferError::ProgramsDiffer {
                    mine: describe(&mine),
                    rank,
                    theirs: describe(theirs),
                }),
                None => Ok(()),
            };
            if let Some(closing) = closing {
                let known = closing.known;
                closing.close(verdict.as_ref().err().map(|err| (err.to_string(), span)));
                // A difference a wait reported already is not reported
                // again.
                if known {
                    return Ok(());
                }
            }
            Ok(verdict?)
        })
    }
}

/// The drop's verdict for the comm thread, sent once the ranks have
/// compared their programs: whether they differed. Dropped unsent (the
/// comparison never ran), it says they could not be compared, which gives
/// up the transfers as a difference would.
struct Closing {
    tx: Sender<Msg>,
    slot: u32,
    dist: u32,
    /// This rank's transfers in the distribution.
    transfers: u64,
    /// A wait found the programs different already.
    known: bool,
    sent: bool,
}

impl Closing {
    fn close(mut self, diverged: Option<(String, u64)>) {
        self.sent = true;
        let _ = self.tx.send(Msg::Verdict { slot: self.slot, dist: self.dist, diverged });
    }
}

impl Drop for Closing {
    fn drop(&mut self) {
        if !self.sent {
            let why = "the ranks' programs could not be compared at the distribution's drop".to_owned();
            // The comparison did not run here (the world's engine refused
            // or dropped it), so the others' counts are unknown: this
            // rank's own is the best guess (a world whose engine fails its
            // ops fails its collectives too).
            let diverged = Some((why, self.transfers));
            let _ = self.tx.send(Msg::Verdict { slot: self.slot, dist: self.dist, diverged });
        }
    }
}

impl Drop for Distribution<'_> {
    fn drop(&mut self) {
        let books = self.books.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (diverged, transfers) = (books.diverged.is_some(), books.stats.sent + books.stats.received);
        // The slot is given back now, on every rank at the same point of
        // the program (see `Slots`); the comm thread holds a later
        // distribution's transfers on it until this one's are all handed
        // over and the programs compared (`turns.rs`).
        let close = |slots: &mut Slots| slots.close(self.slot, diverged);
        close(&mut self.world.distributions());
        // Said now, before a later distribution on the slot can hand over
        // anything (its transfers then wait for this one's).
        let (tx, slot, dist) = (self.tx.clone(), self.slot, self.id);
        let _ = tx.send(Msg::Close { slot, dist, transfers });
        let closing = Closing { tx, slot, dist, transfers, known: diverged, sent: false };
        if std::thread::panicking() {
            // The comparison may wait for ranks that wait for this one:
            // the world's drop ends the job instead (see `Collectives`);
            // the slot is given up here as if the programs differed.
            return;
        }
        // Its failure, if the programs differ, is the world engine's to
        // report (`wait_for_all`); the handle is not needed.
        drop(self.agree(Some(closing)));
    }
}
