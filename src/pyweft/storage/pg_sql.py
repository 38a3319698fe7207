"""The SQL the PostgreSQL adapter runs (storage/postgres.py): every statement and the
server-side functions it creates. ``{kv}``, ``{fn}`` and the other names in braces are
filled in with schema-qualified identifiers by the adapter."""

from __future__ import annotations

# durable_commit=True is a promise, kept even if the server default says otherwise.
# Generic plans: replanning on every call would double the cost of a write. Every
# statement is a key lookup or range, and a plan made while the table was small must
# not stay a sequential scan once it is large: hence no sequential scans at all.
SQL_CONFIGURE = (
    "SELECT set_config('synchronous_commit', 'on', false), "
    "set_config('plan_cache_mode', 'force_generic_plan', false), "
    "set_config('enable_seqscan', 'off', false)"
)
SQL_SETUP_LOCK = "SELECT pg_advisory_xact_lock(%s::int8)"
SQL_EXISTING = """
SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = %(schema)s),
       EXISTS (SELECT FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
               WHERE n.nspname = %(schema)s AND p.proname = %(fn)s),
       EXISTS (SELECT FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
               WHERE n.nspname = %(schema)s AND p.proname = %(group_fn)s),
       EXISTS (SELECT FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
               WHERE n.nspname = %(schema)s AND p.proname = %(try_fn)s),
       EXISTS (SELECT FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
               WHERE n.nspname = %(schema)s AND p.proname = %(disjoint_fn)s)
"""
SQL_COLUMNS = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), co.collname
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid AND c.relname = 'kv'
JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = %s
LEFT JOIN pg_collation co ON co.oid = a.attcollation
WHERE a.attnum > 0 AND NOT a.attisdropped
"""
SQL_CREATE_SCHEMA = "CREATE SCHEMA {schema}"
SQL_CREATE_TABLE = 'CREATE TABLE {kv} (key TEXT COLLATE "C" PRIMARY KEY, value BYTEA NOT NULL)'
# Functions get a new name for any change in behaviour. One batch:
WRITE_FUNCTION = "pyweft_write_v1"
SQL_CREATE_WRITE = """
CREATE FUNCTION {fn}(lock_ids int8[], ck text[], cv bytea[], dk text[], pk text[], pv bytea[])
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $body$
BEGIN
  PERFORM pg_advisory_xact_lock(id) FROM unnest(lock_ids) AS id;
  -- A fresh snapshot, taken now that every key is locked. NULL expected: absent.
  IF EXISTS (SELECT FROM unnest(ck, cv) AS c(key, value) LEFT JOIN {kv} AS kv USING (key)
             WHERE kv.value IS DISTINCT FROM c.value) THEN
    RETURN false;
  END IF;
  IF cardinality(dk) > 0 THEN
    DELETE FROM {kv} WHERE key = ANY(dk);
  END IF;
  INSERT INTO {kv} (key, value) SELECT * FROM unnest(pk, pv)
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value;
  RETURN true;
END
$body$
"""
SQL_WRITE = "SELECT {fn}(%s::int8[], %s::text[], %s::bytea[], %s::text[], %s::text[], %s::bytea[])"
# Several batches in one transaction (group commit). Batch i owns the slices of the
# condition, delete and put arrays that end at c_end[i], d_end[i] and p_end[i]. Its
# conditions are checked, after every lock is granted, against what the earlier
# batches of the group left; if one fails, the batch writes nothing.
GROUP_FUNCTION = "pyweft_write_group_v1"
SQL_CREATE_GROUP = """
CREATE FUNCTION {group_fn}(lock_ids int8[], c_end int4[], ck text[], cv bytea[],
                     d_end int4[], dk text[], p_end int4[], pk text[], pv bytea[])
RETURNS boolean[] LANGUAGE plpgsql VOLATILE AS $body$
DECLARE
  held boolean[] := '{{}}';
  c0 int4 := 0;
  d0 int4 := 0;
  p0 int4 := 0;
