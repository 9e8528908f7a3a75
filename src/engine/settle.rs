//! Settling a builder's choices: each setting from the builder's call,
//! else (for a builder made by `EngineBuilder::from_env`) the environment's
//! `DEPENGINE_*` variable, else the default, each checked against its bound
//! (a bad value is an error that names it).

use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use super::config::*;
use super::recorder::{DEFAULT_KEEP, ENV_PROFILE, ENV_PROFILE_KEEP};
use crate::error::Error;
use crate::exec::{GpuSettings, ThreadHooks, Topology};

/// The environment variables read when a builder's choices are settled.
pub(crate) const ENV_TYPE: &str = "DEPENGINE_TYPE";
pub(crate) const ENV_CPU_WORKERS: &str = "DEPENGINE_CPU_WORKERS";
pub(crate) const ENV_PRIORITY_WORKERS: &str = "DEPENGINE_CPU_PRIORITY_WORKERS";
pub(crate) const ENV_BULK_SIZE: &str = "DEPENGINE_BULK_SIZE";
pub(crate) const ENV_SPIN_US: &str = "DEPENGINE_SPIN_US";
pub(crate) const ENV_GPU_SPIN_US: &str = "DEPENGINE_GPU_SPIN_US";
pub(crate) const ENV_GPU_WORKERS: &str = "DEPENGINE_GPU_WORKERS";
pub(crate) const ENV_GPU_COPY_WORKERS: &str = "DEPENGINE_GPU_COPY_WORKERS";
pub(crate) const ENV_SIM_GPUS: &str = "DEPENGINE_SIM_GPUS";
pub(crate) const ENV_MAX_IN_FLIGHT: &str = "DEPENGINE_MAX_IN_FLIGHT";
pub(crate) const ENV_METRICS_TIMING: &str = "DEPENGINE_METRICS_TIMING";
pub(crate) const ENV_WATCHDOG_MS: &str = "DEPENGINE_WATCHDOG_MS";
pub(crate) const ENV_TRACK_HOLDERS: &str = "DEPENGINE_TRACK_HOLDERS";
pub(crate) const ENV_PUSHER_RUNS_AT: &str = "DEPENGINE_PUSHER_RUNS_AT";
pub(crate) const ENV_THROTTLE_AT: &str = "DEPENGINE_THROTTLE_AT";

/// What a builder was told: each setting the program gave (`None`: left
/// to the environment and the default).
#[derive(Debug, Default)]
pub(super) struct Choices {
    pub(super) kind: Option<EngineKind>,
    pub(super) cpu_workers: Option<usize>,
    pub(super) priority_workers: Option<usize>,
    pub(super) cpu_devices: Option<usize>,
    pub(super) bulk_size: Option<usize>,
    pub(super) thread_name: Option<String>,
    pub(super) spin: Option<Duration>,
    pub(super) gpu_spin: Option<Duration>,
    pub(super) runtime: Option<tokio::runtime::Handle>,
    pub(super) gpu_workers: Option<usize>,
    pub(super) gpu_copy_workers: Option<usize>,
    pub(super) simulated_gpus: Option<usize>,
    pub(super) gpu_early_release: Option<bool>,
    pub(super) max_in_flight: Option<usize>,
    pub(super) throttle_at: Option<usize>,
    pub(super) metrics_timing: Option<bool>,
    pub(super) watchdog: Option<Duration>,
    pub(super) track_holders: Option<bool>,
    pub(super) pusher_runs_at: Option<usize>,
    pub(super) hooks: ThreadHooks,
    /// Made by `EngineBuilder::from_env`: settings left unset are read from
    /// the environment.
    pub(super) read_environment: bool,
}

