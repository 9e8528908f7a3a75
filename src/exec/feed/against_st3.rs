//! The feed's ring against `st3`'s FIFO queue, the crate with the same
//! property (no read-modify-write on push): one owner pushes `n` ops, one
//! worker takes them, each in its own thread; run by hand (ignored), its
//! figures in PERFORMANCE.md, *Hand-made parts against the crates that do
//! the same job*.
//!
//! `DEPENGINE_FEED_N` ops (default 2,000,000) per run; `DEPENGINE_FEED_WHICH`
//! `ring`, `st3` or both in turn (default), `DEPENGINE_FEED_ROUNDS` rounds.
//! Both queues hold 1,024 ops; a full `st3` queue makes its owner retry (it
//! is bounded), a full ring spills (the feed's own behaviour). The worker
//! takes one op per claim (`take`; `steal_and_pop` of one), as a worker does
//! when few ops are queued, or up to eight (`take_some`; `steal_and_pop` of
//! up to eight, the rest popped from its own queue): `ring`, `st3`,
//! `ring8`, `st3_8`. `ring_alone` and `st3_alone` push a queue's length
//! and take it back on one thread, over and over: no contention and no
//! spinning, for instruction counts under callgrind.

use std::time::{Duration, Instant};

use super::*;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// One run of the ring, a claim per op: the time from the first push to
/// the last take.
fn ring(n: usize) -> Duration {
    ring_taking(n, 0)
}

/// One run of the ring, up to eight ops per claim (`take_some`).
fn ring_batch(n: usize) -> Duration {
    ring_taking(n, 7)
}

fn ring_taking(n: usize, more: usize) -> Duration {
    let (mut feed, taker) = Feed::new(Barriers::new());
    let start = Instant::now();
    let worker = std::thread::spawn(move || {
        let (mut seen, mut sum) = (0, 0usize);
        while seen < n {
            let mut add = |op: usize| {
                seen += 1;
                sum = sum.wrapping_add(op);
            };
            let first = if more == 0 { taker.take() } else { taker.take_some(more, &mut add) };
            match first {
                Some(op) => add(op),
                None => std::hint::spin_loop(),
            }
        }
        sum
    });
    for op in 0..n {
        feed.push(op).expect("a feed that is not retired");
    }
    let sum = worker.join().unwrap();
    assert_eq!(sum, (0..n).fold(0usize, usize::wrapping_add));
    start.elapsed()
}

/// One run of `st3`: the same, the worker stealing into a queue of its own,
/// one op per steal.
fn st3(n: usize) -> Duration {
    st3_taking(n, 1)
}

/// One run of `st3`, up to eight ops per steal (the rest popped from the
/// worker's own queue).
fn st3_batch(n: usize) -> Duration {
    st3_taking(n, 8)
}

fn st3_taking(n: usize, batch: usize) -> Duration {
    let owner = st3::fifo::Worker::<usize>::new(SLOTS);
    let stealer = owner.stealer();
    let start = Instant::now();
    let worker = std::thread::spawn(move || {
        let own = st3::fifo::Worker::<usize>::new(SLOTS);
        let (mut seen, mut sum) = (0, 0usize);
        while seen < n {
            match stealer.steal_and_pop(&own, |queued| queued.min(batch)) {
                Ok((op, _)) => {
                    seen += 1;
                    sum = sum.wrapping_add(op);
                    while let Some(op) = own.pop() {
                        seen += 1;
                        sum = sum.wrapping_add(op);
                    }
                }
                Err(_) => std::hint::spin_loop(),
            }
        }
        sum
    });
    for op in 0..n {
        let mut op = op;
        while let Err(back) = owner.push(op) {
            op = back;
            std::hint::spin_loop();
        }
    }
    let sum = worker.join().unwrap();
    assert_eq!(sum, (0..n).fold(0usize, usize::wrapping_add));
    start.elapsed()
}

/// The ring on one thread: a ring's length pushed, then taken, over and
/// over (no contention, no spin: for instruction counts).
fn ring_alone(n: usize) -> Duration {
    let (mut feed, taker) = Feed::new(Barriers::new());
    let start = Instant::now();
    let mut sum = 0usize;
    for round in 0..n / SLOTS {
        (0..SLOTS).for_each(|k| feed.push(round * SLOTS + k).expect("a feed that is not retired"));
        (0..SLOTS).for_each(|_| sum = sum.wrapping_add(taker.take().expect("an op")));
    }
    assert_eq!(sum, (0..n / SLOTS * SLOTS).fold(0usize, usize::wrapping_add));
    start.elapsed()
}

/// `st3` on one thread, likewise (a steal of one op each).
fn st3_alone(n: usize) -> Duration {
    let (owner, own) = (st3::fifo::Worker::<usize>::new(SLOTS), st3::fifo::Worker::<usize>::new(SLOTS));
    let stealer = owner.stealer();
    let start = Instant::now();
    let mut sum = 0usize;
    for round in 0..n / SLOTS {
        (0..SLOTS).for_each(|k| owner.push(round * SLOTS + k).expect("room"));
        (0..SLOTS).for_each(|_| sum = sum.wrapping_add(stealer.steal_and_pop(&own, |_| 1).expect("an op").0));
    }
    assert_eq!(sum, (0..n / SLOTS * SLOTS).fold(0usize, usize::wrapping_add));
    start.elapsed()
}

#[test]
#[ignore = "a measurement, run by hand"]
fn feed_against_st3() {
    let n = env("DEPENGINE_FEED_N", 2_000_000);
    let rounds = env("DEPENGINE_FEED_ROUNDS", 3);
    let which = std::env::var("DEPENGINE_FEED_WHICH").unwrap_or_default();
    for round in 1..=rounds {
        let runs = [
            ("ring", ring as fn(usize) -> Duration),
            ("st3", st3),
            ("ring8", ring_batch),
            ("st3_8", st3_batch),
            ("ring_alone", ring_alone),
            ("st3_alone", st3_alone),
        ];
        for (name, run) in runs {
            if which.is_empty() || which == name {
                let t = run(n);
                println!("round={round} queue={name} n={n} ns_per_op={:.2}", t.as_nanos() as f64 / n as f64);
            }
        }
    }
}
