//! A transfer's header: what every rank's program says the transfer is,
//! and whether the owner's copy carries an error; and the transfer's tag.

use std::ffi::c_int;
use std::fmt;

use super::super::comm_thread::TAG_UB;
use super::super::sig::cut;
use crate::error::Error;

/// Bytes of a header on the wire.
pub(super) const HEADER: usize = 256;
const MAGIC: &[u8; 4] = b"DPTX";
const NAME: std::ops::Range<usize> = 52..116;
const MESSAGE: std::ops::Range<usize> = 124..HEADER;

/// What a transfer is, as every rank's program numbers it: the receiver
/// checks the sender's against its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Header {
    /// The distribution's number among the world's.
    pub(super) dist: u32,
    /// The distribution's tag slot (see [`Slots`]).
    pub(super) slot: u32,
    /// Its number among the distribution's transfers.
    pub(super) seq: u64,
    pub(super) var: u32,
    /// The var's version: how many ops had written it.
    pub(super) version: u64,
    pub(super) count: u64,
    /// The element type (a hash of its name and size).
    pub(super) elem: u64,
    /// The program so far: a hash of every op and var, in push order.
    pub(super) program: u64,
    pub(super) name: String,
}

impl Header {
    /// The header on the wire, with the owner's error if its copy carries
    /// one (cut to what fits).
    pub(super) fn encode(&self, failure: Option<&str>) -> Box<[u8; HEADER]> {
        let mut b = Box::new([0u8; HEADER]);
        b[0..4].copy_from_slice(MAGIC);
        b[4..12].copy_from_slice(&self.seq.to_le_bytes());
        b[12..16].copy_from_slice(&self.var.to_le_bytes());
        b[16..24].copy_from_slice(&self.version.to_le_bytes());
        b[24..32].copy_from_slice(&self.count.to_le_bytes());
        b[32..40].copy_from_slice(&self.elem.to_le_bytes());
        b[40..48].copy_from_slice(&self.program.to_le_bytes());
        b[48] = u8::from(failure.is_some());
        b[49] = u8::try_from(self.slot).expect("a slot is below MAX_LIVE");
        b[120..124].copy_from_slice(&self.dist.to_le_bytes());
        let name = cut(&self.name, NAME.len());
        b[50..52].copy_from_slice(&(name.len() as u16).to_le_bytes());
        b[NAME.start..NAME.start + name.len()].copy_from_slice(name.as_bytes());
        if let Some(text) = failure {
            let text = cut(text, MESSAGE.len());
            b[116..118].copy_from_slice(&(text.len() as u16).to_le_bytes());
            b[MESSAGE.start..MESSAGE.start + text.len()].copy_from_slice(text.as_bytes());
        }
        b
    }

    /// The header a sender sent and its error, if it says it has one;
    /// `None` if the bytes are not a header.
    pub(super) fn decode(b: &[u8; HEADER]) -> Option<(Self, Option<String>)> {
        if &b[0..4] != MAGIC {
            return None;
        }
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("eight bytes"));
        let len_at = |at: usize| usize::from(u16::from_le_bytes([b[at], b[at + 1]]));
        let name_len = len_at(50).min(NAME.len());
        let text_len = len_at(116).min(MESSAGE.len());
        let header = Self {
            seq: u64_at(4),
            var: u32::from_le_bytes(b[12..16].try_into().expect("four bytes")),
            version: u64_at(16),
            count: u64_at(24),
            dist: u32::from_le_bytes(b[120..124].try_into().expect("four bytes")),
            slot: u32::from(b[49]),
            elem: u64_at(32),
            program: u64_at(40),
            name: String::from_utf8_lossy(&b[NAME.start..NAME.start + name_len]).into_owned(),
        };
        let failure = (b[48] != 0)
            .then(|| String::from_utf8_lossy(&b[MESSAGE.start..MESSAGE.start + text_len]).into_owned());
        Some((header, failure))
    }
}

impl fmt::Display for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "transfer #{} of distribution #{}, var #{} `{}` at version {} ({} elements of type {:016x}; program hash {:016x})",
            self.seq, self.dist, self.var, self.name, self.version, self.count, self.elem, self.program
        )
    }
}

/// The most distributions of one world alive at once on a rank: their
/// transfers' tags tell them apart.
pub const MAX_LIVE: usize = 128;

/// Bits of a tag that hold the slot.
const SLOT_BITS: u32 = MAX_LIVE.trailing_zeros();

/// The world's distributions: how many were made (each one's number), and
/// the tag slots of those alive. A new one takes the lowest free slot and
/// gives it back when dropped, so that no two alive at once share one.
/// Every rank of one program makes and drops its distributions at the same
/// points, so every rank gives each the same slot.
///
/// A slot given back is safe to reuse: the drop waited for the
/// distribution's transfers on this rank, so every message it sent was
/// sent before any of the next one's, and MPI matches the messages of one
/// tag in the order they were sent. But for one case: ranks whose programs
/// differed may leave messages no rank will ever receive (a send cannot be
/// cancelled), which would be taken by the slot's next distribution. Such a
/// distribution's slot is retired instead: never used again in this world
/// (every rank found the programs different at the same wait, so every rank
/// retires it).
#[derive(Default)]
pub(crate) struct Slots {
    made: u32,
    /// Slots held: by live distributions, and retired ones.
    held: u128,
    retired: u32,
}

impl Slots {
    /// The next distribution's number and slot.
    pub(super) fn open(&mut self) -> Result<(u32, u32), Error> {
        let slot = self.held.trailing_ones();
        if slot as usize >= MAX_LIVE {
            let retired = match self.retired {
                0 => String::new(),
                n => format!(" ({n} of them retired, their ranks' programs having differed)"),
            };
            return Err(Error::invalid(format!(
                "{MAX_LIVE} distributions of this world are alive on this rank{retired}, the most at \
                 once (their transfers' tags tell them apart): drop one before making another"
            )));
        }
        self.held |= 1 << slot;
        let id = self.made;
        self.made = self.made.wrapping_add(1);
        Ok((id, slot))
    }

    /// Frees a dropped distribution's slot, or retires it if its ranks'
    /// programs differed (`diverged`).
    pub(super) fn close(&mut self, slot: u32, diverged: bool) {
        if diverged {
            self.retired += 1;
        } else {
            self.held &= !(1 << slot);
        }
    }
}

/// The tag of transfer `seq` of the distribution in `slot`: the slot in the
/// top bits and the transfer's number below, within MPI's bound on tags
/// (with Open MPI's, 2³¹ − 1: 2²⁴ transfers before the number wraps; a
/// header that does not match the receiver's books fails its op).
pub(super) fn tag(slot: u32, seq: u64) -> c_int {
    // MPI promises tags up to at least 2¹⁵ − 1; the largest `2^k − 1` within
    // the bound leaves `k − SLOT_BITS` bits for the number.
    let ub = u64::try_from(TAG_UB.load(std::sync::atomic::Ordering::Relaxed)).unwrap_or(0).max(32_767);
    let bits = 63 - (ub + 1).leading_zeros();
    let seq_bits = bits - SLOT_BITS;
    let tag = (u64::from(slot) << seq_bits) | (seq & ((1 << seq_bits) - 1));
    c_int::try_from(tag).expect("a tag within MPI's bound")
}

#[cfg(test)]
mod tests;
