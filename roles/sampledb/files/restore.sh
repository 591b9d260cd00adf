#!/bin/sh
# Load /backups/$BACKUP_NAME.dump into the running database, replacing the objects it contains.
set -eu
source="/backups/${BACKUP_NAME}.dump"
if [ ! -f "${source}" ]; then
  echo "no backup named ${BACKUP_NAME} (${source} does not exist); available backups:" >&2
  ls -1 /backups >&2 || true
  exit 1
fi
pg_restore --clean --if-exists --no-owner --exit-on-error --dbname="${PGDATABASE}" "${source}"
echo "restored ${BACKUP_NAME} into ${PGDATABASE}"
