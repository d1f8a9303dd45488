"""Tests against real MariaDB, PostgreSQL and Redis servers."""
