//! Why a collective failed, on this rank and on the others.

use std::fmt;

/// Why a collective failed. The op's error ([`Error::is_failed`]) has it
/// as its source: `err.source()` and `downcast_ref::<CollectiveError>()`.
///
/// [`Error::is_failed`]: crate::Error::is_failed
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CollectiveError {
    /// The ranks disagree on collective number `seq`: this rank's, and the
    /// first rank whose differs.
    Mismatch {
        /// The collective's number in push order.
        seq: u64,
        /// What this rank pushed.
        mine: String,
        /// The first rank that pushed something else…
        rank: usize,
        /// …and what.
        theirs: String,
    },
    /// The collective could not take part with data on these ranks, each
    /// for its reason: every rank fails it.
    FailedOnRanks {
        /// The collective's number in push order.
        seq: u64,
        /// What it was.
        what: String,
        /// The ranks where it failed before it started, and why.
        ranks: Vec<(usize, RankFailure)>,
    },
    /// A buffer of more elements than an MPI count holds (2³¹ − 1): split
    /// it into several vars.
    TooLarge {
        /// What it was.
        what: String,
        /// Its elements.
        len: usize,
    },
    /// A reduce-scatter's input whose length is not a multiple of the
    /// world's size: the ranks cannot share it in equal blocks.
    Uneven {
        /// What it was.
        what: String,
        /// The input's elements.
        len: usize,
        /// The world's size.
        size: usize,
    },
    /// MPI returned an error code.
    Mpi {
        /// What it was.
        what: String,
        /// The code.
        code: i32,
    },
    /// The [`Collectives`](super::Collectives) was dropped before this
    /// collective started.
    Closed {
        /// What it was.
        what: String,
    },
}

/// Why a rank's collective could not take part with data, as that rank
/// told the others in its signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RankFailure {
    /// An op before it failed on a var it uses: its input carried the error.
    InputError,
    /// Its push was refused: the engine was shut down.
    RefusedShutDown,
    /// Its push was refused: the engine held its limit of ops in flight.
    RefusedFull,
    /// Its push was refused: a var it uses was deleted.
    RefusedVarDeleted,
    /// Its push was refused for another reason.
    Refused,
    /// It was pushed but never ran (a cancelling shutdown, or its handle
    /// aborted it).
    NeverRan,
    /// Its input's length is not a multiple of the world's size.
    Uneven,
    /// Its buffer holds more elements than an MPI count.
    TooLarge,
}

impl RankFailure {
    /// The refusal `err` of a collective's push.
    pub(super) fn of_refusal(err: &crate::error::Error) -> Self {
        if err.is_shutdown() {
            Self::RefusedShutDown
        } else if err.is_full() {
            Self::RefusedFull
        } else if err.is_var_deleted() {
            Self::RefusedVarDeleted
        } else {
            Self::Refused
        }
    }

    /// The code a signature carries (0 is no failure).
    pub(super) fn code(self) -> u8 {
        match self {
            Self::InputError => 1,
            Self::RefusedShutDown => 2,
            Self::RefusedFull => 3,
            Self::RefusedVarDeleted => 4,
            Self::Refused => 5,
            Self::NeverRan => 6,
            Self::Uneven => 7,
            Self::TooLarge => 8,
        }
    }

    /// The failure of a signature's code; `None` for 0 (no failure). A
    /// code this build does not know (a newer rank's) reads as `Refused`.
    pub(super) fn of_code(code: u8) -> Option<Self> {
        Some(match code {
            0 => return None,
            1 => Self::InputError,
            2 => Self::RefusedShutDown,
            3 => Self::RefusedFull,
            4 => Self::RefusedVarDeleted,
            6 => Self::NeverRan,
            7 => Self::Uneven,
            8 => Self::TooLarge,
            _ => Self::Refused,
        })
    }

    /// The failure a local check found.
    pub(super) fn of_local(err: &CollectiveError) -> Self {
        match err {
            CollectiveError::Uneven { .. } => Self::Uneven,
            CollectiveError::TooLarge { .. } => Self::TooLarge,
            _ => Self::Refused,
        }
    }
}

impl fmt::Display for RankFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::InputError => "its input carried an error",
            Self::RefusedShutDown => "its push was refused: the engine was shut down",
            Self::RefusedFull => "its push was refused: the engine held its limit of ops in flight",
            Self::RefusedVarDeleted => "its push was refused: its var was deleted",
            Self::Refused => "its push was refused",
            Self::NeverRan => "it was pushed but never ran (cancelled)",
            Self::Uneven => "its input's length is not a multiple of the world's size",
            Self::TooLarge => "its buffer holds more elements than an MPI count",
        })
    }
}

impl fmt::Display for CollectiveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Mismatch { seq, mine, rank, theirs } => write!(
                f,
                "collective #{seq} differs between ranks: this rank pushed {mine}, rank {rank} pushed {theirs} \
                 (every rank must push the same collectives in the same order)"
            ),
            Self::FailedOnRanks { seq, what, ranks } => {
                write!(f, "collective #{seq} ({what}) failed")?;
                for (i, (rank, why)) in ranks.iter().enumerate() {
                    write!(f, "{} rank {rank}: {why}", if i == 0 { " on" } else { ";" })?;
                }
                Ok(())
            }
            Self::TooLarge { what, len } => write!(
                f,
                "{what}: {len} elements are more than an MPI count holds ({}); split the buffer",
                i32::MAX
            ),
            Self::Uneven { what, len, size } => write!(
                f,
                "{what}: an input of {len} elements cannot be cut into {size} equal blocks, one per rank"
            ),
            Self::Mpi { what, code } => write!(f, "{what}: MPI error code {code}"),
            Self::Closed { what } => write!(f, "{what}: the collectives were closed before it started"),
        }
    }
}

impl std::error::Error for CollectiveError {}
