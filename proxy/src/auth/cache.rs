//! Secrets looked up with `[pool] auth_query`, kept per (database, user)
//! for `auth_cache_ttl`, at most `auth_cache_size` of them (the least
//! recently used goes first: names come from strangers). Logins of a user
//! that come while its secret is being looked up wait for that look-up
//! instead of making their own, so a crowd of clients starting at once
//! costs the server one connection. A look-up that fails is not kept.

use std::{
    collections::HashMap,
    future::Future,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use tokio::sync::watch;

use super::{LookupError, Secret};

/// What a look-up found: `None` when the server holds no password for
/// the user (no row, or NULL).
pub type Found = Option<Arc<Secret>>;

/// A secret, and whether it was kept from an earlier look-up (a client
/// that fails against a kept one may know a newer password: `forget`).
#[derive(Debug)]
pub struct Looked {
    pub secret: Found,
    pub kept: bool,
}

/// How long secrets are kept, and how many.
#[derive(Debug, Clone, Copy)]
pub struct Keep {
    pub ttl: Duration,
    pub size: usize,
}

type Outcome = Option<Result<Found, LookupError>>;

/// The kept secrets.
#[derive(Default)]
pub struct Secrets {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// What the entries were looked up with (auth_user, auth_query): a
    /// reload that changes it makes them all stale.
    source: String,
    entries: HashMap<(String, String), Entry>,
    next_id: u64,
}

enum Entry {
    Kept {
        secret: Found,
        fetched: Instant,
        used: Instant,
    },
    /// Being looked up; the look-up's outcome comes through `done`.
    Pending {
        id: u64,
        done: watch::Receiver<Outcome>,
    },
}

enum Step {
    Kept(Found),
    Wait(watch::Receiver<Outcome>),
    LookUp(u64, watch::Sender<Outcome>),
}

impl Secrets {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every change under the lock is one insert or remove.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The secret of `user` in `database`: kept, or the outcome of a
    /// look-up under way, or of `look_up` (made by this call then).
    /// `source` names what secrets are looked up with.
    pub async fn get(
        &self,
        source: &str,
        database: &str,
        user: &str,
        keep: Keep,
        look_up: impl Future<Output = Result<Option<Secret>, LookupError>>,
    ) -> Result<Looked, LookupError> {
        let key = (database.to_owned(), user.to_owned());
        let (id, tx) = loop {
            match self.step(source, &key, keep) {
                Step::Kept(secret) => return Ok(Looked { secret, kept: true }),
                Step::Wait(mut done) => {
                    if let Ok(outcome) = done.wait_for(Option::is_some).await
                        && let Some(outcome) = outcome.clone()
                    {
                        return outcome.map(|secret| Looked {
                            secret,
                            kept: false,
                        });
                    }
                    // That look-up was dropped unfinished (its login gave
                    // up): look again.
                }
                Step::LookUp(id, tx) => break (id, tx),
            }
        };
        let mut pending = PendingGuard {
            secrets: self,
            key: &key,
            id,
            armed: true,
        };
        let outcome = look_up.await.map(|s| s.map(Arc::new));
        pending.armed = false;
        {
            let mut g = self.lock();
            let ours =
                matches!(g.entries.get(&key), Some(Entry::Pending { id: i, .. }) if *i == id);
            if ours {
                match &outcome {
                    Ok(secret) => {
                        let now = Instant::now();
                        let kept = Entry::Kept {
                            secret: secret.clone(),
                            fetched: now,
                            used: now,
                        };
                        g.entries.insert(key.clone(), kept);
                    }
                    Err(_) => {
                        g.entries.remove(&key);
                    }
                }
            }
        }
        tx.send_replace(Some(outcome.clone()));
        outcome.map(|secret| Looked {
            secret,
            kept: false,
        })
    }

    fn step(&self, source: &str, key: &(String, String), keep: Keep) -> Step {
        let mut g = self.lock();
        if g.source != source {
            g.entries.clear();
            g.source = source.to_owned();
        }
        match g.entries.get_mut(key) {
            Some(Entry::Kept {
                secret,
                fetched,
                used,
            }) if fetched.elapsed() < keep.ttl => {
                *used = Instant::now();
                return Step::Kept(secret.clone());
            }
            Some(Entry::Pending { done, .. }) => return Step::Wait(done.clone()),
            // Stale: looked up again.
            Some(_) => {
                g.entries.remove(key);
            }
            None => {}
        }
        let (tx, done) = watch::channel(None);
        let id = g.next_id;
        g.next_id += 1;
        // Without room, the look-up is this login's alone.
        if g.make_room(keep) {
            g.entries.insert(key.clone(), Entry::Pending { id, done });
        }
        Step::LookUp(id, tx)
    }

    /// Drops the kept secret of `user` in `database`: the next login looks
    /// it up again.
    pub fn forget(&self, database: &str, user: &str) {
        let mut g = self.lock();
        let key = (database.to_owned(), user.to_owned());
        if matches!(g.entries.get(&key), Some(Entry::Kept { .. })) {
            g.entries.remove(&key);
        }
    }

    /// `user`'s password changed (`None`: some user's): its secrets are
    /// forgotten in every database, and a look-up under way keeps none
    /// (it may have read the old one; its logins still get it).
    pub fn forget_user(&self, user: Option<&str>) {
        let mut g = self.lock();
        g.entries
            .retain(|(_, u), _| user.is_some_and(|user| u != user));
    }

    /// Secrets kept or being looked up now.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Inner {
    /// Room for one more entry within `keep.size`: stale ones go first,
    /// then the least recently used. False when every place is a look-up
    /// under way.
    fn make_room(&mut self, keep: Keep) -> bool {
        if self.entries.len() < keep.size {
            return true;
        }
        self.entries.retain(
            |_, e| !matches!(e, Entry::Kept { fetched, .. } if fetched.elapsed() >= keep.ttl),
        );
        while self.entries.len() >= keep.size {
            let oldest = self
                .entries
                .iter()
                .filter_map(|(k, e)| match e {
                    Entry::Kept { used, .. } => Some((*used, k)),
                    Entry::Pending { .. } => None,
                })
                .min_by_key(|(used, _)| *used)
                .map(|(_, k)| k.clone());
            match oldest {
                Some(k) => {
                    self.entries.remove(&k);
                }
                None => return false,
            }
        }
        true
    }
}

/// Takes an unfinished look-up's entry out when the login that made it
/// gives up (its future dropped): those waiting for it look again.
struct PendingGuard<'a> {
    secrets: &'a Secrets,
    key: &'a (String, String),
    id: u64,
    armed: bool,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut g = self.secrets.lock();
        let ours =
            matches!(g.entries.get(self.key), Some(Entry::Pending { id, .. }) if *id == self.id);
        if ours {
            g.entries.remove(self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    use super::*;
    use crate::auth::secret::Md5Hash;

    const KEEP: Keep = Keep {
        ttl: Duration::from_secs(60),
        size: 10,
    };

    fn secret(password: &str) -> Secret {
        Secret::Md5(Md5Hash::of_password("u", password))
    }

    /// A look-up that counts itself and finds `found`.
    async fn found(
        count: &AtomicUsize,
        found: Option<Secret>,
    ) -> Result<Option<Secret>, LookupError> {
        count.fetch_add(1, Relaxed);
        Ok(found)
    }

    #[tokio::test]
    async fn a_secret_is_kept_for_its_ttl_and_forgotten_on_request() {
        let s = Secrets::default();
        let n = AtomicUsize::new(0);
        let a = s
            .get("src", "db", "u", KEEP, found(&n, Some(secret("p"))))
            .await
            .unwrap();
        assert!(!a.kept);
        let b = s
            .get("src", "db", "u", KEEP, found(&n, None))
            .await
            .unwrap();
        assert!(b.kept);
        assert_eq!(b.secret.as_deref(), Some(&secret("p")));
        assert_eq!(n.load(Relaxed), 1);
        // Another database is another key; no password is kept too.
        let c = s
            .get("src", "db2", "u", KEEP, found(&n, None))
            .await
            .unwrap();
        assert!(c.secret.is_none());
        let c = s
            .get("src", "db2", "u", KEEP, found(&n, None))
            .await
            .unwrap();
        assert!(c.kept && c.secret.is_none());
        assert_eq!(n.load(Relaxed), 2);
        s.forget("db", "u");
        let d = s
            .get("src", "db", "u", KEEP, found(&n, Some(secret("new"))))
            .await
            .unwrap();
        assert!(!d.kept);
        assert_eq!(d.secret.as_deref(), Some(&secret("new")));
        // A zero ttl keeps nothing usable; a new source makes all stale.
        let now = Keep {
            ttl: Duration::ZERO,
            size: 10,
        };
        let e = s.get("src", "db", "u", now, found(&n, None)).await.unwrap();
        assert!(!e.kept);
        let f = s
            .get("other", "db2", "u", KEEP, found(&n, None))
            .await
            .unwrap();
        assert!(!f.kept);
        assert_eq!(s.len(), 1);
    }

    #[tokio::test]
    async fn a_changed_password_is_forgotten_in_every_database_even_mid_look_up() {
        let s = Arc::new(Secrets::default());
        let n = AtomicUsize::new(0);
        for (db, user) in [("a", "u"), ("b", "u"), ("a", "v")] {
            s.get("src", db, user, KEEP, found(&n, Some(secret("p"))))
                .await
                .unwrap();
        }
        s.forget_user(Some("u"));
        assert_eq!(s.len(), 1, "v's is kept");
        // A look-up under way when the password changed is not kept.
        let (release, held) = tokio::sync::oneshot::channel::<()>();
        let under_way = {
            let s = s.clone();
            tokio::spawn(async move {
                s.get("src", "a", "u", KEEP, async {
                    let _ = held.await;
                    Ok(Some(secret("old")))
                })
                .await
            })
        };
        while s.len() < 2 {
            tokio::task::yield_now().await;
        }
        s.forget_user(Some("u"));
        release.send(()).unwrap();
        let old = under_way.await.unwrap().unwrap();
        assert_eq!(old.secret.as_deref(), Some(&secret("old")));
        let next = s
            .get("src", "a", "u", KEEP, found(&n, Some(secret("new"))))
            .await
            .unwrap();
        assert!(!next.kept);
        assert_eq!(next.secret.as_deref(), Some(&secret("new")));
        s.forget_user(None);
        assert!(s.is_empty());
    }

    #[tokio::test]
    async fn logins_that_come_during_a_look_up_wait_for_it() {
        let s = Arc::new(Secrets::default());
        let n = Arc::new(AtomicUsize::new(0));
        let (release, held) = tokio::sync::oneshot::channel::<()>();
        let first = {
            let (s, n) = (s.clone(), n.clone());
            tokio::spawn(async move {
                s.get("src", "db", "u", KEEP, async {
                    n.fetch_add(1, Relaxed);
                    let _ = held.await;
                    Ok(Some(secret("p")))
                })
                .await
            })
        };
        while n.load(Relaxed) == 0 {
            tokio::task::yield_now().await;
        }
        let second = {
            let (s, n) = (s.clone(), n.clone());
            tokio::spawn(async move { s.get("src", "db", "u", KEEP, found(&n, None)).await })
        };
        tokio::task::yield_now().await;
        release.send(()).unwrap();
        let (a, b) = (
            first.await.unwrap().unwrap(),
            second.await.unwrap().unwrap(),
        );
        assert_eq!(n.load(Relaxed), 1, "one look-up for both");
        assert_eq!(a.secret, b.secret);
        assert!(!b.kept);
    }

    #[tokio::test]
    async fn a_failed_look_up_is_not_kept_and_a_dropped_one_is_made_again() {
        let s = Secrets::default();
        let n = AtomicUsize::new(0);
        let failed = s
            .get("src", "db", "u", KEEP, async {
                Err(LookupError {
                    auth_user: "a".into(),
                    why: "refused".into(),
                })
            })
            .await
            .unwrap_err();
        assert_eq!(failed.why, "refused");
        assert!(s.is_empty());
        // A look-up whose login gave up leaves nothing behind.
        let dropped = s.get("src", "db", "u", KEEP, std::future::pending());
        let r = tokio::time::timeout(Duration::from_millis(10), dropped).await;
        assert!(r.is_err());
        assert!(s.is_empty());
        let ok = s
            .get("src", "db", "u", KEEP, found(&n, Some(secret("p"))))
            .await
            .unwrap();
        assert!(ok.secret.is_some() && !ok.kept);
    }

    #[tokio::test]
    async fn past_the_size_the_least_recently_used_goes() {
        let s = Secrets::default();
        let n = AtomicUsize::new(0);
        let two = Keep {
            ttl: Duration::from_secs(60),
            size: 2,
        };
        for user in ["a", "b"] {
            s.get("src", "db", user, two, found(&n, None))
                .await
                .unwrap();
        }
        // "a" used again: "b" is the one to go.
        assert!(
            s.get("src", "db", "a", two, found(&n, None))
                .await
                .unwrap()
                .kept
        );
        s.get("src", "db", "c", two, found(&n, None)).await.unwrap();
        assert_eq!(s.len(), 2);
        assert!(
            s.get("src", "db", "a", two, found(&n, None))
                .await
                .unwrap()
                .kept
        );
        assert!(
            !s.get("src", "db", "b", two, found(&n, None))
                .await
                .unwrap()
                .kept
        );
        // Size zero keeps none.
        let none = Keep {
            ttl: Duration::from_secs(60),
            size: 0,
        };
        s.get("src2", "db", "a", none, found(&n, None))
            .await
            .unwrap();
        assert!(s.is_empty());
    }
}
