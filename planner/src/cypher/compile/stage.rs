//! The FROM items and conditions of the SELECT being built.

/// One FROM item.
#[derive(Debug, Clone)]
pub(super) enum Item {
    /// A table or subquery with its alias.
    Table(String),
    /// A function or subquery that reads the items before it (UNWIND,
    /// variable-length relationships).
    Lateral(String),
    /// OPTIONAL MATCH: left-joined, reading the items before it.
    LeftLateral(String),
}

#[derive(Debug, Clone, Default)]
pub(super) struct Stage {
    pub items: Vec<Item>,
    pub conds: Vec<String>,
    /// A node of its patterns has an inline property map: PostgreSQL
    /// expects its containment test (`@>`) to keep few rows, and starts
    /// the joins there. A WHERE equality on a property it expects to keep
    /// 0.5%, and without indexes the joins of whole tables that follow
    /// ran up to 1.4x slower with the identity ties of
    /// `Compiler::bind_endpoint`.
    pub pinned: bool,
}

impl Stage {
    /// ` FROM ...` (empty without items). A comma list while every item is
    /// an inner one, which leaves PostgreSQL free to order the joins; with a
    /// left join, a chain of explicit joins so that the left-joined
    /// subquery may read every item before it.
    pub(super) fn sql_from(&self) -> String {
        if self.items.is_empty() {
            return String::new();
        }
        let explicit = self.items.iter().any(|i| matches!(i, Item::LeftLateral(_)));
        let mut out = String::from(" FROM ");
        for (k, item) in self.items.iter().enumerate() {
            match (explicit, k, item) {
                (false, 0, Item::Table(t) | Item::Lateral(t)) => out.push_str(t),
                (false, _, Item::Table(t)) => {
                    out.push_str(", ");
                    out.push_str(t);
                }
                (false, _, Item::Lateral(t)) => {
                    out.push_str(", LATERAL ");
                    out.push_str(t);
                }
                (true, 0, Item::Table(t) | Item::Lateral(t)) => out.push_str(t),
                // OPTIONAL MATCH first: one row to keep when nothing matches.
                (true, 0, Item::LeftLateral(t)) => {
                    out.push_str("(SELECT 1) AS _one LEFT JOIN LATERAL ");
                    out.push_str(t);
                    out.push_str(" ON true");
                }
                (true, _, Item::Table(t)) => {
                    out.push_str(" CROSS JOIN ");
                    out.push_str(t);
                }
                (true, _, Item::Lateral(t)) => {
                    out.push_str(" CROSS JOIN LATERAL ");
                    out.push_str(t);
                }
                (_, _, Item::LeftLateral(t)) => {
                    out.push_str(" LEFT JOIN LATERAL ");
                    out.push_str(t);
                    out.push_str(" ON true");
                }
            }
        }
        out
    }

    /// ` WHERE ...` (empty without conditions).
    pub(super) fn sql_where(&self) -> String {
        if self.conds.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", self.conds.join(" AND "))
        }
    }
}
