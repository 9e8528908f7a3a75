//! Failures a service can live with: an op that does not poison the vars
//! it writes, a shutdown that does not report failures already seen, and
//! the count of successful writes beside a var's version.

use depengine::{Engine, ShutdownMode};

fn engines() -> [Engine; 2] {
    [Engine::new(), Engine::builder().kind(depengine::EngineKind::Naive).build().unwrap()]
}

#[test]
fn an_op_that_does_not_poison_fails_alone() {
    for engine in engines() {
        let model = engine.var(vec![1.0f32, 2.0]);
        // A bad update: rejected before it wrote, and says so.
        let bad =
            engine.op("update").write(&model).poison(false).run(|(), (_m,)| -> depengine::Result<(), _> {
                Err("the new weights do not validate".into())
            });
        let err = bad.blocking_wait().unwrap_err();
        assert!(err.is_failed(), "{err}");
        // Later requests are served from the weights as they are.
        let sum = engine.op("request").read(&model).run(|(m,), ()| Ok(m.iter().sum::<f32>()));
        assert_eq!(sum.blocking_wait().unwrap(), 3.0);
        assert!(engine.blocking_wait_for_var(&model).is_ok(), "the var carries no error");
        // The failure is still reported once, to whoever waits for all.
        let err = engine.blocking_wait_for_all().unwrap_err();
        assert!(err.is_failed(), "{err}");
        // A panic while the write guard is held breaks the promise: the
        // guard, dropped in the unwinding, poisons its var all the same.
        let boom = engine
            .op("update")
            .write(&model)
            .poison(false)
            .run(|(), (_m,)| -> depengine::Result<(), _> { panic!("a bug in the update") });
        assert!(boom.blocking_wait().unwrap_err().is_panic());
        let skipped = engine.op("request").read(&model).run(|(m,), ()| Ok(m.len())).blocking_wait();
        assert!(skipped.unwrap_err().is_skipped());
        // The recovery recipe: take the error with `wait_for_var`, then the
        // var is usable again (repair it in an op first if need be).
        assert!(engine.blocking_wait_for_var(&model).unwrap_err().is_panic());
        assert!(engine.op("request").read(&model).run(|(m,), ()| Ok(m.len())).blocking_wait().is_ok());
        let _ = engine.blocking_wait_for_all();
        // By default the failure poisons, as MXNet's does.
        let poisoning = engine
            .op("update")
            .write(&model)
            .run(|(), (_m,)| -> depengine::Result<(), _> { Err("boom".into()) });
        assert!(poisoning.blocking_wait().is_err());
        let skipped = engine.op("request").read(&model).run(|(m,), ()| Ok(m.len())).blocking_wait();
        assert!(skipped.unwrap_err().is_skipped());
    }
}
