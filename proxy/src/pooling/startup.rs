//! A pooled client's startup parameters beyond `user` and `database`. A
//! pool is per (database, user) and opens its connections with those two
//! alone, so the rest (`application_name`, `DateStyle`, `TimeZone`, the
//! `-c name=value` switches of `options`, any other setting) is made on
//! whichever connection the client takes, as its own `SET`s are: with
//! `set_config(name, value, false)`, which reads a value as the startup
//! packet does (a `SET` would quote a list such as `a, b` as one name).

use crate::protocol::{SessionSets, literal};

/// What a pooled client's startup parameters make of its session.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ClientStartup {
    /// (setting, lower-case; the statement that makes it), in the order
    /// PostgreSQL applies them (`options` first, then the parameters).
    pub sets: SessionSets,
    /// The parameters whose acceptance and reported values only the
    /// server can tell, sorted: learned once per pool (`Pool::learned`).
    /// Empty when there is nothing to learn.
    pub learn: Vec<(String, String)>,
    /// Reported values known without asking: a printable ASCII
    /// `application_name` is reported as it was sent.
    pub known: Vec<(String, String)>,
    /// They set what the session's settings query reads (the transaction
    /// defaults, the search path): the session asks for its own.
    pub own_defaults: bool,
}

/// Why a login can't be pooled, when its startup parameters say so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotPooled {
    #[error("a replication connection")]
    Replication,
    #[error("protocol options (_pq_.*) in the startup packet")]
    ProtocolOption,
    #[error("startup option {0} (only -c name=value and --name=value are carried)")]
    Switch(&'static str),
    #[error("startup option -c without name=value")]
    NoValue,
    #[error("a role or session authorization in the startup packet")]
    Role,
}

/// Settings read by the session's settings query (`protocol::settings`).
const DEFAULTS: &[&str] = &[
    "default_transaction_isolation",
    "default_transaction_read_only",
    "default_transaction_deferrable",
    "search_path",
];

impl ClientStartup {
    /// The startup parameters of a login, as settings to make on each
    /// connection the client takes.
    pub fn of(params: &[(String, String)]) -> Result<Self, NotPooled> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        let mut put = |name: String, value: String| {
            let key = name.to_ascii_lowercase();
            pairs.retain(|(n, _)| n.to_ascii_lowercase() != key);
            pairs.push((name, value));
        };
        if let Some((_, options)) = params.iter().find(|(k, _)| k == "options") {
            for (name, value) in switches(options)? {
                put(name, value);
            }
        }
        for (k, v) in params {
            match k.as_str() {
                "user" | "database" | "options" => {}
                "replication" => return Err(NotPooled::Replication),
                k if k.starts_with("_pq_.") => return Err(NotPooled::ProtocolOption),
                _ => put(k.clone(), v.clone()),
            }
        }
        let mut out = ClientStartup::default();
        for (name, value) in pairs {
            let key = name.to_ascii_lowercase();
            if matches!(key.as_str(), "role" | "session_authorization") {
                return Err(NotPooled::Role);
            }
            out.own_defaults |= DEFAULTS.contains(&key.as_str());
            // PostgreSQL reports a printable name of at most NAMEDATALEN - 1
            // bytes as it was sent; a longer one it truncates, with a notice.
            let as_sent = value.len() < 64 && value.bytes().all(|b| (32..=126).contains(&b));
            if key == "application_name" && as_sent {
                out.known.push((key.clone(), value.clone()));
            } else {
                out.learn.push((key.clone(), value.clone()));
            }
            let stmt = set_config(&name, &value);
            out.sets.set(key, stmt);
        }
        out.learn.sort();
        Ok(out)
    }

    /// The query that makes every startup setting on a connection whose
    /// settings were reset, answering one row: each value as the server
    /// reports it, in `learn`'s order.
    pub fn learn_query(&self) -> String {
        let calls: Vec<String> = self.learn.iter().map(|(n, v)| call(n, v)).collect();
        format!("RESET ALL;\nSELECT {}", calls.join(", "))
    }
}

/// `SELECT pg_catalog.set_config(name, value, false)`.
fn set_config(name: &str, value: &str) -> String {
    format!("SELECT {}", call(name, value))
}

fn call(name: &str, value: &str) -> String {
    format!(
        "pg_catalog.set_config({}, {}, false)",
        literal(name),
        literal(value)
    )
}

