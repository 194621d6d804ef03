#!/usr/bin/env python3
"""Rebuilds the seed corpora in corpus/<target>/ from the AGE vectors
(../agtype/tests/data relative to this directory): every hand-written
vector's text and bytes, plus a few of the random ones, each at most 1 KiB."""
import hashlib, json, os, shutil, sys

here = os.path.dirname(os.path.abspath(__file__))
data = os.path.join(here, '..', 'agtype', 'tests', 'data')
if not os.path.isdir(data):
    sys.exit(f'no vectors at {data}')
targets = ('agtype_text', 'agtype_binary', 'agtype_view')
for t in targets:
    shutil.rmtree(os.path.join(here, 'corpus', t), ignore_errors=True)
    os.makedirs(os.path.join(here, 'corpus', t))

def put(target, blob):
    name = hashlib.sha1(blob).hexdigest()[:16]
    with open(os.path.join(here, 'corpus', target, name), 'wb') as f:
        f.write(blob)

random_kept = 0
for fn in ('vectors.jsonl', 'quirk_unreadable.jsonl'):
    for line in open(os.path.join(data, fn)):
        v = json.loads(line)
        if v['kind'] == 'random':
            random_kept += 1
            if random_kept > 25:
                continue
        text = v['text_in'].encode()
        if len(text) <= 1024:
            put('agtype_text', text)
        if 'bin_hex' in v:
            blob = bytes.fromhex(v['bin_hex'])
            if len(blob) <= 1024:
                put('agtype_binary', blob)
                put('agtype_view', blob)
for t in targets:
    print(t, len(os.listdir(os.path.join(here, 'corpus', t))))
