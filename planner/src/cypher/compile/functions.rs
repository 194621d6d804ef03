//! Function calls, resolved as AGE resolves them: a Cypher function `f` is
//! `ag_catalog.age_<lower-case f>`, called with the same arguments (whole
//! vertices and edges built as AGE builds them), so its results and errors
//! are AGE's own. A few read columns directly where that is provably the
//! same value.

use super::super::DeclineReason as D;
use super::super::ast::*;
use super::super::literal::{agtype_string, sql_string};
use super::Compiler;
use super::aggregate::contains_aggregate;
use super::scope::Binding;
use super::typed::Sql;

/// How AGE declares an `age_*` function's parameters.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Params {
    /// `agtype` parameters: a boolean argument would be cast.
    Agtype,
    /// `VARIADIC "any"` (or `"any"`): arguments are passed as they are, and
    /// the function checks their number itself, except that a call without
    /// any fails to resolve while the statement is analysed (where the
    /// error's position would point into the compiled SQL).
    Any,
}

/// (lower-case Cypher name, parameters, fewest and most arguments).
const FUNCTIONS: &[(&str, Params, usize, usize)] = &[
    ("abs", Params::Any, 1, usize::MAX),
    ("acos", Params::Any, 1, usize::MAX),
    ("asin", Params::Any, 1, usize::MAX),
    ("atan", Params::Any, 1, usize::MAX),
    ("atan2", Params::Any, 1, usize::MAX),
    ("ceil", Params::Any, 1, usize::MAX),
    ("cos", Params::Any, 1, usize::MAX),
    ("cot", Params::Any, 1, usize::MAX),
    ("degrees", Params::Any, 1, usize::MAX),
    ("e", Params::Agtype, 0, 0),
    ("end_id", Params::Agtype, 1, 1),
    ("exp", Params::Any, 1, usize::MAX),
    ("floor", Params::Any, 1, usize::MAX),
    ("head", Params::Agtype, 1, 1),
    ("id", Params::Agtype, 1, 1),
    ("isempty", Params::Agtype, 1, 1),
    ("keys", Params::Agtype, 1, 1),
    ("label", Params::Agtype, 1, 1),
    ("labels", Params::Agtype, 1, 1),
    ("last", Params::Agtype, 1, 1),
    ("left", Params::Any, 1, usize::MAX),
    ("length", Params::Agtype, 1, 1),
    ("log", Params::Any, 1, usize::MAX),
    ("log10", Params::Any, 1, usize::MAX),
    ("ltrim", Params::Any, 1, usize::MAX),
    ("nodes", Params::Agtype, 1, 1),
    ("pi", Params::Agtype, 0, 0),
    ("properties", Params::Agtype, 1, 1),
    ("radians", Params::Any, 1, usize::MAX),
    ("rand", Params::Agtype, 0, 0),
    ("range", Params::Any, 1, usize::MAX),
    ("relationships", Params::Agtype, 1, 1),
    ("replace", Params::Any, 1, usize::MAX),
    ("reverse", Params::Any, 1, usize::MAX),
    ("right", Params::Any, 1, usize::MAX),
    ("round", Params::Any, 1, usize::MAX),
    ("rtrim", Params::Any, 1, usize::MAX),
    ("sign", Params::Any, 1, usize::MAX),
    ("sin", Params::Any, 1, usize::MAX),
    ("size", Params::Any, 1, usize::MAX),
    ("split", Params::Any, 1, usize::MAX),
    ("sqrt", Params::Any, 1, usize::MAX),
    ("start_id", Params::Agtype, 1, 1),
    ("substring", Params::Any, 1, usize::MAX),
    ("tail", Params::Any, 1, usize::MAX),
    ("tan", Params::Any, 1, usize::MAX),
    ("timestamp", Params::Agtype, 0, 0),
    ("toboolean", Params::Any, 1, usize::MAX),
    ("tobooleanlist", Params::Any, 1, usize::MAX),
    ("tofloat", Params::Any, 1, usize::MAX),
    ("tofloatlist", Params::Any, 1, usize::MAX),
    ("tointeger", Params::Any, 1, usize::MAX),
    ("tointegerlist", Params::Any, 1, usize::MAX),
    ("tolower", Params::Any, 1, usize::MAX),
    ("tostring", Params::Any, 1, 1),
    ("tostringlist", Params::Any, 1, usize::MAX),
    ("toupper", Params::Any, 1, usize::MAX),
    ("trim", Params::Any, 1, usize::MAX),
    ("type", Params::Agtype, 1, 1),
];

