#!/usr/bin/env bash
# Run the suite against a throwaway cluster of a system PostgreSQL (default: 15, from the
# Debian packages), to prove "any PostgreSQL 15+" beside the embedded 18.
#   scripts/test-on-postgres.sh [MAJOR] [pytest args...]
set -euo pipefail
major="${1:-15}"; shift || true
bin="/usr/lib/postgresql/${major}/bin"
[ -x "$bin/postgres" ] || { echo "PostgreSQL ${major} binaries not found in $bin"; exit 2; }
root="$(mktemp -d /tmp/atlas-pg${major}.XXXXXX)"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
password="$(python3 -c 'import secrets; print(secrets.token_urlsafe(24))')"
(umask 077; printf '%s\n' "$password" > "$root/pw")
as_pg=()
if [ "$(id -u)" = 0 ]; then chown postgres "$root" "$root/pw"; as_pg=(runuser -u postgres --); fi
# Never trust: SCRAM password authentication, as the embedded server does.
"${as_pg[@]}" "$bin/initdb" -D "$root/data" --auth=scram-sha-256 --pwfile="$root/pw" \
    -U postgres -E UTF8 --locale=C.UTF-8 >/dev/null
rm -f "$root/pw"
"${as_pg[@]}" "$bin/pg_ctl" -D "$root/data" -l "$root/log" -w \
    -o "-h 127.0.0.1 -p $port -k $root -c max_connections=300" start >/dev/null
trap '"${as_pg[@]}" "$bin/pg_ctl" -D "$root/data" -m fast -w stop >/dev/null; rm -rf "$root"' EXIT
DATABASE_URL="postgresql://postgres:${password}@127.0.0.1:${port}/postgres" .venv/bin/python -m pytest "$@"
