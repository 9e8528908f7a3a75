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