/// The configuration an engine runs with, from the builder's `choices`,
/// else the environment, else the defaults, each checked against its
/// bound; and the runtime its future ops run on.
pub(super) fn settle(c: Choices, env: &Env) -> Result<(Config, Option<tokio::runtime::Handle>), Error> {
    if c.hooks.stack_size == Some(0) {
        return Err(Error::invalid("a worker thread's stack size must be above zero"));
    }
    let kind = match c.kind {
        Some(kind) => kind,
        None => env_kind(env)?.unwrap_or_default(),
    };
    // In the order each setting was always settled in, so that of two bad
    // values the same one is reported.
    let topology = topology(&c, env, kind)?;
    let bulk_size = setting(env, "bulk_size", c.bulk_size, ENV_BULK_SIZE, 1, usize::MAX)?;
    let max_in_flight = match c.max_in_flight {
        Some(given) => Some(in_bounds("max_in_flight", given, MAX_IN_FLIGHT).map_err(Error::invalid)?),
        None => env.count(ENV_MAX_IN_FLIGHT, MAX_IN_FLIGHT)?,
    };
    let throttle_at = count_from_zero(
        env,
        ("throttle_at", c.throttle_at),
        (ENV_THROTTLE_AT, "expected a count of ops, 0 for never"),
        DEFAULT_THROTTLE_AT,
        usize::MAX,
    )?;
    let config = Config {
        kind,
        topology,
        bulk_size,
        max_in_flight,
        throttle_at,
        watchdog: watchdog(env, c.watchdog)?,
        track_holders: flag(env, c.track_holders, ENV_TRACK_HOLDERS, true)?,
        profile_keep: env.count(ENV_PROFILE_KEEP, usize::MAX)?.unwrap_or(DEFAULT_KEEP),
        profile_to: env.path(ENV_PROFILE),
    };
    let runtime = c.runtime.or_else(|| tokio::runtime::Handle::try_current().ok());
    Ok((config, runtime))
}

/// The pools the engine may start, and their threads.
fn topology(c: &Choices, env: &Env, kind: EngineKind) -> Result<Topology, Error> {
    let cores = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    // One of several ranks of an MPI job on this machine: its share of the
    // cores, as each rank runs an engine of its own (ranks that all start
    // a worker per core oversubscribe the machine by as many times).
    let default_workers = (cores / env.local_ranks()).max(1);
    let workers = |what, given, name, default| setting(env, what, given, name, default, MAX_WORKERS);
    Ok(Topology {
        naive: kind == EngineKind::Naive,
        cpu_workers: workers("cpu_workers", c.cpu_workers, ENV_CPU_WORKERS, default_workers)?,
        priority_workers: workers("priority_workers", c.priority_workers, ENV_PRIORITY_WORKERS, 1)?,
        cpu_devices: setting(env, "cpu_devices", c.cpu_devices, "", 1, MAX_CPU_DEVICES)?,
        thread_name: thread_name(c.thread_name.clone())?,
        spin: spin(env, c.spin, ENV_SPIN_US, DEFAULT_SPIN)?,
        timing: flag(env, c.metrics_timing, ENV_METRICS_TIMING, false)?,
        pusher_runs_at: pusher_runs_at(env, c.pusher_runs_at)?,
        gpu: GpuSettings {
            workers: workers("gpu_workers", c.gpu_workers, ENV_GPU_WORKERS, 1)?,
            copy_workers: workers("gpu_copy_workers", c.gpu_copy_workers, ENV_GPU_COPY_WORKERS, 1)?,
            simulated: simulated_gpus(env, c.simulated_gpus)?,
            early_release: c.gpu_early_release.unwrap_or(true),
            spin: spin(env, c.gpu_spin, ENV_GPU_SPIN_US, DEFAULT_GPU_SPIN)?,
        },
        hooks: c.hooks.clone(),
    })
}

/// The watchdog's threshold: the builder's, else `DEPENGINE_WATCHDOG_MS`,
/// else none.
fn watchdog(env: &Env, given: Option<Duration>) -> Result<Option<Duration>, Error> {
    match given {
        Some(threshold) => Ok(Some(watchdog_bounded(threshold).map_err(Error::invalid)?)),
        None => env.get(ENV_WATCHDOG_MS, |raw| {
            let ms = raw
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("{ENV_WATCHDOG_MS}={raw:?}: expected a number of milliseconds"))?;
            watchdog_bounded(Duration::from_millis(ms))
                .map_err(|wrong| format!("{ENV_WATCHDOG_MS}={raw:?}: {wrong}"))
        }),
    }
}

