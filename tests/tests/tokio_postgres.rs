//! tokio-postgres through the proxy gets exactly what it gets direct.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt, TryStreamExt};
use onetrip_tests::{Env, cancel_a_sleep, connect, connect_raw, simple_rows};
use tokio_postgres::{AsyncMessage, error::SqlState};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queries_prepared_statements_and_transactions_match_direct() {
    let env = Env::shared(|_| {}).await;
    let mut seen = Vec::new();
    for (i, via) in [false, true].into_iter().enumerate() {
        let c = connect(&env.dsn(via)).await;
        let t = format!("tx_{i}");
        c.batch_execute(&format!("create table {t} (id int primary key, v text)"))
            .await
            .unwrap();
        let simple = simple_rows(
            &c.simple_query("select 1, null::text, 'a''b'; select x from generate_series(1,3) x")
                .await
                .unwrap(),
        );
        // A named statement run several times with different parameters.
        let ins = c
            .prepare(&format!("insert into {t} values ($1, $2)"))
            .await
            .unwrap();
        for k in 0..5i32 {
            c.execute(&ins, &[&k, &format!("v{k}")]).await.unwrap();
        }
        // Committed and rolled-back transactions.
        let mut c = c;
        let tx = c.transaction().await.unwrap();
        tx.execute(&format!("update {t} set v = 'committed' where id = 1"), &[])
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let tx = c.transaction().await.unwrap();
        tx.execute(&format!("delete from {t}"), &[]).await.unwrap();
        tx.rollback().await.unwrap();
        // An error inside a transaction block aborts it until ROLLBACK.
        let tx = c.transaction().await.unwrap();
        let dup = tx
            .execute(&format!("insert into {t} values (1, 'dup')"), &[])
            .await
            .unwrap_err();
        let aborted = tx
            .query(&format!("select 1 from {t}"), &[])
            .await
            .unwrap_err();
        tx.rollback().await.unwrap();
        let rows: Vec<(i32, String)> = c
            .query(
                &format!("select id, v from {t} where id >= $1 order by id"),
                &[&0i32],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let typed: (i64, f64, bool, Option<String>) = {
            let r = c
                .query_one(
                    "select 9007199254740993::int8, 1.5::float8, true, null::text",
                    &[],
                )
                .await
                .unwrap();
            (r.get(0), r.get(1), r.get(2), r.get(3))
        };
        seen.push((
            simple,
            rows,
            typed,
            dup.code().cloned(),
            aborted.code().cloned(),
        ));
    }
    assert_eq!(seen[0], seen[1]);
    assert_eq!(seen[1].1.len(), 5);
    assert_eq!(seen[1].1[1].1, "committed");
    assert_eq!(seen[1].3, Some(SqlState::UNIQUE_VIOLATION));
    assert_eq!(seen[1].4, Some(SqlState::IN_FAILED_SQL_TRANSACTION));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_in_the_middle_of_a_pipeline_fails_only_its_query() {
    let env = Env::shared(|_| {}).await;
    let mut seen = Vec::new();
    for via in [false, true] {
        let c = connect(&env.dsn(via)).await;
        let (a, b, d, e) = (
            c.prepare("select $1::int * 2").await.unwrap(),
            c.prepare("select 1 / $1::int").await.unwrap(),
            c.prepare("select $1::text || '!'").await.unwrap(),
            c.prepare("select count(*) from generate_series(1, $1::int)")
                .await
                .unwrap(),
        );
        // Issued concurrently on one client: tokio-postgres pipelines them,
        // each Bind/Execute with its own Sync, without waiting in between.
        let (r1, r2, r3, r4) = tokio::join!(
            c.query_one(&a, &[&21i32]),
            c.query_one(&b, &[&0i32]),
            c.query_one(&d, &[&"ok"]),
            c.query_one(&e, &[&1000i32]),
        );
        seen.push((
            r1.map(|r| r.get::<_, i32>(0))
                .map_err(|e| e.code().cloned()),
            r2.map(|r| r.get::<_, i32>(0))
                .map_err(|e| e.code().cloned()),
            r3.map(|r| r.get::<_, String>(0))
                .map_err(|e| e.code().cloned()),
            r4.map(|r| r.get::<_, i64>(0))
                .map_err(|e| e.code().cloned()),
        ));
    }
    assert_eq!(seen[0], seen[1]);
    assert_eq!(seen[1].0, Ok(42));
    assert_eq!(seen[1].1, Err(Some(SqlState::DIVISION_BY_ZERO)));
    assert_eq!(seen[1].2, Ok("ok!".to_owned()));
    assert_eq!(seen[1].3, Ok(1000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_thousand_rows_match_direct() {
    let env = Env::shared(|_| {}).await;
    let sql = "select g, md5(g::text), case when g % 7 = 0 then null else g * 1.5 end::float8 \
               from generate_series(1, 100000) g";
    let mut seen = Vec::new();
    for via in [false, true] {
        let c = connect(&env.dsn(via)).await;
        let rows: Vec<(i32, String, Option<f64>)> = c
            .query(sql, &[])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        seen.push(rows);
    }
    assert_eq!(seen[0].len(), 100_000);
    assert!(seen[0] == seen[1], "100k-row results differ");
}

/// 10 MB of COPY text: rows with tabs, backslashes and non-ASCII escaped.
fn copy_data() -> Vec<u8> {
    let mut out = Vec::with_capacity(11 << 20);
    let mut i = 0u64;
    while out.len() < 10 << 20 {
        i += 1;
        let pad = "é\\\\x\\t".repeat((i % 40) as usize);
        out.extend_from_slice(
            format!("{i}\t{pad}{}\n", i.wrapping_mul(2654435761) % 1_000_003).as_bytes(),
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_in_and_out_of_10_mb_is_byte_identical() {
    let env = Env::shared(|_| {}).await;
    let data = copy_data();
    let direct = connect(&env.dsn(false)).await;
    let proxied = connect(&env.dsn(true)).await;
    direct
        .batch_execute("create table cp (id bigint primary key, payload text)")
        .await
        .unwrap();
    // COPY IN through the proxy, in 64 KB CopyData messages.
    let sink = proxied.copy_in("copy cp from stdin").await.unwrap();
    futures_util::pin_mut!(sink);
    for chunk in data.chunks(64 * 1024) {
        sink.send(bytes::Bytes::copy_from_slice(chunk))
            .await
            .unwrap();
    }
    assert_eq!(
        sink.finish().await.unwrap(),
        data.iter().filter(|b| **b == b'\n').count() as u64
    );
    // COPY OUT, direct and through the proxy, must give back the input.
    for c in [&direct, &proxied] {
        let out: Vec<bytes::Bytes> = c
            .copy_out("copy (select * from cp order by id) to stdout")
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        let out = out.concat();
        assert_eq!(out.len(), data.len());
        assert!(out == data, "COPY OUT bytes differ from what went in");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_reaches_an_idle_listener() {
    let env = Env::shared(|_| {}).await;
    let sender = connect(&env.dsn(false)).await;
    let mut seen = Vec::new();
    for via in [false, true] {
        let (client, mut conn) = connect_raw(&env.dsn(via)).await;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut msgs = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
            while let Some(Ok(m)) = msgs.next().await {
                if let AsyncMessage::Notification(n) = m {
                    let _ = tx.send((n.channel().to_owned(), n.payload().to_owned()));
                }
            }
        });
        client.batch_execute("listen chan").await.unwrap();
        sender
            .batch_execute("notify chan, 'hello'; notify chan, 'world'")
            .await
            .unwrap();
        // The listener issues no query: the proxy must forward while idle.
        let mut got = Vec::new();
        for _ in 0..2 {
            let n = tokio::time::timeout(Duration::from_secs(10), rx.recv())
                .await
                .expect("notification in time");
            got.push(n.expect("connection alive"));
        }
        seen.push(got);
        drop(client);
    }
    assert_eq!(seen[0], seen[1]);
    assert_eq!(
        seen[1],
        [
            ("chan".into(), "hello".into()),
            ("chan".into(), "world".into())
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_token_cancels_pg_sleep() {
    let env = Env::shared(|_| {}).await;
    let watcher = connect(&env.dsn(false)).await;
    let mut seen = Vec::new();
    for via in [false, true] {
        let c = connect(&env.dsn(via)).await;
        seen.push(cancel_a_sleep(c, &watcher).await);
    }
    assert_eq!(seen[0], seen[1]);
    assert_eq!(seen[1], Some(SqlState::QUERY_CANCELED));
}