impl Compiler<'_> {
    pub(super) fn aggregate(&mut self, e: &Expr) -> Result<Sql, D> {
        let (name, distinct, args) = match e {
            Expr::CountStar => return Ok(Sql::ag("count(*)::agtype".to_string())),
            Expr::Function {
                name,
                distinct,
                args,
            } => (name.to_ascii_lowercase(), *distinct, args),
            _ => return Err(D::AggregateShape),
        };
        let arity = if name.starts_with("percentile") { 2 } else { 1 };
        if args.len() != arity || args.iter().any(contains_aggregate) {
            return Err(D::AggregateShape);
        }
        let d = if distinct { "DISTINCT " } else { "" };
        // count(v) over a bound vertex/edge counts rows: its id is never
        // null (NULL as a whole when OPTIONAL MATCH found nothing).
        if name == "count"
            && let Expr::Var(v) = &args[0]
            && let Some(id) = self.entity_id(v)
        {
            return Ok(Sql::ag(format!("count({d}{id})::agtype")));
        }
        let mut a = Vec::with_capacity(args.len());
        for x in args {
            a.push(self.expr(x)?.agtype_only()?);
        }
        let a = a.join(", ");
        let text = match name.as_str() {
            "count" => format!("count({d}{a})::agtype"),
            "avg" => format!("ag_catalog.age_avg({d}{a})::agtype"),
            _ => format!("ag_catalog.age_{name}({d}{a})"),
        };
        Ok(Sql::ag(text))
    }

    pub(super) fn function(&mut self, e: &Expr) -> Result<Sql, D> {
        let Expr::Function {
            name,
            distinct,
            args,
        } = e
        else {
            return Err(D::UnsupportedExpr);
        };
        if *distinct || name.contains('.') {
            return Err(D::UnknownFunction);
        }
        let lname = name.to_ascii_lowercase();
        if let Some(s) = self.column_function(&lname, args)? {
            return Ok(s);
        }
        if lname == "coalesce" {
            if args.is_empty() {
                return Err(D::UnknownFunction);
            }
            let mut v = Vec::new();
            for a in args {
                v.push(self.expr(a)?.agtype_only()?);
            }
            return Ok(Sql::ag(format!("COALESCE({})", v.join(", "))));
        }
        // AGE passes the graph's name first, and only for this spelling.
        let graph_first = name == "startNode" || name == "endNode";
        let (params, lo, hi) = match FUNCTIONS.iter().find(|(n, ..)| *n == lname) {
            Some((_, p, lo, hi)) => (*p, *lo, *hi),
            None if graph_first => (Params::Agtype, 1, 1),
            None => return Err(D::UnknownFunction),
        };
        if args.len() < lo || args.len() > hi {
            return Err(D::UnknownFunction);
        }
        let mut v = Vec::new();
        if graph_first {
            v.push(format!(
                "{}::agtype",
                sql_string(&agtype_string(&self.graph.name))
            ));
        }
        for a in args {
            let s = self.expr(a)?;
            v.push(match params {
                Params::Any => s.text,
                Params::Agtype => s.agtype_only()?,
            });
        }
        let call = format!("ag_catalog.age_{lname}({})", v.join(", "));
        // The one such function whose result is a SQL boolean.
        Ok(if lname == "isempty" {
            Sql::bool(call)
        } else {
            Sql::ag(call)
        })
    }

    /// Functions of a bound vertex or edge that read its columns rather
    /// than build it: the same values AGE's functions return.
    fn column_function(&mut self, lname: &str, args: &[Expr]) -> Result<Option<Sql>, D> {
        let [Expr::Var(v)] = args else {
            return Ok(None);
        };
        let ent = match self.scope.get(v) {
            Some(Binding::Node(e)) | Some(Binding::Edge(e)) => e.clone(),
            _ => return Ok(None),
        };
        let is_edge = matches!(self.scope.get(v), Some(Binding::Edge(_)));
        let col = match lname {
            "id" => ent.id.clone(),
            "start_id" if is_edge => ent.start.clone(),
            "end_id" if is_edge => ent.end.clone(),
            "properties" => return Ok(ent.props.clone().map(Sql::ag)),
            _ => None,
        };
        Ok(col.map(|c| Sql::ag(format!("ag_catalog.graphid_to_agtype({c})"))))
    }
}
