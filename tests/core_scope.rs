//! Scoped vars over borrowed memory (`depengine::scope`): views of the
//! caller's data as vars, tiles of a matrix, and the end that waits for
//! every op and guard, panics and a cancelling shutdown included.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Rng, mix};
use depengine::{Engine, ShutdownMode};

fn engine() -> Engine {
    depengine::EngineBuilder::from_env().cpu_workers(2).build().unwrap()
}

#[test]
fn ops_change_borrowed_memory_in_place() {
    let engine = engine();
    let mut total = 0u64;
    let mut data: Vec<u64> = (0..1000).collect();
    depengine::scope(&engine, |s| {
        let chunks = s.chunks(&mut data, 128);
        assert_eq!(chunks.len(), 8, "the last chunk is shorter");
        let sum = s.var(&mut total);
        for chunk in &chunks {
            engine
                .op("square")
                .write(chunk)
                .run_detached(|(), (mut c,)| {
                    c.iter_mut().for_each(|x| *x *= *x);
                    Ok(())
                })
                .unwrap();
        }
        engine
            .op("sum")
            .read_all(&chunks)
            .write(&sum)
            .run_detached(|(cs,), (mut sum,)| {
                *sum = cs.iter().map(|c| c.iter().sum::<u64>()).sum();
                Ok(())
            })
            .unwrap();
    })
    .unwrap();
    assert_eq!(total, (0..1000u64).map(|x| x * x).sum::<u64>());
    assert!(data.iter().enumerate().all(|(i, &x)| x == (i * i) as u64));
}

/// Tiles cover the matrix exactly once, edges included, each row of a
/// tile a contiguous part of the matrix's row.
#[test]
fn tiles_cover_the_matrix_once() {
    let engine = engine();
    for (rows, cols, tr, tc) in [(8, 8, 4, 4), (10, 7, 3, 4), (5, 9, 5, 9), (1, 1, 2, 2), (6, 6, 1, 6)] {
        let mut m = vec![0u32; rows * cols];
        depengine::scope(&engine, |s| {
            let tiles = s.tiles(&mut m, cols, tr, tc).unwrap();
            assert_eq!(tiles.len(), rows.div_ceil(tr));
            for (i, row) in tiles.iter().enumerate() {
                assert_eq!(row.len(), cols.div_ceil(tc));
                for (j, tile) in row.iter().enumerate() {
                    engine
                        .op("mark")
                        .write(tile)
                        .run_detached(move |(), (mut t,)| {
                            for r in 0..t.nrows() {
                                for c in 0..t.ncols() {
                                    t[(r, c)] += ((i * tr + r) * cols + j * tc + c) as u32 + 1;
                                }
                            }
                            Ok(())
                        })
                        .unwrap();
                }
            }
        })
        .unwrap();
        let want: Vec<u32> = (1..=(rows * cols) as u32).collect();
        assert_eq!(m, want, "{rows}x{cols} in tiles of {tr}x{tc}");
    }
}

#[test]
fn bad_tile_shapes_are_refused() {
    let engine = engine();
    let mut m = vec![0u8; 10];
    depengine::scope(&engine, |s| {
        assert!(
            s.tiles(&mut m, 3, 2, 2).unwrap_err().is_invalid_argument(),
            "10 is not a whole number of rows"
        );
    })
    .unwrap();
    depengine::scope(&engine, |s| {
        assert!(s.tiles(&mut m, 0, 2, 2).unwrap_err().is_invalid_argument());
    })
    .unwrap();
    depengine::scope(&engine, |s| {
        assert!(s.tiles(&mut m, 5, 0, 2).unwrap_err().is_invalid_argument());
    })
    .unwrap();
}

