"""gateway: the HTTP/JSON API for browsers and HTTP-only forwarders, in front of gRPC services."""
