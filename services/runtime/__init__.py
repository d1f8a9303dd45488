"""Runtime shared by every service, plumbing only: settings, the process and its workers, the gRPC
server and clients (mTLS, access and field-rule enforcement, error mapping), end-user tokens,
datastore clients (MySQL, PostgreSQL, Redis and its Lua loader), readiness, loops, telemetry."""
