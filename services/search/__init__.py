"""Vietnamese full-text search over the inbox and the forum (docs/search.md): the index in
PostgreSQL (repository, terms), the indexer that follows the live feeds (hosted by the flusher)
and the SearchService RPCs (hosted by timeline). The one normalisation of text, used at index
and at query time, is services/domain/search_text.py (the field rules check a query with it)."""
