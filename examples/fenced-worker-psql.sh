#!/bin/sh
# A worker that writes to PostgreSQL through leaderd's fence
# (docs/fencing.md), as leaderd's child:
#
#   WORKER_DATABASE_URL=postgres://... leaderd run --key jobs ... -- examples/fenced-worker-psql.sh
#
# Every second, one transaction: the fence check first, with the term's
# token, then the write. A deposed term's write is refused by the database
# (SQLSTATE LDF01); the worker then stops, as a deposed worker must.
# Needs psql ($PSQL, default psql), the fence installed (fence/postgres.sql)
# and a table results (term bigint, what text).
set -eu
: "${WORKER_DATABASE_URL:?set WORKER_DATABASE_URL to the database the work writes to}"
: "${LEADERD_FENCING_TOKEN:?run me as the child of leaderd run}"
psql=${PSQL:-psql}
key=${LEADERD_FENCE_KEY:-${LEADERD_KEY:-jobs}}
id=${LEADERD_ID:-worker}
job=0
trap 'echo "worker $id: stopping after $job jobs"; exit 0' TERM INT
while :; do
    job=$((job + 1))
    if out=$("$psql" "$WORKER_DATABASE_URL" -X -q -v ON_ERROR_STOP=1 \
        -v key="$key" -v token="$LEADERD_FENCING_TOKEN" -v what="job $job by $id" 2>&1 <<'SQL'
BEGIN;
SELECT leaderd_fence_check(:'key', :'token');
INSERT INTO results (term, what) VALUES (:'token', :'what');
COMMIT;
SQL
    ); then
        echo "worker $id: job $job stored under fencing token $LEADERD_FENCING_TOKEN"
    else
        case $out in
        *"leaderd fence: fencing token"*)
            echo "worker $id: job $job REFUSED under fencing token $LEADERD_FENCING_TOKEN: $out" >&2
            exit 1
            ;;
        *) echo "worker $id: job $job failed: $out" >&2 ;;
        esac
    fi
    # In the background, so a SIGTERM is handled at once.
    sleep 1 &
    wait $! || true
done
