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

#[test]
fn a_shutdown_reports_only_failures_nobody_was_handed() {
    let fail = |engine: &Engine, v: &depengine::Var<u32>| {
        engine.op("fail").write(v).run(|(), (_v,)| -> depengine::Result<(), _> { Err("boom".into()) })
    };
    for engine in engines() {
        // Seen through the op's handle.
        let v = engine.var(0u32);
        assert!(fail(&engine, &v).blocking_wait().is_err());
        assert!(engine.blocking_shutdown(ShutdownMode::Drain).is_ok());
    }
    for engine in engines() {
        // Seen through wait_for_var.
        let v = engine.var(0u32);
        drop(fail(&engine, &v));
        assert!(engine.blocking_wait_for_var(&v).unwrap_err().is_failed());
        assert!(engine.blocking_shutdown(ShutdownMode::Drain).is_ok());
    }
    for engine in engines() {
        // Nobody was told: the shutdown reports it.
        let v = engine.var(0u32);
        engine.op("fail").write(&v).run_detached(|(), (_v,)| Err("unseen".into())).unwrap();
        let err = engine.blocking_shutdown(ShutdownMode::Drain).unwrap_err();
        assert!(err.is_failed() && err.to_string().contains("unseen"), "{err}");
    }
    for engine in engines() {
        // A seen failure first, an unseen one after: the unseen one.
        let (v, w) = (engine.var(0u32), engine.var(0u32));
        assert!(fail(&engine, &v).blocking_wait().is_err());
        engine.op("later").write(&w).run_detached(|(), (_w,)| Err("later".into())).unwrap();
        let err = engine.blocking_shutdown(ShutdownMode::Drain).unwrap_err();
        assert!(err.to_string().contains("later"), "{err}");
    }
    // wait_for_all still reports the first failure since the last one,
    // seen or not.
    let engine = Engine::new();
    let v = engine.var(0u32);
    assert!(fail(&engine, &v).blocking_wait().is_err());
    assert!(engine.blocking_wait_for_all().is_err());
}
