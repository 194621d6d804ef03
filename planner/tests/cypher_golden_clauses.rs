//! Golden SQL of the clauses and expressions beyond MATCH ... RETURN:
//! WITH, UNWIND, OPTIONAL MATCH, UNION, named paths, `exists()`, list
//! comprehensions, slices, chained comparisons, AGE's functions,
//! variable-length relationships.

mod common;

use common::{catalog, check_golden};
use onetrip_planner::cypher::compile_cypher;
/// WITH
const WITH: &[(&str, &str)] = &[
    (
        "MATCH (a:Person) WITH a.name AS n, a WHERE n = 'Ann' RETURN n, a.age",
        "SELECT NULLIF(_n0.properties -> 'name'::text, 'null'::agtype) AS c1, NULLIF(_n0.properties -> 'age'::text, 'null'::agtype) AS c2 FROM \"g\".\"Person\" AS _n0 WHERE (NULLIF(_n0.properties -> 'name'::text, 'null'::agtype) = '\"Ann\"'::agtype)",
    ),
    (
        "MATCH (a:Person)-[:KNOWS]->(b) WITH a, count(b) AS n WHERE n > 2 RETURN a.name, n",
        "SELECT NULLIF(_w2.c2 -> 'name'::text, 'null'::agtype) AS c1, _w2.c3 AS c2 FROM (SELECT _n0.id AS c1, _n0.properties AS c2, count(_n1.id)::agtype AS c3 FROM \"g\".\"Person\" AS _n0, \"g\".\"_ag_label_vertex\" AS _n1, \"g\".\"KNOWS\" AS _e0 WHERE _e0.start_id = _n0.id AND _e0.end_id = _n1.id GROUP BY _n0.id, _n0.properties) AS _w2 WHERE (_w2.c3 > '2'::agtype)",
    ),
    (
        "MATCH (a:Person) WITH DISTINCT a.city AS c ORDER BY a.city SKIP 1 LIMIT 2 RETURN c",
        "SELECT _w1.c1 AS c1 FROM (SELECT DISTINCT NULLIF(_n0.properties -> 'city'::text, 'null'::agtype) AS c1 FROM \"g\".\"Person\" AS _n0 ORDER BY NULLIF(_n0.properties -> 'city'::text, 'null'::agtype) OFFSET 1 LIMIT 2) AS _w1",
    ),
];

#[test]
fn golden_with() {
    check_golden(WITH);
}

/// UNWIND
const UNWIND: &[(&str, &str)] = &[
    (
        "MATCH (n:Person) UNWIND [1, null] AS x RETURN x",
        "SELECT _u1.v AS c1 FROM \"g\".\"Person\" AS _n0, LATERAL ag_catalog.age_unnest(ag_catalog.agtype_build_list('1'::agtype, NULL::agtype)) AS _u1(v)",
    ),
    (
        "MATCH (a:Person) UNWIND a.tags AS t RETURN t, count(*)",
        "SELECT _u1.v AS c1, count(*)::agtype AS c2 FROM \"g\".\"Person\" AS _n0, LATERAL ag_catalog.age_unnest(NULLIF(_n0.properties -> 'tags'::text, 'null'::agtype)) AS _u1(v) GROUP BY _u1.v",
    ),
];

#[test]
fn golden_unwind() {
    check_golden(UNWIND);
}

