"""The trace sink's browser view: recent traces, and per trace a waterfall with span details.

A stdlib HTTP server in a thread of the sink's process (tools/trace_sink.py `--http-port`, default
16686 like Jaeger's UI), bound to 127.0.0.1. It serves three static files (static/: HTML, one
script, one stylesheet; no inline script, a strict Content-Security-Policy) and two JSON
endpoints read from the sink's SQLite database:

  GET /api/traces?limit=50&service=gateway   recent traces, newest first
  GET /api/traces/<trace id>                 one trace's spans in tree order, with attributes
"""

from tools.trace_view.queries import recent_traces, trace_detail
from tools.trace_view.server import DEFAULT_PORT, TraceViewServer, start, stop

__all__ = ["DEFAULT_PORT", "TraceViewServer", "recent_traces", "start", "stop", "trace_detail"]
