//! Why a transfer failed.

use std::fmt;

/// Why a transfer failed. The failing op's error has it as its source
/// (`downcast_ref::<TransferError>()` on the chain).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransferError {
    /// The owner's program and this rank's disagree on this transfer: the
    /// ranks did not submit the same program.
    Mismatch {
        /// The transfer as this rank's program has it.
        mine: String,
        /// The rank that sent it…
        rank: usize,
        /// …and what its program said it was.
        theirs: String,
    },
    /// The owner's copy carried an error (an op that wrote it failed
    /// there): the op that reads it here fails with it.
    FailedOnOwner {
        /// The transfer.
        what: String,
        /// The owner.
        rank: usize,
        /// The owner's error, as it printed it.
        message: String,
    },
    /// MPI returned an error code.
    Mpi {
        /// The transfer.
        what: String,
        /// The code.
        code: i32,
    },
    /// The comm thread was gone before the transfer started.
    Closed {
        /// The transfer.
        what: String,
    },
    /// Given up: the ranks' programs were found to differ
    /// ([`Distribution::wait`](super::Distribution::wait)), so it might
    /// never be matched.
    Abandoned {
        /// The transfer.
        what: String,
        /// How the programs differ.
        why: String,
    },
    /// The ranks submitted different programs, found when they compared
    /// them ([`Distribution::wait`](super::Distribution::wait)).
    ProgramsDiffer {
        /// This rank's program: its hash and how many transfers it has.
        mine: String,
        /// The first rank whose program differs…
        rank: usize,
        /// …and its.
        theirs: String,
    },
}

impl fmt::Display for TransferError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Mismatch { mine, rank, theirs } => write!(
                f,
                "the ranks submitted different programs: this rank expected {mine}, rank {rank} sent {theirs}"
            ),
            Self::FailedOnOwner { what, rank, message } => {
                write!(f, "{what} carries an error from its owner, rank {rank}: {message}")
            }
            Self::Mpi { what, code } => write!(f, "{what}: MPI error code {code}"),
            Self::Closed { what } => write!(f, "{what}: the comm thread was gone"),
            Self::Abandoned { what, why } => write!(f, "{what}: given up, as {why}"),
            Self::ProgramsDiffer { mine, rank, theirs } => {
                write!(
                    f,
                    "the ranks submitted different programs: this rank's is {mine}, rank {rank}'s is {theirs}"
                )
            }
        }
    }
}

impl std::error::Error for TransferError {}
