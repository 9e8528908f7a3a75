//! What the benches share: the engines they compare and a small criterion
//! configuration (CI only builds the benches; a full run takes minutes).

#![allow(dead_code)] // each bench uses part of this

use std::time::Duration;

use criterion::Criterion;
use depengine::Engine;
use depengine::engine::EngineKind;

/// Ops per iteration of the throughput benches.
pub const OPS: u64 = 1000;

/// The threaded engine (default configuration) and the naive one.
pub fn engines() -> Vec<(&'static str, Engine)> {
    vec![
        (
            "threaded",
            depengine::EngineBuilder::from_env().kind(EngineKind::Threaded).build().expect("engine"),
        ),
        ("naive", depengine::EngineBuilder::from_env().kind(EngineKind::Naive).build().expect("engine")),
    ]
}

pub fn config() -> Criterion {
    Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3))
}

/// The hash of docs/benchmarks.md: a body that depends on its inputs and order.
pub fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
