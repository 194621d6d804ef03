//! psql through the proxy prints exactly what it prints direct.

use onetrip_tests::Env;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dash_c_matches_direct() {
    let env = Env::shared(|_| {}).await;
    let sql = "select g, repeat('ab', g), g::float8 / 3 from generate_series(1, 50) g";
    let direct = env.psql_ok(false, &["-A", "-c", sql]);
    let proxied = env.psql_ok(true, &["-A", "-c", sql]);
    assert_eq!(direct, proxied);
    assert!(proxied.contains("(50 rows)"), "{proxied}");
    // An error is reported the same way, with psql's exit status 1.
    let d = env.psql(false, &["-c", "select 1/0"]);
    let p = env.psql(true, &["-c", "select 1/0"]);
    assert_eq!((d.status.code(), d.stderr), (p.status.code(), p.stderr));
    assert_eq!(p.status.code(), Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dash_f_runs_a_multi_statement_script() {
    let env = Env::shared(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let mut outputs = Vec::new();
    for (i, via) in [false, true].into_iter().enumerate() {
        let script = dir.path().join(format!("s{i}.sql"));
        std::fs::write(
            &script,
            format!(
                "create table s{i} (id int, t text);\n\
                 insert into s{i} select g, md5(g::text) from generate_series(1, 200) g;\n\
                 begin;\nupdate s{i} set t = 'x' where id % 2 = 0;\nsavepoint a;\n\
                 delete from s{i};\nrollback to a;\ncommit;\n\
                 select count(*), count(*) filter (where t = 'x') from s{i};\n\
                 \\echo done\n\
                 select id, t from s{i} order by id limit 5;\n"
            ),
        )
        .unwrap();
        let out = env.psql_ok(
            via,
            &[
                "-A",
                "-v",
                "ON_ERROR_STOP=1",
                "-f",
                script.to_str().unwrap(),
            ],
        );
        outputs.push(out.replace(&format!("s{i}"), "s"));
    }
    assert_eq!(outputs[0], outputs[1]);
    assert!(outputs[1].contains("200|100"), "{}", outputs[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backslash_copy_both_ways() {
    let env = Env::shared(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.csv");
    let mut csv = String::new();
    for i in 0..20_000 {
        csv.push_str(&format!(
            "{i},\"quoted, \"\"text\"\" {i}\",{}\n",
            i as f64 / 7.0
        ));
    }
    std::fs::write(&input, &csv).unwrap();
    env.psql_ok(false, &["-c", "create table c (id int, t text, f float8)"]);
    // \copy in through the proxy, then \copy out both ways.
    let copy_in = format!("\\copy c from '{}' csv", input.display());
    env.psql_ok(true, &["-c", &copy_in]);
    let mut outs = Vec::new();
    for via in [false, true] {
        let path = dir.path().join(format!("out-{via}.csv"));
        env.psql_ok(
            via,
            &[
                "-c",
                &format!(
                    "\\copy (select * from c order by id) to '{}' csv",
                    path.display()
                ),
            ],
        );
        outs.push(std::fs::read(&path).unwrap());
    }
    assert_eq!(outs[0], outs[1]);
    // Floats print with full precision (extra_float_digits defaults to 1 in PG 12+).
    assert_eq!(String::from_utf8(outs[1].clone()).unwrap(), csv);
}
