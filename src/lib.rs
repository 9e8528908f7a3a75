//! A dependency engine native to Tokio.
//!
//! State shared by operations lives in **vars**. An **op** is pushed with the
//! vars it reads and the vars it writes; ops that touch the same var take
//! effect in push order, reads between two writes run in parallel, and
//! everything that does not conflict runs in parallel on device-pinned
//! worker pools. The data lives in the var, and the only way to reach it is
//! the guard an op receives for what it declared, so a data race between
//! ops cannot be written.
//!
//! ```
//! # #[tokio::main]
//! # async fn main() -> depengine::Result<()> {
//! use depengine::Engine;
//!
//! let engine = Engine::new();
//! let x = engine.var(vec![1.0f32; 1 << 10]);
//! let s = engine.var(0.0f32);
//!
//! // A sync op on a CPU worker: a guard for each declared var.
//! let h = engine.op("sum").read(&x).write(&s).run(|(x,), (mut s,)| {
//!     *s = x.iter().sum();
//!     Ok(())
//! });
//! h.await?;
//!
//! // Ops return values; handles are futures.
//! let total = engine.op("get").read(&s).run(|(s,), ()| Ok(*s)).await?;
//! assert_eq!(total, 1024.0);
//!
//! // The var is an async gate too, ordered with ops by call time.
//! *s.write().await? *= 2.0;
//! engine.wait_for_var(&s).await?;
//! assert_eq!(*s.read().await?, 2048.0);
//! engine.wait_for_all().await?;
//! # Ok(()) }
//! ```
//!
//! # Safe by construction
//!
//! A read gives shared access, a write exclusive access; what an op did not
//! declare it cannot reach. Mutating through a read guard does not compile:
//!
//! ```compile_fail
//! let engine = depengine::Engine::new();
//! let v = engine.var(0u32);
//! engine.op("bad").read(&v).run(|(v,), ()| {
//!     *v += 1; // error: a ReadGuard gives only `&u32`
//!     Ok(())
//! });
//! ```
//!
//! Nor does putting data that cannot be shared between threads in a var:
//!
//! ```compile_fail
//! let engine = depengine::Engine::new();
//! let v = engine.var(std::rc::Rc::new(0u32)); // error: `Rc` is not `Send`
//! ```
//!
//! Nor does an op body that borrows from its caller's stack, since it may
//! run after the caller has returned:
//!
//! ```compile_fail
//! let engine = depengine::Engine::new();
//! let v = engine.var(0u32);
//! let local = 5u32;
//! engine.op("bad").write(&v).run(|(), (mut v,)| {
//!     *v = local; // error: the closure must be 'static
//!     Ok(())
//! });
//! # let _ = &local;
//! ```
//!
//! Declaring a var twice with a write is refused when the op is pushed
//! ([`Error::is_invalid_argument`]).
//!
//! # Where to start
//!
//! * [`Engine`]: make one with [`Engine::new`] or [`Engine::builder`], then
//!   [`var`](Engine::var) and [`op`](Engine::op); every op's handle is a
//!   future ([`OpHandle`]), with a blocking form for plain threads.
//! * [`scope()`]: vars over memory the caller owns, for the length of a scope
//!   (slices, chunks, the tiles of a matrix), as `std::thread::scope` does
//!   for threads.
//! * [`OpGroup`]: a request's ops (or a batch's) waited for, cancelled and
//!   counted as one; dropping it cancels what has not started.
//! * Watching it: [`Engine::metrics`] ([`metrics`]), [`Engine::profiler`]
//!   ([`profile`]), [`Engine::debug_pending`] ([`explain`]) for a hang.
//! * The package's README has the semantics in full (ordering, errors,
//!   cancellation, shutdown), the configuration table and the benchmarks.
//!
//! # Features
//!
//! None is on by default; each adds to the API, none changes what is there.
//!
//! | feature | what it adds |
//! |---|---|
//! | `cuda` | real GPUs through CUDA ([`gpu`]; the driver is loaded at run time, so it builds without CUDA installed). Without it, the same API runs on the simulated GPU ([`gpu::sim`]). |
//! | `mpi` | collectives across processes as engine ops, and tiles across ranks (`depengine::mpi`; needs an MPI installation and libclang to build). |
//! | `nccl` | GPU buffers reduced across ranks with NCCL (`cuda` and `mpi` too). |
//! | `prometheus-client` | the engine's metrics as a Prometheus collector (`depengine::prometheus`). |
//! | `tokio-util` | an op group cancelled with a `CancellationToken` (`OpGroup::tie`). |
//!
//! # Examples
//!
//! The package's `examples/` folder (its `README.md` lists each one):
//! tutorials (`quickstart`, a blocked matrix product whose tiles are vars;
//! `trace_chrome`, the engine's spans as a Chrome trace), demos (`cholesky`,
//! a tiled Cholesky over scoped tiles; `gpu_pipeline`; `cholesky_mpi` and
//! `data_parallel` under `mpirun`; an axum service in `examples/serve`) and
//! benchmark drivers. Run one with `cargo run --release --example NAME`.

