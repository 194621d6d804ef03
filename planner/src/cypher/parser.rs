//! Recursive-descent parser for AGE's openCypher. Never panics: every
//! failure is a [`ParseError`] with the byte offset of the offending token,
//! and nesting deeper than [`MAX_DEPTH`] is refused.

use super::ParseError;
use super::ast::*;
use super::lexer::{Tok, Token, tokenize};

/// Deepest expression/pattern nesting accepted; keeps recursion bounded.
pub const MAX_DEPTH: usize = 96;

/// Parses one Cypher statement (the text between `$$` in `cypher()`).
pub fn parse(src: &str) -> Result<Statement, ParseError> {
    let toks = tokenize(src)?;
    let mut p = Parser {
        toks,
        i: 0,
        depth: 0,
    };
    let st = p.statement()?;
    Ok(st)
}

struct Parser {
    toks: Vec<Token>,
    i: usize,
    depth: usize,
}

const CLAUSE_WORDS: &[&str] = &[
    "MATCH", "OPTIONAL", "UNWIND", "WITH", "RETURN", "CALL", "CREATE", "MERGE", "SET", "DELETE",
    "DETACH", "REMOVE", "UNION",
];

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.i.min(self.toks.len() - 1)].tok
    }
    fn peek_at(&self, n: usize) -> &Tok {
        &self.toks[(self.i + n).min(self.toks.len() - 1)].tok
    }
    fn pos(&self) -> usize {
        self.toks[self.i.min(self.toks.len() - 1)].pos
    }
    fn bump(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.i < self.toks.len() - 1 {
            self.i += 1;
        }
        t
    }
    fn err<T>(&self, msg: &str) -> Result<T, ParseError> {
        Err(ParseError::new(self.pos(), msg))
    }
    fn eat(&mut self, t: &Tok) -> bool {
        if self.peek() == t {
            self.bump();
            true
        } else {
            false
        }
    }
    fn expect(&mut self, t: &Tok, what: &str) -> Result<(), ParseError> {
        if self.eat(t) {
            Ok(())
        } else {
            self.err(&format!("expected {what}"))
        }
    }
    fn is_kw_at(&self, n: usize, kw: &str) -> bool {
        matches!(self.peek_at(n), Tok::Ident { name, quoted: false } if name.eq_ignore_ascii_case(kw))
    }
    fn is_kw(&self, kw: &str) -> bool {
        self.is_kw_at(0, kw)
    }
    fn eat_kw(&mut self, kw: &str) -> bool {
        if self.is_kw(kw) {
            self.bump();
            true
        } else {
            false
        }
    }
    fn expect_kw(&mut self, kw: &str) -> Result<(), ParseError> {
        if self.eat_kw(kw) {
            Ok(())
        } else {
            self.err(&format!("expected {kw}"))
        }
    }
    fn ident(&mut self) -> Result<String, ParseError> {
        match self.bump() {
            Tok::Ident { name, .. } => Ok(name),
            _ => {
                self.i = self.i.saturating_sub(1);
                self.err("expected identifier")
            }
        }
    }
    fn enter(&mut self) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.err("nesting too deep");
        }
        Ok(())
    }
    fn leave(&mut self) {
        self.depth -= 1;
    }
    /// Each operator of a left-associative chain nests the tree one level
    /// deeper; count it like a parenthesis so later recursive walks stay
    /// shallow. The caller gives the levels back with `self.depth -= n`.
    fn chain_step(&mut self, n: &mut usize) -> Result<(), ParseError> {
        *n += 1;
        self.enter()
    }

    fn statement(&mut self) -> Result<Statement, ParseError> {
        let mut parts = vec![self.single_query()?];
        let mut union_all = Vec::new();
        while self.eat_kw("UNION") {
            union_all.push(self.eat_kw("ALL"));
            parts.push(self.single_query()?);
        }
        self.eat(&Tok::Semicolon);
        if *self.peek() != Tok::Eof {
            return self.err("unexpected token");
        }
        Ok(Statement { parts, union_all })
    }

    fn single_query(&mut self) -> Result<SingleQuery, ParseError> {
        let mut clauses = Vec::new();
        loop {
            if *self.peek() == Tok::Eof || *self.peek() == Tok::Semicolon || self.is_kw("UNION") {
                break;
            }
            clauses.push(self.clause()?);
        }
        if clauses.is_empty() {
            return self.err("expected a clause");
        }
        Ok(SingleQuery { clauses })
    }

    fn clause(&mut self) -> Result<Clause, ParseError> {
        if self.is_kw("OPTIONAL") || self.is_kw("MATCH") {
            let optional = self.eat_kw("OPTIONAL");
            self.expect_kw("MATCH")?;
            let patterns = self.pattern_list()?;
            let where_ = if self.eat_kw("WHERE") {
                Some(self.expr()?)
            } else {
                None
            };
            return Ok(Clause::Match(Match {
                optional,
                patterns,
                where_,
            }));
        }
        if self.eat_kw("UNWIND") {
            let expr = self.expr()?;
            self.expect_kw("AS")?;
            let alias = self.ident()?;
            return Ok(Clause::Unwind { expr, alias });
        }
        if self.eat_kw("WITH") {
            let mut p = self.projection()?;
            if self.eat_kw("WHERE") {
                p.where_ = Some(self.expr()?);
            }
            return Ok(Clause::With(p));
        }
        if self.eat_kw("RETURN") {
            return Ok(Clause::Return(self.projection()?));
        }
        if self.eat_kw("CALL") {
            let mut name = self.ident()?;
            while self.eat(&Tok::Dot) {
                name.push('.');
                name.push_str(&self.ident()?);
            }
            self.skip_clause_body()?;
            return Ok(Clause::Call { name });
        }
        if self.eat_kw("CREATE") {
            self.pattern_list()?;
            return Ok(Clause::Write(WriteKind::Create));
        }
        if self.eat_kw("MERGE") {
            self.pattern_part()?;
            // ON CREATE SET / ON MATCH SET belong to MERGE.
            while self.is_kw("ON") {
                self.bump();
                self.bump();
                self.expect_kw("SET")?;
                self.skip_clause_body()?;
            }
            return Ok(Clause::Write(WriteKind::Merge));
        }
        let kind = if self.eat_kw("SET") {
            WriteKind::Set
        } else if self.eat_kw("REMOVE") {
            WriteKind::Remove
        } else if self.eat_kw("DELETE") {
            WriteKind::Delete
        } else if self.eat_kw("DETACH") {
            self.expect_kw("DELETE")?;
            WriteKind::Delete
        } else {
            return self.err("expected a clause");
        };
        self.skip_clause_body()?;
        Ok(Clause::Write(kind))
    }

    /// Skips balanced tokens up to the next clause keyword: write clauses
    /// are only recognized, never compiled.
    fn skip_clause_body(&mut self) -> Result<(), ParseError> {
        let mut depth = 0usize;
        loop {
            match self.peek() {
                Tok::Eof => break,
                Tok::Semicolon if depth == 0 => break,
                Tok::LParen | Tok::LBracket | Tok::LBrace => depth += 1,
                Tok::RParen | Tok::RBracket | Tok::RBrace => {
                    if depth == 0 {
                        return self.err("unbalanced bracket");
                    }
                    depth -= 1;
                }
                Tok::Ident {
                    name,
                    quoted: false,
                } if depth == 0
                    && CLAUSE_WORDS.iter().any(|w| name.eq_ignore_ascii_case(w))
                    && !self.is_kw("ON") =>
                {
                    break;
                }
                _ => {}
            }
            self.bump();
        }
        if depth != 0 {
            return self.err("unbalanced bracket");
        }
        Ok(())
    }

    fn projection(&mut self) -> Result<Projection, ParseError> {
        let distinct = self.eat_kw("DISTINCT");
        let mut star = false;
        let mut items = Vec::new();
        if self.eat(&Tok::Star) {
            star = true;
            if self.eat(&Tok::Comma) {
                items = self.projection_items()?;
            }
        } else {
            items = self.projection_items()?;
        }
        let mut order_by = Vec::new();
        if self.eat_kw("ORDER") {
            self.expect_kw("BY")?;
            loop {
                let expr = self.expr()?;
                let descending = if self.eat_kw("DESC") || self.eat_kw("DESCENDING") {
                    true
                } else {
                    let _ = self.eat_kw("ASC") || self.eat_kw("ASCENDING");
                    false
                };
                order_by.push(SortItem { expr, descending });
                if !self.eat(&Tok::Comma) {
                    break;
                }
            }
        }
        let skip = if self.eat_kw("SKIP") {
            Some(self.expr()?)
        } else {
            None
        };
        let limit = if self.eat_kw("LIMIT") {
            Some(self.expr()?)
        } else {
            None
        };
        Ok(Projection {
            distinct,
            star,
            items,
            order_by,
            skip,
            limit,
            where_: None,
        })
    }

    fn projection_items(&mut self) -> Result<Vec<ProjectionItem>, ParseError> {
        let mut items = Vec::new();
        loop {
            let expr = self.expr()?;
            let alias = if self.eat_kw("AS") {
                Some(self.ident()?)
            } else {
                None
            };
            items.push(ProjectionItem { expr, alias });
            if !self.eat(&Tok::Comma) {
                break;
            }
        }
        Ok(items)
    }

    fn pattern_list(&mut self) -> Result<Vec<PatternPart>, ParseError> {
        let mut v = vec![self.pattern_part()?];
        while self.eat(&Tok::Comma) {
            v.push(self.pattern_part()?);
        }
        Ok(v)
    }

    fn pattern_part(&mut self) -> Result<PatternPart, ParseError> {
        let mut path_var = None;
        if matches!(self.peek(), Tok::Ident { .. }) && *self.peek_at(1) == Tok::Eq {
            path_var = Some(self.ident()?);
            self.bump();
        }
        let start = self.node_pattern()?;
        let mut chain = Vec::new();
        while matches!(self.peek(), Tok::Minus | Tok::Lt) {
            let rel = self.rel_pattern()?;
            let node = self.node_pattern()?;
            chain.push((rel, node));
        }
        Ok(PatternPart {
            path_var,
            start,
            chain,
        })
    }

    fn node_pattern(&mut self) -> Result<NodePattern, ParseError> {
        let pos = self.pos();
        self.expect(&Tok::LParen, "(")?;
        let var = if matches!(self.peek(), Tok::Ident { .. }) {
            Some(self.ident()?)
        } else {
            None
        };
        let mut labels = Vec::new();
        while self.eat(&Tok::Colon) {
            labels.push(self.ident()?);
        }
        let props = self.pattern_props()?;
        self.expect(&Tok::RParen, ")")?;
        Ok(NodePattern {
            var,
            labels,
            props,
            pos,
        })
    }

    fn pattern_props(&mut self) -> Result<Option<Expr>, ParseError> {
        match self.peek() {
            Tok::LBrace => Ok(Some(self.map_literal()?)),
            Tok::Param(_) => {
                let Tok::Param(p) = self.bump() else {
                    return self.err("expected parameter");
                };
                Ok(Some(Expr::Param(p)))
            }
            _ => Ok(None),
        }
    }

    fn rel_pattern(&mut self) -> Result<RelPattern, ParseError> {
        let pos = self.pos();
        let left = self.eat(&Tok::Lt);
        self.expect(&Tok::Minus, "-")?;
        let mut var = None;
        let mut types = Vec::new();
        let mut props = None;
        let mut var_length = None;
        if self.eat(&Tok::LBracket) {
            if matches!(self.peek(), Tok::Ident { .. }) {
                var = Some(self.ident()?);
            }
            if self.eat(&Tok::Colon) {
                types.push(self.ident()?);
                while self.eat(&Tok::Pipe) {
                    self.eat(&Tok::Colon);
                    types.push(self.ident()?);
                }
            }
            if self.eat(&Tok::Star) {
                let lo = self.opt_int();
                let hi = if self.eat(&Tok::DotDot) {
                    self.opt_int()
                } else {
                    lo
                };
                var_length = Some((lo, hi));
            }
            props = self.pattern_props()?;
            self.expect(&Tok::RBracket, "]")?;
        }
        self.expect(&Tok::Minus, "-")?;
        let right = self.eat(&Tok::Gt);
        let dir = match (left, right) {
            (true, false) => Direction::Left,
            (false, true) => Direction::Right,
            (false, false) => Direction::Both,
            (true, true) => return Err(ParseError::new(pos, "relationship with two arrows")),
        };
        Ok(RelPattern {
            var,
            types,
            props,
            dir,
            var_length,
            pos,
        })
    }

    fn opt_int(&mut self) -> Option<i64> {
        if let Tok::Int(v) = *self.peek() {
            self.bump();
            Some(v)
        } else {
            None
        }
    }

    // ---- expressions, lowest precedence first ----

    pub fn expr(&mut self) -> Result<Expr, ParseError> {
        self.enter()?;
        let r = self.or_expr();
        self.leave();
        r
    }

    fn or_expr(&mut self) -> Result<Expr, ParseError> {
        self.left_assoc(Self::xor_expr, |p| p.eat_kw("OR").then_some(BinaryOp::Or))
    }

    fn xor_expr(&mut self) -> Result<Expr, ParseError> {
        self.left_assoc(Self::and_expr, |p| p.eat_kw("XOR").then_some(BinaryOp::Xor))
    }

    fn and_expr(&mut self) -> Result<Expr, ParseError> {
        self.left_assoc(Self::not_expr, |p| p.eat_kw("AND").then_some(BinaryOp::And))
    }

    /// One left-associative level: `next (op next)*`, where `op` takes the
    /// operator's tokens when it finds one.
    fn left_assoc(
        &mut self,
        next: fn(&mut Self) -> Result<Expr, ParseError>,
        op: fn(&mut Self) -> Option<BinaryOp>,
    ) -> Result<Expr, ParseError> {
        let mut levels = 0usize;
        let mut l = next(self)?;
        while let Some(op) = op(self) {
            self.chain_step(&mut levels)?;
            let r = next(self)?;
            l = Expr::Binary(op, Box::new(l), Box::new(r));
        }
        self.depth -= levels;
        Ok(l)
    }

    fn not_expr(&mut self) -> Result<Expr, ParseError> {
        if self.eat_kw("NOT") {
            self.enter()?;
            let e = self.not_expr();
            self.leave();
            return Ok(Expr::Unary(UnaryOp::Not, Box::new(e?)));
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<Expr, ParseError> {
        let mut levels = 0usize;
        let first = self.predicate()?;
        let mut rest = Vec::new();
        loop {
            let op = match self.peek() {
                Tok::Eq => BinaryOp::Eq,
                Tok::Neq => BinaryOp::Neq,
                Tok::Lt => BinaryOp::Lt,
                Tok::Gt => BinaryOp::Gt,
                Tok::Le => BinaryOp::Le,
                Tok::Ge => BinaryOp::Ge,
                _ => break,
            };
            self.bump();
            self.chain_step(&mut levels)?;
            rest.push((op, self.predicate()?));
        }
        self.depth -= levels;
        Ok(match rest.len() {
            0 => first,
            1 => {
                let (op, r) = rest.pop().expect("one element");
                Expr::Binary(op, Box::new(first), Box::new(r))
            }
            _ => Expr::Chain(Box::new(first), rest),
        })
    }

    fn predicate(&mut self) -> Result<Expr, ParseError> {
        let mut levels = 0usize;
        let mut l = self.additive()?;
        loop {
            let op = if self.eat(&Tok::RegexMatch) {
                BinaryOp::RegexMatch
            } else if self.is_kw("STARTS") && self.is_kw_at(1, "WITH") {
                self.bump();
                self.bump();
                BinaryOp::StartsWith
            } else if self.is_kw("ENDS") && self.is_kw_at(1, "WITH") {
                self.bump();
                self.bump();
                BinaryOp::EndsWith
            } else if self.eat_kw("CONTAINS") {
                BinaryOp::Contains
            } else if self.eat_kw("IN") {
                BinaryOp::In
            } else if self.is_kw("IS") {
                self.bump();
                let neg = self.eat_kw("NOT");
                self.expect_kw("NULL")?;
                self.chain_step(&mut levels)?;
                l = Expr::IsNull(Box::new(l), neg);
                continue;
            } else {
                break;
            };
            self.chain_step(&mut levels)?;
            let r = self.additive()?;
            l = Expr::Binary(op, Box::new(l), Box::new(r));
        }
        self.depth -= levels;
        Ok(l)
    }

    fn additive(&mut self) -> Result<Expr, ParseError> {
        self.left_assoc(Self::multiplicative, |p| {
            let op = match p.peek() {
                Tok::Plus => BinaryOp::Add,
                Tok::Minus => BinaryOp::Sub,
                _ => return None,
            };
            p.bump();
            Some(op)
        })
    }

    fn multiplicative(&mut self) -> Result<Expr, ParseError> {
        self.left_assoc(Self::power, |p| {
            let op = match p.peek() {
                Tok::Star => BinaryOp::Mul,
                Tok::Slash => BinaryOp::Div,
                Tok::Percent => BinaryOp::Mod,
                _ => return None,
            };
            p.bump();
            Some(op)
        })
    }

    fn power(&mut self) -> Result<Expr, ParseError> {
        self.left_assoc(Self::unary, |p| p.eat(&Tok::Caret).then_some(BinaryOp::Pow))
    }

    fn unary(&mut self) -> Result<Expr, ParseError> {
        let op = match self.peek() {
            Tok::Minus => UnaryOp::Neg,
            Tok::Plus => UnaryOp::Plus,
            _ => return self.postfix(),
        };
        self.bump();
        self.enter()?;
        let e = self.unary();
        self.leave();
        Ok(Expr::Unary(op, Box::new(e?)))
    }

    fn postfix(&mut self) -> Result<Expr, ParseError> {
        let mut levels = 0usize;
        let mut e = self.atom()?;
        loop {
            if *self.peek() == Tok::LBrace && matches!(e, Expr::Var(_)) {
                self.chain_step(&mut levels)?;
                e = self.map_projection(e)?;
                continue;
            }
            if !matches!(self.peek(), Tok::Dot | Tok::LBracket | Tok::Colon) {
                break;
            }
            self.chain_step(&mut levels)?;
            if self.eat(&Tok::Dot) {
                let key = self.ident()?;
                e = Expr::Property(Box::new(e), key);
            } else if *self.peek() == Tok::LBracket {
                self.bump();
                if self.eat(&Tok::DotDot) {
                    let hi = if *self.peek() == Tok::RBracket {
                        None
                    } else {
                        Some(Box::new(self.expr()?))
                    };
                    self.expect(&Tok::RBracket, "]")?;
                    e = Expr::Slice(Box::new(e), None, hi);
                    continue;
                }
                let idx = self.expr()?;
                if self.eat(&Tok::DotDot) {
                    let hi = if *self.peek() == Tok::RBracket {
                        None
                    } else {
                        Some(Box::new(self.expr()?))
                    };
                    self.expect(&Tok::RBracket, "]")?;
                    e = Expr::Slice(Box::new(e), Some(Box::new(idx)), hi);
                } else {
                    self.expect(&Tok::RBracket, "]")?;
                    e = Expr::Index(Box::new(e), Box::new(idx));
                }
            } else if *self.peek() == Tok::Colon && matches!(e, Expr::Var(_)) {
                let mut labels = Vec::new();
                while self.eat(&Tok::Colon) {
                    labels.push(self.ident()?);
                }
                e = Expr::HasLabel(Box::new(e), labels);
            } else {
                break;
            }
        }
        self.depth -= levels;
        Ok(e)
    }

    fn atom(&mut self) -> Result<Expr, ParseError> {
        self.enter()?;
        let r = self.atom_inner();
        self.leave();
        r
    }

    fn atom_inner(&mut self) -> Result<Expr, ParseError> {
        match self.peek().clone() {
            Tok::Int(v) => {
                self.bump();
                Ok(Expr::Literal(Literal::Int(v)))
            }
            Tok::Float(v) => {
                self.bump();
                Ok(Expr::Literal(Literal::Float(v)))
            }
            Tok::Str(s) => {
                self.bump();
                Ok(Expr::Literal(Literal::String(s)))
            }
            Tok::Param(p) => {
                self.bump();
                Ok(Expr::Param(p))
            }
            Tok::LBrace => self.map_literal(),
            Tok::LBracket => self.list_or_comprehension(),
            Tok::LParen => {
                // A parenthesised pattern `(a)-[]->(b)` is a predicate.
                if self.looks_like_pattern() {
                    return Ok(Expr::PatternPredicate(Box::new(self.pattern_part()?)));
                }
                self.bump();
                let e = self.expr()?;
                self.expect(&Tok::RParen, ")")?;
                Ok(e)
            }
            Tok::Ident { name, quoted } => {
                self.bump();
                if !quoted {
                    let up = name.to_ascii_uppercase();
                    match up.as_str() {
                        "NULL" => return Ok(Expr::Literal(Literal::Null)),
                        "TRUE" => return Ok(Expr::Literal(Literal::Bool(true))),
                        "FALSE" => return Ok(Expr::Literal(Literal::Bool(false))),
                        "CASE" => return self.case_expr(),
                        "EXISTS" if *self.peek() == Tok::LParen => return self.exists_expr(),
                        "COUNT" if *self.peek() == Tok::LParen && *self.peek_at(1) == Tok::Star => {
                            self.bump();
                            self.bump();
                            self.expect(&Tok::RParen, ")")?;
                            return Ok(Expr::CountStar);
                        }
                        _ => {}
                    }
                }
                // Namespaced function: `a.b.fn(...)`.
                let mut full = name;
                let save = self.i;
                while *self.peek() == Tok::Dot
                    && matches!(self.peek_at(1), Tok::Ident { .. })
                    && (*self.peek_at(2) == Tok::Dot || *self.peek_at(2) == Tok::LParen)
                {
                    self.bump();
                    full.push('.');
                    full.push_str(&self.ident()?);
                }
                if *self.peek() == Tok::LParen && !quoted {
                    self.bump();
                    let distinct = self.eat_kw("DISTINCT");
                    let mut args = Vec::new();
                    if !self.eat(&Tok::RParen) {
                        loop {
                            args.push(self.expr()?);
                            if !self.eat(&Tok::Comma) {
                                break;
                            }
                        }
                        self.expect(&Tok::RParen, ")")?;
                    }
                    return Ok(Expr::Function {
                        name: full,
                        distinct,
                        args,
                    });
                }
                self.i = save;
                let base = full.split('.').next().unwrap_or_default().to_string();
                Ok(Expr::Var(base))
            }
            Tok::Eof => self.err("unexpected end of input"),
            _ => self.err("unexpected token"),
        }
    }

    /// Bounded lookahead: `(` [var] (`:`Label)* `)` then `-[`, `--`, `->`
    /// or `<-`. Deciding up front avoids exponential backtracking.
    fn looks_like_pattern(&self) -> bool {
        let mut k = 0;
        if *self.peek_at(k) != Tok::LParen {
            return false;
        }
        k += 1;
        if matches!(self.peek_at(k), Tok::Ident { .. }) {
            k += 1;
        }
        while *self.peek_at(k) == Tok::Colon && matches!(self.peek_at(k + 1), Tok::Ident { .. }) {
            k += 2;
        }
        if *self.peek_at(k) != Tok::RParen {
            return false;
        }
        k += 1;
        match self.peek_at(k) {
            Tok::Minus => matches!(self.peek_at(k + 1), Tok::LBracket | Tok::Minus | Tok::Gt),
            Tok::Lt => {
                *self.peek_at(k + 1) == Tok::Minus
                    && matches!(self.peek_at(k + 2), Tok::LBracket | Tok::Minus)
            }
            _ => false,
        }
    }

    fn exists_expr(&mut self) -> Result<Expr, ParseError> {
        self.expect(&Tok::LParen, "(")?;
        if self.looks_like_pattern() {
            let p = self.pattern_part()?;
            self.expect(&Tok::RParen, ")")?;
            return Ok(Expr::ExistsPattern(Box::new(p)));
        }
        let e = self.expr()?;
        self.expect(&Tok::RParen, ")")?;
        Ok(Expr::Exists(Box::new(e)))
    }

    fn case_expr(&mut self) -> Result<Expr, ParseError> {
        let operand = if self.is_kw("WHEN") {
            None
        } else {
            Some(Box::new(self.expr()?))
        };
        let mut whens = Vec::new();
        while self.eat_kw("WHEN") {
            let w = self.expr()?;
            self.expect_kw("THEN")?;
            let t = self.expr()?;
            whens.push((w, t));
        }
        if whens.is_empty() {
            return self.err("expected WHEN");
        }
        let else_ = if self.eat_kw("ELSE") {
            Some(Box::new(self.expr()?))
        } else {
            None
        };
        self.expect_kw("END")?;
        Ok(Expr::Case {
            operand,
            whens,
            else_,
        })
    }

    /// `base{.key, key: expr, v, .*}` (AGE requires at least one element).
    fn map_projection(&mut self, base: Expr) -> Result<Expr, ParseError> {
        self.expect(&Tok::LBrace, "{")?;
        let mut items = Vec::new();
        loop {
            if self.eat(&Tok::Dot) {
                if self.eat(&Tok::Star) {
                    items.push(MapProjectionItem::AllProperties);
                } else {
                    items.push(MapProjectionItem::Property(self.ident()?));
                }
            } else {
                let key = self.ident()?;
                let value = if self.eat(&Tok::Colon) {
                    self.expr()?
                } else {
                    Expr::Var(key.clone())
                };
                items.push(MapProjectionItem::Entry(key, value));
            }
            if !self.eat(&Tok::Comma) {
                break;
            }
        }
        self.expect(&Tok::RBrace, "}")?;
        Ok(Expr::MapProjection(Box::new(base), items))
    }

    fn map_literal(&mut self) -> Result<Expr, ParseError> {
        self.expect(&Tok::LBrace, "{")?;
        let mut kv = Vec::new();
        if !self.eat(&Tok::RBrace) {
            loop {
                let key = match self.bump() {
                    Tok::Ident { name, .. } => name,
                    Tok::Str(s) => s,
                    _ => {
                        self.i = self.i.saturating_sub(1);
                        return self.err("expected map key");
                    }
                };
                self.expect(&Tok::Colon, ":")?;
                kv.push((key, self.expr()?));
                if !self.eat(&Tok::Comma) {
                    break;
                }
            }
            self.expect(&Tok::RBrace, "}")?;
        }
        Ok(Expr::Map(kv))
    }

    fn list_or_comprehension(&mut self) -> Result<Expr, ParseError> {
        self.expect(&Tok::LBracket, "[")?;
        if matches!(self.peek(), Tok::Ident { .. }) && self.is_kw_at(1, "IN") {
            let var = self.ident()?;
            self.bump();
            let list = Box::new(self.expr()?);
            let where_ = if self.eat_kw("WHERE") {
                Some(Box::new(self.expr()?))
            } else {
                None
            };
            let map = if self.eat(&Tok::Pipe) {
                Some(Box::new(self.expr()?))
            } else {
                None
            };
            self.expect(&Tok::RBracket, "]")?;
            return Ok(Expr::ListComprehension {
                var,
                list,
                where_,
                map,
            });
        }
        let mut items = Vec::new();
        if !self.eat(&Tok::RBracket) {
            loop {
                items.push(self.expr()?);
                if !self.eat(&Tok::Comma) {
                    break;
                }
            }
            self.expect(&Tok::RBracket, "]")?;
        }
        Ok(Expr::List(items))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_read_grammar() {
        let ok = [
            "MATCH (a:Person {id: 1})-[r:KNOWS]->(b), (c) WHERE a.x > 1 AND NOT b.y IS NULL RETURN a, r, count(*)",
            "OPTIONAL MATCH (a)<-[:X*1..3]-(b) RETURN DISTINCT a.name AS n ORDER BY n DESC SKIP 1 LIMIT 2",
            "UNWIND [1, 2, 3] AS x WITH x WHERE x > 1 RETURN x",
            "MATCH p = (a)-[*]-(b) RETURN length(p), nodes(p)[0]",
            "RETURN CASE WHEN 1 < 2 THEN 'a' ELSE 'b' END, CASE 1 WHEN 1 THEN 2 END",
            "RETURN [x IN range(1, 10) WHERE x % 2 = 0 | x * x], {a: 1, b: [1, 2]}, $p.q",
            "MATCH (m) WHERE EXISTS((m)<-[:LIKES]-()) AND exists(m.x) RETURN m.a.b[0][-1], m.l[1..2]",
            "MATCH (a) WHERE a:Person AND 1 < a.x < 3 RETURN a.x =~ 'x.*', a.s STARTS WITH 'a'",
            "CREATE (a:X {v: 1}) RETURN a",
            "MATCH (a) SET a.x = 1 RETURN a",
            "MATCH (a) DETACH DELETE a",
            "MERGE (a:X {id: 1}) ON CREATE SET a.n = 1 RETURN a",
            "CALL db.labels() YIELD label RETURN label",
            "MATCH (a) RETURN a UNION ALL MATCH (b) RETURN b",
        ];
        for q in ok {
            parse(q).unwrap_or_else(|e| panic!("{q}: {e:?}"));
        }
    }

    #[test]
    fn precedence() {
        let st = parse("RETURN 1 + 2 * 3 = 7 OR NOT true AND false").unwrap();
        let Clause::Return(p) = &st.parts[0].clauses[0] else {
            panic!()
        };
        assert!(matches!(p.items[0].expr, Expr::Binary(BinaryOp::Or, _, _)));
    }

    #[test]
    fn binary_operators_group_to_the_left() {
        for (q, op) in [
            ("RETURN 1 - 2 - 3", BinaryOp::Sub),
            ("RETURN 8 / 4 / 2", BinaryOp::Div),
            ("RETURN 2 ^ 3 ^ 2", BinaryOp::Pow),
            ("RETURN true XOR false XOR true", BinaryOp::Xor),
        ] {
            let st = parse(q).unwrap();
            let Clause::Return(p) = &st.parts[0].clauses[0] else {
                panic!()
            };
            let Expr::Binary(outer, l, _) = &p.items[0].expr else {
                panic!("{q}")
            };
            assert_eq!(*outer, op, "{q}");
            assert!(
                matches!(**l, Expr::Binary(ref inner, _, _) if *inner == op),
                "{q}"
            );
        }
    }

    #[test]
    fn depth_limited_without_panic() {
        let deep = format!("RETURN {}1{}", "(".repeat(5000), ")".repeat(5000));
        assert!(parse(&deep).is_err());
        let neg = format!("RETURN {}1", "-".repeat(5000));
        assert!(parse(&neg).is_err());
        let not = format!("RETURN {}true", "NOT ".repeat(5000));
        assert!(parse(&not).is_err());
        let lists = format!("RETURN {}1{}", "[".repeat(5000), "]".repeat(5000));
        assert!(parse(&lists).is_err());
        for op in ["+", "*", "^", "OR", "AND", "XOR"] {
            let chain = format!("RETURN 1{}", format!(" {op} 1").repeat(5000));
            assert!(parse(&chain).is_err(), "{op}");
        }
    }

    #[test]
    fn errors_point_at_token() {
        let e = parse("MATCH (a RETURN a").unwrap_err();
        assert_eq!(e.pos, 9);
    }
}
