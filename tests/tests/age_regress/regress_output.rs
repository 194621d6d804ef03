//! psql's echoed output of a regression test, split into result tables and
//! other lines, and compared as the comment of `age_regress.rs` says.

#[derive(Debug, PartialEq)]
enum Item<'a> {
    Line(&'a str),
    Table {
        header: &'a str,
        rule: &'a str,
        /// One entry per row; a value with newlines spans several lines.
        rows: Vec<String>,
        footer: &'a str,
        ordered: bool,
        /// An unordered query that calls `collect()`.
        collects: bool,
    },
}

fn is_rule(l: &str) -> bool {
    !l.is_empty()
        && l.split('+')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b == b'-'))
}

fn is_footer(l: &str) -> bool {
    l.strip_prefix('(')
        .and_then(|r| r.strip_suffix(" rows)").or_else(|| r.strip_suffix(" row)")))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

fn has_order_by(text: &str) -> bool {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    words.windows(2).any(|w| w[0] == "order" && w[1] == "by")
}

fn items(text: &str) -> Vec<Item<'_>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    // Echoed statement text since the last result table.
    let mut since_table = String::new();
    let mut i = 0;
    while i < lines.len() {
        // psql pads the header to the rule's width.
        let table_end = (i + 1 < lines.len()
            && is_rule(lines[i + 1])
            && lines[i].starts_with(' ')
            && lines[i].chars().count() == lines[i + 1].len())
        .then(|| (i + 2..lines.len()).find(|&k| is_footer(lines[k])))
        .flatten();
        let Some(end) = table_end else {
            // Whether an error came from a parallel worker depends on
            // the plan the server chose, not on what the client sent.
            if lines[i] != "CONTEXT:  parallel worker" {
                out.push(Item::Line(lines[i]));
            }
            since_table.push_str(lines[i]);
            since_table.push('\n');
            i += 1;
            continue;
        };
        let mut rows: Vec<String> = Vec::new();
        let mut continued = false;
        for l in &lines[i + 2..end] {
            match rows.last_mut() {
                Some(r) if continued => {
                    r.push('\n');
                    r.push_str(l);
                }
                _ => rows.push(l.to_string()),
            }
            continued = l.ends_with('+');
        }
        out.push(Item::Table {
            header: lines[i],
            rule: lines[i + 1],
            rows,
            footer: lines[end],
            ordered: has_order_by(&since_table),
            collects: since_table.to_ascii_lowercase().contains("collect("),
        });
        since_table.clear();
        i = end + 1;
    }
    out
}

/// `Ok` with the number of tables equal only up to the order of list
/// elements when `got` prints what `want` does; else the first
/// difference.
pub fn compare(want: &str, got: &str) -> Result<usize, String> {
    let (a, b) = (items(want), items(got));
    let mut collect_order = 0;
    for (k, (x, y)) in a.iter().zip(&b).enumerate() {
        if x == y {
            continue;
        }
        let same = match (x, y) {
            (
                Item::Table {
                    header: h1,
                    rows: r1,
                    footer: f1,
                    rule: u1,
                    ordered: false,
                    collects,
                },
                Item::Table {
                    header: h2,
                    rows: r2,
                    footer: f2,
                    rule: u2,
                    ..
                },
            ) if h1 == h2 && f1 == f2 && u1 == u2 => {
                let multiset = |rows: &[String], canon: bool| {
                    let mut v: Vec<String> = rows
                        .iter()
                        .map(|r| if canon { sort_lists(r) } else { r.clone() })
                        .collect();
                    v.sort();
                    v
                };
                if multiset(r1, false) == multiset(r2, false) {
                    true
                } else if *collects && multiset(r1, true) == multiset(r2, true) {
                    collect_order += 1;
                    true
                } else {
                    false
                }
            }
            (Item::Table { header: h1, .. }, Item::Table { header: h2, .. }) => {
                h1.trim() == "QUERY PLAN" && h2.trim() == "QUERY PLAN"
            }
            _ => false,
        };
        if !same {
            let context: Vec<String> = a[k.saturating_sub(6)..k]
                .iter()
                .filter_map(|i| match i {
                    Item::Line(l) => Some(l.to_string()),
                    Item::Table { .. } => None,
                })
                .collect();
            return Err(format!(
                "after\n{}\n  direct:        {x:?}\n  through onetrip: {y:?}",
                context.join("\n")
            ));
        }
    }
    if a.len() != b.len() {
        return Err(format!(
            "{} items direct, {} through onetrip",
            a.len(),
            b.len()
        ));
    }
    Ok(collect_order)
}

/// `Ok` when `got` prints what `want` does line for line, but for
/// what shows the plan (EXPLAIN's tables, an error's parallel worker
/// context); else the first difference.
pub fn compare_lines(want: &str, got: &str) -> Result<(), String> {
    let (a, b) = (items(want), items(got));
    for (x, y) in a.iter().zip(&b) {
        let plan = matches!(
            (x, y),
            (Item::Table { header: h1, .. }, Item::Table { header: h2, .. })
                if h1.trim() == "QUERY PLAN" && h2.trim() == "QUERY PLAN"
        );
        if x != y && !plan {
            return Err(format!(
                "\n  direct:          {x:?}\n  through onetrip: {y:?}"
            ));
        }
    }
    if a.len() != b.len() {
        return Err(format!(
            "{} items direct, {} through onetrip",
            a.len(),
            b.len()
        ));
    }
    Ok(())
}

