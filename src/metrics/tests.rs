use super::*;

#[test]
fn buckets_double_from_256_ns() {
    assert_eq!(bucket_of(0), 0);
    assert_eq!(bucket_of(255), 0);
    assert_eq!(bucket_of(256), 1);
    assert_eq!(bucket_of(511), 1);
    assert_eq!(bucket_of(512), 2);
    assert_eq!(bucket_of(1_000_000), 12);
    assert_eq!(bucket_of(u64::MAX), HISTOGRAM_BUCKETS - 1);
    for k in 0..HISTOGRAM_BUCKETS - 1 {
        let upper = Histogram::bucket_upper_bound(k).unwrap().as_nanos() as u64;
        assert_eq!(bucket_of(upper - 1), k);
        assert_eq!(bucket_of(upper), k + 1);
    }
}

#[test]
fn quantiles_are_bucket_upper_bounds() {
    let mut counts = [0; HISTOGRAM_BUCKETS];
    counts[2] = 98; // 512 ns to 1 µs
    counts[10] = 2; // 131 to 262 µs
    let h = Histogram::from_counts(counts, Duration::from_micros(600));
    assert_eq!(h.count(), 100);
    assert_eq!(h.p50(), Some(Duration::from_nanos(1024)));
    assert_eq!(h.quantile(0.98), Some(Duration::from_nanos(1024)));
    assert_eq!(h.p99(), Some(Duration::from_nanos(1 << 18)));
    assert_eq!(Histogram::default().p50(), None);
    assert_eq!(h.mean(), Some(Duration::from_micros(6)));
    let mut sum = h.clone();
    sum.merge(&h);
    assert_eq!(sum.counts()[2], 196);
}
