//! Detached invocations (jobs): started like any invocation, then left running when the client
//! goes away, and polled or cancelled later by id.
//!
//! This table only remembers jobs and their outcomes; the invocation itself goes through
//! [`crate::invoke::Invoker`] exactly like an attached one (validation, admission, confirmation,
//! the durable `started` record, the terminal record). Bounded: a finished job is kept for
//! `ttl`, and at most `max` jobs are kept (the oldest finished ones of the uid keeping the most
//! are evicted first; when `max` jobs are all running, a new one is refused), and one uid may have at
//! most `per_caller` jobs running. Jobs live in memory only: a restart of cordond
//! loses them (their audit records stay).
//!
//! Generic over the outcome type `R`, so that the proto types stay in `server/`.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::caller::Caller;

/// How long a finished job is kept by default.
pub(crate) const DEFAULT_TTL: Duration = Duration::from_secs(3600);
/// How many jobs are kept by default.
pub(crate) const DEFAULT_MAX: usize = 256;
/// How many jobs one uid may have running at once by default.
pub(crate) const DEFAULT_PER_CALLER: usize = 16;

/// The bounds of the job table.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// How long a finished job is kept.
    pub ttl: Duration,
    /// How many jobs (running and finished) are kept.
    pub max: usize,
    /// How many jobs one uid may have running at once. Running jobs are never evicted, and a
    /// workflow job holds no invocation slot between its steps (so `--max-per-caller` does not
    /// bound it): without this, one uid could fill the table with running jobs and refuse
    /// everyone else's.
    pub per_caller: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { ttl: DEFAULT_TTL, max: DEFAULT_MAX, per_caller: DEFAULT_PER_CALLER }
    }
}

/// What a job runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One invocation of a tool.
    Tool,
    /// A workflow: its steps are invocations of their own.
    Workflow,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Tool => "tool",
            Kind::Workflow => "workflow",
        }
    }
}

/// A job as callers see it.
#[derive(Debug, Clone)]
pub(crate) struct JobView<R> {
    pub id: String,
    pub kind: Kind,
    /// The tool or workflow.
    pub tool: String,
    pub owner: Caller,
    pub argv: Vec<String>,
    /// Since it started, or how long it ran.
    pub elapsed: Duration,
    /// The outcome, once finished.
    pub outcome: Option<R>,
    /// How long it is still kept (finished jobs only).
    pub expires_in: Option<Duration>,
}

#[derive(Debug)]
struct Entry<R> {
    kind: Kind,
    tool: String,
    owner: Caller,
    argv: Vec<String>,
    started: Instant,
    finished: Option<(Instant, R)>,
    done: tokio::sync::watch::Sender<bool>,
}

/// A new job cannot start now.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Full {
    /// The table is full of running jobs.
    #[error(
        "cordond already keeps {max} jobs and all of them are running (--jobs-max); wait for one to finish, or \
         cancel one (`cordon jobs` lists yours)"
    )]
    Table { max: usize },
    /// The caller has its share running.
    #[error(
        "uid {uid} already has {per_caller} jobs running (--jobs-per-caller); wait for one to finish, or cancel one \
         (`cordon jobs` lists them)"
    )]
    Caller { uid: u32, per_caller: usize },
}

/// The jobs cordond remembers.
#[derive(Debug)]
pub(crate) struct Jobs<R> {
    limits: Limits,
    table: Mutex<HashMap<String, Entry<R>>>,
    /// Jobs admitted by [`Jobs::make_room`] and not yet inserted, by uid: counted with the
    /// running ones, so that calls starting at once cannot all pass the check before any is in
    /// the table. Locked after `table`, never before.
    reserved: Mutex<HashMap<u32, usize>>,
}

/// A place in the job table, held from [`Jobs::make_room`] until the job is inserted (drop it
/// after [`Jobs::insert`], or without inserting when the job did not start).
#[derive(Debug)]
#[must_use = "the place is given back when this is dropped"]
pub(crate) struct Reservation<'a> {
    reserved: &'a Mutex<HashMap<u32, usize>>,
    uid: u32,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut reserved = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = reserved.get_mut(&self.uid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                reserved.remove(&self.uid);
            }
        }
    }
}

impl<R: Clone> Jobs<R> {
    pub(crate) fn new(limits: Limits) -> Jobs<R> {
        Jobs { limits, table: Mutex::new(HashMap::new()), reserved: Mutex::new(HashMap::new()) }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry<R>>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops expired jobs, then, while the table is full, the oldest finished ones, and reserves
    /// a place for `uid`'s new job. Err when `uid` already has its share of running (and
    /// reserved) jobs, or the table is still full (every job in it running or reserved): a new
    /// job must not start.
    pub(crate) fn make_room(&self, uid: u32) -> Result<Reservation<'_>, Full> {
        let mut table = self.lock();
        let mut reserved = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        let per_caller = self.limits.per_caller;
        let mine = reserved.get(&uid).copied().unwrap_or(0);
        if table.values().filter(|e| e.owner.uid == uid && e.finished.is_none()).count() + mine >= per_caller {
            return Err(Full::Caller { uid, per_caller });
        }
        Self::evict(&mut table, self.limits);
        if table.len() + reserved.values().sum::<usize>() >= self.limits.max {
            return Err(Full::Table { max: self.limits.max });
        }
        *reserved.entry(uid).or_default() += 1;
        Ok(Reservation { reserved: &self.reserved, uid })
    }

