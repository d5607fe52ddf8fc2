//! `GET /leader/events`: Server-Sent Events. Every event carries `id:` (the
//! transition's sequence number) and the first one `retry:`; a client that
//! comes back with `Last-Event-ID` gets the transitions it missed while they
//! are still kept, else the current state afresh. On shutdown the stream
//! ends with `event: shutdown` (the state after the release) and closes, so
//! subscribers never hold leaderd's exit up.

use super::{Ctx, HttpContext, view};
use crate::status::Change;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures_util::{Stream, StreamExt, stream};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

/// How long a client waits before reconnecting (the SSE `retry:` field).
const RETRY: Duration = Duration::from_secs(1);

pub async fn events(
    State(s): Ctx,
    headers: HeaderMap,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let subscription = s.changes.subscribe(after);
    let mut first: Vec<SseEvent> = match subscription.missed {
        Some(missed) => missed.iter().map(|c| sse_event(c.event, c)).collect(),
        None => {
            let mut now = Change::now(&view(&s), None, None);
            now.seq = subscription.last_seq;
            vec![sse_event("state", &now)]
        }
    };
    // `retry:` with the first event, or alone when nothing was missed.
    match first.first_mut() {
        Some(event) => *event = std::mem::take(event).retry(RETRY),
        None => first.push(SseEvent::default().retry(RETRY)),
    }
    let head = stream::iter(first.into_iter().map(Ok));
    let rest = stream::unfold(Some((subscription.live, s.clone())), |state| async move {
        let (mut live, s) = state?;
        loop {
            tokio::select! {
                received = live.recv() => match received {
                    Ok(change) => {
                        return Some((Ok(sse_event(change.event, &change)), Some((live, s))));
                    }
                    // A slow reader missed some; carry on with the next.
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                _ = s.stop.cancelled() => return Some((Ok(farewell(&s)), None)),
            }
        }
    });
    Sse::new(head.chain(rest)).keep_alive(KeepAlive::default())
}

/// The last event of every stream.
fn farewell(s: &Arc<HttpContext>) -> SseEvent {
    let now = Change::now(&view(s), None, Some("leaderd stopped"));
    sse_event("shutdown", &now)
}

fn sse_event(name: &str, change: &Change) -> SseEvent {
    let event = SseEvent::default()
        .event(name)
        .data(serde_json::to_string(change).expect("plain struct serialises"));
    // No id for what is not in the sequence (the farewell): a client keeps
    // the last one it saw.
    match change.seq {
        0 => event,
        seq => event.id(seq.to_string()),
    }
}
