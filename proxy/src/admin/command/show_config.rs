//! SHOW CONFIG: the effective configuration, as `section.key` rows.

use bytes::BytesMut;

use super::table::{Row, cell, table};
use crate::shared::Shared;

pub const SYNTAX: &str = "SHOW CONFIG";
pub const ABOUT: &str = "effective configuration (passwords never shown)";

pub fn run(shared: &Shared, out: &mut BytesMut) {
    let mut rows = Vec::new();
    match toml::Value::try_from(&*shared.config()) {
        Ok(toml::Value::Table(t)) => flatten("", &toml::Value::Table(t), &mut rows),
        Ok(_) | Err(_) => rows.push(vec![cell("error"), cell("configuration cannot be shown")]),
    }
    // Where "embedded" actually listens.
    for r in &mut rows {
        if r[0].as_deref() == Some("upstream.address") && r[1].as_deref() == Some("embedded") {
            r[1] = cell(format!("embedded ({})", shared.upstream_addr()));
        }
    }
    table(out, &["key", "value"], rows);
}

/// `section.key = value` rows; any key naming a password is left out, even
/// though the config already never serialises one.
fn flatten(prefix: &str, v: &toml::Value, rows: &mut Vec<Row>) {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                if k.contains("password") {
                    continue;
                }
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, rows);
            }
        }
        toml::Value::String(x) => rows.push(vec![cell(prefix), cell(x)]),
        toml::Value::Array(a) if a.iter().all(|x| x.is_table()) => {
            // `[[admin.users]]`: show the names only.
            let names: Vec<String> = a
                .iter()
                .filter_map(|x| x.get("name").and_then(|n| n.as_str()).map(str::to_owned))
                .collect();
            rows.push(vec![cell(prefix), cell(names.join(", "))]);
        }
        other => rows.push(vec![cell(prefix), cell(other)]),
    }
}
