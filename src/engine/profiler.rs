//! The engine's profiler (SPEC §7): which ops a push records, where the
//! records of completed ops go, and the file a profile from the start of
//! the run is written to (`DEPENGINE_PROFILE`).
//!
//! Off, it costs a push one relaxed load (`mode`); an op it does not
//! record carries nothing more. On, each recorded op allocates its
//! profile and, at completion, hands its record over under one lock.

use std::path::PathBuf;

use super::options::OpOptions;
use crate::profile::{Profile, ProfiledOp};
use crate::sync::atomic::{AtomicU8, Ordering};
use crate::sync::{Mutex, lock};

/// The environment variable that makes every engine of the process
/// profile from its start and write the trace to the path it names.
pub(crate) const ENV_PROFILE: &str = "DEPENGINE_PROFILE";

const OFF: u8 = 0;
/// Every op but those pushed with `profile(false)`.
const ALL: u8 = 1;
/// Only ops pushed with `profile(true)`.
const OPTED_IN: u8 = 2;

pub(super) struct Recorder {
    mode: AtomicU8,
    ops: Mutex<Vec<ProfiledOp>>,
    /// Where the trace goes when the engine shuts down or is dropped.
    autosave: Option<PathBuf>,
}

impl Recorder {
    /// A recorder, recording from the start if `DEPENGINE_PROFILE` names a
    /// file.
    pub(super) fn from_env() -> Self {
        let autosave = std::env::var_os(ENV_PROFILE).filter(|p| !p.is_empty()).map(PathBuf::from);
        let mode = if autosave.is_some() { ALL } else { OFF };
        Self { mode: AtomicU8::new(mode), ops: Mutex::new(Vec::new()), autosave }
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

    pub(super) fn record(&self, op: ProfiledOp) {
        lock(&self.ops).push(op);
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

    /// The ops recorded so far, kept or taken.
    pub(super) fn profile(&self, take: bool) -> Profile {
        let mut ops = lock(&self.ops);
        Profile::new(if take { std::mem::take(&mut *ops) } else { ops.clone() })
    }

    /// Writes what was recorded to the `DEPENGINE_PROFILE` file, if one is
    /// named: at shutdown, and when the engine is dropped.
    pub(super) fn autosave(&self) {
        let Some(path) = &self.autosave else { return };
        let profile = self.profile(false);
        match profile.write_chrome_trace(path) {
            Ok(()) => {
                tracing::info!(target: "depengine", path = %path.display(), ops = profile.ops().len(), "profile written")
            }
            Err(err) => {
                tracing::error!(target: "depengine", path = %path.display(), "profile not written: {err}")
            }
        }
    }
}
