use super::*;

#[test]
fn buckets_are_eighths_of_each_power_of_two_from_256_ns() {
    assert_eq!(bucket_of(0), 0);
    assert_eq!(bucket_of(255), 0);
    assert_eq!(bucket_of(256), 1);
    assert_eq!(bucket_of(287), 1);
    assert_eq!(bucket_of(288), 2);
    assert_eq!(bucket_of(511), 8);
    assert_eq!(bucket_of(512), 9);
    // 1 ms: 2^19 = 524,288 ns and (1e6 - 2^19) / 2^16 = 7.2: the eighth one.
    assert_eq!(bucket_of(1_000_000), 1 + 11 * 8 + 7);
    assert_eq!(bucket_of((1 << 31) - 1), HISTOGRAM_BUCKETS - 2);
    assert_eq!(bucket_of(1 << 31), HISTOGRAM_BUCKETS - 1);
    assert_eq!(bucket_of(u64::MAX), HISTOGRAM_BUCKETS - 1);
    for k in 0..HISTOGRAM_BUCKETS - 1 {
        let upper = Histogram::bucket_upper_bound(k).unwrap().as_nanos() as u64;
        assert_eq!(bucket_of(upper - 1), k);
        assert_eq!(bucket_of(upper), k + 1);
    }
    // A quantile read as its bucket's upper bound is at most 12.5% high.
    for ns in (256..1u64 << 31).step_by(9_999_991).chain([256, 257, 300, 1000, 65_537]) {
        let upper = Histogram::bucket_upper_bound(bucket_of(ns)).unwrap().as_nanos() as u64;
        assert!(upper > ns && (upper - ns) * 8 <= ns, "{ns} ns read as {upper} ns");
    }
}

#[test]
fn quantiles_are_bucket_upper_bounds() {
    let mut counts = [0; HISTOGRAM_BUCKETS];
    counts[bucket_of(700)] = 98; // 640 to 704 ns
    counts[bucket_of(200_000)] = 2; // 196,608 to 212,992 ns
    let h = Histogram::from_counts(counts, Duration::from_micros(600));
    assert_eq!(h.count(), 100);
    assert_eq!(h.p50(), Some(Duration::from_nanos(704)));
    assert_eq!(h.quantile(0.98), Some(Duration::from_nanos(704)));
    assert_eq!(h.p99(), Some(Duration::from_nanos(212_992)));
    assert_eq!(Histogram::default().p50(), None);
    assert_eq!(h.mean(), Some(Duration::from_micros(6)));
    let mut sum = h.clone();
    sum.merge(&h);
    assert_eq!(sum.counts()[bucket_of(700)], 196);
}

/// A histogram's `Debug` is a summary, not its 186 bucket counts: a pool's
/// metrics print in a few lines.
#[test]
fn a_histogram_debugs_as_a_summary() {
    let mut counts = [0; HISTOGRAM_BUCKETS];
    counts[bucket_of(1_000)] = 3;
    counts[bucket_of(1_000_000)] = 1;
    let h = Histogram::from_counts(counts, Duration::from_nanos(1_003_000));
    let text = format!("{h:?}");
    assert!(text.starts_with("Histogram { count: 4, sum: 1.003ms, mean: "), "{text}");
    assert!(text.contains("p50: ") && text.contains("p99: "), "{text}");
    assert!(text.len() < 200, "{} characters: {text}", text.len());
    let empty = format!("{:?}", Histogram::default());
    assert_eq!(empty, "Histogram { count: 0, sum: 0ns, .. }");
}
