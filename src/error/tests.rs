use super::*;

#[test]
fn skipped_error_names_the_root_failure() {
    let root = Error::new(Kind::Failed { op: "a".into(), source: "boom".into() });
    let skipped = Error::new(Kind::Skipped { op: "b".into(), root: root.clone() });
    let skipped2 = Error::new(Kind::Skipped { op: "c".into(), root: skipped.clone() });
    assert!(skipped2.root().same_as(&root));
    // Each level says what happened there; the cause comes next in the chain.
    assert_eq!(skipped2.to_string(), "op `c` skipped: a var it uses carries an error");
    assert_eq!(
        format!("{skipped2:#}"),
        "op `c` skipped: a var it uses carries an error: op `a` failed: boom"
    );
    assert_eq!(skipped2.op_name(), Some("c"));
    assert!(skipped2.is_skipped() && root.is_failed());
}

#[test]
fn display_is_lowercase_without_period() {
    let errs = [
        Error::new(Kind::Shutdown),
        Error::new(Kind::NoRuntime),
        Error::new(Kind::VarDeleted { var: "#3".into() }),
        Error::invalid("x"),
    ];
    for e in errs {
        let s = e.to_string();
        assert!(s.starts_with(|c: char| c.is_lowercase()), "{s}");
        assert!(!s.ends_with('.'), "{s}");
    }
}

/// A report walks `source()` as anyhow and eyre do: each cause is printed
/// once, at its own level.
#[test]
fn a_source_chain_prints_each_cause_once() {
    let root = Error::new(Kind::Failed { op: "update".into(), source: "disk full".into() });
    let skipped = Error::new(Kind::Skipped { op: "request".into(), root: root.clone() });
    let mut chain = vec![skipped.to_string()];
    let mut cause = std::error::Error::source(&skipped);
    while let Some(err) = cause {
        chain.push(err.to_string());
        cause = err.source();
    }
    assert_eq!(
        chain,
        ["op `request` skipped: a var it uses carries an error", "op `update` failed", "disk full"]
    );
    for needle in ["disk full", "update"] {
        let times: usize = chain.iter().map(|level| level.matches(needle).count()).sum();
        assert_eq!(times, 1, "{needle:?} printed {times} times along {chain:?}");
    }
}

#[test]
fn a_panic_payload_is_taken_once() {
    let err = Error::panicked("p".into(), Box::new(7u8));
    let other = err.clone();
    assert_eq!(err.kind(), ErrorKind::Panicked);
    let third = err.clone();
    assert_eq!(err.try_into_panic().unwrap().downcast_ref::<u8>(), Some(&7));
    // A clone finds it taken; the message stays.
    let other = other.try_into_panic().unwrap_err();
    assert!(other.is_panic() && other.to_string().contains("panicked"), "{other}");
    assert!(Error::new(Kind::Shutdown).try_into_panic().is_err());
    // `into_panic`, on an error whose payload is gone, panics saying why.
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| third.into_panic())).unwrap_err();
    let message = crate::error::panic_message(&*caught);
    assert!(message.contains("holds no panic payload"), "{message}");
}

#[test]
fn into_panic_gives_the_payload_as_tokio_does() {
    let err = Error::panicked("p".into(), Box::new("boom"));
    assert_eq!(err.into_panic().downcast_ref::<&str>(), Some(&"boom"));
}