/// OPTIONAL MATCH
const OPTIONAL_MATCH: &[(&str, &str)] = &[
    (
        "MATCH (a:Person) OPTIONAL MATCH (a)-[r:KNOWS]->(b) WHERE b.age > 3 RETURN a.name, b, r.since",
        "SELECT NULLIF(_n0.properties -> 'name'::text, 'null'::agtype) AS c1, CASE WHEN _o1.c1 IS NULL THEN NULL ELSE ag_catalog._agtype_build_vertex(_o1.c1, ag_catalog._label_name('42'::oid, _o1.c1), _o1.c2) END AS c2, NULLIF(_o1.c4 -> 'since'::text, 'null'::agtype) AS c3 FROM \"g\".\"Person\" AS _n0 LEFT JOIN LATERAL (SELECT _n1.id AS c1, _n1.properties AS c2, _e0.id AS c3, _e0.properties AS c4, _e0.start_id AS c5, _e0.end_id AS c6 FROM \"g\".\"_ag_label_vertex\" AS _n1, \"g\".\"KNOWS\" AS _e0 WHERE _e0.start_id = _n0.id AND _e0.end_id = _n1.id AND ((_n1.properties -> 'age'::text) > '3'::agtype AND (_n1.properties -> 'age'::text) <> 'null'::agtype)) AS _o1 ON true",
    ),
    (
        "OPTIONAL MATCH (a:Person) RETURN a.name",
        "SELECT NULLIF(_n0.properties -> 'name'::text, 'null'::agtype) AS c1 FROM \"g\".\"Person\" AS _n0",
    ),
];

#[test]
fn golden_optional_match() {
    check_golden(OPTIONAL_MATCH);
}

/// UNION
const UNION: &[(&str, &str)] = &[(
    "MATCH (n:Person) RETURN 1 UNION RETURN 2 UNION ALL MATCH (c:City) RETURN 3",
    "(SELECT DISTINCT ON (c1) c1 FROM ((SELECT '1'::agtype AS c1 FROM \"g\".\"Person\" AS _n0) UNION ALL (SELECT '2'::agtype AS c1)) AS _union1 ORDER BY c1) UNION ALL (SELECT '3'::agtype AS c1 FROM \"g\".\"City\" AS _n0)",
)];

#[test]
fn golden_union() {
    check_golden(UNION);
}

/// named paths
const NAMED_PATHS: &[(&str, &str)] = &[(
    "MATCH p = (a:Person)-[:KNOWS]->(b) RETURN p, length(p)",
    "SELECT ag_catalog._agtype_build_path(ag_catalog._agtype_build_vertex(_n0.id, ag_catalog._label_name('42'::oid, _n0.id), _n0.properties), ag_catalog._agtype_build_edge(_e0.id, _e0.start_id, _e0.end_id, ag_catalog._label_name('42'::oid, _e0.id), _e0.properties), ag_catalog._agtype_build_vertex(_n1.id, ag_catalog._label_name('42'::oid, _n1.id), _n1.properties)) AS c1, ag_catalog.age_length(ag_catalog._agtype_build_path(ag_catalog._agtype_build_vertex(_n0.id, ag_catalog._label_name('42'::oid, _n0.id), _n0.properties), ag_catalog._agtype_build_edge(_e0.id, _e0.start_id, _e0.end_id, ag_catalog._label_name('42'::oid, _e0.id), _e0.properties), ag_catalog._agtype_build_vertex(_n1.id, ag_catalog._label_name('42'::oid, _n1.id), _n1.properties))) AS c2 FROM \"g\".\"Person\" AS _n0, \"g\".\"_ag_label_vertex\" AS _n1, \"g\".\"KNOWS\" AS _e0 WHERE _e0.start_id = _n0.id AND _e0.end_id = _n1.id",
)];

#[test]
fn golden_named_paths() {
    check_golden(NAMED_PATHS);
}

/// exists
const EXISTS: &[(&str, &str)] = &[(
    "MATCH (a:Person) WHERE exists((a)-[:KNOWS]->(:Person)) AND exists(a.name) RETURN a.name",
    "SELECT NULLIF(_n0.properties -> 'name'::text, 'null'::agtype) AS c1 FROM \"g\".\"Person\" AS _n0 WHERE (EXISTS (SELECT 1 FROM \"g\".\"Person\" AS _n1, \"g\".\"KNOWS\" AS _e0 WHERE _e0.start_id = _n0.id AND _e0.end_id = _n1.id OFFSET 0) AND ag_catalog.age_exists(NULLIF(_n0.properties -> 'name'::text, 'null'::agtype)))",
)];

#[test]
fn golden_exists() {
    check_golden(EXISTS);
}

