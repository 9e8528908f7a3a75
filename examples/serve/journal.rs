//! `POST /journal?x=`: a request of two dependent ops in one op group, the
//! shape of a request that validates its input and then commits it. The
//! first op (`stage`) writes the request's own var; the second (`append`)
//! reads it and appends an entry to the journal, a var every request
//! writes. Both join the request's group: a client that hangs up drops the
//! handler, whose group cancels the request's ops that have not started;
//! a request that times out cancels them too. A cancelled `append` never
//! appends, and an `append` never runs without its `stage` (it counts the
//! case, which must stay at zero).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use depengine::{Engine, Var};
use serde::{Deserialize, Serialize};

use crate::{App, error_response};

/// The journal: its entries and what its ops counted.
pub struct Journal {
    entries: Var<Vec<Entry>>,
    counters: Arc<Counters>,
    /// How long an `append` takes besides appending: a stand-in for a
    /// durable write, so that requests queue on the journal under load.
    work: Duration,
}

#[derive(Default)]
struct Counters {
    /// `append` bodies that appended.
    appended: AtomicU64,
    /// `append` bodies that found no staged value (must stay 0).
    unstaged: AtomicU64,
}

/// One journal entry.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub x: f32,
    pub staged: f32,
}

/// The answer to a journal request: the entry's place in the journal.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Appended {
    pub index: usize,
}

/// What the journal's ops counted, and its length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JournalCounts {
    pub entries: usize,
    pub appended: u64,
    pub unstaged: u64,
}

impl Journal {
    pub(crate) fn new(engine: &Engine, work: Duration) -> Self {
        Self { entries: engine.var_named("journal", Vec::new()), counters: Arc::default(), work }
    }

    /// Its counts, once the ops before this call have written.
    pub async fn counts(&self) -> depengine::Result<JournalCounts> {
        let entries = self.entries.read().await?.len();
        let c = &self.counters;
        let (appended, unstaged) = (c.appended.load(Ordering::SeqCst), c.unstaged.load(Ordering::SeqCst));
        Ok(JournalCounts { entries, appended, unstaged })
    }
}

#[derive(Deserialize)]
pub(crate) struct JournalQuery {
    x: f32,
}

pub(crate) async fn journal(State(app): State<App>, Query(q): Query<JournalQuery>) -> Response {
    let Some(journal) = app.journal() else {
        return (StatusCode::NOT_IMPLEMENTED, "the journal is served by the engine variants\n")
            .into_response();
    };
    if !q.x.is_finite() {
        return (StatusCode::BAD_REQUEST, "x must be a finite number\n").into_response();
    }
    let engine = app.engine();
    // Dropped with this handler (a client hang-up drops it): the request's
    // ops that have not started are cancelled then.
    let request = engine.group("journal");
    let staged = engine.var(None::<f32>);
    let x = q.x;
    let stage = engine.op("stage").group(&request).write(&staged).run_detached(move |(), (mut s,)| {
        *s = Some(x * 2.0);
        Ok(())
    });
    if let Err(err) = stage {
        return error_response(&err);
    }
    let (counters, work) = (journal.counters.clone(), journal.work);
    let append = engine.op("append").group(&request).read(&staged).write(&journal.entries).run(
        move |(staged,), (mut entries,)| {
            if !work.is_zero() {
                std::thread::sleep(work);
            }
            let Some(staged) = *staged else {
                counters.unstaged.fetch_add(1, Ordering::SeqCst);
                return Err("appended without its stage".into());
            };
            entries.push(Entry { x, staged });
            counters.appended.fetch_add(1, Ordering::SeqCst);
            Ok(entries.len() - 1)
        },
    );
    match tokio::time::timeout(app.request_timeout(), append).await {
        Ok(Ok(index)) => Json(Appended { index }).into_response(),
        Ok(Err(err)) => error_response(&err),
        Err(_) => {
            request.cancel();
            (StatusCode::GATEWAY_TIMEOUT, "the request timed out; what had not started was cancelled\n")
                .into_response()
        }
    }
}
