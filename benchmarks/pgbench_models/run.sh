#!/usr/bin/env bash
# SQL-only drain models, pgbench only (no Python in the measured loop). See README.md.
#
#   benchmarks/pgbench_models/run.sh postgresql://postgres@127.0.0.1:55450/postgres
#
# Takes the URL of a running PostgreSQL 15 server (superuser; the database in the URL is
# only used for administration) and starts nothing. It creates databases named pgbm_*:
# one template per schema (filled once: ROWS queued jobs, VACUUM ANALYZE), and for every
# data point a fresh copy of its template, a CHECKPOINT, then
#   pgbench -n -T DURATION -c C -j min(C,2) -D batch=BATCH -f <model>.sql
# One pgbench transaction = one script = one claim of BATCH jobs + their completion
# (two autocommitted statements). jobs/s = tps x BATCH, checked against the rows the
# database shows finished. Server CPU = utime+stime of the postmaster and all its
# children (exited backends through the postmaster's cutime/cstime), read from /proc
# around the pgbench run ("-" when the server's processes are not visible here); WAL
# bytes from pg_stat_wal (server-wide) around the same run.
#
# The Atlas schema comes from the project's own alembic (ATLAS_PYTHON, default the
# worktree's .venv). Knobs (environment): MODELS, CLIENTS, ROUNDS, DURATION (s per point),
# BATCH, ROWS, BASELINE_ROWS, KEEP_TEMPLATES=1 (reuse existing templates), PGBIN, and for
# ablations SETUP_SQL (run in each fresh copy before the CHECKPOINT, e.g. "ALTER TABLE jobs
# DISABLE TRIGGER USER") with LABEL (appended to the model's name in the output).
# One run.sh at a time per server: the copy is always named pgbm_run.
set -euo pipefail

URL=${1:?usage: run.sh postgresql://user@host:port/dbname}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
ATLAS_PYTHON=${ATLAS_PYTHON:-$REPO/.venv/bin/python}
MODELS=${MODELS:-baseline pgqueuer a b1 b2}
CLIENTS=${CLIENTS:-1 16 64}
ROUNDS=${ROUNDS:-2}
SECONDS_PER_RUN=${DURATION:-8}
BATCH=${BATCH:-64}
ROWS=${ROWS:-400000}
BASELINE_ROWS=${BASELINE_ROWS:-1500000}   # the bare UPDATEs outrun ROWS in a few seconds
BASE=${URL%/*}
RUN_DB=pgbm_run

psql_on() { local db=$1; shift; "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 -At "$BASE/$db" "$@"; }
admin() { psql_on "${URL##*/}" -c "$1"; }
log() { echo "[pgbm] $*" >&2; }

template_of() {
    case $1 in
        baseline) echo pgbm_tpl_baseline ;;
        pgqueuer) echo pgbm_tpl_pgqueuer ;;
        a) echo pgbm_tpl_atlas ;;
        b1 | b2) echo pgbm_tpl_narrow ;;
        *) echo "unknown model $1" >&2; exit 2 ;;
    esac
}
# Model A is the product's own SQL, rendered from the code for this run.
MODEL_A=$(mktemp --suffix=.sql)
trap 'rm -f "$MODEL_A"' EXIT
(cd "$REPO" && "$ATLAS_PYTHON" -m benchmarks.pgbench_models.model_a) > "$MODEL_A"
script_of() {
    case $1 in
        baseline | pgqueuer) echo "$HERE/$1.sql" ;;
        a) echo "$MODEL_A" ;;
        *) echo "$HERE/model_$1.sql" ;;
    esac
}
# "finished|left" for a model: jobs the database records as finished, and queued jobs left.
counts_of() {
    local q
    case $1 in
        baseline) q="SELECT (SELECT count(*) FROM jobs WHERE state = 'done') || '|' || (SELECT count(*) FROM jobs WHERE state = 'queued')" ;;
        pgqueuer) q="SELECT (SELECT count(*) FROM pgqueuer_log WHERE status = 'successful') || '|' || (SELECT count(*) FROM pgqueuer WHERE status = 'queued')" ;;
        a) q="SELECT (SELECT count(*) FROM jobs WHERE state = 'succeeded') || '|' || (SELECT count(*) FROM jobs WHERE state = 'queued')" ;;
        b1) q="SELECT (SELECT count(*) FROM jobs WHERE state = 'succeeded') || '|' || (SELECT count(*) FROM live_jobs WHERE state = 'queued')" ;;
        b2) q="SELECT (SELECT count(*) FROM jobs WHERE state = 'succeeded') || '|' || (SELECT count(*) FROM ready_jobs)" ;;
    esac
    psql_on "$RUN_DB" -c "$q"
}
# Every finished Atlas job has its 'publish' history row (and, in model A, its ended
# attempt): "ok" or what differs.
trail_of() {
    local q
    case $1 in
        a) q="SELECT CASE WHEN (SELECT count(*) FROM job_history WHERE transition = 'publish') = (SELECT count(*) FROM jobs WHERE state = 'succeeded') AND (SELECT count(*) FROM attempts WHERE outcome = 'succeeded') = (SELECT count(*) FROM jobs WHERE state = 'succeeded') THEN 'ok' ELSE 'MISMATCH' END" ;;
        b1 | b2) q="SELECT CASE WHEN (SELECT count(*) FROM job_history WHERE transition = 'publish') = (SELECT count(*) FROM jobs WHERE state = 'succeeded') THEN 'ok' ELSE 'MISMATCH' END" ;;
        *) echo ok; return ;;
    esac
    psql_on "$RUN_DB" -c "$q"
}