/// list comprehension, slices
const LIST_COMPREHENSION_SLICES: &[(&str, &str)] = &[(
    "MATCH (a:Person) RETURN [x IN a.tags WHERE x <> 'a' | toUpper(x)], a.tags[1..-1], a.tags[..2]",
    "SELECT (ARRAY(SELECT ag_catalog.age_toupper(_l1.v) FROM ag_catalog.age_unnest(NULLIF(_n0.properties -> 'tags'::text, 'null'::agtype)) AS _l1(v) WHERE (_l1.v <> '\"a\"'::agtype)))::agtype AS c1, ag_catalog.agtype_access_slice(NULLIF(_n0.properties -> 'tags'::text, 'null'::agtype), '1'::agtype, '-1'::agtype) AS c2, ag_catalog.agtype_access_slice(NULLIF(_n0.properties -> 'tags'::text, 'null'::agtype), NULL::agtype, '2'::agtype) AS c3 FROM \"g\".\"Person\" AS _n0",
)];

#[test]
fn golden_list_comprehension_slices() {
    check_golden(LIST_COMPREHENSION_SLICES);
}

/// chained comparison
const CHAINED_COMPARISON: &[(&str, &str)] = &[(
    "MATCH (a:Person) WHERE 1 < a.age <= 9 RETURN a.age",
    "SELECT NULLIF(_n0.properties -> 'age'::text, 'null'::agtype) AS c1 FROM \"g\".\"Person\" AS _n0 WHERE (('1'::agtype < (_n0.properties -> 'age'::text) AND (_n0.properties -> 'age'::text) <> 'null'::agtype) AND ((_n0.properties -> 'age'::text) <= '9'::agtype))",
)];

#[test]
fn golden_chained_comparison() {
    check_golden(CHAINED_COMPARISON);
}

/// functions and aggregates
const FUNCTIONS_AND_AGGREGATES: &[(&str, &str)] = &[
    (
        "MATCH (n:Person) RETURN n.name, properties(n)",
        "SELECT NULLIF(_n0.properties -> 'name'::text, 'null'::agtype) AS c1, _n0.properties AS c2 FROM \"g\".\"Person\" AS _n0",
    ),
    (
        "MATCH (a:Person)-[r:KNOWS]->(b) RETURN startNode(r), type(r), keys(a), isEmpty(a.tags), stDev(a.age)",
        "SELECT ag_catalog.age_startnode('\"g\"'::agtype, ag_catalog._agtype_build_edge(_e0.id, _e0.start_id, _e0.end_id, ag_catalog._label_name('42'::oid, _e0.id), _e0.properties)) AS c1, ag_catalog.age_type(ag_catalog._agtype_build_edge(_e0.id, _e0.start_id, _e0.end_id, ag_catalog._label_name('42'::oid, _e0.id), _e0.properties)) AS c2, ag_catalog.age_keys(ag_catalog._agtype_build_vertex(_n0.id, ag_catalog._label_name('42'::oid, _n0.id), _n0.properties)) AS c3, (ag_catalog.age_isempty(NULLIF(_n0.properties -> 'tags'::text, 'null'::agtype)))::agtype AS c4, ag_catalog.age_stdev(NULLIF(_n0.properties -> 'age'::text, 'null'::agtype)) AS c5 FROM \"g\".\"Person\" AS _n0, \"g\".\"KNOWS\" AS _e0 WHERE _e0.start_id = _n0.id GROUP BY ag_catalog.age_startnode('\"g\"'::agtype, ag_catalog._agtype_build_edge(_e0.id, _e0.start_id, _e0.end_id, ag_catalog._label_name('42'::oid, _e0.id), _e0.properties)), ag_catalog.age_type(ag_catalog._agtype_build_edge(_e0.id, _e0.start_id, _e0.end_id, ag_catalog._label_name('42'::oid, _e0.id), _e0.properties)), ag_catalog.age_keys(ag_catalog._agtype_build_vertex(_n0.id, ag_catalog._label_name('42'::oid, _n0.id), _n0.properties)), (ag_catalog.age_isempty(NULLIF(_n0.properties -> 'tags'::text, 'null'::agtype)))::agtype",
    ),
    (
        "MATCH (a:Person) RETURN count(*) + 1, percentileCont(a.age, 0.5)",
        "SELECT (count(*)::agtype + '1'::agtype) AS c1, ag_catalog.age_percentilecont(NULLIF(_n0.properties -> 'age'::text, 'null'::agtype), '0.5'::agtype) AS c2 FROM \"g\".\"Person\" AS _n0",
    ),
];

