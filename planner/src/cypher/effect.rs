//! What a `cypher()` call's text may do: the one answer to "does this
//! Cypher write?", for the classifier (a write is never coalesced) and for
//! the catalog (a write may create labels). Read from the Cypher lexer's
//! tokens, not the parser, so Cypher the compiler does not know is judged
//! too. Deliberately conservative: a property named `set` (`n.set`)
//! counts as SET, and text the lexer can't follow is not a read.

use super::lexer::{Tok, tokenize};

/// What the Cypher text may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CypherEffect {
    Read,
    /// An updating clause; the keyword, upper-cased.
    Write(&'static str),
    /// Something the scan can't vouch for.
    Unknown(String),
}

const WRITE_KEYWORDS: &[&str] = &["CREATE", "MERGE", "SET", "DELETE", "REMOVE"];

pub fn effect(text: &str) -> CypherEffect {
    let toks = match tokenize(text) {
        Ok(t) => t,
        Err(e) => return CypherEffect::Unknown(format!("cypher text not understood: {e}")),
    };
    for (i, t) in toks.iter().enumerate() {
        let Tok::Ident {
            name,
            quoted: false,
        } = &t.tok
        else {
            continue;
        };
        if let Some(kw) = WRITE_KEYWORDS.iter().find(|k| name.eq_ignore_ascii_case(k)) {
            return CypherEffect::Write(kw);
        }
        if name.eq_ignore_ascii_case("CALL") {
            return CypherEffect::Unknown("cypher query contains CALL".into());
        }
        // `schema.function(`: a call of an SQL function, which may do
        // anything.
        let next = |k: usize| toks.get(i + k).map(|t| &t.tok);
        if matches!(next(1), Some(Tok::Dot))
            && matches!(next(2), Some(Tok::Ident { .. }))
            && matches!(next(3), Some(Tok::LParen))
        {
            return CypherEffect::Unknown("cypher query calls a schema-qualified function".into());
        }
    }
    CypherEffect::Read
}

/// Every name after a `:` in the text: the labels and relationship types
/// its patterns name, and more (map values, slice bounds), which only
/// makes the answer more cautious. `None` when the text may do more than
/// its clauses say (a CALL, an SQL function) or can't be read.
pub fn labels_named(text: &str) -> Option<Vec<String>> {
    if matches!(effect(text), CypherEffect::Unknown(_)) {
        return None;
    }
    let toks = tokenize(text).ok()?;
    let mut names = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        // `effect` stops at the first updating keyword: look again.
        if let Tok::Ident {
            name,
            quoted: false,
        } = &t.tok
            && name.eq_ignore_ascii_case("CALL")
        {
            return None;
        }
        // `schema.function(`, anywhere.
        if i > 0
            && matches!(toks[i - 1].tok, Tok::Dot)
            && matches!(t.tok, Tok::Ident { .. })
            && matches!(toks.get(i + 1).map(|t| &t.tok), Some(Tok::LParen))
        {
            return None;
        }
        if let (Tok::Colon, Some(Tok::Ident { name, .. })) =
            (&t.tok, toks.get(i + 1).map(|t| &t.tok))
        {
            names.push(name.clone());
        }
    }
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn effects() {
        use CypherEffect::*;
        assert_eq!(effect(" MATCH (n) RETURN n "), Read);
        assert_eq!(
            effect("MATCH (n:Person {name: 'CREATE'}) RETURN n.created"),
            Read
        );
        assert_eq!(
            effect("MATCH (n) // SET n.x = 1\n RETURN n /* DELETE */"),
            Read
        );
        assert_eq!(effect("MATCH (n) RETURN n.name AS `delete`"), Read);
        assert_eq!(effect("create (n:Person)"), Write("CREATE"));
        assert_eq!(effect("MATCH (n) DETACH DELETE n"), Write("DELETE"));
        assert_eq!(effect("MATCH (n) set n.x = 1"), Write("SET"));
        assert_eq!(effect("MATCH (n) RETURN n.set"), Write("SET"));
        assert_eq!(effect("MERGE (n {id: 1})"), Write("MERGE"));
        assert_eq!(effect("MATCH (n) REMOVE n.x"), Write("REMOVE"));
        assert!(matches!(effect("CALL db.labels()"), Unknown(_)));
        assert!(matches!(effect("RETURN 'abc"), Unknown(_)));
        assert!(matches!(effect("RETURN 1 /* x"), Unknown(_)));
        assert!(matches!(effect("RETURN public.my_fn(1)"), Unknown(_)));
        assert_eq!(effect("RETURN 'it\\'s', \"x\\\"\""), Read);
        assert_eq!(effect(""), Read);
    }

    #[test]
    fn labels_named_by_writes() {
        let names = |t: &str| {
            labels_named(t).map(|mut v| {
                v.sort();
                v
            })
        };
        assert_eq!(
            names("CREATE (:Person {name: 'x'})-[:KNOWS]->(:`City`)"),
            Some(vec!["City".into(), "KNOWS".into(), "Person".into()])
        );
        assert_eq!(names("MATCH (n) DETACH DELETE n"), Some(vec![]));
        // A map value after `:` is named too: cautious, never blind.
        assert_eq!(names("CREATE ({k: v})"), Some(vec!["v".into()]));
        assert_eq!(
            names("CREATE (n) WITH n CALL db.labels() YIELD l RETURN l"),
            None
        );
        assert_eq!(names("CREATE (n {k: public.f(1)})"), None);
        assert_eq!(names("CREATE (n {k: 'x"), None);
    }
}