/// The scope returns only after slow ops on its vars have run.
#[test]
fn the_end_waits_for_slow_ops() {
    let engine = engine();
    let mut x = 0u32;
    depengine::scope(&engine, |s| {
        let v = s.var(&mut x);
        engine
            .op("slow")
            .write(&v)
            .run_detached(|(), (mut v,)| {
                std::thread::sleep(Duration::from_millis(50));
                *v = 7;
                Ok(())
            })
            .unwrap();
    })
    .unwrap();
    assert_eq!(x, 7);
}

/// An async op's guards, handed to another thread, keep the scope open
/// until that thread drops them.
#[test]
fn the_end_waits_for_guards_held_elsewhere() {
    let engine = engine();
    let mut x = 0u32;
    depengine::scope(&engine, |s| {
        let v = s.var(&mut x);
        engine.op("async").write(&v).run_async(|(), (mut v,), done| {
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                *v = 9;
                drop(v);
                done.succeed(());
            });
        });
    })
    .unwrap();
    assert_eq!(x, 9);
}

/// A panic in the closure goes on, once the ops it pushed have run.
#[test]
fn a_panic_in_the_closure_waits_for_the_ops_first() {
    let engine = engine();
    let ran = AtomicUsize::new(0);
    let mut data = vec![0u8; 64];
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        depengine::scope(&engine, |s| {
            for chunk in s.chunks(&mut data, 16) {
                engine
                    .op("slow")
                    .write(&chunk)
                    .run_detached(|(), (mut c,)| {
                        std::thread::sleep(Duration::from_millis(20));
                        c.fill(1);
                        Ok(())
                    })
                    .unwrap();
            }
            ran.fetch_add(1, Ordering::SeqCst);
            panic!("the closure panics");
        })
    }));
    assert!(caught.is_err());
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert!(data.iter().all(|&b| b == 1), "every op ran before the panic left the scope");
}

/// Ops that fail, and ops skipped behind them, end the scope as well; the
/// failure is the ops', not the scope's.
#[test]
fn failing_ops_end_the_scope() {
    let engine = engine();
    let mut x = 1u32;
    depengine::scope(&engine, |s| {
        let v = s.var(&mut x);
        let failed = engine.op("fail").write(&v).run(|(), (_v,)| Err::<(), _>("planned".into()));
        let skipped = engine.op("after").write(&v).run(|(), (mut v,)| {
            *v = 5;
            Ok(())
        });
        assert!(failed.blocking_wait().is_err());
        assert!(skipped.blocking_wait().unwrap_err().is_skipped());
        assert!(engine.blocking_wait_for_var(&v).is_err(), "the var carries the failure");
    })
    .unwrap();
    assert_eq!(x, 1);
}

/// A cancelling shutdown inside the scope: queued ops are cancelled, the
/// running one finishes, and the scope still returns only once none can
/// reach the memory (its value does not move after the scope returned).
#[test]
fn a_cancelling_shutdown_inside_the_scope_ends_it_safely() {
    let engine = engine();
    let mut x = 0u64;
    let (started, running) = std::sync::mpsc::channel();
    depengine::scope(&engine, |s| {
        let v = s.var(&mut x);
        engine
            .op("running")
            .write(&v)
            .run_detached(move |(), (mut v,)| {
                started.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(30));
                *v += 1;
                Ok(())
            })
            .unwrap();
        for _ in 0..10 {
            engine
                .op("queued")
                .write(&v)
                .run_detached(|(), (mut v,)| {
                    *v += 100;
                    Ok(())
                })
                .unwrap();
        }
        running.recv().unwrap();
        let _ = engine.blocking_shutdown(ShutdownMode::Cancel);
    })
    .unwrap();
    let at_end = x;
    assert_eq!(at_end % 100, 1, "{at_end}: the running op's write and maybe queued ones");
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(std::hint::black_box(&x), &at_end, "nothing reached the memory after the scope");
}

#[tokio::test]
async fn a_scope_is_refused_on_a_runtime_thread() {
    let engine = engine();
    let mut x = 0u8;
    let err = depengine::scope(&engine, |s| drop(s.var(&mut x))).unwrap_err();
    assert!(err.is_blocking_in_runtime(), "{err}");
}

