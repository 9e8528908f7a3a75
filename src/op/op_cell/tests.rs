/// The per-op memory budget (README, performance): the erased header of
/// an op record stays small (its inbox link included: an op queued
/// behind a var's write then takes no room in the var's queue);
/// declarations of up to four vars are inline.
#[test]
fn op_header_stays_small() {
    assert!(std::mem::size_of::<crate::op::Header>() <= 136, "{}", std::mem::size_of::<crate::op::Header>());
    assert!(std::mem::size_of::<crate::op::DepList>() <= 40);
}

/// The record of `workloads memory`'s op (one typed write, a body that
/// captures a `u64`) fits a 192-byte slab slot (three cache lines): 8 bytes
/// more and each pending op takes a fourth line.
#[test]
fn a_one_var_write_record_fits_three_lines() {
    use super::OpCell;
    use crate::BoxError;
    use crate::access::Writing;
    use crate::op::job::SyncJob;
    use crate::sync::slab::SizeClass;

    fn record_layout<F>(_: &F) -> std::alloc::Layout
    where
        F: FnOnce((), (crate::WriteGuard<u64>,)) -> Result<(), BoxError> + Send + 'static,
    {
        std::alloc::Layout::new::<OpCell<SyncJob<(), (Writing<crate::Var<u64>>,), F>>>()
    }
    let i = 7u64;
    let layout = record_layout(&move |(), (mut w,): (crate::WriteGuard<u64>,)| {
        *w = i;
        Ok(())
    });
    let slot = SizeClass::of(layout).slot_size();
    assert!(slot.is_some_and(|s| s <= 192), "{layout:?}: a slot of {slot:?}");
}
