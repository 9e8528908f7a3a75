//! A load driver for the service: `POST /journal` requests from many
//! clients on loopback, half of which hang up before their answer comes,
//! while the process's memory is sampled. Then it checks what the
//! request groups promise: no cancelled op wrote (every entry of the
//! journal is an `append` that ran, and no `append` ran without its
//! `stage`), memory stayed bounded, and nothing was left in the engine
//! once the load stopped. Used by `tests/http.rs` and by the `hangups`
//! binary (`examples/serve/hangups_main.rs`), which prints the figures.
//!
//! The clients speak just enough HTTP/1.1 for this: the patient ones keep
//! one connection and read each answer whole; the impatient ones open a
//! connection per request and drop it after a random wait.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::{App, Entry, JournalCounts};

/// The load: how many clients, for how long, and how soon the impatient
/// half hangs up (a wait drawn up to this).
#[derive(Clone, Debug)]
pub struct Load {
    pub clients: usize,
    pub duration: Duration,
    pub hang_up_within: Duration,
}

/// What the load did and left.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Requests answered (to the patient clients), by class.
    pub answered_ok: u64,
    pub answered_other: u64,
    /// Requests whose client hung up.
    pub hung_up: u64,
    /// Ops the engine resolved as cancelled during the load.
    pub cancelled_ops: u64,
    /// Ops completed during the load.
    pub completed_ops: u64,
    pub journal: JournalCounts,
    /// Why the journal could not be read, if it could not.
    pub journal_error: Option<String>,
    /// Resident memory, bytes: before the load, after a quarter of it, at
    /// its peak, once it has stopped.
    pub rss_start: u64,
    pub rss_early: u64,
    pub rss_peak: u64,
    pub rss_end: u64,
    /// Journal entries when `rss_early` was read: the journal is the
    /// service's state and grows with every append, so the memory the
    /// load leaves behind is judged less the journal's entries.
    pub journal_early: usize,
    /// The engine once the load stopped: ops in flight, waiting on vars,
    /// cancelled on vars, slots of the bound used; and whether the hang
    /// explainer saw anything pending.
    pub left: [u64; 4],
    pub pending_explained: bool,
}

impl Report {
    /// What the groups promise, as a list of broken promises (empty: all
    /// kept). `rss_slack`: how much the resident memory, less the
    /// journal's entries, may grow from a quarter of the load to its end.
    pub fn broken(&self, rss_slack: u64) -> Vec<String> {
        let mut broken = Vec::new();
        if let Some(err) = &self.journal_error {
            broken.push(format!("the journal could not be read: {err}"));
        }
        if self.journal.unstaged != 0 {
            broken.push(format!("{} appends ran without their stage", self.journal.unstaged));
        }
        if self.journal.entries as u64 != self.journal.appended {
            broken
                .push(format!("{} entries but {} appends ran", self.journal.entries, self.journal.appended));
        }
        if self.journal.appended < self.answered_ok {
            broken.push(format!("{} answered but {} appended", self.answered_ok, self.journal.appended));
        }
        if self.left != [0; 4] || self.pending_explained {
            broken.push(format!("left behind: {:?} (explainer: {})", self.left, self.pending_explained));
        }
        let (early, end) = self.rss_less_journal();
        if end > early + rss_slack {
            broken.push(format!("memory less the journal grew from {early} to {end} bytes"));
        }
        broken
    }
}

impl Report {
    /// Resident memory after a quarter of the load and at its end, less
    /// the bytes of the journal's entries at each (its spare capacity is
    /// not subtracted: pages never written are not resident).
    pub fn rss_less_journal(&self) -> (u64, u64) {
        let bytes = |entries: usize| (entries * std::mem::size_of::<Entry>()) as u64;
        (
            self.rss_early.saturating_sub(bytes(self.journal_early)),
            self.rss_end.saturating_sub(bytes(self.journal.entries)),
        )
    }
}

/// Resident memory of this process, bytes (Linux; 0 elsewhere).
pub fn resident() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()).map_or(0, |pages| pages * 4096)
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    other: AtomicU64,
    hung_up: AtomicU64,
}

