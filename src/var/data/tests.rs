use super::DataCell;

#[test]
fn readers_share_writers_exclude() {
    let c = DataCell::new(5u32);
    assert!(c.try_read() && c.try_read());
    assert!(!c.try_write(), "no write while reads are registered");
    c.end_read();
    assert!(!c.try_write());
    c.end_read();
    assert!(c.try_write());
    assert!(!c.try_read() && !c.try_write(), "the write excludes everything");
    c.end_write();
    assert!(c.try_read());
    c.end_read();
}
