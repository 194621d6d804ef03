//! COPY under transaction pooling. A COPY FROM STDIN in the extended
//! protocol usually has its Sync sent before its data (tokio-postgres and
//! libpq do so); the server reads that Sync as part of the COPY and ignores
//! it. Through onetrip the client must get what PostgreSQL gives, message
//! for message, and the connection goes back to the pool only once the
//! COPY and its group are over, whichever way the COPY ends.

use std::time::Duration;

use futures_util::{SinkExt, pin_mut};
use onetrip::config::PoolMode;
use onetrip_tests::{
    Env, connect,
    script::{Script, Sides, token},
    transcript::{Msg, Raw},
};
use tokio_postgres::{binary_copy::BinaryCopyInWriter, types::Type};

const POOLED: &str = "onetrip pooling";

/// PostgreSQL, onetrip in session mode, and onetrip pooling transactions
/// with and without lazy reads.
async fn sides() -> Sides {
    Sides::start(&[
        (POOLED, |c| pooling(c, 2)),
        ("onetrip pooling with lazy reads", |c| {
            pooling(c, 2);
            c.transactions.lazy_reads = true;
        }),
    ])
    .await
}

/// Each of `copies` run on its own, then after a pin, each in
/// autocommit and in a transaction block, and followed by statements
/// that must get their usual answers. Returns the transcripts.
async fn each_way(sides: &Sides, copies: &[(&str, Script)]) -> Vec<String> {
    let mut seen = Vec::new();
    // A LISTEN alone is run apart, unpinned: with another statement it pins.
    for pin in [None, Some("listen x; select 1"), Some("set role postgres")] {
        for block in [false, true] {
            for (name, copy) in copies {
                let mut s = Script::new();
                if let Some(pin) = pin {
                    s = s.query(pin).wait();
                }
                if block {
                    s = s.query("begin").wait();
                }
                s.steps.extend(copy.steps.iter().cloned());
                if block {
                    s = s.query("commit").wait();
                }
                let t = sides.same(after(s)).await;
                seen.push(format!("{name} (pin {pin:?}, block {block}): {t}"));
            }
        }
    }
    seen
}

fn pooling(c: &mut onetrip::Config, size: usize) {
    c.pool.mode = PoolMode::Transaction;
    c.pool.pool_size = size;
}

/// What follows a COPY on the same client: a simple Query, an unnamed and
/// a named statement.
fn after(s: Script) -> Script {
    s.query("select id, v from t order by id")
        .wait()
        .pbe("select count(*) from t")
        .sync()
        .wait()
        .parse("s1", "select v from t where id = $1")
        .bind("", "s1", &[Some("2")])
        .execute("", 0)
        .sync()
        .wait()
}

/// `rows` in COPY's binary format for t(id int, v int).
fn binary(rows: &[(i32, i32)]) -> Vec<u8> {
    let mut b = b"PGCOPY\n\xff\r\n\0".to_vec();
    b.extend(0i32.to_be_bytes());
    b.extend(0i32.to_be_bytes());
    for (id, v) in rows {
        b.extend(2i16.to_be_bytes());
        for x in [id, v] {
            b.extend(4i32.to_be_bytes());
            b.extend(x.to_be_bytes());
        }
    }
    b.extend((-1i16).to_be_bytes());
    b
}

/// `Parse Bind Execute Sync` of `copy`, waiting for the CopyInResponse,
/// then `data` and CopyDone (or CopyFail when `data` is `None`) and the
/// Sync that ends the group.
fn extended_copy(copy: &str, data: Option<&[u8]>) -> Script {
    let s = Script::new().pbe(copy).sync().wait();
    match data {
        Some(d) => s.copy_data(d).copy_done(),
        None => s.copy_fail("the client changed its mind"),
    }
    .sync()
    .wait()
}