BEGIN
  PERFORM pg_advisory_xact_lock(id) FROM unnest(lock_ids) AS id;
  FOR i IN 1 .. cardinality(c_end) LOOP
    -- Each statement takes a fresh snapshot: it sees every lock holder's commit and
    -- the writes of this group's earlier batches. NULL expected: absent.
    IF c_end[i] > c0 AND EXISTS (
        SELECT FROM unnest(ck[c0 + 1 : c_end[i]], cv[c0 + 1 : c_end[i]]) AS c(key, value)
        LEFT JOIN {kv} AS kv USING (key) WHERE kv.value IS DISTINCT FROM c.value) THEN
      held := held || false;
    ELSE
      held := held || true;
      IF d_end[i] > d0 THEN
        DELETE FROM {kv} WHERE key = ANY(dk[d0 + 1 : d_end[i]]);
      END IF;
      IF p_end[i] > p0 THEN
        INSERT INTO {kv} (key, value)
          SELECT * FROM unnest(pk[p0 + 1 : p_end[i]], pv[p0 + 1 : p_end[i]])
          ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value;
      END IF;
    END IF;
    c0 := c_end[i];
    d0 := d_end[i];
    p0 := p_end[i];
  END LOOP;
  RETURN held;
END
$body$
"""
SQL_WRITE_GROUP = (
    "SELECT {group_fn}(%s::int8[], %s::int4[], %s::text[], %s::bytea[], %s::int4[], %s::text[], "
    "%s::int4[], %s::text[], %s::bytea[])"
)
# A group whose batches share no key (the usual case: the batches of different runs) is
# written set-wise: every condition checked in one statement, then one delete and one
# insert for the batches that held. With no key in two batches, no batch can see another's
# writes, so this is the same as checking and writing them one after another. Batch i
# owns the elements whose batch number (cb, db, pb) is i; there are n batches.
DISJOINT_GROUP_FUNCTION = "pyweft_write_disjoint_v1"
SQL_CREATE_DISJOINT = """
CREATE FUNCTION {disjoint_fn}(lock_ids int8[], n int4, cb int4[], ck text[], cv bytea[],
                        db int4[], dk text[], pb int4[], pk text[], pv bytea[])
RETURNS boolean[] LANGUAGE plpgsql VOLATILE AS $body$
DECLARE
  failed int4[];
BEGIN
  PERFORM pg_advisory_xact_lock(id) FROM unnest(lock_ids) AS id;
  -- A fresh snapshot, taken now that every key is locked. NULL expected: absent.
  failed := ARRAY(SELECT DISTINCT c.b FROM unnest(cb, ck, cv) AS c(b, key, value)
                  LEFT JOIN {kv} AS kv USING (key) WHERE kv.value IS DISTINCT FROM c.value);
  IF cardinality(dk) > 0 THEN
    DELETE FROM {kv} WHERE key = ANY(ARRAY(
      SELECT d.key FROM unnest(db, dk) AS d(b, key) WHERE d.b <> ALL(failed)));
  END IF;
  IF cardinality(pk) > 0 THEN
    INSERT INTO {kv} (key, value)
      SELECT p.key, p.value FROM unnest(pb, pk, pv) AS p(b, key, value)
      WHERE p.b <> ALL(failed)
      ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value;
  END IF;
  RETURN ARRAY(SELECT i <> ALL(failed) FROM generate_series(1, n) AS i ORDER BY i);
END
$body$
"""
SQL_WRITE_DISJOINT = (
    "SELECT {disjoint_fn}(%s::int8[], %s::int4, %s::int4[], %s::text[], %s::bytea[], "
    "%s::int4[], %s::text[], %s::int4[], %s::text[], %s::bytea[])"
)
# take(): the batches a taker planned from the rows it holds (FOR UPDATE SKIP LOCKED), in
# the same transaction. Batch i owns lock_ids up to l_end[i] (and the other slices as in
# the group function). Its locks are only *tried*: a batch whose key another writer holds
# is refused instead of waited for, since the taker already holds row locks that writer
# may be waiting for (waiting could deadlock).
TRY_GROUP_FUNCTION = "pyweft_try_write_group_v1"
SQL_CREATE_TRY_GROUP = """
CREATE FUNCTION {try_fn}(l_end int4[], lock_ids int8[], c_end int4[], ck text[], cv bytea[],
                     d_end int4[], dk text[], p_end int4[], pk text[], pv bytea[])
