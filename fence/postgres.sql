-- leaderd's guard for PostgreSQL: the resource refuses a write from a
-- deposed leader. Install once per database (psql -f fence/postgres.sql,
-- or `leaderd fence install postgres --apply`; docs/fencing.md):
--
--   leaderd_fence                      one row per election key: the
--                                      newest fencing token that wrote
--   leaderd_fence_check(key, token)    the first statement of every
--                                      transaction of the worker
--   leaderd_fence_trigger(key)         for tables whose writers might
--                                      forget the call: reads the token
--                                      from SET LOCAL leaderd.fencing_token
--
-- The check takes the key's row lock and holds it to the end of the
-- transaction, so two terms' transactions are ordered by it: a token older
-- than one that already wrote is refused with SQLSTATE LDF01, naming both;
-- a newer one raises the fence; the same one passes. Idempotent: running
-- this file again changes nothing but the functions' bodies.

CREATE TABLE IF NOT EXISTS leaderd_fence (
    key        text        PRIMARY KEY,
    token      bigint      NOT NULL CHECK (token >= 0),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

COMMENT ON TABLE leaderd_fence IS
    'leaderd: the newest fencing token that wrote, per election key (docs/fencing.md)';

-- Returns the token the fence held before this call (0 for a new key).
CREATE OR REPLACE FUNCTION leaderd_fence_check(p_key text, p_token bigint)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    seen bigint;
BEGIN
    IF p_key IS NULL OR p_token IS NULL OR p_token < 0 THEN
        RAISE EXCEPTION 'leaderd fence: no fencing token for key %', coalesce(p_key, '(null)')
            USING ERRCODE = 'LDF02',
                  HINT = 'pass the key and LEADERD_FENCING_TOKEN, a non-negative integer, to leaderd_fence_check';
    END IF;
    -- The row first, so the lock below always finds one; a concurrent
    -- first insert of the same key waits here, then finds the row.
    INSERT INTO leaderd_fence (key, token) VALUES (p_key, 0)
        ON CONFLICT (key) DO NOTHING;
    SELECT token INTO seen FROM leaderd_fence WHERE key = p_key FOR UPDATE;
    IF p_token < seen THEN
        RAISE EXCEPTION 'leaderd fence: fencing token % is older than token % that already wrote for key %', p_token, seen, p_key
            USING ERRCODE = 'LDF01',
                  DETAIL = format('key %s, this token %s, the fence %s', p_key, p_token, seen),
                  HINT = 'this worker was deposed: a later leader wrote with a newer token. Roll back and stop; do not retry with this token';
    END IF;
    IF p_token > seen THEN
        UPDATE leaderd_fence SET token = p_token, updated_at = clock_timestamp() WHERE key = p_key;
    END IF;
    RETURN seen;
END
$$;

-- A statement-level trigger: CREATE TRIGGER leaderd_fence BEFORE INSERT OR
-- UPDATE OR DELETE OR TRUNCATE ON my_table FOR EACH STATEMENT EXECUTE
-- FUNCTION leaderd_fence_trigger('jobs'); the worker runs SET LOCAL
-- leaderd.fencing_token = '<LEADERD_FENCING_TOKEN>' in each transaction
-- (transaction-local, so it works behind PgBouncer in transaction mode).
CREATE OR REPLACE FUNCTION leaderd_fence_trigger()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    given text := current_setting('leaderd.fencing_token', true);
BEGIN
    IF TG_NARGS <> 1 THEN
        RAISE EXCEPTION 'leaderd fence: the trigger on % needs the election key as its one argument', TG_TABLE_NAME
            USING ERRCODE = 'LDF02';
    END IF;
    IF given IS NULL OR given !~ '^[0-9]+$' THEN
        RAISE EXCEPTION 'leaderd fence: % on % without a fencing token', TG_OP, TG_TABLE_NAME
            USING ERRCODE = 'LDF02',
                  HINT = 'run SET LOCAL leaderd.fencing_token = ''<LEADERD_FENCING_TOKEN>'' first in the transaction';
    END IF;
    PERFORM leaderd_fence_check(TG_ARGV[0], given::bigint);
    RETURN NULL;
END
$$;
