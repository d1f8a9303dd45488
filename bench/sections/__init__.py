"""Each bench section: run its measurements, turn them into results with stable ids and notes
that say the target and where the run stands against it. One module a section (ingest and prune
together, the read paths together), beside the options they take and the table they share."""

from __future__ import annotations

from bench.sections.assignment import assignment_section
from bench.sections.cluster import cluster_section
from bench.sections.gateway import gateway_section
from bench.sections.ingest import ingest_section, prune_section
from bench.sections.likes import likes_section
from bench.sections.live import live_section
from bench.sections.options import Options
from bench.sections.outbound import outbound_section
from bench.sections.reads import forum_section, scaling_section, timeline_section
from bench.sections.search import search_section
from bench.sections.table import prepare_data_set

__all__ = [
    "Options",
    "assignment_section",
    "cluster_section",
    "forum_section",
    "gateway_section",
    "ingest_section",
    "likes_section",
    "live_section",
    "outbound_section",
    "prepare_data_set",
    "prune_section",
    "scaling_section",
    "search_section",
    "timeline_section",
]
