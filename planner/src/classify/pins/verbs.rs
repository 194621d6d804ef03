//! The verbs the pin scan knows, and what it looks for past them.

/// Functions whose effect outlives the transaction.
pub(super) const SESSION_FUNCTIONS: &[(&str, &str)] = &[
    ("pg_advisory_lock", "session advisory lock"),
    ("pg_advisory_lock_shared", "session advisory lock"),
    ("pg_try_advisory_lock", "session advisory lock"),
    ("pg_try_advisory_lock_shared", "session advisory lock"),
    ("dblink_connect", "dblink connection"),
    ("dblink_connect_u", "dblink connection"),
];

/// What a statement is, by its verb: what it may leave behind follows.
#[derive(Default, Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Verb {
    /// None yet, or none read.
    #[default]
    Unknown,
    Select,
    With,
    Insert,
    Update,
    Delete,
    Merge,
    Copy,
    Create,
    /// ALTER, DROP, GRANT ...: changes the schema.
    Ddl,
    Set,
    Declare,
    Prepare,
    Explain,
    Execute,
    Call,
    Do,
    Load,
    /// No expressions, so no calls: transaction control, VACUUM, SHOW,
    /// LOCK, LISTEN ...
    Quiet,
}

/// The verbs, the commonest first: the first word of every statement is
/// looked up here.
#[rustfmt::skip]
const VERBS: &[(&str, Verb, Option<&str>)] = &[
    ("select", Verb::Select, None), ("update", Verb::Update, None),
    ("insert", Verb::Insert, None), ("begin", Verb::Quiet, None),
    ("commit", Verb::Quiet, None), ("end", Verb::Quiet, None),
    ("rollback", Verb::Quiet, None), ("with", Verb::With, None),
    ("delete", Verb::Delete, None), ("set", Verb::Set, None), ("show", Verb::Quiet, None),
    ("values", Verb::Select, None), ("table", Verb::Select, None),
    ("start", Verb::Quiet, None), ("abort", Verb::Quiet, None),
    ("savepoint", Verb::Quiet, None), ("release", Verb::Quiet, None),
    ("merge", Verb::Merge, None), ("copy", Verb::Copy, None), ("fetch", Verb::Quiet, None),
    ("move", Verb::Quiet, None), ("close", Verb::Quiet, None), ("declare", Verb::Declare, None),
    ("prepare", Verb::Prepare, None), ("execute", Verb::Execute, None),
    ("deallocate", Verb::Quiet, Some("SQL DEALLOCATE")), ("explain", Verb::Explain, None),
    ("lock", Verb::Quiet, None), ("notify", Verb::Quiet, None),
    ("listen", Verb::Quiet, Some("LISTEN")), ("unlisten", Verb::Quiet, Some("UNLISTEN")),
    ("reset", Verb::Quiet, Some("RESET")), ("discard", Verb::Quiet, Some("DISCARD")),
    ("call", Verb::Call, None), ("do", Verb::Do, Some("DO block")), ("load", Verb::Load, None),
    ("create", Verb::Create, None), ("alter", Verb::Ddl, None), ("drop", Verb::Ddl, None),
    ("truncate", Verb::Quiet, None), ("comment", Verb::Ddl, None), ("grant", Verb::Ddl, None),
    ("revoke", Verb::Ddl, None), ("security", Verb::Ddl, None), ("reassign", Verb::Ddl, None),
    ("import", Verb::Ddl, None), ("refresh", Verb::Ddl, None), ("analyze", Verb::Quiet, None),
    ("analyse", Verb::Quiet, None), ("vacuum", Verb::Quiet, None),
    ("reindex", Verb::Quiet, None), ("cluster", Verb::Quiet, None),
    ("checkpoint", Verb::Quiet, None),
];

/// The verb a statement's word names, and the pin it makes as the first.
pub(super) fn verb_of(word: &str) -> Option<(Verb, Option<&'static str>)> {
    VERBS
        .iter()
        .find(|(w, _, _)| word.eq_ignore_ascii_case(w))
        .map(|&(_, verb, pin)| (verb, pin))
}

/// Statements that change table rows, whose target is looked at.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Dml {
    Insert,
    Update,
    Delete,
    Merge,
    Copy,
}

/// Where a verb stands in its statement.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum At {
    /// The statement's own: its first word, EXPLAIN's statement, WITH's
    /// main statement.
    Main,
    /// A WITH query's.
    Query,
}
