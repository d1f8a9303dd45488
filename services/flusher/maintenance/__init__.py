"""Keeping the inbox bounded: prune, archive, cleanup, capacity, and the periodic scheduler."""
