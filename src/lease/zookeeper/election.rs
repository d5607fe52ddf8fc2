//! The recipe's steps on the store: a place in the queue (found again by
//! our mark, never two), an acquisition that begins a term only first in
//! line, and a release that leaves nothing of ours standing.

use super::ZkLease;
use super::session::{Failure, Session, ZK};
use crate::lease::contract::{Acquire, Error, Holder};
use tokio::time::Instant;
use zookeeper_client::CreateMode;

impl ZkLease {
    /// Our queue node: the one this session already has (found by our mark
    /// after a lost answer too), or a new one. Leftovers of ours beyond the
    /// first are deleted, so we never wait on ourselves.
    ///
    /// The queue returned is always listed after our node exists. A listing
    /// taken before we queued misses whoever queued between the two calls,
    /// ahead of us: we would count ourselves first, take a lease while the
    /// true first in line waits on it, and both would work once it vanished
    /// (CI saw it: two children for 12 ms after a lease node was deleted).
    pub(super) async fn queue(&mut self, s: &Session) -> Result<Vec<String>, Failure> {
        loop {
            let children = match s.call(&self.base, s.client.list_children(&self.base)).await {
                Err(Failure::NoNode) => {
                    s.parents(&self.base).await.map_err(Failure::Other)?;
                    Vec::new()
                }
                other => other?,
            };
            let mut queue = sorted(&children);
            let ours: Vec<String> = queue
                .iter()
                .filter(|n| n.starts_with(&self.mark))
                .cloned()
                .collect();
            if ours.is_empty() {
                let path = format!("{}/{}", self.base, self.mark);
                let options = s.options(CreateMode::EphemeralSequential);
                s.call(&path, s.client.create(&path, &self.data(), &options))
                    .await?;
                continue;
            }
            for extra in ours.iter().skip(1) {
                let path = format!("{}/{extra}", self.base);
                match s.call(&path, s.client.delete(&path, None)).await {
                    Ok(()) | Err(Failure::NoNode) => queue.retain(|n| n != extra),
                    Err(f) => return Err(f),
                }
            }
            self.queued = ours.into_iter().next();
            return Ok(queue);
        }
    }

    pub(super) async fn try_acquire(
        &mut self,
        s: &Session,
        sent_at: Instant,
    ) -> Result<Acquire, Failure> {
        let leader = self.leader.clone();
        // Our place first: the rest depends on whether we are first in line.
        let queue = self.queue(s).await?;
        let mine = self.queued.clone().expect("queued");
        let at = queue
            .iter()
            .position(|n| *n == mine)
            .expect("ours is listed");
        let mut held = None;
        match s.call(&leader, s.client.get_data(&leader)).await {
            // A lease node of ours (a won attempt whose answer was lost, or
            // a term whose work stopped). First in line, it is taken again
            // as a new term, by a write that gives it a new zxid. Not first
            // (our queue node went and came back behind others), it must
            // go: the one first in line would take the lease the moment it
            // vanished, and a term of ours on it would be working beside.
            Ok((data, stat)) if stat.ephemeral_owner == s.id() => {
                if at == 0 {
                    let write = s.client.set_data(&leader, &data, Some(stat.version));
                    match s.call(&leader, write).await {
                        Ok(stat) => {
                            self.aim_as_leader(s);
                            return Ok(self.won(&stat, sent_at));
                        }
                        Err(Failure::NoNode | Failure::BadVersion) => {}
                        Err(f) => return Err(f),
                    }
                } else {
                    let delete = s.client.delete(&leader, Some(stat.version));
                    match s.call(&leader, delete).await {
                        Ok(()) | Err(Failure::NoNode | Failure::BadVersion) => {}
                        Err(f) => return Err(f),
                    }
                }
            }
            Ok((_, stat)) if stat.ephemeral_owner == 0 => return Err(self.blocked()),
            Ok((data, stat)) => held = Some(self.holder(&data, &stat)),
            Err(Failure::NoNode) => {}
            Err(f) => return Err(f),
        }
        let nobody = Holder {
            id: None,
            fencing_token: None,
        };
        if at > 0 {
            // Wait on the one before us only.
            self.aim_at(s, Some(format!("{}/{}", self.base, queue[at - 1])));
            return Ok(Acquire::Held {
                holder: held.unwrap_or(nobody),
                expires_in: Some(self.timing.ttl),
            });
        }
        let options = s.options(CreateMode::Ephemeral);
        let create = s.client.create(&leader, &self.data(), &options);
        match s.call(&leader, create).await {
            Ok((stat, _)) => {
                self.aim_as_leader(s);
                Ok(self.won(&stat, sent_at))
            }
            Err(Failure::NodeExists) => {
                // First in the queue, yet the lease stands: its holder left
                // the queue (its node deleted from outside) and may still
                // work. Wait for the lease node itself.
                self.aim_at(s, Some(leader.clone()));
                let holder = match s.call(&leader, s.client.get_data(&leader)).await {
                    Ok((_, stat)) if stat.ephemeral_owner == 0 => return Err(self.blocked()),
                    Ok((data, stat)) => self.holder(&data, &stat),
                    Err(_) => nobody,
                };
                Ok(Acquire::Held {
                    holder,
                    expires_in: Some(self.timing.ttl),
                })
            }
            Err(f) => Err(f),
        }
    }

