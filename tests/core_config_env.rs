//! Configuration precedence: an explicit builder call wins, the environment
//! (for an engine the application makes from it) fills in what the code
//! left unset, then the default. Checked in child processes so that no
//! test mutates its own environment.

use std::process::Command;

use depengine::Engine;
use depengine::engine::EngineKind;

/// Every variable the engine reads.
const ENV_VARS: [&str; 17] = [
    "DEPENGINE_TYPE",
    "DEPENGINE_CPU_WORKERS",
    "DEPENGINE_CPU_PRIORITY_WORKERS",
    "DEPENGINE_BULK_SIZE",
    "DEPENGINE_SPIN_US",
    "DEPENGINE_GPU_SPIN_US",
    "DEPENGINE_GPU_WORKERS",
    "DEPENGINE_GPU_COPY_WORKERS",
    "DEPENGINE_SIM_GPUS",
    "DEPENGINE_MAX_IN_FLIGHT",
    "DEPENGINE_METRICS_TIMING",
    "DEPENGINE_WATCHDOG_MS",
    "DEPENGINE_TRACK_HOLDERS",
    "DEPENGINE_PROFILE_KEEP",
    "DEPENGINE_PUSHER_RUNS_AT",
    "DEPENGINE_THROTTLE_AT",
    "DEPENGINE_PROFILE",
];

/// Runs the ignored test `child` in a child process with `env` set.
fn child(test: &str, env: &[(&str, &str)]) -> String {
    let env: Vec<(&str, std::ffi::OsString)> = env.iter().map(|&(k, v)| (k, v.into())).collect();
    child_os(test, &env)
}