/// COPY FROM STDIN in the extended protocol, its Sync sent before its
/// data: text and binary, a bad row, a duplicate key, CopyFail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_copy_in_with_its_sync_first_answers_as_postgres() {
    let s = sides().await;
    let text = "copy t from stdin";
    let bin = "copy t from stdin (format binary)";
    let rows = binary(&[(6, 60), (7, 70)]);
    let mut bad_binary = binary(&[(8, 80)]);
    bad_binary.truncate(bad_binary.len() - 6);
    let copies = [
        ("text", extended_copy(text, Some(b"6\t60\n7\t70\n"))),
        ("binary", extended_copy(bin, Some(&rows))),
        ("bad row", extended_copy(text, Some(b"6\t60\n7\tseventy\n"))),
        (
            "duplicate key",
            extended_copy(text, Some(b"6\t60\n1\t10\n")),
        ),
        ("bad binary", extended_copy(bin, Some(&bad_binary))),
        ("CopyFail", extended_copy(text, None)),
        ("CopyFail after data", {
            let s = Script::new().pbe(text).sync().wait();
            s.copy_data("6\t60\n").copy_fail("no").sync().wait()
        }),
    ];
    let seen = each_way(&s, &copies).await;
    let first = |name: &str| seen.iter().find(|t| t.starts_with(name)).unwrap().clone();
    assert!(first("text ").contains("1 2 G | C ZI |"), "{seen:#?}");
    assert!(
        first("bad row").contains("1 2 G | E22P02 ZI |"),
        "{seen:#?}"
    );
    assert!(
        first("CopyFail ").contains("1 2 G | E57014 ZI |"),
        "{seen:#?}"
    );
}

/// The same, with the whole COPY in one write (the data before the
/// CopyInResponse came), with a Flush in place of the early Sync, and with
/// Syncs among the data of a COPY that succeeds: all ignored by the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_in_sent_at_once_or_flushed_answers_as_postgres() {
    let s = sides().await;
    let text = "copy t from stdin";
    let at_once = |data: &str| {
        Script::new()
            .pbe(text)
            .sync()
            .copy_data(data)
            .copy_done()
            .sync()
            .wait()
    };
    let copies = [
        ("at once", at_once("6\t60\n")),
        ("at once, bad row", at_once("6\tsixty\n")),
        (
            "flushed",
            Script::new()
                .pbe(text)
                .flush()
                .wait()
                .copy_data("6\t60\n")
                .copy_done()
                .sync()
                .wait(),
        ),
        (
            "syncs among the data",
            Script::new()
                .pbe(text)
                .sync()
                .wait()
                .copy_data("6\t60\n")
                .sync()
                .copy_data("7\t70\n")
                .sync()
                .flush()
                .copy_done()
                .sync()
                .wait(),
        ),
        (
            "two groups at once",
            Script::new()
                .pbe(text)
                .sync()
                .copy_data("6\t60\n")
                .copy_done()
                .sync()
                .pbe("select count(*) from t")
                .sync()
                .wait(),
        ),
    ];
    let seen = each_way(&s, &copies).await;
    assert!(seen[0].contains("1 2 G C ZI |"), "{seen:#?}");
}

/// COPY FROM STDIN as a simple Query, and COPY TO STDOUT both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_copy_in_and_copy_out_answer_as_postgres() {
    let s = sides().await;
    let simple = |data: Option<&str>| {
        let s = Script::new().query("copy t from stdin").wait();
        match data {
            Some(d) => s.copy_data(d).copy_done(),
            None => s.copy_fail("no"),
        }
        .wait()
    };
    let copies = [
        ("simple", simple(Some("6\t60\n"))),
        ("simple, bad row", simple(Some("6\tsixty\n"))),
        ("simple, CopyFail", simple(None)),
        (
            "simple binary",
            Script::new()
                .query("copy t from stdin (format binary)")
                .wait()
                .copy_data(binary(&[(6, 60)]))
                .copy_done()
                .wait(),
        ),
        (
            "out, simple",
            Script::new().query("copy t to stdout").wait(),
        ),
        (
            "out, extended",
            Script::new()
                .pbe("copy (select * from t order by id) to stdout")
                .sync()
                .wait(),
        ),
        (
            "out, failing",
            Script::new()
                .pbe("copy (select 1/(id - 3) from t order by id) to stdout")
                .sync()
                .wait(),
        ),
    ];
    let seen = each_way(&s, &copies).await;
    assert!(seen[0].contains("G | C ZI |"), "{seen:#?}");
}

/// The answers to what is queued on `raw`, up to the first of type
/// `until`, as tokens.
async fn answer(raw: &mut Raw, until: char) -> Vec<String> {
    raw.send().await;
    let msgs = tokio::time::timeout(Duration::from_secs(10), raw.until(until))
        .await
        .expect("an answer within 10 s");
    msgs.iter().map(shown).collect()
}

/// A message as a token, a DataRow with its first column.
fn shown(m: &Msg) -> String {
    match m.tag {
        'D' if m.body.len() > 6 => format!("D{}", String::from_utf8_lossy(&m.body[6..])),
        _ => token(m),
    }
}

