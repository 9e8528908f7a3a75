//! The transfer ops: a var's elements moved from its owner to a rank that
//! reads it, pushed on the two ranks that take part, for vars of any
//! element type (an op's reads are kept as `&dyn Moved`).

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::mpsc::Sender;

use super::super::comm_thread::Msg;
use super::super::flight::Transfer;
use super::header::Header;
use super::header::STAGED_MAX;
use super::send::{Copied, copy};
use super::staged::{Landing, Staged};
use super::transfer::{Incoming, Outgoing};
use super::{DistVar, Plain, elem_mark};
use crate::device::Lane;
use crate::engine::Engine;
use crate::engine::OpHandle;

/// What a push needs to move vars: the engine, the comm thread and this
/// rank.
pub(super) struct Mover<'a> {
    pub(super) engine: &'a Engine,
    pub(super) tx: &'a Sender<Msg>,
    pub(super) rank: usize,
}

/// A distributed var, its element type erased: what an op's push needs of
/// the vars it reads.
pub(super) trait Moved: Send + Sync {
    fn id(&self) -> u32;
    fn owner(&self) -> usize;
    /// Its elements.
    fn count(&self) -> usize;
    /// Its element type's mark.
    fn elem(&self) -> u64;
    /// Bytes of its elements.
    fn bytes(&self) -> usize;
    /// The owner's op that sends the var's current version to rank `to`
    /// (or `refused`, this rank's reason why it has no such version, in
    /// its place). An op that never runs, refused by the engine or dropped
    /// by it, still leaves the receiver a header that says why.
    fn send(
        &self,
        mover: &Mover<'_>,
        header: Header,
        refused: Option<String>,
        to: usize,
    ) -> Option<OpHandle<()>>;
    /// The reader's op that receives the var's version from `from` into
    /// its cached copy (it replaces whatever error the copy carried). An
    /// op that never runs still takes the message, so that the sender is
    /// not left waiting.
    fn receive(&self, mover: &Mover<'_>, header: Header, from: usize) -> Option<OpHandle<()>>;
}

impl<T: Plain> Moved for DistVar<T> {
    fn id(&self) -> u32 {
        self.id
    }

    fn owner(&self) -> usize {
        self.owner
    }

    fn count(&self) -> usize {
        self.len
    }

    fn elem(&self) -> u64 {
        elem_mark::<T>()
    }

    fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    fn send(
        &self,
        mover: &Mover<'_>,
        header: Header,
        refused: Option<String>,
        to: usize,
    ) -> Option<OpHandle<()>> {
        let name = format!("send {} to rank {to} (transfer #{})", header.name, header.seq);
        let copied = self.bytes() <= STAGED_MAX;
        let token = Handover::<T>::new(mover, header, to, Side::Send);
        let op = mover.engine.op(name).lane(Lane::Inline).no_skip(true).read(&self.local);
        let pushed = op.run_async(move |(data,), (), done| {
            let (tx, header) = token.take();
            if copied {
                // Copied, the var is free again: its next write need not
                // wait for MPI (nor, mostly, the op: see `Copied`).
                let wire = copy(&header, Some(&data), refused);
                drop(data);
                hand_over(&tx, Box::new(Copied::new(header, wire, to, Some(done))));
            } else {
                hand_over(&tx, Box::new(Outgoing::new(header, data, refused, to, done)));
            }
        });
        pushed.pushed().ok()
    }

    fn receive(&self, mover: &Mover<'_>, header: Header, from: usize) -> Option<OpHandle<()>> {
        let name = format!("receive {} from rank {from} (transfer #{})", header.name, header.seq);
        let op = mover.engine.op(name).lane(Lane::Inline).no_skip(true).repair(true).write(&self.local);
        let pushed = if self.bytes() <= STAGED_MAX {
            // Handed over now, to be posted before the op runs: the
            // message may be in by then. Every such receive is, so that
            // the comm thread posts them in push order (`transfers.rs`).
            let landing = Landing::new();
            hand_over(mover.tx, Box::new(Staged::<T>::new(header, from, Arc::clone(&landing))));
            op.run_async(move |(), (copy,), done| landing.claim(copy, done))
        } else {
            let token = Handover::<T>::new(mover, header, from, Side::Receive);
            op.run_async(move |(), (copy,), done| {
                let (tx, header) = token.take();
                hand_over(&tx, Box::new(Incoming::new(header, copy, from, done)));
            })
        };
        pushed.pushed().ok()
    }
}

/// A transfer op's hand-over to the comm thread, made when its body runs;
/// dropped unmade (the op refused, or dropped by its engine), it hands over
/// what keeps the other rank from waiting for ever: a header that says why
/// in place of a send, a receive of the message that drops it in place of
/// a receive. Every transfer of the books is so handed over once, which
/// the comm thread counts (`turns.rs`).
struct Handover<T: Plain> {
    tx: Sender<Msg>,
    header: Option<Header>,
    peer: usize,
    side: Side,
    rank: usize,
    elem: PhantomData<fn() -> T>,
}

/// Which side of a transfer (a receive of at most `STAGED_MAX` bytes is
/// handed over at its push, and needs no token).
#[derive(Clone, Copy)]
enum Side {
    Send,
    Receive,
}

impl<T: Plain> Handover<T> {
    fn new(mover: &Mover<'_>, header: Header, peer: usize, side: Side) -> Self {
        let tx = mover.tx.clone();
        Self { tx, header: Some(header), peer, side, rank: mover.rank, elem: PhantomData }
    }

    fn take(mut self) -> (Sender<Msg>, Header) {
        let header = self.header.take().expect("taken once");
        (self.tx.clone(), header)
    }
}

impl<T: Plain> Drop for Handover<T> {
    fn drop(&mut self) {
        let Some(header) = self.header.take() else { return };
        let why =
            || format!("the send's op was refused on rank {} (or dropped unrun by its engine)", self.rank);
        let substitute: Box<dyn Transfer> = match self.side {
            Side::Send => {
                let wire = copy::<T>(&header, None, Some(why()));
                Box::new(Copied::new(header, wire, self.peer, None))
            }
            Side::Receive => Box::new(Incoming::<T>::drain(header, self.peer)),
        };
        hand_over(&self.tx, substitute);
    }
}

/// Hands a transfer to the comm thread, or fails it if the thread is gone.
pub(super) fn hand_over(tx: &Sender<Msg>, transfer: Box<dyn Transfer>) {
    if let Err(std::sync::mpsc::SendError(Msg::Transfer(transfer))) = tx.send(Msg::Transfer(transfer)) {
        transfer.close();
    }
}
