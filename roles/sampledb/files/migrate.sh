#!/bin/sh
# Runs with the NEW version's image before the StatefulSet is rolled to it.
# This example's migration is a safety dump made with the new pg_dump (a newer pg_dump reads older
# servers), so the upgrade can be undone by restoring it into a new SampleDB (spec.restoreFrom).
# Real migrations (pg_upgrade of the data directory, extension updates) belong here too.
set -eu
target="/backups/${BACKUP_NAME}.dump"
pg_dump --format=custom --file="${target}.partial" "${PGDATABASE}"
mv "${target}.partial" "${target}"
echo "pre-upgrade dump ${BACKUP_NAME} written; ready for ${TARGET_VERSION}"