/// A COPY of `a_copy_holds_its_connection_until_it_is_over`: in a block or
/// not, as a simple Query or not, its data (or CopyFail), how it ends.
type Case = (bool, bool, Option<&'static [u8]>, [&'static str; 2]);

/// On a pool of one, a second client's query waits while the first runs
/// a COPY (however it ends) and gets its own answer, and only it, once the
/// first one's COPY and transaction are over; the first client then goes
/// on as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_holds_its_connection_until_it_is_over() {
    let env = Env::start_with(Default::default(), |c| pooling(c, 1)).await;
    env.psql_ok(false, &["-c", "create table t(id int primary key, v int)"]);
    let port = env.proxy_port();
    let mut a = Raw::connect(port, &[]).await;
    let mut b = Raw::connect(port, &[]).await;
    let quiet = Duration::from_millis(300);
    let cases: [Case; 8] = [
        (false, false, Some(b"1\t10\n"), ["C", "ZI"]),
        (false, false, Some(b"2\tx\n"), ["E22P02", "ZI"]),
        (false, false, None, ["E57014", "ZI"]),
        (true, false, Some(b"3\t30\n"), ["C", "ZT"]),
        (true, false, Some(b"3\t30\n"), ["E23505", "ZE"]),
        (true, false, None, ["E57014", "ZE"]),
        (false, true, Some(b"4\t40\n"), ["C", "ZI"]),
        (false, true, None, ["E57014", "ZI"]),
    ];
    for (i, (block, simple, data, end)) in cases.into_iter().enumerate() {
        if block {
            a.query("begin");
            assert_eq!(answer(&mut a, 'Z').await, ["C", "ZT"]);
        }
        match simple {
            true => {
                a.query("copy t from stdin");
                assert_eq!(answer(&mut a, 'G').await, ["G"]);
            }
            false => {
                a.parse("", "copy t from stdin").bind("", "", &[]);
                a.execute("", 0).sync();
                assert_eq!(answer(&mut a, 'G').await, ["1", "2", "G"]);
            }
        }
        // The connection is the COPY's: the second client waits.
        b.query(&format!("select {i}"));
        b.send().await;
        assert!(
            b.drain_for(quiet).await.is_empty(),
            "case {i}: no answer yet"
        );
        match data {
            Some(d) => a.copy_data(d).copy_done(),
            None => a.copy_fail("no"),
        };
        if !simple {
            a.sync();
        }
        assert_eq!(answer(&mut a, 'Z').await, end, "case {i}");
        if block {
            // Still in the block: the second client still waits.
            assert!(b.drain_for(quiet).await.is_empty(), "case {i}: in a block");
            a.query("commit");
            assert_eq!(answer(&mut a, 'Z').await, ["C", "ZI"], "case {i}");
        }
        let got = tokio::time::timeout(Duration::from_secs(10), b.until('Z'))
            .await
            .unwrap_or_else(|_| panic!("case {i}: no answer once the COPY is over"));
        let got: Vec<String> = got.iter().map(shown).collect();
        assert_eq!(got, ["T", &format!("D{i}"), "C", "ZI"], "case {i}");
        // Both go on as usual.
        a.parse("", "select count(*) from t where id = $1");
        a.bind("", "", &[Some("1")]).execute("", 0).sync();
        assert_eq!(answer(&mut a, 'Z').await, ["1", "2", "D1", "C", "ZI"]);
        b.query("select 'b'");
        assert_eq!(answer(&mut b, 'Z').await, ["T", "Db", "C", "ZI"]);
    }
    let direct = connect(&env.direct_dsn()).await;
    let n: i64 = direct
        .query_one("select count(*) from t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 3, "rows 1, 3 and 4");
}

/// tokio-postgres's `copy_in` (Sync before the data, CopyDone or CopyFail
/// and a Sync after), text and binary, succeeding and failing, then
/// ordinary queries on the same client: the same through a pool as direct,
/// on a table of its own and on a temporary one (which pins).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_postgres_copy_in_through_a_pool_as_direct() {
    let env = Env::shared(|c| pooling(c, 2)).await;
    let mut seen = Vec::new();
    for (i, dsn) in [env.direct_dsn(), env.proxy_dsn()].iter().enumerate() {
        for temp in [false, true] {
            let c = connect(dsn).await;
            let table = format!("foo_{i}_{temp}");
            let create = match temp {
                true => "create temporary table",
                false => "create table",
            };
            c.batch_execute(&format!("{create} {table} (id int, name text)"))
                .await
                .unwrap();
            seen.push(copy_in_uses(&c, &table).await);
        }
    }
    assert_eq!(seen[0], seen[2], "through a pool, as direct");
    assert_eq!(seen[1], seen[3], "pinned, as direct");
    assert_eq!(seen[0], seen[1]);
}

