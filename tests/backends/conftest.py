"""Fixtures shared by the backend tests: the test Redis (see ``redis_fixtures``)."""

from redis_fixtures import prefix, redis_url  # noqa: F401 - fixtures