    /// A lease node that no session owns never expires: leaderd never
    /// deletes it.
    fn blocked(&self) -> Failure {
        Failure::Other(Error::Blocked {
            backend: ZK.into(),
            key: self.leader.clone(),
            what: "a persistent node (no session owns it), which never expires".into(),
            fix: format!(
                "If nothing of yours wrote it, delete it: zkCli.sh -server HOST:PORT delete {}",
                self.leader
            ),
        })
    }

    /// Deletes every lease node of this session's, whichever term it
    /// began (a won attempt whose answer was lost included), and our queue
    /// node: a release leaves nothing of ours standing. `true`: a lease
    /// node of ours was deleted.
    pub(super) async fn let_go(&mut self, s: &Session) -> Result<bool, Failure> {
        let leader = self.leader.clone();
        let mut released = false;
        // Twice at most: a write from outside between the read and the
        // delete changes the version.
        for _ in 0..2 {
            let version = match s.call(&leader, s.client.get_data(&leader)).await {
                Ok((_, stat)) if stat.ephemeral_owner == s.id() => stat.version,
                Ok(_) | Err(Failure::NoNode) => break,
                Err(f) => return Err(f),
            };
            let deleted = match self.queued.clone() {
                // In one transaction with our queue node: the next in line
                // is woken by a lease that is free.
                Some(q) => {
                    let mut txn = s.client.new_multi_writer();
                    let queued = format!("{}/{q}", self.base);
                    if txn
                        .add_delete(&leader, Some(version))
                        .and_then(|()| txn.add_delete(&queued, None))
                        .is_err()
                    {
                        return Err(Failure::Other(Error::Unexpected {
                            backend: ZK.into(),
                            detail: "a release transaction could not be built".into(),
                        }));
                    }
                    let commit =
                        async { txn.commit().await.map_err(zookeeper_client::Error::from) };
                    match s.call(&leader, commit).await {
                        Ok(_) => {
                            self.queued = None;
                            Ok(())
                        }
                        // Our queue node deleted from outside: the lease
                        // node alone.
                        Err(Failure::NoNode) => {
                            self.queued = None;
                            s.call(&leader, s.client.delete(&leader, Some(version)))
                                .await
                        }
                        Err(f) => Err(f),
                    }
                }
                None => {
                    s.call(&leader, s.client.delete(&leader, Some(version)))
                        .await
                }
            };
            match deleted {
                Ok(()) => {
                    released = true;
                    break;
                }
                Err(Failure::NoNode) => break,
                Err(Failure::BadVersion) => continue,
                Err(f) => return Err(f),
            }
        }
        // Leaving the queue too: a standby on its way out must not hold up
        // the ones behind it for a session timeout.
        self.leave(s).await?;
        Ok(released)
    }

    /// Deletes our queue node (and with it our place).
    pub(super) async fn leave(&mut self, s: &Session) -> Result<(), Failure> {
        if let Some(q) = self.queued.take() {
            let path = format!("{}/{q}", self.base);
            match s.call(&path, s.client.delete(&path, None)).await {
                Ok(()) | Err(Failure::NoNode) => {}
                Err(f) => {
                    self.queued = Some(q);
                    return Err(f);
                }
            }
        }
        Ok(())
    }
}

/// The candidate id in a node's data (`{"id": "…"}`).
pub(super) fn id_in(data: &[u8]) -> Option<String> {
    serde_json::from_slice::<serde_json::Value>(data)
        .ok()
        .and_then(|v| v["id"].as_str().map(str::to_string))
}

/// Queue nodes (`c-…-SEQ`) in the order they lead: by sequence.
pub(super) fn sorted(children: &[String]) -> Vec<String> {
    let seq = |n: &String| {
        n.rsplit('-')
            .next()
            .and_then(|s| s.parse::<i64>().ok())
            .unwrap_or(i64::MAX)
    };
    let mut queue: Vec<String> = children
        .iter()
        .filter(|n| n.starts_with("c-"))
        .cloned()
        .collect();
    queue.sort_by_key(seq);
    queue
}