/// [`child`] with values that need not be text.
fn child_os(test: &str, env: &[(&str, std::ffi::OsString)]) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--ignored", "--nocapture", "--test-threads=1"]);
    for var in ENV_VARS {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    let out = cmd.output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn report(built: depengine::Result<Engine>) {
    match built {
        Ok(e) => println!(
            "config: kind={:?} workers={} bulk={} spin={:?} gpu_workers={} gpu_copy_workers={} sim_gpus={} \
             max_in_flight={:?} timing={}",
            e.settings().kind,
            e.settings().cpu_workers,
            e.settings().bulk_size,
            e.settings().spin,
            e.settings().gpu_workers,
            e.settings().gpu_copy_workers,
            e.settings().simulated_gpus,
            e.settings().max_in_flight,
            e.metrics().timing,
        ),
        Err(e) => println!("config error: {e}"),
    }
}

#[test]
#[ignore = "run by the other tests of this file in a child process"]
fn child_with_explicit_settings() {
    report(
        depengine::EngineBuilder::from_env().kind(EngineKind::Threaded).cpu_workers(7).bulk_size(1).build(),
    );
}

#[test]
#[ignore = "run by the other tests of this file in a child process"]
fn child_with_defaults() {
    report(depengine::EngineBuilder::from_env().build());
}

#[test]
fn builder_applies_without_environment() {
    assert!(child("child_with_explicit_settings", &[]).contains("config: kind=Threaded workers=7 bulk=1"));
}

#[test]
fn builder_call_wins_over_environment() {
    let env = [("DEPENGINE_TYPE", "naive"), ("DEPENGINE_CPU_WORKERS", "3"), ("DEPENGINE_BULK_SIZE", "16")];
    let out = child("child_with_explicit_settings", &env);
    assert!(out.contains("config: kind=Threaded workers=7 bulk=1"), "{out}");
}

#[test]
fn environment_fills_in_unset_settings() {
    let env = [("DEPENGINE_TYPE", "naive"), ("DEPENGINE_CPU_WORKERS", "3"), ("DEPENGINE_BULK_SIZE", "16")];
    let out = child("child_with_defaults", &env);
    // The naive engine fuses nothing, whatever the bulk size.
    assert!(out.contains("config: kind=Naive workers=3 bulk=1"), "{out}");
    let out = child("child_with_defaults", &[("DEPENGINE_CPU_WORKERS", "3"), ("DEPENGINE_BULK_SIZE", "16")]);
    assert!(out.contains("config: kind=Threaded workers=3 bulk=16"), "{out}");
}

#[test]
fn invalid_environment_is_a_clear_error() {
    let out = child("child_with_defaults", &[("DEPENGINE_CPU_WORKERS", "many")]);
    assert!(out.contains("config error: invalid argument: DEPENGINE_CPU_WORKERS=\"many\""), "{out}");
    let out = child("child_with_defaults", &[("DEPENGINE_TYPE", "turbo")]);
    assert!(out.contains("expected `threaded` or `naive`"), "{out}");
    let out = child("child_with_defaults", &[("DEPENGINE_CPU_PRIORITY_WORKERS", "0")]);
    assert!(out.contains("DEPENGINE_CPU_PRIORITY_WORKERS must be at least 1"), "{out}");
    // Counts the OS would refuse (or that would exhaust the process) are
    // refused at build, not at the first push.
    for many in ["5000", "100000"] {
        let out = child("child_with_defaults", &[("DEPENGINE_CPU_WORKERS", many)]);
        assert!(out.contains(&format!("DEPENGINE_CPU_WORKERS={many} is past its bound of 1024")), "{out}");
    }
}

/// One rule for empty values: a variable set to nothing (or blanks) is as
/// if it were not set, whatever it holds otherwise.
#[test]
fn an_empty_variable_is_as_if_unset() {
    let config = |out: &str| out.lines().find(|l| l.contains("config")).map(str::to_owned);
    let defaults = config(&child("child_with_defaults", &[]));
    assert!(defaults.as_ref().is_some_and(|d| d.contains("config: kind=")), "{defaults:?}");
    for var in ENV_VARS {
        for empty in ["", "  "] {
            let out = config(&child("child_with_defaults", &[(var, empty)]));
            assert_eq!(out, defaults, "{var}={empty:?}");
        }
    }
}

#[test]
fn environment_is_not_read_for_settings_the_code_gave() {
    let out = child("child_with_explicit_settings", &[("DEPENGINE_CPU_WORKERS", "many")]);
    assert!(out.contains("config: kind=Threaded workers=7 bulk=1"), "{out}");
}

/// The spin budget: the builder's, else the environment's (microseconds),
/// else the default; bounded; zero parks at once, and ops still run.
#[test]
fn spin_budget_is_a_setting() {
    let out = child("child_with_defaults", &[]);
    assert!(out.contains(&format!("spin={:?}", depengine::EngineBuilder::DEFAULT_SPIN)), "{out}");
    let out = child("child_with_defaults", &[("DEPENGINE_SPIN_US", "0")]);
    assert!(out.contains("spin=0ns"), "{out}");
    let out = child("child_with_defaults", &[("DEPENGINE_SPIN_US", "soon")]);
    assert!(out.contains("DEPENGINE_SPIN_US=\"soon\": expected a number of microseconds"), "{out}");
    let out = child("child_with_defaults", &[("DEPENGINE_SPIN_US", "2000000")]);
    assert!(out.contains("DEPENGINE_SPIN_US=\"2000000\": 2s is past the bound of 1s"), "{out}");
    // The GPU threads' budget, likewise.
    let out = child("child_with_defaults", &[("DEPENGINE_GPU_SPIN_US", "soon")]);
    assert!(out.contains("DEPENGINE_GPU_SPIN_US=\"soon\": expected a number of microseconds"), "{out}");
    let out = child("child_with_defaults", &[("DEPENGINE_GPU_SPIN_US", "2000000")]);
    assert!(out.contains("DEPENGINE_GPU_SPIN_US=\"2000000\": 2s is past the bound of 1s"), "{out}");
    let out = child("child_with_defaults", &[("DEPENGINE_GPU_SPIN_US", "0")]);
    assert!(out.contains("config: "), "{out}");
    let engine =
        depengine::EngineBuilder::from_env().spin(std::time::Duration::ZERO).cpu_workers(2).build().unwrap();
    let v = engine.var(0u32);
    for _ in 0..100 {
        engine
            .op("inc")
            .write(&v)
            .run_detached(|(), (mut v,)| {
                *v += 1;
                Ok(())
            })
            .unwrap();
        std::thread::yield_now();
    }
    assert_eq!(engine.op("get").read(&v).run(|(v,), ()| Ok(*v)).blocking_wait().unwrap(), 100);
}

/// The GPU settings: builder, else environment, else defaults; bounded.
#[test]
fn gpu_settings_follow_the_same_precedence() {
    let out = child("child_with_defaults", &[]);
    assert!(out.contains("gpu_workers=1 gpu_copy_workers=1 sim_gpus=0"), "{out}");
    let env =
        [("DEPENGINE_GPU_WORKERS", "3"), ("DEPENGINE_GPU_COPY_WORKERS", "2"), ("DEPENGINE_SIM_GPUS", "2")];
    let out = child("child_with_defaults", &env);
    assert!(out.contains("gpu_workers=3 gpu_copy_workers=2 sim_gpus=2"), "{out}");
    let out = child("child_with_defaults", &[("DEPENGINE_GPU_WORKERS", "0")]);
    assert!(out.contains("DEPENGINE_GPU_WORKERS must be at least 1"), "{out}");
    let out = child("child_with_defaults", &[("DEPENGINE_SIM_GPUS", "65")]);
    assert!(out.contains("DEPENGINE_SIM_GPUS=65 is past its bound of 64"), "{out}");
    let out = child("child_with_defaults", &[("DEPENGINE_SIM_GPUS", "two")]);
    assert!(out.contains("DEPENGINE_SIM_GPUS=\"two\": expected a number of devices"), "{out}");
    let engine = depengine::EngineBuilder::from_env().gpu_workers(2).simulated_gpus(1).build().unwrap();
    assert_eq!((engine.settings().gpu_workers, engine.settings().simulated_gpus), (2, 1));
    assert!(engine.gpu(0).unwrap().sim().is_some());
}

/// The bound on ops in flight: none by default; builder, else environment.
#[test]
fn max_in_flight_is_a_setting() {
    let out = child("child_with_defaults", &[]);
    assert!(out.contains("max_in_flight=None"), "{out}");
    let out = child("child_with_defaults", &[("DEPENGINE_MAX_IN_FLIGHT", "512")]);
    assert!(out.contains("max_in_flight=Some(512)"), "{out}");
    let out = child("child_with_defaults", &[("DEPENGINE_MAX_IN_FLIGHT", "0")]);
    assert!(out.contains("DEPENGINE_MAX_IN_FLIGHT must be at least 1"), "{out}");
    let engine = depengine::EngineBuilder::from_env().max_in_flight(3).build().unwrap();
    assert_eq!(engine.settings().max_in_flight, Some(3));
}

/// Timing metrics: off by default; builder, else environment.
#[test]
fn metrics_timing_is_a_setting() {
    let out = child("child_with_defaults", &[]);
    assert!(out.contains("timing=false"), "{out}");
    let out = child("child_with_defaults", &[("DEPENGINE_METRICS_TIMING", "1")]);
    assert!(out.contains("timing=true"), "{out}");
    let out = child("child_with_defaults", &[("DEPENGINE_METRICS_TIMING", "maybe")]);
    assert!(out.contains("DEPENGINE_METRICS_TIMING=\"maybe\": expected 1 or 0"), "{out}");
    let engine = depengine::EngineBuilder::from_env().metrics_timing(true).build().unwrap();
    assert!(engine.metrics().timing);
}

/// The watchdog: none by default; a bad threshold is a clear error.
#[test]
fn watchdog_is_a_setting() {
    let out = child("child_with_defaults", &[("DEPENGINE_WATCHDOG_MS", "soon")]);
    assert!(out.contains("DEPENGINE_WATCHDOG_MS=\"soon\": expected a number of milliseconds"), "{out}");
    let out = child("child_with_defaults", &[("DEPENGINE_WATCHDOG_MS", "0")]);
    assert!(
        out.contains("DEPENGINE_WATCHDOG_MS=\"0\": the watchdog's threshold must be above zero"),
        "{out}"
    );
    let out = child("child_with_defaults", &[("DEPENGINE_WATCHDOG_MS", "250")]);
    assert!(out.contains("config: kind="), "{out}");
    let out = child("child_with_defaults", &[("DEPENGINE_WATCHDOG_MS", "18446744073709551615")]);
    assert!(
        out.contains("DEPENGINE_WATCHDOG_MS=\"18446744073709551615\": the watchdog's threshold"),
        "{out}"
    );
    assert!(out.contains("is past its bound of 86400s"), "{out}");
    let out = child("child_with_defaults", &[("DEPENGINE_WATCHDOG_MS", "86400000")]);
    assert!(out.contains("config: kind="), "{out}");
    let err = depengine::EngineBuilder::from_env()
        .watchdog(std::time::Duration::from_secs(86_401))
        .build()
        .unwrap_err();
    assert!(err.is_invalid_argument() && err.to_string().contains("past its bound"), "{err}");
    let out = child("child_with_defaults", &[("DEPENGINE_PUSHER_RUNS_AT", "soon")]);
    assert!(out.contains("DEPENGINE_PUSHER_RUNS_AT=\"soon\": expected a count of ops, 0 for never"), "{out}");
    let out = child("child_with_defaults", &[("DEPENGINE_PUSHER_RUNS_AT", "0")]);
    assert!(out.contains("config: kind="), "{out}");
    let err = depengine::EngineBuilder::from_env().pusher_runs_at(usize::MAX).build().unwrap_err();
    assert!(err.is_invalid_argument() && err.to_string().contains("past its bound"), "{err}");
    let out = child("child_with_defaults", &[("DEPENGINE_PROFILE_KEEP", "0")]);
    assert!(out.contains("DEPENGINE_PROFILE_KEEP must be at least 1"), "{out}");
    let out = child("child_with_defaults", &[("DEPENGINE_TRACK_HOLDERS", "perhaps")]);
    assert!(out.contains("DEPENGINE_TRACK_HOLDERS=\"perhaps\": expected 1 or 0"), "{out}");
}

#[test]
#[ignore = "run by the other tests of this file in a child process"]
fn child_ignoring_the_environment() {
    report(Engine::builder().bulk_size(1).build());
}

#[test]
#[ignore = "run by the other tests of this file in a child process"]
fn child_with_engine_from_env() {
    // What `Engine::from_env` reports goes to tracing: print it where the
    // parent reads it.
    let subscriber = tracing_subscriber::fmt().with_writer(std::io::stdout).with_ansi(false).finish();
    let engine = tracing::subscriber::with_default(subscriber, Engine::from_env);
    report(Ok(engine));
}

#[test]
#[ignore = "run by the other tests of this file in a child process"]
fn child_with_engine_new() {
    report(Ok(Engine::new()));
    let engine = Engine::new();
    engine.op("one").run(|(), ()| Ok(())).blocking_wait().unwrap();
    drop(engine);
    report(Engine::builder().build());
}

/// An engine a library makes (`Engine::new`, `Engine::builder`) obeys no
/// `DEPENGINE_*` variable: not the engine type, not the workers, not the
/// profiler's file, whatever the process's environment says.
#[test]
fn a_library_engine_reads_no_variable() {
    let cores = std::thread::available_parallelism().unwrap().get();
    let dir = std::env::temp_dir().join(format!("depengine-no-env-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("trace.json");
    let trace_text = trace.to_str().unwrap().to_owned();
    let env = [
        ("DEPENGINE_TYPE", "naive"),
        ("DEPENGINE_CPU_WORKERS", "3"),
        ("DEPENGINE_BULK_SIZE", "16"),
        ("DEPENGINE_SPIN_US", "not a number"),
        ("DEPENGINE_PROFILE", trace_text.as_str()),
    ];
    let out = child("child_with_engine_new", &env);
    let expected = format!("config: kind=Threaded workers={cores} bulk=1 spin=10µs");
    assert_eq!(out.matches(&expected).count(), 2, "{out}");
    let written = std::fs::read_dir(&dir).unwrap().count();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(written, 0, "a profile was written for an engine that reads no variable");
    // The same environment reaches an engine made from it.
    let out = child("child_with_engine_from_env", &env[..3]);
    assert!(out.contains("config: kind=Naive workers=3 "), "{out}");
}

#[test]
fn a_builder_that_ignores_the_environment_reads_no_variable() {
    let cores = std::thread::available_parallelism().unwrap().get();
    let env = [
        ("DEPENGINE_TYPE", "naive"),
        ("DEPENGINE_CPU_WORKERS", "3"),
        ("DEPENGINE_SPIN_US", "not a number"),
        ("DEPENGINE_MAX_IN_FLIGHT", "5"),
        ("DEPENGINE_SIM_GPUS", "2"),
        ("DEPENGINE_METRICS_TIMING", "1"),
    ];
    let out = child("child_ignoring_the_environment", &env);
    let expected = format!(
        "config: kind=Threaded workers={cores} bulk=1 spin=10µs gpu_workers=1 gpu_copy_workers=1 sim_gpus=0 \
         max_in_flight=None timing=false"
    );
    assert!(out.contains(&expected), "{out}");
    // The same environment reaches a builder that reads it.
    let out = child("child_with_defaults", &env);
    assert!(out.contains("config error: invalid argument: DEPENGINE_SPIN_US=\"not a number\""), "{out}");
}

#[test]
fn engine_from_env_reports_an_invalid_variable_and_uses_the_default() {
    let env =
        [("DEPENGINE_CPU_WORKERS", "many"), ("DEPENGINE_BULK_SIZE", "16"), ("DEPENGINE_SPIN_US", "5000000")];
    let out = child("child_with_engine_from_env", &env);
    let cores = std::thread::available_parallelism().unwrap().get();
    // The valid variable applies; the invalid ones take their defaults.
    assert!(out.contains(&format!("config: kind=Threaded workers={cores} bulk=16 spin=10µs")), "{out}");
    assert!(out.contains("DEPENGINE_CPU_WORKERS=\"many\": expected a positive integer"), "{out}");
    assert!(out.contains("DEPENGINE_SPIN_US=\"5000000\": 5s is past the bound of 1s"), "{out}");
    assert!(out.contains("ignored, the setting's default is used"), "{out}");
}

/// Bytes that are not UTF-8, as a value of the environment.
#[cfg(unix)]
fn not_utf8(text: &str) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    let mut bytes = vec![0xff];
    bytes.extend_from_slice(text.as_bytes());
    std::ffi::OsString::from_vec(bytes)
}

#[cfg(unix)]
#[test]
fn a_value_that_is_not_utf8_is_refused_naming_its_variable() {
    for (name, value) in [
        ("DEPENGINE_TYPE", "naive"),
        ("DEPENGINE_CPU_WORKERS", "3"),
        ("DEPENGINE_BULK_SIZE", "4"),
        ("DEPENGINE_SPIN_US", "10"),
        ("DEPENGINE_METRICS_TIMING", "1"),
        ("DEPENGINE_PROFILE_KEEP", "10"),
        ("DEPENGINE_WATCHDOG_MS", "100"),
    ] {
        let out = child_os("child_with_defaults", &[(name, not_utf8(value))]);
        let said = format!("config error: invalid argument: {name}=\"\\xFF{value}\": not UTF-8 text");
        assert!(out.contains(&said), "{name}: {out}");
        // `Engine::from_env` reports it and takes the default.
        let out = child_os("child_with_engine_from_env", &[(name, not_utf8(value))]);
        assert!(out.contains(&format!("{name}=\"\\xFF{value}\": not UTF-8 text")), "{name}: {out}");
        assert!(out.contains("config: kind=Threaded"), "{name}: {out}");
    }
}

#[test]
#[ignore = "run by the other tests of this file in a child process"]
fn child_profiling_one_op() {
    let engine = depengine::EngineBuilder::from_env().build().unwrap();
    engine.op("profiled").run(|(), ()| Ok(())).blocking_wait().unwrap();
    engine.blocking_shutdown(depengine::ShutdownMode::Drain).unwrap();
}

/// A profile's path is a path: any bytes the OS takes, UTF-8 or not.
#[cfg(unix)]
#[test]
fn a_profile_path_that_is_not_utf8_is_written_to() {
    use std::os::unix::ffi::OsStrExt;
    let dir = std::env::temp_dir().join(format!("depengine-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut path = dir.clone().into_os_string();
    path.push("/");
    path.push(not_utf8("trace.json"));
    let _ = child_os("child_profiling_one_op", &[("DEPENGINE_PROFILE", path.clone())]);
    let written = std::fs::read(std::path::Path::new(&path));
    let _ = std::fs::remove_dir_all(&dir);
    let written = written.expect("the trace at the path that is not UTF-8");
    assert!(std::str::from_utf8(&written).unwrap().contains("profiled"));
    assert!(!path.as_bytes().is_ascii());
}
