"""Keeping the inbox bounded (prune, archive, cleanup, capacity), relaying the course events a
writer left in the outbox, and the periodic scheduler that runs them."""