/// The `-c name=value` and `--name=value` switches of `options`, split as
/// PostgreSQL splits them (`pg_split_opts`: at unescaped white space, a
/// backslash escaping the next character).
fn switches(options: &str) -> Result<Vec<(String, String)>, NotPooled> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut escaped = false;
    let mut in_word = false;
    for c in options.chars() {
        if c.is_ascii_whitespace() && !escaped {
            if in_word {
                words.push(std::mem::take(&mut word));
                in_word = false;
            }
            continue;
        }
        in_word = true;
        if !escaped && c == '\\' {
            escaped = true;
        } else {
            escaped = false;
            word.push(c);
        }
    }
    if in_word {
        words.push(word);
    }
    let mut out = Vec::new();
    let mut words = words.into_iter();
    while let Some(w) = words.next() {
        let arg = if let Some(long) = w.strip_prefix("--") {
            long.to_owned()
        } else if w == "-c" {
            words.next().ok_or(NotPooled::NoValue)?
        } else if let Some(attached) = w.strip_prefix("-c") {
            attached.to_owned()
        } else {
            return Err(NotPooled::Switch(switch_name(&w)));
        };
        let (name, value) = arg.split_once('=').ok_or(NotPooled::NoValue)?;
        // PostgreSQL's ParseLongOption: dashes in the name are underscores.
        out.push((name.replace('-', "_"), value.to_owned()));
    }
    Ok(out)
}

/// A switch named in a message without the value that follows it.
fn switch_name(w: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "-B", "-b", "-C", "-D", "-d", "-E", "-e", "-F", "-f", "-h", "-i", "-j", "-k", "-l", "-N",
        "-n", "-O", "-P", "-p", "-r", "-S", "-s", "-T", "-t", "-v", "-W",
    ];
    KNOWN
        .iter()
        .find(|k| w.starts_with(**k))
        .copied()
        .unwrap_or("other than -c")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parameters_become_settings_in_postgres_order() {
        let s = ClientStartup::of(&params(&[
            ("user", "u"),
            ("database", "d"),
            ("application_name", "worker 7"),
            (
                "options",
                r"-c search_path=a,b --statement-timeout=5s -cDateStyle=ISO\ ,\ DMY",
            ),
            ("DateStyle", "SQL"),
        ]))
        .unwrap();
        let names: Vec<&str> = s.sets.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "search_path",
                "statement_timeout",
                "application_name",
                "datestyle"
            ]
        );
        let stmts: Vec<&str> = s.sets.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(
            stmts[0],
            "SELECT pg_catalog.set_config(E'search_path', E'a,b', false)"
        );
        // The parameter comes after options, and wins.
        assert!(stmts[3].contains("E'SQL'"), "{stmts:?}");
        assert_eq!(s.known, [("application_name".into(), "worker 7".into())]);
        assert_eq!(s.learn.len(), 3);
        assert!(s.own_defaults);
    }

    #[test]
    fn what_is_not_carried_is_named() {
        let no = |p: &[(&str, &str)]| ClientStartup::of(&params(p)).unwrap_err();
        assert_eq!(no(&[("replication", "database")]), NotPooled::Replication);
        assert_eq!(no(&[("_pq_.x", "1")]), NotPooled::ProtocolOption);
        assert_eq!(no(&[("options", "-B 100")]), NotPooled::Switch("-B"));
        assert_eq!(no(&[("options", "-c")]), NotPooled::NoValue);
        assert_eq!(no(&[("options", "-c x")]), NotPooled::NoValue);
        assert_eq!(no(&[("role", "r")]), NotPooled::Role);
        let plain = ClientStartup::of(&params(&[("user", "u")])).unwrap();
        assert!(plain.sets.is_empty() && plain.learn.is_empty());
        // Only non-printable application names need the server.
        let odd = ClientStartup::of(&params(&[("application_name", "caf\u{e9}")])).unwrap();
        assert!(odd.known.is_empty() && odd.learn.len() == 1);
    }

    #[test]
    fn literals_read_the_same_either_way() {
        assert_eq!(literal(r"a'b\c"), r"E'a''b\\c'");
        let s = ClientStartup::of(&params(&[("TimeZone", "UTC"), ("x.y", "1")])).unwrap();
        assert_eq!(
            s.learn_query(),
            "RESET ALL;\nSELECT pg_catalog.set_config(E'timezone', E'UTC', false), \
             pg_catalog.set_config(E'x.y', E'1', false)"
        );
    }
}