/// What tokio-postgres's own COPY tests do, reported as text.
async fn copy_in_uses(c: &tokio_postgres::Client, table: &str) -> Vec<String> {
    let mut seen = Vec::new();
    let copy = format!("copy {table} (id, name) from stdin");
    // copy_in: two chunks.
    let sink = c.copy_in(&copy).await.unwrap();
    pin_mut!(sink);
    sink.send(bytes::Bytes::from_static(b"1\tjim\n2\t"))
        .await
        .unwrap();
    sink.send(bytes::Bytes::from_static(b"joe\n"))
        .await
        .unwrap();
    seen.push(format!("copied {}", sink.finish().await.unwrap()));
    seen.push(rows(c, table).await);
    // copy_in_error: the sink dropped unfinished sends CopyFail.
    {
        let sink = c.copy_in(&copy).await.unwrap();
        pin_mut!(sink);
        sink.send(bytes::Bytes::from_static(b"3\tsteven\n"))
            .await
            .unwrap();
    }
    seen.push(rows(c, table).await);
    // A bad row.
    let sink = c.copy_in(&copy).await.unwrap();
    pin_mut!(sink);
    sink.send(bytes::Bytes::from_static(b"x\ty\n"))
        .await
        .unwrap();
    let e = sink.finish().await.unwrap_err();
    seen.push(format!("{:?}", e.code()));
    seen.push(rows(c, table).await);
    // Binary, through BinaryCopyInWriter, a hundred rows then a few.
    for n in [100, 3] {
        let binary = format!("copy {table} (id, name) from stdin (format binary)");
        let sink = c.copy_in(&binary).await.unwrap();
        let writer = BinaryCopyInWriter::new(sink, &[Type::INT4, Type::TEXT]);
        pin_mut!(writer);
        for k in 0..n {
            let name = format!("b{k}");
            writer.as_mut().write(&[&(10 + k), &name]).await.unwrap();
        }
        seen.push(format!("binary {}", writer.finish().await.unwrap()));
    }
    seen.push(rows(c, table).await);
    // The same client goes on: a transaction with a COPY in it.
    c.batch_execute("begin").await.unwrap();
    let sink = c.copy_in(&copy).await.unwrap();
    pin_mut!(sink);
    sink.send(bytes::Bytes::from_static(b"500\tin a block\n"))
        .await
        .unwrap();
    seen.push(format!("copied {}", sink.finish().await.unwrap()));
    c.batch_execute("rollback").await.unwrap();
    seen.push(rows(c, table).await);
    let one: i32 = c
        .query_one("select $1::int", &[&1i32])
        .await
        .unwrap()
        .get(0);
    seen.push(format!("then {one}"));
    seen
}

async fn rows(c: &tokio_postgres::Client, table: &str) -> String {
    let sql =
        format!("select count(*), coalesce(string_agg(name, ',' order by id), '') from {table}");
    let row = c.query_one(&sql, &[]).await.unwrap();
    format!("{} {}", row.get::<_, i64>(0), row.get::<_, String>(1))
}

/// A Sync sent among a COPY's data is ignored by the server if the COPY
/// reads that far, and answered if it failed before, which only the server
/// knows: when such a COPY fails, the client gets the server's error and
/// then a FATAL of onetrip's, and the session ends rather than go on
/// unsure of whose the next answers are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_copy_with_a_sync_among_its_data_ends_the_session() {
    let s = sides().await;
    for port in [s.env.proxy_port(), s.proxy(POOLED).local_addr().port()] {
        let mut raw = Raw::connect(port, &[("database", s.env.db.as_str())]).await;
        raw.parse("", "copy t from stdin").bind("", "", &[]);
        raw.execute("", 0).sync();
        assert_eq!(answer(&mut raw, 'G').await, ["1", "2", "G"]);
        raw.copy_data(b"100\tx\n").sync().copy_data(b"101\t1\n");
        raw.copy_done().sync();
        raw.send().await;
        let got: Vec<String> = raw.until_closed().await.iter().map(shown).collect();
        assert_eq!(got.first().map(String::as_str), Some("E22P02"), "{got:?}");
        assert_eq!(got.last().map(String::as_str), Some("E0A000"), "{got:?}");
        assert!(got[1..got.len() - 1].iter().all(|m| m == "ZI"), "{got:?}");
    }
}
