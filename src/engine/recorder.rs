//! The engine's profiler (docs/semantics.md §7): which ops a push records, where the
//! records of completed ops go, and the file a profile from the start of
//! the run is written to (`DEPENGINE_PROFILE`).
//!
//! Off, it costs a push one relaxed load (`mode`); an op it does not
//! record carries nothing more. On, each recorded op allocates its
//! profile and, at completion, hands a compact record over under one lock
//! (`profile/op_record.rs`: shared names, vars inline); the records become
//! the profile's ops only when a profile is taken.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::options::OpOptions;
use crate::profile::{OpRecord, Profile};
use crate::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use crate::sync::{Mutex, lock};

/// The environment variable that makes every engine of the process
/// profile from its start and write the trace to the path it names (each
/// engine after the first to a path of its own, see [`Recorder::autosave`]).
pub(crate) const ENV_PROFILE: &str = "DEPENGINE_PROFILE";
/// The environment variable that sets how many ops a profile keeps (read
/// with the engine's other settings, `engine_builder.rs`).
pub(crate) const ENV_PROFILE_KEEP: &str = "DEPENGINE_PROFILE_KEEP";

/// How many completed ops a profiler keeps by default: the last ones, so
/// that a profiler left on in a long-running service holds a bounded
/// amount of memory (some 60 MB at this count).
pub(crate) const DEFAULT_KEEP: usize = 100_000;

/// Ops are kept in chunks of this many: a snapshot shares the full chunks
/// instead of copying them under the lock that completions take.
const CHUNK: usize = 1024;

const OFF: u8 = 0;
/// Every op but those pushed with `profile(false)`.
const ALL: u8 = 1;
/// Only ops pushed with `profile(true)`.
const OPTED_IN: u8 = 2;

/// Engines of the process that write a trace to `DEPENGINE_PROFILE`, so
/// far: the first writes to the path as given, later ones to their own.
// std's atomic even under loom: a static cannot hold loom's.
static AUTOSAVING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// This process's rank in an MPI world, plus one (0: none), once MPI is
/// initialised: every rank then writes the trace to a file of its own.
static RANK: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Names the traces written from now on (`DEPENGINE_PROFILE`) after
/// `rank`: `trace.json` becomes `trace.rank1.json` on rank 1, so that the
/// ranks of one `mpirun`, which share the path, do not replace each
/// other's. Called when MPI is initialised.
#[cfg(feature = "mpi")]
pub(crate) fn name_profiles_by_rank(rank: usize) {
    RANK.store(rank + 1, std::sync::atomic::Ordering::Relaxed);
}

pub(super) struct Recorder {
    mode: AtomicU8,
    ring: Mutex<Ring>,
    /// Where the trace goes when the engine shuts down or is dropped.
    autosave: Option<PathBuf>,
    /// Whether it went there already.
    saved: AtomicBool,
}

/// The ops recorded since the last take: the last `keep` of them, in
/// chunks. Full chunks are shared with snapshots; the open one is sealed
/// when a snapshot is taken.
struct Ring {
    sealed: VecDeque<Arc<[OpRecord]>>,
    open: Vec<OpRecord>,
    /// Ops in `sealed` and `open`.
    held: usize,
    /// Ops recorded and let go since the last take.
    dropped: u64,
    keep: usize,
}

impl Ring {
    fn new(keep: usize) -> Self {
        Self { sealed: VecDeque::new(), open: Vec::new(), held: 0, dropped: 0, keep }
    }

    fn push(&mut self, op: OpRecord) {
        if self.open.capacity() == 0 {
            self.open.reserve_exact(CHUNK.min(self.keep));
        }
        self.open.push(op);
        self.held += 1;
        if self.open.len() >= CHUNK.min(self.keep) {
            self.seal();
        }
    }

    /// Moves the open chunk to the sealed ones, and lets go of the oldest
    /// chunks that hold only ops past the last `keep`.
    fn seal(&mut self) {
        if !self.open.is_empty() {
            let open = std::mem::take(&mut self.open);
            self.sealed.push_back(open.into());
        }
        while let Some(front) = self.sealed.front().filter(|f| self.held - f.len() >= self.keep) {
            let n = front.len();
            self.sealed.pop_front();
            self.held -= n;
            self.dropped += n as u64;
        }
    }

    /// What a snapshot needs: the chunks, and how many of the oldest ops in
    /// them are past the last `keep`.
    fn view(&mut self) -> (Vec<Arc<[OpRecord]>>, usize, u64) {
        self.seal();
        let excess = self.held.saturating_sub(self.keep);
        (self.sealed.iter().cloned().collect(), excess, self.dropped + excess as u64)
    }
}

