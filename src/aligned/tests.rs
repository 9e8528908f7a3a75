#[test]
fn buffers_start_on_a_line_and_hold_their_data() {
    for len in [0, 1, 7, 64, 1000] {
        let v = super::filled(len, 3u8);
        assert!(v.len() == len && v.iter().all(|&x| x == 3));
        assert_eq!(v.as_ptr() as usize % super::ALIGN, 0);
        let w = super::from_slice(&v);
        assert_eq!(&*w, &*v);
        assert_eq!(w.as_ptr() as usize % super::ALIGN, 0);
    }
}
