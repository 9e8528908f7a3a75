//! Environment overrides, checked in child processes so that no test
//! mutates its own environment.

use std::process::Command;

use depengine::{Engine, EngineKind};

/// Runs `child_reports_config` in a child process with `env` set.
fn child(env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_reports_config", "--ignored", "--nocapture", "--test-threads=1"]);
    for var in ["DEPENGINE_TYPE", "DEPENGINE_CPU_WORKERS", "DEPENGINE_CPU_PRIORITY_WORKERS"] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
#[ignore = "run by the other tests of this file in a child process"]
fn child_reports_config() {
    match Engine::builder().kind(EngineKind::Threaded).cpu_workers(7).build() {
        Ok(e) => println!("config: kind={:?} workers={}", e.kind(), e.cpu_workers()),
        Err(e) => println!("config error: {e}"),
    }
}

#[test]
fn builder_applies_without_environment() {
    assert!(child(&[]).contains("config: kind=Threaded workers=7"));
}

#[test]
fn environment_overrides_builder() {
    let out = child(&[("DEPENGINE_TYPE", "naive"), ("DEPENGINE_CPU_WORKERS", "3")]);
    assert!(out.contains("config: kind=Naive workers=3"), "{out}");
}

#[test]
fn invalid_environment_is_a_clear_error() {
    let out = child(&[("DEPENGINE_CPU_WORKERS", "many")]);
    assert!(out.contains("config error: invalid argument: DEPENGINE_CPU_WORKERS=\"many\""), "{out}");
    let out = child(&[("DEPENGINE_TYPE", "turbo")]);
    assert!(out.contains("expected `threaded` or `naive`"), "{out}");
    let out = child(&[("DEPENGINE_CPU_PRIORITY_WORKERS", "0")]);
    assert!(out.contains("DEPENGINE_CPU_PRIORITY_WORKERS must be at least 1"), "{out}");
}
