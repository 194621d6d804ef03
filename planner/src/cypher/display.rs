//! Printing the AST back as Cypher. Expressions are fully parenthesized and
//! names backtick-quoted, so the text parses back to the same tree; write
//! clauses print only their keyword (their bodies are not kept).

use std::fmt::{self, Display, Formatter, Write};

use super::ast::*;

struct Name<'a>(&'a str);

impl Display for Name<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`", self.0)
    }
}

fn string(f: &mut Formatter<'_>, s: &str) -> fmt::Result {
    f.write_char('\'')?;
    for c in s.chars() {
        match c {
            '\\' => f.write_str("\\\\")?,
            '\'' => f.write_str("\\'")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            c if (c as u32) < 0x20 => write!(f, "\\u{:04x}", c as u32)?,
            c => f.write_char(c)?,
        }
    }
    f.write_char('\'')
}

fn list<T: Display>(f: &mut Formatter<'_>, items: &[T], sep: &str) -> fmt::Result {
    for (i, x) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(sep)?;
        }
        write!(f, "{x}")?;
    }
    Ok(())
}

impl Display for Literal {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Null => f.write_str("null"),
            Literal::Bool(b) => write!(f, "{b}"),
            Literal::Int(i) => write!(f, "{i}"),
            Literal::Float(x) => write!(f, "{x:?}"),
            Literal::String(s) => string(f, s),
        }
    }
}

impl BinaryOp {
    pub fn as_str(self) -> &'static str {
        use BinaryOp::*;
        match self {
            Or => "OR",
            Xor => "XOR",
            And => "AND",
            Eq => "=",
            Neq => "<>",
            Lt => "<",
            Gt => ">",
            Le => "<=",
            Ge => ">=",
            RegexMatch => "=~",
            StartsWith => "STARTS WITH",
            EndsWith => "ENDS WITH",
            Contains => "CONTAINS",
            In => "IN",
            Add => "+",
            Sub => "-",
            Mul => "*",
            Div => "/",
            Mod => "%",
            Pow => "^",
        }
    }
}

impl Display for Expr {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Literal(l) => write!(f, "{l}"),
            Expr::Param(p) => write!(f, "${p}"),
            Expr::Var(v) => write!(f, "{}", Name(v)),
            Expr::Property(e, k) => write!(f, "{e}.{}", Name(k)),
            Expr::Index(e, i) => write!(f, "{e}[{i}]"),
            Expr::Slice(e, a, b) => {
                write!(f, "{e}[")?;
                if let Some(a) = a {
                    write!(f, "{a}")?;
                }
                f.write_str("..")?;
                if let Some(b) = b {
                    write!(f, "{b}")?;
                }
                f.write_str("]")
            }
            Expr::HasLabel(e, ls) => {
                write!(f, "({e}")?;
                for l in ls {
                    write!(f, ":{}", Name(l))?;
                }
                f.write_str(")")
            }
            Expr::Unary(UnaryOp::Not, e) => write!(f, "(NOT {e})"),
            Expr::Unary(UnaryOp::Neg, e) => write!(f, "(- {e})"),
            Expr::Unary(UnaryOp::Plus, e) => write!(f, "(+ {e})"),
            Expr::Binary(op, l, r) => write!(f, "({l} {} {r})", op.as_str()),
            Expr::Chain(first, rest) => {
                write!(f, "({first}")?;
                for (op, e) in rest {
                    write!(f, " {} {e}", op.as_str())?;
                }
                f.write_str(")")
            }
            Expr::IsNull(e, neg) => write!(f, "({e} IS {}NULL)", if *neg { "NOT " } else { "" }),
            Expr::Function {
                name,
                distinct,
                args,
            } => {
                write!(f, "{name}({}", if *distinct { "DISTINCT " } else { "" })?;
                list(f, args, ", ")?;
                f.write_str(")")
            }
            Expr::CountStar => f.write_str("count(*)"),
            Expr::List(items) => {
                f.write_str("[")?;
                list(f, items, ", ")?;
                f.write_str("]")
            }
            Expr::Map(kv) => {
                f.write_str("{")?;
                for (i, (k, v)) in kv.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{}: {v}", Name(k))?;
                }
                f.write_str("}")
            }
            Expr::Case {
                operand,
                whens,
                else_,
            } => {
                f.write_str("(CASE")?;
                if let Some(o) = operand {
                    write!(f, " {o}")?;
                }
                for (w, t) in whens {
                    write!(f, " WHEN {w} THEN {t}")?;
                }
                if let Some(e) = else_ {
                    write!(f, " ELSE {e}")?;
                }
                f.write_str(" END)")
            }
            Expr::ListComprehension {
                var,
                list,
                where_,
                map,
            } => {
                write!(f, "[{} IN {list}", Name(var))?;
                if let Some(w) = where_ {
                    write!(f, " WHERE {w}")?;
                }
                if let Some(m) = map {
                    write!(f, " | {m}")?;
                }
                f.write_str("]")
            }
            Expr::ExistsPattern(p) => write!(f, "EXISTS({p})"),
            Expr::PatternPredicate(p) => write!(f, "({p})"),
            Expr::Exists(e) => write!(f, "EXISTS({e})"),
            Expr::MapProjection(base, items) => {
                write!(f, "{base}{{")?;
                for (i, it) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    match it {
                        MapProjectionItem::Property(k) => write!(f, ".{}", Name(k))?,
                        MapProjectionItem::Entry(k, v) => write!(f, "{}: {v}", Name(k))?,
                        MapProjectionItem::AllProperties => f.write_str(".*")?,
                    }
                }
                f.write_str("}")
            }
        }
    }
}

impl Display for NodePattern {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str("(")?;
        if let Some(v) = &self.var {
            write!(f, "{}", Name(v))?;
        }
        for l in &self.labels {
            write!(f, ":{}", Name(l))?;
        }
        if let Some(p) = &self.props {
            write!(f, " {p}")?;
        }
        f.write_str(")")
    }
}

impl Display for RelPattern {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        f.write_str(if self.dir == Direction::Left {
            "<-["
        } else {
            "-["
        })?;
        if let Some(v) = &self.var {
            write!(f, "{}", Name(v))?;
        }
        for (i, t) in self.types.iter().enumerate() {
            write!(f, "{}{}", if i == 0 { ":" } else { "|" }, Name(t))?;
        }
        if let Some((lo, hi)) = self.var_length {
            f.write_str("*")?;
            match (lo, hi) {
                (None, None) => {}
                (lo, hi) => {
                    if let Some(lo) = lo {
                        write!(f, "{lo}")?;
                    }
                    f.write_str("..")?;
                    if let Some(hi) = hi {
                        write!(f, "{hi}")?;
                    }
                }
            }
        }
        if let Some(p) = &self.props {
            write!(f, " {p}")?;
        }
        f.write_str(if self.dir == Direction::Right {
            "]->"
        } else {
            "]-"
        })
    }
}

impl Display for PatternPart {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        if let Some(p) = &self.path_var {
            write!(f, "{} = ", Name(p))?;
        }
        write!(f, "{}", self.start)?;
        for (r, n) in &self.chain {
            write!(f, "{r}{n}")?;
        }
        Ok(())
    }
}

impl Display for Projection {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        if self.distinct {
            f.write_str("DISTINCT ")?;
        }
        if self.star {
            f.write_str("*")?;
            if !self.items.is_empty() {
                f.write_str(", ")?;
            }
        }
        for (i, it) in self.items.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}", it.expr)?;
            if let Some(a) = &it.alias {
                write!(f, " AS {}", Name(a))?;
            }
        }
        if !self.order_by.is_empty() {
            f.write_str(" ORDER BY ")?;
            for (i, s) in self.order_by.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{}{}", s.expr, if s.descending { " DESC" } else { "" })?;
            }
        }
        if let Some(s) = &self.skip {
            write!(f, " SKIP {s}")?;
        }
        if let Some(l) = &self.limit {
            write!(f, " LIMIT {l}")?;
        }
        if let Some(w) = &self.where_ {
            write!(f, " WHERE {w}")?;
        }
        Ok(())
    }
}

impl Display for Clause {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        match self {
            Clause::Match(m) => {
                if m.optional {
                    f.write_str("OPTIONAL ")?;
                }
                f.write_str("MATCH ")?;
                list(f, &m.patterns, ", ")?;
                if let Some(w) = &m.where_ {
                    write!(f, " WHERE {w}")?;
                }
                Ok(())
            }
            Clause::Unwind { expr, alias } => write!(f, "UNWIND {expr} AS {}", Name(alias)),
            Clause::With(p) => write!(f, "WITH {p}"),
            Clause::Return(p) => write!(f, "RETURN {p}"),
            Clause::Call { name } => write!(f, "CALL {name}()"),
            Clause::Write(WriteKind::Create) => f.write_str("CREATE ()"),
            Clause::Write(WriteKind::Merge) => f.write_str("MERGE ()"),
            Clause::Write(WriteKind::Set) => f.write_str("SET"),
            Clause::Write(WriteKind::Delete) => f.write_str("DELETE"),
            Clause::Write(WriteKind::Remove) => f.write_str("REMOVE"),
        }
    }
}

impl Display for Statement {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        for (i, part) in self.parts.iter().enumerate() {
            if i > 0 {
                let all = self.union_all.get(i - 1).copied().unwrap_or(false);
                f.write_str(if all { " UNION ALL " } else { " UNION " })?;
            }
            list(f, &part.clauses, " ")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::parse;

    #[test]
    fn prints_and_reparses() {
        for q in [
            "MATCH (a:Person {id: 1})-[r:KNOWS*1..3]->(b)<-[:X|Y]-(), p = (c)--(d) WHERE a.x > 1 AND NOT b.y IS NULL RETURN DISTINCT a, count(*) AS n ORDER BY n DESC SKIP 1 LIMIT 2",
            "UNWIND [1, 'it\\'s', null, 1.5e3] AS x WITH x WHERE x:L RETURN CASE x WHEN 1 THEN 'a' ELSE 'b' END, [y IN x WHERE y > 1 | y], {k: $p}.k[0..1]",
            "MATCH (a) WHERE EXISTS((a)-[:R]->()) AND 1 < a.v <= 3 RETURN a UNION ALL MATCH (b) RETURN b",
        ] {
            let st = parse(q).unwrap();
            let printed = st.to_string();
            let again = parse(&printed).unwrap_or_else(|e| panic!("{printed}: {e:?}"));
            assert_eq!(printed, again.to_string());
        }
    }
}
