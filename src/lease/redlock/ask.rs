//! How a Redlock operation asks the masters' tasks ([`super::master`]) and
//! gathers their answers until the rule of [`super::enough`] says it may
//! decide (a win at a quorum, anything else on every answer, within two
//! node timeouts); answers that come after their operation decided are
//! taken in by the next one.

use super::Redlock;
use super::enough::{self, Heard, Until};
use super::master::Answered;
use crate::lease::contract::Error;
use crate::lease::redis::script::{Reply, parse_reply};
use redis::{Cmd, Value};
use tokio::time::Instant;

impl Redlock {
    /// Sends `call` to every master at once; see [`Redlock::ask`].
    pub(super) async fn on_all(&mut self, call: &Cmd, until: Until) -> Vec<Result<Value, Error>> {
        let every = vec![true; self.nodes.len()];
        self.ask(call, &every, until).await
    }

    /// Sends `call` to the masters marked in `on` and gathers their answers
    /// until `until` says the operation may decide, or for two
    /// node timeouts (one for a request of an earlier operation still ahead
    /// in a slow master's queue, one for this one). A master not heard from
    /// by then counts as timed out; its answer is read later by
    /// [`Redlock::hear`].
    pub(super) async fn ask(
        &mut self,
        call: &Cmd,
        on: &[bool],
        until: Until,
    ) -> Vec<Result<Value, Error>> {
        let calls: Vec<Option<&Cmd>> = on.iter().map(|on| on.then_some(call)).collect();
        self.ask_each(&calls, until).await
    }

    /// [`Redlock::ask`] with a call of its own for each master (`None`:
    /// that master is not asked).
    pub(super) async fn ask_each(
        &mut self,
        calls: &[Option<&Cmd>],
        until: Until,
    ) -> Vec<Result<Value, Error>> {
        self.op += 1;
        let deadline = Instant::now() + self.node_timeout * 2;
        let mut replies: Vec<Option<Result<Value, Error>>> = calls.iter().map(|_| None).collect();
        let mut heard: Vec<Heard> = calls
            .iter()
            .map(|c| {
                if c.is_some() {
                    Heard::Pending
                } else {
                    Heard::NotAsked
                }
            })
            .collect();
        for (node, call) in self.nodes.iter().zip(calls) {
            if let Some(call) = call {
                node.send(self.op, call, Some(deadline));
            }
        }
        let cold = self.cold();
        while !enough::enough(&heard, until, self.quorum) {
            let Ok(Some(answer)) = tokio::time::timeout_at(deadline, self.answers.recv()).await
            else {
                break;
            };
            let Some(reply) = self.hear(answer, self.op) else {
                continue;
            };
            let (i, reply) = reply;
            // A restarted master's "ours" is no vote (see `acquire`).
            let vote = cold[i].is_none()
                && matches!(&reply, Ok(Value::Array(v)) if v.first() == Some(&Value::Int(1)));
            heard[i] = if vote { Heard::Vote } else { Heard::Other };
            replies[i] = Some(reply);
        }
        replies
            .into_iter()
            .zip(&self.nodes)
            .map(|(reply, node)| {
                reply.unwrap_or_else(|| {
                    Err(Error::Timeout {
                        backend: node.url.clone(),
                        timeout: self.node_timeout,
                    })
                })
            })
            .collect()
    }

    /// Sends `call` to the masters marked in `on` without waiting: each
    /// runs it after what it was sent before; their answers are heard
    /// later.
    pub(super) fn tell(&mut self, call: &Cmd, on: &[bool]) {
        self.op += 1;
        for (node, _) in self.nodes.iter().zip(on).filter(|(_, on)| **on) {
            node.send(self.op, call, None);
        }
    }

    /// Takes in what a master's answer says of it (started, answering, a
    /// higher token seen), and returns it when it belongs to operation
    /// `collecting` (0: none), the one gathering answers now.
    fn hear(&mut self, answer: Answered, collecting: u64) -> Option<(usize, Result<Value, Error>)> {
        let i = answer.master;
        self.started[i] = answer.started;
        let reply = answer.result?;
        self.answering[i] = reply.is_ok();
        if answer.op != collecting
            && answer.op == self.renewal
            && let Ok(value) = &reply
            && let Ok(Reply::Ours(restored)) = parse_reply(value, "")
            && restored > 0
        {
            tracing::info!(
                master = %self.nodes[i].url,
                "the lease was gone from a master that answered the renewal late (restarted empty, or the key expired early); re-created it there"
            );
        }
        if let Ok(value) = &reply
            && let Ok(Reply::Held(Some(holder), _)) = parse_reply(value, "")
            && let Some(seen) = holder.fencing_token
        {
            self.highest_fencing = self.highest_fencing.max(seen);
        }
        (answer.op == collecting).then_some((i, reply))
    }

    /// Reads the answers that came in since the last operation, so that
    /// what they say counts for the next one.
    pub(super) fn hear_late(&mut self) {
        while let Ok(answer) = self.answers.try_recv() {
            self.hear(answer, 0);
        }
    }
}
