//! Random pipelines: statements of a small vocabulary sent as simple or
//! extended queries, with Flush and Sync in random places, in one write or
//! several, and the client waiting at random points. Deterministic for a
//! seed, so a failing case can be run again and shrunk.

use crate::script::{Fe, Script, Step};

/// The statements a pipeline is made of: reads, a failing read, writes,
/// data-modifying CTEs that write nothing and that write, transaction
/// control and savepoints, settings, a statement that takes time, and SQL's
/// own prepared statements.
pub const VOCABULARY: &[&str] = &[
    "select v from t where id = 2",
    "select id, v from t order by id",
    "select count(*) from t",
    "select 1/0",
    "update t set v = v + 1 where id = 1",
    "insert into t values (6, 60)",
    "delete from t where id = 6",
    "with u as (update t set v = v where false returning id) select count(*) from u",
    "with u as (update t set v = v + 1 where id = 3 returning id, v) select * from u",
    "begin",
    "commit",
    "rollback",
    "set application_name = 'pipeline'",
    "set transaction isolation level repeatable read",
    "select pg_sleep(0.01)",
    "savepoint a",
    "rollback to savepoint a",
    "release savepoint a",
    "prepare q as update t set v = v + 1 where id = 2",
    "prepare r as select v from t where id = 4",
    "execute q",
    "execute r",
    "deallocate q",
    "deallocate all",
];

/// The named statement pipelines prepare once and run again.
pub const NAMED: &str = "select v from t where id = $1";

/// SplitMix64: small, fast, and the same everywhere.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}

/// A pipeline as a list of operations, each a few steps; shrinking drops
/// whole operations.
#[derive(Debug, Clone)]
pub struct Pipeline {
    pub ops: Vec<Vec<Step>>,
}

impl Pipeline {
    pub fn random(rng: &mut Rng) -> Self {
        let n = 1 + rng.below(8);
        let mut ops = Vec::with_capacity(n + 1);
        for _ in 0..n {
            let mut op = statement(rng);
            match rng.below(100) {
                0..40 => {}
                40..55 => op.push(Step::Send(Fe::Flush)),
                55..80 => op.push(Step::Send(Fe::Sync)),
                80..90 => op.extend([Step::Send(Fe::Flush), Step::Wait]),
                _ => op.extend([Step::Send(Fe::Sync), Step::Wait]),
            }
            if rng.chance(10) {
                op.push(Step::Write);
            }
            ops.push(op);
        }
        ops.push(vec![Step::Send(Fe::Sync), Step::Wait]);
        Pipeline { ops }
    }

    pub fn script(&self) -> Script {
        Script {
            steps: self.ops.iter().flatten().cloned().collect(),
        }
    }

    /// The same pipeline without operation `i` (never the final Sync).
    pub fn without(&self, i: usize) -> Option<Pipeline> {
        (i + 1 < self.ops.len()).then(|| {
            let mut ops = self.ops.clone();
            ops.remove(i);
            Pipeline { ops }
        })
    }
}

/// One statement: a simple Query, the extended protocol on the unnamed
/// statement (with or without Describe), or the named statement prepared
/// or run.
fn statement(rng: &mut Rng) -> Vec<Step> {
    let send = |fe| Step::Send(fe);
    match rng.below(110) {
        0..10 => vec![send(Fe::Parse {
            name: "s1".into(),
            sql: NAMED.into(),
        })],
        100..103 => vec![send(Fe::CloseStatement("s1".into()))],
        103..106 => vec![send(Fe::DescribeStatement("s1".into()))],
        106..110 => {
            // A named portal read a row at a time, then to its end.
            let id = (1 + rng.below(6)).to_string();
            vec![
                send(Fe::Bind {
                    portal: "p1".into(),
                    stmt: "s1".into(),
                    params: vec![Some(id)],
                }),
                send(Fe::Execute {
                    portal: "p1".into(),
                    max_rows: 1,
                }),
                send(Fe::Execute {
                    portal: "p1".into(),
                    max_rows: 0,
                }),
            ]
        }
        10..20 => {
            let id = (1 + rng.below(6)).to_string();
            vec![
                send(Fe::Bind {
                    portal: String::new(),
                    stmt: "s1".into(),
                    params: vec![Some(id)],
                }),
                send(Fe::DescribePortal(String::new())),
                send(Fe::Execute {
                    portal: String::new(),
                    max_rows: 0,
                }),
            ]
        }
        20..45 => vec![send(Fe::Query(pick(rng).into()))],
        _ => {
            let mut steps = vec![
                send(Fe::Parse {
                    name: String::new(),
                    sql: pick(rng).into(),
                }),
                send(Fe::Bind {
                    portal: String::new(),
                    stmt: String::new(),
                    params: Vec::new(),
                }),
            ];
            if rng.chance(70) {
                steps.push(send(Fe::DescribePortal(String::new())));
            }
            steps.push(send(Fe::Execute {
                portal: String::new(),
                max_rows: 0,
            }));
            steps
        }
    }
}

fn pick(rng: &mut Rng) -> &'static str {
    VOCABULARY[rng.below(VOCABULARY.len())]
}
