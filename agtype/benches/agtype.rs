//! Throughput of text parsing and printing (against serde_json on the same
//! JSON document), of decoding the container against parsing the same
//! value's text, of binary encoding, and the object lookup crossover that
//! sets `BINARY_SEARCH_MIN_PAIRS`.
//!
//! `cargo bench -p agtype -- 'parse|print|decode'` runs the three
//! comparisons side by side; each group reports both contenders, so read
//! the ratio of their times within one run. On Linux `decode_cpu` repeats
//! `decode` timed by the thread's CPU clock, for machines shared with
//! other work.

use std::hint::black_box;
use std::time::Duration;

use agtype::{AgtypeRef, Value};
use criterion::measurement::Measurement;
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
    g.bench_function("agtype", |b| b.iter(|| agtype::to_text(black_box(&v))));
    let j: serde_json::Value = serde_json::from_str(&doc).unwrap();
    g.bench_function("serde_json", |b| {
        b.iter(|| serde_json::to_string(black_box(&j)).unwrap())
    });
    g.finish();
}

/// The same value from its container bytes and from its text; throughput
/// counts records, as the two inputs differ in size. `binary` builds the
/// owned `Value` (as `text` does), `view` reads every token of the
/// container in place; `clone` is the floor for anything that builds the
/// owned value: the same allocations and copies, with nothing to read.
fn decode(c: &mut Criterion) {
    decode_group(c, "decode");
}

/// [`decode`] again, timed by the thread's CPU clock: on a machine shared
/// with other work, wall time also counts the time the bench waits for a
/// core, which varies from one contender to the next and blurs their
/// ratio; CPU time leaves it out.
#[cfg(target_os = "linux")]
fn decode_cpu(c: &mut Criterion<cpu::ThreadCpuTime>) {
    decode_group(c, "decode_cpu");
}

fn decode_group<M: Measurement>(c: &mut Criterion<M>, name: &str) {
    const N: usize = 500;
    let text = records(N);
    let value = agtype::parse(&text).unwrap();
    let bytes = agtype::encode(&value);
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("binary", |b| {
        b.iter(|| agtype::decode(black_box(&bytes)).unwrap())
    });
    g.bench_function("view", |b| {
        b.iter(|| AgtypeRef::new(black_box(&bytes)).unwrap().tokens().count())
    });
    g.bench_function("text", |b| {
        b.iter(|| agtype::parse(black_box(&text)).unwrap())
    });
    g.bench_function("clone", |b| b.iter(|| black_box(&value).clone()));
    g.finish();
}

#[cfg(target_os = "linux")]
mod cpu {
    use criterion::measurement::{Measurement, ValueFormatter, WallTime};

    /// CPU time of the calling thread, in nanoseconds.
    pub struct ThreadCpuTime(WallTime);

    impl ThreadCpuTime {
        pub fn new() -> Self {
            ThreadCpuTime(WallTime)
        }
    }

    fn now_ns() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec for the call to fill;
        // the clock id is a constant the kernel supports, and the result
        // is checked before `ts` is read.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }

    impl Measurement for ThreadCpuTime {
        type Intermediate = u64;
        type Value = u64;

        fn start(&self) -> u64 {
            now_ns()
        }
        fn end(&self, start: u64) -> u64 {
            now_ns().saturating_sub(start)
        }
        fn add(&self, a: &u64, b: &u64) -> u64 {
            a + b
        }
        fn zero(&self) -> u64 {
            0
        }
        fn to_f64(&self, v: &u64) -> f64 {
            *v as f64
        }
        /// Nanoseconds, shown as wall time's are.
        fn formatter(&self) -> &dyn ValueFormatter {
            self.0.formatter()
        }
    }
}

fn binary(c: &mut Criterion) {
    let v = agtype::parse(&records(500)).unwrap();
    let bytes = agtype::encode(&v);
    let mut g = c.benchmark_group("binary");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("encode", |b| b.iter(|| agtype::encode(black_box(&v))));
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
    targets = parse, decode, binary, lookup
}
#[cfg(target_os = "linux")]
criterion_group! {
    name = cpu_benches;
    config = config().with_measurement(cpu::ThreadCpuTime::new());
    targets = decode_cpu
}
#[cfg(target_os = "linux")]
criterion_main!(benches, cpu_benches);
#[cfg(not(target_os = "linux"))]
criterion_main!(benches);
