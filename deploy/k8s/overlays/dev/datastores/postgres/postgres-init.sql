-- DEVELOPMENT DEFAULTS (dev overlay only). One login role per service; the migration Job grants
-- them the forum tables (migrations/grants/postgres.sql).
CREATE ROLE agora_migrator LOGIN PASSWORD 'dev-migrator-password';
CREATE ROLE agora_ingest LOGIN PASSWORD 'dev-ingest-password';
CREATE ROLE agora_timeline LOGIN PASSWORD 'dev-timeline-password';
CREATE ROLE agora_likes LOGIN PASSWORD 'dev-likes-password';
CREATE ROLE agora_likes_writer LOGIN PASSWORD 'dev-likes-writer-password';
CREATE ROLE agora_flusher LOGIN PASSWORD 'dev-flusher-password';
CREATE DATABASE agora OWNER agora_migrator;
-- What each statement costs, to decide what to cache (docs/performance.md): the operator reads it
-- through the migrator.
GRANT pg_read_all_stats TO agora_migrator;
\connect agora
CREATE EXTENSION pg_stat_statements;
