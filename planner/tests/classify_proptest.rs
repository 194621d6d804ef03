//! No statement whose top-level keyword modifies anything is ever classed as a read or a
//! maybe-write, whatever follows the keyword and however it is spelled.

use onetrip_planner::classify::{StatementClass, classify};
use proptest::prelude::*;

/// Top-level keywords, each with continuations that make some generated statements parse.
#[rustfmt::skip]
const WRITES: &[(&str, &[&str])] = &[
    ("INSERT", &["INTO t VALUES (1)", "INTO t SELECT * FROM u", "INTO t DEFAULT VALUES RETURNING *"]),
    ("UPDATE", &["t SET a = 1", "t SET a = (SELECT max(b) FROM u) RETURNING a"]),
    ("DELETE", &["FROM t", "FROM t WHERE id IN (SELECT id FROM u) RETURNING *"]),
    ("MERGE", &["INTO t USING u ON t.id = u.id WHEN MATCHED THEN DELETE"]),
    ("COPY", &["t TO STDOUT", "(SELECT 1) TO STDOUT", "t FROM STDIN"]),
    ("CREATE", &["TABLE t (a int)", "TABLE t AS SELECT 1", "VIEW v AS SELECT 1", "INDEX ON t (a)"]),
    ("ALTER", &["TABLE t ADD COLUMN b int", "TABLE t RENAME TO u"]),
    ("DROP", &["TABLE t", "VIEW IF EXISTS v CASCADE"]),
    ("TRUNCATE", &["t", "TABLE t RESTART IDENTITY"]),
    ("GRANT", &["SELECT ON t TO u", "ALL ON SCHEMA s TO PUBLIC"]),
    ("LOCK", &["TABLE t", "t IN SHARE MODE"]),
    ("CALL", &["p()", "s.p(1, 'x')"]),
    ("DO", &["$$ BEGIN PERFORM 1; END $$", "LANGUAGE plpgsql 'BEGIN END'"]),
];

/// Tokens appended at random: keywords that would make a read, literals, punctuation.
#[rustfmt::skip]
const SUFFIX: &[&str] = &[
    "SELECT", "select", "1", "'x'", "$$ y $$", "$1", "FROM", "t", "WHERE", "a", "=", "(", ")",
    ",", "*", "AS", "WITH", "RETURNING", "VALUES", "TABLE", "INTO", "SET", "now()", "count(*)",
    "UNION", "ALL", "--c\n", "/* c */", ";", "SELECT 1", "FOR UPDATE", "::int", "\"q\"", "ON",
];

/// Leading whitespace and comments.
#[rustfmt::skip]
const TRIVIA: &[&str] = &["", " ", "\n\t ", "-- note\n", "/* lead */ ", "/* a /* nested */ b */\n"];

fn mixed_case(word: &str, mask: u64) -> String {
    word.chars()
        .enumerate()
        .map(|(i, c)| {
            if mask >> (i % 64) & 1 == 1 {
                c.to_ascii_lowercase()
            } else {
                c
            }
        })
        .collect()
}

fn statement() -> impl Strategy<Value = String> {
    (
        prop::sample::select(TRIVIA),
        0..WRITES.len(),
        any::<u64>(),
        any::<Option<prop::sample::Index>>(),
        prop::collection::vec(prop::sample::select(SUFFIX), 0..8),
    )
        .prop_map(|(lead, k, mask, cont, suffix)| {
            let (kw, conts) = WRITES[k];
            let mut sql = format!("{lead}{}", mixed_case(kw, mask));
            if let Some(i) = cont {
                sql.push(' ');
                sql.push_str(conts[i.index(conts.len())]);
            }
            for tok in suffix {
                sql.push(' ');
                sql.push_str(tok);
            }
            sql
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn writes_are_never_reads(sql in statement()) {
        let c = classify(&sql);
        prop_assert!(
            !matches!(c.class, StatementClass::Read | StatementClass::MaybeWrite),
            "{sql:?} classed {:?} ({})", c.class, c.reason
        );
    }
}

#[test]
fn continuations_parse_as_writes() {
    // The continuations are there to reach the parsed paths, not just parse errors.
    for (kw, conts) in WRITES {
        for cont in conts.iter() {
            let sql = format!("{kw} {cont}");
            let c = classify(&sql);
            assert_eq!(c.class, StatementClass::Write, "{sql:?}: {c:?}");
        }
    }
}

/// Words that pin, or undo a pin, or neither, mixed into texts of several statements.
#[rustfmt::skip]
const PIN_WORDS: &[&str] = &[
    "LISTEN a", "UNLISTEN *", "SET x = 1", "SET LOCAL x = 1", "RESET ALL", "DISCARD ALL",
    "LOAD 'x'", "SELECT pg_advisory_lock(1)", "SELECT dblink_connect('c')", "DO $$ x $$",
    "CREATE TEMP TABLE t (a int)", "DECLARE c CURSOR WITH HOLD FOR SELECT 1", "PREPARE p AS SELECT 1",
    "DEALLOCATE p", "SELECT 1", "(SELECT 2)", "FROBNICATE", "create database d", ";", " ", "'x;y'",
];

proptest! {
    /// A pooler's one pass finds what `session_pin` and `pin_past_reset` find apart.
    #[test]
    fn pins_found_in_one_pass_match_their_parts(parts in prop::collection::vec(prop::sample::select(PIN_WORDS), 0..8)) {
        let sql = parts.join("; ");
        let p = onetrip_planner::classify::Pins::of(&sql);
        prop_assert_eq!(p.pin, onetrip_planner::classify::session_pin(&sql));
        prop_assert_eq!(p.past_reset, onetrip_planner::classify::pin_past_reset(&sql));
    }
}
