//! The service under a load in which half the clients hang up early
//! (`hangups.rs`), in one process on loopback; prints what happened and
//! exits non-zero if a promise of the request groups was broken.
//!
//! cargo run --release -p depengine-serve --bin hangups -- [SECONDS] [CLIENTS] [HANG_UP_WITHIN_MS]

use std::time::Duration;

use serve::hangups::{Load, run};
use serve::{App, Config};
use tokio::net::TcpListener;

#[tokio::main]
async fn main() {
    let mut args = std::env::args()
        .skip(1)
        .map(|a| a.parse::<u64>().expect("counts: SECONDS CLIENTS HANG_UP_WITHIN_MS"));
    let secs = args.next().unwrap_or(5);
    let clients = args.next().unwrap_or(64) as usize;
    let within = Duration::from_millis(args.next().unwrap_or(2));
    let app =
        App::new(&Config { thread_name: "hangups".into(), ..Config::default() }).expect("the engine builds");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let addr = listener.local_addr().expect("an address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(serve::serve(app.clone(), listener, async {
        let _ = stopped.await;
    }));
    let load = Load { clients, duration: Duration::from_secs(secs), hang_up_within: within };
    let report = tokio::time::timeout(load.duration + Duration::from_secs(60), run(&app, addr, &load))
        .await
        .expect("the load ended in time");
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(30), served).await;
    let mb = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "secs={secs} clients={clients} hang_up_within_ms={} answered_ok={} answered_other={} hung_up={} \
         cancelled_ops={} completed_ops={} entries={} appended={} unstaged={} rss_start_mb={:.1} rss_early_mb={:.1} \
         rss_peak_mb={:.1} rss_end_mb={:.1} less_journal_early_mb={:.2} less_journal_end_mb={:.2} left={:?} pending={}",
        within.as_millis(),
        report.answered_ok,
        report.answered_other,
        report.hung_up,
        report.cancelled_ops,
        report.completed_ops,
        report.journal.entries,
        report.journal.appended,
        report.journal.unstaged,
        mb(report.rss_start),
        mb(report.rss_early),
        mb(report.rss_peak),
        mb(report.rss_end),
        mb(report.rss_less_journal().0),
        mb(report.rss_less_journal().1),
        report.left,
        report.pending_explained,
    );
    let broken = report.broken(64 << 20);
    if !broken.is_empty() {
        eprintln!("broken: {broken:?}");
        std::process::exit(1);
    }
}