#[test]
fn golden_functions_and_aggregates() {
    check_golden(FUNCTIONS_AND_AGGREGATES);
}

/// Parameters
const PARAMETERS: &[(&str, &str)] = &[(
    "MATCH (a:Person $p) RETURN a.name SKIP 1 + 1 LIMIT $n",
    "SELECT NULLIF(_n0.properties -> 'name'::text, 'null'::agtype) AS c1 FROM \"g\".\"Person\" AS _n0 WHERE _n0.properties @> ag_catalog.agtype_access_operator(VARIADIC ARRAY[($1)::agtype, '\"p\"'::agtype]) OFFSET (('1'::agtype + '1'::agtype))::bigint LIMIT (ag_catalog.agtype_access_operator(VARIADIC ARRAY[($1)::agtype, '\"n\"'::agtype]))::bigint",
)];

#[test]
fn golden_parameters() {
    check_golden(PARAMETERS);
}

/// A parameter argument the Cypher text never reads still gets its type.
#[test]
fn golden_unused_parameter_argument() {
    let g = catalog().graph("g").expect("graph");
    assert_eq!(
        compile_cypher("MATCH (n:City) RETURN 1", &g, false, Some("$1"), 1).as_deref(),
        Ok(
            "WITH _params AS (SELECT ($1)::agtype) SELECT '1'::agtype AS c1 FROM \"g\".\"City\" AS _n0"
        )
    );
}