/// Drives `app`, served at `addr`, with `load`; returns once the load has
/// stopped and the engine has settled (at most 30 s after).
pub async fn run(app: &App, addr: SocketAddr, load: &Load) -> Report {
    let rss_start = resident();
    let start = Instant::now();
    let end = start + load.duration;
    let tally = Arc::new(Tally::default());
    let before = app.engine().metrics();
    let clients: Vec<_> = (0..load.clients)
        .map(|i| {
            let (tally, within) = (tally.clone(), load.hang_up_within);
            if i % 2 == 0 {
                tokio::spawn(async move { patient(addr, end, i, &tally).await })
            } else {
                tokio::spawn(async move { impatient(addr, end, i, within, &tally).await })
            }
        })
        .collect();
    let (mut rss_early, mut rss_peak, mut journal_early) = (0, 0, 0);
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let rss = resident();
        rss_peak = rss_peak.max(rss);
        if rss_early == 0 && start.elapsed() >= load.duration / 4 {
            rss_early = rss;
            if let Some(Ok(counts)) = journal_counts(app).await {
                journal_early = counts.entries;
            }
        }
    }
    for client in clients {
        let _ = client.await;
    }
    let engine = app.engine();
    let settled = Instant::now() + Duration::from_secs(30);
    let left = || {
        let m = engine.metrics();
        [m.in_flight, m.waiting_on_vars as u64, m.cancelled_on_vars as u64, m.slots_used as u64]
    };
    while left() != [0; 4] && Instant::now() < settled {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let after = engine.metrics();
    let (journal, journal_error) = match journal_counts(app).await {
        Some(Ok(counts)) => (counts, None),
        Some(Err(err)) => (JournalCounts::default(), Some(format!("{err:#}"))),
        None => (JournalCounts::default(), None),
    };
    Report {
        answered_ok: tally.ok.load(Ordering::SeqCst),
        answered_other: tally.other.load(Ordering::SeqCst),
        hung_up: tally.hung_up.load(Ordering::SeqCst),
        cancelled_ops: after.cancelled - before.cancelled,
        completed_ops: after.completed - before.completed,
        journal,
        journal_error,
        rss_start,
        rss_early,
        rss_peak,
        rss_end: resident(),
        journal_early,
        left: left(),
        pending_explained: !engine.debug_pending().is_empty(),
    }
}

/// The journal's counts, if the service has a journal.
async fn journal_counts(app: &App) -> Option<depengine::Result<JournalCounts>> {
    match app.journal() {
        Some(j) => Some(j.counts().await),
        None => None,
    }
}

fn request(i: usize, n: u64) -> String {
    format!("POST /journal?x={}.{n} HTTP/1.1\r\nhost: load\r\ncontent-length: 0\r\n\r\n", i % 1000)
}

/// One connection, each answer read whole, until `end`.
async fn patient(addr: SocketAddr, end: Instant, i: usize, tally: &Tally) {
    let Ok(stream) = TcpStream::connect(addr).await else { return };
    let mut stream = BufReader::new(stream);
    let mut n = 0;
    while Instant::now() < end {
        n += 1;
        if stream.get_mut().write_all(request(i, n).as_bytes()).await.is_err() {
            return;
        }
        match read_answer(&mut stream).await {
            Some(200) => tally.ok.fetch_add(1, Ordering::SeqCst),
            Some(_) => tally.other.fetch_add(1, Ordering::SeqCst),
            None => return,
        };
    }
}

/// A connection per request, dropped after a random wait, until `end`.
async fn impatient(addr: SocketAddr, end: Instant, i: usize, within: Duration, tally: &Tally) {
    let mut seed = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut n = 0;
    while Instant::now() < end {
        n += 1;
        let Ok(mut stream) = TcpStream::connect(addr).await else { return };
        if stream.write_all(request(i, n).as_bytes()).await.is_err() {
            continue;
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let wait = within.mul_f64((seed % 1000) as f64 / 1000.0);
        tokio::time::sleep(wait).await;
        drop(stream);
        tally.hung_up.fetch_add(1, Ordering::SeqCst);
    }
}

/// The status of the answer on `stream`, its body read and dropped; `None`
/// if the connection ended.
async fn read_answer(stream: &mut BufReader<TcpStream>) -> Option<u16> {
    let mut line = String::new();
    stream.read_line(&mut line).await.ok().filter(|n| *n > 0)?;
    let status = line.split_whitespace().nth(1)?.parse().ok()?;
    let mut length = 0usize;
    loop {
        line.clear();
        stream.read_line(&mut line).await.ok().filter(|n| *n > 0)?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok()?;
        }
    }
    let mut body = vec![0; length];
    stream.read_exact(&mut body).await.ok()?;
    Some(status)
}
