#!/bin/sh
# Patroni's post_bootstrap: run once, on the node that initialised the cluster, with the
# superuser's connection URL as its argument (and PGPASSFILE set). Creates the single server's
# roles and database; the standbys receive them by replication.
set -eu
psql "$1" -v ON_ERROR_STOP=1 -f /etc/postgres-init/postgres-init.sql
