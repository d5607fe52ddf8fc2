//! The candidates registry on ZooKeeper: an ephemeral node per candidate
//! under `PREFIX/KEY#candidates`, holding its record, so it lives exactly as
//! long as the candidate's session (no clocks involved). A registration
//! writes ours only when it changed or our session is new, then lists the
//! directory and reads each record.

use super::session::{Failure, Session};
use crate::lease::registry::{Record, parse_all};
use zookeeper_client::CreateMode;

pub(super) struct Registry {
    dir: String,
    mine: String,
    /// What we last wrote, and in which session (a new session's node is
    /// gone with the old one).
    written: Option<(i64, Vec<u8>)>,
}

impl Registry {
    /// `nonce`: this process's own, so a candidate started again under the
    /// same id never takes over the node of the one before it.
    pub(super) fn new(base: &str, nonce: &str) -> Registry {
        let dir = format!("{base}#candidates");
        Registry {
            mine: format!("{dir}/r-{nonce}"),
            dir,
            written: None,
        }
    }

    pub(super) async fn register(
        &mut self,
        s: &Session,
        me: Option<&Record>,
    ) -> Result<Vec<Record>, Failure> {
        match me {
            None => {
                self.written = None;
                match s.call(&self.mine, s.client.delete(&self.mine, None)).await {
                    Ok(()) | Err(Failure::NoNode) => {}
                    Err(f) => return Err(f),
                }
            }
            Some(record) => {
                let data = serde_json::to_vec(record).expect("a record always serialises");
                let current = Some((s.id(), data.clone()));
                if self.written != current {
                    self.write(s, &data).await?;
                    self.written = current;
                }
            }
        }
        self.read(s).await
    }

    async fn write(&self, s: &Session, data: &[u8]) -> Result<(), Failure> {
        let set = s.client.set_data(&self.mine, data, None);
        match s.call(&self.mine, set).await {
            Ok(_) => return Ok(()),
            Err(Failure::NoNode) => {}
            Err(f) => return Err(f),
        }
        let options = s.options(CreateMode::Ephemeral);
        let create = s.client.create(&self.mine, data, &options);
        match s.call(&self.mine, create).await {
            Ok(_) => Ok(()),
            Err(Failure::NoNode) => {
                s.parents(&self.dir).await.map_err(Failure::Other)?;
                let create = s.client.create(&self.mine, data, &options);
                s.call(&self.mine, create).await.map(|_| ())
            }
            Err(f) => Err(f),
        }
    }

    /// Every record under the directory.
    pub(super) async fn read(&self, s: &Session) -> Result<Vec<Record>, Failure> {
        let children = match s.call(&self.dir, s.client.list_children(&self.dir)).await {
            Ok(children) => children,
            Err(Failure::NoNode) => return Ok(Vec::new()),
            Err(f) => return Err(f),
        };
        let mut texts = Vec::new();
        for name in children {
            let path = format!("{}/{name}", self.dir);
            match s.call(&path, s.client.get_data(&path)).await {
                Ok((data, _)) => texts.push(data),
                Err(Failure::NoNode) => {}
                Err(f) => return Err(f),
            }
        }
        Ok(parse_all(texts.iter().map(Vec::as_slice)))
    }
}
