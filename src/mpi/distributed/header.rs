//! A transfer's header: what every rank's program says the transfer is,
//! and whether the owner's copy carries an error; and the transfer's tag.

use std::ffi::c_int;
use std::fmt;
use std::sync::Arc;

use super::super::comm_thread::TAG_UB;
use super::super::sig::cut;
use crate::error::Error;

/// Bytes of a header's fixed part on the wire; the var's name and the
/// owner's error, if any, follow it, then (in one message, for a small
/// transfer) the elements.
const FIXED: usize = 64;
/// The most bytes of a var's name a header carries.
const NAME_MAX: usize = 48;
/// The most bytes of the owner's error a header carries.
const MESSAGE_MAX: usize = 192;
/// The most bytes a header takes on the wire: what a receiver posts for
/// it. A small transfer's header and elements fit MPI's shortest sends
/// (Open MPI's shared memory sends up to 256 bytes inline, completing the
/// send at once; a fixed header of 256 bytes once made every transfer
/// wait for its receiver to hand a buffer back).
pub(super) const HEADER_MAX: usize = FIXED + NAME_MAX + MESSAGE_MAX;
const MAGIC: &[u8; 4] = b"DPTX";

/// The most bytes of elements a transfer moves through copies (the
/// sender's, and the receiver's posted ahead: `send.rs`, `staged.rs`);
/// larger ones go from the var's memory to the copy's (`transfer.rs`).
pub(super) const STAGED_MAX: usize = 64 * 1024;

/// Whether a transfer of `bytes` of elements is one message, the header
/// then the elements (at most [`STAGED_MAX`]), or two, the header and then
/// the elements. Both ranks choose alike, from the var's length in their
/// books.
pub(super) fn one_message(bytes: usize) -> bool {
    bytes <= STAGED_MAX
}

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
    pub(super) name: Arc<str>,
}

/// A header read off the wire.
#[derive(Debug)]
pub(super) struct Decoded {
    pub(super) header: Header,
    /// The owner's error, if it says it has one.
    pub(super) failure: Option<String>,
    /// Where the elements start, in a message that carries them.
    pub(super) len: usize,
}

impl Header {
    /// The header on the wire, with the owner's error if its copy carries
    /// one (cut to what fits), and room for `then` more bytes after it.
    pub(super) fn encode(&self, failure: Option<&str>, then: usize) -> Vec<u8> {
        let name = cut(&self.name, NAME_MAX);
        let text = failure.map(|text| cut(text, MESSAGE_MAX));
        let mut b = Vec::with_capacity(FIXED + name.len() + text.map_or(0, str::len) + then);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&self.seq.to_le_bytes());
        b.extend_from_slice(&self.var.to_le_bytes());
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&self.count.to_le_bytes());
        b.extend_from_slice(&self.elem.to_le_bytes());
        b.extend_from_slice(&self.program.to_le_bytes());
        b.extend_from_slice(&self.dist.to_le_bytes());
        b.push(u8::try_from(self.slot).expect("a slot is below MAX_LIVE"));
        b.push(u8::from(failure.is_some()));
        b.push(name.len() as u8);
        b.extend_from_slice(&(text.map_or(0, str::len) as u16).to_le_bytes());
        b.resize(FIXED, 0);
        b.extend_from_slice(name.as_bytes());
        b.extend_from_slice(text.unwrap_or("").as_bytes());
        b
    }

    /// The header at the start of `b`; `None` if it is not one.
    pub(super) fn decode(b: &[u8]) -> Option<Decoded> {
        if b.len() < FIXED || &b[0..4] != MAGIC {
            return None;
        }
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("eight bytes"));
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("four bytes"));
        let name_len = usize::from(b[54]).min(NAME_MAX);
        let text_len = usize::from(u16::from_le_bytes([b[55], b[56]])).min(MESSAGE_MAX);
        let len = FIXED + name_len + text_len;
        if b.len() < len {
            return None;
        }
        let text = |r: std::ops::Range<usize>| String::from_utf8_lossy(&b[r]).into_owned();
        let header = Self {
            seq: u64_at(4),
            var: u32_at(12),
            version: u64_at(16),
            count: u64_at(24),
            elem: u64_at(32),
            program: u64_at(40),
            dist: u32_at(48),
            slot: u32::from(b[52]),
            name: text(FIXED..FIXED + name_len).into(),
        };
        let failure = (b[53] != 0).then(|| text(FIXED + name_len..len));
        Some(Decoded { header, failure, len })
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
