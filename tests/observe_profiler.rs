//! The profiler: its Chrome trace parses and holds what happened (one
//! complete event per op, no two on one thread overlapping, flow arrows
//! only between ops that conflict on a var, in push order), the aggregate
//! counts match, and the per-op choice and the opted-in mode select the
//! ops recorded.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};

use common::{Rng, timed};
use depengine::Engine;
use serde_json::Value;

/// Pushes `n` random ops over four named vars (reads and writes), with
/// some ops that declare nothing; returns each op's name.
async fn random_program(engine: &Engine, n: usize, seed: u64) -> Vec<&'static str> {
    let vars: Vec<_> = (0..4).map(|i| engine.var_named(format!("v{i}"), 0u64)).collect();
    let mut rng = Rng(seed);
    let mut names = Vec::new();
    for _ in 0..n {
        let (r, w) = (rng.below(4), rng.below(4));
        let spin = rng.below(20) as u64;
        let busy = move || {
            let end = std::time::Instant::now() + std::time::Duration::from_micros(spin);
            while std::time::Instant::now() < end {}
        };
        match rng.below(3) {
            0 => {
                names.push("read");
                engine.op("read").read(&vars[r]).run(move |(_v,), ()| {
                    busy();
                    Ok(())
                });
            }
            1 if r != w => {
                names.push("copy");
                engine.op("copy").read(&vars[r]).write(&vars[w]).run(move |(a,), (mut b,)| {
                    busy();
                    *b = *a + 1;
                    Ok(())
                });
            }
            1 => {
                names.push("free");
                engine.op("free").run(move |(), ()| {
                    busy();
                    Ok(())
                });
            }
            _ => {
                names.push("bump");
                engine.op("bump").write(&vars[w]).run(move |(), (mut v,)| {
                    busy();
                    *v += 1;
                    Ok(())
                });
            }
        }
    }
    engine.wait_for_all().await.unwrap();
    names
}