build_templates() {
    local needed=() m t
    for m in $MODELS; do
        t=$(template_of "$m")
        [[ " ${needed[*]-} " == *" $t "* ]] || needed+=("$t")
    done
    [[ " ${needed[*]} " == *" pgbm_tpl_narrow "* && " ${needed[*]} " != *" pgbm_tpl_atlas "* ]] \
        && needed=(pgbm_tpl_atlas "${needed[@]}")
    for t in "${needed[@]}"; do
        if [ "${KEEP_TEMPLATES:-0}" = 1 ] \
            && [ "$(admin "SELECT count(*) FROM pg_database WHERE datname = '$t'")" = 1 ]; then
            log "reusing $t"
            continue
        fi
        log "building $t ($ROWS jobs)"
        admin "DROP DATABASE IF EXISTS $t WITH (FORCE)"
        case $t in
            pgbm_tpl_baseline)
                admin "CREATE DATABASE $t"
                psql_on "$t" -v nrows="$BASELINE_ROWS" -f "$HERE/schema_baseline.sql" ;;
            pgbm_tpl_pgqueuer)
                admin "CREATE DATABASE $t"
                psql_on "$t" -v nrows="$ROWS" -f "$HERE/schema_pgqueuer.sql" ;;
            pgbm_tpl_atlas)
                admin "CREATE DATABASE $t"
                (cd "$REPO" && PYTHONPATH="$REPO" "$ATLAS_PYTHON" -c \
                    'import sys; from atlas_jobs._app.db.engine import normalize_url; from benchmarks.peer_adapter import migrate; migrate(normalize_url(sys.argv[1]))' \
                    "$BASE/$t" >&2)
                psql_on "$t" -v nrows="$ROWS" -f "$HERE/prefill_atlas.sql" ;;
            pgbm_tpl_narrow)
                admin "CREATE DATABASE $t TEMPLATE pgbm_tpl_atlas STRATEGY FILE_COPY"
                psql_on "$t" -f "$HERE/schema_narrow.sql" ;;
        esac
    done
}

