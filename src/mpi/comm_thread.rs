//! The comm thread: the one thread that owns MPI.
//!
//! Collectives arrive when their ops run, in any order; they start in
//! the order they were pushed. Each goes through two immediate
//! collectives, on two duplicates of the world so that each keeps its
//! own order: the exchange of signatures (an all-gather of 128 bytes per
//! rank), started as soon as every collective before it has started its
//! own, and then, if every rank agrees and none failed, the data
//! collective, started in push order too. A barrier and a small
//! all-reduce are done by the exchange alone (their data rides in it).
//! A distribution's transfers (`distributed/`) start as soon as their ops hand
//! them over, on a third duplicate. While anything is in flight the
//! thread keeps testing it (MPI makes progress only inside its calls);
//! with nothing in flight it sleeps on its queue.
//!
//! Its one `unsafe` block starts a signature exchange on buffers it keeps
//! (`raw.rs` says why the raw calls).

#![allow(unsafe_code)]

use std::collections::{BTreeMap, VecDeque};
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::thread::JoinHandle;

use mpi::Threading;
use mpi::datatype::Equivalence;
use mpi::raw::AsRaw;
use mpi::topology::{Communicator, SimpleCommunicator};

use super::flight::{Flight, Gone, Pool, Transfer};
use super::raw::{self, Buffers, FloatReductions, Request};
use super::sig::{self, HEAD_BYTES, SIG_BYTES, Signature};
use super::transfers::Transfers;
use super::{CollectiveError, RankFailure};
use crate::error::Error;

/// The largest tag of the transfers' communicator, read when MPI starts
/// (MPI is initialised once per process).
pub(super) static TAG_UB: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(32_767);

/// What the comm thread is told.
pub(super) enum Msg {
    /// A collective whose op runs.
    Run(Box<dyn Flight>),
    /// A transfer of a distribution whose op runs.
    Transfer(Box<dyn Transfer>),
    /// The ranks' programs differ for distribution `dist` (in `slot`):
    /// give up its transfers, and why.
    Abandon { slot: u32, dist: u32, why: String },
    /// Distribution `dist` (in `slot`) was dropped, having handed over
    /// `transfers` on this rank: sent by the drop itself, before any
    /// message of a later distribution on the slot (`turns.rs`).
    Close { slot: u32, dist: u32, transfers: u64 },
    /// The ranks compared distribution `dist`'s programs at its drop: they
    /// differed (why, and the most transfers a rank had) or not.
    Verdict { slot: u32, dist: u32, diverged: Option<(String, u64)> },
    /// Collective `seq` will never run on this rank, and why.
    Gone(u64, RankFailure),
    /// No collective after number `pushed - 1` will come: stop once those
    /// are done.
    Stop(u64),
    /// The rank is unwinding from a panic: end the whole job now
    /// (`MPI_Abort`), as MPI ends a job a rank leaves without finalising,
    /// instead of finalising, which waits for ranks that may wait for this
    /// one for ever.
    Abort,
}

/// The exit code an aborted job reports: the one a panicking Rust program
/// exits with.
const ABORT_CODE: i32 = 101;

/// Starts the comm thread, which initialises MPI: its queue, its handle,
/// this rank and the world's size.
pub(super) fn start() -> Result<(Sender<Msg>, JoinHandle<()>, usize, usize), Error> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("depengine-mpi".into())
        .spawn(move || {
            if mpi::environment::is_initialized() {
                let _ = ready_tx.send(Err("MPI was initialised already in this process (once per process)"));
                return;
            }
            let Some((universe, _)) = mpi::initialize_with_threading(Threading::Funneled) else {
                let _ = ready_tx.send(Err("MPI could not be initialised"));
                return;
            };
            let world = universe.world();
            let (rank, size) = (world.rank() as usize, world.size() as usize);
            let mut comm = Comm {
                heads: world.duplicate(),
                data: world.duplicate(),
                p2p: world.duplicate(),
                floats: FloatReductions::new(),
                rank,
                size,
            };
            TAG_UB.store(raw::tag_upper_bound(&comm.p2p), std::sync::atomic::Ordering::Relaxed);
            // Best effort: without it, a mismatch that truncates a message
            // ends the job instead of failing the op.
            let _ = raw::errors_return(&comm.p2p);
            let _ = ready_tx.send(Ok((rank, size)));
            Loop::new(rx).run(&mut comm);
            // The communicators go before the universe, whose drop
            // finalises MPI, on this thread.
            drop(comm);
            drop(universe);
        })
        .map_err(|e| Error::unsupported(format!("the MPI thread could not start: {e}")))?;
    match ready.recv() {
        Ok(Ok((rank, size))) => Ok((tx, thread, rank, size)),
        Ok(Err(why)) => {
            let _ = thread.join();
            Err(Error::unsupported(why))
        }
        Err(_) => Err(Error::unsupported("the MPI thread ended while initialising MPI")),
    }
}

