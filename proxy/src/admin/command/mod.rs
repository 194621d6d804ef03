//! The admin console's commands, one file each. A statement's words (in
//! any case, spaced freely) name a [`Command`]; each answers with one result
//! set or a command tag, built from a read of the shared statistics. Only
//! `RESET STATS` and `RELOAD` change anything, and only for users marked
//! for them.

mod reload;
mod reset_stats;
mod show_clients;
mod show_config;
mod show_fallbacks;
mod show_help;
mod show_pools;
mod show_replicas;
mod show_rewrites;
mod show_servers;
mod show_stats;
mod show_version;
mod table;

use std::sync::Arc;

use bytes::BytesMut;

use crate::{
    shared::Shared,
    wire::write::{self, Severity},
};

/// Declares [`Command`] from one line per command: its variant, then its
/// file, which names the command's `SYNTAX`, its line in SHOW HELP (`ABOUT`)
/// and `run`. A new command is a new file, its `mod` line and a line here.
macro_rules! commands {
    ($($variant:ident => $file:ident,)*) => {
        /// A console command.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Command {
            $($variant,)*
        }

        impl Command {
            /// Every command, in the order SHOW HELP lists them.
            pub const ALL: &[Command] = &[$(Command::$variant,)*];

            /// The words that run it, as SHOW HELP shows them.
            pub fn syntax(self) -> &'static str {
                match self {
                    $(Command::$variant => $file::SYNTAX,)*
                }
            }

            /// What it answers with, for SHOW HELP.
            pub fn about(self) -> &'static str {
                match self {
                    $(Command::$variant => $file::ABOUT,)*
                }
            }

            /// Appends its answer to `out`.
            pub fn run(self, shared: &Arc<Shared>, out: &mut BytesMut) {
                match self {
                    $(Command::$variant => $file::run(shared, out),)*
                }
            }
        }
    };
}

commands! {
    ShowHelp => show_help,
    ShowStats => show_stats,
    ShowClients => show_clients,
    ShowServers => show_servers,
    ShowReplicas => show_replicas,
    ShowPools => show_pools,
    ShowConfig => show_config,
    ShowFallbacks => show_fallbacks,
    ShowRewrites => show_rewrites,
    ShowVersion => show_version,
    ResetStats => reset_stats,
    Reload => reload,
}

/// A statement that names no command; SHOW HELP lists them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// It begins as a command does (`SHOW ...`) but names none.
    #[error("unsupported admin command \"{0}\"; SHOW HELP lists the commands")]
    Unsupported(String),
    /// Anything else, such as SQL meant for a database.
    #[error("unknown admin command \"{0}\"; SHOW HELP lists the commands")]
    Unknown(String),
}

impl CommandError {
    pub fn sqlstate(&self) -> &'static str {
        match self {
            CommandError::Unsupported(_) => "0A000",
            CommandError::Unknown(_) => "42601",
        }
    }
}

impl std::str::FromStr for Command {
    type Err = CommandError;

    /// One statement, without its `;`.
    fn from_str(statement: &str) -> Result<Self, CommandError> {
        let words: Vec<String> = statement
            .split_whitespace()
            .map(str::to_ascii_uppercase)
            .collect();
        let words = words.join(" ");
        if let Some(c) = Command::ALL.iter().find(|c| c.syntax() == words) {
            return Ok(*c);
        }
        let verb = words.split(' ').next();
        if Command::ALL
            .iter()
            .any(|c| c.syntax().split(' ').next() == verb)
        {
            Err(CommandError::Unsupported(statement.into()))
        } else {
            Err(CommandError::Unknown(statement.into()))
        }
    }
}

/// What the logged-in admin user may do beyond reading.
#[derive(Debug, Clone, Copy, Default)]
pub struct Caller {
    /// `[admin] users` marks the user `reset_stats = true`.
    pub reset_stats: bool,
    /// `[admin] users` marks the user `reload = true`.
    pub reload: bool,
}

impl Command {
    /// Whether `caller` may run it: anyone may read; `RESET STATS` wipes
    /// what every operator reads and `RELOAD` changes what every client
    /// gets, so each takes a user marked for it. `None`: allowed; else the
    /// mark it needs.
    fn needs(self, caller: Caller) -> Option<&'static str> {
        match self {
            Command::ResetStats if !caller.reset_stats => Some("reset_stats"),
            Command::Reload if !caller.reload => Some("reload"),
            _ => None,
        }
    }
}

/// Runs every `;`-separated command of a simple query, in order. Like
/// PostgreSQL, the first error ends the query string.
pub fn run_all(sql: &str, shared: &Arc<Shared>, caller: Caller, out: &mut BytesMut) {
    let statements: Vec<&str> = sql
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if statements.is_empty() {
        write::empty_query(out);
        return;
    }
    for statement in statements {
        match statement.parse::<Command>() {
            Ok(command) => {
                let Some(mark) = command.needs(caller) else {
                    let at = out.len();
                    command.run(shared, out);
                    // A command that failed (RELOAD refused) ends it too.
                    if out.get(at) == Some(&b'E') {
                        return;
                    }
                    continue;
                };
                let msg = format!(
                    "permission denied for {}: the admin user needs {mark} = true in [admin] users",
                    command.syntax()
                );
                write::error_into(out, Severity::Error, "42501", &msg);
                return;
            }
            Err(e) => {
                write::error_into(out, Severity::Error, e.sqlstate(), &e.to_string());
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_name_commands() {
        for &c in Command::ALL {
            assert_eq!(c.syntax().parse(), Ok(c));
        }
        assert_eq!(" show\n  Stats ".parse(), Ok(Command::ShowStats));
        assert_eq!(
            "SHOW NONSENSE".parse::<Command>(),
            Err(CommandError::Unsupported("SHOW NONSENSE".into()))
        );
        assert_eq!(
            "reset".parse::<Command>(),
            Err(CommandError::Unsupported("reset".into()))
        );
        assert_eq!(
            "select 1".parse::<Command>(),
            Err(CommandError::Unknown("select 1".into()))
        );
    }
}