// `unsafe` only in the leaf files that need it, each of which opens with
// `#![allow(unsafe_code)]`; `tests/check_architecture.rs` holds their list and
// fails when another file uses it.
#![deny(unsafe_code)]
// On the docs host, every item that needs a feature says which.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(clippy::undocumented_unsafe_blocks)]
#![deny(unreachable_pub)]
#![warn(missing_docs, missing_debug_implementations)]

// The layers, lowest first (`tests/check_architecture.rs` keeps them so: a
// module imports only from the layers before its own).
// 0: the error, devices and lanes, aligned memory.
pub mod aligned;
mod device;
mod error;
// 1: primitives, and what the engine reports.
pub mod explain;
mod may_block;
pub mod metrics;
pub mod profile;
mod sync;
// 2: GPU devices; vars.
pub mod gpu;
pub mod var;
// 3: op records.
mod op;
// 4: pools, workers, placement.
mod exec;
// 5: the engine.
pub mod engine;
// 6: what is built on the engine.
#[cfg(feature = "mpi")]
pub mod mpi;
#[cfg(feature = "prometheus-client")]
pub mod prometheus;
pub mod scope;

/// The sealed traits that describe what an op declares.
pub mod access {
    pub use crate::op::access::{Append, AsVar, Held, Item, Reading, Writing};
    #[doc(hidden)]
    pub use crate::op::access::{Decls, OpToken, VarToken};
}

/// The README's examples, compiled as doc tests so that they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// Ways a scope's memory once escaped it, which no longer compile.
///
/// An op built over a scoped var cannot be kept as a prepared op past the
/// scope (there are no prepared ops):
///
/// ```compile_fail
/// let engine = depengine::Engine::new();
/// let mut data = vec![0u8; 4];
/// let mut kept = None;
/// depengine::scope(&engine, |s| {
///     let v = s.slice(&mut data);
///     kept = Some(engine.op("k").write(&v).prepare().unwrap());
/// })
/// .unwrap();
/// ```
///
/// Nor built into a batch that nobody submits before a wait or a shutdown
/// (there are no batches):
///
/// ```compile_fail
/// let engine = depengine::Engine::new();
/// let v = engine.var(0u8);
/// let mut batch = depengine::engine::Batch::new(&engine);
/// engine.op("k").write(&v).run_in(&mut batch, |(), _| Ok(())).unwrap();
/// engine.wait_for_all().blocking_wait().unwrap();
/// ```
///
/// A scoped var's guard gives the elements, not the view that points at
/// them, so it cannot be moved out or assigned over:
///
/// ```compile_fail
/// let engine = depengine::Engine::new();
/// let (mut x, mut y) = (vec![0u8; 4], vec![0u8; 4]);
/// depengine::scope(&engine, |s| {
///     let (a, b) = (s.slice(&mut x), s.slice(&mut y));
///     engine.op("move").read(&a).write(&b).run(|(a,), (mut b,)| {
///         *b = *a; // error: `[u8]` is not sized
///         Ok(())
///     });
/// })
/// .unwrap();
/// ```
#[cfg(doctest)]
struct EscapesThatDoNotCompile;

pub use device::{Device, Lane};
pub use engine::OpHandle;
pub use engine::{Engine, EngineBuilder, OpGroup, ShutdownMode};
pub use error::{BoxError, Error, ErrorKind, Result};
pub use scope::scope;
pub use var::{AnyVar, ReadGuard, Var, WriteGuard};