/// How long the comm thread, with nothing in flight, watches its queue
/// before it sleeps on it: ranks reach a collective some tens of
/// microseconds apart, and a thread woken from sleep for each one adds
/// its wake-up to every collective (PERFORMANCE.md, *Collectives across processes*).
const WATCH: std::time::Duration = std::time::Duration::from_micros(100);

struct Comm {
    /// Where signatures are exchanged.
    heads: SimpleCommunicator,
    /// Where data collectives run.
    data: SimpleCommunicator,
    /// Where the transfers of distributions run (their tags are their own).
    p2p: SimpleCommunicator,
    /// Float minimum and maximum by the crate's rule (see `Reduce`).
    floats: FloatReductions,
    rank: usize,
    size: usize,
}

/// A collective whose signatures are being exchanged: the buffers are
/// MPI's until its request is done.
struct Staged {
    flight: Box<dyn Flight>,
    mine: Box<[u8; HEAD_BYTES]>,
    all: Vec<u8>,
    request: Request,
}

struct Loop {
    rx: Receiver<Msg>,
    /// Arrived, waiting for the ones pushed before them to start.
    waiting: BTreeMap<u64, Box<dyn Flight>>,
    /// The next collective to start its signature exchange.
    next: u64,
    /// Signature exchanges in flight, in push order.
    heads: VecDeque<Staged>,
    /// Data collectives in flight.
    flying: Vec<(Box<dyn Flight>, Request)>,
    /// Transfers of distributions.
    transfers: Transfers,
    pool: Pool,
    /// Told to stop once this many collectives are done.
    stop_at: Option<u64>,
    done: u64,
    /// The queue's senders are all gone.
    closed: bool,
    /// Told to end the job.
    abort: bool,
}

impl Loop {
    fn new(rx: Receiver<Msg>) -> Self {
        Self {
            rx,
            waiting: BTreeMap::new(),
            next: 0,
            heads: VecDeque::new(),
            flying: Vec::new(),
            transfers: Transfers::default(),
            pool: Pool::default(),
            stop_at: None,
            done: 0,
            closed: false,
            abort: false,
        }
    }

    fn in_flight(&self) -> bool {
        !self.heads.is_empty() || !self.flying.is_empty() || self.transfers.busy()
    }