/// Variable-length relationships
const VARIABLE_LENGTH: &[(&str, &str)] = &[
    // Pinned by the WHERE's equality: per row of that one vertex.
    (
        "MATCH (a:Person)-[:KNOWS*1..2]->(b) WHERE a.id = 1 RETURN b.name",
        "SELECT NULLIF((CASE WHEN _n1.id IS NULL THEN NULL ELSE _n1.properties END) -> 'name'::text, 'null'::agtype) AS c1 FROM \"g\".\"Person\" AS _n0, \"g\".\"_ag_label_vertex\" AS _n1, LATERAL (SELECT _v1_1_1.end_id AS vid, ARRAY[_v1_1_1.id]::ag_catalog.graphid[] AS ids FROM \"g\".\"KNOWS\" AS _v1_1_1 WHERE _v1_1_1.start_id = _n0.id UNION ALL SELECT _v1_2_2.end_id AS vid, ARRAY[_v1_2_1.id, _v1_2_2.id]::ag_catalog.graphid[] AS ids FROM \"g\".\"KNOWS\" AS _v1_2_1, \"g\".\"KNOWS\" AS _v1_2_2 WHERE _v1_2_1.start_id = _n0.id AND _v1_2_2.start_id = _v1_2_1.end_id AND _v1_2_2.id <> _v1_2_1.id) AS _v1 WHERE _v1.vid = _n1.id AND ((_n0.properties -> 'id'::text) = '1'::agtype)",
    ),
    (
        "MATCH (a:Person)-[r:KNOWS*1..2]->(b:Person) RETURN r, b.name",
        "SELECT (_v1.es)::agtype AS c1, NULLIF(_n1.properties -> 'name'::text, 'null'::agtype) AS c2 FROM \"g\".\"Person\" AS _n0, \"g\".\"Person\" AS _n1, (SELECT _v1_1_1.start_id AS src, _v1_1_1.end_id AS vid, ARRAY[_v1_1_1.id]::ag_catalog.graphid[] AS ids, ARRAY[ag_catalog._agtype_build_edge(_v1_1_1.id, _v1_1_1.start_id, _v1_1_1.end_id, ag_catalog._label_name('42'::oid, _v1_1_1.id), _v1_1_1.properties)]::ag_catalog.agtype[] AS es FROM \"g\".\"KNOWS\" AS _v1_1_1 UNION ALL SELECT _v1_2_1.start_id AS src, _v1_2_2.end_id AS vid, ARRAY[_v1_2_1.id, _v1_2_2.id]::ag_catalog.graphid[] AS ids, ARRAY[ag_catalog._agtype_build_edge(_v1_2_1.id, _v1_2_1.start_id, _v1_2_1.end_id, ag_catalog._label_name('42'::oid, _v1_2_1.id), _v1_2_1.properties), ag_catalog._agtype_build_edge(_v1_2_2.id, _v1_2_2.start_id, _v1_2_2.end_id, ag_catalog._label_name('42'::oid, _v1_2_2.id), _v1_2_2.properties)]::ag_catalog.agtype[] AS es FROM \"g\".\"KNOWS\" AS _v1_2_1, \"g\".\"KNOWS\" AS _v1_2_2 WHERE _v1_2_2.start_id = _v1_2_1.end_id AND _v1_2_2.id <> _v1_2_1.id) AS _v1 WHERE _v1.src = _n0.id AND _v1.vid = _n1.id",
    ),
    (
        "MATCH (a:Person)-[:KNOWS]-(x)-[*0..2 {w: 1}]-(b) RETURN b.name",
        "SELECT NULLIF((CASE WHEN _n2.id IS NULL THEN NULL ELSE _n2.properties END) -> 'name'::text, 'null'::agtype) AS c1 FROM \"g\".\"Person\" AS _n0, (SELECT id, start_id, end_id, properties, start_id AS _s, end_id AS _o, false AS _r FROM \"g\".\"KNOWS\" UNION ALL SELECT id, start_id, end_id, properties, end_id, start_id, true FROM \"g\".\"KNOWS\") AS _e0, \"g\".\"_ag_label_vertex\" AS _n2, (SELECT _v2_0.id AS src, _v2_0.id AS vid, ARRAY[]::ag_catalog.graphid[] AS ids FROM \"g\".\"_ag_label_vertex\" AS _v2_0 UNION ALL SELECT _v2_1_1._s AS src, _v2_1_1._o AS vid, ARRAY[_v2_1_1.id]::ag_catalog.graphid[] AS ids FROM (SELECT id, start_id, end_id, properties, start_id AS _s, end_id AS _o, false AS _rev FROM \"g\".\"_ag_label_edge\" UNION ALL SELECT id, start_id, end_id, properties, end_id, start_id, true FROM \"g\".\"_ag_label_edge\") AS _v2_1_1 WHERE NOT (_v2_1_1._rev AND _v2_1_1.start_id = _v2_1_1.end_id) AND _v2_1_1.properties @> ag_catalog.agtype_build_map_nonull('w'::text, '1'::agtype) UNION ALL SELECT _v2_2_1._s AS src, _v2_2_2._o AS vid, ARRAY[_v2_2_1.id, _v2_2_2.id]::ag_catalog.graphid[] AS ids FROM (SELECT id, start_id, end_id, properties, start_id AS _s, end_id AS _o, false AS _rev FROM \"g\".\"_ag_label_edge\" UNION ALL SELECT id, start_id, end_id, properties, end_id, start_id, true FROM \"g\".\"_ag_label_edge\") AS _v2_2_1, (SELECT id, start_id, end_id, properties, start_id AS _s, end_id AS _o, false AS _rev FROM \"g\".\"_ag_label_edge\" UNION ALL SELECT id, start_id, end_id, properties, end_id, start_id, true FROM \"g\".\"_ag_label_edge\") AS _v2_2_2 WHERE NOT (_v2_2_1._rev AND _v2_2_1.start_id = _v2_2_1.end_id) AND _v2_2_1.properties @> ag_catalog.agtype_build_map_nonull('w'::text, '1'::agtype) AND _v2_2_2._s = _v2_2_1._o AND NOT (_v2_2_2._rev AND _v2_2_2.start_id = _v2_2_2.end_id) AND _v2_2_2.properties @> ag_catalog.agtype_build_map_nonull('w'::text, '1'::agtype) AND _v2_2_2.id <> _v2_2_1.id) AS _v2 WHERE NOT (_e0._r AND _e0.start_id = _e0.end_id) AND _e0._s = _n0.id AND _v2.src = _e0._o AND _v2.vid = _n2.id AND _e0.id <> ALL(_v2.ids)",
    ),
    (
        "MATCH (a:Person)<-[r:KNOWS*5]-(b) RETURN r",
        "SELECT (_v1.es)::agtype AS c1 FROM \"g\".\"Person\" AS _n0, LATERAL (WITH RECURSIVE _r AS (SELECT _n0.id AS vid, ARRAY[]::ag_catalog.graphid[] AS ids, ARRAY[]::ag_catalog.agtype[] AS es UNION ALL SELECT e.start_id, _r.ids || e.id, _r.es || ag_catalog._agtype_build_edge(e.id, e.start_id, e.end_id, ag_catalog._label_name('42'::oid, e.id), e.properties) FROM _r, \"g\".\"KNOWS\" AS e WHERE e.end_id = _r.vid AND cardinality(_r.ids) < 5 AND e.id <> ALL(_r.ids)) SELECT vid, ids, es FROM _r WHERE cardinality(ids) >= 5) AS _v1",
    ),
];