    /// Drops expired jobs, then, while the table is full, a finished job of the uid that keeps
    /// the most jobs (its oldest finished one). One uid starting many jobs thus only ever evicts
    /// its own results while it holds more than anyone else: it cannot push another uid's
    /// unread results out of the table before their TTL.
    fn evict(table: &mut HashMap<String, Entry<R>>, limits: Limits) {
        table.retain(|_, e| e.finished.as_ref().is_none_or(|(at, _)| at.elapsed() < limits.ttl));
        while table.len() >= limits.max {
            let mut held: HashMap<u32, usize> = HashMap::new();
            for e in table.values() {
                *held.entry(e.owner.uid).or_default() += 1;
            }
            // The most jobs held first, then the oldest finish.
            let victim = table
                .iter()
                .filter_map(|(id, e)| e.finished.as_ref().map(|(at, _)| (held[&e.owner.uid], *at, id.clone())))
                .min_by_key(|(count, at, _)| (std::cmp::Reverse(*count), *at));
            match victim {
                Some((_, _, id)) => {
                    table.remove(&id);
                }
                None => break,
            }
        }
    }

    /// Remembers a started job. Call [`Self::make_room`] before starting it; a job that started
    /// is always remembered (the table may exceed `max` by the jobs that started at once).
    pub(crate) fn insert(&self, id: &str, kind: Kind, tool: &str, owner: Caller, argv: Vec<String>) -> JobView<R> {
        let mut table = self.lock();
        Self::evict(&mut table, self.limits);
        let (done, _) = tokio::sync::watch::channel(false);
        let entry = Entry { kind, tool: tool.to_string(), owner, argv, started: Instant::now(), finished: None, done };
        let view = self.view(id, &entry, true);
        table.insert(id.to_string(), entry);
        view
    }

    /// Records a job's outcome and wakes whoever waits for it.
    pub(crate) fn finish(&self, id: &str, outcome: R) {
        if let Some(e) = self.lock().get_mut(id) {
            e.finished = Some((Instant::now(), outcome));
            e.done.send_replace(true);
        }
    }

    /// Drops expired jobs (called periodically).
    pub(crate) fn sweep(&self) {
        drop(self.live());
    }