    fn run(mut self, comm: &mut Comm) {
        loop {
            if !self.in_flight() && !self.waiting.contains_key(&self.next) {
                let stopping = self.stop_at.is_some_and(|n| self.done >= n) && !self.transfers.owed();
                if stopping || self.closed {
                    break;
                }
                match self.wait() {
                    Ok(msg) => self.take(msg),
                    Err(_) => self.closed = true,
                }
            }
            loop {
                match self.rx.try_recv() {
                    Ok(msg) => self.take(msg),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        self.closed = true;
                        break;
                    }
                }
            }
            if self.abort {
                tracing::error!(target: "depengine", "rank {} is unwinding from a panic: ending the MPI job", comm.rank);
                comm.heads.abort(ABORT_CODE);
            }
            self.start_heads(comm);
            self.advance_heads(comm);
            self.advance_data();
            let moved = self.transfers.advance(&comm.p2p);
            // A turn that ended a transfer goes round again at once: the
            // next message may be in already, and marking it so before its
            // op asks saves that op a wake-up (`distributed/staged.rs`).
            if self.in_flight() && !moved {
                std::thread::yield_now();
            }
        }
        for (_, flight) in std::mem::take(&mut self.waiting) {
            flight.close();
        }
        self.transfers.close_all();
    }

    /// The next message: watched for a while (a program that pushes
    /// collectives one after the other would otherwise pay a wake-up of
    /// this thread for each), then waited for.
    fn wait(&self) -> Result<Msg, std::sync::mpsc::RecvError> {
        let start = std::time::Instant::now();
        while start.elapsed() < WATCH {
            match self.rx.try_recv() {
                Ok(msg) => return Ok(msg),
                Err(TryRecvError::Empty) => std::thread::yield_now(),
                Err(TryRecvError::Disconnected) => return Err(std::sync::mpsc::RecvError),
            }
        }
        self.rx.recv()
    }

    fn take(&mut self, msg: Msg) {
        match msg {
            Msg::Run(flight) => {
                let seq = flight.signature().seq;
                self.waiting.insert(seq, flight);
            }
            Msg::Gone(seq, why) => {
                let sig = Signature {
                    seq,
                    kind: 0,
                    elem: 0,
                    op: 0,
                    failure: why.code(),
                    root: 0,
                    count: 0,
                    tag: String::new(),
                };
                self.waiting.insert(seq, Box::new(Gone(sig)));
            }
            Msg::Transfer(transfer) => self.transfers.take(transfer),
            Msg::Abandon { slot, dist, why } => self.transfers.abandon(slot, dist, &why),
            Msg::Close { slot, dist, transfers } => self.transfers.close(slot, dist, transfers),
            Msg::Verdict { slot, dist, diverged } => self.transfers.verdict(slot, dist, diverged),
            Msg::Stop(pushed) => self.stop_at = Some(pushed),
            Msg::Abort => self.abort = true,
        }
    }

    /// Starts the signature exchanges of the collectives whose turn it is.
    fn start_heads(&mut self, comm: &Comm) {
        while let Some(flight) = self.waiting.remove(&self.next) {
            self.next += 1;
            let mut mine = Box::new([0u8; HEAD_BYTES]);
            mine[..SIG_BYTES].copy_from_slice(&flight.signature().encode());
            let inline = flight.inline();
            mine[SIG_BYTES..SIG_BYTES + inline.len()].copy_from_slice(&inline);
            let mut all = vec![0u8; HEAD_BYTES * comm.size];
            let b = Buffers {
                send: mine.as_ptr().cast(),
                recv: all.as_mut_ptr().cast(),
                count: HEAD_BYTES as i32,
                datatype: u8::equivalent_datatype().as_raw(),
            };
            // SAFETY: `mine` holds one signature and `all` one per rank; both
            // are heap buffers that `Staged` keeps, unmoved (a move of the
            // box or the vector does not move its buffer) and untouched,
            // until `advance_heads` finds the request done.
            match unsafe { raw::all_gather(&comm.heads, &b) } {
                Ok(request) => self.heads.push_back(Staged { flight, mine, all, request }),
                Err(code) => {
                    let what = flight.signature().to_string();
                    self.finish(flight, Err(CollectiveError::Mpi { what, code: code.0 }));
                }
            }
        }
    }

    /// Checks the signature exchanges in push order, starting each data
    /// collective (in the same order) or failing it on every rank.
    fn advance_heads(&mut self, comm: &Comm) {
        while let Some(front) = self.heads.front_mut() {
            match front.request.test() {
                Ok(false) => return,
                Ok(true) => {}
                Err(code) => {
                    let staged = self.heads.pop_front().expect("the front");
                    let what = staged.flight.signature().to_string();
                    self.finish(staged.flight, Err(CollectiveError::Mpi { what, code: code.0 }));
                    continue;
                }
            }
            let Staged { mut flight, mine, all, request: _ } = self.heads.pop_front().expect("the front");
            drop(mine);
            let sigs: Vec<Signature> =
                all.chunks(HEAD_BYTES).map(|c| Signature::decode(&c[..SIG_BYTES])).collect();
            match verdict(flight.as_ref(), &sigs, comm.rank) {
                Err(err) => self.finish(flight, Err(err)),
                Ok(()) if sig::done_by_exchange(flight.signature()) => {
                    let parts: Vec<&[u8]> = all.chunks(HEAD_BYTES).map(|c| &c[SIG_BYTES..]).collect();
                    flight.finish_inline(&parts);
                    self.done += 1;
                }
                Ok(()) => match flight.start(&comm.data, &comm.floats, &mut self.pool) {
                    Ok(request) => self.flying.push((flight, request)),
                    Err(err) => self.finish(flight, Err(err)),
                },
            }
        }
    }

    /// Tests the data collectives in flight; finishes those done.
    fn advance_data(&mut self) {
        let mut k = 0;
        while k < self.flying.len() {
            let result = match self.flying[k].1.test() {
                Ok(false) => {
                    k += 1;
                    continue;
                }
                Ok(true) => Ok(()),
                Err(code) => {
                    Err(CollectiveError::Mpi { what: self.flying[k].0.signature().to_string(), code: code.0 })
                }
            };
            let (flight, _) = self.flying.swap_remove(k);
            self.finish(flight, result);
        }
    }

    fn finish(&mut self, flight: Box<dyn Flight>, result: Result<(), CollectiveError>) {
        flight.finish(result, &mut self.pool);
        self.done += 1;
    }
}

/// Whether collective `flight` runs, from every rank's signature: not if
/// any rank failed before it (the failure first: a rank whose op never ran
/// has no signature to compare), nor if any rank's differs from this one's.
fn verdict(flight: &dyn Flight, sigs: &[Signature], rank: usize) -> Result<(), CollectiveError> {
    let mine = flight.signature();
    let failed: Vec<(usize, RankFailure)> =
        sigs.iter().enumerate().filter_map(|(r, s)| Some((r, RankFailure::of_code(s.failure)?))).collect();
    if !failed.is_empty() {
        if let Some(local) = flight.local_error() {
            return Err(local);
        }
        return Err(CollectiveError::FailedOnRanks { seq: mine.seq, what: mine.to_string(), ranks: failed });
    }
    match sigs.iter().enumerate().find(|(r, s)| *r != rank && !mine.agrees(s)) {
        Some((other, theirs)) => Err(CollectiveError::Mismatch {
            seq: mine.seq,
            mine: mine.to_string(),
            rank: other,
            theirs: theirs.to_string(),
        }),
        None => Ok(()),
    }
}