/// Four threads (scoped threads inside the scope) push reads and writes
/// over shared chunks, each write adding to its chunk: every write lands
/// once, and the memory holds the sum when the scope returns.
#[test]
fn threads_pushing_over_scoped_vars_lose_no_write() {
    let engine = engine();
    // Under Miri (`.ci/run`), one short round: it checks every access.
    let (rounds, pushes) = if cfg!(miri) { (1, 20) } else { (5, 300) };
    for round in 0..rounds {
        let mut data = vec![0u64; 64];
        let counts: Vec<Vec<u64>> = depengine::scope(&engine, |s| {
            let chunks = s.chunks(&mut data, 8);
            std::thread::scope(|threads| {
                let pushers: Vec<_> = (0..4u64)
                    .map(|t| {
                        let (engine, chunks) = (&engine, &chunks);
                        threads.spawn(move || {
                            let mut rng = Rng(mix(round, t));
                            let mut counts = vec![0u64; chunks.len()];
                            for _ in 0..pushes {
                                let (w, r) = (rng.below(chunks.len()), rng.below(chunks.len()));
                                counts[w] += 1;
                                let op = engine.op("add").write(&chunks[w]);
                                if r == w {
                                    op.run_detached(|(), (mut c,)| {
                                        c.iter_mut().for_each(|x| *x += 1);
                                        Ok(())
                                    })
                                    .unwrap();
                                } else {
                                    op.read(&chunks[r])
                                        .run_detached(|(_r,), (mut c,)| {
                                            c.iter_mut().for_each(|x| *x += 1);
                                            Ok(())
                                        })
                                        .unwrap();
                                }
                            }
                            counts
                        })
                    })
                    .collect();
                pushers.into_iter().map(|p| p.join().unwrap()).collect()
            })
        })
        .unwrap();
        for (k, chunk) in data.chunks(8).enumerate() {
            let want: u64 = counts.iter().map(|c| c[k]).sum();
            assert!(chunk.iter().all(|&x| x == want), "round {round}, chunk {k}: {chunk:?} != {want}");
        }
    }
}

/// Scoped vars and owned vars in one op; `wait_for_var` on a scoped var.
#[test]
fn scoped_and_owned_vars_mix() {
    let engine = engine();
    let owned = engine.var(3u64);
    let mut x = 4u64;
    depengine::scope(&engine, |s| {
        let v = s.var(&mut x);
        engine
            .op("mul")
            .read(&owned)
            .write(&v)
            .run_detached(|(o,), (mut v,)| {
                *v *= *o;
                Ok(())
            })
            .unwrap();
        engine.blocking_wait_for_var(&v).unwrap();
    })
    .unwrap();
    assert_eq!(x, 12);
}

/// Runs `f` on a thread of its own and fails if it does not return within
/// `limit`: what used to hang fails here instead.
fn within<R: Send + 'static>(limit: Duration, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(f()).unwrap());
    rx.recv_timeout(limit).expect("still running: it hangs")
}

/// Handles of ops on a scoped var kept after the scope, with a cancelling
/// shutdown inside it: the scope's end does not wait for the handles (they
/// hold the var, and are dropped only after the scope returns), yet it
/// returns only once no op on the var runs.
#[test]
fn op_handles_kept_past_a_shut_down_scope_let_it_end() {
    within(Duration::from_secs(20), || {
        let engine = engine();
        let mut data = vec![0u8; 4];
        let mut kept = Vec::new();
        let (started, running) = std::sync::mpsc::channel();
        depengine::scope(&engine, |s| {
            let v = s.slice(&mut data);
            kept.push(engine.op("running").write(&v).run(move |(), (mut d,)| {
                started.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(30));
                d[0] += 1;
                Ok(())
            }));
            for _ in 0..4 {
                kept.push(engine.op("queued").write(&v).run(|(), (mut d,)| {
                    d[1] += 1;
                    Ok(())
                }));
            }
            running.recv().unwrap();
            let _ = engine.blocking_shutdown(ShutdownMode::Cancel);
        })
        .unwrap();
        let at_end = data.clone();
        assert_eq!(at_end[0], 1, "the running op finished before the scope returned");
        let outcomes: Vec<_> = kept.into_iter().map(|h| h.blocking_wait().is_ok()).collect();
        assert!(outcomes[0], "the running op succeeded");
        assert_eq!(data, at_end, "nothing reached the memory after the scope");
    });
}

