use super::*;

#[test]
fn a_slot_is_free_again_once_its_distribution_is_dropped() {
    let mut slots = Slots::default();
    let opened: Vec<(u32, u32)> = (0..MAX_LIVE).map(|_| slots.open().unwrap()).collect();
    assert_eq!(opened[5], (5, 5));
    let err = slots.open().unwrap_err();
    assert!(err.is_invalid_argument() && err.to_string().contains("drop one"), "{err}");
    slots.close(5, false);
    slots.close(70, false);
    // The lowest free slot, under the next number.
    assert_eq!(slots.open().unwrap(), (MAX_LIVE as u32, 5));
    assert_eq!(slots.open().unwrap(), (MAX_LIVE as u32 + 1, 70));
    assert!(slots.open().is_err());
}

#[test]
fn live_slots_never_share_a_tag() {
    TAG_UB.store(i32::MAX, std::sync::atomic::Ordering::Relaxed);
    let tags: std::collections::HashSet<c_int> =
        (0..MAX_LIVE as u32).flat_map(|slot| [0, 1, (1 << 24) - 1].map(|seq| tag(slot, seq))).collect();
    assert_eq!(tags.len(), MAX_LIVE * 3);
    assert_eq!(tag(127, (1 << 24) - 1), i32::MAX);
    // The number wraps within its bits, never into the slot's.
    assert_eq!(tag(3, 1 << 24), tag(3, 0));
}

#[test]
fn a_header_carries_its_slot() {
    let header = Header {
        dist: 300,
        slot: 44,
        seq: 7,
        var: 2,
        version: 3,
        count: 4,
        elem: 5,
        program: 6,
        name: "a".into(),
    };
    let wire = header.encode(None, 0);
    let back = Header::decode(&wire).unwrap();
    assert_eq!((&back.header, &back.failure, back.len), (&header, &None, wire.len()));
}

#[test]
fn a_small_transfers_header_fits_an_inline_send() {
    let header = Header {
        dist: 1,
        slot: 0,
        seq: 7,
        var: 2,
        version: 3,
        count: 1,
        elem: 5,
        program: 6,
        name: "A[12][7]".into(),
    };
    // Open MPI's shared memory sends up to 256 bytes inline.
    assert!(header.encode(None, 8).len() + 8 <= 256);
}

#[test]
fn a_failure_rides_in_the_header_cut_to_fit() {
    let header = Header {
        dist: 1,
        slot: 9,
        seq: 7,
        var: 2,
        version: 3,
        count: 1,
        elem: 5,
        program: 6,
        name: "é".repeat(40).into(),
    };
    let why = "disk full ".repeat(40);
    let wire = header.encode(Some(&why), 0);
    assert!(wire.len() <= HEADER_MAX);
    let back = Header::decode(&wire).unwrap();
    assert!(header.name.starts_with(&*back.header.name) && back.header.name.len() <= NAME_MAX);
    assert!(why.starts_with(back.failure.as_deref().unwrap()));
    assert_eq!(back.len, wire.len());
    assert!(Header::decode(&wire[..wire.len() - 1]).is_none(), "a header cut short is not one");
}

#[test]
fn a_slot_whose_programs_differed_is_never_used_again() {
    let mut slots = Slots::default();
    let (_, first) = slots.open().unwrap();
    slots.close(first, true);
    let (_, second) = slots.open().unwrap();
    assert_ne!(second, first);
    for _ in 2..MAX_LIVE {
        slots.open().unwrap();
    }
    let err = slots.open().unwrap_err();
    assert!(err.to_string().contains("1 of them retired"), "{err}");
}
