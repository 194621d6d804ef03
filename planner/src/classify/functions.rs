//! Which functions a read may call.
//!
//! A read is coalesced with an early Sync, which ends its implicit transaction sooner than the
//! client asked. That is invisible only if the statement changes nothing a transaction end
//! would commit or release. So functions are judged by an allow list of built-ins known to
//! have no side effects (volatile is fine: `random()` or `clock_timestamp()` change nothing),
//! plus the caller's `[coalesce] read_only_functions`; a known side-effect function gets a
//! specific reason, anything else is "unknown".

use std::collections::HashSet;
use std::sync::LazyLock;

use rustc_hash::FxHashSet;

/// How a function name was judged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum FunctionVerdict {
    ReadOnly,
    /// Known side effect; the text says which.
    SideEffect(&'static str),
    Unknown,
}

/// Built-in functions (schema `pg_catalog`, callable unqualified) with no side effects.
/// Includes aggregates, window functions, and the function-call spellings of casts.
#[rustfmt::skip]
pub(crate) const PG_READ_ONLY: &[&str] = &[
    // aggregates
    "count", "sum", "avg", "min", "max", "bool_and", "bool_or", "every", "bit_and", "bit_or",
    "bit_xor", "array_agg", "string_agg", "json_agg", "jsonb_agg", "json_agg_strict",
    "jsonb_agg_strict", "json_object_agg", "jsonb_object_agg", "json_object_agg_strict",
    "jsonb_object_agg_strict", "json_object_agg_unique", "jsonb_object_agg_unique",
    "json_object_agg_unique_strict", "jsonb_object_agg_unique_strict", "json_arrayagg",
    "json_objectagg", "xmlagg", "stddev", "stddev_pop", "stddev_samp", "variance", "var_pop",
    "var_samp", "corr", "covar_pop", "covar_samp", "regr_avgx", "regr_avgy", "regr_count",
    "regr_intercept", "regr_r2", "regr_slope", "regr_sxx", "regr_sxy", "regr_syy", "mode",
    "percentile_cont", "percentile_disc", "any_value", "range_agg", "range_intersect_agg",
    // window functions
    "row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile", "lag", "lead",
    "first_value", "last_value", "nth_value",
    // conditionals and row/array constructors sqlparser parses as calls
    "coalesce", "nullif", "greatest", "least", "row", "array", "num_nulls", "num_nonnulls",
    // date and time (volatile ones included: they read the clock, they change nothing)
    "now", "current_timestamp", "current_date", "current_time", "localtime", "localtimestamp",
    "clock_timestamp", "statement_timestamp", "transaction_timestamp", "timeofday", "age",
    "date_part", "date_trunc", "date_bin", "extract", "isfinite", "justify_days",
    "justify_hours", "justify_interval", "make_date", "make_time", "make_timestamp",
    "make_timestamptz", "make_interval", "to_timestamp", "to_date", "to_char", "to_number",
    "timezone", "date_add", "date_subtract", "overlaps",
    // math
    "abs", "ceil", "ceiling", "floor", "round", "trunc", "sign", "sqrt", "cbrt", "exp", "ln",
    "log", "log10", "power", "pow", "mod", "div", "pi", "degrees", "radians", "sin", "cos",
    "tan", "cot", "asin", "acos", "atan", "atan2", "sind", "cosd", "tand", "cotd", "asind",
    "acosd", "atand", "atan2d", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "gcd", "lcm",
    "factorial", "width_bucket", "scale", "min_scale", "trim_scale", "erf", "erfc",
    // `random` is volatile but writes nothing; `setseed` (session state) is not here.
    "random", "random_normal", "gen_random_uuid", "uuidv4", "uuidv7", "uuid_extract_timestamp",
    "uuid_extract_version",
    // strings
    "lower", "upper", "initcap", "length", "char_length", "character_length", "octet_length",
    "bit_length", "substr", "substring", "position", "strpos", "overlay", "trim", "btrim",
    "ltrim", "rtrim", "lpad", "rpad", "left", "right", "repeat", "reverse", "replace",
    "translate", "split_part", "concat", "concat_ws", "format", "chr", "ascii", "to_hex",
    "to_bin", "to_oct", "md5", "sha224", "sha256", "sha384", "sha512", "encode", "decode",
    "convert", "convert_from", "convert_to", "quote_ident", "quote_literal", "quote_nullable",
    "regexp_match", "regexp_matches", "regexp_replace", "regexp_split_to_array",
    "regexp_split_to_table", "regexp_count", "regexp_instr", "regexp_like", "regexp_substr",
    "starts_with", "string_to_array", "string_to_table", "unistr", "normalize", "casefold",
    "crc32", "crc32c", "get_byte", "set_byte", "get_bit", "set_bit", "bit_count", "text",
    "parse_ident", "unaccent", "similarity", "word_similarity", "strict_word_similarity",
    // arrays
    "array_length", "array_lower", "array_upper", "array_ndims", "array_dims", "cardinality",
    "array_append", "array_prepend", "array_cat", "array_remove", "array_replace",
    "array_position", "array_positions", "array_to_string", "array_fill", "trim_array",
    "array_sample", "array_shuffle", "array_reverse", "array_sort", "unnest", "generate_series",
    "generate_subscripts",
    // json / jsonb builders, accessors and processing
    "to_json", "to_jsonb", "array_to_json", "row_to_json", "json_build_array",
    "jsonb_build_array", "json_build_object", "jsonb_build_object", "json_object",
    "jsonb_object", "json_array", "json_scalar", "json_serialize", "json_array_length",
    "jsonb_array_length", "json_each", "jsonb_each", "json_each_text", "jsonb_each_text",
    "json_extract_path", "jsonb_extract_path", "json_extract_path_text",
    "jsonb_extract_path_text", "json_object_keys", "jsonb_object_keys", "json_populate_record",
    "jsonb_populate_record", "jsonb_populate_record_valid", "json_populate_recordset",
    "jsonb_populate_recordset", "json_to_record", "jsonb_to_record", "json_to_recordset",
    "jsonb_to_recordset", "json_array_elements", "jsonb_array_elements",
    "json_array_elements_text", "jsonb_array_elements_text", "json_typeof", "jsonb_typeof",
    "json_strip_nulls", "jsonb_strip_nulls", "jsonb_set", "jsonb_set_lax", "jsonb_insert",
    "jsonb_pretty", "jsonb_concat", "jsonb_contains", "jsonb_exists", "jsonb_exists_any",
    "jsonb_exists_all", "jsonb_path_exists", "jsonb_path_match", "jsonb_path_query",
    "jsonb_path_query_array", "jsonb_path_query_first", "jsonb_path_exists_tz",
    "jsonb_path_match_tz", "jsonb_path_query_tz", "jsonb_path_query_array_tz",
    "jsonb_path_query_first_tz", "json_exists", "json_query", "json_value", "json_table",
    // full text search
    "to_tsvector", "to_tsquery", "plainto_tsquery", "phraseto_tsquery", "websearch_to_tsquery",
    "ts_rank", "ts_rank_cd", "ts_headline", "setweight", "strip", "numnode", "querytree",
    "tsvector_to_array", "array_to_tsvector", "ts_delete", "ts_filter", "get_current_ts_config",
    // ranges, geometry, network
    "lower_inc", "upper_inc", "lower_inf", "upper_inf", "isempty", "range_merge", "multirange",
    "host", "hostmask", "masklen", "netmask", "network", "broadcast", "family", "abbrev",
    "inet_same_family", "inet_merge", "area", "center", "diameter", "height", "width", "radius",
    "npoints", "point", "box", "circle", "line", "lseg", "path", "polygon",
    // function-call spellings of casts
    "int2", "int4", "int8", "float4", "float8", "numeric", "bool", "char", "varchar", "bpchar",
    "name", "date", "time", "timetz", "timestamp", "timestamptz", "interval", "json", "jsonb",
    "uuid", "bytea", "inet", "cidr", "macaddr", "oid", "regclass", "regtype", "regproc",
    "regnamespace", "xid", "xid8", "money", "bit", "varbit", "tsvector", "tsquery", "int4range",
    "int8range", "numrange", "tsrange", "tstzrange", "daterange", "to_regclass", "to_regtype",
    "to_regtypemod", "to_regproc", "to_regprocedure", "to_regnamespace", "to_regrole",
    "to_regoper", "to_regcollation", "format_type", "pg_typeof", "pg_input_is_valid",
    "pg_input_error_info",
    // session and system information (reads only)
    "current_user", "session_user", "user", "current_role", "system_user", "current_database",
    "current_catalog", "current_schema", "current_schemas", "current_setting", "current_query",
    "version", "pg_backend_pid", "pg_blocking_pids", "pg_conf_load_time",
    "pg_postmaster_start_time", "pg_is_in_recovery", "pg_is_wal_replay_paused",
    "pg_get_wal_replay_pause_state", "pg_current_wal_lsn", "pg_current_wal_insert_lsn",
    "pg_current_wal_flush_lsn", "pg_last_wal_receive_lsn", "pg_last_wal_replay_lsn",
    "pg_last_xact_replay_timestamp", "pg_wal_lsn_diff", "pg_listening_channels",
    "pg_notification_queue_usage", "pg_jit_available", "pg_trigger_depth", "pg_client_encoding",
    "inet_client_addr", "inet_client_port", "inet_server_addr", "inet_server_port",
    "pg_my_temp_schema", "pg_is_other_temp_schema", "pg_safe_snapshot_blocking_pids",
    "pg_tablespace_location", "pg_get_keywords", "pg_get_catalog_foreign_keys",
    "pg_settings_get_flags", "pg_encoding_to_char", "pg_char_to_encoding",
    // currval/lastval read this session's sequence state; they change nothing.
    "currval", "lastval", "pg_sequence_last_value", "pg_get_serial_sequence",
    // transaction ids: only the forms that do not assign one
    "txid_current_if_assigned", "pg_current_xact_id_if_assigned", "txid_current_snapshot",
    "pg_current_snapshot", "txid_snapshot_xmin", "txid_snapshot_xmax", "txid_snapshot_xip",
    "pg_snapshot_xmin", "pg_snapshot_xmax", "pg_snapshot_xip", "txid_visible_in_snapshot",
    "pg_visible_in_snapshot", "txid_status", "pg_xact_status", "pg_xact_commit_timestamp",
    "pg_xact_commit_timestamp_origin", "pg_last_committed_xact", "age", "mxid_age",
    // privileges and visibility
    "has_table_privilege", "has_column_privilege", "has_any_column_privilege",
    "has_database_privilege", "has_schema_privilege", "has_function_privilege",
    "has_sequence_privilege", "has_language_privilege", "has_tablespace_privilege",
    "has_type_privilege", "has_foreign_data_wrapper_privilege", "has_server_privilege",
    "has_parameter_privilege", "has_largeobject_privilege", "pg_has_role",
    "row_security_active", "pg_table_is_visible", "pg_type_is_visible",
    "pg_function_is_visible", "pg_operator_is_visible", "pg_opclass_is_visible",
    "pg_opfamily_is_visible", "pg_collation_is_visible", "pg_conversion_is_visible",
    "pg_statistics_obj_is_visible", "pg_ts_config_is_visible", "pg_ts_dict_is_visible",
    "pg_ts_parser_is_visible", "pg_ts_template_is_visible",
    // catalog introspection
    "pg_get_constraintdef", "pg_get_expr", "pg_get_functiondef", "pg_get_function_arguments",
    "pg_get_function_identity_arguments", "pg_get_function_result", "pg_get_indexdef",
    "pg_get_ruledef", "pg_get_statisticsobjdef", "pg_get_triggerdef", "pg_get_userbyid",
    "pg_get_viewdef", "pg_get_partkeydef", "pg_get_partition_constraintdef",
    "pg_index_column_has_property", "pg_index_has_property", "pg_indexam_has_property",
    "pg_options_to_table", "pg_get_object_address", "pg_describe_object", "pg_identify_object",
    "pg_identify_object_as_address", "obj_description", "col_description", "shobj_description",
    "pg_column_size", "pg_column_compression", "pg_database_size", "pg_indexes_size",
    "pg_relation_size", "pg_size_bytes", "pg_size_pretty", "pg_table_size",
    "pg_tablespace_size", "pg_total_relation_size", "pg_relation_filenode",
    "pg_relation_filepath", "pg_filenode_relation", "pg_partition_tree",
    "pg_partition_ancestors", "pg_partition_root", "pg_stat_get_activity",
    "pg_stat_get_backend_idset", "pg_stat_get_backend_pid", "pg_stat_get_numscans",
    "pg_stat_get_tuples_returned", "pg_stat_get_live_tuples", "pg_stat_get_dead_tuples",
    "pg_lock_status", "pg_prepared_xact", "pg_show_all_settings", "pg_sleep", "pg_sleep_for",
    "pg_sleep_until",
    // pgvector (distance functions and helpers; operators need no entry)
    "l2_distance", "cosine_distance", "inner_product", "l1_distance", "vector_dims",
    "vector_norm", "l2_normalize", "binary_quantize", "subvector", "hamming_distance",
    "jaccard_distance", "vector", "halfvec", "sparsevec",
    // uuid-ossp
    "uuid_generate_v1", "uuid_generate_v1mc", "uuid_generate_v3", "uuid_generate_v4",
    "uuid_generate_v5", "uuid_nil",
];