    /// The table without expired jobs: every lookup goes through it, so that a result is never
    /// answered past its TTL, whenever the periodic sweep last ran.
    fn live(&self) -> MutexGuard<'_, HashMap<String, Entry<R>>> {
        let ttl = self.limits.ttl;
        let mut table = self.lock();
        table.retain(|_, e| e.finished.as_ref().is_none_or(|(at, _)| at.elapsed() < ttl));
        table
    }

    fn view(&self, id: &str, e: &Entry<R>, with_outcome: bool) -> JobView<R> {
        let (elapsed, outcome, expires_in) = match &e.finished {
            Some((at, r)) => (
                at.duration_since(e.started),
                with_outcome.then(|| r.clone()),
                Some(self.limits.ttl.saturating_sub(at.elapsed())),
            ),
            None => (e.started.elapsed(), None, None),
        };
        JobView {
            id: id.to_string(),
            kind: e.kind,
            tool: e.tool.clone(),
            owner: e.owner.clone(),
            argv: e.argv.clone(),
            elapsed,
            outcome,
            expires_in,
        }
    }

    /// Who started a job (None: no such job, or expired).
    pub(crate) fn owner(&self, id: &str) -> Option<Caller> {
        self.live().get(id).map(|e| e.owner.clone())
    }

    /// How many jobs `visible` admits are running, and how many finished ones are kept.
    pub(crate) fn counts(&self, visible: impl Fn(&Caller) -> bool) -> (usize, usize) {
        let table = self.live();
        let mine = table.values().filter(|e| visible(&e.owner));
        mine.fold((0, 0), |(running, done), e| match e.finished {
            None => (running + 1, done),
            Some(_) => (running, done + 1),
        })
    }

    /// Whether a job is still running.
    pub(crate) fn running(&self, id: &str) -> bool {
        self.lock().get(id).is_some_and(|e| e.finished.is_none())
    }

    /// One job with its outcome; with `wait`, waits up to that long for it to finish first.
    pub(crate) async fn get(&self, id: &str, wait: Duration) -> Option<JobView<R>> {
        let mut done = {
            let table = self.live();
            let e = table.get(id)?;
            if e.finished.is_some() || wait.is_zero() {
                return Some(self.view(id, e, true));
            }
            e.done.subscribe()
        };
        let _ = tokio::time::timeout(wait, done.wait_for(|d| *d)).await;
        let table = self.live();
        table.get(id).map(|e| self.view(id, e, true))
    }

    /// Every job `visible` admits, newest first, without outcomes' payloads (`outcome` is set
    /// for finished jobs so that callers can tell how they ended).
    pub(crate) fn list(&self, visible: impl Fn(&Caller) -> bool) -> Vec<JobView<R>> {
        let table = self.live();
        let mut jobs: Vec<(Instant, JobView<R>)> = table
            .iter()
            .filter(|(_, e)| visible(&e.owner))
            .map(|(id, e)| (e.started, self.view(id, e, true)))
            .collect();
        jobs.sort_by_key(|(started, _)| std::cmp::Reverse(*started));
        jobs.into_iter().map(|(_, v)| v).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(uid: u32) -> Caller {
        Caller::socket(uid, uid, Some(1))
    }

    #[test]
    fn the_oldest_finished_job_is_evicted_first_and_running_jobs_never() {
        let jobs: Jobs<u8> = Jobs::new(Limits { ttl: Duration::from_secs(60), max: 2, per_caller: 8 });
        jobs.insert("a", Kind::Tool, "t", caller(1), vec![]);
        jobs.insert("b", Kind::Tool, "t", caller(2), vec![]);
        assert!(matches!(jobs.make_room(3), Err(Full::Table { max: 2 })), "two running jobs fill a table of two");
        jobs.finish("a", 0);
        drop(jobs.make_room(3).unwrap());
        assert!(jobs.owner("a").is_none(), "the finished job made room");
        assert!(jobs.running("b"));
    }

    #[test]
    fn one_uid_starting_many_jobs_evicts_its_own_results_not_another_uids() {
        let jobs: Jobs<u8> = Jobs::new(Limits { ttl: Duration::from_secs(60), max: 3, per_caller: 8 });
        jobs.insert("theirs", Kind::Tool, "t", caller(2), vec![]);
        jobs.finish("theirs", 0);
        for n in 0..10 {
            let id = format!("flood{n}");
            let place = jobs.make_room(1).unwrap();
            jobs.insert(&id, Kind::Tool, "t", caller(1), vec![]);
            drop(place);
            jobs.finish(&id, 0);
        }
        assert!(jobs.owner("theirs").is_some(), "uid 2's unread result survives uid 1's flood");
        assert!(jobs.owner("flood9").is_some() && jobs.owner("flood8").is_some());
        assert!(jobs.owner("flood0").is_none());
    }

    #[tokio::test]
    async fn an_expired_job_is_never_answered_even_before_the_sweep() {
        let jobs: Jobs<u8> = Jobs::new(Limits { ttl: Duration::from_millis(20), max: 8, per_caller: 8 });
        jobs.insert("a", Kind::Tool, "t", caller(1), vec![]);
        jobs.finish("a", 1);
        assert!(jobs.get("a", Duration::ZERO).await.is_some());
        std::thread::sleep(Duration::from_millis(40));
        assert!(jobs.get("a", Duration::ZERO).await.is_none());
        assert!(jobs.owner("a").is_none());
        assert!(jobs.list(|_| true).is_empty());
    }

    #[test]
    fn one_uid_cannot_fill_the_table_with_running_jobs() {
        let jobs: Jobs<u8> = Jobs::new(Limits { ttl: Duration::from_secs(60), max: 8, per_caller: 2 });
        for id in ["a", "b"] {
            let place = jobs.make_room(1).unwrap();
            jobs.insert(id, Kind::Workflow, "w", caller(1), vec![]);
            drop(place);
        }
        assert!(matches!(jobs.make_room(1), Err(Full::Caller { uid: 1, per_caller: 2 })));
        drop(jobs.make_room(2).expect("another uid still starts jobs"));
        jobs.finish("a", 0);
        drop(jobs.make_room(1).expect("a finished job frees its owner's share"));
    }

    #[test]
    fn places_are_reserved_until_the_job_is_in_the_table() {
        let jobs: Jobs<u8> = Jobs::new(Limits { ttl: Duration::from_secs(60), max: 3, per_caller: 2 });
        // Two calls of uid 1 pass the check at once: the third is refused before either inserts.
        let first = jobs.make_room(1).unwrap();
        let second = jobs.make_room(1).unwrap();
        assert!(matches!(jobs.make_room(1), Err(Full::Caller { .. })));
        let other = jobs.make_room(2).unwrap();
        assert!(matches!(jobs.make_room(3), Err(Full::Table { max: 3 })), "reservations fill the table too");
        // A call that did not start gives its place back.
        drop(second);
        drop(other);
        let again = jobs.make_room(1).unwrap();
        drop((first, again));
        assert!(jobs.reserved.lock().unwrap().is_empty());
    }

    #[test]
    fn finished_jobs_expire() {
        let jobs: Jobs<u8> = Jobs::new(Limits { ttl: Duration::ZERO, max: 8, per_caller: 8 });
        jobs.insert("a", Kind::Tool, "t", caller(1), vec![]);
        jobs.sweep();
        assert!(jobs.running("a"), "a running job never expires");
        jobs.finish("a", 1);
        jobs.sweep();
        assert!(jobs.owner("a").is_none());
    }
}
