"""Runtime shared by every service: settings, telemetry, gRPC bootstrap, datastore clients."""
