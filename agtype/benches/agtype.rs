//! Throughput of text parsing (against serde_json on the same JSON
//! documents), binary encode/decode, and the object lookup crossover that
//! sets `BINARY_SEARCH_MIN_PAIRS`.
//!
//! `cargo bench -p agtype` (add `-- --quick` for a short run).

use std::hint::black_box;
use std::time::Duration;

use agtype::{AgtypeRef, Value};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

/// A deterministic JSON document of `n` records with the mix of kinds
/// graph properties usually have.
fn records(n: usize) -> String {
    let mut s = String::from("[");
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..n {
        if i > 0 {
            s.push_str(", ");
        }
        let r = next();
        s.push_str(&format!(
            r#"{{"id": {}, "name": "user_{}", "email": "u{}@example.com", "score": {}, "active": {}, "tags": ["a{}", "b{}", "c"], "geo": {{"lat": {}, "lon": {}}}, "bio": "Line one\nline \"two\" \u00e9t\u00e9", "parent": null}}"#,
            r % 1_000_000_000,
            i,
            r % 977,
            (r % 100_000) as f64 / 7.0,
            r % 2 == 0,
            r % 13,
            r % 17,
            (r % 18_000) as f64 / 100.0 - 90.0,
            (r % 36_000) as f64 / 100.0 - 180.0,
        ));
    }
    s.push(']');
    s
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
}

fn parse(c: &mut Criterion) {
    let doc = records(500);
    let mut g = c.benchmark_group("parse");
    g.throughput(Throughput::Bytes(doc.len() as u64));
    g.bench_function("agtype", |b| {
        b.iter(|| agtype::parse(black_box(&doc)).unwrap())
    });
    g.bench_function("serde_json", |b| {
        b.iter(|| serde_json::from_str::<serde_json::Value>(black_box(&doc)).unwrap())
    });
    g.finish();

    let v = agtype::parse(&doc).unwrap();
    let mut g = c.benchmark_group("print");
    g.throughput(Throughput::Bytes(doc.len() as u64));
    g.bench_function("agtype", |b| b.iter(|| black_box(&v).to_string()));
    let j: serde_json::Value = serde_json::from_str(&doc).unwrap();
    g.bench_function("serde_json", |b| {
        b.iter(|| serde_json::to_string(black_box(&j)).unwrap())
    });
    g.finish();
}

fn binary(c: &mut Criterion) {
    let v = agtype::parse(&records(500)).unwrap();
    let bytes = agtype::encode(&v);
    let mut g = c.benchmark_group("binary");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("encode", |b| b.iter(|| agtype::encode(black_box(&v))));
    g.bench_function("decode", |b| {
        b.iter(|| agtype::decode(black_box(&bytes)).unwrap())
    });
    g.bench_function("view_walk", |b| {
        b.iter(|| AgtypeRef::new(black_box(&bytes)).unwrap().tokens().count())
    });
    g.finish();
}

/// Keys of varied lengths, as property names are.
fn object(n: usize) -> (Vec<u8>, Vec<String>) {
    let keys: Vec<String> = (0..n)
        .map(|i| format!("{}{i}", &"property_name"[..(i * 7) % 12 + 1]))
        .collect();
    let o: agtype::Object = keys.iter().map(|k| (k.clone(), Value::from(1))).collect();
    (agtype::encode(&Value::Object(o)), keys)
}

fn lookup(c: &mut Criterion) {
    let mut g = c.benchmark_group("lookup");
    for n in [2, 4, 8, 16, 32, 64, 128, 192, 256, 512] {
        let (bytes, keys) = object(n);
        let AgtypeRef::Object(o) = AgtypeRef::new(&bytes).unwrap() else {
            unreachable!("encoded an object")
        };
        g.throughput(Throughput::Elements(keys.len() as u64));
        g.bench_with_input(BenchmarkId::new("linear", n), &keys, |b, keys| {
            b.iter(|| {
                keys.iter()
                    .filter(|k| o.get_linear(black_box(k)).is_some())
                    .count()
            })
        });
        g.bench_with_input(BenchmarkId::new("binary", n), &keys, |b, keys| {
            b.iter(|| {
                keys.iter()
                    .filter(|k| o.get_binary(black_box(k)).is_some())
                    .count()
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = parse, binary, lookup
}
criterion_main!(benches);
