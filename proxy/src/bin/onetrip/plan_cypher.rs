//! `onetrip plan-cypher "<sql>"`: what the Cypher planner makes of a
//! statement, no server needed.

use std::process::ExitCode;

use onetrip_planner::cypher::{Catalog, LabelKind, plan_cypher};

/// Exit status of `plan-cypher` when the planner declines the statement.
const DECLINED: u8 = 3;

/// Builds a catalog from `--catalog FILE` (the rows of `Catalog::QUERY` as
/// `psql -AtF $'\t'` prints them), or from `--label GRAPH.LABEL=v|e` and
/// `--graph GRAPH=OID` arguments; with none, every graph and label is
/// assumed to exist.
fn catalog_from_args(
    file: Option<&std::path::Path>,
    graphs: &[String],
    labels: &[String],
) -> Result<Catalog, String> {
    if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--catalog {}: {e}", path.display()))?;
        return Ok(Catalog::from_tsv(&text));
    }
    if graphs.is_empty() && labels.is_empty() {
        return Ok(Catalog::assume_all());
    }
    let mut c = Catalog::new();
    for g in graphs {
        let (name, oid) = g
            .split_once('=')
            .ok_or_else(|| format!("--graph {g:?}: expected NAME=OID"))?;
        let oid: u32 = oid
            .parse()
            .map_err(|_| format!("--graph {g:?}: OID must be a number"))?;
        c.add_graph(name, name, oid);
    }
    for l in labels {
        let (path, kind) = l
            .split_once('=')
            .ok_or_else(|| format!("--label {l:?}: expected GRAPH.LABEL=v|e"))?;
        let (graph, label) = path
            .split_once('.')
            .ok_or_else(|| format!("--label {l:?}: expected GRAPH.LABEL=v|e"))?;
        let kind = match kind {
            "v" => LabelKind::Vertex,
            "e" => LabelKind::Edge,
            _ => return Err(format!("--label {l:?}: kind must be v or e")),
        };
        if !c.add_label(graph, label, kind, label) {
            return Err(format!(
                "--label {l:?}: graph {graph:?} not given with --graph {graph}=OID"
            ));
        }
    }
    Ok(c)
}

/// The compiled SQL on stdout (exit 0), or the reason the planner leaves
/// the statement to AGE on stderr (exit 3).
pub fn run(
    sql: &str,
    file: Option<&std::path::Path>,
    graphs: &[String],
    labels: &[String],
) -> ExitCode {
    let catalog = match catalog_from_args(file, graphs, labels) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("onetrip plan-cypher: {e}");
            return ExitCode::from(2);
        }
    };
    match plan_cypher(sql, &catalog) {
        Ok(compiled) => {
            println!("{compiled}");
            ExitCode::SUCCESS
        }
        Err(reason) => {
            eprintln!("declined: {reason}");
            ExitCode::from(DECLINED)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_arguments() {
        let c = catalog_from_args(
            None,
            &["g=7".into()],
            &["g.Person=v".into(), "g.KNOWS=e".into()],
        )
        .unwrap();
        assert_eq!(c.graph("g").and_then(|g| g.oid), Some(7));
        assert!(catalog_from_args(None, &[], &["g.Person=v".into()]).is_err());
        assert!(catalog_from_args(None, &["g=x".into()], &[]).is_err());
        assert!(catalog_from_args(None, &[], &[]).unwrap().assume_labels);
    }
}
