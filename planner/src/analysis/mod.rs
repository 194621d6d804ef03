//! One analysis of a statement's text: everything the proxy asks of it,
//! found in one pass and kept together. The text is lexed once; each
//! `cypher()` text is judged once; the classification, the catalog effect
//! and the compiled statement all come from that.
//!
//! ```
//! use onetrip_planner::analysis::Analyzer;
//! use onetrip_planner::classify::StatementClass;
//!
//! let analyzer = Analyzer::new(Vec::<String>::new());
//! let a = analyzer.analyze("SELECT * FROM cypher('g', $$ CREATE (:A) $$) AS (a agtype)", None);
//! assert_eq!(a.class.class, StatementClass::Write);
//! assert!(a.changes_catalog);
//! ```

mod cache;
pub mod texts;

use std::sync::atomic::{AtomicU64, Ordering};

pub use cache::{AnalysisCache, MAX_CACHED_LEN, lookups};

use crate::{
    classify::{Classification, Classifier, Pins},
    cypher::{Catalog, Rewrite, sql},
    lexer,
};

/// What a statement's text says, for one version of the AGE catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Analysis {
    /// What it may do (the classes coalescing goes by), with the isolation
    /// changes it makes.
    pub class: Classification,
    /// Its `cypher()` calls compiled, when analysed with a catalog;
    /// `Unchanged` otherwise.
    pub rewrite: Rewrite,
    /// Running it may change AGE's catalog (graphs, labels): judged
    /// against the catalog it was analysed with, if any.
    pub changes_catalog: bool,
    /// What would tie a pooled session to its server connection.
    pub pins: Pins,
}

/// Analyses statements with a fixed set of extra read-only functions;
/// shareable between sessions.
#[derive(Clone, Debug, Default)]
pub struct Analyzer {
    classifier: Classifier,
    /// Tells analyzers apart where analyses are shared between sessions
    /// (`texts`): analyzers with other functions judge the same text
    /// otherwise. Clones, and every default one, judge alike and share it.
    id: u64,
}

/// Ids of analyzers made with [`Analyzer::new`] (0 is the default's).
static ANALYZER_IDS: AtomicU64 = AtomicU64::new(1);

/// Analyses run in this process, for tests and reports: a statement run
/// again should find its analysis in a cache, not here.
static ANALYSES: AtomicU64 = AtomicU64::new(0);

pub fn analyses_run() -> u64 {
    ANALYSES.load(Ordering::Relaxed)
}

impl Analyzer {
    pub fn new<I, S>(read_only_functions: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self {
            classifier: Classifier::new(read_only_functions),
            id: ANALYZER_IDS.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Analyses `sql`; with `catalog`, its `cypher()` calls are compiled.
    pub fn analyze(&self, sql: &str, catalog: Option<&Catalog>) -> Analysis {
        ANALYSES.fetch_add(1, Ordering::Relaxed);
        let tokens: Vec<lexer::Token> = lexer::tokens(sql).collect();
        let pieces = lexer::split_tokens(sql, &tokens);
        let examined = sql::examine(sql, &tokens);
        let class = self
            .classifier
            .classify_pieces(sql, &pieces, &examined.effects);
        let rewrite = match catalog {
            Some(c) => examined.rewrite(sql, c),
            None => Rewrite::Unchanged,
        };
        Analysis {
            class,
            rewrite,
            changes_catalog: examined.changes_catalog(catalog),
            pins: Pins::of(sql),
        }
    }

    /// The classifier alone, for statements nothing else is asked of.
    pub fn classifier(&self) -> &Classifier {
        &self.classifier
    }
}

/// Entry points for fuzzers; not part of the stable API.
#[doc(hidden)]
pub mod fuzzing {
    use super::*;

    /// Analyses arbitrary text as a statement, with and without a catalog
    /// (every label assumed), finds its words and fingerprint; must never
    /// panic, and the class must not depend on the catalog.
    pub fn fuzz_analyze(data: &[u8]) {
        let text = String::from_utf8_lossy(data);
        let analyzer = Analyzer::new(["lower", "my_fn"]);
        let plain = analyzer.analyze(&text, None);
        let compiled = analyzer.analyze(&text, Some(&Catalog::assume_all()));
        assert_eq!(plain.class, compiled.class, "{text:?}");
        let _ = crate::words::Words::scan(&text);
        let _ = crate::fingerprint::fingerprint(&text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::StatementClass;

    #[test]
    fn one_analysis_answers_every_question() {
        let a = Analyzer::default();
        let mut catalog = Catalog::new();
        catalog.add_graph("g", "g", 1);
        catalog.add_label(
            "g",
            "Person",
            crate::cypher::LabelKind::Vertex,
            "g.\"Person\"",
        );
        let read =
            "select * from cypher('g', $$ MATCH (n:Person) RETURN n.name $$) as (name agtype)";
        let r = a.analyze(read, Some(&catalog));
        assert_eq!(r.class.class, StatementClass::Read);
        assert!(!r.changes_catalog);
        assert!(matches!(r.rewrite, Rewrite::Rewritten(_)));
        assert_eq!(a.analyze(read, None).rewrite, Rewrite::Unchanged);

        // AGE's writes move sequences: any cypher() call counts as one.
        assert_eq!(
            r.pins.reset,
            crate::classify::Reset::Sequences("sequence function")
        );
        assert_eq!(r.pins.pin, None);
        let pins = a.analyze("listen x; load 'auto_explain'", None).pins;
        assert_eq!(pins.pin, Some("LISTEN"));
        assert_eq!(pins.past_reset, None);
        assert!(pins.loads);
        assert_eq!(pins.reset, crate::classify::Reset::Full("LOAD"));
        assert!(a.analyze("DROP DATABASE d", None).pins.database_command);

        let ddl = a.analyze("select ag_catalog.create_vlabel('g', 'City')", None);
        assert!(ddl.changes_catalog);
        // A write changes the catalog only by naming a label it lacks.
        let write = |cypher: &str, c: Option<&Catalog>| {
            let sql = format!("select * from cypher('g', $$ {cypher} $$) as (a agtype)");
            a.analyze(&sql, c).changes_catalog
        };
        assert!(!write("CREATE (:Person {name: 'x'})", Some(&catalog)));
        assert!(!write("MATCH (n:Person) DETACH DELETE n", Some(&catalog)));
        assert!(!write("MATCH (n) SET n.x = 1", Some(&catalog)));
        assert!(write(
            "CREATE (:Person)-[:KNOWS]->(:Person)",
            Some(&catalog)
        ));
        assert!(write("MERGE (:City)", Some(&catalog)));
        assert!(write("CREATE (:Person)", None));
        assert!(write("CREATE (:Person)", Some(&Catalog::assume_all())));
        let other = "select * from cypher('h', $$ CREATE (:Person) $$) as (a agtype)";
        assert!(a.analyze(other, Some(&catalog)).changes_catalog);
        let both = "select * from cypher('g', $$ CREATE (:Person) $$) as (a agtype), \
                    ag_catalog.drop_label('g', 'Person')";
        assert!(a.analyze(both, Some(&catalog)).changes_catalog);
        let plain = a.analyze(
            "select 1; set transaction isolation level serializable",
            None,
        );
        assert_eq!(plain.class.statement_count, 2);
        assert!(!plain.class.isolation.is_empty());
        assert!(!plain.changes_catalog);
    }
}
