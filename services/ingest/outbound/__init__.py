"""Replies sent from agora: OutboundService (send orders) and ListenerService (the listeners that
send them), over zalo_outbound_messages and zalo_listener_leases (docs/outbound.md)."""
