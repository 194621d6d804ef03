//! The part of AGE's catalog the compiler needs: graphs (namespace, oid)
//! and their labels (kind, table).

use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelKind {
    Vertex,
    Edge,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    pub name: String,
    pub kind: LabelKind,
    /// Table name inside the graph's namespace (AGE's `ag_label.relation`).
    pub relation: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Graph {
    pub name: String,
    /// Schema holding the label tables.
    pub namespace: String,
    /// `ag_graph.graphid`; `None` only in assume-labels mode, where it is
    /// looked up by name in the emitted SQL.
    pub oid: Option<u32>,
    pub labels: HashMap<String, Label>,
}

/// Graphs by name. Build it from the rows of [`Catalog::QUERY`], or use
/// [`Catalog::assume_all`] when no server is at hand.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    pub graphs: HashMap<String, Graph>,
    /// Treat every graph as existing (namespace = graph name) and every
    /// label as present with the kind its position implies.
    pub assume_labels: bool,
}

impl Catalog {
    /// One row per label (graphs without labels still yield one row with
    /// NULL label columns): graph name, namespace, graph oid, label name,
    /// kind ('v' or 'e'), relation (table) name.
    pub const QUERY: &'static str = "SELECT g.name::text, g.namespace::regnamespace::text, \
         g.graphid::oid::int8, l.name::text, l.kind::text, l.relation::regclass::text \
         FROM ag_catalog.ag_graph g LEFT JOIN ag_catalog.ag_label l ON l.graph = g.graphid";

    pub fn new() -> Catalog {
        Catalog::default()
    }

    /// A catalog that assumes every graph and label exists.
    pub fn assume_all() -> Catalog {
        Catalog {
            graphs: HashMap::new(),
            assume_labels: true,
        }
    }

    /// Adds a graph (replacing one of the same name).
    pub fn add_graph(&mut self, name: &str, namespace: &str, oid: u32) {
        self.graphs.insert(
            name.to_string(),
            Graph {
                name: name.to_string(),
                namespace: unquote_ident(namespace),
                oid: Some(oid),
                labels: HashMap::new(),
            },
        );
    }

    /// Adds a label to a graph added before; false when the graph is unknown.
    pub fn add_label(&mut self, graph: &str, name: &str, kind: LabelKind, relation: &str) -> bool {
        let Some(g) = self.graphs.get_mut(graph) else {
            return false;
        };
        // `regclass::text` may be schema-qualified and quoted; keep the table.
        let rel = split_last_ident(relation);
        g.labels.insert(
            name.to_string(),
            Label {
                name: name.to_string(),
                kind,
                relation: rel,
            },
        );
        true
    }

    /// Builds a catalog from the rows of [`Catalog::QUERY`].
    #[allow(clippy::type_complexity)]
    pub fn from_rows<'a, I>(rows: I) -> Catalog
    where
        I: IntoIterator<
            Item = (
                &'a str,
                &'a str,
                i64,
                Option<&'a str>,
                Option<&'a str>,
                Option<&'a str>,
            ),
        >,
    {
        let mut c = Catalog::new();
        for (graph, ns, oid, label, kind, rel) in rows {
            if !c.graphs.contains_key(graph) {
                c.add_graph(graph, ns, u32::try_from(oid).unwrap_or(0));
            }
            if let (Some(label), Some(kind), Some(rel)) = (label, kind, rel) {
                let kind = if kind == "e" {
                    LabelKind::Edge
                } else {
                    LabelKind::Vertex
                };
                c.add_label(graph, label, kind, rel);
            }
        }
        c
    }

    /// Reads [`Catalog::QUERY`]'s rows as tab-separated text, one row a
    /// line, empty fields for NULL (what `psql -AtF $'\t' -c "<QUERY>"`
    /// prints). Malformed lines are skipped.
    pub fn from_tsv(text: &str) -> Catalog {
        let rows: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split('\t').collect::<Vec<_>>())
            .filter(|r| r.len() == 6 && r[2].parse::<i64>().is_ok())
            .collect();
        fn opt(s: &str) -> Option<&str> {
            if s.is_empty() { None } else { Some(s) }
        }
        Catalog::from_rows(rows.iter().map(|r| {
            (
                r[0],
                r[1],
                r[2].parse().unwrap_or(0),
                opt(r[3]),
                opt(r[4]),
                opt(r[5]),
            )
        }))
    }

    /// The graph, or in assume mode a synthesized one.
    pub fn graph(&self, name: &str) -> Option<Graph> {
        if let Some(g) = self.graphs.get(name) {
            return Some(g.clone());
        }
        if self.assume_labels {
            return Some(Graph {
                name: name.to_string(),
                namespace: name.to_string(),
                oid: None,
                labels: HashMap::new(),
            });
        }
        None
    }
}

impl Graph {
    /// The table of a label of the wanted kind, or `None` when AGE's answer
    /// would not come from a plain table scan (missing label, other kind).
    pub fn label_relation(&self, name: &str, kind: LabelKind, assume: bool) -> Option<String> {
        match self.labels.get(name) {
            Some(l) if l.kind == kind => Some(l.relation.clone()),
            Some(_) => None,
            None if assume => Some(name.to_string()),
            None => None,
        }
    }
}

fn unquote_ident(s: &str) -> String {
    if s.len() >= 2 && s.starts_with('"') && s.ends_with('"') {
        s[1..s.len() - 1].replace("\"\"", "\"")
    } else {
        s.to_string()
    }
}

/// Last dot-separated part of a possibly qualified, possibly quoted name.
fn split_last_ident(s: &str) -> String {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut in_q = false;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if in_q && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => in_q = !in_q,
            '.' if !in_q => parts.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    parts.push(cur);
    parts.pop().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_rows_unquotes() {
        let c = Catalog::from_rows([
            ("g", "g", 7, Some("Person"), Some("v"), Some("g.\"Person\"")),
            ("g", "g", 7, Some("KNOWS"), Some("e"), Some("g.\"KNOWS\"")),
            ("h", "\"H x\"", 8, None, None, None),
        ]);
        let g = c.graph("g").unwrap();
        assert_eq!(g.oid, Some(7));
        assert_eq!(g.labels["Person"].relation, "Person");
        assert_eq!(g.labels["KNOWS"].kind, LabelKind::Edge);
        assert_eq!(c.graph("h").unwrap().namespace, "H x");
        assert!(c.graph("nope").is_none());
    }

    #[test]
    fn from_tsv_matches_rows() {
        let t = "g\tg\t7\tPerson\tv\tg.\"Person\"\ng\tg\t7\tKNOWS\te\t\"KNOWS\"\nh\th\t8\t\t\t\nbad line\n";
        let c = Catalog::from_tsv(t);
        assert_eq!(c.graphs.len(), 2);
        assert_eq!(c.graph("g").unwrap().labels["KNOWS"].relation, "KNOWS");
    }
}
