//! Seeded LDBC-SNB-like graph for the differential test: Person, City,
//! Forum, Post, Comment, Tag; KNOWS, HAS_CREATOR, REPLY_OF, LIKES, HAS_TAG,
//! HAS_MEMBER, IS_LOCATED_IN. Properties are sometimes missing, sometimes
//! stored JSON null, and include lists, nested maps and awkward strings.
//! Output: SQL statements that load it with AGE's own functions plus
//! direct inserts into the label tables.

use onetrip_planner::cypher::literal::agtype_string;

pub const VLABELS: &[&str] = &["Person", "City", "Forum", "Post", "Comment", "Tag"];
pub const ELABELS: &[&str] = &[
    "KNOWS",
    "HAS_CREATOR",
    "REPLY_OF",
    "LIKES",
    "HAS_TAG",
    "HAS_MEMBER",
    "IS_LOCATED_IN",
];

pub const N_PERSON: u64 = 400;
pub const N_CITY: u64 = 30;
pub const N_TAG: u64 = 50;
pub const N_FORUM: u64 = 60;
pub const N_POST: u64 = 1200;
pub const N_COMMENT: u64 = 1500;

/// splitmix64: tiny, seeded, identical everywhere.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// true with probability pct/100.
    pub fn pct(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
    pub fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }
    /// A float with at most two decimals, so sums are exact enough to
    /// compare (see the public corpus notes on float sums).
    pub fn half(&mut self, max: u64) -> f64 {
        (self.below(max * 2) as f64) / 2.0
    }
}

const FIRST: &[&str] = &[
    "Anna",
    "Bo",
    "Chen",
    "Dário",
    "Émile",
    "Fatima",
    "Günter",
    "Hiro",
    "Ivan",
    "Jürgen",
    "Kofi",
    "Léa",
    "Mia",
    "Noor",
    "Olu",
    "Pedro",
    "Zoë",
    "Ахмед",
    "李",
    "Sørina",
];
const LAST: &[&str] = &[
    "O'Brien",
    "Müller",
    "Smith",
    "García",
    "Ng",
    "Kowalski",
    "D\"Arcy",
    "Back\\slash",
    "Okafor",
    "Tanaka",
];
const BROWSERS: &[&str] = &["Firefox", "Chrome", "Safari", "Opera"];
const LANGS: &[&str] = &["en", "es", "de", "zh", "ar"];
const SPECIAL: &[&str] = &[
    "it's a quote",
    "back\\slash",
    "dollar $$ quoted $$",
    "100% sure",
    "under_score",
    "underscore",
    "line\nbreak",
    "tab\there",
    "emoji 🎉 party",
    "",
    "' OR 1=1 --",
    "$tag$ nested $tag$",
];

pub struct Json;

impl Json {
    fn obj(kv: &[(&str, Option<String>)]) -> String {
        let parts: Vec<String> = kv
            .iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| format!("{}: {v}", agtype_string(k))))
            .collect();
        format!("{{{}}}", parts.join(", "))
    }
}

fn s(v: &str) -> Option<String> {
    Some(agtype_string(v))
}
fn i(v: i64) -> Option<String> {
    Some(v.to_string())
}
fn f(v: f64) -> Option<String> {
    Some(format!("{v:?}"))
}
fn null() -> Option<String> {
    Some("null".to_string())
}
fn list(items: &[String]) -> Option<String> {
    Some(format!("[{}]", items.join(", ")))
}