POSTMASTER=""
# The postmaster is the parent of the checkpointer (a long-lived child listed in
# pg_stat_activity); empty when the server runs elsewhere.
find_postmaster() {
    local child
    child=$(admin "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'")
    if [ -r "/proc/$child/stat" ]; then
        POSTMASTER=$(sed 's/^.*) //' "/proc/$child/stat" | awk '{print $2}')
    fi
}
# utime+stime (clock ticks) of the postmaster, its reaped children and its live children.
server_ticks() {
    [ -n "$POSTMASTER" ] || { echo -; return; }
    # one line per process: "pid (comm) state ppid ... utime stime cutime cstime ..."
    { cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v pm="$POSTMASTER" '
        {
            pid = $1; line = $0; sub(/^.*\) /, "", line); split(line, f, " ")
            if (pid == pm) t += f[12] + f[13] + f[14] + f[15]
            else if (f[2] == pm) t += f[12] + f[13]
        }
        END { print t + 0 }'
}

one_point() {
    local round=$1 model=$2 c=$3 tpl out tps txns failed counts finished left before after wal0 wal1
    tpl=$(template_of "$model")
    admin "DROP DATABASE IF EXISTS $RUN_DB WITH (FORCE)"
    admin "CREATE DATABASE $RUN_DB TEMPLATE $tpl STRATEGY FILE_COPY"
    [ -z "${SETUP_SQL:-}" ] || psql_on "$RUN_DB" -c "$SETUP_SQL"
    admin "CHECKPOINT"
    local load
    load=$(cut -d' ' -f1 /proc/loadavg)
    before=$(server_ticks)
    wal0=$(admin "SELECT wal_bytes FROM pg_stat_wal")
    out=$("$PGBIN/pgbench" -n -T "$SECONDS_PER_RUN" -c "$c" -j $((c < 2 ? c : 2)) \
        -D batch="$BATCH" -f "$(script_of "$model")" "$BASE/$RUN_DB" 2>&1) || true
    sleep 0.3   # let the postmaster reap the exited backends (their CPU -> cutime)
    after=$(server_ticks)
    wal1=$(admin "SELECT wal_bytes FROM pg_stat_wal")
    tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' <<<"$out")
    txns=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
    failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' <<<"$out")
    counts=$(counts_of "$model")
    finished=${counts%|*}
    left=${counts#*|}
    local trail verified=yes cpu_s=- cpu_ms=-
    trail=$(trail_of "$model")
    if [ -z "$tps" ] || [ "${failed:-1}" != 0 ] || [ "$left" -le 0 ] || [ "$trail" != ok ] \
        || [ $(( (finished - txns * BATCH) < 0 ? txns * BATCH - finished : finished - txns * BATCH )) -gt $((c * BATCH)) ]; then
        verified=NO
        echo "$out" >&2
    fi
    if [ "$before" != - ]; then
        cpu_s=$(awk -v a="$before" -v b="$after" -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "%.2f", (b-a)/hz}')
        cpu_ms=$(awk -v s="$cpu_s" -v n="$finished" 'BEGIN{printf "%.4f", n ? s*1000/n : 0}')
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$model${LABEL:-}" "$c" \
        "$(awk -v t="${tps:-0}" -v b="$BATCH" 'BEGIN{printf "%.0f", t*b}')" \
        "$finished" "$left" "$cpu_s" "$cpu_ms" \
        "$(awk -v a="$wal0" -v b="$wal1" -v n="$finished" 'BEGIN{printf "%.0f", n ? (b-a)/n : 0}')" \
        "$load" "$verified" "$(date -u +%H:%M:%S)"
}

log "server: $("$PGBIN/psql" -X -At "$URL" -c 'SHOW server_version')," \
    "batch $BATCH, $SECONDS_PER_RUN s per point, $ROWS jobs prefilled, models: $MODELS"
build_templates
find_postmaster
log "postmaster pid: ${POSTMASTER:-not visible (server CPU not measured)}"
printf 'round\tmodel\tclients\tjobs_per_s\tfinished_in_db\tqueued_left\tserver_cpu_s\tserver_cpu_ms_per_job\twal_bytes_per_job\tload1\tverified\tat\n'
for round in $(seq 1 "$ROUNDS"); do
    for c in $CLIENTS; do
        for model in $MODELS; do
            one_point "$round" "$model" "$c"
        done
    done
done
admin "DROP DATABASE IF EXISTS $RUN_DB WITH (FORCE)"