RETURNS boolean[] LANGUAGE plpgsql VOLATILE AS $body$
DECLARE
  held boolean[] := '{{}}';
  ok boolean;
  l0 int4 := 0;
  c0 int4 := 0;
  d0 int4 := 0;
  p0 int4 := 0;
BEGIN
  FOR i IN 1 .. cardinality(c_end) LOOP
    SELECT coalesce(bool_and(pg_try_advisory_xact_lock(id)), true) INTO ok
      FROM unnest(lock_ids[l0 + 1 : l_end[i]]) AS id;
    IF ok AND c_end[i] > c0 AND EXISTS (
        SELECT FROM unnest(ck[c0 + 1 : c_end[i]], cv[c0 + 1 : c_end[i]]) AS c(key, value)
        LEFT JOIN {kv} AS kv USING (key) WHERE kv.value IS DISTINCT FROM c.value) THEN
      ok := false;
    END IF;
    IF ok THEN
      IF d_end[i] > d0 THEN
        DELETE FROM {kv} WHERE key = ANY(dk[d0 + 1 : d_end[i]]);
      END IF;
      IF p_end[i] > p0 THEN
        INSERT INTO {kv} (key, value)
          SELECT * FROM unnest(pk[p0 + 1 : p_end[i]], pv[p0 + 1 : p_end[i]])
          ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value;
      END IF;
    END IF;
    held := held || ok;
    l0 := l_end[i];
    c0 := c_end[i];
    d0 := d_end[i];
    p0 := p_end[i];
  END LOOP;
  RETURN held;
END
$body$
"""
SQL_TRY_WRITE_GROUP = (
    "SELECT {try_fn}(%s::int4[], %s::int8[], %s::int4[], %s::text[], %s::bytea[], %s::int4[], "
    "%s::text[], %s::int4[], %s::text[], %s::bytea[])"
)
SQL_TAKE = (
    "SELECT key, value FROM {kv} WHERE key >= %s AND key < %s ORDER BY key LIMIT %s "
    "FOR UPDATE SKIP LOCKED"
)
# The same, with the peeked keys read (not locked) in the same statement, tagged true.
SQL_TAKE_PEEK = (
    "WITH taken AS (SELECT key, value FROM {kv} WHERE key >= %s AND key < %s ORDER BY key "
    "LIMIT %s FOR UPDATE SKIP LOCKED) "
    "SELECT false, key, value FROM taken "
    "UNION ALL SELECT true, key, value FROM {kv} WHERE key = ANY(%s::text[])"
)
SQL_NOTIFY = b"SELECT pg_notify(%s, '')"
# A notification made while writes queue rides with the next group, in its transaction
# (delivered at its commit, so after every write its caller made before): no trip of its own.
NOTIFY_TAIL = ", (SELECT count(pg_notify(c, '')) FROM unnest(%s::text[]) AS c)"
SQL_NOTIFY_MANY = b"SELECT count(pg_notify(c, '')) FROM unnest(%s::text[]) AS c"
SQL_GET = "SELECT value FROM {kv} WHERE key = %s"
SQL_GET_MANY = "SELECT key, value FROM {kv} WHERE key = ANY(%s::text[])"
# Formatted with the lower bound's operator, an upper bound and the order. LIMIT NULL: all.
SQL_SCAN = "SELECT key, value FROM {{kv}} WHERE key {} %s{} ORDER BY key{} LIMIT %s"
# read_many: every read one branch of a UNION ALL, its rows tagged with the read's index.
SQL_GETS_TAGGED = "(SELECT -1, key, value FROM {kv} WHERE key = ANY(%s::text[]))"
SQL_SCAN_TAGGED = (
    "(SELECT %s::int4, key, value FROM {{kv}} WHERE key {} %s{} ORDER BY key{} LIMIT %s)"
)