fn engine() -> Engine {
    depengine::EngineBuilder::from_env().cpu_workers(2).bulk_size(1).build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chrome_trace_holds_what_happened() {
    timed(async {
        let engine = engine();
        engine.profiler().start();
        let names = random_program(&engine, 300, 7).await;
        let profile = engine.profiler().stop();
        assert_eq!(profile.ops().len(), names.len(), "one record per push");

        let trace: Value = serde_json::from_str(&profile.chrome_trace()).expect("the trace is JSON");
        let events = trace["traceEvents"].as_array().unwrap();
        let ops: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X" && e["cat"] == "op").collect();
        assert_eq!(ops.len(), names.len(), "one complete event per op");
        // One push span per op, on its pushing thread's track, each push
        // of a thread after the one before it.
        let pushes: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X" && e["cat"] == "push").collect();
        assert_eq!(pushes.len(), names.len(), "one push span per op");
        let mut by_pusher: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
        for e in &pushes {
            let span = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
            assert!(span.1 >= 0.0);
            by_pusher.entry(e["tid"].as_u64().unwrap()).or_default().push(span);
        }
        for (thread, mut spans) in by_pusher {
            spans.sort_by(|a, b| a.partial_cmp(b).unwrap());
            for pair in spans.windows(2) {
                assert!(pair[0].0 + pair[0].1 <= pair[1].0 + 1e-3, "pushes overlap on {thread}: {pair:?}");
            }
        }
        // Idle-while-ready stretches are the profile's, as spans.
        let idle = events.iter().filter(|e| e["cat"] == "idle").count();
        let marked = profile.idle_while_ready().iter().filter(|g| g.end - g.start >= 2_000).count();
        assert_eq!(idle, marked, "the stretches of 2 µs or more");
        let seqs: HashSet<u64> = ops.iter().map(|e| e["args"]["seq"].as_u64().unwrap()).collect();
        assert_eq!(seqs.len(), names.len());

        // The events of one thread never overlap.
        let mut by_thread: BTreeMap<(u64, u64), Vec<(f64, f64)>> = BTreeMap::new();
        for e in &ops {
            let key = (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap());
            by_thread.entry(key).or_default().push((e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap()));
        }
        // (Usually both workers ran ops; on a loaded machine one may have
        // run them all, which the check below covers as well.)
        assert!(!by_thread.is_empty());
        for (thread, mut spans) in by_thread {
            spans.sort_by(|a, b| a.partial_cmp(b).unwrap());
            for pair in spans.windows(2) {
                assert!(pair[0].0 + pair[0].1 <= pair[1].0 + 1e-3, "overlap on {thread:?}: {pair:?}");
            }
        }

        // Threads and processes are named; vars by their names.
        assert!(events.iter().any(|e| e["name"] == "thread_name"));
        assert!(events.iter().any(|e| e["name"] == "process_name" && e["args"]["name"] == "cpu(0)"));
        assert!(ops.iter().any(|e| e["args"]["writes"][0].as_str().is_some_and(|v| v.starts_with("v"))));

        // Every arrow joins an op to a later-pushed op it conflicts with:
        // they share a var that one of them writes.
        let by_seq: HashMap<u64, &depengine::profile::ProfiledOp> =
            profile.ops().iter().map(|op| (op.seq, op)).collect();
        let mut arrows = 0;
        for op in profile.ops() {
            for next in &op.released {
                let next = by_seq[next];
                arrows += 1;
                assert!(next.seq > op.seq, "released an op pushed before it");
                let writes = |o: &depengine::profile::ProfiledOp| {
                    o.writes.iter().map(|v| v.id).collect::<HashSet<_>>()
                };
                let all = |o: &depengine::profile::ProfiledOp| {
                    o.reads.iter().chain(&o.writes).map(|v| v.id).collect::<HashSet<_>>()
                };
                let conflict = writes(op).intersection(&all(next)).next().is_some()
                    || writes(next).intersection(&all(op)).next().is_some();
                assert!(conflict, "an arrow between ops that do not conflict: {op:?} -> {next:?}");
            }
        }
        assert!(arrows > 20, "a random program over four vars releases many ops: {arrows}");
        let starts = events.iter().filter(|e| e["ph"] == "s").count();
        let ends = events.iter().filter(|e| e["ph"] == "f").count();
        assert_eq!((starts, ends), (arrows, arrows));
        assert!(events.iter().any(|e| e["ph"] == "C"), "a queue-depth counter");

        // The aggregate counts match the pushes by name.
        let mut pushed: HashMap<&str, u64> = HashMap::new();
        names.iter().for_each(|n| *pushed.entry(n).or_default() += 1);
        let rows = profile.aggregate();
        assert_eq!(rows.len(), pushed.len());
        for row in &rows {
            assert_eq!(row.count, pushed[row.name.as_str()], "{row:?}");
            assert_eq!(row.ran, row.count);
            assert!(row.min <= row.mean && row.mean <= row.max, "{row:?}");
        }
        let table = profile.aggregate_table();
        assert!(table.lines().count() == rows.len() + 1 && table.contains("bump"), "{table}");

        // The picture holds a bar per op, a bar per push, a mark per
        // idle-while-ready stretch, and a legend entry per name.
        let svg = profile.svg();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        let gaps = profile.idle_while_ready().iter().filter(|g| g.end - g.start >= 2_000).count();
        assert_eq!(svg.matches("<title>").count(), 2 * names.len() + gaps);
        assert_eq!(svg.matches("<title>push of ").count(), names.len());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_choose_whether_they_are_recorded() {
    timed(async {
        let engine = engine();
        let v = engine.var(0u64);
        // Off: nothing recorded, even an op that opts in.
        engine.op("before").profile(true).write(&v).run(|(), (_v,)| Ok(()));
        engine.profiler().start();
        engine.op("hidden").profile(false).write(&v).run(|(), (_v,)| Ok(()));
        engine.op("seen").write(&v).run(|(), (_v,)| Ok(()));
        engine.wait_for_all().await.unwrap();
        let names: Vec<String> = engine.profiler().take().ops().iter().map(|op| op.name.clone()).collect();
        assert_eq!(names, ["seen"]);
        // Opted in only: one stage of a busy service.
        engine.profiler().start_opted_in();
        for _ in 0..10 {
            engine.op("busy").write(&v).run(|(), (_v,)| Ok(()));
        }
        engine.op("stage").profile(true).write(&v).run(|(), (_v,)| Ok(()));
        engine.wait_for_all().await.unwrap();
        let profile = engine.profiler().stop();
        assert!(!engine.profiler().is_on());
        let names: Vec<&str> = profile.ops().iter().map(|op| op.name.as_str()).collect();
        assert_eq!(names, ["stage"]);
        let stage = &profile.ops()[0];
        assert!(stage.thread.as_deref().is_some_and(|t| t.starts_with("depengine-cpu0")), "{stage:?}");
        assert!(stage.pushed <= stage.ready.unwrap() && stage.ready <= stage.start);
        assert!(stage.start <= stage.end && stage.end.unwrap() <= stage.done);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_are_recorded() {
    timed(async {
        let engine = engine();
        let v = engine.var_named("model", 0u64);
        engine.profiler().start();
        let failed = engine.op("fail").write(&v).run(|(), (_v,)| Err::<(), _>("no".into()));
        let skipped = engine.op("skip").read(&v).run(|(_v,), ()| Ok(()));
        assert!(failed.await.is_err());
        assert!(skipped.await.unwrap_err().is_skipped());
        let _ = engine.wait_for_all().await;
        let profile = engine.profiler().stop();
        let outcome = |name: &str| profile.ops().iter().find(|op| op.name == name).unwrap().outcome;
        assert_eq!(outcome("fail"), depengine::profile::Outcome::Failed);
        assert_eq!(outcome("skip"), depengine::profile::Outcome::Skipped);
        assert!(profile.ops()[0].writes[0].label().starts_with("model (#"));
    })
    .await;
}

#[test]
fn var_names_show_in_debug_and_errors() {
    let engine = Engine::from_env();
    let v = engine.var_named("weights", 1u32);
    assert_eq!(v.name(), Some("weights"));
    assert!(format!("{v:?}").contains("weights"));
    assert!(v.label().starts_with("`weights` (#"));
    assert_eq!(v.any().debug_state().name.as_deref(), Some("weights"));
    let unnamed = engine.var(0u8);
    assert_eq!(unnamed.label(), format!("#{}", unnamed.id()));
    let err = engine.op("twice").write(&v).write(&v).run(|(), (_a, _b)| Ok(())).pushed().unwrap_err();
    assert!(err.to_string().contains("`weights`"), "{err}");
}

#[test]
#[ignore = "run by profile_env_writes_the_trace in a child process"]
fn child_profiled_by_the_environment() {
    let engine = depengine::EngineBuilder::from_env().cpu_workers(1).bulk_size(1).build().unwrap();
    let v = engine.var_named("env-var", 0u64);
    for _ in 0..5 {
        engine.op("env-op").write(&v).run(|(), (mut v,)| {
            *v += 1;
            Ok(())
        });
    }
    let path = std::path::PathBuf::from(std::env::var_os("DEPENGINE_PROFILE").unwrap());
    if std::env::var_os("CHILD_SHUTS_DOWN").is_some() {
        engine.blocking_shutdown(depengine::ShutdownMode::Drain).unwrap();
        assert!(path.exists(), "written by the shutdown");
        return;
    }
    // Dropping the last handle drains the engine, which writes the trace
    // once drained, on whichever thread finishes the drain: this process
    // waits for it rather than exit first.
    drop(v);
    drop(engine);
    let start = std::time::Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < std::time::Duration::from_secs(10), "no trace after the drop");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// `DEPENGINE_PROFILE=path` records from the start and writes the trace
/// when the engine shuts down, or once drained after its last handle is
/// dropped.
#[test]
fn profile_env_writes_the_trace() {
    for shutdown in [false, true] {
        let dir = std::env::temp_dir().join(format!("depengine-profile-{}-{shutdown}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("trace.json");
        let _ = std::fs::remove_file(&path);
        let mut child = std::process::Command::new(std::env::current_exe().unwrap());
        child.args(["--exact", "child_profiled_by_the_environment", "--ignored", "--test-threads=1"]);
        child.env("DEPENGINE_PROFILE", &path).env_remove("CHILD_SHUTS_DOWN");
        if shutdown {
            child.env("CHILD_SHUTS_DOWN", "1");
        }
        let out = child.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
        let trace: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let ops = trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X" && e["name"] == "env-op");
        assert_eq!(ops.count(), 5, "shutdown: {shutdown}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
/// A GPU op (simulated device) is profiled on its GPU worker, and its
/// completion shows on the device's poller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_ops_show_their_worker_and_their_poller() {
    timed(async {
        let engine = depengine::EngineBuilder::from_env().simulated_gpus(1).build().unwrap();
        let gpu = engine.gpu(0).unwrap();
        let v = engine.var_named("buffer", gpu.sim_buffer(vec![1.0f32; 16]).unwrap());
        engine.profiler().start();
        for _ in 0..3 {
            engine.op("scale").write(&v).device(depengine::Device::Gpu(0)).run_gpu(|(), (mut v,), ctx| {
                let (touch, w) = v.sim_mut().expect("a simulated buffer").writer();
                let stream = ctx.sim_stream().expect("a simulated device");
                stream.launch("scale", std::time::Duration::from_micros(200), vec![touch], move || {
                    w.with(|o| o.iter_mut().for_each(|x| *x *= 2.0));
                })?;
                Ok(())
            });
        }
        engine.wait_for_all().await.unwrap();
        let profile = engine.profiler().stop();
        assert_eq!(profile.ops().len(), 3);
        for op in profile.ops() {
            assert_eq!(op.device, depengine::Device::Gpu(0));
            assert!(op.thread.as_deref().is_some_and(|t| t.contains("gpu0")), "{op:?}");
            assert_ne!(
                op.thread.as_deref(),
                Some(op.completed_on.as_str()),
                "completed by the poller: {op:?}"
            );
            assert!(op.done >= op.end.unwrap(), "{op:?}");
        }
        let trace: Value = serde_json::from_str(&profile.chrome_trace()).unwrap();
        let events = trace["traceEvents"].as_array().unwrap();
        assert_eq!(events.iter().filter(|e| e["ph"] == "i" && e["cat"] == "completion").count(), 3);
        assert!(events.iter().any(|e| e["name"] == "process_name" && e["args"]["name"] == "gpu(0)"));
    })
    .await;
}

#[test]
#[ignore = "run by two_engines_write_two_traces in a child process"]
fn child_with_two_profiled_engines() {
    let engines = [Engine::from_env(), Engine::from_env()];
    for (k, engine) in engines.iter().enumerate() {
        let v = engine.var(0u64);
        for _ in 0..=k {
            engine.op("two-op").write(&v).run(|(), (mut v,)| {
                *v += 1;
                Ok(())
            });
        }
    }
    for engine in &engines {
        engine.blocking_shutdown(depengine::ShutdownMode::Drain).unwrap();
    }
}

/// With `DEPENGINE_PROFILE`, each engine of the process writes its own
/// trace (the first to the path given, the next with `.2` before the
/// extension), whole, and once.
#[test]
fn two_engines_write_two_traces() {
    let dir = std::env::temp_dir().join(format!("depengine-two-profiles-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.json");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_with_two_profiled_engines", "--ignored", "--test-threads=1"])
        .env("DEPENGINE_PROFILE", &path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let mut counts = Vec::new();
    for name in ["trace.json", "trace.2.json"] {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        let trace: Value = serde_json::from_str(&text).unwrap();
        let events = trace["traceEvents"].as_array().unwrap();
        let ops = events.iter().filter(|e| e["ph"] == "X" && e["name"] == "two-op").count();
        counts.push(ops);
    }
    counts.sort_unstable();
    assert_eq!(counts, [1, 2], "each engine's ops in a trace of its own");
    let files = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(files, 2, "no temporary file is left");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A profiler left on keeps the last ops only, and says how many it let
/// go; a snapshot while it records does not lose any op.
#[test]
fn a_profiler_left_on_keeps_a_bounded_profile() {
    let engine = depengine::EngineBuilder::from_env().cpu_workers(1).bulk_size(1).build().unwrap();
    let v = engine.var(0u64);
    engine.profiler().keep_last(100);
    assert_eq!(engine.profiler().keeps(), 100);
    engine.profiler().start();
    for i in 0..5_000u64 {
        engine.op("tick").write(&v).run(move |(), (mut v,)| {
            *v = i;
            Ok(())
        });
        if i % 997 == 0 {
            let snapshot = engine.profiler().snapshot();
            assert!(snapshot.ops().len() <= 100);
        }
    }
    engine.wait_for_all().blocking_wait().unwrap();
    let profile = engine.profiler().stop();
    assert_eq!(profile.ops().len(), 100);
    assert_eq!(profile.dropped(), 4_900);
    // The last ones, in order.
    let seqs: Vec<u64> = profile.ops().iter().map(|op| op.seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert_eq!(engine.profiler().take().ops().len(), 0);
}

/// Names no view should choke on: a very long one, control characters,
/// markup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_take_any_name() {
    timed(async {
        let engine = engine();
        let v = engine.var(0u64);
        engine.profiler().start();
        let long = "n".repeat(70_000);
        for name in [long.clone(), "esc\u{1b}[31m\u{1}".into(), "<script>alert(1)</script>".into()] {
            engine.op(name).write(&v).run(|(), (mut v,)| {
                *v += 1;
                Ok(())
            });
        }
        engine.wait_for_all().await.unwrap();
        let profile = engine.profiler().stop();
        assert_eq!(profile.aggregate_table().lines().count(), 4);
        let svg = profile.svg();
        let bad =
            svg.chars().find(|c| matches!(*c, '\u{0}'..='\u{8}' | '\u{b}' | '\u{c}' | '\u{e}'..='\u{1f}'));
        assert_eq!(bad, None, "a character XML 1.0 does not allow");
        assert!(svg.contains("\\u{1b}") && !svg.contains("<script>"), "escaped, not dropped");
        serde_json::from_str::<Value>(&profile.chrome_trace()).unwrap();
    })
    .await;
}

/// An async op completed by another thread after its body returned is
/// drawn on that thread's row too, in flight until it completed.
#[test]
fn an_op_completed_elsewhere_is_drawn_in_flight_on_that_thread() {
    let engine = depengine::EngineBuilder::from_env().cpu_workers(1).build().unwrap();
    let v = engine.var(0u64);
    engine.profiler().start();
    let (tx, rx) = std::sync::mpsc::channel();
    let completer = std::thread::Builder::new()
        .name("completer".into())
        .spawn(move || {
            let (mut guard, done): (depengine::WriteGuard<u64>, depengine::engine::Completion<()>) =
                rx.recv().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(2));
            *guard += 1;
            drop(guard);
            done.succeed(());
        })
        .unwrap();
    let handle = engine.op("handed over").write(&v).run_async(move |(), (guard,), done| {
        tx.send((guard, done)).unwrap();
    });
    handle.blocking_wait().unwrap();
    completer.join().unwrap();
    let profile = engine.profiler().stop();
    let op = profile.ops().iter().find(|op| op.name == "handed over").unwrap();
    assert_eq!(op.completed_on, "completer");
    let svg = profile.svg();
    assert!(svg.contains("completer"), "the completing thread has a row");
    let flight =
        svg.split("<title>").find(|t| t.starts_with("handed over #") && t.contains("in flight")).unwrap();
    let micros: f64 = flight.split("in flight ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(micros >= 2000.0, "in flight for the completer's sleep at least: {micros} µs");
}