/// Apache AGE functions (schema `ag_catalog`) that read only. `cypher` itself is judged by its
/// Cypher text elsewhere.
#[rustfmt::skip]
const AGE_READ_ONLY: &[&str] = &[
    "agtype_access_operator", "agtype_access_slice", "agtype_in_operator", "agtype_to_json",
    "agtype_typecast_int", "agtype_typecast_float", "agtype_typecast_numeric",
    "agtype_build_map", "agtype_build_list", "_agtype_build_vertex", "_agtype_build_edge",
    "_agtype_build_path", "_label_name", "_label_id", "_graphid", "_extract_label_id",
    "graphid_to_agtype", "agtype_to_graphid", "age_id", "age_start_id", "age_end_id",
    "age_label", "age_properties", "age_keys", "age_labels", "age_length", "age_size",
    "age_tostring", "age_tointeger", "age_tofloat", "age_toboolean", "age_head", "age_last",
    "age_tail", "age_nodes", "age_relationships", "age_range", "age_collect", "age_min",
    "age_max", "age_sum", "age_avg", "age_count", "age_type", "age_exists", "age_vle", "agtype",
    "get_cypher_keywords",
];

/// Functions that read the transaction's own time or identity: inside a
/// transaction block they answer what they answered at its start.
pub(crate) const TRANSACTION_TIME: &[&str] = &[
    "now",
    "current_timestamp",
    "current_date",
    "current_time",
    "localtime",
    "localtimestamp",
    "transaction_timestamp",
    "txid_current_if_assigned",
    "pg_current_xact_id_if_assigned",
    "txid_current_snapshot",
    "pg_current_snapshot",
];