pub struct Graph {
    /// (label, properties JSON) per vertex, in insertion order per label.
    pub vertices: Vec<(&'static str, String)>,
    /// (label, start vertex index, end vertex index, properties)
    pub edges: Vec<(&'static str, usize, usize, String)>,
}

/// The graph, with `scale` times as many vertices of each label and edges
/// (1 for the differential test, more for the benchmark's instance).
pub fn generate_scaled(seed: u64, scale: u64) -> Graph {
    let scale = scale.max(1);
    let (n_person, n_city, n_tag) = (N_PERSON * scale, N_CITY * scale, N_TAG * scale);
    let (n_forum, n_post, n_comment) = (N_FORUM * scale, N_POST * scale, N_COMMENT * scale);
    let mut r = Rng::new(seed);
    let mut v: Vec<(&'static str, String)> = Vec::new();
    let mut e: Vec<(&'static str, usize, usize, String)> = Vec::new();
    let base = |v: &Vec<(&'static str, String)>| v.len();

    let city0 = base(&v);
    for c in 0..n_city {
        let aliases = if r.pct(30) {
            list(&[agtype_string(&format!("C{c}")), agtype_string("Town_X")])
        } else {
            None
        };
        let name = format!(
            "{}_City_{c}",
            r.pick(&["Lima", "Oslo", "Pune", "Kyiv", "Nara"])
        );
        v.push((
            "City",
            Json::obj(&[
                ("id", i(100 + c as i64)),
                ("name", s(&name)),
                ("aliases", aliases),
            ]),
        ));
    }
    let tag0 = base(&v);
    for t in 0..n_tag {
        let name = format!(
            "{}_{t}",
            r.pick(&["Music", "Art", "Go_lang", "Rust%", "Chess"])
        );
        v.push((
            "Tag",
            Json::obj(&[
                ("id", i(5000 + t as i64)),
                ("name", s(&name)),
                ("url", s(&format!("http://t/{t}"))),
            ]),
        ));
    }
    let person0 = base(&v);
    for p in 0..n_person {
        let tags = match r.below(6) {
            0 => None,
            1 => null(),
            2 => list(&[]),
            _ => {
                let n = 1 + r.below(4);
                let t: Vec<String> = (0..n)
                    .map(|_| agtype_string(&format!("t{}", r.below(20))))
                    .collect();
                list(&t)
            }
        };
        let address = if r.pct(35) {
            None
        } else {
            let geo = match r.below(4) {
                0 => None,
                1 => null(),
                _ => Some(Json::obj(&[
                    ("lat", f(r.half(90) - 20.0)),
                    ("lon", f(r.half(180) - 50.0)),
                ])),
            };
            Some(Json::obj(&[
                ("street", s(&format!("{} Street", r.below(300)))),
                ("city", s(&format!("City_{}", r.below(n_city)))),
                ("zip", s(&format!("{:05}", r.below(99999)))),
                ("geo", geo),
            ]))
        };
        let email = if r.pct(40) {
            None
        } else {
            let n = 1 + r.below(3);
            let l: Vec<String> = (0..n)
                .map(|k| agtype_string(&format!("p{p}_{k}@{}", r.pick(&["zoho.com", "gmail.com"]))))
                .collect();
            list(&l)
        };
        let score = match r.below(5) {
            0 => None,
            1 => null(),
            _ => f(r.half(100)),
        };
        v.push((
            "Person",
            Json::obj(&[
                ("id", i(100000 + p as i64)),
                ("firstName", s(r.pick(FIRST))),
                ("lastName", if r.pct(8) { None } else { s(r.pick(LAST)) }),
                (
                    "gender",
                    if r.pct(10) {
                        None
                    } else {
                        s(r.pick(&["male", "female"]))
                    },
                ),
                (
                    "age",
                    if r.pct(10) {
                        None
                    } else {
                        i(12 + r.below(70) as i64)
                    },
                ),
                (
                    "browserUsed",
                    if r.pct(5) {
                        null()
                    } else {
                        s(r.pick(BROWSERS))
                    },
                ),
                ("score", score),
                ("tags", tags),
                ("address", address),
                ("email", email),
                (
                    "creationDate",
                    i(1_260_000_000_000 + r.below(100_000_000_000) as i64),
                ),
            ]),
        ));
    }
    let forum0 = base(&v);
    for fi in 0..n_forum {
        v.push((
            "Forum",
            Json::obj(&[
                ("id", i(300000 + fi as i64)),
                (
                    "title",
                    s(&format!(
                        "{} {fi}",
                        r.pick(&["Wall of", "Group for", "Club_"])
                    )),
                ),
                (
                    "creationDate",
                    i(1_270_000_000_000 + r.below(10_000_000) as i64),
                ),
            ]),
        ));
    }
    let post0 = base(&v);
    for pi in 0..n_post {
        let image = r.pct(20);
        let content = if r.pct(3) {
            r.pick(SPECIAL).to_string()
        } else {
            format!(
                "post {pi} about {}",
                r.pick(&["cats", "dogs", "Rust", "AGE"])
            )
        };
        v.push((
            "Post",
            Json::obj(&[
                ("id", i(1_000_000 + pi as i64)),
                ("content", if image { None } else { s(&content) }),
                (
                    "imageFile",
                    if image {
                        s(&format!("photo{pi}.jpg"))
                    } else {
                        None
                    },
                ),
                (
                    "length",
                    i(if image {
                        0
                    } else {
                        content.chars().count() as i64
                    }),
                ),
                ("language", if r.pct(15) { None } else { s(r.pick(LANGS)) }),
                ("rating", if r.pct(70) { None } else { f(r.half(5)) }),
                (
                    "creationDate",
                    i(1_280_000_000_000 + r.below(1_000_000) as i64),
                ),
            ]),
        ));
    }
    let comment0 = base(&v);
    for ci in 0..n_comment {
        let content = if r.pct(4) {
            r.pick(SPECIAL).to_string()
        } else {
            format!("reply {ci}{}", if r.pct(50) { " ok" } else { "" })
        };
        let mentions = if r.pct(15) {
            let n = r.below(4);
            let names: Vec<String> = (0..n).map(|_| agtype_string(r.pick(FIRST))).collect();
            Some(Json::obj(&[
                ("count", i(n as i64)),
                ("names", list(&names)),
            ]))
        } else {
            None
        };
        v.push((
            "Comment",
            Json::obj(&[
                ("id", i(2_000_000 + ci as i64)),
                ("content", s(&content)),
                ("length", i(content.chars().count() as i64)),
                (
                    "creationDate",
                    i(1_290_000_000_000 + r.below(1_000_000) as i64),
                ),
                ("mentions", mentions),
            ]),
        ));
    }

    let person = |k: u64| person0 + k as usize;
    for p in 0..n_person {
        e.push((
            "IS_LOCATED_IN",
            person(p),
            city0 + r.below(n_city) as usize,
            "{}".into(),
        ));
        for _ in 0..r.below(8) {
            let q = r.below(n_person);
            let weight = match r.below(5) {
                0 => None,
                1 => null(),
                _ => f(r.half(10) / 10.0),
            };
            e.push((
                "KNOWS",
                person(p),
                person(q),
                Json::obj(&[
                    ("creationDate", i(r.below(1000) as i64)),
                    ("weight", weight),
                ]),
            ));
        }
    }
    // Self-loops, which undirected matching must report once.
    for p in [3u64, 77, 150] {
        e.push((
            "KNOWS",
            person(p),
            person(p),
            Json::obj(&[("weight", f(1.0)), ("selfLoop", Some("true".into()))]),
        ));
    }
    for fi in 0..n_forum {
        for _ in 0..1 + r.below(10) {
            e.push((
                "HAS_MEMBER",
                forum0 + fi as usize,
                person(r.below(n_person)),
                Json::obj(&[("joinDate", i(r.below(5000) as i64))]),
            ));
        }
        for _ in 0..r.below(3) {
            e.push((
                "HAS_TAG",
                forum0 + fi as usize,
                tag0 + r.below(n_tag) as usize,
                "{}".into(),
            ));
        }
    }
    for pi in 0..n_post {
        let post = post0 + pi as usize;
        e.push(("HAS_CREATOR", post, person(r.below(n_person)), "{}".into()));
        for _ in 0..r.below(3) {
            e.push(("HAS_TAG", post, tag0 + r.below(n_tag) as usize, "{}".into()));
        }
    }
    for ci in 0..n_comment {
        let c = comment0 + ci as usize;
        e.push(("HAS_CREATOR", c, person(r.below(n_person)), "{}".into()));
        let target = if ci > 0 && r.pct(40) {
            comment0 + r.below(ci) as usize
        } else {
            post0 + r.below(n_post) as usize
        };
        e.push(("REPLY_OF", c, target, "{}".into()));
    }
    for _ in 0..3000 {
        let target = if r.pct(50) {
            post0 + r.below(n_post) as usize
        } else {
            comment0 + r.below(n_comment) as usize
        };
        e.push((
            "LIKES",
            person(r.below(n_person)),
            target,
            Json::obj(&[("creationDate", i(r.below(100000) as i64))]),
        ));
    }
    Graph {
        vertices: v,
        edges: e,
    }
}

/// SQL to (re)create graph `name` and load `g`. `label_ids` must map each
/// label to its AGE label id (read after the labels are created), hence
/// two phases: [`setup_sql`] then [`load_sql`].
pub fn setup_sql(name: &str) -> Vec<String> {
    let mut out = vec![format!(
        "SELECT ag_catalog.drop_graph('{name}', true) FROM ag_catalog.ag_graph WHERE name = '{name}'"
    )];
    out.push(format!("SELECT ag_catalog.create_graph('{name}')"));
    for l in VLABELS {
        out.push(format!("SELECT ag_catalog.create_vlabel('{name}', '{l}')"));
    }
    for l in ELABELS {
        out.push(format!("SELECT ag_catalog.create_elabel('{name}', '{l}')"));
    }
    out
}

fn sql_str(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

pub fn load_sql(name: &str, g: &Graph, label_id: &dyn Fn(&str) -> u64) -> Vec<String> {
    let mut out = Vec::new();
    let mut seq: std::collections::HashMap<&str, u64> = Default::default();
    let mut ids = Vec::with_capacity(g.vertices.len());
    let mut rows: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for (label, props) in &g.vertices {
        let n = seq.entry(label).or_default();
        *n += 1;
        let id = (label_id(label) << 48) | *n;
        ids.push(id);
        rows.entry(label).or_default().push(format!(
            "('{id}'::text::ag_catalog.graphid, {}::ag_catalog.agtype)",
            sql_str(props)
        ));
    }
    let mut erows: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for (label, a, b, props) in &g.edges {
        let n = seq.entry(label).or_default();
        *n += 1;
        let id = (label_id(label) << 48) | *n;
        erows.entry(label).or_default().push(format!(
            "('{id}'::text::ag_catalog.graphid, '{}'::text::ag_catalog.graphid, '{}'::text::ag_catalog.graphid, {}::ag_catalog.agtype)",
            ids[*a],
            ids[*b],
            sql_str(props)
        ));
    }
    for (label, rs) in rows {
        for chunk in rs.chunks(500) {
            out.push(format!(
                "INSERT INTO \"{name}\".\"{label}\" (id, properties) VALUES {}",
                chunk.join(", ")
            ));
        }
    }
    for (label, rs) in erows {
        for chunk in rs.chunks(500) {
            out.push(format!(
                "INSERT INTO \"{name}\".\"{label}\" (id, start_id, end_id, properties) VALUES {}",
                chunk.join(", ")
            ));
        }
    }
    for l in VLABELS.iter().chain(ELABELS) {
        out.push(format!("ANALYZE \"{name}\".\"{l}\""));
    }
    out
}