impl Recorder {
    /// A recorder keeping the last `keep` ops, recording from the start if
    /// `autosave` names a file (`DEPENGINE_PROFILE`), to be saved there at
    /// shutdown.
    pub(super) fn new(keep: usize, autosave: Option<PathBuf>) -> Self {
        let mode = if autosave.is_some() { ALL } else { OFF };
        Self {
            mode: AtomicU8::new(mode),
            ring: Mutex::new(Ring::new(keep)),
            autosave,
            saved: AtomicBool::new(false),
        }
    }

    /// Whether a push with `opts` is recorded: one relaxed load while off.
    #[inline(always)]
    pub(super) fn wants(&self, opts: &OpOptions) -> bool {
        let mode = self.mode.load(Ordering::Relaxed);
        mode != OFF && Self::chooses(mode, opts)
    }

    #[cold]
    fn chooses(mode: u8, opts: &OpOptions) -> bool {
        match mode {
            ALL => !opts.has(OpOptions::NO_PROFILE),
            _ => opts.has(OpOptions::PROFILE),
        }
    }

    pub(super) fn record(&self, op: OpRecord) {
        lock(&self.ring).push(op);
    }

    pub(super) fn start(&self, opted_in_only: bool) {
        self.mode.store(if opted_in_only { OPTED_IN } else { ALL }, Ordering::Relaxed);
    }

    pub(super) fn stop(&self) {
        self.mode.store(OFF, Ordering::Relaxed);
    }

    pub(super) fn is_on(&self) -> bool {
        self.mode.load(Ordering::Relaxed) != OFF
    }

    /// Keeps the last `n` ops from now on (at least one).
    pub(super) fn keep_last(&self, n: usize) {
        let mut ring = lock(&self.ring);
        ring.keep = n.max(1);
        ring.seal();
    }

    /// How many ops it keeps.
    pub(super) fn keeps(&self) -> usize {
        lock(&self.ring).keep
    }

    /// The ops recorded so far, kept or taken. Only chunk references are
    /// copied under the lock that completions take; the ops are copied
    /// after.
    pub(super) fn profile(&self, take: bool) -> Profile {
        let (chunks, excess, dropped) = {
            let mut ring = lock(&self.ring);
            let view = ring.view();
            if take {
                let keep = ring.keep;
                *ring = Ring::new(keep);
            }
            view
        };
        Profile::of_records(chunks.iter().flat_map(|c| c.iter()).skip(excess), dropped)
    }

    /// Writes what was recorded to the `DEPENGINE_PROFILE` file, if one is
    /// named, once: at shutdown, or when the engine is dropped and drained.
    /// The first engine of the process writes to the path as given; each
    /// later one to the path with its number before the extension
    /// (`trace.json`, `trace.2.json`, …), so that no engine's trace
    /// replaces another's. The file is written whole or not at all (to a
    /// temporary file beside it, then renamed).
    pub(super) fn autosave(&self) {
        let Some(given) = &self.autosave else { return };
        if self.saved.swap(true, Ordering::AcqRel) {
            return;
        }
        let given = match RANK.load(Ordering::Relaxed) {
            0 => given.clone(),
            rank => tagged(given, &format!("rank{}", rank - 1)),
        };
        let path = numbered(&given, AUTOSAVING.fetch_add(1, Ordering::Relaxed) + 1);
        let profile = self.profile(false);
        let ops = profile.ops().len();
        match write_atomically(&path, profile.chrome_trace().as_bytes()) {
            Ok(()) if profile.dropped() > 0 => tracing::warn!(
                target: "depengine",
                path = %path.display(),
                ops,
                dropped = profile.dropped(),
                "profile written with the last {ops} ops only (set {ENV_PROFILE_KEEP} to keep more)"
            ),
            Ok(()) => tracing::info!(target: "depengine", path = %path.display(), ops, "profile written"),
            Err(err) => {
                tracing::error!(target: "depengine", path = %path.display(), "profile not written: {err}")
            }
        }
    }
}

/// `path` for the `n`th engine: as given for the first, else with `.n`
/// before its extension.
fn numbered(path: &Path, n: usize) -> PathBuf {
    if n <= 1 {
        return path.to_owned();
    }
    tagged(path, &n.to_string())
}

/// `path` with `.tag` before its extension.
fn tagged(path: &Path, tag: &str) -> PathBuf {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let name = match path.extension() {
        Some(ext) => format!("{stem}.{tag}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{tag}"),
    };
    path.with_file_name(name)
}

/// Writes `bytes` to a temporary file beside `path`, then renames it to
/// `path`: a reader never sees a part of it.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(all(test, not(depengine_loom)))]
mod tests;
