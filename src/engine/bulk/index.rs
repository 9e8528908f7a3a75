//! Where each var is in a list of a segment's vars that only grows: a
//! linear search while the list is short (most segments have a few vars,
//! where hashing costs more than looking), a hash map beyond, so that
//! merging ops of thousands of vars stays linear in their vars.

use std::collections::HashMap;

/// Up to this many entries, a look is a linear search.
const LINEAR: usize = 16;

/// The positions of the vars of one list (each var once), by var id.
#[derive(Default)]
pub(super) struct VarIndex {
    /// The first `map.len()` entries of the list, by id.
    map: HashMap<u64, usize>,
}

impl VarIndex {
    /// The position of var `id` in a list of `len` entries whose entry `k`
    /// is var `id_at(k)`: the list may have grown since the last look, but
    /// the entries already there have not moved.
    pub(super) fn position(&mut self, len: usize, id_at: impl Fn(usize) -> u64, id: u64) -> Option<usize> {
        if len <= LINEAR {
            return (0..len).find(|&k| id_at(k) == id);
        }
        for k in self.map.len()..len {
            self.map.insert(id_at(k), k);
        }
        self.map.get(&id).copied()
    }

    /// The list was emptied.
    pub(super) fn clear(&mut self) {
        self.map.clear();
    }
}

#[cfg(test)]
mod tests;
