use super::*;

/// Where the kernel offers private expedited barriers, the process
/// registers and uses them; both modes run from any thread.
#[test]
fn barriers_run_in_either_mode() {
    let shipped = Barriers::new();
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        use rustix::thread::{MembarrierQuery, membarrier_query};
        let needed = MembarrierQuery::PRIVATE_EXPEDITED | MembarrierQuery::REGISTER_PRIVATE_EXPEDITED;
        assert_eq!(shipped.is_asymmetric(), membarrier_query().contains(needed));
    }
    for barriers in [shipped, Barriers::symmetric()] {
        let t = std::thread::spawn(move || barriers.light());
        barriers.heavy();
        t.join().unwrap();
    }
}
