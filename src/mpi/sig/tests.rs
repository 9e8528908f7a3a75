use super::*;

fn sig() -> Signature {
    Signature {
        seq: 7,
        kind: ALL_REDUCE,
        elem: 1,
        op: 1,
        failure: 0,
        root: 0,
        count: 1024,
        tag: "grad.0".into(),
    }
}

#[test]
fn a_signature_survives_its_encoding() {
    let mut s = sig();
    assert_eq!(Signature::decode(&s.encode()), s);
    s.failure = 4;
    s.tag = "é".repeat(30); // 60 bytes: cut on a character boundary
    let back = Signature::decode(&s.encode());
    assert_eq!(back.tag, "é".repeat(20));
    assert_eq!(back.failure, 4);
}

#[test]
fn signatures_agree_on_everything_but_failure_and_missing_names() {
    let a = sig();
    let mut b = sig();
    b.failure = 1;
    assert!(a.agrees(&b));
    b.tag.clear();
    assert!(a.agrees(&b), "an unnamed var is not compared");
    for change in [
        |s: &mut Signature| s.count = 10,
        |s: &mut Signature| s.kind = BROADCAST,
        |s: &mut Signature| s.tag = "grad.1".into(),
        |s: &mut Signature| s.seq = 8,
        |s: &mut Signature| s.elem = 2,
    ] {
        let mut c = sig();
        change(&mut c);
        assert!(!a.agrees(&c), "{c} agreed with {a}");
    }
    assert_eq!(a.to_string(), "all_reduce(sum) of 1024 f32 on `grad.0`");
}

#[test]
fn only_barriers_and_small_all_reduces_are_done_by_the_exchange() {
    let mut s = sig();
    s.count = 16; // 16 f32: 64 bytes
    assert!(done_by_exchange(&s));
    s.count = 17;
    assert!(!done_by_exchange(&s));
    s.elem = 2; // f64
    s.count = 8;
    assert!(done_by_exchange(&s));
    s.count = 9;
    assert!(!done_by_exchange(&s));
    s.kind = BROADCAST;
    s.count = 1;
    assert!(!done_by_exchange(&s));
    s.kind = BARRIER;
    s.count = 0;
    assert!(done_by_exchange(&s));
    s.kind = ALL_REDUCE;
    s.elem = 99; // unknown type: never
    assert!(!done_by_exchange(&s));
}
