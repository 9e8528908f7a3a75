use super::*;

#[test]
fn counts_past_an_mpi_int_are_refused() {
    assert_eq!(mpi_count(0), Some(0));
    assert_eq!(mpi_count(i32::MAX as usize), Some(i32::MAX));
    assert_eq!(mpi_count(i32::MAX as usize + 1), None);
    let err = CollectiveError::TooLarge { what: "all_reduce grad".into(), len: 1 << 31 };
    assert!(err.to_string().contains("split the buffer"), "{err}");
}
