/// The per-op memory budget (README, performance): the erased header of
/// an op record stays small (its inbox link included: an op queued
/// behind a var's write then takes no room in the var's queue);
/// declarations of up to four vars are inline.
#[test]
fn op_header_stays_small() {
    assert!(std::mem::size_of::<crate::op::Header>() <= 184, "{}", std::mem::size_of::<crate::op::Header>());
    assert!(std::mem::size_of::<crate::op::DepList>() <= 72);
}

/// The record of `workloads memory`'s op (one typed write, a body that
/// captures a `u64`), counts included, fits the 272-byte chunks of the
/// system allocator (what it hands out for 249 to 264 bytes): 8 bytes
/// more and each pending op takes 16 more.
#[test]
fn a_one_var_write_record_fits_its_allocator_chunk() {
    use super::OpCell;
    use crate::BoxError;
    use crate::access::Writing;
    use crate::op::job::SyncJob;

    fn record_size<F>(_: &F) -> usize
    where
        F: FnOnce((), (crate::WriteGuard<u64>,)) -> Result<(), BoxError> + Send + 'static,
    {
        2 * std::mem::size_of::<usize>()
            + std::mem::size_of::<OpCell<SyncJob<(), (Writing<crate::Var<u64>>,), F>>>()
    }
    let i = 7u64;
    let size = record_size(&move |(), (mut w,): (crate::WriteGuard<u64>,)| {
        *w = i;
        Ok(())
    });
    assert!(size <= 264, "{size}");
}
