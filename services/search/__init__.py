"""Vietnamese full-text search over the inbox and the forum (docs/search.md): the one
normalisation (text), the index in PostgreSQL (repository, terms), the indexer that follows the
live feeds (hosted by the flusher) and the SearchService RPCs (hosted by timeline)."""
