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
mod tests {
    use super::*;

    /// The index finds what a linear search finds, below and past the
    /// linear bound, as the list grows between looks.
    #[test]
    fn finds_what_a_linear_search_finds() {
        let mut list: Vec<u64> = Vec::new();
        let mut index = VarIndex::default();
        for round in 0..200u64 {
            let id = round * 7 % 101 + 1000 * (round % 3);
            match index.position(list.len(), |k| list[k], id) {
                Some(k) => assert_eq!(list[k], id),
                None => {
                    assert!(!list.contains(&id), "missed var {id} at length {}", list.len());
                    list.push(id);
                }
            }
        }
        assert!(list.len() > LINEAR);
        index.clear();
        list.clear();
        assert_eq!(index.position(0, |k| list[k], 3), None);
    }
}
