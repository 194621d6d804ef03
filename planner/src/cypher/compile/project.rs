//! WITH and RETURN: projection, implicit grouping, DISTINCT, ORDER BY,
//! SKIP and LIMIT.

use std::collections::HashMap;

use super::super::DeclineReason as D;
use super::super::ast::*;
use super::Compiler;
use super::aggregate::{contains_aggregate, var_outside_aggregate};
use super::pattern::project_binding;
use super::scope::{Binding, is_private};
use super::stage::{Item, Stage};
use super::typed::{Kind, Sql};

/// RETURN's items, its grouping keys, whether it aggregates, and its
/// ORDER BY.
struct ReturnItems {
    items: Vec<String>,
    group: Vec<String>,
    aggregating: bool,
    order: Vec<String>,
}

impl Compiler<'_> {
    /// WITH: a projection of the scope. Grouping, DISTINCT, ORDER BY, SKIP
    /// and LIMIT close the SELECT built so far into a subquery; without
    /// them the new scope simply names the same expressions.
    pub(super) fn with(&mut self, p: &Projection) -> Result<(), D> {
        let names = item_names(p, true)?;
        let aggregating = p.items.iter().any(|i| contains_aggregate(&i.expr));
        let closes = p.distinct
            || aggregating
            || !p.order_by.is_empty()
            || p.skip.is_some()
            || p.limit.is_some();
        if p.star && (closes || !p.items.is_empty()) {
            return Err(D::With);
        }
        if !closes {
            if !p.star {
                let mut scope = HashMap::new();
                for (it, name) in p.items.iter().zip(&names) {
                    let b = match &it.expr {
                        Expr::Var(v) => self.scope.get(v).cloned().ok_or(D::UnboundVariable)?,
                        e => Binding::Value(self.expr(e)?),
                    };
                    scope.insert(name.clone(), b);
                }
                self.scope = scope;
                self.order = names;
            }
            return self.with_where(p);
        }
        self.collect_order_known(p, aggregating)?;
        let alias = self.fresh("_w");
        let mut cols = Vec::new();
        let mut group = Vec::new();
        let mut scope = HashMap::new();
        // Reset below; an error ends the whole compilation.
        self.projecting = true;
        for (it, name) in p.items.iter().zip(&names) {
            let before = cols.len();
            let b = match &it.expr {
                Expr::Var(v) => self.scope.get(v).cloned().ok_or(D::UnboundVariable)?,
                e if contains_aggregate(e) => {
                    if var_outside_aggregate(e) {
                        return Err(D::AggregateShape);
                    }
                    let s = self.expr_top(e)?;
                    cols.push(s.text);
                    scope.insert(
                        name.clone(),
                        Binding::Value(Sql {
                            text: format!("{alias}.c{}", cols.len()),
                            kind: s.kind,
                        }),
                    );
                    continue;
                }
                e => Binding::Value(self.expr(e)?),
            };
            let rebound = project_binding(&b, &alias, &mut cols, false)?;
            group.extend(cols[before..].iter().cloned());
            scope.insert(name.clone(), rebound);
        }
        let order = self.order_by(p, &names, &cols)?;
        self.projecting = false;
        let select: Vec<String> = cols
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c} AS c{}", i + 1))
            .collect();
        let sql = self.select_sql(p, &select, aggregating, &group, &order)?;
        self.rows_in_plan_order |= (aggregating && !group.is_empty()) || p.distinct;
        self.stage = Stage {
            items: vec![Item::Table(format!("({sql}) AS {alias}"))],
            conds: Vec::new(),
            pinned: false,
        };
        self.scope = scope;
        self.order = names;
        self.with_where(p)
    }

    /// WHERE after WITH, over the projected names.
    fn with_where(&mut self, p: &Projection) -> Result<(), D> {
        if let Some(w) = &p.where_ {
            if contains_aggregate(w) {
                return Err(D::AggregateShape);
            }
            let c = self.filter(w)?;
            self.stage.conds.push(c.to_bool());
        }
        Ok(())
    }

    /// RETURN: the final SELECT, columns `c1..cN`.
    pub(super) fn ret(&mut self, p: &Projection, ncols: usize) -> Result<String, D> {
        if p.star {
            // Every variable, in the order they were bound.
            if !p.items.is_empty() || self.order.is_empty() {
                return Err(D::ReturnStar);
            }
            let items = self
                .order
                .iter()
                .map(|v| ProjectionItem {
                    expr: Expr::Var(v.clone()),
                    alias: None,
                })
                .collect();
            let all = Projection {
                star: false,
                items,
                ..p.clone()
            };
            return self.ret(&all, ncols);
        }
        if p.items.len() != ncols {
            return Err(D::ColumnMismatch);
        }
        let names = item_names(p, false)?;
        self.collect_order_known(p, p.items.iter().any(|i| contains_aggregate(&i.expr)))?;
        let was = std::mem::replace(&mut self.projecting, true);
        let r = self.ret_items(p, &names);
        self.projecting = was;
        let ReturnItems {
            items,
            group,
            aggregating,
            order,
        } = r?;
        let cols: Vec<String> = items
            .iter()
            .enumerate()
            .map(|(i, s)| format!("{s} AS c{}", i + 1))
            .collect();
        self.select_sql(p, &cols, aggregating, &group, &order)
    }

    fn ret_items(&mut self, p: &Projection, names: &[String]) -> Result<ReturnItems, D> {
        let mut items = Vec::new();
        let mut group = Vec::new();
        let mut aggregating = false;
        for it in &p.items {
            if contains_aggregate(&it.expr) {
                if var_outside_aggregate(&it.expr) {
                    return Err(D::AggregateShape);
                }
                aggregating = true;
                items.push(self.expr_top(&it.expr)?.to_agtype());
            } else {
                let sql = self.expr(&it.expr)?.to_agtype();
                group.push(sql.clone());
                items.push(sql);
            }
        }
        let order = self.order_by(p, names, &items)?;
        Ok(ReturnItems {
            items,
            group,
            aggregating,
            order,
        })
    }

    /// `collect()` lists its rows in the order they come. After a grouping
    /// or DISTINCT that order is the plan's own (AGE's hash aggregate
    /// gives its groups in hash order), which the compiled plan does not
    /// reproduce: such a collect is left to AGE.
    fn collect_order_known(&self, p: &Projection, aggregating: bool) -> Result<(), D> {
        if !aggregating || !self.rows_in_plan_order {
            return Ok(());
        }
        let mut collects = false;
        for it in &p.items {
            it.expr.walk(&mut |x| {
                collects |= matches!(x, Expr::Function { name, .. }
                    if name.eq_ignore_ascii_case("collect"));
            });
        }
        if collects {
            return Err(D::CollectOrder);
        }
        Ok(())
    }

    /// The ORDER BY list. AGE resolves sort keys in the scope before the
    /// projection and rejects a projected alias ("could not find rte");
    /// with DISTINCT or grouping SQL and AGE only agree when each key is
    /// one of the projected values.
    fn order_by(
        &mut self,
        p: &Projection,
        names: &[String],
        cols: &[String],
    ) -> Result<Vec<String>, D> {
        let aliases: Vec<&str> = p
            .items
            .iter()
            .zip(names)
            .filter(|(it, name)| !matches!(&it.expr, Expr::Var(v) if v == *name))
            .map(|(_, n)| n.as_str())
            .collect();
        let aggregating = p.items.iter().any(|i| contains_aggregate(&i.expr));
        let mut order = Vec::new();
        for s in &p.order_by {
            let mut alias_ref = false;
            s.expr.walk(&mut |x| {
                if let Expr::Var(v) = x
                    && aliases.contains(&v.as_str())
                {
                    alias_ref = true;
                }
            });
            if alias_ref {
                return Err(D::OrderByAlias);
            }
            let e = self.expr_top(&s.expr)?;
            if e.kind == Kind::Bool {
                return Err(D::OrderByShape);
            }
            if (p.distinct || aggregating) && !cols.contains(&e.text) {
                return Err(D::OrderByShape);
            }
            order.push(format!(
                "{}{}",
                e.text,
                if s.descending { " DESC" } else { "" }
            ));
        }
        Ok(order)
    }

    fn select_sql(
        &mut self,
        p: &Projection,
        cols: &[String],
        aggregating: bool,
        group: &[String],
        order: &[String],
    ) -> Result<String, D> {
        let skip = p.skip.as_ref().map(|e| self.count_expr(e)).transpose()?;
        let limit = p.limit.as_ref().map(|e| self.count_expr(e)).transpose()?;
        let mut sql = String::from("SELECT ");
        if p.distinct {
            sql.push_str("DISTINCT ");
        }
        sql.push_str(&cols.join(", "));
        sql.push_str(&self.stage.sql_from());
        sql.push_str(&self.stage.sql_where());
        if aggregating && !group.is_empty() {
            sql.push_str(" GROUP BY ");
            sql.push_str(&group.join(", "));
        }
        if !order.is_empty() {
            sql.push_str(" ORDER BY ");
            sql.push_str(&order.join(", "));
        }
        if let Some(s) = skip {
            sql.push_str(&format!(" OFFSET {s}"));
        }
        if let Some(l) = limit {
            sql.push_str(&format!(" LIMIT {l}"));
        }
        Ok(sql)
    }
}

