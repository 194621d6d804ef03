//! CREATE, ALTER and DROP DATABASE: the statements that fail while other
//! sessions use a database, which a pooler's idle connections do.

use crate::lexer::{self, Kind, Token};

/// Does a statement of `sql` start with `CREATE`, `ALTER` or `DROP
/// DATABASE`? Those may need a database no other session is connected
/// to: a pooler closes its idle connections first.
pub fn database_command(sql: &str) -> bool {
    // Words as the pin scan counts them: a statement that starts with
    // anything else is not read.
    let (mut words, mut verb, mut skip) = (0usize, false, false);
    for t in lexer::tokens(sql) {
        if t.is_punct(sql, ";") {
            (words, skip) = (0, false);
            continue;
        }
        let word = matches!(t.kind, Kind::Word | Kind::QuotedIdent);
        skip |= words == 0 && !word;
        if skip || !word {
            continue;
        }
        words += 1;
        if words == 1 {
            verb = t.is_word(sql, "create") || t.is_word(sql, "alter") || t.is_word(sql, "drop");
        } else if words == 2 && verb && t.is_word(sql, "database") {
            return true;
        }
    }
    false
}

/// Which statement needs a database to itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatabaseCommand {
    /// `CREATE DATABASE`: its template.
    Create,
    /// `ALTER DATABASE ... RENAME TO`: the database renamed.
    Rename,
    /// `DROP DATABASE`: the database dropped.
    Drop,
}

/// A database that must have no other sessions for a statement to succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseTarget {
    pub command: DatabaseCommand,
    /// As PostgreSQL reads it: unquoted folded to lower case, quoted as
    /// written (`""` is `"`).
    pub name: String,
}

/// For each statement of `sql` in order, the database it needs to itself:
/// `DROP DATABASE [IF EXISTS] d` and `ALTER DATABASE d RENAME TO e` need
/// `d`, `CREATE DATABASE x [TEMPLATE [=] y]` needs `y` (`template1` by
/// default). Other statements, and ALTER DATABASE's other forms, need none.
pub fn database_targets(sql: &str) -> Vec<DatabaseTarget> {
    lexer::split_statements(sql)
        .iter()
        .filter_map(|p| sql.get(p.start..p.end))
        .filter_map(target)
        .collect()
}

/// Options of CREATE DATABASE that take a value: a `template` word right
/// after one is that value, not the option.
const VALUED: &[&str] = &[
    "owner",
    "encoding",
    "strategy",
    "locale",
    "lc_collate",
    "lc_ctype",
    "icu_locale",
    "icu_rules",
    "locale_provider",
    "collation_version",
    "builtin_locale",
    "tablespace",
    "allow_connections",
    "limit",
    "is_template",
    "oid",
];

/// PostgreSQL's own template for CREATE DATABASE.
const DEFAULT_TEMPLATE: &str = "template1";

fn target(text: &str) -> Option<DatabaseTarget> {
    let toks: Vec<Token> = lexer::tokens(text).collect();
    let word = |i: usize, w: &str| toks.get(i).is_some_and(|t| t.is_word(text, w));
    if !word(1, "database") {
        return None;
    }
    let at = |command, i: usize| {
        let name = super::prepared::name(text, toks.get(i)?)?;
        Some(DatabaseTarget { command, name })
    };
    if word(0, "drop") {
        let i = if word(2, "if") && word(3, "exists") {
            4
        } else {
            2
        };
        return at(DatabaseCommand::Drop, i);
    }
    if word(0, "alter") {
        return match word(3, "rename") {
            true => at(DatabaseCommand::Rename, 2),
            false => None,
        };
    }
    if !word(0, "create") {
        return None;
    }
    // Past the new database's name, the first TEMPLATE that is an option.
    for i in 3..toks.len() {
        let valued =
            toks[i - 1].kind == Kind::Word && VALUED.iter().any(|v| toks[i - 1].is_word(text, v));
        let after_equals = toks[i - 1].kind == Kind::Op;
        if !word(i, "template") || valued || after_equals {
            continue;
        }
        let mut v = i + 1;
        if toks
            .get(v)
            .is_some_and(|t| t.kind == Kind::Op && t.text(text) == "=")
        {
            v += 1;
        }
        let value = toks.get(v)?;
        let name = if value.is_word(text, "default") {
            DEFAULT_TEMPLATE.to_owned()
        } else if value.kind == Kind::String {
            match value.string_value(text) {
                Some((s, true)) => s,
                _ => return None,
            }
        } else {
            super::prepared::name(text, value)?
        };
        return Some(DatabaseTarget {
            command: DatabaseCommand::Create,
            name,
        });
    }
    Some(DatabaseTarget {
        command: DatabaseCommand::Create,
        name: DEFAULT_TEMPLATE.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::{DatabaseCommand::*, *};

    fn t(command: DatabaseCommand, name: &str) -> DatabaseTarget {
        DatabaseTarget {
            command,
            name: name.into(),
        }
    }

    #[test]
    fn database_commands() {
        assert!(database_command("DROP DATABASE x"));
        assert!(database_command("  create database y template x"));
        assert!(database_command("ALTER DATABASE x RENAME TO z"));
        assert!(database_command("select 1; drop database x"));
        assert!(!database_command("DROP TABLE database"));
        assert!(!database_command("SELECT 'drop database'"));
        assert!(!database_command("-- drop database x\nselect 1"));
    }

    #[test]
    fn drop_and_rename_need_their_database() {
        assert_eq!(database_targets("DROP DATABASE Shop"), [t(Drop, "shop")]);
        assert_eq!(
            database_targets("drop database if exists \"My\"\"Db\" with (force)"),
            [t(Drop, "My\"Db")]
        );
        assert_eq!(
            database_targets("ALTER DATABASE old RENAME TO new"),
            [t(Rename, "old")]
        );
        assert_eq!(database_targets("ALTER DATABASE d SET work_mem = 1"), []);
        assert_eq!(database_targets("ALTER DATABASE d OWNER TO x"), []);
        assert_eq!(database_targets("drop database"), []);
    }

    #[test]
    fn create_needs_its_template() {
        assert_eq!(
            database_targets("CREATE DATABASE x"),
            [t(Create, "template1")]
        );
        assert_eq!(
            database_targets("create database x template Base"),
            [t(Create, "base")]
        );
        assert_eq!(
            database_targets("CREATE DATABASE x WITH OWNER = template TEMPLATE = \"T\""),
            [t(Create, "T")]
        );
        assert_eq!(
            database_targets("CREATE DATABASE template ENCODING 'UTF8' TEMPLATE 'Tpl'"),
            [t(Create, "Tpl")]
        );
        assert_eq!(
            database_targets("CREATE DATABASE x TEMPLATE DEFAULT"),
            [t(Create, "template1")]
        );
        assert_eq!(
            database_targets("CREATE DATABASE x TEMPLATE template0; DROP DATABASE y"),
            [t(Create, "template0"), t(Drop, "y")]
        );
        assert_eq!(database_targets("CREATE TABLE database (a int)"), []);
        assert_eq!(database_targets("SELECT 'DROP DATABASE x'"), []);
    }
}
