#!/bin/sh
# Dump the database to /backups/$BACKUP_NAME.dump (pg_dump custom format: compressed, selective restore).
# Written under a temporary name first, so a crashed backup never looks like a good one.
set -eu
target="/backups/${BACKUP_NAME}.dump"
pg_dump --format=custom --file="${target}.partial" "${PGDATABASE}"
mv "${target}.partial" "${target}"
echo "backup ${BACKUP_NAME} written to ${target}"