#[test]
fn golden_variable_length() {
    check_golden(VARIABLE_LENGTH);
}

/// Map projections
const PROJECTIONS: &[(&str, &str)] = &[(
    "MATCH (a:Person)-[r:KNOWS]->(b) RETURN a{.name, .*}, r{.since, x: 1}",
    "SELECT (_n0.properties + ag_catalog.agtype_build_map_nonull('name'::text, ag_catalog.agtype_access_operator(VARIADIC ARRAY[_n0.properties, '\"name\"'::agtype]))) AS c1, ag_catalog.agtype_build_map_nonull('since'::text, ag_catalog.agtype_access_operator(VARIADIC ARRAY[_e0.properties, '\"since\"'::agtype]), 'x'::text, '1'::agtype) AS c2 FROM \"g\".\"Person\" AS _n0, \"g\".\"KNOWS\" AS _e0 WHERE _e0.start_id = _n0.id",
)];

#[test]
fn golden_projections() {
    check_golden(PROJECTIONS);
}

/// `RETURN *`: every variable, in the order they were bound.
#[test]
fn golden_return_star() {
    let g = catalog().graph("g").expect("graph");
    assert_eq!(
        compile_cypher(
            "MATCH (a:Person)-[r:KNOWS]->(b) WITH a, 1 AS one RETURN *",
            &g,
            false,
            None,
            2
        )
        .as_deref(),
        Ok(
            "SELECT ag_catalog._agtype_build_vertex(_n0.id, ag_catalog._label_name('42'::oid, _n0.id), _n0.properties) AS c1, '1'::agtype AS c2 FROM \"g\".\"Person\" AS _n0, \"g\".\"_ag_label_vertex\" AS _n1, \"g\".\"KNOWS\" AS _e0 WHERE _e0.start_id = _n0.id AND _e0.end_id = _n1.id"
        )
    );
}

/// CASE with boolean results
const CASE_BOOLEAN: &[(&str, &str)] = &[(
    "MATCH (n:Person) RETURN CASE WHEN n.age > 1 THEN n.ok = true END, CASE WHEN n.age > 1 THEN n.ok = true ELSE n.name END",
    "SELECT ((CASE WHEN (NULLIF(_n0.properties -> 'age'::text, 'null'::agtype) > '1'::agtype) THEN (NULLIF(_n0.properties -> 'ok'::text, 'null'::agtype) = 'true'::agtype) END))::agtype AS c1, (CASE WHEN (NULLIF(_n0.properties -> 'age'::text, 'null'::agtype) > '1'::agtype) THEN ((NULLIF(_n0.properties -> 'ok'::text, 'null'::agtype) = 'true'::agtype))::agtype ELSE NULLIF(_n0.properties -> 'name'::text, 'null'::agtype) END) AS c2 FROM \"g\".\"Person\" AS _n0",
)];

