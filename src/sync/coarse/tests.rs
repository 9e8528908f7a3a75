use super::*;

#[test]
fn the_clock_advances_while_kept() {
    let keeper = Keeper::new();
    let then = now_ms();
    assert!(then > 0);
    std::thread::sleep(PERIOD * 3);
    let waited = since(then).expect("kept");
    assert!(waited >= PERIOD * 2, "{waited:?}");
    let stamp = now_ms() as u32;
    std::thread::sleep(PERIOD * 2);
    let age = since_u32(stamp).expect("kept");
    assert!(age >= PERIOD * 2 && age < Duration::from_secs(60), "{age:?}");
    assert_eq!(since_u32(0), None);
    drop(keeper);
}
