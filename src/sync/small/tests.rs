use super::SmallList;

/// An op's inline declarations cost one word beyond their items.
#[test]
fn inline_list_costs_one_word() {
    assert_eq!(std::mem::size_of::<SmallList<[u64; 2], 4>>(), 4 * 16 + 8);
}