/// Side-effect functions with the reason they are unsafe. Exact names first, then prefixes.
#[rustfmt::skip]
const SIDE_EFFECTS: &[(&str, &str)] = &[
    ("nextval", "advances a sequence"),
    ("setval", "sets a sequence"),
    ("set_config", "changes a setting"),
    ("setseed", "changes the session's random seed"),
    ("pg_notify", "sends a notification"),
    ("txid_current", "assigns a transaction id"),
    ("pg_current_xact_id", "assigns a transaction id"),
    ("pg_export_snapshot", "exports a snapshot that ends with the transaction"),
    ("pg_import_snapshot", "changes the transaction's snapshot"),
    ("pg_terminate_backend", "signals another backend"),
    ("pg_cancel_backend", "signals another backend"),
    ("pg_reload_conf", "reloads the server configuration"),
    ("pg_rotate_logfile", "rotates the server log"),
    ("pg_log_backend_memory_contexts", "writes to the server log"),
    ("pg_switch_wal", "switches the WAL file"),
    ("pg_create_restore_point", "writes WAL"),
    ("pg_promote", "promotes a standby"),
    ("pg_wal_replay_pause", "pauses WAL replay"),
    ("pg_wal_replay_resume", "resumes WAL replay"),
    ("pg_backup_start", "starts a backup"),
    ("pg_backup_stop", "stops a backup"),
    ("pg_logical_emit_message", "writes WAL"),
    ("pg_drop_replication_slot", "drops a replication slot"),
    ("pg_copy_physical_replication_slot", "creates a replication slot"),
    ("pg_copy_logical_replication_slot", "creates a replication slot"),
    ("pg_create_physical_replication_slot", "creates a replication slot"),
    ("pg_create_logical_replication_slot", "creates a replication slot"),
    ("pg_replication_slot_advance", "advances a replication slot"),
    ("pg_file_write", "writes a file"),
    ("pg_file_unlink", "removes a file"),
    ("pg_file_rename", "renames a file"),
    ("pg_file_sync", "syncs a file"),
    ("pg_stat_clear_snapshot", "discards statistics snapshot"),
    ("pg_prewarm", "loads relation data"),
    ("dblink", "runs SQL on another connection"),
    ("loread", "uses a large object descriptor"),
    ("lowrite", "writes a large object"),
    ("create_graph", "creates a graph"),
    ("drop_graph", "drops a graph"),
    ("create_vlabel", "creates a label"),
    ("create_elabel", "creates a label"),
    ("drop_label", "drops a label"),
    ("load_labels_from_file", "writes a graph"),
    ("load_edges_from_file", "writes a graph"),
];

