"""The listener stand-in: a stand-in for the Zalo listener, for development and tests only.

The real listener holds each Zalo account's session outside agora and is not part of this
repository. This stand-in plays its part of the outbound contract (docs/outbound.md) against a
running ingest: it holds the send leases of its accounts (ListenerService.Listen), "sends" each
order by appending it to its sent log (what Zalo would have received: the double-send
accounting counts its lines), forwards the echo of the sent message (IngestMessages, with the
order's cli_msg_id), reports the outcome (ReportOutcome), and later the customer's delivered and
seen (IngestReceipts). It can be told to fail orders (retryable, permanent, rate-limited) and to
die mid-send, and, as a negative control, to ignore `possibly_sent`.

python -m tools.listener_standin --help
"""
