//! `check`'s real election on a scratch key (`KEY.check`), the same on
//! every backend: acquire, renew and release as the configured user, so a
//! missing permission shows up now rather than at the first election. Each
//! backend opens its scratch lease and words the line in its own terms.

use super::contract::{Acquire, Error, LeaseBackend, Renew};

/// What a scratch election showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scratch {
    /// Acquired, renewed (or found lost at the renewal) and released.
    Worked { fencing_token: u64, renewed: bool },
    /// Another program holds the scratch lease (another `check` running):
    /// the acquire was exercised, the rest was not.
    Held { by: String },
}

/// Acquire, renew and release on `lease`, a scratch lease.
pub async fn exercise(lease: &mut dyn LeaseBackend) -> Result<Scratch, Error> {
    let fencing_token = match lease.acquire().await? {
        Acquire::Won { fencing_token, .. } => fencing_token,
        Acquire::Held { holder, .. } => {
            let by = holder.id.unwrap_or_else(|| "another program".into());
            return Ok(Scratch::Held { by });
        }
    };
    let renewed = matches!(lease.renew().await?, Renew::Renewed { .. });
    lease.release().await?;
    Ok(Scratch::Worked {
        fencing_token,
        renewed,
    })
}

impl Scratch {
    /// `check`'s line: the three `verbs` ("acquire", "renew", "release")
    /// work on `place` ("the scratch key K"), with the fencing token as
    /// `token` shows the store's kind of number.
    pub fn line(&self, verbs: [&str; 3], place: &str, token: impl Fn(u64) -> String) -> String {
        match self {
            Scratch::Held { by } => {
                format!("{place} is held by {by} (another check running?); acquire not exercised")
            }
            Scratch::Worked {
                fencing_token,
                renewed,
            } => {
                let lost = if *renewed { "" } else { " (lost!)" };
                let [take, renew, give] = verbs;
                let token = token(*fencing_token);
                format!("{take}, {renew}{lost} and {give} work on {place} ({token})")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_says_what_worked_and_what_was_not_exercised() {
        let worked = Scratch::Worked {
            fencing_token: 7,
            renewed: true,
        };
        let verbs = ["acquire", "renew", "release"];
        assert_eq!(
            worked.line(verbs, "the scratch key k", |t| format!("fencing token {t}")),
            "acquire, renew and release work on the scratch key k (fencing token 7)"
        );
        let lost = Scratch::Worked {
            fencing_token: 16,
            renewed: false,
        };
        assert_eq!(
            lost.line(["create", "renew", "delete"], "/e", |t| format!("{t:#x}")),
            "create, renew (lost!) and delete work on /e (0x10)"
        );
        let held = Scratch::Held { by: "c1".into() };
        assert_eq!(
            held.line(verbs, "the scratch key k", |t| t.to_string()),
            "the scratch key k is held by c1 (another check running?); acquire not exercised"
        );
    }
}
