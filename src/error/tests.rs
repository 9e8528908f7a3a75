use super::*;

#[test]
fn skipped_error_names_the_root_failure() {
    let root = Error::new(Kind::Failed { op: "a".into(), source: "boom".into() });
    let skipped = Error::new(Kind::Skipped { op: "b".into(), root: root.clone() });
    let skipped2 = Error::new(Kind::Skipped { op: "c".into(), root: skipped.clone() });
    assert!(skipped2.root().same_as(&root));
    assert_eq!(skipped2.to_string(), "op `c` skipped: a var it uses carries an error: op `a` failed: boom");
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
