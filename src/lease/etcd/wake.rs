//! Release wake-ups: a watch on the election's keys (`POST /v3/watch`, a
//! response that streams one JSON message per line); a `DELETE` of the
//! leader key (a release, or the holder's lease expiring or revoked)
//! starts an attempt. Only an optimisation: a lost wake-up costs latency,
//! never correctness. Each time the watch starts a wake-up is sent anyway,
//! since the key may have gone while it was not watching. The same watch
//! hears the holder's renewal notices (`BASE/renewed`), which standbys
//! answer their timed looks from ([`crate::lease::heard`], issue #47): one
//! stream, so a release comes after the renewals before it.

use super::client::{Client, b64, unb64};
use crate::lease::contract::Wakeups;
use crate::lease::heard::Heard;
use crate::lease::rewatch::{Failed, Watch};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What the watch covers, and where what it hears goes.
pub(super) struct Watched {
    pub leader: String,
    pub renewed: String,
    /// The election's range (its leader, term, release and renewal keys).
    pub from: String,
    pub to: String,
    pub heard: Heard,
}

pub(super) fn watch(client: Client, watched: Watched, wakeups: Wakeups) -> JoinHandle<()> {
    let server = client.shown.clone();
    let state = (client, watched, wakeups.notices.clone());
    crate::lease::rewatch::spawn(state, server, &wakeups, |(c, w, n)| {
        Box::pin(async move {
            let outcome = follow(c, w, n).await;
            w.heard.set_live(false);
            // Ended or failed: the next watch goes to the next member.
            c.next_endpoint();
            outcome
        })
    })
}

/// Watches until the stream ends (`Again`) or nobody listens (`Stop`).
async fn follow(
    client: &mut Client,
    watched: &Watched,
    notices: &mpsc::UnboundedSender<()>,
) -> Result<Watch, Failed> {
    let endpoint = client.current_endpoint();
    let auth = client.auth_header(&endpoint).await.map_err(Failed::from)?;
    let url = endpoint.join("v3/watch").expect("a valid path");
    let body = json!({ "create_request": {
        "key": b64(watched.from.as_bytes()),
        "range_end": b64(watched.to.as_bytes()),
    } });
    let mut request = client
        .http()
        .post(url)
        .header("Content-Type", "application/json")
        .body(body.to_string());
    if let Some(token) = auth {
        request = request.header("Authorization", token);
    }
    let timeout = client.config.timeout;
    let mut response = tokio::time::timeout(timeout, request.send())
        .await
        .map_err(|_| Failed::from("no answer to the watch request".to_string()))?
        .map_err(|e| Failed::from(e.to_string()))?;
    if !response.status().is_success() {
        let status = response.status();
        return Err(Failed {
            text: format!("the watch was refused: HTTP {status}"),
            refused: matches!(status.as_u16(), 401 | 403),
        });
    }
    let mut pending = Vec::new();
    let mut created = false;
    loop {
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return Ok(Watch::Again),
            Err(e) => return Err(e.to_string().into()),
        };
        pending.extend_from_slice(&chunk);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let Ok(message) = serde_json::from_slice::<Value>(&line) else {
                continue;
            };
            if let Some(error) = message.get("error") {
                return Err(Failed {
                    refused: error.to_string().contains("permission denied"),
                    text: format!("the watch failed: {error}"),
                });
            }
            let result = &message["result"];
            if result["created"].as_bool() == Some(true) && !created {
                created = true;
                watched.heard.set_live(true);
                // Watching now: catch up on a release it may have missed.
                if notices.send(()).is_err() {
                    return Ok(Watch::Stop);
                }
            }
            if result["canceled"].as_bool() == Some(true) {
                return Ok(Watch::Again);
            }
            let mut deleted = false;
            for event in result["events"].as_array().into_iter().flatten() {
                let key = unb64(event["kv"]["key"].as_str().unwrap_or(""));
                let delete = event["type"] == "DELETE";
                if key == watched.leader.as_bytes() && delete {
                    watched.heard.released();
                    deleted = true;
                } else if key == watched.renewed.as_bytes() && !delete {
                    let value = unb64(event["kv"]["value"].as_str().unwrap_or(""));
                    let notice = crate::lease::heard::parse(&String::from_utf8_lossy(&value));
                    if let Some((token, ms, id)) = notice {
                        watched.heard.renewed(token, ms, id, Instant::now(), 0);
                    }
                }
            }
            if deleted && notices.send(()).is_err() {
                return Ok(Watch::Stop);
            }
        }
    }
}