/// `text` with the elements of every `[...]` list (outside strings)
/// sorted, innermost first.
fn sort_lists(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut pos = 0;
    let mut out = String::new();
    while pos < chars.len() {
        out.push_str(&value(&chars, &mut pos));
    }
    out
}

/// Copies one character, string or bracketed value from `pos`,
/// sorting list elements on the way.
fn value(chars: &[char], pos: &mut usize) -> String {
    let c = chars[*pos];
    *pos += 1;
    match c {
        '"' => {
            let mut s = String::from('"');
            while *pos < chars.len() {
                let d = chars[*pos];
                *pos += 1;
                s.push(d);
                if d == '\\' && *pos < chars.len() {
                    s.push(chars[*pos]);
                    *pos += 1;
                } else if d == '"' {
                    break;
                }
            }
            s
        }
        '[' | '{' => {
            let close = if c == '[' { ']' } else { '}' };
            let mut parts = vec![String::new()];
            while *pos < chars.len() && chars[*pos] != close {
                if chars[*pos] == ',' {
                    *pos += 1;
                    parts.push(String::new());
                    continue;
                }
                let v = value(chars, pos);
                parts.last_mut().expect("one part").push_str(&v);
            }
            *pos += 1;
            let mut parts: Vec<String> = parts.iter().map(|p| p.trim().to_string()).collect();
            if c == '[' {
                parts.sort();
            }
            format!("{c}{}{close}", parts.join(", "))
        }
        c => c.to_string(),
    }
}

#[test]
fn unordered_rows_compare_as_multisets() {
    let a = "SELECT 1;\n a \n---\n 1\n 2\n(2 rows)\n\n";
    let b = "SELECT 1;\n a \n---\n 2\n 1\n(2 rows)\n\n";
    assert_eq!(compare(a, b), Ok(0));
    let a = "SELECT 1 ORDER BY a;\n a \n---\n 1\n 2\n(2 rows)\n\n";
    let b = "SELECT 1 ORDER BY a;\n a \n---\n 2\n 1\n(2 rows)\n\n";
    assert!(compare(a, b).is_err());
    let c = "SELECT 1;\n a \n---\n 1\n 1\n(2 rows)\n\n";
    assert!(compare("SELECT 1;\n a \n---\n 1\n 2\n(2 rows)\n\n", c).is_err());
    assert!(compare("ERROR:  x\n", "ERROR:  y\n").is_err());
}

#[test]
fn collected_lists_compare_as_multisets_in_unordered_queries() {
    let q = |ret: &str, rows: &str| format!("{ret};\n a \n---\n {rows}\n(1 row)\n");
    let (x, y) = (r#"[{"k": [1, 2]}, "a"]"#, r#"["a", {"k": [2, 1]}]"#);
    assert_eq!(
        compare(&q("RETURN collect(x)", x), &q("RETURN collect(x)", y)),
        Ok(1)
    );
    assert!(
        compare(
            &q("RETURN collect(x) ORDER BY x", x),
            &q("RETURN collect(x) ORDER BY x", y)
        )
        .is_err()
    );
    assert!(compare(&q("RETURN reverse(x)", x), &q("RETURN reverse(x)", y)).is_err());
    assert!(
        compare(
            &q("RETURN collect(x)", x),
            &q("RETURN collect(x)", r#"["a", {"k": [2, 3]}]"#)
        )
        .is_err()
    );
    assert_eq!(
        sort_lists(r#" ["b, c", "a"] | {"z": ["]", "["]}"#),
        r#" ["a", "b, c"] | {"z": ["[", "]"]}"#
    );
}

#[test]
fn line_for_line_tells_row_order() {
    let a = "SELECT 1;\n a \n---\n 1\n 2\n(2 rows)\n\n";
    let b = "SELECT 1;\n a \n---\n 2\n 1\n(2 rows)\n\n";
    assert!(compare_lines(a, b).is_err());
    assert_eq!(compare_lines(a, a), Ok(()));
    let plan = |p: &str| format!("EXPLAIN SELECT 1;\n QUERY PLAN \n------------\n {p}\n(1 row)\n");
    assert_eq!(compare_lines(&plan("Scan a"), &plan("Scan b")), Ok(()));
}

#[test]
fn parallel_worker_context_is_not_compared() {
    let a = "SELECT 1/0;\nERROR:  division by zero\nCONTEXT:  parallel worker\nSELECT 2;\n";
    let b = "SELECT 1/0;\nERROR:  division by zero\nSELECT 2;\n";
    assert_eq!(compare(a, b), Ok(0));
    assert!(compare(a, "SELECT 1/0;\nSELECT 2;\n").is_err());
}

#[test]
fn comment_lines_are_not_tables() {
    let t = items("\n--\n-- a comment\nSELECT 1;\n a \n---\n 1\n(1 row)\n");
    assert_eq!(t.len(), 5, "{t:?}");
    assert!(matches!(t[4], Item::Table { .. }), "{t:?}");
}

#[test]
fn multi_line_values_stay_one_row() {
    let t = items(" a \n---\n x+\n y\n z\n(2 rows)\n");
    let Item::Table { rows, .. } = &t[0] else {
        panic!("{t:?}")
    };
    assert_eq!(rows, &[" x+\n y".to_string(), " z".to_string()]);
}

#[test]
fn explain_output_is_not_compared() {
    let a = "EXPLAIN SELECT 1;\n QUERY PLAN \n------------\n Scan a\n(1 row)\n\n--\n";
    let b =
        "EXPLAIN SELECT 1;\n   QUERY PLAN   \n----------------\n Scan b\n Filter\n(2 rows)\n\n--\n";
    assert_eq!(compare(a, b), Ok(0));
}
