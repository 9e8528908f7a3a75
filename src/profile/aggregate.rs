//! MXNet's aggregate statistics: per op name, how many ran and how long.

use std::collections::HashMap;
use std::fmt::Write;
use std::time::Duration;

use super::Profile;

/// The statistics of one op name.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Aggregate {
    /// The op name.
    pub name: String,
    /// Ops of that name in the profile.
    pub count: u64,
    /// Those whose body ran (the others were skipped or cancelled).
    pub ran: u64,
    /// Run time of the bodies, added up.
    pub total: Duration,
    /// The shortest run.
    pub min: Duration,
    /// The mean run.
    pub mean: Duration,
    /// The longest run.
    pub max: Duration,
    /// Mean wait, ready, for a thread.
    pub mean_queue_wait: Duration,
}

pub(super) fn compute(profile: &Profile) -> Vec<Aggregate> {
    struct Acc {
        count: u64,
        ran: u64,
        total: u64,
        min: u64,
        max: u64,
        waited: u64,
        waits: u64,
    }
    let mut by_name: HashMap<&str, Acc> = HashMap::new();
    for op in profile.ops() {
        let acc = by_name.entry(&op.name).or_insert(Acc {
            count: 0,
            ran: 0,
            total: 0,
            min: u64::MAX,
            max: 0,
            waited: 0,
            waits: 0,
        });
        acc.count += 1;
        if let Some(run) = op.run_ns() {
            acc.ran += 1;
            acc.total += run;
            acc.min = acc.min.min(run);
            acc.max = acc.max.max(run);
        }
        if let Some(wait) = op.queue_wait_ns() {
            acc.waited += wait;
            acc.waits += 1;
        }
    }
    let mut rows: Vec<Aggregate> = by_name
        .into_iter()
        .map(|(name, a)| Aggregate {
            name: name.to_owned(),
            count: a.count,
            ran: a.ran,
            total: Duration::from_nanos(a.total),
            min: Duration::from_nanos(if a.ran == 0 { 0 } else { a.min }),
            mean: Duration::from_nanos(a.total.checked_div(a.ran).unwrap_or(0)),
            max: Duration::from_nanos(a.max),
            mean_queue_wait: Duration::from_nanos(a.waited.checked_div(a.waits).unwrap_or(0)),
        })
        .collect();
    rows.sort_by(|a, b| b.total.cmp(&a.total).then_with(|| a.name.cmp(&b.name)));
    rows
}

/// The widest name column of a table: longer names are cut, with `…`.
const NAME_WIDTH: usize = 60;

/// `name` in a column of `width` characters.
fn cell(name: &str, width: usize) -> String {
    let mut out: String = name.chars().take(width).collect();
    if name.chars().count() > width {
        out.pop();
        out.push('…');
    }
    let pad = width - out.chars().count();
    out.extend(std::iter::repeat_n(' ', pad));
    out
}

pub(super) fn table(rows: &[Aggregate]) -> String {
    let width = rows.iter().map(|r| r.name.chars().count()).max().unwrap_or(4).clamp(4, NAME_WIDTH);
    let mut out = format!(
        "{} {:>8} {:>8} {:>12} {:>10} {:>10} {:>10} {:>12}\n",
        cell("name", width),
        "count",
        "ran",
        "total µs",
        "min µs",
        "mean µs",
        "max µs",
        "mean wait µs"
    );
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    for r in rows {
        let _ = writeln!(
            out,
            "{} {:>8} {:>8} {:>12.1} {:>10.1} {:>10.1} {:>10.1} {:>12.1}",
            cell(&r.name, width),
            r.count,
            r.ran,
            us(r.total),
            us(r.min),
            us(r.mean),
            us(r.max),
            us(r.mean_queue_wait)
        );
    }
    out
}

#[cfg(test)]
mod tests;
