#!/usr/bin/env python3
"""Writes the seed corpora of the protocol targets (corpus/session,
corpus/backend, corpus/startup, corpus/analyze): conversations a client and
a server really have, in the input formats of proxy/src/protocol/fuzzing.rs
and planner/src/analysis/mod.rs (fuzzing)."""
import hashlib, os, shutil, struct

here = os.path.dirname(os.path.abspath(__file__))

def reset(target):
    shutil.rmtree(os.path.join(here, 'corpus', target), ignore_errors=True)
    os.makedirs(os.path.join(here, 'corpus', target))

def put(target, blob):
    name = hashlib.sha1(blob).hexdigest()[:16]
    with open(os.path.join(here, 'corpus', target, name), 'wb') as f:
        f.write(blob)

def msg(tag, body=b''):
    return tag + struct.pack('!I', len(body) + 4) + body

def cs(s):
    return s.encode() + b'\0'

Q = lambda sql: msg(b'Q', cs(sql))
P = lambda sql, name='': msg(b'P', cs(name) + cs(sql) + b'\0\0')
B = lambda: msg(b'B', b'\0\0' + b'\0\0\0\0\0\0')
E = lambda: msg(b'E', b'\0\0\0\0\0')
D = lambda: msg(b'D', b'P\0')
S, H = msg(b'S'), msg(b'H')
# Server side.
T = msg(b'T', b'\0\1' + cs('a') + b'\0\0\0\0\0\0\0\0\0\x17\0\4\xff\xff\xff\xff\0\0')
ROW = msg(b'D', b'\0\1\0\0\0\1' + b'1')
C = lambda tag: msg(b'C', cs(tag))
Z = lambda s: msg(b'Z', s.encode())
ERR = msg(b'E', b'SERROR\0C22012\0Mdivision by zero\0\0')
ONE, TWO, NODATA = msg(b'1'), msg(b'2'), msg(b'n')

CONVERSATIONS = [
    [('c', Q('select 1')), ('s', T + ROW + C('SELECT 1') + Z('I'))],
    [('c', Q('begin')), ('s', C('BEGIN') + Z('T')), ('c', Q('select 1')),
     ('s', T + ROW + C('SELECT 1') + Z('T')), ('c', Q('commit')), ('s', C('COMMIT') + Z('I'))],
    [('c', Q('begin')), ('c', Q('commit'))],
    [('c', P('select 1') + B() + D() + E() + H), ('s', ONE + TWO + T + ROW + C('SELECT 1')),
     ('c', S), ('s', Z('I'))],
    [('c', P('select 1/0') + B() + E() + S + P('select 1') + B() + D() + E() + H),
     ('s', ONE + ERR + Z('I') + ONE + TWO + T + ROW + C('SELECT 1')), ('c', S), ('s', Z('I'))],
    [('c', Q('begin') + Q('update t set v = 1') + Q('commit')),
     ('s', C('BEGIN') + Z('T') + C('UPDATE 1') + Z('T') + C('COMMIT') + Z('I'))],
    [('c', P('begin') + B() + E() + S), ('c', P('select 1') + B() + D() + E() + S),
     ('s', ONE + TWO + C('BEGIN') + Z('T') + ONE + TWO + T + ROW + C('SELECT 1') + Z('T'))],
    [('c', Q("select * from cypher('g', $$ MATCH (n) RETURN n $$) as (n agtype)")),
     ('s', ERR + Z('I'))],
    [('c', Q('copy t from stdin')), ('s', msg(b'G', b'\0\0\0')),
     ('c', msg(b'd', b'1\t2\n') + msg(b'c')), ('s', C('COPY 1') + Z('I'))],
]

def session_blob(flags, conv):
    out = bytes([flags])
    for side, data in conv:
        high = 0x80 if side == 's' else 0
        for i in range(0, len(data), 126):
            piece = data[i:i + 126]
            out += bytes([high | len(piece)]) + piece
    return out

def backend_blob(flags, conv):
    # Client messages from the menu (0x80 | k), the server's bytes as given.
    out = bytes([flags])
    for side, data in conv:
        if side == 'c':
            out += bytes([0x80 | (len(out) % 12)])
        else:
            for i in range(0, len(data), 127):
                piece = data[i:i + 127]
                out += bytes([len(piece)]) + piece
    return out

for t in ('session', 'backend', 'startup', 'analyze'):
    reset(t)
for flags in (0x00, 0x05, 0x07, 0x1f, 0x5d):
    for conv in CONVERSATIONS:
        put('session', session_blob(flags, conv))
        put('backend', backend_blob(flags, conv))
startup = struct.pack('!I', 196608) + cs('user') + cs('postgres') + cs('database') + cs('db') + b'\0'
put('startup', struct.pack('!I', len(startup) + 4) + startup)
put('startup', struct.pack('!II', 8, 80877103))
put('startup', struct.pack('!II', 8, 80877104))
put('startup', struct.pack('!IIII', 16, 80877102, 1234, 5678))
for sql in ['select 1', 'SELECT * FROM t WHERE id = $1 FOR UPDATE', 'begin isolation level serializable',
            "explain (analyse) delete from t", "with d as (delete from t returning *) select * from d",
            "select * from cypher('g', $$ MATCH (a)-[r:KNOWS*1..3]->(b) RETURN a, b $$) as (a agtype, b agtype)",
            "set search_path = ag_catalog, \"$user\", public", "select now(), lower('X'), my_fn(1)",
            "prepare p(int) as select $1; execute p(1); deallocate p", "copy t to stdout",
            "select 'it''s', $$dollar$$, $tag$x$tag$, e'\\n' -- comment\n/* block */"]:
    put('analyze', sql.encode())
for t in ('session', 'backend', 'startup', 'analyze'):
    print(t, len(os.listdir(os.path.join(here, 'corpus', t))))