#[test]
fn golden_case_boolean() {
    check_golden(CASE_BOOLEAN);
}

/// A vertex of any label read in a projection names its id first, so that
/// each child table of `_ag_label_vertex` is scanned as stored.
const ANY_LABEL_PROJECTION: &[(&str, &str)] = &[
    (
        "MATCH (a:Person)-[:KNOWS]->(b) RETURN b.name, count(*)",
        "SELECT NULLIF((CASE WHEN _n1.id IS NULL THEN NULL ELSE _n1.properties END) -> 'name'::text, 'null'::agtype) AS c1, count(*)::agtype AS c2 FROM \"g\".\"Person\" AS _n0, \"g\".\"_ag_label_vertex\" AS _n1, \"g\".\"KNOWS\" AS _e0 WHERE _e0.start_id = _n0.id AND _e0.end_id = _n1.id GROUP BY NULLIF((CASE WHEN _n1.id IS NULL THEN NULL ELSE _n1.properties END) -> 'name'::text, 'null'::agtype)",
    ),
    (
        "MATCH (a:Person)-[:KNOWS]->(b) RETURN DISTINCT b.name ORDER BY b.name",
        "SELECT DISTINCT NULLIF((CASE WHEN _n1.id IS NULL THEN NULL ELSE _n1.properties END) -> 'name'::text, 'null'::agtype) AS c1 FROM \"g\".\"Person\" AS _n0, \"g\".\"_ag_label_vertex\" AS _n1, \"g\".\"KNOWS\" AS _e0 WHERE _e0.start_id = _n0.id AND _e0.end_id = _n1.id ORDER BY NULLIF((CASE WHEN _n1.id IS NULL THEN NULL ELSE _n1.properties END) -> 'name'::text, 'null'::agtype)",
    ),
    (
        "MATCH (a:Person)-[:KNOWS]->(b) WITH b.name AS n ORDER BY b.name LIMIT 2 RETURN n",
        "SELECT _w2.c1 AS c1 FROM (SELECT NULLIF((CASE WHEN _n1.id IS NULL THEN NULL ELSE _n1.properties END) -> 'name'::text, 'null'::agtype) AS c1 FROM \"g\".\"Person\" AS _n0, \"g\".\"_ag_label_vertex\" AS _n1, \"g\".\"KNOWS\" AS _e0 WHERE _e0.start_id = _n0.id AND _e0.end_id = _n1.id ORDER BY NULLIF((CASE WHEN _n1.id IS NULL THEN NULL ELSE _n1.properties END) -> 'name'::text, 'null'::agtype) LIMIT 2) AS _w2",
    ),
    (
        "MATCH (a:Person)-[:KNOWS]->(b) WHERE b.age > 3 RETURN b.age, exists((b)-[:KNOWS]->({name: 'x'}))",
        "SELECT NULLIF((CASE WHEN _n1.id IS NULL THEN NULL ELSE _n1.properties END) -> 'age'::text, 'null'::agtype) AS c1, (EXISTS (SELECT 1 FROM \"g\".\"_ag_label_vertex\" AS _n2, \"g\".\"KNOWS\" AS _e1 WHERE _n2.properties @> ag_catalog.agtype_build_map('name'::text, '\"x\"'::agtype) AND _e1.start_id = _n1.id AND _e1.end_id = _n2.id OFFSET 0))::agtype AS c2 FROM \"g\".\"Person\" AS _n0, \"g\".\"_ag_label_vertex\" AS _n1, \"g\".\"KNOWS\" AS _e0 WHERE _e0.start_id = _n0.id AND _e0.end_id = _n1.id AND ((_n1.properties -> 'age'::text) > '3'::agtype AND (_n1.properties -> 'age'::text) <> 'null'::agtype)",
    ),
];

#[test]
fn golden_any_label_projection() {
    check_golden(ANY_LABEL_PROJECTION);
}