#[rustfmt::skip]
const SIDE_EFFECT_PREFIXES: &[(&str, &str)] = &[
    ("pg_advisory_", "takes or releases an advisory lock"),
    ("pg_try_advisory_", "takes an advisory lock"),
    ("dblink_", "runs SQL on another connection"),
    ("lo_", "uses large objects"),
    ("pg_stat_reset", "resets statistics"),
    ("pg_replication_origin_", "changes replication origin state"),
    ("pg_logical_slot_", "consumes from a replication slot"),
    ("pg_replication_slot_", "changes a replication slot"),
];

// FxHash: these are looked up for every call a pooled statement makes.
static PG_SET: LazyLock<FxHashSet<&'static str>> =
    LazyLock::new(|| PG_READ_ONLY.iter().copied().collect());
static AGE_SET: LazyLock<FxHashSet<&'static str>> =
    LazyLock::new(|| AGE_READ_ONLY.iter().copied().collect());

/// An `ag_catalog` function of `AGE_READ_ONLY`.
pub(crate) fn age_read_only(name: &str) -> bool {
    AGE_SET.contains(name)
}

/// The caller's extra read-only functions (`[coalesce] read_only_functions`).
#[derive(Clone, Debug, Default)]
pub(crate) struct ExtraFunctions {
    /// `my_fn`: matches `my_fn(...)` in any schema.
    any_schema: HashSet<String>,
    /// `s.my_fn`: matches only `s.my_fn(...)`.
    qualified: HashSet<String>,
}

