use super::Tally;

#[test]
fn adds_from_many_threads_all_count() {
    let tally = Tally::default();
    std::thread::scope(|s| {
        for _ in 0..24 {
            s.spawn(|| (0..1000).for_each(|_| tally.add_one()));
        }
    });
    assert_eq!(tally.get(), 24_000);
}
