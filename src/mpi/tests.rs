use super::*;

#[test]
fn counts_past_an_mpi_int_are_refused() {
    assert_eq!(mpi_count(0), Some(0));
    assert_eq!(mpi_count(i32::MAX as usize), Some(i32::MAX));
    assert_eq!(mpi_count(i32::MAX as usize + 1), None);
    let err = CollectiveError::TooLarge { what: "all_reduce grad".into(), len: 1 << 31 };
    assert!(err.to_string().contains("split the buffer"), "{err}");
}

#[test]
fn a_rank_failure_survives_its_code_and_says_what_happened() {
    for why in [
        RankFailure::InputError,
        RankFailure::RefusedShutDown,
        RankFailure::RefusedFull,
        RankFailure::RefusedVarDeleted,
        RankFailure::Refused,
        RankFailure::NeverRan,
        RankFailure::Uneven,
        RankFailure::TooLarge,
    ] {
        assert_ne!(why.code(), 0, "{why}");
        assert_eq!(RankFailure::of_code(why.code()), Some(why));
    }
    assert_eq!(RankFailure::of_code(0), None);
    let err = CollectiveError::FailedOnRanks {
        seq: 3,
        what: "all_reduce(sum) of 4 f32".into(),
        ranks: vec![(1, RankFailure::RefusedFull), (3, RankFailure::InputError)],
    };
    assert_eq!(
        err.to_string(),
        "collective #3 (all_reduce(sum) of 4 f32) failed on rank 1: its push was refused: the engine \
         held its limit of ops in flight; rank 3: its input carried an error"
    );
}