/// A watchdog threshold, if it is above zero and within its bound.
fn watchdog_bounded(threshold: Duration) -> Result<Duration, String> {
    if threshold.is_zero() {
        return Err("the watchdog's threshold must be above zero".to_owned());
    }
    if threshold > MAX_WATCHDOG {
        return Err(format!("the watchdog's threshold {threshold:?} is past its bound of {MAX_WATCHDOG:?}"));
    }
    Ok(threshold)
}

/// Where a setting the builder left unset is read: the environment's
/// `DEPENGINE_*` variable, for a builder made by
/// [`EngineBuilder::from_env`] (`read`); else nowhere. A value that does
/// not parse, or is out of bounds, is an error of `build`; for
/// [`Engine::from_env`] (`lenient`) it is reported (a `tracing` warning,
/// target `depengine`) and the default is used instead.
pub(super) struct Env {
    pub(super) read: bool,
    pub(super) lenient: bool,
}

impl Env {
    /// Variable `name`, if set (and readable), parsed by `parse`, which
    /// says what is wrong with a bad value.
    fn get<T>(&self, name: &str, parse: impl FnOnce(&str) -> Result<T, String>) -> Result<Option<T>, Error> {
        if !self.read || name.is_empty() {
            return Ok(None);
        }
        let Some(raw) = std::env::var_os(name) else { return Ok(None) };
        // The one rule for empty values: an empty (or all-blank) variable
        // is as if it were not set, for every variable.
        if raw.to_str().is_some_and(|raw| raw.trim().is_empty()) {
            return Ok(None);
        }
        let parsed = match raw.to_str() {
            Some(raw) => parse(raw),
            None => Err(format!("{name}={raw:?}: not UTF-8 text")),
        };
        match parsed {
            Ok(value) => Ok(Some(value)),
            Err(wrong) if self.lenient => {
                tracing::warn!(target: "depengine", "{wrong}: ignored, the setting's default is used");
                Ok(None)
            }
            Err(wrong) => Err(Error::invalid(wrong)),
        }
    }

    /// A path from variable `name`, if set and not empty: any bytes the OS
    /// allows in a path, UTF-8 or not.
    fn path(&self, name: &str) -> Option<PathBuf> {
        if !self.read {
            return None;
        }
        std::env::var_os(name).filter(|p| !p.is_empty()).map(PathBuf::from)
    }

    /// How many ranks of an MPI job run on this machine, as the launcher
    /// says (Open MPI's `OMPI_COMM_WORLD_LOCAL_SIZE`, MPICH's
    /// `MPI_LOCALNRANKS`); 1 outside one, or if neither says.
    fn local_ranks(&self) -> usize {
        if !self.read {
            return 1;
        }
        ["OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"]
            .iter()
            .find_map(|name| std::env::var(name).ok()?.trim().parse::<usize>().ok())
            .unwrap_or(1)
            .max(1)
    }

    /// A count from variable `name`: from 1 to `max`.
    fn count(&self, name: &str, max: usize) -> Result<Option<usize>, Error> {
        self.get(name, |raw| {
            let value = raw
                .trim()
                .parse::<usize>()
                .map_err(|_| format!("{name}={raw:?}: expected a positive integer"))?;
            in_bounds(name, value, max)
        })
    }
}

/// `value`, if it is from 1 to `max`; else what is wrong, for `source`.
fn in_bounds(source: &str, value: usize, max: usize) -> Result<usize, String> {
    if value == 0 {
        return Err(format!("{source} must be at least 1"));
    }
    if value > max {
        return Err(format!("{source}={value} is past its bound of {max}"));
    }
    Ok(value)
}

