//! Failures a service can live with: an op that does not poison the vars
//! it writes, a shutdown that does not report failures already seen, and
//! the count of successful writes beside a var's version.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use depengine::{Engine, ShutdownMode};

fn engines() -> [Engine; 2] {
    [
        Engine::from_env(),
        depengine::EngineBuilder::from_env().kind(depengine::engine::EngineKind::Naive).build().unwrap(),
    ]
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
        let err = engine.wait_for_all().blocking_wait().unwrap_err();
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
        let _ = engine.wait_for_all().blocking_wait();
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
        assert!(err.is_failed() && format!("{err:#}").contains("unseen"), "{err:#}");
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
    let engine = Engine::from_env();
    let v = engine.var(0u32);
    assert!(fail(&engine, &v).blocking_wait().is_err());
    assert!(engine.wait_for_all().blocking_wait().is_err());
}

/// A repair op writes every shard of a model that a failed update left
/// half written and poisoned, and clears their errors in the same op:
/// reads pushed from other threads meanwhile are either skipped (pushed
/// before the repair) or see the repaired model whole (pushed after it),
/// never the half-written one.
#[test]
fn a_repair_clears_the_errors_in_push_order_under_concurrent_reads() {
    for engine in engines() {
        let shards: Vec<_> = (0..4).map(|_| engine.var(vec![0u32; 64])).collect();
        let bad =
            engine.op("update").write_all(&shards).run(|(), (mut shards,)| -> depengine::Result<(), _> {
                for (i, shard) in shards.iter_mut().enumerate() {
                    shard.fill(1);
                    if i == 1 {
                        return Err("the update failed half way".into());
                    }
                }
                Ok(())
            });
        assert!(bad.blocking_wait().unwrap_err().is_failed());
        let stop = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (engine, shards, stop) = (engine.clone(), shards.clone(), stop.clone());
                std::thread::spawn(move || {
                    let (mut skipped, mut served) = (0, 0);
                    while !stop.load(Ordering::Relaxed) || served == 0 {
                        let read = engine.op("request").read_all(&shards).run(|(shards,), ()| {
                            Ok(shards.iter().flat_map(|s| s.iter().copied()).collect::<Vec<u32>>())
                        });
                        match read.blocking_wait() {
                            Ok(values) => {
                                assert!(values.iter().all(|&v| v == 2), "a read saw the model half repaired");
                                served += 1;
                            }
                            Err(err) => {
                                assert!(err.is_skipped(), "{err}");
                                assert_eq!(served, 0, "a read pushed after the repair was skipped");
                                skipped += 1;
                            }
                        }
                    }
                    (skipped, served)
                })
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let repair = engine.op("repair").write_all(&shards).repair(true).run(|(), (mut shards,)| {
            shards.iter_mut().for_each(|s| s.fill(2));
            Ok(())
        });
        repair.blocking_wait().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        stop.store(true, Ordering::Relaxed);
        for reader in readers {
            let (_skipped, served) = reader.join().unwrap();
            assert!(served > 0);
        }
        for shard in &shards {
            assert!(shard.any().debug_state().error.is_none());
        }
        // The update's failure was reported once; the repair adds none.
        assert!(engine.wait_for_all().blocking_wait().unwrap_err().is_failed());
        assert!(engine.wait_for_all().blocking_wait().is_ok());
    }
}

/// A repair that fails leaves its own failure on the vars it writes; a
/// var it only reads keeps its error.
#[test]
fn a_failed_repair_poisons_and_a_read_var_keeps_its_error() {
    for engine in engines() {
        let (a, b) = (engine.var(0u32), engine.var(0u32));
        let fail = |v: &depengine::Var<u32>, what: &'static str| {
            engine.op("fail").write(v).run(move |(), (_v,)| -> depengine::Result<(), _> { Err(what.into()) })
        };
        assert!(fail(&a, "a broke").blocking_wait().is_err());
        assert!(fail(&b, "b broke").blocking_wait().is_err());
        let repair = engine.op("repair").read(&b).write(&a).repair(true).run(
            |(b,), (_a,)| -> depengine::Result<u32, _> { Err(format!("cannot repair from {}", *b).into()) },
        );
        assert!(format!("{:#}", repair.blocking_wait().unwrap_err()).contains("cannot repair from 0"));
        let on_a = engine.op("use a").read(&a).run(|(a,), ()| Ok(*a)).blocking_wait().unwrap_err();
        assert!(on_a.is_skipped() && format!("{on_a:#}").contains("cannot repair"), "{on_a:#}");
        let on_b = engine.op("use b").read(&b).run(|(b,), ()| Ok(*b)).blocking_wait().unwrap_err();
        assert!(on_b.is_skipped() && format!("{on_b:#}").contains("b broke"), "{on_b:#}");
        let repair = engine.op("repair").write(&a).write(&b).repair(true).run(|(), (mut a, mut b)| {
            *a = 1;
            *b = 1;
            Ok(())
        });
        repair.blocking_wait().unwrap();
        let sum = engine.op("sum").read(&a).read(&b).run(|(a, b), ()| Ok(*a + *b));
        assert_eq!(sum.blocking_wait().unwrap(), 2);
        let _ = engine.wait_for_all().blocking_wait();
    }
}