impl ExtraFunctions {
    pub fn new<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut out = ExtraFunctions::default();
        for name in names {
            let parts = split_config_name(name.as_ref());
            match parts.as_slice() {
                [] => {}
                [one] => {
                    out.any_schema.insert(one.clone());
                }
                _ => {
                    out.qualified.insert(parts.join("."));
                }
            }
        }
        out
    }

    fn contains(&self, parts: &[String]) -> bool {
        parts.last().is_some_and(|n| self.any_schema.contains(n))
            || (parts.len() > 1 && self.qualified.contains(&parts.join(".")))
    }
}

/// Splits a configured name like `public."MyFn"` into normalised parts (unquoted parts fold
/// to lower case, as PostgreSQL folds identifiers).
fn split_config_name(name: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = name.trim().chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                cur.push('"');
            }
            '"' => quoted = !quoted,
            '.' if !quoted => parts.push(std::mem::take(&mut cur)),
            c if quoted => cur.push(c),
            c => cur.extend(c.to_lowercase()),
        }
    }
    parts.push(cur);
    parts.retain(|p| !p.trim().is_empty());
    parts
}

/// Judges a call to the function named by `parts` (normalised: unquoted parts lower-cased).
pub(crate) fn judge(parts: &[String], extra: &ExtraFunctions) -> FunctionVerdict {
    let Some(name) = parts.last().map(String::as_str) else {
        return FunctionVerdict::Unknown;
    };
    // Known side effects win even over the caller's list: listing one there is a mistake.
    if let Some((_, why)) = SIDE_EFFECTS.iter().find(|(n, _)| *n == name) {
        return FunctionVerdict::SideEffect(why);
    }
    if let Some((_, why)) = SIDE_EFFECT_PREFIXES
        .iter()
        .find(|(p, _)| name.starts_with(p))
    {
        return FunctionVerdict::SideEffect(why);
    }
    if extra.contains(parts) {
        return FunctionVerdict::ReadOnly;
    }
    // Built-ins only unqualified or in their own schema: `myschema.lower()` is someone else's.
    let schema = match parts {
        [_] => None,
        [s, _] => Some(s.as_str()),
        _ => return FunctionVerdict::Unknown,
    };
    let read_only = match schema {
        None => PG_SET.contains(name) || AGE_SET.contains(name),
        Some("pg_catalog") => PG_SET.contains(name),
        Some("ag_catalog") => AGE_SET.contains(name),
        Some(_) => false,
    };
    if read_only {
        FunctionVerdict::ReadOnly
    } else {
        FunctionVerdict::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Vec<String> {
        split_config_name(s)
    }

    #[test]
    fn config_names() {
        assert_eq!(p("My_Fn"), ["my_fn"]);
        assert_eq!(p("public.\"MyFn\""), ["public", "MyFn"]);
        assert_eq!(p("\"a.b\""), ["a.b"]);
        assert_eq!(p(" "), Vec::<String>::new());
    }

    #[test]
    fn judging() {
        let extra = ExtraFunctions::new(["my_fn", "s.only_here", "nextval"]);
        assert_eq!(judge(&p("lower"), &extra), FunctionVerdict::ReadOnly);
        assert_eq!(
            judge(&p("pg_catalog.lower"), &extra),
            FunctionVerdict::ReadOnly
        );
        assert_eq!(judge(&p("public.lower"), &extra), FunctionVerdict::Unknown);
        assert_eq!(judge(&p("my_fn"), &extra), FunctionVerdict::ReadOnly);
        assert_eq!(judge(&p("x.my_fn"), &extra), FunctionVerdict::ReadOnly);
        assert_eq!(judge(&p("s.only_here"), &extra), FunctionVerdict::ReadOnly);
        assert_eq!(judge(&p("only_here"), &extra), FunctionVerdict::Unknown);
        assert!(matches!(
            judge(&p("nextval"), &extra),
            FunctionVerdict::SideEffect(_)
        ));
        assert!(matches!(
            judge(&p("pg_advisory_xact_lock"), &extra),
            FunctionVerdict::SideEffect(_)
        ));
        assert_eq!(
            judge(&p("ag_catalog._label_name"), &extra),
            FunctionVerdict::ReadOnly
        );
    }
}