/// A count that may be zero: the builder's `given` (named `what`), else
/// variable `name` (`expected` says what it should hold), else `default`;
/// at most `max`.
fn count_from_zero(
    env: &Env,
    (what, given): (&str, Option<usize>),
    (name, expected): (&str, &str),
    default: usize,
    max: usize,
) -> Result<usize, Error> {
    let bounded = |source: &str, n: usize| {
        if n > max { Err(format!("{source}={n} is past its bound of {max}")) } else { Ok(n) }
    };
    if let Some(n) = given {
        return bounded(what, n).map_err(Error::invalid);
    }
    let from_env = env.get(name, |raw| {
        let n = raw.trim().parse::<usize>().map_err(|_| format!("{name}={raw:?}: {expected}"))?;
        bounded(name, n)
    })?;
    Ok(from_env.unwrap_or(default))
}

fn pusher_runs_at(env: &Env, given: Option<usize>) -> Result<usize, Error> {
    let expected = "expected a count of ops, 0 for never";
    let max = MAX_WORKERS * 1024;
    count_from_zero(
        env,
        ("pusher_runs_at", given),
        (ENV_PUSHER_RUNS_AT, expected),
        DEFAULT_PUSHER_RUNS_AT,
        max,
    )
}

fn env_kind(env: &Env) -> Result<Option<EngineKind>, Error> {
    env.get(ENV_TYPE, |raw| match raw.trim().to_ascii_lowercase().as_str() {
        "threaded" | "threadedengineperdevice" => Ok(EngineKind::Threaded),
        "naive" | "naiveengine" => Ok(EngineKind::Naive),
        _ => Err(format!("{ENV_TYPE}={raw:?}: expected `threaded` or `naive`")),
    })
}

/// A spin budget: the builder's, else environment variable `name` (in
/// microseconds), else `default`; at most `MAX_SPIN`.
fn spin(env: &Env, given: Option<Duration>, name: &str, default: Duration) -> Result<Duration, Error> {
    if let Some(spin) = given {
        if spin > MAX_SPIN {
            return Err(Error::invalid(format!("spin {spin:?} is past its bound of {MAX_SPIN:?}")));
        }
        return Ok(spin);
    }
    let from_env = env.get(name, |raw| {
        let us = raw
            .trim()
            .parse::<u64>()
            .map_err(|_| format!("{name}={raw:?}: expected a number of microseconds"))?;
        let spin = Duration::from_micros(us);
        if spin > MAX_SPIN {
            return Err(format!("{name}={raw:?}: {spin:?} is past the bound of {MAX_SPIN:?}"));
        }
        Ok(spin)
    })?;
    Ok(from_env.unwrap_or(default))
}

/// A yes/no setting: the builder's, else environment variable `name`, else
/// `default`.
fn flag(env: &Env, given: Option<bool>, name: &str, default: bool) -> Result<bool, Error> {
    if let Some(on) = given {
        return Ok(on);
    }
    let from_env = env.get(name, |raw| match raw.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Ok(true),
        "0" | "false" | "off" | "no" => Ok(false),
        _ => Err(format!("{name}={raw:?}: expected 1 or 0")),
    })?;
    Ok(from_env.unwrap_or(default))
}

/// GPUs to simulate: the builder's, else `DEPENGINE_SIM_GPUS`, else 0.
fn simulated_gpus(env: &Env, given: Option<usize>) -> Result<usize, Error> {
    let expected = "expected a number of devices";
    count_from_zero(env, ("simulated_gpus", given), (ENV_SIM_GPUS, expected), 0, crate::gpu::MAX_GPU_DEVICES)
}

/// The thread name prefix, checked: the OS refuses a name with a NUL byte.
fn thread_name(given: Option<String>) -> Result<String, Error> {
    let name = given.unwrap_or_else(|| "depengine".to_owned());
    if name.contains('\0') {
        return Err(Error::invalid(format!("thread_name {name:?} contains a NUL byte")));
    }
    Ok(name)
}

/// A count: the builder's `given` value, else environment variable `name`
/// (none if empty), else `default`; from 1 to `max`.
fn setting(
    env: &Env,
    what: &str,
    given: Option<usize>,
    name: &str,
    default: usize,
    max: usize,
) -> Result<usize, Error> {
    match given {
        Some(value) => in_bounds(what, value, max).map_err(Error::invalid),
        None => Ok(env.count(name, max)?.unwrap_or(default)),
    }
}
