//! A collective's signature: what each rank says it is starting, sent to
//! every other rank before the data, so that ranks that disagree (another
//! collective, another size, another var, an input that carried an error)
//! all fail it together instead of swapping data or hanging.

use std::fmt;

/// Bytes of an encoded signature.
pub(super) const SIG_BYTES: usize = 64;

/// Bytes of a small collective's data that travel with its signature
/// (an all-reduce of at most this many bytes needs no second MPI call).
pub(super) const INLINE_BYTES: usize = 64;

/// Bytes each rank contributes to a signature exchange: its signature,
/// then a small collective's data (zeros otherwise).
pub(super) const HEAD_BYTES: usize = SIG_BYTES + INLINE_BYTES;

/// Bytes of the var's name kept in a signature.
const TAG_BYTES: usize = 40;

/// What a rank says its collective number `seq` is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Signature {
    pub(super) seq: u64,
    /// `Kind` as a byte.
    pub(super) kind: u8,
    /// The element type's code (`Element::CODE`), 0 for a barrier.
    pub(super) elem: u8,
    /// The reduction's code, 0 where there is none.
    pub(super) op: u8,
    /// Why this rank cannot take part with data
    /// ([`RankFailure::code`](super::RankFailure::code)), 0 if it can.
    pub(super) failure: u8,
    /// The broadcast's root, 0 otherwise.
    pub(super) root: u32,
    /// Elements of this rank's input.
    pub(super) count: u64,
    /// The var's name, cut to 40 bytes; empty for an unnamed var.
    pub(super) tag: String,
}

impl Signature {
    pub(super) fn encode(&self) -> [u8; SIG_BYTES] {
        let mut out = [0u8; SIG_BYTES];
        out[0..8].copy_from_slice(&self.seq.to_le_bytes());
        out[8] = self.kind;
        out[9] = self.elem;
        out[10] = self.op;
        out[11] = self.failure;
        out[12..16].copy_from_slice(&self.root.to_le_bytes());
        out[16..24].copy_from_slice(&self.count.to_le_bytes());
        let tag = cut(&self.tag, TAG_BYTES);
        out[24..24 + tag.len()].copy_from_slice(tag.as_bytes());
        out
    }

    pub(super) fn decode(b: &[u8]) -> Self {
        let word = |r: std::ops::Range<usize>| u64::from_le_bytes(b[r].try_into().expect("8 bytes"));
        let tag = &b[24..24 + TAG_BYTES];
        let end = tag.iter().position(|&c| c == 0).unwrap_or(TAG_BYTES);
        Self {
            seq: word(0..8),
            kind: b[8],
            elem: b[9],
            op: b[10],
            failure: b[11],
            root: u32::from_le_bytes(b[12..16].try_into().expect("4 bytes")),
            count: word(16..24),
            tag: String::from_utf8_lossy(&tag[..end]).into_owned(),
        }
    }

    /// Whether two ranks' signatures name the same collective: everything
    /// but the failure flag, and the tags only where both vars are named.
    pub(super) fn agrees(&self, other: &Self) -> bool {
        let tags = self.tag.is_empty() || other.tag.is_empty() || self.tag == other.tag;
        (self.seq, self.kind, self.elem, self.op, self.root, self.count)
            == (other.seq, other.kind, other.elem, other.op, other.root, other.count)
            && tags
    }
}

/// `s` cut to at most `max` bytes, on a character boundary (a signature's
/// var name, a transfer header's texts).
pub(super) fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Whether the collective every rank agreed on (`sig`) is done by its
/// signature exchange alone: a barrier (the exchange already waits for
/// every rank), or an all-reduce whose data fits beside the signature
/// (each rank then reduces every rank's data itself, in rank order). The
/// same answer on every rank, from the agreed signature.
pub(super) fn done_by_exchange(sig: &Signature) -> bool {
    match sig.kind {
        BARRIER => true,
        ALL_REDUCE => {
            elem_size(sig.elem).is_some_and(|size| sig.count.saturating_mul(size) <= INLINE_BYTES as u64)
        }
        _ => false,
    }
}

/// The element types' sizes in bytes, by code.
fn elem_size(code: u8) -> Option<u64> {
    match code {
        1 | 3 | 5 => Some(4),
        2 | 4 | 6 => Some(8),
        7 => Some(1),
        _ => None,
    }
}

/// The kinds of collective.
pub(super) const ALL_REDUCE: u8 = 1;
pub(super) const BROADCAST: u8 = 2;
pub(super) const ALL_GATHER: u8 = 3;
pub(super) const REDUCE_SCATTER: u8 = 4;
pub(super) const BARRIER: u8 = 5;

/// The element types' names, by code.
fn elem_name(code: u8) -> &'static str {
    match code {
        1 => "f32",
        2 => "f64",
        3 => "i32",
        4 => "i64",
        5 => "u32",
        6 => "u64",
        7 => "u8",
        _ => "?",
    }
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.op {
            1 => "sum",
            2 => "mean",
            3 => "min",
            4 => "max",
            _ => "",
        };
        match self.kind {
            ALL_REDUCE => write!(f, "all_reduce({op})")?,
            BROADCAST => write!(f, "broadcast(root {})", self.root)?,
            ALL_GATHER => write!(f, "all_gather")?,
            REDUCE_SCATTER => write!(f, "reduce_scatter({op})")?,
            BARRIER => return write!(f, "barrier"),
            _ => write!(f, "collective kind {}", self.kind)?,
        }
        write!(f, " of {} {}", self.count, elem_name(self.elem))?;
        if !self.tag.is_empty() {
            write!(f, " on `{}`", self.tag)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