/// Two write guards of vars of two nested scopes, swapped inside an op that
/// holds both: each guard keeps its own var and view, so after the inner
/// scope returns, ops on the outer var write the outer memory only. (The
/// guards once dereferenced to the views themselves: swapping those moved
/// the inner scope's pointer into the outer var.)
#[test]
fn swapped_guards_of_nested_scopes_keep_their_views() {
    let engine = engine();
    let mut outer = vec![0u8; 4];
    let mut inner = vec![0u8; 4];
    depengine::scope(&engine, |s| {
        let o = s.slice(&mut outer);
        depengine::scope(&engine, |t| {
            let i = t.slice(&mut inner);
            engine
                .op("swap")
                .write(&o)
                .write(&i)
                .run(|(), (mut a, mut b)| {
                    std::mem::swap(&mut a, &mut b);
                    a.fill(1); // the inner var's memory, through its own guard
                    b.fill(2);
                    Ok(())
                })
                .blocking_wait()
                .unwrap();
        })
        .unwrap();
        engine
            .op("after")
            .write(&o)
            .run(|(), (mut d,)| {
                d.fill(171);
                Ok(())
            })
            .blocking_wait()
            .unwrap();
    })
    .unwrap();
    assert_eq!(inner, [1; 4], "the inner memory has only the swap op's write");
    assert_eq!(outer, [171; 4], "the outer var still views the outer memory");
}

/// Values behind two scoped `var` guards swap as values: the views stay.
#[test]
fn swapping_scoped_values_moves_data_not_views() {
    let engine = engine();
    let (mut x, mut y) = (String::from("x"), String::from("y"));
    depengine::scope(&engine, |s| {
        let (a, b) = (s.var(&mut x), s.var(&mut y));
        engine
            .op("swap")
            .write(&a)
            .write(&b)
            .run(|(), (mut a, mut b)| {
                std::mem::swap(&mut *a, &mut *b);
                Ok(())
            })
            .blocking_wait()
            .unwrap();
        engine
            .op("mark")
            .write(&a)
            .run(|(), (mut a,)| {
                a.push('!');
                Ok(())
            })
            .blocking_wait()
            .unwrap();
    })
    .unwrap();
    assert_eq!((x.as_str(), y.as_str()), ("y!", "x"));
}

/// An op builder over a scoped var kept past the scope (its type holds no
/// scope lifetime, only the engine's) pushes nothing on the memory: the
/// scope's end deleted the var, so the push is refused. The same after a
/// cancelling shutdown inside the scope: the engine refuses every push.
#[test]
fn an_op_builder_kept_past_the_scope_is_refused() {
    for shut_down in [false, true] {
        let engine = engine();
        let mut data = vec![0u8; 4];
        let mut kept = None;
        depengine::scope(&engine, |s| {
            let v = s.slice(&mut data);
            kept = Some(engine.op("late").write(&v));
            if shut_down {
                let _ = engine.blocking_shutdown(ShutdownMode::Cancel);
            }
        })
        .unwrap();
        let err = kept
            .unwrap()
            .run(|(), (mut d,)| {
                d.fill(9);
                Ok(())
            })
            .blocking_wait()
            .unwrap_err();
        assert!(if shut_down { err.is_shutdown() } else { err.is_var_deleted() }, "{err}");
        assert_eq!(data, [0; 4]);
    }
}