/// The name each projected item gets: its alias, or the variable itself.
/// AGE requires an alias for anything else in WITH ("expression item must
/// be aliased"); RETURN's other items get private names.
fn item_names(p: &Projection, with: bool) -> Result<Vec<String>, D> {
    let mut names = Vec::with_capacity(p.items.len());
    for (k, it) in p.items.iter().enumerate() {
        let name = match (&it.alias, &it.expr) {
            (Some(a), _) => a.clone(),
            (None, Expr::Var(v)) => v.clone(),
            (None, _) => format!(" item{k}"),
        };
        if with && is_private(&name) {
            return Err(D::With);
        }
        if names.contains(&name) {
            return Err(D::ColumnMismatch);
        }
        names.push(name);
    }
    Ok(names)
}

impl Compiler<'_> {
    /// A SKIP or LIMIT count: an integer literal as it is (a negative one
    /// reaches PostgreSQL, which raises the same error AGE does), anything
    /// else through agtype's cast to bigint, as AGE coerces it. Variables
    /// are left to AGE, whose error points into the Cypher text.
    fn count_expr(&mut self, e: &Expr) -> Result<String, D> {
        match e {
            Expr::Literal(Literal::Int(v)) => return Ok(v.to_string()),
            Expr::Unary(UnaryOp::Neg, x) => {
                if let Expr::Literal(Literal::Int(v)) = **x {
                    return Ok((-v).to_string());
                }
            }
            _ => {}
        }
        let mut has_var = false;
        e.walk(&mut |x| has_var |= matches!(x, Expr::Var(_)) || contains_aggregate(x));
        if has_var {
            return Err(D::SkipLimitExpr);
        }
        let v = self.expr(e)?.agtype_only()?;
        Ok(format!("({v})::bigint"))
    }
}
