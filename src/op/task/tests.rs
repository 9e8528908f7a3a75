use super::*;

#[test]
fn the_header_is_one_cache_line_and_a_task_ref_one_word() {
    assert_eq!(std::mem::size_of::<Header>(), 64);
    assert_eq!(std::mem::align_of::<Header>(), 64);
    assert_eq!(std::mem::size_of::<Meta>(), 16);
    assert_eq!(std::mem::size_of::<TaskRef>(), 8);
    assert_eq!(std::mem::size_of::<Option<TaskRef>>(), 8);
}
