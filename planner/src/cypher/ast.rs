//! Cypher abstract syntax tree (AGE's openCypher dialect, read and write
//! clauses). Built by [`super::parser`], consumed by [`super::compile`].

/// One Cypher statement: a sequence of clauses, or a UNION of such.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    pub parts: Vec<SingleQuery>,
    /// `UNION ALL` (true) or `UNION` (false) between consecutive parts.
    pub union_all: Vec<bool>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SingleQuery {
    pub clauses: Vec<Clause>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Clause {
    Match(Match),
    Unwind { expr: Expr, alias: String },
    With(Projection),
    Return(Projection),
    Call { name: String },
    Write(WriteKind),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    Create,
    Merge,
    Set,
    Delete,
    Remove,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Match {
    pub optional: bool,
    pub patterns: Vec<PatternPart>,
    pub where_: Option<Expr>,
}

/// `p = (a)-[r]->(b)` or just the chain.
#[derive(Debug, Clone, PartialEq)]
pub struct PatternPart {
    pub path_var: Option<String>,
    pub start: NodePattern,
    pub chain: Vec<(RelPattern, NodePattern)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NodePattern {
    pub var: Option<String>,
    pub labels: Vec<String>,
    pub props: Option<Expr>,
    pub pos: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// `-[]->`
    Right,
    /// `<-[]-`
    Left,
    /// `-[]-`
    Both,
}

#[derive(Debug, Clone, PartialEq)]
pub struct RelPattern {
    pub var: Option<String>,
    pub types: Vec<String>,
    pub props: Option<Expr>,
    pub dir: Direction,
    /// `*`, `*2`, `*1..3`: variable length, with optional bounds.
    pub var_length: Option<(Option<i64>, Option<i64>)>,
    pub pos: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Projection {
    pub distinct: bool,
    /// `RETURN *` / `WITH *`.
    pub star: bool,
    pub items: Vec<ProjectionItem>,
    pub order_by: Vec<SortItem>,
    pub skip: Option<Expr>,
    pub limit: Option<Expr>,
    /// Only for WITH.
    pub where_: Option<Expr>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProjectionItem {
    pub expr: Expr,
    pub alias: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SortItem {
    pub expr: Expr,
    pub descending: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    String(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    Or,
    Xor,
    And,
    Eq,
    Neq,
    Lt,
    Gt,
    Le,
    Ge,
    RegexMatch,
    StartsWith,
    EndsWith,
    Contains,
    In,
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Pow,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnaryOp {
    Not,
    Neg,
    Plus,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Literal(Literal),
    Param(String),
    Var(String),
    /// `expr.key`
    Property(Box<Expr>, String),
    /// `expr[index]`
    Index(Box<Expr>, Box<Expr>),
    /// `expr[from..to]`
    Slice(Box<Expr>, Option<Box<Expr>>, Option<Box<Expr>>),
    /// `expr:Label` in a predicate.
    HasLabel(Box<Expr>, Vec<String>),
    Unary(UnaryOp, Box<Expr>),
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    /// `a < b < c`: kept apart because AGE expands it specially.
    Chain(Box<Expr>, Vec<(BinaryOp, Expr)>),
    IsNull(Box<Expr>, bool),
    Function {
        name: String,
        distinct: bool,
        args: Vec<Expr>,
    },
    CountStar,
    List(Vec<Expr>),
    Map(Vec<(String, Expr)>),
    Case {
        operand: Option<Box<Expr>>,
        whens: Vec<(Expr, Expr)>,
        else_: Option<Box<Expr>>,
    },
    ListComprehension {
        var: String,
        list: Box<Expr>,
        where_: Option<Box<Expr>>,
        map: Option<Box<Expr>>,
    },
    /// `EXISTS((a)-[]->())`.
    ExistsPattern(Box<PatternPart>),
    /// A bare pattern used as a predicate: `WHERE (a)-[]->()`.
    PatternPredicate(Box<PatternPart>),
    /// `EXISTS(n.prop)`
    Exists(Box<Expr>),
    /// `n{.key, key: expr, .*}`; the base is a variable.
    MapProjection(Box<Expr>, Vec<MapProjectionItem>),
}

/// One element of a map projection; `{v}` reads as `v: v`.
#[derive(Debug, Clone, PartialEq)]
pub enum MapProjectionItem {
    /// `.key`
    Property(String),
    /// `key: expr`
    Entry(String, Expr),
    /// `.*`
    AllProperties,
}

impl Expr {
    /// Calls `f` on this expression and every sub-expression (pre-order).
    pub fn walk<'a>(&'a self, f: &mut dyn FnMut(&'a Expr)) {
        self.walk_pruned(&mut |x| {
            f(x);
            true
        });
    }

    /// Like [`Expr::walk`], but skips the sub-expressions of any
    /// expression for which `f` returns false.
    pub fn walk_pruned<'a>(&'a self, f: &mut dyn FnMut(&'a Expr) -> bool) {
        if !f(self) {
            return;
        }
        let mut walk = |e: &'a Expr| e.walk_pruned(f);
        match self {
            Expr::Literal(_) | Expr::Param(_) | Expr::Var(_) | Expr::CountStar => {}
            Expr::ExistsPattern(_) | Expr::PatternPredicate(_) => {}
            Expr::Property(e, _) | Expr::HasLabel(e, _) | Expr::Unary(_, e) => walk(e),
            Expr::IsNull(e, _) | Expr::Exists(e) => walk(e),
            Expr::Index(a, b) | Expr::Binary(_, a, b) => {
                walk(a);
                walk(b);
            }
            Expr::Slice(a, b, c) => {
                walk(a);
                if let Some(b) = b {
                    walk(b);
                }
                if let Some(c) = c {
                    walk(c);
                }
            }
            Expr::Chain(a, rest) => {
                walk(a);
                for (_, e) in rest {
                    walk(e);
                }
            }
            Expr::Function { args, .. } | Expr::List(args) => {
                for a in args {
                    walk(a);
                }
            }
            Expr::Map(kv) => {
                for (_, v) in kv {
                    walk(v);
                }
            }
            Expr::MapProjection(base, items) => {
                walk(base);
                for it in items {
                    if let MapProjectionItem::Entry(_, v) = it {
                        walk(v);
                    }
                }
            }
            Expr::Case {
                operand,
                whens,
                else_,
            } => {
                if let Some(o) = operand {
                    walk(o);
                }
                for (w, t) in whens {
                    walk(w);
                    walk(t);
                }
                if let Some(e) = else_ {
                    walk(e);
                }
            }
            Expr::ListComprehension {
                list, where_, map, ..
            } => {
                walk(list);
                if let Some(w) = where_ {
                    walk(w);
                }
                if let Some(m) = map {
                    walk(m);
                }
            }
        }
    }
}
