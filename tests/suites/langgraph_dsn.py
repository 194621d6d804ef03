"""pytest plugin: point langgraph-checkpoint-postgres's tests at another server.

Its tests/conftest.py hard-codes a server on localhost:5441 (a docker compose
service) in DEFAULT_POSTGRES_URI and DEFAULT_URI, which the test modules
import by name. This plugin is loaded with `-p langgraph_dsn` before any
conftest, imports that conftest module itself and replaces the two constants
with LANGGRAPH_TEST_HOSTPORT ("host:port") and LANGGRAPH_TEST_DBNAME (the
database DEFAULT_URI names, "postgres" unless set; the suite empties its
tables before each test, so runs at once need one each), so every test
module picks up the new values. Nothing the tests assert is touched.
"""

import os
import sys

_hostport = os.environ.get("LANGGRAPH_TEST_HOSTPORT")
if _hostport:
    sys.path.insert(0, os.getcwd())
    import tests.conftest as _conftest  # noqa: E402  (the suite's own conftest)

    _conftest.DEFAULT_POSTGRES_URI = f"postgres://postgres:postgres@{_hostport}/"
    _conftest.DEFAULT_URI = (
        f"postgres://postgres:postgres@{_hostport}/"
        f"{os.environ.get('LANGGRAPH_TEST_DBNAME', 'postgres')}?sslmode=disable"
    )
